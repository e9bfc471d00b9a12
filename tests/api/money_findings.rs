//! What a read of the asked providers and the partitioned event log found (and the provider
//! simulator found again by itself, docs/simulation.md): money the books got wrong, each
//! through the real binary, with the providers' APIs on a local HTTPS emulator. Each test
//! failed on the commit before its fix (ffcb676); the closing note of the issue says how.

use crate::asked_providers::{
    Asked, braintree_form, gocardless_event, gocardless_payment, mercadopago_payment,
    mollie_payment,
};
use crate::support::{
    ACME, ADMIN_TOKEN, ADYEN, GOCARDLESS, GOCARDLESS_SECRET, MERCADOPAGO, MERCADOPAGO_SECRET,
    MERCHANT, MOLLIE, sign,
};

/// The events `event_id` of `provider` are forgotten by the idempotency records, as the
/// cleaner does days later: the next delivery runs as a first one again.
async fn expire(t: &Asked, provider: &str, event_id: &str) {
    t.db.execute(
        "DELETE FROM idempotency_keys WHERE user_id = $1 AND op = 'payment.callback' AND idem_key = $2",
        &[&MERCHANT, &format!("{provider}:{event_id}")],
    )
    .await
    .unwrap();
}

/// `POST /admin/events/{provider}/{event_id}/replay`: (status, body).
async fn admin_replay(t: &Asked, provider: &str, event_id: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!(
            "{}/admin/events/{provider}/{event_id}/replay",
            t.gateway.address()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The sum of `provider`'s transfers of `kind` through its clearing account, as the amount
/// moved (positive).
async fn moved(t: &Asked, provider: &str, kind: &str) -> i64 {
    t.count(&format!(
        "SELECT coalesce(abs(sum(e.amount_minor)), 0)::bigint FROM ledger_transfers t \
         JOIN ledger_entries e ON e.transfer_id = t.id AND e.account = 'psp_clearing:{provider}' \
         WHERE t.provider = '{provider}' AND t.kind = '{kind}'"
    ))
    .await
}

// ---------------------------------------------------------------------------------------
// 1. A stale state replayed gives no money back.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mercadopago_a_stale_state_replayed_by_an_operator_gives_no_money_back() {
    let t = Asked::start().await;
    let order = t.order(1000, "BRL").await;
    let path = "/v1/payments/3001";
    for (n, status) in ["approved", "in_mediation", "charged_back"]
        .iter()
        .enumerate()
    {
        t.emulator
            .put(path, &mercadopago_payment("3001", status, "10", "0", order));
        let answer = t
            .mercadopago("3001", &format!("req-{n}"), MERCADOPAGO_SECRET)
            .await;
        assert_eq!(answer.status, 200, "{status}: {answer:?}");
    }
    assert_eq!(moved(&t, MERCADOPAGO, "chargeback").await, 1000);
    // Days later the in_mediation event's record is gone, and an operator replays it.
    expire(&t, MERCADOPAGO, "3001:in_mediation").await;
    let (status, body) = admin_replay(&t, MERCADOPAGO, "3001:in_mediation").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        moved(&t, MERCADOPAGO, "chargeback_reversal").await,
        0,
        "Mercado Pago kept the money: no reversal may be posted ({body})"
    );
    assert_eq!(t.clearing(MERCADOPAGO).await, 0);
    // The replay asked the API again: it answered charged_back, today's state.
    let ack: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ack["event_id"], "3001:charged_back", "{body}");
}

#[tokio::test]
async fn mercadopago_a_reimbursed_chargeback_gives_the_money_back_once() {
    let t = Asked::start().await;
    let order = t.order(1000, "BRL").await;
    let path = "/v1/payments/3002";
    t.emulator.put(
        path,
        &mercadopago_payment("3002", "approved", "10", "0", order),
    );
    t.mercadopago("3002", "a", MERCADOPAGO_SECRET).await;
    t.emulator.put(
        path,
        &mercadopago_payment("3002", "charged_back", "10", "0", order),
    );
    t.mercadopago("3002", "b", MERCADOPAGO_SECRET).await;
    let reimbursed = mercadopago_payment("3002", "charged_back", "10", "0", order).replace(
        r#""status_detail":"accredited""#,
        r#""status_detail":"reimbursed""#,
    );
    t.emulator.put(path, &reimbursed);
    let back = t.mercadopago("3002", "c", MERCADOPAGO_SECRET).await;
    assert_eq!(
        back.json()["event_id"],
        "3002:charged_back:reimbursed",
        "{back:?}"
    );
    assert_eq!(moved(&t, MERCADOPAGO, "chargeback_reversal").await, 1000);
    t.mercadopago("3002", "d", MERCADOPAGO_SECRET).await;
    assert_eq!(t.clearing(MERCADOPAGO).await, 1000);
}

// ---------------------------------------------------------------------------------------
// 2. A chargeback after a reversal is a chargeback of its own.
// ---------------------------------------------------------------------------------------

/// Mollie's payment with `chargebacks` embedded as (id, amount, reversed) and `refunds` as
/// (id, amount, status).
fn mollie_listed(
    id: &str,
    charged_back: &str,
    refunded: &str,
    chargebacks: &[(&str, &str, bool)],
    refunds: &[(&str, &str, &str)],
    order: i64,
) -> String {
    let mut payment: serde_json::Value = serde_json::from_str(&mollie_payment(
        id,
        "paid",
        "10.00",
        refunded,
        charged_back,
        order,
    ))
    .unwrap();
    let chargebacks: Vec<serde_json::Value> = chargebacks
        .iter()
        .map(|(cb, amount, reversed)| {
            serde_json::json!({"resource": "chargeback", "id": cb,
                "amount": {"value": amount, "currency": "EUR"}, "paymentId": id,
                "reversedAt": if *reversed { serde_json::json!("2026-12-04T11:00:00+00:00") } else { serde_json::Value::Null }})
        })
        .collect();
    let refunds: Vec<serde_json::Value> = refunds
        .iter()
        .map(|(re, amount, status)| {
            serde_json::json!({"resource": "refund", "id": re,
                "amount": {"value": amount, "currency": "EUR"}, "status": status, "paymentId": id})
        })
        .collect();
    payment["_embedded"] = serde_json::json!({"chargebacks": chargebacks, "refunds": refunds});
    payment.to_string()
}

#[tokio::test]
async fn mollie_a_chargeback_after_a_reversal_is_withdrawn_again() {
    let t = Asked::start().await;
    let order = t.order(1000, "EUR").await;
    let path = "/v2/payments/tr_cb2";
    for (charged_back, chargebacks) in [
        ("0.00", vec![]),
        ("5.00", vec![("chb_1", "5.00", false)]),
        ("0.00", vec![("chb_1", "5.00", true)]),
        (
            "5.00",
            vec![("chb_1", "5.00", true), ("chb_2", "5.00", false)],
        ),
    ] {
        t.emulator.put(
            path,
            &mollie_listed("tr_cb2", charged_back, "0.00", &chargebacks, &[], order),
        );
        let answer = t.mollie("tr_cb2").await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_ne!(
            answer.json()["reason"],
            "already_applied",
            "each state moves money: {answer:?}"
        );
    }
    assert_eq!(
        moved(&t, MOLLIE, "chargeback").await,
        1000,
        "two chargebacks of 5.00"
    );
    assert_eq!(moved(&t, MOLLIE, "chargeback_reversal").await, 500);
    assert_eq!(
        t.clearing(MOLLIE).await,
        500,
        "Mollie holds 5.00 of the 10.00"
    );
}

#[tokio::test]
async fn gocardless_a_payment_charged_back_again_after_a_cancellation_is_withdrawn_twice() {
    let t = Asked::start().await;
    let order = t.order(2500, "GBP").await;
    t.emulator
        .put("/payments/PM500", &gocardless_payment("PM500", 2500, order));
    let on = serde_json::json!({"payment": "PM500"});
    for (id, action) in [
        ("EV500", "confirmed"),
        ("EV501", "charged_back"),
        ("EV502", "chargeback_cancelled"),
        ("EV503", "charged_back"),
    ] {
        let answer = t
            .gocardless(
                &[gocardless_event(id, "payments", action, on.clone())],
                GOCARDLESS_SECRET,
            )
            .await;
        assert_eq!(answer.status, 200, "{action}: {answer:?}");
        assert_eq!(answer.json()["outcome"], "applied", "{action}: {answer:?}");
    }
    assert_eq!(moved(&t, GOCARDLESS, "chargeback").await, 5000);
    assert_eq!(moved(&t, GOCARDLESS, "chargeback_reversal").await, 2500);
    assert_eq!(t.clearing(GOCARDLESS).await, 0);
}

// ---------------------------------------------------------------------------------------
// 3. A refund delivered in two months, then again, answers as any redelivery does.
// ---------------------------------------------------------------------------------------

/// Moves `event_id`'s event-log rows `months` back (its month made first), as if received then.
async fn received_months_ago(t: &Asked, provider: &str, event_id: &str, months: i32) {
    t.db.batch_execute(
        "ALTER TABLE callback_deliveries DETACH PARTITION callback_deliveries_legacy; \
         SELECT callback_deliveries_add_month(m) FROM generate_series( \
             date_trunc('month', now()) - interval '6 months', now(), interval '1 month') m; \
         INSERT INTO callback_deliveries SELECT * FROM callback_deliveries_legacy; \
         DROP TABLE callback_deliveries_legacy;",
    )
    .await
    .ok();
    t.db.execute(
        "UPDATE callback_deliveries SET received_at = received_at - make_interval(months => $1) \
         WHERE provider = $2 AND event_id = $3",
        &[&months, &provider, &event_id],
    )
    .await
    .unwrap();
}

async fn acme(t: &Asked, event_id: &str, body: &str) -> crate::asked_providers::Answer {
    let delivery = sign::delivery_now(ACME, event_id, body);
    t.post(
        ACME,
        "",
        &delivery.headers,
        delivery.content_type,
        delivery.body.as_bytes(),
    )
    .await
}

#[tokio::test]
async fn a_refund_delivered_in_two_months_and_again_is_a_redelivery_never_a_503() {
    let t = Asked::start().await;
    let order = t.order(5000, "USD").await;
    let capture = format!(
        r#"{{"id":"cap_1","type":"payment.succeeded","data":{{"payment_id":"pay_m1","order_id":{order},"amount_minor":5000,"currency":"USD"}}}}"#
    );
    assert_eq!(acme(&t, "cap_1", &capture).await.status, 200);
    // A refund without a refund id: only its event id keeps it from posting twice.
    let refund = r#"{"id":"ref_1","type":"refund.succeeded","data":{"payment_id":"pay_m1","amount_minor":700,"currency":"USD"}}"#;
    assert_eq!(acme(&t, "ref_1", refund).await.json()["outcome"], "applied");
    received_months_ago(&t, ACME, "ref_1", 2).await;
    for _ in 0..3 {
        // Days later, its record gone, the provider sends it again (a row in this month too).
        expire(&t, ACME, "ref_1").await;
        let again = acme(&t, "ref_1", refund).await;
        assert_eq!(again.status, 200, "{again:?}");
        assert_eq!(again.json()["outcome"], "ignored", "{again:?}");
        assert_eq!(again.json()["reason"], "already_applied", "{again:?}");
    }
    assert_eq!(moved(&t, ACME, "refund").await, 700, "posted once");
}

#[tokio::test]
async fn a_refund_delivered_again_after_its_month_was_dropped_posts_nothing_twice() {
    let t = Asked::start().await;
    let order = t.order(5000, "USD").await;
    let capture = format!(
        r#"{{"id":"cap_2","type":"payment.succeeded","data":{{"payment_id":"pay_m2","order_id":{order},"amount_minor":5000,"currency":"USD"}}}}"#
    );
    acme(&t, "cap_2", &capture).await;
    let refund = r#"{"id":"ref_2","type":"refund.succeeded","data":{"payment_id":"pay_m2","amount_minor":900,"currency":"USD"}}"#;
    assert_eq!(acme(&t, "ref_2", refund).await.json()["outcome"], "applied");
    // Its month archived and dropped: the event log no longer has it.
    t.db.execute(
        "DELETE FROM callback_deliveries WHERE event_id = 'ref_2'",
        &[],
    )
    .await
    .unwrap();
    expire(&t, ACME, "ref_2").await;
    let again = acme(&t, "ref_2", refund).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(
        (
            again.json()["outcome"].as_str(),
            again.json()["reason"].as_str()
        ),
        (Some("ignored"), Some("already_applied")),
        "the same refund, not a reused event id: {again:?}"
    );
    assert_eq!(moved(&t, ACME, "refund").await, 900, "posted once");
    assert_eq!(
        t.count("SELECT count(*) FROM callback_deliveries WHERE reason = 'event_id_reused'")
            .await,
        0
    );
}

// ---------------------------------------------------------------------------------------
// 4. Braintree notifications without a subject id.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn braintree_two_reports_of_one_second_are_two_events_never_a_422() {
    let t = Asked::start().await;
    for url in [
        "https://example.test/report/1",
        "https://example.test/report/2",
    ] {
        let form = braintree_form(
            "account_updater_daily_report",
            "2026-12-04T10:00:00Z",
            &format!(
                "<account-updater-daily-report><report-date>2026-12-04</report-date><report-url>{url}</report-url></account-updater-daily-report>"
            ),
        );
        let answer = t.braintree(&form).await;
        assert_eq!(answer.status, 200, "{url}: {answer:?}");
        assert!(!answer.replayed, "{answer:?}");
    }
    assert_eq!(
        t.count(
            "SELECT count(DISTINCT event_id) FROM callback_deliveries WHERE provider = 'braintree'"
        )
        .await,
        2
    );
}

// ---------------------------------------------------------------------------------------
// 5. Refunds the provider gives back.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mollie_a_refund_that_fails_or_is_cancelled_after_it_was_booked_is_given_back() {
    let t = Asked::start().await;
    let order = t.order(1000, "EUR").await;
    let path = "/v2/payments/tr_rf1";
    type Refunds<'a> = Vec<(&'a str, &'a str, &'a str)>;
    let steps: [(&str, Refunds<'_>); 4] = [
        ("0.00", vec![]),
        (
            "6.00",
            vec![("re_1", "4.00", "pending"), ("re_2", "2.00", "queued")],
        ),
        // re_2 cancelled, re_1 refunded.
        (
            "4.00",
            vec![("re_1", "4.00", "refunded"), ("re_2", "2.00", "canceled")],
        ),
        // re_1 failed after it was refunded (the customer's account was closed).
        (
            "0.00",
            vec![("re_1", "4.00", "failed"), ("re_2", "2.00", "canceled")],
        ),
    ];
    for (refunded, refunds) in steps {
        t.emulator.put(
            path,
            &mollie_listed("tr_rf1", "0.00", refunded, &[], &refunds, order),
        );
        let answer = t.mollie("tr_rf1").await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    assert_eq!(moved(&t, MOLLIE, "refund").await, 600);
    assert_eq!(moved(&t, MOLLIE, "refund_reversal").await, 600);
    assert_eq!(
        t.clearing(MOLLIE).await,
        1000,
        "Mollie refunded nothing in the end"
    );
    let status: String =
        t.db.query_one("SELECT status FROM orders WHERE id = $1", &[&order])
            .await
            .unwrap()
            .get(0);
    assert_eq!(status, "paid", "no refund stands");
}

#[tokio::test]
async fn gocardless_a_refund_that_failed_or_came_back_is_given_back() {
    let t = Asked::start().await;
    let order = t.order(2500, "GBP").await;
    t.emulator
        .put("/payments/PM600", &gocardless_payment("PM600", 2500, order));
    for (refund, amount) in [("RF600", 1000), ("RF601", 500)] {
        t.emulator.put(
            &format!("/refunds/{refund}"),
            &format!(
                r#"{{"refunds":{{"id":"{refund}","amount":{amount},"currency":"GBP","links":{{"payment":"PM600","mandate":"MD1"}}}}}}"#
            ),
        );
    }
    let events = [
        (
            "EV600",
            "payments",
            "confirmed",
            serde_json::json!({"payment": "PM600"}),
        ),
        (
            "EV601",
            "refunds",
            "created",
            serde_json::json!({"refund": "RF600"}),
        ),
        (
            "EV602",
            "refunds",
            "created",
            serde_json::json!({"refund": "RF601"}),
        ),
        (
            "EV603",
            "refunds",
            "failed",
            serde_json::json!({"refund": "RF600"}),
        ),
        (
            "EV604",
            "refunds",
            "funds_returned",
            serde_json::json!({"refund": "RF601"}),
        ),
    ];
    for (id, resource, action, links) in events {
        let answer = t
            .gocardless(
                &[gocardless_event(id, resource, action, links)],
                GOCARDLESS_SECRET,
            )
            .await;
        assert_eq!(answer.status, 200, "{action}: {answer:?}");
    }
    assert_eq!(moved(&t, GOCARDLESS, "refund").await, 1500);
    assert_eq!(moved(&t, GOCARDLESS, "refund_reversal").await, 1500);
    assert_eq!(t.clearing(GOCARDLESS).await, 2500);
}

#[tokio::test]
async fn adyen_a_refund_the_scheme_rejected_after_it_was_reported_is_given_back() {
    let t = Asked::start_with(&format!(
        "\n[[providers]]\nname = \"{ADYEN}\"\nscheme = \"adyen\"\nmerchant_id = {MERCHANT}\n\
         secrets = [\"{}\"]\n",
        crate::support::ADYEN_KEY
    ))
    .await;
    let order = t.order(3000, "EUR").await;
    let item = |psp: &str, original: Option<&str>, code: &str, value: i64| {
        let original =
            original.map_or_else(String::new, |o| format!(r#""originalReference":"{o}","#));
        format!(
            r#"{{"live":"false","notificationItems":[{{"NotificationRequestItem":{{"pspReference":"{psp}",{original}"merchantAccountCode":"GatewayTest","merchantReference":"{order}","amount":{{"value":{value},"currency":"EUR"}},"eventCode":"{code}","success":"true","eventDate":"2026-12-04T10:00:00+01:00"}}}}]}}"#
        )
    };
    for (psp, original, code, value) in [
        ("PSPA1", None, "AUTHORISATION", 3000),
        ("REFA1", Some("PSPA1"), "REFUND", 1200),
        ("REFA1", Some("PSPA1"), "REFUND_FAILED", 1200),
    ] {
        let body = item(psp, original, code, value);
        let delivery = sign::delivery_now(ADYEN, "", &body);
        let answer = t
            .post(
                ADYEN,
                "",
                &delivery.headers,
                delivery.content_type,
                delivery.body.as_bytes(),
            )
            .await;
        assert_eq!(answer.status, 200, "{code}: {answer:?}");
    }
    assert_eq!(moved(&t, ADYEN, "refund").await, 1200);
    assert_eq!(moved(&t, ADYEN, "refund_reversal").await, 1200);
    assert_eq!(t.clearing(ADYEN).await, 3000);

    // Finance's reconciliation sees the return as the provider reports it.
    let at = chrono::Utc::now().to_rfc3339();
    let line = |kind: &str, amount: i64| {
        serde_json::json!({"payment_id": "PSPA1", "kind": kind, "amount_minor": amount,
            "currency": "EUR", "at": at})
        .to_string()
    };
    let report = t.gateway.dir.join("adyen.jsonl");
    let lines = [
        line("payment", 3000),
        line("refund", 1200),
        line("refund_reversal", 1200),
    ];
    std::fs::write(&report, lines.join("\n") + "\n").unwrap();
    let out = t.gateway.dir.join("reconciled.json");
    let run = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(t.gateway.dir.join("gateway.toml"))
        .args(["reconcile", "--provider", ADYEN])
        .arg(&report)
        .arg("--report")
        .arg(&out)
        .env("DATABASE_URL", &t.gateway.database_url)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let classes: Vec<(String, String)> = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap().to_owned(),
                i["class"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(classes.len(), 3, "{json}");
    assert!(
        classes.iter().all(|(_, class)| class == "matched"),
        "{json}"
    );
    assert_eq!(json["clean"], true, "{json}");
}

// ---------------------------------------------------------------------------------------
// 6. An id the API did not know (a key of the wrong mode) recovers by replay.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mollie_a_payment_stored_unknown_is_recovered_by_an_operators_replay() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    let first = t.mollie("tr_late1").await;
    assert_eq!(first.json()["reason"], "unknown_resource", "{first:?}");
    // The key is fixed (or the payment now exists in this mode): the API knows it.
    t.emulator.put(
        "/v2/payments/tr_late1",
        &mollie_payment("tr_late1", "paid", "25.00", "0.00", "0.00", order),
    );
    let (status, body) = admin_replay(&t, MOLLIE, "tr_late1:unknown_resource").await;
    assert_eq!(status, 200, "{body}");
    let ack: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ack["outcome"], "applied", "{body}");
    assert_eq!(t.clearing(MOLLIE).await, 2500);
}

// ---------------------------------------------------------------------------------------
// 9. Smaller ones.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mollie_a_redelivery_after_the_merchant_edited_the_metadata_is_a_replay_not_a_422() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    let path = "/v2/payments/tr_meta1";
    t.emulator.put(
        path,
        &mollie_payment("tr_meta1", "paid", "25.00", "0.00", "0.00", order),
    );
    let first = t.mollie("tr_meta1").await;
    assert_eq!(first.json()["outcome"], "applied");
    t.emulator.put(
        path,
        &mollie_payment("tr_meta1", "paid", "25.00", "0.00", "0.00", order + 1000),
    );
    let again = t.mollie("tr_meta1").await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!((again.replayed, &again.body), (true, &first.body));
}

#[tokio::test]
async fn mercadopago_a_notification_whose_query_names_no_payment_is_refused() {
    let t = Asked::start().await;
    let order = t.order(1000, "BRL").await;
    t.emulator.put(
        "/v1/payments/3100",
        &mercadopago_payment("3100", "approved", "10", "0", order),
    );
    // Signed over no id (the query has none); the body names a payment nobody signed for.
    let ts = chrono::Utc::now().timestamp_millis().to_string();
    let manifest = format!("request-id:req-x;ts:{ts};");
    let v1 = hex::encode(ring::hmac::sign(
        &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, MERCADOPAGO_SECRET.as_bytes()),
        manifest.as_bytes(),
    ));
    let body = r#"{"action":"payment.updated","data":{"id":"3100"},"type":"payment"}"#;
    let headers = vec![
        ("x-signature".to_owned(), format!("ts={ts},v1={v1}")),
        ("x-request-id".to_owned(), "req-x".to_owned()),
    ];
    let answer = t
        .post(
            MERCADOPAGO,
            "type=payment",
            &headers,
            "application/json",
            body.as_bytes(),
        )
        .await;
    assert_eq!(answer.status, 401, "{answer:?}");
    assert_eq!(t.emulator.requests("/v1/payments/3100"), 0, "nothing asked");
    assert_eq!(t.clearing(MERCADOPAGO).await, 0);
}

// ---------------------------------------------------------------------------------------
// 7. Answers the gateway cannot use end in a stored answer, never an endless 503.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn an_api_answer_too_large_or_not_a_payment_is_a_stored_rejection_in_attention() {
    let t = Asked::start().await;
    // More than the 64 KiB the gateway reads: the same on every retry.
    let huge = format!(
        r#"{{"resource":"payment","id":"tr_big1","padding":"{}"}}"#,
        "x".repeat(70_000)
    );
    t.emulator.put("/v2/payments/tr_big1", &huge);
    t.emulator
        .put("/v2/payments/tr_html1", "<html>maintenance</html>");
    for id in ["tr_big1", "tr_html1"] {
        let first = t.mollie(id).await;
        assert_eq!(first.status, 200, "{id}: {first:?}");
        assert_eq!(first.json()["outcome"], "rejected", "{first:?}");
        assert_eq!(first.json()["reason"], "unusable_answer", "{first:?}");
        let again = t.mollie(id).await;
        assert_eq!((again.replayed, &again.body), (true, &first.body), "{id}");
    }
    let attention: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/admin/attention", t.gateway.address()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rejected = attention["rejected"].to_string();
    assert!(
        rejected.contains("tr_big1") && rejected.contains("tr_html1"),
        "{attention}"
    );
}

#[tokio::test]
async fn an_operators_replay_moves_the_books_of_the_merchant_the_event_was_stored_for() {
    let mut t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_moved1",
        &mollie_payment("tr_moved1", "paid", "25.00", "0.00", "0.00", order),
    );
    let first = t.mollie("tr_moved1").await;
    assert_eq!(first.json()["outcome"], "applied", "{first:?}");
    let event_id = first.json()["event_id"].as_str().unwrap().to_owned();
    // The provider's name now serves merchant 43; the event was merchant 42's.
    let config = std::fs::read_to_string(t.gateway.dir.join("gateway.toml")).unwrap();
    std::fs::write(
        t.gateway.dir.join("gateway.toml"),
        config.replace("merchant_id = 42", "merchant_id = 43"),
    )
    .unwrap();
    t.gateway.kill_9();
    t.gateway.restart().await;
    expire(&t, MOLLIE, &event_id).await;
    let (status, body) = admin_replay(&t, MOLLIE, &event_id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        t.count("SELECT count(*) FROM ledger_entries WHERE merchant_id = 43")
            .await,
        0,
        "nothing of merchant 42's event reaches merchant 43's books: {body}"
    );
    assert_eq!(t.clearing(MOLLIE).await, 2500);
}

#[tokio::test]
async fn a_merchants_event_detail_shows_its_newest_delivery_when_it_has_rows_in_two_months() {
    let t = Asked::start().await;
    let order = t.order(5000, "USD").await;
    let capture = format!(
        r#"{{"id":"cap_d","type":"payment.succeeded","data":{{"payment_id":"pay_d","order_id":{order},"amount_minor":5000,"currency":"USD"}}}}"#
    );
    acme(&t, "cap_d", &capture).await;
    let refund = r#"{"id":"ref_d","type":"refund.succeeded","data":{"payment_id":"pay_d","amount_minor":100,"currency":"USD"}}"#;
    assert_eq!(acme(&t, "ref_d", refund).await.json()["outcome"], "applied");
    received_months_ago(&t, ACME, "ref_d", 2).await;
    expire(&t, ACME, "ref_d").await;
    assert_eq!(acme(&t, "ref_d", refund).await.json()["outcome"], "ignored");
    let token = {
        use diesel_async::AsyncConnection;
        let mut conn = diesel_async::AsyncPgConnection::establish(&t.gateway.database_url)
            .await
            .unwrap();
        callback_gateway::auth::issue_token(&mut conn, MERCHANT)
            .await
            .unwrap()
    };
    for _ in 0..5 {
        let detail: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/v1/events/{ACME}/ref_d", t.gateway.address()))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(detail["outcome"], "ignored", "{detail}");
    }
}

/// Adds `line` to the `[[providers]]` entry named `name` of the gateway's configuration and
/// restarts it.
async fn configure(t: &mut Asked, name: &str, line: &str) {
    let path = t.gateway.dir.join("gateway.toml");
    let config: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
    let mut config = config;
    let (key, value) = line.split_once(" = ").unwrap();
    for provider in config["providers"].as_array_mut().unwrap() {
        if provider["name"].as_str() == Some(name) {
            provider.as_table_mut().unwrap().insert(
                key.to_owned(),
                toml::Value::String(value.trim_matches('"').to_owned()),
            );
        }
    }
    std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    t.gateway.kill_9();
    t.gateway.restart().await;
}

#[tokio::test]
async fn a_payment_of_another_mollie_profile_or_mode_is_refused_where_the_account_is_named() {
    let mut t = Asked::start().await;
    configure(&mut t, MOLLIE, r#"profile_id = "pfl_ours""#).await;
    configure(&mut t, MOLLIE, r#"mode = "live""#).await;
    let order = t.order(2500, "EUR").await;
    let payment = |id: &str, profile: &str, mode: &str| {
        mollie_payment(id, "paid", "25.00", "0.00", "0.00", order).replace(
            r#""mode":"test""#,
            &format!(r#""mode":"{mode}","profileId":"{profile}""#),
        )
    };
    t.emulator.put(
        "/v2/payments/tr_own1",
        &payment("tr_own1", "pfl_ours", "live"),
    );
    t.emulator.put(
        "/v2/payments/tr_other1",
        &payment("tr_other1", "pfl_theirs", "live"),
    );
    t.emulator.put(
        "/v2/payments/tr_test1",
        &payment("tr_test1", "pfl_ours", "test"),
    );
    assert_eq!(t.mollie("tr_own1").await.json()["outcome"], "applied");
    for id in ["tr_other1", "tr_test1"] {
        let answer = t.mollie(id).await;
        assert_eq!(answer.json()["outcome"], "rejected", "{id}: {answer:?}");
        assert_eq!(
            answer.json()["reason"],
            "unusable_answer",
            "{id}: {answer:?}"
        );
    }
    assert_eq!(
        t.clearing(MOLLIE).await,
        2500,
        "only our profile's live payment"
    );
}

#[tokio::test]
async fn a_payment_of_another_gocardless_creditor_is_refused_and_a_batch_asks_once_per_payment() {
    let mut t = Asked::start().await;
    configure(&mut t, GOCARDLESS, r#"creditor = "CR1""#).await;
    let order = t.order(2500, "GBP").await;
    t.emulator
        .put("/payments/PM700", &gocardless_payment("PM700", 2500, order));
    t.emulator.put(
        "/payments/PM701",
        &gocardless_payment("PM701", 2500, order)
            .replace(r#""creditor":"CR1""#, r#""creditor":"CR9""#),
    );
    let on = |p: &str| serde_json::json!({"payment": p});
    let batch = [
        gocardless_event("EV700", "payments", "confirmed", on("PM700")),
        gocardless_event("EV701", "payments", "paid_out", on("PM700")),
        gocardless_event("EV702", "payments", "confirmed", on("PM701")),
    ];
    let answer = t.gocardless(&batch, GOCARDLESS_SECRET).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        t.emulator.requests("/payments/PM700"),
        1,
        "one fetch for two events"
    );
    assert_eq!(
        t.clearing(GOCARDLESS).await,
        2500,
        "CR9's payment is not ours"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM callback_deliveries WHERE event_id = 'EV702' AND reason = 'unusable_answer'")
            .await,
        1
    );
}
