//! Abuse limits (issue 53): guesses at keys and failed console sign-ins per source address,
//! merchants' endpoint changes per merchant, unsigned provider deliveries per source address;
//! each answered 429 with `Retry-After` and counted. Signed providers' callbacks never are.

use std::net::IpAddr;

use serde_json::json;

use crate::asked_providers::{Asked, mollie_payment};
use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, TestApp, audit_rows, console_sign_in, insert_orders,
    metric_sample, spawn_app_with,
};

/// A client whose connections come from `address` (any of 127/8 reaches the gateway).
fn client_from(address: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(address.parse::<IpAddr>().unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The `Retry-After` of a 429, in whole seconds; fails the test for any other answer.
fn limited(response: &reqwest::Response, what: &str) -> u64 {
    assert_eq!(response.status(), 429, "{what}");
    response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|s| *s >= 1)
        .unwrap_or_else(|| panic!("{what}: a 429 carries Retry-After in seconds"))
}

async fn limited_total(app: &TestApp, limit: &str) -> f64 {
    metric_sample(
        &app.metrics().await,
        "gateway_rate_limited_total",
        &[("limit", limit)],
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn unknown_keys_are_limited_per_source_address_before_any_lookup() {
    let app = spawn_app_with("[limits]\nunknown_keys_per_minute = 3\n").await;
    let guesser = client_from("127.0.0.1");
    let guess = |n: usize| {
        let guesser = guesser.clone();
        let url = app.url("/admin/events");
        async move {
            guesser
                .get(url)
                .bearer_auth(format!("cgo_guess{n}"))
                .send()
                .await
                .unwrap()
        }
    };
    for n in 0..3 {
        assert_eq!(guess(n).await.status(), 401, "guess {n}");
    }
    let response = guess(3).await;
    limited(&response, "the fourth guess from one address");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "rate_limited");
    // A merchant token guessed from the same address: the same budget.
    let response = guesser
        .get(app.url("/v1/orders/1"))
        .bearer_auth("cgw_guessed_merchant_token")
        .send()
        .await
        .unwrap();
    limited(&response, "a merchant token from the same address");
    // Another address has its own budget, and the break-glass token (no lookup) still works
    // from the limited one.
    let other = client_from("127.0.0.2");
    let response = other
        .get(app.url("/admin/events"))
        .bearer_auth("cgo_other_address")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let response = guesser
        .get(app.url("/admin/events"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(limited_total(&app, "unknown_key").await >= 2.0);
}

#[tokio::test]
async fn failed_console_sign_ins_are_limited_per_source_address() {
    let app = spawn_app_with("[limits]\nfailed_sign_ins_per_minute = 3\n").await;
    let guesser = client_from("127.0.0.1");
    for n in 0..3 {
        let response =
            console_sign_in(&guesser, &app.address, Some(&format!("cgo_wrong{n}"))).await;
        assert_eq!(response.status(), 401, "sign-in {n}");
    }
    let response = console_sign_in(&guesser, &app.address, Some("cgo_wrong_again")).await;
    limited(&response, "the fourth failed sign-in");
    // From then on the address is refused before its key is looked up, and nothing is written.
    let response = console_sign_in(&guesser, &app.address, Some("cgo_fifth_guess")).await;
    limited(&response, "the fifth, not looked up");
    let refused = audit_rows(&app.db, "console.sign_in").await;
    assert_eq!(refused.len(), 4, "the four refusals, no more: {refused:?}");
    let other = client_from("127.0.0.2");
    let response = console_sign_in(&other, &app.address, Some(ADMIN_TOKEN)).await;
    assert_eq!(response.status(), 303, "another address signs in");
    assert!(limited_total(&app, "failed_sign_in").await >= 1.0);
}

#[tokio::test]
async fn a_merchants_endpoint_changes_tests_and_pings_are_limited_per_merchant() {
    let app = spawn_app_with(
        "[limits]\nendpoint_changes_per_hour = 3\n\n[secrets]\nkey = \"dGVzdC1zZWNyZXRzLWtleS0zMi1ieXRlcy1sb25nISE=\"\n",
    )
    .await;
    let token = app.token_for(MERCHANT).await;
    let other = app.token_for(43).await;
    let request =
        |token: &str, method: reqwest::Method, path: &str, body: Option<serde_json::Value>| {
            let mut request = app.client.request(method, app.url(path)).bearer_auth(token);
            if let Some(body) = body {
                request = request.json(&body);
            }
            request.send()
        };
    let created: serde_json::Value = request(
        &token,
        reqwest::Method::POST,
        "/v1/webhook-endpoints",
        Some(json!({"url": "https://merchant.example/hooks"})),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let id = created["id"].as_str().unwrap().to_owned();
    let test = format!("/v1/webhook-endpoints/{id}/test");
    for n in 0..2 {
        let response = request(&token, reqwest::Method::POST, &test, None)
            .await
            .unwrap();
        assert_eq!(response.status(), 202, "ping {n}");
    }
    let response = request(
        &token,
        reqwest::Method::PATCH,
        &format!("/v1/webhook-endpoints/{id}"),
        Some(json!({"description": "fourth change"})),
    )
    .await
    .unwrap();
    limited(&response, "the fourth change of one merchant");
    let audited = app
        .count("SELECT count(*) FROM audit_log WHERE action LIKE 'webhook_endpoint.%'")
        .await;
    assert_eq!(audited, 3, "a limited change writes no audit row");
    // Another merchant is not held back by it.
    let response = request(
        &other,
        reqwest::Method::POST,
        "/v1/webhook-endpoints",
        Some(json!({"url": "https://other.example/hooks"})),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 201);
    assert!(limited_total(&app, "endpoint_change").await >= 1.0);
}

#[tokio::test]
async fn unsigned_mollie_deliveries_are_limited_per_address_and_their_answer_says_nothing() {
    let t = Asked::start_with("[limits]\nunsigned_deliveries_per_minute = 2\n").await;
    let order = t.order(2500, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_quiet1",
        &mollie_payment("tr_quiet1", "paid", "25.00", "0.00", "0.00", order),
    );
    let first = t.mollie("tr_quiet1").await;
    assert_eq!(first.status, 200, "{first:?}");
    for word in ["paid", "25.00", "applied", "tr_quiet1"] {
        assert!(
            !first.body.contains(word),
            "the answer tells the caller nothing of the payment ({word}): {}",
            first.body
        );
    }
    assert_eq!(
        t.transfers("mollie", "payment").await,
        1,
        "and it was applied"
    );
    let second = t.mollie("tr_quiet1").await;
    assert_eq!((second.status, &second.body), (200, &first.body));
    let third = t.mollie("tr_quiet1").await;
    assert_eq!(third.status, 429, "{third:?}");
    assert!(third.retry_after.is_some());
    assert_eq!(
        t.emulator.requests("/v2/payments/tr_quiet1"),
        2,
        "a limited delivery costs no fetch"
    );
    // Signed providers are never limited, however many arrive.
    let db = &t.db;
    let orders: Vec<i64> = db
        .query(
            "INSERT INTO orders (user_id, amount_minor, currency) \
             SELECT $1, 1000, 'USD' FROM generate_series(1, 5) RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for order in orders {
        let id = format!("evt_signed_{order}");
        let body = format!(
            r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"pay_{order}","order_id":{order},"amount_minor":1000,"currency":"USD"}}}}"#
        );
        let (headers, body) = crate::support::sign::signed_now(ACME, &id, &body);
        let answer = t
            .post(ACME, "", &headers, "application/json", body.as_bytes())
            .await;
        assert_eq!(answer.status, 200, "a signed callback: {answer:?}");
    }
}

#[tokio::test]
async fn signed_callbacks_are_never_limited_however_small_the_limits() {
    let app = spawn_app_with(
        "[limits]\nunknown_keys_per_minute = 1\nfailed_sign_ins_per_minute = 1\n\
         unsigned_deliveries_per_minute = 1\nendpoint_changes_per_hour = 1\n",
    )
    .await;
    let orders = insert_orders(&app.db, 20).await;
    for (order, amount) in orders {
        let id = format!("evt_many_{order}");
        let body = format!(
            r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"pay_{order}","order_id":{order},"amount_minor":{amount},"currency":"USD"}}}}"#
        );
        assert_eq!(app.deliver(ACME, &id, &body).await.status(), 200);
        // A bad signature is refused as before, not limited.
        let refused = app
            .client
            .post(app.url(&format!("/v1/callbacks/{ACME}")))
            .header("webhook-id", "evt_forged")
            .header("webhook-timestamp", "1")
            .header("webhook-signature", "v1,AAAA")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
    }
    assert_eq!(limited_total(&app, "unsigned_delivery").await, 0.0);
}
