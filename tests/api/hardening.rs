//! Issue 23: bodies an attacker or a confused provider could send. Every verified event ends in
//! a stored 2xx answer (never a 5xx loop), an ambiguous body never moves money, and an amount
//! of any size is judged by its value.

use crate::support::{ACME, MERCHANT, STRIPE, TestApp, answer, spawn_app};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// (status, outcome, reason) of a delivery, with its ack.
async fn outcome_of(app: &TestApp, provider: &str, id: &str, body: &str) -> (u16, String, String) {
    let (status, _, ack) = answer(app.deliver(provider, id, body).await).await;
    assert!(status < 500, "{provider} {body:?} answered {status}: {ack}");
    if status != 200 {
        return (status, json(&ack)["error"].as_str().unwrap().into(), ack);
    }
    let ack = json(&ack);
    let text = |key: &str| ack[key].as_str().unwrap_or("-").to_owned();
    (status, text("outcome"), text("reason"))
}

/// An answer: status, then outcome and reason (or the error code of a 4xx).
type Expected = (u16, &'static str, &'static str);

#[tokio::test]
async fn a_nul_or_unreadable_text_in_any_field_is_a_stored_answer_never_a_503() {
    let app = spawn_app().await;
    let rejected = (200, "rejected", "invalid_payload");
    let held = (200, "held", "unknown_order");
    // (provider, event id for standard-webhooks, body, answer). Acme is canonical and keys by the
    // webhook-id header; Stripe keys by the body's id.
    let cases: Vec<(&str, &str, String, Expected)> = vec![
        (ACME, "a1", r#"{"type":"payment.succeeded\u0000","data":{"payment_id":"p1","order_id":1,"amount_minor":5,"currency":"USD"}}"#.into(), rejected),
        (ACME, "a2", r#"{"type":"customer.created\u0000","data":{}}"#.into(), rejected),
        (ACME, "a3", r#"{"type":"\u0000"}"#.into(), rejected),
        (ACME, "a4", r#"{"type":"payment.succeeded","data":{"payment_id":"p\u0000","order_id":1,"amount_minor":5,"currency":"USD"}}"#.into(), rejected),
        (ACME, "a5", r#"{"type":"payment.succeeded","data":{"payment_id":"p5","order_id":1,"amount_minor":5,"currency":"US\u0000D"}}"#.into(), rejected),
        (ACME, "a6", r#"{"type":"refund.succeeded","data":{"payment_id":"p6","refund_id":"re\u0000","amount_minor":5,"currency":"USD"}}"#.into(), rejected),
        (ACME, "a7", r#"{"type":"payment.succeeded","data":{"payment_id":"p7","order_id":"1\u0000","amount_minor":5,"currency":"USD"}}"#.into(), held),
        (ACME, "a8", "{\"type\":\"payment.succeeded\0\",\"data\":{}}".into(), rejected),
        (ACME, "a9", r#"{"type":"payment.succeeded\ud800","data":{}}"#.into(), rejected),
        (ACME, "a10", r#"{"type":"payment.failed","data":{"payment_id":"\udc00","order_id":1}}"#.into(), rejected),
        (STRIPE, "", r#"{"id":"s1","type":"payment_intent.succeeded\u0000","data":{"object":{"id":"pi_1","amount_received":5,"currency":"usd"}}}"#.into(), rejected),
        (STRIPE, "", r#"{"id":"s2","type":"payment_intent.succeeded","data":{"object":{"id":"pi\u0000","amount_received":5,"currency":"usd"}}}"#.into(), rejected),
        (STRIPE, "", r#"{"id":"s3","type":"payment_intent.succeeded","data":{"object":{"id":"pi_3","amount_received":5,"currency":"u\u0000sd"}}}"#.into(), rejected),
        (STRIPE, "", r#"{"id":"s4","type":"payment_intent.succeeded","data":{"object":{"id":"pi_4","amount_received":5,"currency":"usd","metadata":{"order_id":"\u0000"}}}}"#.into(), held),
        (STRIPE, "", r#"{"id":"s5","type":"charge.refunded","data":{"object":{"id":"ch_5","payment_intent":"pi\u0000","amount_refunded":5,"currency":"usd"}}}"#.into(), rejected),
        (STRIPE, "", r#"{"id":"s6","type":"charge.dispute.created\u0000","data":{"object":{}}}"#.into(), rejected),
        // No usable event id: nothing to key it by, so a 400 that stores nothing.
        (STRIPE, "", r#"{"id":"s7\u0000","type":"payment_intent.succeeded","data":{"object":{}}}"#.into(), (400, "invalid_payload", "")),
        (STRIPE, "", r#"{"id":"s8\ud800","type":"payment_intent.succeeded","data":{"object":{}}}"#.into(), (400, "invalid_payload", "")),
    ];
    for (provider, id, body, (status_w, outcome_w, reason_w)) in &cases {
        let (status, replayed, first) = answer(app.deliver(provider, id, body).await).await;
        assert_eq!((status, replayed), (*status_w, false), "{body}: {first}");
        let first_json = json(&first);
        if status != 200 {
            assert_eq!(first_json["error"], *outcome_w, "{body}");
            continue;
        }
        assert_eq!(
            (
                first_json["outcome"].as_str(),
                first_json["reason"].as_str()
            ),
            (Some(*outcome_w), Some(*reason_w)),
            "{body}"
        );
        if *outcome_w == "rejected" {
            assert!(
                first_json["detail"].as_str().is_some_and(|d| !d.is_empty()),
                "{first}"
            );
        }
        // Stored: the redelivery is the byte-identical stored answer.
        let (status, replayed, again) = answer(app.deliver(provider, id, body).await).await;
        assert_eq!((status, replayed, &again), (200, true, &first), "{body}");
    }
    let answered = cases.iter().filter(|c| c.3.0 == 200).count() as i64;
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries").await,
        answered,
        "every answered event is in the event log"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        answered
    );
}

#[tokio::test]
async fn a_body_that_repeats_a_field_the_gateway_reads_is_rejected_and_moves_no_money() {
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 1999, "USD").await;
    let data = format!(
        r#""data":{{"payment_id":"pay_1","order_id":{order},"amount_minor":1999,"currency":"USD"}}"#
    );
    let bodies = [
        format!(r#"{{"type":"payment.failed","type":"payment.succeeded",{data}}}"#),
        format!(r#"{{"type":"payment.succeeded",{data},"type":"payment.failed"}}"#),
        format!(
            r#"{{"type":"payment.succeeded","data":{{"payment_id":"pay_2","order_id":{order},"amount_minor":1,"amount_minor":1999,"currency":"USD"}}}}"#
        ),
        format!(r#"{{"type":"payment.succeeded",{data},{data}}}"#),
    ];
    for (n, body) in bodies.iter().enumerate() {
        let id = format!("dup{n}");
        let answer = outcome_of(&app, ACME, &id, body).await;
        assert_eq!(
            answer,
            (200, "rejected".into(), "invalid_payload".into()),
            "{body}"
        );
        // The event log says what the ack says, with a type only where the body is not
        // ambiguous about it (the third body repeats a name inside `data` only).
        let logged_type = if n == 2 { "payment.succeeded" } else { "-" };
        let logged = app
            .db
            .query_one(
                "SELECT coalesce(event_type, '-'), outcome FROM callback_deliveries WHERE event_id = $1",
                &[&id],
            )
            .await
            .unwrap();
        assert_eq!(
            (logged.get::<_, String>(0), logged.get::<_, String>(1)),
            (logged_type.to_owned(), "rejected".to_owned()),
            "{body}"
        );
    }
    let stripe = r#"{"id":"sdup","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount_received":1,"amount_received":1999,"currency":"usd","metadata":{"order_id":"1","order_id":"2"}}}}"#;
    assert_eq!(
        outcome_of(&app, STRIPE, "", stripe).await,
        (200, "rejected".into(), "invalid_payload".into())
    );
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 0);
    assert_eq!(app.order_status(order).await, "pending_payment");
}

#[tokio::test]
async fn integer_amounts_above_ten_to_the_fifteen_are_out_of_range_however_large() {
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 1999, "USD").await;
    let huge = format!("1{}", "0".repeat(400));
    for (n, amount) in [
        "1000000000000001",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "100000000000000000000000000000000000000",
        huge.as_str(),
    ]
    .into_iter()
    .enumerate()
    {
        let capture = format!(
            r#"{{"type":"payment.succeeded","data":{{"payment_id":"pay_{n}","order_id":{order},"amount_minor":{amount},"currency":"USD"}}}}"#
        );
        assert_eq!(
            outcome_of(&app, ACME, &format!("big{n}"), &capture).await,
            (200, "rejected".into(), "amount_out_of_range".into()),
            "{amount}"
        );
        let refund = format!(
            r#"{{"id":"sbig{n}","type":"charge.refunded","data":{{"object":{{"id":"ch_1","payment_intent":"pi_1","amount_refunded":{amount},"currency":"usd"}}}}}}"#
        );
        assert_eq!(
            outcome_of(&app, STRIPE, "", &refund).await,
            (200, "rejected".into(), "amount_out_of_range".into()),
            "{amount}"
        );
    }
    for (n, amount) in [
        "1999.5",
        "1e3",
        "-5",
        "-9223372036854775809",
        "\"1999\"",
        "0",
    ]
    .into_iter()
    .enumerate()
    {
        let capture = format!(
            r#"{{"type":"payment.succeeded","data":{{"payment_id":"pay_{n}","order_id":{order},"amount_minor":{amount},"currency":"USD"}}}}"#
        );
        assert_eq!(
            outcome_of(&app, ACME, &format!("bad{n}"), &capture).await,
            (200, "rejected".into(), "invalid_payload".into()),
            "{amount}"
        );
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 0);
}

/// Posts `body` (any bytes) signed now by `provider`'s first secret.
async fn deliver_bytes(
    app: &TestApp,
    provider: &str,
    id: &str,
    body: &[u8],
) -> (u16, bool, String) {
    let (scheme, secret) = crate::support::sign::scheme_of(provider);
    let headers = crate::support::sign::provider_with(scheme, &[secret])
        .sign(id, body, chrono::Utc::now().timestamp())
        .unwrap()
        .headers;
    let mut request = app
        .client
        .post(app.url(&format!("/v1/callbacks/{provider}")))
        .header("Content-Type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    answer(request.send().await.unwrap()).await
}

#[tokio::test]
async fn a_body_that_is_not_utf8_is_a_stored_answer_never_a_503() {
    let app = spawn_app().await;
    let bodies: [(&str, &str, &[u8]); 3] = [
        (ACME, "u1", b"{\"type\":\"payment.succeeded\xff\",\"data\":{}}"),
        (ACME, "u2", b"{\"type\":\"payment.succeeded\",\"data\":{\"payment_id\":\"p\xc0\x80\",\"order_id\":1,\"amount_minor\":5,\"currency\":\"USD\"}}"),
        (STRIPE, "", b"{\"id\":\"su3\",\"type\":\"payment_intent.succeeded\",\"note\":\"\xed\xa0\x80\",\"data\":{\"object\":{}}}"),
    ];
    for (provider, id, body) in bodies {
        let (status, replayed, first) = deliver_bytes(&app, provider, id, body).await;
        assert!(status < 500, "{body:?}: {status} {first}");
        if status == 200 {
            let ack = json(&first);
            assert_eq!(
                (ack["outcome"].as_str(), ack["reason"].as_str(), replayed),
                (Some("rejected"), Some("invalid_payload"), false),
                "{body:?}"
            );
            let again = deliver_bytes(&app, provider, id, body).await;
            assert_eq!(again, (200, true, first), "{body:?}");
        } else {
            assert_eq!(
                (status, json(&first)["error"].as_str()),
                (400, Some("invalid_payload"))
            );
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 0);
}
