//! PayPal with `verify = "fetch"` (issue 51 item 8), through the real binary against an
//! emulator of PayPal's REST API (OAuth 2.0 client credentials, then the event by id): the
//! books hold what PayPal's API shows, never what a delivery's body claims, an event PayPal
//! does not show is a stored rejection, a revoked token is replaced once, and refused
//! credentials are a 503 that PayPal retries.

use crate::asked_providers::{Answer, Asked};
use crate::support::ADMIN_TOKEN;
use crate::support::emulator::PAYPAL_CLIENT_ID;

const PAYPAL_API: &str = "paypal-api";
const TOKEN_PATH: &str = "/v1/oauth2/token";

/// The gateway of `Asked` with a PayPal provider that asks the emulated API.
async fn start() -> Asked {
    let mut t = Asked::start().await;
    let path = t.gateway.dir.join("gateway.toml");
    let mut config = std::fs::read_to_string(&path).unwrap();
    config.push_str(&t.emulator.provider_toml(
        PAYPAL_API,
        "paypal",
        &format!("verify = \"fetch\"\nclient_id = \"{PAYPAL_CLIENT_ID}\""),
    ));
    std::fs::write(&path, config).unwrap();
    t.gateway.kill_9();
    t.gateway.restart().await;
    t
}

fn event_path(id: &str) -> String {
    format!("/v1/notifications/webhooks-events/{id}")
}

/// A `PAYMENT.CAPTURE.COMPLETED` event as PayPal's API shows it.
fn capture_event(id: &str, capture: &str, value: &str, order: i64) -> String {
    serde_json::json!({
        "id": id, "event_version": "1.0", "create_time": "2026-12-04T10:00:00.000Z",
        "resource_type": "capture", "resource_version": "2.0",
        "event_type": "PAYMENT.CAPTURE.COMPLETED", "summary": "Payment completed",
        "resource": {"id": capture, "status": "COMPLETED", "final_capture": true,
            "custom_id": order.to_string(),
            "amount": {"currency_code": "USD", "value": value}},
        "links": [{"href": format!("https://api-m.paypal.com/v1/notifications/webhooks-events/{id}"),
            "rel": "self", "method": "GET"}]
    })
    .to_string()
}

/// A `PAYMENT.CAPTURE.REFUNDED` event: the refund, its capture named by its `up` link.
fn refund_event(id: &str, refund: &str, capture: &str, value: &str) -> String {
    serde_json::json!({
        "id": id, "event_version": "1.0", "create_time": "2026-12-04T11:00:00.000Z",
        "resource_type": "refund", "resource_version": "2.0",
        "event_type": "PAYMENT.CAPTURE.REFUNDED", "summary": "A $ USD capture payment was refunded",
        "resource": {"id": refund, "status": "COMPLETED",
            "amount": {"currency_code": "USD", "value": value},
            "links": [
                {"href": format!("https://api-m.paypal.com/v2/payments/refunds/{refund}"), "rel": "self", "method": "GET"},
                {"href": format!("https://api-m.paypal.com/v2/payments/captures/{capture}"), "rel": "up", "method": "GET"}]}
    })
    .to_string()
}

async fn deliver(t: &Asked, body: &str) -> Answer {
    t.post(PAYPAL_API, "", &[], "application/json", body.as_bytes())
        .await
}

#[tokio::test]
async fn paypal_with_fetch_books_what_paypals_api_shows_never_what_the_body_claims() {
    let t = start().await;
    let order = t.order(1000, "USD").await;
    t.emulator.put(
        &event_path("WH-1AA"),
        &capture_event("WH-1AA", "CAP1", "10.00", order),
    );

    // Unsigned, and lying about the amount: only the id it names counts.
    let forged = capture_event("WH-1AA", "CAP1", "999.00", order);
    let first = deliver(&t, &forged).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["outcome"], "applied", "{first:?}");
    assert_eq!(
        t.clearing(PAYPAL_API).await,
        1000,
        "PayPal's 10.00, not the body's"
    );

    // PayPal's own redelivery: the same answer, byte for byte, nothing posted again.
    let again = deliver(
        &t,
        r#"{"id":"WH-1AA","event_type":"PAYMENT.CAPTURE.COMPLETED"}"#,
    )
    .await;
    assert!(again.replayed, "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(t.transfers(PAYPAL_API, "payment").await, 1);

    // An event PayPal does not show for this app: a stored rejection, nothing moves, and its
    // redelivery is that same answer.
    let unknown = deliver(&t, &capture_event("WH-FORGED1", "CAP9", "50.00", order)).await;
    assert_eq!(unknown.status, 200, "{unknown:?}");
    assert_eq!(unknown.json()["outcome"], "rejected", "{unknown:?}");
    assert_eq!(unknown.json()["reason"], "unknown_resource", "{unknown:?}");
    assert_eq!(
        deliver(&t, r#"{"id":"WH-FORGED1"}"#).await.body,
        unknown.body
    );
    assert_eq!(t.clearing(PAYPAL_API).await, 1000);

    // A body that names nothing PayPal's API could be asked about: a 400, nothing asked.
    let before = t.emulator.all_requests();
    let bad = deliver(&t, r#"{"id":"../v1/oauth2/token"}"#).await;
    assert_eq!(bad.status, 400, "{bad:?}");
    assert_eq!(t.emulator.all_requests(), before);

    // One token served every call.
    assert_eq!(t.emulator.requests(TOKEN_PATH), 1);
    assert_eq!(t.emulator.bad_keys(), 0);

    // An operator's replay asks PayPal again rather than re-reading what was stored.
    let asked = t.emulator.requests(&event_path("WH-1AA"));
    let replay = reqwest::Client::new()
        .post(format!(
            "{}/admin/events/{PAYPAL_API}/WH-1AA/replay",
            t.gateway.address()
        ))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(
        replay.status().as_u16(),
        200,
        "{}",
        replay.text().await.unwrap()
    );
    assert_eq!(t.emulator.requests(&event_path("WH-1AA")), asked + 1);
    assert_eq!(
        t.clearing(PAYPAL_API).await,
        1000,
        "a replay posts nothing twice"
    );
}

#[tokio::test]
async fn a_revoked_paypal_token_is_replaced_once_and_refused_credentials_are_a_503() {
    let mut t = start().await;
    let order = t.order(2000, "USD").await;
    t.emulator.put(
        &event_path("WH-2AA"),
        &capture_event("WH-2AA", "CAP2", "20.00", order),
    );
    t.emulator.put(
        &event_path("WH-2RF"),
        &refund_event("WH-2RF", "RF2", "CAP2", "5.00"),
    );
    assert_eq!(
        deliver(&t, r#"{"id":"WH-2AA"}"#).await.json()["outcome"],
        "applied"
    );

    // PayPal stops accepting the token the gateway holds: the refund's fetch is refused once,
    // a new token is asked for, and the refund applies on this very delivery.
    t.emulator.revoke_tokens();
    let refund = deliver(&t, r#"{"id":"WH-2RF"}"#).await;
    assert_eq!(refund.json()["outcome"], "applied", "{refund:?}");
    assert_eq!(t.emulator.requests(TOKEN_PATH), 2);
    assert_eq!(t.clearing(PAYPAL_API).await, 1500);

    // Credentials PayPal refuses: a 503 with Retry-After (PayPal retries while the operator
    // fixes the key), nothing stored, and the key_refused series counts it for the alert.
    let path = t.gateway.dir.join("gateway.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let (head, tail) = config
        .split_once(&format!("name = \"{PAYPAL_API}\""))
        .unwrap();
    let tail = tail.replacen(
        &format!("api_key = \"{}\"", crate::support::emulator::API_KEY),
        "api_key = \"a_revoked_client_secret\"",
        1,
    );
    std::fs::write(&path, format!("{head}name = \"{PAYPAL_API}\"{tail}")).unwrap();
    t.gateway.kill_9();
    t.gateway.restart().await;
    t.emulator.put(
        &event_path("WH-3AA"),
        &capture_event("WH-3AA", "CAP3", "20.00", order),
    );
    let refused = deliver(&t, r#"{"id":"WH-3AA"}"#).await;
    assert_eq!(refused.status, 503, "{refused:?}");
    assert!(refused.retry_after.is_some(), "{refused:?}");
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM idempotency_keys WHERE idem_key LIKE '{PAYPAL_API}:WH-3AA%'"
        ))
        .await,
        0
    );
    assert_eq!(
        t.metric(
            "gateway_provider_fetches_total",
            &[("provider", PAYPAL_API), ("result", "key_refused")]
        )
        .await,
        Some(1.0)
    );
    assert_eq!(t.clearing(PAYPAL_API).await, 1500);
}
