//! Issue 24: every provider's own signature, event naming, payload mapping and ack, end to end:
//! a signed capture applies and posts once, its redelivery is the byte-identical answer, a
//! refund applies, an unhandled type is acked `ignored`, and a forged delivery (tampered body,
//! wrong key, the scheme's own failure) is refused with nothing written.

use callback_gateway::config::{SchemeName, Settings};
use callback_gateway::providers;

use crate::support::gateway::GatewayProcess;
use crate::support::payloads::{Kind, Payload, payload};
use crate::support::paypal::OTHER_SIGNING_KEY_PEM;
use crate::support::paypal_host;
use crate::support::sign::{provider_with, scheme_of, signed_at, signed_now};
use crate::support::{
    ACME, ADMIN_TOKEN, ADYEN, CHECKOUT, MERCHANT, PADDLE, PAYPAL, RAZORPAY, SQUARE, SQUARE_URL,
    STRIPE, TestApp, all_providers, answer, connect, spawn_app_with,
};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

async fn app() -> TestApp {
    spawn_app_with(&all_providers("")).await
}

/// The ack stored for `provider`'s event `event_id` (for Adyen, the item's own ack).
async fn stored_ack(app: &TestApp, provider: &str, event_id: &str) -> serde_json::Value {
    let response = app
        .admin_get(&format!(
            "/admin/idempotency/{MERCHANT}/payment.callback/{provider}:{event_id}"
        ))
        .await;
    assert_eq!(
        response.status(),
        200,
        "no record for {provider}:{event_id}"
    );
    let record: serde_json::Value = response.json().await.unwrap();
    record["response_body"].clone()
}

/// The answer a first delivery of `event` gets, as the provider sees it: status, replayed,
/// exact bytes; plus its stored ack.
async fn deliver(
    app: &TestApp,
    provider: &str,
    event: &Payload,
) -> (u16, bool, String, Vec<(String, String)>, String) {
    let (headers, body) = signed_now(provider, &event.event_id, &event.body);
    let (status, replayed, text) = answer(app.post_callback(provider, &headers, &body).await).await;
    (status, replayed, text, headers, body)
}

/// The first answer is the provider's ack: `[accepted]` for Adyen, the JSON ack for the others.
fn assert_acked(provider: &str, status: u16, text: &str, event_id: &str) {
    assert_eq!(status, 200, "{provider}: {text}");
    if provider == ADYEN {
        assert_eq!(text, "[accepted]");
    } else {
        assert_eq!(json(text)["event_id"], event_id, "{provider}: {text}");
    }
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.count(sql).await
}

/// Nothing at all was written: the state after a refused delivery.
async fn assert_nothing_written(app: &TestApp, what: &str) {
    assert_eq!(
        count(
            app,
            "SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'"
        )
        .await,
        0,
        "{what}: no payment.callback record may exist"
    );
    for table in [
        "callback_deliveries",
        "ledger_transfers",
        "ledger_entries",
        "payments",
    ] {
        assert_eq!(
            count(app, &format!("SELECT count(*) FROM {table}")).await,
            0,
            "{what}: {table} must stay empty"
        );
    }
}

fn capture(order: i64, amount: i64) -> Kind {
    Kind::Capture {
        order: Some(order),
        amount,
        currency: "USD",
    }
}

async fn a_signed_capture_applies_posts_once_and_its_redelivery_is_the_same_bytes(provider: &str) {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(provider, "1", "pay_1", &capture(order, 2500));
    let (status, replayed, first, headers, body) = deliver(&app, provider, &event).await;
    assert_acked(provider, status, &first, &event.event_id);
    assert!(!replayed);
    let ack = stored_ack(&app, provider, &event.event_id).await;
    assert_eq!(ack["outcome"], "applied", "{provider}: {ack}");
    assert!(ack["transfer_id"].is_i64(), "{provider}: {ack}");
    assert_eq!(app.order_status(order).await, "paid", "{provider}");
    assert_eq!(
        count(
            &app,
            &format!("SELECT sum(amount_minor)::bigint FROM ledger_entries WHERE account = 'psp_clearing:{provider}'")
        )
        .await,
        2500
    );

    let (status, replayed, again) =
        answer(app.post_callback(provider, &headers, &body).await).await;
    assert_eq!((status, replayed), (200, true), "{provider}: {again}");
    assert_eq!(again, first, "{provider}: a replay is the same bytes");
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        1,
        "{provider}"
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM callback_deliveries").await,
        1,
        "{provider}"
    );
    let logged: Vec<u8> = app
        .db
        .query_one("SELECT body FROM callback_deliveries", &[])
        .await
        .unwrap()
        .get(0);
    if provider == ADYEN {
        // The event log keeps the item itself, as its own event.
        let item: serde_json::Value = serde_json::from_slice(&logged).unwrap();
        assert_eq!(item["pspReference"], "pay_1");
    } else {
        assert_eq!(
            logged,
            body.as_bytes(),
            "{provider}: the raw verified body is kept"
        );
    }
}

async fn a_refund_applies(provider: &str) {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let (status, _, text, _, _) = deliver(
        &app,
        provider,
        &payload(provider, "1", "pay_1", &capture(order, 2500)),
    )
    .await;
    assert_eq!(status, 200, "{provider}: {text}");
    let refund = payload(
        provider,
        "2",
        "pay_1",
        &Kind::Refund {
            amount: 1000,
            currency: "USD",
            refund_id: "re_1".into(),
        },
    );
    let (status, _, text, _, _) = deliver(&app, provider, &refund).await;
    assert_acked(provider, status, &text, &refund.event_id);
    let ack = stored_ack(&app, provider, &refund.event_id).await;
    assert_eq!(ack["outcome"], "applied", "{provider}: {ack}");
    assert_eq!(
        app.order_status(order).await,
        "partially_refunded",
        "{provider}"
    );
    assert_eq!(
        count(
            &app,
            &format!("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund' AND provider = '{provider}'")
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &app,
            &format!("SELECT sum(amount_minor)::bigint FROM ledger_entries WHERE account = 'psp_clearing:{provider}'")
        )
        .await,
        1500
    );
}

async fn an_unhandled_type_is_acked_ignored(provider: &str) {
    let app = app().await;
    let event = payload(provider, "9", "pay_9", &Kind::Unhandled);
    let (status, _, text, _, _) = deliver(&app, provider, &event).await;
    assert_acked(provider, status, &text, &event.event_id);
    let ack = stored_ack(&app, provider, &event.event_id).await;
    assert_eq!(
        (ack["outcome"].as_str(), ack["reason"].as_str()),
        (Some("ignored"), Some("unsupported_event_type")),
        "{provider}: {ack}"
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM callback_deliveries").await,
        1
    );
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        0
    );
}

/// Another key of the right shape for `provider`'s scheme.
fn wrong_key(scheme: SchemeName) -> &'static str {
    match scheme {
        SchemeName::Adyen => "00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF",
        // base64 of "not-the-configured-signing-key"
        SchemeName::StandardWebhooks => "whsec_bm90LXRoZS1jb25maWd1cmVkLXNpZ25pbmcta2V5",
        _ => "not-the-configured-signing-key",
    }
}

/// The forged deliveries of `event` (whose body names `payment`) every provider refuses with
/// 401: the body changed after signing, a signature by another key of the right shape, and no
/// signature at all.
fn forgeries(
    provider: &str,
    event: &Payload,
    payment: &str,
) -> [(&'static str, Headers, String); 3] {
    let scheme = if provider == PAYPAL {
        SchemeName::Paypal
    } else {
        scheme_of(provider).0
    };
    let (headers, body) = signed_now(provider, &event.event_id, &event.body);
    let tampered = body.replacen(payment, &format!("{payment}x"), 1);
    assert_ne!(tampered, body);
    let wrong = if provider == PAYPAL {
        // A signature by another key, naming the certificate the allowed host serves.
        let headers = paypal_host::headers(
            OTHER_SIGNING_KEY_PEM,
            &paypal_host::host().cert_url(),
            &event.body,
            chrono::Utc::now(),
        );
        (headers, event.body.clone())
    } else {
        let signed = provider_with(scheme, &[wrong_key(scheme)])
            .sign(
                &event.event_id,
                event.body.as_bytes(),
                chrono::Utc::now().timestamp(),
            )
            .unwrap();
        let body = String::from_utf8(signed.body_or(event.body.as_bytes()).to_vec()).unwrap();
        (signed.headers, body)
    };
    [
        ("tampered", headers, tampered),
        ("wrong key", wrong.0, wrong.1),
        ("unsigned", Vec::new(), event.body.clone()),
    ]
}

type Headers = Vec<(String, String)>;

async fn a_tampered_body_and_a_wrong_key_are_401_and_write_nothing(provider: &str) {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(provider, "1", "pay_1", &capture(order, 2500));
    for (what, headers, body) in forgeries(provider, &event, "pay_1") {
        let (status, _, text) = answer(app.post_callback(provider, &headers, &body).await).await;
        assert_eq!(status, 401, "{provider} {what}: {text}");
        if what != "unsigned" {
            assert_eq!(
                json(&text)["error"],
                "invalid_signature",
                "{provider} {what}: {text}"
            );
        }
    }
    assert_nothing_written(&app, provider).await;
    assert_eq!(app.order_status(order).await, "pending_payment");
}

macro_rules! every_provider {
    ($($module:ident => $provider:expr),* $(,)?) => {$(
        mod $module {
            #[tokio::test]
            async fn a_signed_capture_applies_posts_once_and_its_redelivery_is_the_same_bytes() {
                super::a_signed_capture_applies_posts_once_and_its_redelivery_is_the_same_bytes($provider).await;
            }

            #[tokio::test]
            async fn a_refund_applies() {
                super::a_refund_applies($provider).await;
            }

            #[tokio::test]
            async fn an_unhandled_type_is_acked_ignored() {
                super::an_unhandled_type_is_acked_ignored($provider).await;
            }

            #[tokio::test]
            async fn a_tampered_body_and_a_wrong_key_are_401_and_write_nothing() {
                super::a_tampered_body_and_a_wrong_key_are_401_and_write_nothing($provider).await;
            }
        }
    )*};
}

every_provider! {
    paypal => crate::support::PAYPAL,
    adyen => crate::support::ADYEN,
    square => crate::support::SQUARE,
    razorpay => crate::support::RAZORPAY,
    checkout => crate::support::CHECKOUT,
    paddle => crate::support::PADDLE,
}

// ---------------------------------------------------------------------------------------
// Each scheme's own failure
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_square_signature_over_a_notification_url_one_character_off_is_401() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(SQUARE, "1", "pay_1", &capture(order, 2500));
    for url in [
        format!("{}X", &SQUARE_URL[..SQUARE_URL.len() - 1]),
        format!("{SQUARE_URL}/"),
        SQUARE_URL.replacen("https", "http", 1),
    ] {
        let text = format!(
            "[[providers]]\nname = \"s\"\nscheme = \"square\"\nmerchant_id = 1\nsecrets = [\"{}\"]\nnotification_url = \"{url}\"\n",
            crate::support::SQUARE_KEY
        );
        let settings = Settings::from_toml(&text, &callback_gateway::config::ProcessEnv).unwrap();
        let signed = providers::configure(settings.providers[0].clone())
            .sign(&event.event_id, event.body.as_bytes(), 0)
            .unwrap();
        let (status, _, text) = answer(
            app.post_callback(SQUARE, &signed.headers, &event.body)
                .await,
        )
        .await;
        assert_eq!(status, 401, "{url}: {text}");
    }
    assert_nothing_written(&app, "square").await;
    // The URL as registered verifies.
    let (status, _, text, _, _) = deliver(&app, SQUARE, &event).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn a_paddle_ts_outside_the_tolerance_is_401_and_any_h1_may_match() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(PADDLE, "1", "pay_1", &capture(order, 2500));
    let now = chrono::Utc::now().timestamp();
    // An hour out of the window: a timestamp 301 s ahead comes back inside it when the machine
    // takes seconds between signing and sending. The boundary is paddle.rs's unit test's.
    for at in [now - 3600, now + 3600] {
        let (headers, body) = signed_at(PADDLE, &event.event_id, &event.body, at);
        let (status, _, text) = answer(app.post_callback(PADDLE, &headers, &body).await).await;
        assert_eq!(
            (status, json(&text)["error"].as_str()),
            (401, Some("invalid_signature")),
            "ts {at}: {text}"
        );
    }
    assert_nothing_written(&app, "paddle").await;
    // During a rotation Paddle sends an h1 per secret: the configured one may be the second.
    let (headers, body) = signed_at(PADDLE, &event.event_id, &event.body, now);
    let h1 = headers[0].1.split_once(";h1=").unwrap().1;
    let rotated = vec![(
        "Paddle-Signature".to_owned(),
        format!("ts={now};h1={};h1={h1}", "0".repeat(64)),
    )];
    let (status, _, text) = answer(app.post_callback(PADDLE, &rotated, &body).await).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(json(&text)["outcome"], "applied");
}

#[tokio::test]
async fn a_razorpay_delivery_without_its_event_id_header_is_400_and_stores_nothing() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(RAZORPAY, "1", "pay_1", &capture(order, 2500));
    let (mut headers, body) = signed_now(RAZORPAY, &event.event_id, &event.body);
    headers.retain(|(name, _)| !name.eq_ignore_ascii_case("x-razorpay-event-id"));
    let (status, _, text) = answer(app.post_callback(RAZORPAY, &headers, &body).await).await;
    assert_eq!(
        (status, json(&text)["error"].as_str()),
        (400, Some("invalid_payload")),
        "{text}"
    );
    assert!(
        json(&text)["message"]
            .as_str()
            .unwrap()
            .contains("x-razorpay-event-id"),
        "{text}"
    );
    assert_nothing_written(&app, "razorpay").await;
    // The same delivery with its header is keyed by it.
    let (status, _, text, _, _) = deliver(&app, RAZORPAY, &event).await;
    assert_eq!(
        (status, json(&text)["event_id"].as_str()),
        (200, Some(event.event_id.as_str())),
        "{text}"
    );
}

#[tokio::test]
async fn a_checkout_delivery_names_its_payment_by_reference_and_its_refund_by_action_id() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    deliver(
        &app,
        CHECKOUT,
        &payload(CHECKOUT, "1", "pay_1", &capture(order, 2500)),
    )
    .await;
    let refund = |n: &str| {
        payload(
            CHECKOUT,
            n,
            "pay_1",
            &Kind::Refund {
                amount: 500,
                currency: "USD",
                refund_id: "act_refund_1".into(),
            },
        )
    };
    deliver(&app, CHECKOUT, &refund("2")).await;
    // The same refund action reported again under another event id posts nothing.
    let (status, _, text, _, _) = deliver(&app, CHECKOUT, &refund("3")).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        (
            json(&text)["outcome"].as_str(),
            json(&text)["reason"].as_str()
        ),
        (Some("ignored"), Some("already_applied"))
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'"
        )
        .await,
        1
    );
}

// ---------------------------------------------------------------------------------------
// Adyen: several items in one request
// ---------------------------------------------------------------------------------------

/// A notification carrying `items` (each a NotificationRequestItem's JSON), signed item by item.
fn adyen_request(items: &[String]) -> (Vec<(String, String)>, String) {
    let body = format!(
        r#"{{"live":"false","notificationItems":[{}]}}"#,
        items
            .iter()
            .map(|i| format!(r#"{{"NotificationRequestItem":{i}}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    signed_now(ADYEN, "", &body)
}

/// The item of an Adyen test payload.
fn adyen_item(event: &Payload) -> String {
    let notification: serde_json::Value = serde_json::from_str(&event.body).unwrap();
    notification["notificationItems"][0]["NotificationRequestItem"].to_string()
}

#[tokio::test]
async fn adyen_three_items_one_seen_before_one_replay_two_applied_one_accepted() {
    let app = app().await;
    let orders = [
        app.create_order(MERCHANT, 1000, "EUR").await,
        app.create_order(MERCHANT, 2000, "EUR").await,
        app.create_order(MERCHANT, 3000, "EUR").await,
    ];
    let items: Vec<Payload> = orders
        .iter()
        .enumerate()
        .map(|(i, order)| {
            payload(
                ADYEN,
                &i.to_string(),
                &format!("PSP{i}"),
                &Kind::Capture {
                    order: Some(*order),
                    amount: 1000 * (i as i64 + 1),
                    currency: "EUR",
                },
            )
        })
        .collect();
    // The first item arrived before, alone.
    let (status, _, text, _, _) = deliver(&app, ADYEN, &items[0]).await;
    assert_eq!((status, text.as_str()), (200, "[accepted]"));
    let first_ack = stored_ack(&app, ADYEN, &items[0].event_id).await;

    let (headers, body) = adyen_request(&items.iter().map(adyen_item).collect::<Vec<_>>());
    let response = app.post_callback(ADYEN, &headers, &body).await;
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let (status, replayed, text) = answer(response).await;
    assert_eq!(
        (status, replayed, text.as_str()),
        (200, false, "[accepted]")
    );
    assert_eq!(
        stored_ack(&app, ADYEN, &items[0].event_id).await,
        first_ack,
        "the seen item replayed"
    );
    for item in &items[1..] {
        assert_eq!(
            stored_ack(&app, ADYEN, &item.event_id).await["outcome"],
            "applied"
        );
    }
    for order in orders {
        assert_eq!(app.order_status(order).await, "paid");
    }
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        3,
        "one each, none twice"
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM callback_deliveries WHERE provider = 'adyen'"
        )
        .await,
        3,
        "the event log shows each item as an event"
    );
    // The whole request again: every item is a replay, and the answer says so.
    let (status, replayed, text) = answer(app.post_callback(ADYEN, &headers, &body).await).await;
    assert_eq!((status, replayed, text.as_str()), (200, true, "[accepted]"));
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        3
    );
    let events = app.admin_get("/admin/events?provider=adyen").await;
    let events: serde_json::Value = events.json().await.unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), 3, "{events}");
}

#[tokio::test]
async fn adyen_one_bad_item_signature_is_401_and_nothing_is_stored() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 1000, "EUR").await;
    let good = payload(
        ADYEN,
        "1",
        "PSP1",
        &Kind::Capture {
            order: Some(order),
            amount: 1000,
            currency: "EUR",
        },
    );
    let bad = payload(
        ADYEN,
        "2",
        "PSP2",
        &Kind::Capture {
            order: Some(order),
            amount: 2000,
            currency: "EUR",
        },
    );
    let (headers, body) = adyen_request(&[adyen_item(&good), adyen_item(&bad)]);
    // The second item's amount is changed after it was signed.
    let tampered = body.replacen(r#""value":2000"#, r#""value":20"#, 1);
    assert_ne!(tampered, body);
    let (status, _, text) = answer(app.post_callback(ADYEN, &headers, &tampered).await).await;
    assert_eq!(
        (status, json(&text)["error"].as_str()),
        (401, Some("invalid_signature")),
        "{text}"
    );
    assert_nothing_written(&app, "adyen").await;
    assert_eq!(app.order_status(order).await, "pending_payment");
}

#[tokio::test]
async fn adyen_a_refund_item_before_its_capture_is_409_the_others_are_stored_and_the_retry_applies_it()
 {
    let app = app().await;
    let refunded = app.create_order(MERCHANT, 1000, "EUR").await;
    let other = app.create_order(MERCHANT, 2000, "EUR").await;
    let refund = payload(
        ADYEN,
        "r",
        "PSPA",
        &Kind::Refund {
            amount: 400,
            currency: "EUR",
            refund_id: "PSPR".into(),
        },
    );
    let capture_other = payload(
        ADYEN,
        "b",
        "PSPB",
        &Kind::Capture {
            order: Some(other),
            amount: 2000,
            currency: "EUR",
        },
    );
    let (headers, body) = adyen_request(&[adyen_item(&refund), adyen_item(&capture_other)]);
    let response = app.post_callback(ADYEN, &headers, &body).await;
    assert_eq!(response.headers()["retry-after"], "30");
    let (status, _, text) = answer(response).await;
    assert_eq!(
        (status, json(&text)["error"].as_str()),
        (409, Some("out_of_order")),
        "{text}"
    );
    assert_eq!(
        app.order_status(other).await,
        "paid",
        "the item that could be applied is stored"
    );
    assert_eq!(
        count(
            &app,
            "SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'"
        )
        .await,
        1
    );

    // The capture the refund needs arrives; Adyen's retry of the first request then applies the
    // refund and replays the stored capture.
    let capture = payload(
        ADYEN,
        "a",
        "PSPA",
        &Kind::Capture {
            order: Some(refunded),
            amount: 1000,
            currency: "EUR",
        },
    );
    let (status, _, text, _, _) = deliver(&app, ADYEN, &capture).await;
    assert_eq!((status, text.as_str()), (200, "[accepted]"));
    let (status, replayed, text) = answer(app.post_callback(ADYEN, &headers, &body).await).await;
    assert_eq!(
        (status, replayed, text.as_str()),
        (200, false, "[accepted]")
    );
    assert_eq!(app.order_status(refunded).await, "partially_refunded");
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        3
    );
}

#[tokio::test]
async fn adyen_a_capture_and_its_refund_in_one_request_apply_in_order() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 1000, "EUR").await;
    let capture = payload(
        ADYEN,
        "a",
        "PSPA",
        &Kind::Capture {
            order: Some(order),
            amount: 1000,
            currency: "EUR",
        },
    );
    let refund = payload(
        ADYEN,
        "r",
        "PSPA",
        &Kind::Refund {
            amount: 1000,
            currency: "EUR",
            refund_id: "PSPR".into(),
        },
    );
    let (headers, body) = adyen_request(&[adyen_item(&capture), adyen_item(&refund)]);
    let (status, _, text) = answer(app.post_callback(ADYEN, &headers, &body).await).await;
    assert_eq!((status, text.as_str()), (200, "[accepted]"));
    assert_eq!(app.order_status(order).await, "refunded");
}

#[tokio::test]
async fn adyen_amounts_in_its_own_minor_units_are_booked_in_iso_minor_units() {
    let app = app().await;
    // CLP has no decimals in ISO 4217 but two at Adyen: 1500.00 CLP is value 150000.
    let order = app.create_order(MERCHANT, 1500, "CLP").await;
    let event = payload(
        ADYEN,
        "1",
        "PSPC",
        &Kind::Capture {
            order: Some(order),
            amount: 150_000,
            currency: "CLP",
        },
    );
    let (status, _, _, _, _) = deliver(&app, ADYEN, &event).await;
    assert_eq!(status, 200);
    assert_eq!(
        stored_ack(&app, ADYEN, &event.event_id).await["outcome"],
        "applied"
    );
    assert_eq!(app.order_status(order).await, "paid");
    // A value that is not a whole number of ISO minor units is rejected, not rounded.
    let odd = payload(
        ADYEN,
        "2",
        "PSPD",
        &Kind::Capture {
            order: Some(order),
            amount: 150_001,
            currency: "CLP",
        },
    );
    deliver(&app, ADYEN, &odd).await;
    let ack = stored_ack(&app, ADYEN, &odd.event_id).await;
    assert_eq!(
        (ack["outcome"].as_str(), ack["reason"].as_str()),
        (Some("rejected"), Some("invalid_amount")),
        "{ack}"
    );
}

// ---------------------------------------------------------------------------------------
// Admin replay of a stored event (PayPal's replay: the gateway cannot sign for it)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn the_admin_replay_re_runs_a_stored_body_and_answers_its_stored_ack() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(SQUARE, "1", "pay_1", &capture(order, 2500));
    deliver(&app, SQUARE, &event).await;
    let ack = stored_ack(&app, SQUARE, &event.event_id).await;
    let path = format!("/admin/events/{SQUARE}/{}/replay", event.event_id);
    let anonymous = app.client.post(app.url(&path)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let response = app
        .client
        .post(app.url(&path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, replayed, text) = answer(response).await;
    assert_eq!((status, replayed), (200, true), "{text}");
    assert_eq!(json(&text), ack);
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        1
    );
    let missing = app
        .client
        .post(app.url(&format!("/admin/events/{SQUARE}/nope/replay")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

// ---------------------------------------------------------------------------------------
// PayPal: the certificate a delivery names
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_paypal_certificate_url_off_the_allowlist_is_401_and_never_fetched() {
    use crate::support::paypal::{CertServer, Route, SIGNING_KEY_PEM, TestCa, rsa_key};
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(PAYPAL, "1", "pay_1", &capture(order, 2500));
    // Another host serving a certificate of the right key, from a CA the gateway would trust
    // there too: only the allowlist keeps it out.
    let other_ca = TestCa::root("Attacker CA");
    let attacker = CertServer::start(other_ca.server_identity(&["localhost"])).await;
    attacker.route(
        "/cert",
        Route::Pem(other_ca.leaf(&rsa_key(SIGNING_KEY_PEM), &["localhost"], None)),
    );
    let port = attacker.port();
    for url in [
        format!("https://localhost:{port}/cert"),
        format!("https://127.0.0.1:{port}/cert"),
        format!(
            "http://localhost:{}{}",
            paypal_host::host().port,
            paypal_host::CERT_PATH
        ),
        "https://paypal.com.evil.example/cert".to_owned(),
    ] {
        let headers = paypal_host::headers(SIGNING_KEY_PEM, &url, &event.body, chrono::Utc::now());
        let (status, _, text) =
            answer(app.post_callback(PAYPAL, &headers, &event.body).await).await;
        assert_eq!(
            (status, json(&text)["error"].as_str()),
            (401, Some("invalid_signature")),
            "{url}: {text}"
        );
    }
    assert_eq!(
        attacker.connections(),
        0,
        "a URL off the allowlist is never fetched"
    );
    assert_nothing_written(&app, "paypal").await;
}

#[tokio::test]
async fn a_paypal_decimal_amount_with_more_decimals_than_its_currency_is_rejected_invalid_amount() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(PAYPAL, "1", "pay_1", &capture(order, 2500));
    let body = event
        .body
        .replace(r#""value":"25.00""#, r#""value":"25.001""#);
    assert_ne!(body, event.body);
    let headers = paypal_host::signed_now(&body);
    let (status, _, text) = answer(app.post_callback(PAYPAL, &headers, &body).await).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        (
            json(&text)["outcome"].as_str(),
            json(&text)["reason"].as_str()
        ),
        (Some("rejected"), Some("invalid_amount")),
        "{text}"
    );
    assert_eq!(app.order_status(order).await, "pending_payment");
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        0
    );
}

#[tokio::test]
async fn a_stored_paypal_event_is_replayed_by_the_admin_action() {
    let app = app().await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let event = payload(PAYPAL, "1", "pay_1", &capture(order, 2500));
    let (status, _, first, _, _) = deliver(&app, PAYPAL, &event).await;
    assert_eq!(status, 200, "{first}");
    let response = app
        .client
        .post(app.url(&format!("/admin/events/{PAYPAL}/{}/replay", event.event_id)))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    let (status, replayed, text) = answer(response).await;
    assert_eq!((status, replayed, text), (200, true, first));
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        1
    );
}

/// The first delivery of a capture is the hot path: every provider's goes through the
/// one-statement capture (a batch of the capture queue), not the general path.
#[tokio::test]
async fn every_providers_first_capture_takes_the_one_statement_path() {
    for provider in [
        ADYEN,
        SQUARE,
        RAZORPAY,
        CHECKOUT,
        PADDLE,
        PAYPAL,
        crate::support::ACME,
    ] {
        let app = app().await;
        let order = app.create_order(MERCHANT, 2500, "USD").await;
        let event = payload(provider, "1", "pay_1", &capture(order, 2500));
        let (status, _, text, _, _) = deliver(&app, provider, &event).await;
        assert_eq!(status, 200, "{provider}: {text}");
        let batches = crate::support::metric_sample(
            &app.metrics().await,
            "gateway_capture_batch_size_count",
            &[],
        );
        assert_eq!(batches, Some(1.0), "{provider}: one capture batch");
        assert_eq!(app.order_status(order).await, "paid", "{provider}");
    }
}

/// An item another delivery holds (in its transaction) makes the request a 409 once the wait
/// runs out, while the request's other items are stored; the provider's retry replays those and
/// applies the held one. A transient failure of an item is answered the same way, with 503.
#[tokio::test]
async fn adyen_an_item_in_flight_elsewhere_is_409_the_others_are_stored_and_the_retry_completes() {
    let app = spawn_app_with(&format!(
        "[server]\nacquire_timeout_ms = 300\n{}",
        all_providers("")
    ))
    .await;
    let orders = [
        app.create_order(MERCHANT, 1000, "EUR").await,
        app.create_order(MERCHANT, 2000, "EUR").await,
    ];
    let items: Vec<Payload> = orders
        .iter()
        .enumerate()
        .map(|(i, order)| {
            payload(
                ADYEN,
                &i.to_string(),
                &format!("PSPF{i}"),
                &Kind::Capture {
                    order: Some(*order),
                    amount: 1000 * (i as i64 + 1),
                    currency: "EUR",
                },
            )
        })
        .collect();
    let holder = crate::support::hold_key(
        &app,
        MERCHANT,
        "payment.callback",
        &format!("{ADYEN}:{}", items[0].event_id),
        "x",
    )
    .await;
    let (headers, body) = adyen_request(&items.iter().map(adyen_item).collect::<Vec<_>>());
    let (status, _, text) = answer(app.post_callback(ADYEN, &headers, &body).await).await;
    assert_eq!(
        (status, json(&text)["error"].as_str()),
        (409, Some("idempotency_key_in_flight")),
        "{text}"
    );
    assert_eq!(
        app.order_status(orders[1]).await,
        "paid",
        "the other item is stored"
    );
    assert_eq!(app.order_status(orders[0]).await, "pending_payment");
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (status, replayed, text) = answer(app.post_callback(ADYEN, &headers, &body).await).await;
    assert_eq!(
        (status, replayed, text.as_str()),
        (200, false, "[accepted]")
    );
    assert_eq!(app.order_status(orders[0]).await, "paid");
    assert_eq!(
        count(&app, "SELECT count(*) FROM ledger_transfers").await,
        2
    );
}

// ---------------------------------------------------------------------------------------
// The same stories through the real binary
// ---------------------------------------------------------------------------------------

/// The answer of the real gateway process at `address` to `provider`'s delivery.
async fn post_to(
    client: &reqwest::Client,
    address: &str,
    provider: &str,
    headers: &[(String, String)],
    body: &str,
) -> (u16, bool, String) {
    let mut request = client
        .post(format!("{address}/v1/callbacks/{provider}"))
        .header("Content-Type", "application/json")
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    answer(request.send().await.unwrap()).await
}

/// The deliveries each scheme refuses for a reason of its own, with the status it must get:
/// Square signed over a notification URL one character off, Paddle's `ts` past the tolerance,
/// Razorpay without its event-id header, PayPal naming a certificate URL off the allowlist.
fn scheme_failures(provider: &str, event: &Payload) -> Vec<(&'static str, u16, Headers)> {
    match provider {
        SQUARE => {
            let url = format!("{}X", &SQUARE_URL[..SQUARE_URL.len() - 1]);
            let text = format!(
                "[[providers]]\nname = \"s\"\nscheme = \"square\"\nmerchant_id = 1\nsecrets = [\"{}\"]\nnotification_url = \"{url}\"\n",
                crate::support::SQUARE_KEY
            );
            let settings =
                Settings::from_toml(&text, &callback_gateway::config::ProcessEnv).unwrap();
            let signed = providers::configure(settings.providers[0].clone())
                .sign(&event.event_id, event.body.as_bytes(), 0)
                .unwrap();
            vec![("notification URL one character off", 401, signed.headers)]
        }
        PADDLE => {
            let late = chrono::Utc::now().timestamp() - 301;
            let (headers, _) = signed_at(PADDLE, &event.event_id, &event.body, late);
            vec![("ts outside the tolerance", 401, headers)]
        }
        RAZORPAY => {
            let (mut headers, _) = signed_now(RAZORPAY, &event.event_id, &event.body);
            headers.retain(|(name, _)| !name.eq_ignore_ascii_case("x-razorpay-event-id"));
            vec![("no event-id header", 400, headers)]
        }
        PAYPAL => [
            "https://paypal.com.evil.example/cert",
            "https://127.0.0.1:9/cert",
        ]
        .into_iter()
        .map(|url| {
            let headers = paypal_host::headers(
                crate::support::paypal::SIGNING_KEY_PEM,
                url,
                &event.body,
                chrono::Utc::now(),
            );
            ("certificate URL off the allowlist", 401, headers)
        })
        .collect(),
        _ => Vec::new(),
    }
}

/// One `callback-gateway serve` process with every provider configured, on one database. For
/// each provider of merchant 42: the forgeries and the scheme's own failures are refused and
/// write nothing; then a signed capture applies and its redelivery is the same bytes, a refund
/// applies and an unhandled type is acked `ignored`; the books hold exactly those movements.
#[tokio::test]
async fn through_the_real_binary_every_provider_posts_once_replays_the_same_bytes_and_refuses_forgeries()
 {
    let gateway = GatewayProcess::spawn(&all_providers("")).await;
    let address = gateway.address();
    let db = connect(&gateway.database_url).await;
    let client = reqwest::Client::new();
    let count = |sql: String, provider: &'static str| {
        let db = &db;
        async move {
            db.query_one(&sql, &[&provider])
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    for (n, provider) in [
        ACME, STRIPE, PAYPAL, ADYEN, SQUARE, RAZORPAY, CHECKOUT, PADDLE,
    ]
    .into_iter()
    .enumerate()
    {
        let order: i64 = db
            .query_one(
                "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 2500, 'USD') RETURNING id",
                &[&MERCHANT],
            )
            .await
            .unwrap()
            .get(0);
        let payment = format!("pay_bin_{n}");
        let event = payload(provider, "1", &payment, &capture(order, 2500));

        for (what, headers, body) in forgeries(provider, &event, &payment) {
            let (status, _, text) = post_to(&client, &address, provider, &headers, &body).await;
            assert_eq!(status, 401, "{provider} {what}: {text}");
        }
        for (what, expected, headers) in scheme_failures(provider, &event) {
            let (status, _, text) =
                post_to(&client, &address, provider, &headers, &event.body).await;
            assert_eq!(status, expected, "{provider} {what}: {text}");
        }
        for table in ["callback_deliveries", "ledger_transfers"] {
            assert_eq!(
                count(
                    format!("SELECT count(*) FROM {table} WHERE provider = $1"),
                    provider
                )
                .await,
                0,
                "{provider}: a refused delivery writes nothing to {table}"
            );
        }

        let (headers, body) = signed_now(provider, &event.event_id, &event.body);
        let (status, replayed, first) = post_to(&client, &address, provider, &headers, &body).await;
        assert_acked(provider, status, &first, &event.event_id);
        assert!(!replayed, "{provider}");
        let (status, replayed, again) = post_to(&client, &address, provider, &headers, &body).await;
        assert_eq!((status, replayed), (200, true), "{provider}: {again}");
        assert_eq!(again, first, "{provider}: a replay is the same bytes");

        let refund = payload(
            provider,
            "2",
            &payment,
            &Kind::Refund {
                amount: 1000,
                currency: "USD",
                refund_id: format!("re_bin_{n}"),
            },
        );
        let unhandled = payload(provider, "9", &format!("pay_bin_9_{n}"), &Kind::Unhandled);
        for event in [&refund, &unhandled] {
            let (headers, body) = signed_now(provider, &event.event_id, &event.body);
            let (status, _, text) = post_to(&client, &address, provider, &headers, &body).await;
            assert_acked(provider, status, &text, &event.event_id);
        }

        let outcomes: Vec<(String, Option<String>)> = db
            .query(
                "SELECT outcome, reason FROM callback_deliveries WHERE provider = $1 ORDER BY id",
                &[&provider],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(
            outcomes.iter().map(|(o, _)| o.as_str()).collect::<Vec<_>>(),
            ["applied", "applied", "ignored"],
            "{provider}: {outcomes:?}"
        );
        assert_eq!(
            outcomes[2].1.as_deref(),
            Some("unsupported_event_type"),
            "{provider}"
        );
        assert_eq!(
            count(
                "SELECT count(*) FROM ledger_transfers WHERE provider = $1".into(),
                provider
            )
            .await,
            2,
            "{provider}: one capture and one refund posted"
        );
        let clearing: i64 = db
            .query_one(
                "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries WHERE account = 'psp_clearing:' || $1",
                &[&provider],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(clearing, 1500, "{provider}: 2500 captured, 1000 refunded");
        let status: String = db
            .query_one("SELECT status FROM orders WHERE id = $1", &[&order])
            .await
            .unwrap()
            .get(0);
        assert_eq!(status, "partially_refunded", "{provider}");
    }
    assert!(
        gateway.error_causes().is_empty(),
        "{:?}",
        gateway.error_causes()
    );
}
