//! Merchant refunds (`refund.create`), the seed's two-phase variant, against a real local
//! provider (tests/support/provider.rs) that implements idempotency keys as Stripe does.

use std::time::Duration;

use diesel_async::AsyncConnection;
use serde_json::Value;

use crate::support::gateway::GatewayProcess;
use crate::support::provider::{Behavior, FakeProvider};
use crate::support::{
    ACME, MERCHANT, STRIPE, TestApp, answer, connect, refund_config, sign, spawn_app_with, until,
};

pub(crate) fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

pub(crate) fn refund_body(amount_minor: i64) -> String {
    format!(r#"{{"amount_minor":{amount_minor},"reason":"requested_by_customer"}}"#)
}

pub(crate) async fn post_refund(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    order_id: i64,
    key: &str,
    body: &str,
) -> reqwest::Response {
    client
        .post(format!("{base}/v1/orders/{order_id}/refunds"))
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .header("Content-Type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap()
}

pub(crate) fn canonical_payment(order_id: i64, amount_minor: i64) -> String {
    format!(
        r#"{{"id":"evt_pay_{order_id}","type":"payment.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":{amount_minor},"currency":"USD"}}}}"#
    )
}

/// An order of merchant 42 paid through `acme` (payment id `pay_{order}`).
pub(crate) async fn paid_order(app: &TestApp, amount_minor: i64) -> i64 {
    let order_id = app.create_order(MERCHANT, amount_minor, "USD").await;
    let event = format!("evt_pay_{order_id}");
    let (status, _, ack) = answer(
        app.deliver(ACME, &event, &canonical_payment(order_id, amount_minor))
            .await,
    )
    .await;
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );
    order_id
}

pub(crate) async fn refund_app(provider: &FakeProvider) -> (TestApp, String) {
    let app = spawn_app_with(&refund_config(&provider.base_url, "")).await;
    let token = app.token_for(MERCHANT).await;
    (app, token)
}

/// Lets the backoff of every processing refund request run out, as the client's wait for
/// `Retry-After` would.
pub(crate) async fn backoff_over(db: &tokio_postgres::Client) {
    db.execute(
        "UPDATE refund_requests SET next_attempt_at = now() WHERE status = 'processing'",
        &[],
    )
    .await
    .unwrap();
}

pub(crate) async fn refund_status(db: &tokio_postgres::Client, order_id: i64) -> Vec<String> {
    db.query(
        "SELECT status FROM refund_requests WHERE order_id = $1 ORDER BY id",
        &[&order_id],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_requests_with_one_key_make_one_provider_call_one_409_then_identical_replays()
 {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Hold]);

    let first = tokio::spawn({
        let (client, base, token) = (app.client.clone(), app.address.clone(), token.clone());
        async move { post_refund(&client, &base, &token, order_id, "rf-1", &refund_body(500)).await }
    });
    provider.until_calls(1).await;
    let duplicate = post_refund(
        &app.client,
        &app.address,
        &token,
        order_id,
        "rf-1",
        &refund_body(500),
    )
    .await;
    let retry_after = duplicate.headers().get("Retry-After").cloned();
    let (status, _, body) = answer(duplicate).await;
    assert_eq!(
        status, 409,
        "a duplicate while the first holds its lease: {body}"
    );
    assert_eq!(json(&body)["error"], "idempotency_key_in_flight");
    assert!(retry_after.is_some(), "409 without Retry-After");

    provider.let_go();
    let (status, replayed, first_body) = answer(first.await.unwrap()).await;
    assert_eq!((status, replayed), (202, false), "{first_body}");
    let accepted = json(&first_body);
    assert_eq!(accepted["status"], "pending");
    assert_eq!(accepted["provider_refund_id"], "re_1");
    assert!(
        accepted["refund_request_id"].as_i64().is_some(),
        "{first_body}"
    );

    for _ in 0..2 {
        let (status, replayed, body) = answer(
            post_refund(
                &app.client,
                &app.address,
                &token,
                order_id,
                "rf-1",
                &refund_body(500),
            )
            .await,
        )
        .await;
        assert_eq!((status, replayed), (202, true));
        assert_eq!(body, first_body, "a replay must be byte-identical");
    }
    assert_eq!(provider.calls().len(), 1, "the provider was called once");
    assert_eq!(provider.refunds_created(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_refunds_of_sixty_percent_of_one_order_one_exceeds_the_refundable_amount() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    let body = refund_body(600);
    let (a, b) = tokio::join!(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "sixty-a",
            &body
        ),
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "sixty-b",
            &body
        ),
    );
    let (a, b) = (answer(a).await, answer(b).await);
    let mut statuses = [a.0, b.0];
    statuses.sort_unstable();
    assert_eq!(statuses, [202, 422], "{a:?} {b:?}");
    let (refused_key, refused) = if a.0 == 422 {
        ("sixty-a", a)
    } else {
        ("sixty-b", b)
    };
    assert_eq!(
        json(&refused.2)["error"],
        "amount_exceeds_refundable",
        "{}",
        refused.2
    );
    // The refusal is stored: the same request replays it.
    let replay = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            refused_key,
            &body,
        )
        .await,
    )
    .await;
    assert_eq!(replay, (422, true, refused.2.clone()));
    assert_eq!(provider.calls().len(), 1);
    assert_eq!(refund_status(&app.db, order_id).await, ["pending"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_500_or_a_dropped_connection_is_a_503_that_the_retry_finishes_with_one_refund() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Fail500, Behavior::Drop]);

    for attempt in ["500", "dropped connection"] {
        let response = post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "flaky",
            &refund_body(300),
        )
        .await;
        assert!(response.headers().get("Retry-After").is_some());
        let (status, _, body) = answer(response).await;
        assert_eq!(status, 503, "provider {attempt}: {body}");
        assert_eq!(json(&body)["error"], "unavailable");
        let row = app
            .db
            .query_one(
                "SELECT status, locked_until IS NULL FROM idempotency_keys WHERE op = 'refund.create'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(
            (row.get::<_, String>(0), row.get::<_, bool>(1)),
            ("processing".to_owned(), true),
            "after a {attempt} the record stays processing with its lease released"
        );
        // The client waits out Retry-After (the request's backoff) before it retries.
        backoff_over(&app.db).await;
    }

    // The expiry cleaner never deletes a processing record, even past its expiry.
    app.db
        .execute("UPDATE idempotency_keys SET expires_at = now() - interval '1 hour' WHERE op = 'refund.create'", &[])
        .await
        .unwrap();
    let mut conn = diesel_async::AsyncPgConnection::establish(&app.database_url)
        .await
        .unwrap();
    let deleted = callback_gateway::idempotency::cleanup::run_pass(&mut conn, 100)
        .await
        .unwrap();
    assert_eq!(deleted, 0, "the cleaner deleted a processing record");

    let (status, replayed, body) = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "flaky",
            &refund_body(300),
        )
        .await,
    )
    .await;
    assert_eq!((status, replayed), (202, false), "{body}");
    let calls = provider.calls();
    assert_eq!(calls.len(), 3);
    let key = calls[0]
        .idempotency_key
        .clone()
        .expect("no provider Idempotency-Key");
    assert!(
        calls
            .iter()
            .all(|c| c.idempotency_key.as_deref() == Some(key.as_str())),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.path == "/refunds" && c.body.contains("\"amount_minor\":300"))
    );
    assert_eq!(provider.refunds_created(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_4xx_is_a_stored_provider_declined_and_the_amount_is_refundable_again() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Decline(
        400,
        "Charge ch_1 has already been refunded.",
    )]);

    let (status, replayed, body) = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "declined",
            &refund_body(1000),
        )
        .await,
    )
    .await;
    assert_eq!((status, replayed), (422, false), "{body}");
    let declined = json(&body);
    assert_eq!(declined["error"], "provider_declined");
    assert!(
        declined["message"]
            .as_str()
            .unwrap()
            .contains("already been refunded"),
        "{body}"
    );
    let replay = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "declined",
            &refund_body(1000),
        )
        .await,
    )
    .await;
    assert_eq!(replay, (422, true, body.clone()));
    assert_eq!(refund_status(&app.db, order_id).await, ["failed"]);
    // Finance sees the declined request among what needs attention.
    let attention = json(
        &app.admin_get("/admin/attention")
            .await
            .text()
            .await
            .unwrap(),
    );
    let requests = attention["refund_requests"].as_array().unwrap();
    assert_eq!(requests.len(), 1, "{attention}");
    assert_eq!(
        (
            requests[0]["order_id"].as_i64(),
            requests[0]["status"].as_str(),
            requests[0]["amount_minor"].as_i64()
        ),
        (Some(order_id), Some("failed"), Some(1000))
    );

    let (status, _, body) = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "again",
            &refund_body(1000),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "the declined amount was released: {body}");
    assert_eq!(provider.calls().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canonical_refund_webhook_posts_once_and_marks_the_request_succeeded() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    let (status, _, body) = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "hook",
            &refund_body(400),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let refund_id = json(&body)["provider_refund_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let event = format!(
        r#"{{"id":"evt_rf_1","type":"refund.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":400,"currency":"USD","refund_id":"{refund_id}"}}}}"#
    );
    let (status, _, ack) = answer(app.deliver(ACME, "evt_rf_1", &event).await).await;
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );
    let (_, replayed, _) = answer(app.deliver(ACME, "evt_rf_1", &event).await).await;
    assert!(replayed);
    let again = event.replace("evt_rf_1", "evt_rf_2");
    let (_, _, ack) = answer(app.deliver(ACME, "evt_rf_2", &again).await).await;
    assert_eq!(json(&ack)["outcome"], "ignored", "{ack}");

    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        1
    );
    assert_eq!(app.order_status(order_id).await, "partially_refunded");
    assert_eq!(refund_status(&app.db, order_id).await, ["succeeded"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stripe_refund_is_form_encoded_and_its_cumulative_charge_refunded_settles_it() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = app.create_order(MERCHANT, 5000, "USD").await;
    let intent = format!("pi_{order_id}");
    let payment = format!(
        r#"{{"id":"evt_pi_{order_id}","type":"payment_intent.succeeded","data":{{"object":{{"id":"{intent}","amount_received":5000,"currency":"usd","metadata":{{"order_id":"{order_id}"}}}}}}}}"#
    );
    let (status, _, ack) = answer(
        app.deliver(STRIPE, &format!("evt_pi_{order_id}"), &payment)
            .await,
    )
    .await;
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );

    let (status, _, body) = answer(
        post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "stripe-all",
            &refund_body(5000),
        )
        .await,
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let calls = provider.calls();
    assert_eq!(calls[0].path, "/v1/refunds");
    assert_eq!(
        calls[0].body,
        format!("payment_intent={intent}&amount=5000")
    );

    let refunded = format!(
        r#"{{"id":"evt_ch_{order_id}","type":"charge.refunded","data":{{"object":{{"id":"ch_9","payment_intent":"{intent}","amount_refunded":5000,"currency":"usd"}}}}}}"#
    );
    let (status, _, ack) = answer(
        app.deliver(STRIPE, &format!("evt_ch_{order_id}"), &refunded)
            .await,
    )
    .await;
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        1
    );
    assert_eq!(app.order_status(order_id).await, "refunded");
    assert_eq!(refund_status(&app.db, order_id).await, ["succeeded"]);
}

// ---------------------------------------------------------------------------------------
// The real binary, SIGKILLed while the provider answers slowly
// ---------------------------------------------------------------------------------------

/// A gateway process whose refunds go to `provider`, with a 2 s lease and a paid order of
/// 1000 USD; returns it, a merchant token and the order.
pub(crate) async fn gateway_with_paid_order(
    provider: &FakeProvider,
    recover_interval_secs: u64,
) -> (GatewayProcess, String, i64) {
    let extra = format!(
        "[refunds]\nlease_secs = 2\nprovider_timeout_ms = 1500\nrecover_interval_secs = {recover_interval_secs}\n"
    );
    let gateway = GatewayProcess::spawn(&refund_config(&provider.base_url, &extra)).await;
    let mut conn = diesel_async::AsyncPgConnection::establish(&gateway.database_url)
        .await
        .unwrap();
    let token = callback_gateway::auth::issue_token(&mut conn, MERCHANT)
        .await
        .unwrap();
    let db = connect(&gateway.database_url).await;
    let order_id: i64 = db
        .query_one("INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 1000, 'USD') RETURNING id", &[&MERCHANT])
        .await
        .unwrap()
        .get(0);
    let body = canonical_payment(order_id, 1000);
    let event = format!("evt_pay_{order_id}");
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body.clone());
    for (name, value) in sign::sign_now(ACME, &event, &body) {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    (gateway, token, order_id)
}

/// Kills the gateway while the provider holds its answer to the refund of `order_id` (paid as
/// `pay_{order_id}`, as [`gateway_with_paid_order`] pays it), lets the provider answer into the
/// void (the refund is made, the answer lost), and starts the gateway again. The hold and the
/// wait are for that payment's call: the gateway's recoverer may be calling the provider for
/// other refunds meanwhile, and the next call of all may be one of those.
pub(crate) async fn kill_during_the_provider_call(
    provider: &FakeProvider,
    gateway: &mut GatewayProcess,
    token: &str,
    order_id: i64,
) {
    let payment = format!("pay_{order_id}");
    provider.script_for(&payment, &[Behavior::Hold]);
    let before = provider.calls_for(&payment).len();
    let client = reqwest::Client::new();
    let in_flight = tokio::spawn({
        let url = format!("{}/v1/orders/{order_id}/refunds", gateway.address());
        let (token, body) = (token.to_owned(), refund_body(500));
        // Its connection dies with the gateway: an error here is the point.
        async move {
            client
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", "crash")
                .body(body)
                .send()
                .await
        }
    });
    provider.until_calls_for(&payment, before + 1).await;
    gateway.kill_9();
    assert!(
        in_flight.await.unwrap().is_err(),
        "the killed gateway answered"
    );
    provider.let_go();
    gateway.restart().await;
}

fn assert_one_refund_under_one_key(provider: &FakeProvider) {
    let calls = provider.calls();
    assert!(
        calls.len() >= 2,
        "the provider was not called again: {calls:?}"
    );
    let key = calls[0]
        .idempotency_key
        .clone()
        .expect("no provider Idempotency-Key");
    assert!(
        calls
            .iter()
            .all(|c| c.idempotency_key.as_deref() == Some(key.as_str()) && c.body == calls[0].body),
        "every attempt must carry the same provider key and parameters: {calls:?}"
    );
    assert_eq!(
        provider.refunds_created(),
        1,
        "the provider refunded more than once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_mid_call_the_recoverer_finishes_the_refund_with_the_same_provider_key() {
    let provider = FakeProvider::start().await;
    let (mut gateway, token, order_id) = gateway_with_paid_order(&provider, 1).await;
    kill_during_the_provider_call(&provider, &mut gateway, &token, order_id).await;

    let db = connect(&gateway.database_url).await;
    until("the recoverer to finish the refund", async || {
        db.query_one(
            "SELECT status FROM idempotency_keys WHERE op = 'refund.create'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, String>(0)
            == "succeeded"
    })
    .await;
    assert_one_refund_under_one_key(&provider);
    assert_eq!(refund_status(&db, order_id).await, ["pending"]);

    // The client's retry gets what the recoverer stored.
    let (status, replayed, body) = answer(
        post_refund(
            &reqwest::Client::new(),
            &gateway.address(),
            &token,
            order_id,
            "crash",
            &refund_body(500),
        )
        .await,
    )
    .await;
    assert_eq!((status, replayed), (202, true), "{body}");
    assert_eq!(json(&body)["provider_refund_id"], "re_1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_sigkill_mid_call_a_client_retry_takes_the_expired_lease_over_and_finishes() {
    let provider = FakeProvider::start().await;
    let (mut gateway, token, order_id) = gateway_with_paid_order(&provider, 1).await;
    // The test holds the recoverer's lock, so only the client's retry can finish the refund.
    let recoverer_lock = connect(&gateway.database_url).await;
    recoverer_lock
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&callback_gateway::refunds::recover::RECOVERER_LOCK_KEY],
        )
        .await
        .unwrap();
    kill_during_the_provider_call(&provider, &mut gateway, &token, order_id).await;

    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut in_flight_answers = 0;
    let (status, replayed, body) = loop {
        let (status, replayed, body) = answer(
            post_refund(
                &client,
                &gateway.address(),
                &token,
                order_id,
                "crash",
                &refund_body(500),
            )
            .await,
        )
        .await;
        if status != 409 {
            break (status, replayed, body);
        }
        // The crashed attempt's lease is still live: 409 until it expires.
        in_flight_answers += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (status, replayed),
        (202, false),
        "the retry itself finished it: {body}"
    );
    assert_eq!(json(&body)["provider_refund_id"], "re_1");
    assert_one_refund_under_one_key(&provider);
    eprintln!(
        "client retry after sigkill: {in_flight_answers} answer(s) 409 before the lease expired"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_webhook_that_overtakes_the_providers_answer_settles_the_request_in_phase_three() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Hold]);
    let first = tokio::spawn({
        let (client, base, token) = (app.client.clone(), app.address.clone(), token.clone());
        async move {
            post_refund(
                &client,
                &base,
                &token,
                order_id,
                "overtaken",
                &refund_body(1000),
            )
            .await
        }
    });
    provider.until_calls(1).await;
    // The provider made re_1 and sends its webhook before its HTTP answer arrives.
    let event = format!(
        r#"{{"id":"evt_fast","type":"refund.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":1000,"currency":"USD","refund_id":"re_1"}}}}"#
    );
    let (_, _, ack) = answer(app.deliver(ACME, "evt_fast", &event).await).await;
    assert_eq!(json(&ack)["outcome"], "applied", "{ack}");
    assert_eq!(refund_status(&app.db, order_id).await, ["processing"]);

    provider.let_go();
    let (status, _, body) = answer(first.await.unwrap()).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(json(&body)["status"], "succeeded", "{body}");
    assert_eq!(refund_status(&app.db, order_id).await, ["succeeded"]);
    assert_eq!(app.order_status(order_id).await, "refunded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_racers_for_an_expired_lease_exactly_one_takes_it_and_the_loser_cannot_finish() {
    use callback_gateway::idempotency::lease;
    use callback_gateway::idempotency::record::RecordStatus;

    let provider = FakeProvider::start().await;
    let (app, _) = refund_app(&provider).await;
    let record_id: i64 = app
        .db
        .query_one(
            "INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, expires_at, locked_until, lease_token) \
             VALUES (42, 'refund.create', 'race', 'h', now() + interval '1 hour', now() - interval '1 second', 'old') RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for round in 0..20 {
        let token: Option<String> = app
            .db
            .query_one(
                "SELECT lease_token FROM idempotency_keys WHERE id = $1",
                &[&record_id],
            )
            .await
            .unwrap()
            .get(0);
        let mut a = diesel_async::AsyncPgConnection::establish(&app.database_url)
            .await
            .unwrap();
        let mut b = diesel_async::AsyncPgConnection::establish(&app.database_url)
            .await
            .unwrap();
        let lease_time = Duration::from_secs(0);
        let (won_a, won_b) = tokio::join!(
            lease::take_over(&mut a, record_id, token.as_deref(), lease_time),
            lease::take_over(&mut b, record_id, token.as_deref(), lease_time),
        );
        let (won_a, won_b) = (won_a.unwrap(), won_b.unwrap());
        assert!(
            won_a.is_some() != won_b.is_some(),
            "round {round}: {won_a:?} {won_b:?}"
        );
        // A zero lease expires at once: the next round races for it again.
        let winner = won_a.or(won_b).unwrap();
        if round == 19 {
            // A holder whose lease was taken over cannot overwrite the new holder's result.
            let newer = lease::take_over(&mut a, record_id, None, lease_time)
                .await
                .unwrap();
            assert!(newer.is_none(), "a lease with a token is not free");
            let token: Option<String> = app
                .db
                .query_one(
                    "SELECT lease_token FROM idempotency_keys WHERE id = $1",
                    &[&record_id],
                )
                .await
                .unwrap()
                .get(0);
            let newer = lease::take_over(&mut a, record_id, token.as_deref(), lease_time)
                .await
                .unwrap()
                .unwrap();
            let stale = lease::finish(
                &mut b,
                &winner,
                RecordStatus::Succeeded,
                202,
                &serde_json::json!({}),
            )
            .await
            .unwrap();
            assert_eq!(stale, None, "the stale holder finished");
            let current = lease::finish(
                &mut a,
                &newer,
                RecordStatus::Succeeded,
                202,
                &serde_json::json!({"ok":true}),
            )
            .await
            .unwrap();
            assert!(current.is_some());
        }
    }
}
