//! Merchant refunds that can never pay twice or stall (issue 23): the record outlives its
//! request, retries stop before the provider forgets its idempotency key, the recoverer paces
//! and shares its attention, and an answer PostgreSQL cannot store goes to a person.

use std::collections::HashMap;
use std::time::Duration;

use callback_gateway::idempotency::cleanup;
use callback_gateway::notifications::{Notifying, Wake};
use callback_gateway::refunds::recover;
use callback_gateway::startup::refunds_of;
use diesel_async::AsyncConnection;
use serde_json::{Value, json as json_value};

use crate::refunds::{
    backoff_over, canonical_payment, gateway_with_paid_order, json, kill_during_the_provider_call,
    paid_order, post_refund, refund_app, refund_body, refund_status,
};
use crate::support::provider::{Behavior, FakeProvider};
use crate::support::{ACME, ADMIN_TOKEN, TestApp, answer, audit_rows, connect, sign, until};

/// One recoverer pass of `app`'s settings, as `serve` runs it every interval: the requests it
/// finished and those waiting for a person after it.
async fn recover_once(app: &TestApp) -> (usize, i64) {
    let notifying = Notifying::new(&app.settings.merchants, Wake::default());
    let refunds = refunds_of(&app.settings, notifying).unwrap();
    recover::run_exclusive_pass(
        &app.database_url,
        &refunds,
        app.settings.refunds.recover_interval,
    )
    .await
    .unwrap()
    .map(|pass| (pass.finished, pass.needing_review))
    .expect("no other recoverer holds the lock")
}

/// A merchant's refund request over HTTP: status, replayed, body.
async fn send(
    app: &TestApp,
    token: &str,
    order_id: i64,
    key: &str,
    amount_minor: i64,
) -> (u16, bool, String) {
    answer(
        post_refund(
            &app.client,
            &app.address,
            token,
            order_id,
            key,
            &refund_body(amount_minor),
        )
        .await,
    )
    .await
}

/// The same, without the replayed flag.
async fn send_for_status(
    app: &TestApp,
    token: &str,
    order_id: i64,
    key: &str,
    amount_minor: i64,
) -> (u16, String) {
    let (status, _, body) = send(app, token, order_id, key, amount_minor).await;
    (status, body)
}

async fn cleanup_once(app: &TestApp) -> u64 {
    let mut conn = diesel_async::AsyncPgConnection::establish(&app.database_url)
        .await
        .unwrap();
    cleanup::run_pass(&mut conn, 5000).await.unwrap()
}

async fn attention_refunds(app: &TestApp) -> Vec<Value> {
    let (status, _, body) = answer(app.admin_get("/admin/attention").await).await;
    assert_eq!(status, 200, "{body}");
    json(&body)["refund_requests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn resolve(app: &TestApp, request_id: i64, resolution: Value) -> (u16, String) {
    let response = app
        .client
        .post(app.url(&format!("/admin/refund-requests/{request_id}/resolve")))
        .bearer_auth(ADMIN_TOKEN)
        .json(&resolution)
        .send()
        .await
        .unwrap();
    let (status, _, body) = answer(response).await;
    (status, body)
}

async fn request_id_of(app: &TestApp, order_id: i64) -> i64 {
    app.db
        .query_one(
            "SELECT id FROM refund_requests WHERE order_id = $1",
            &[&order_id],
        )
        .await
        .unwrap()
        .get(0)
}

// ---------------------------------------------------------------------------------------
// 1. The record of a refund outlives its request
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_that_stayed_processing_past_the_ttl_is_kept_after_it_finishes_and_never_paid_twice()
 {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;

    // A provider outage: the request stays processing...
    provider.script(&[Behavior::Fail500]);
    let (status, _, body) = send(&app, &token, order_id, "outage", 500).await;
    assert_eq!(status, 503, "{body}");
    // ...for longer than the record's ttl (72 h by default).
    app.db
        .execute(
            "UPDATE idempotency_keys SET created_at = now() - interval '80 hours', \
             expires_at = now() - interval '8 hours' WHERE op = 'refund.create'",
            &[],
        )
        .await
        .unwrap();

    // The client retries once the provider is back: it finishes.
    backoff_over(&app.db).await;
    let (status, _, body) = send(&app, &token, order_id, "outage", 500).await;
    assert_eq!(status, 202, "{body}");
    let expires_in_hours: f64 = app
        .db
        .query_one(
            "SELECT extract(epoch FROM expires_at - now())::float8 / 3600 \
             FROM idempotency_keys WHERE op = 'refund.create'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        (71.0..=72.1).contains(&expires_in_hours),
        "a finished record must expire its ttl after it finished, not {expires_in_hours} h from now"
    );

    // Even an expired record is kept while its request is pending (the webhook has not come).
    app.db
        .execute(
            "UPDATE idempotency_keys SET expires_at = now() - interval '1 hour' \
             WHERE op = 'refund.create'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        cleanup_once(&app).await,
        0,
        "a pending request's record was cleaned"
    );

    // The client's next retry is the stored answer, and the provider refunded once.
    let (status, replayed, again) = send(&app, &token, order_id, "outage", 500).await;
    assert_eq!(
        (status, replayed, again.as_str()),
        (202, true, body.as_str())
    );
    assert_eq!(provider.refunds_created(), 1, "the provider refunded twice");
    assert_eq!(refund_status(&app.db, order_id).await, ["pending"]);
}

// ---------------------------------------------------------------------------------------
// 2. No retry past the provider's memory of its idempotency key
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_past_its_retry_age_is_never_sent_again_and_a_person_resolves_it() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Fail500]);
    let (status, _, _) = send(&app, &token, order_id, "old", 400).await;
    assert_eq!(status, 503);
    // 21 hours later (the default retry age is 20 h; Stripe forgets keys after 24 h).
    app.db
        .execute(
            "UPDATE refund_requests SET created_at = now() - interval '21 hours'",
            &[],
        )
        .await
        .unwrap();

    let (status, _, body) = send(&app, &token, order_id, "old", 400).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(json(&body)["error"], "refund_needs_review", "{body}");
    assert_eq!(recover_once(&app).await, (0, 1));
    assert_eq!(
        provider.calls().len(),
        1,
        "a request past its retry age was sent to the provider again"
    );

    let listed = attention_refunds(&app).await;
    let request_id = request_id_of(&app, order_id).await;
    let item = listed
        .iter()
        .find(|r| r["refund_request_id"] == request_id)
        .unwrap_or_else(|| panic!("not in attention: {listed:?}"));
    assert_eq!(item["reason"], "retry_age_exceeded", "{item}");
    assert_eq!(item["status"], "processing");

    // The person looked at the provider: the refund was made there as re_manual.
    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "accepted", "provider_refund_id": "re_manual"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["status"], "pending", "{body}");
    let (status, replayed, body) = send(&app, &token, order_id, "old", 400).await;
    assert_eq!((status, replayed), (202, true), "{body}");
    assert_eq!(json(&body)["provider_refund_id"], "re_manual");
    assert_eq!(provider.calls().len(), 1);
    // The provider's webhook settles it; a final request cannot be resolved again.
    let event = format!(
        r#"{{"id":"evt_rf_manual","type":"refund.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":400,"currency":"USD","refund_id":"re_manual"}}}}"#
    );
    let (status, _, ack) = answer(app.deliver(ACME, "evt_rf_manual", &event).await).await;
    assert_eq!(status, 200, "{ack}");
    assert_eq!(refund_status(&app.db, order_id).await, ["succeeded"]);
    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "declined", "message": "no refund at the provider"}),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(json(&body)["error"], "refund_not_resolvable");
    // The trail: the one resolution that happened, by the bootstrap token, with what the person
    // found; the refused second one wrote nothing.
    let rows = audit_rows(&app.db, "refund_request.resolve").await;
    assert_eq!(rows.len(), 1);
    let (actor, role, target, outcome, changes) = &rows[0];
    assert_eq!((actor.as_str(), role.as_str()), ("bootstrap", "admin"));
    assert_eq!(
        target.as_deref(),
        Some(format!("refund_request:{request_id}").as_str())
    );
    assert_eq!(outcome, "pending");
    assert_eq!(changes["resolution"], "accepted");
    assert_eq!(changes["provider_refund_id"], "re_manual");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_who_finds_no_refund_at_the_provider_releases_the_reserved_amount() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Fail500]);
    let (status, _) = send_for_status(&app, &token, order_id, "old", 1000).await;
    assert_eq!(status, 503);
    app.db
        .execute(
            "UPDATE refund_requests SET created_at = now() - interval '21 hours', \
             next_attempt_at = now()",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(recover_once(&app).await, (0, 1));
    let request_id = request_id_of(&app, order_id).await;
    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "declined", "message": "no such refund at the provider"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["status"], "failed", "{body}");
    let (status, _, body) = send(&app, &token, order_id, "old", 1000).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(json(&body)["error"], "provider_declined");
    // The whole amount is refundable again, under a new key.
    let (status, _, body) = send(&app, &token, order_id, "new", 1000).await;
    assert_eq!(status, 202, "{body}");
}

// ---------------------------------------------------------------------------------------
// 3. The recoverer round-robins with backoff; a crashed holder is not starved
// ---------------------------------------------------------------------------------------

/// `n` more orders of merchant 42 on `gateway`'s database, each paid through `acme`.
async fn paid_orders(gateway_address: &str, db: &tokio_postgres::Client, n: usize) -> Vec<i64> {
    let client = reqwest::Client::new();
    let mut orders = Vec::with_capacity(n);
    for _ in 0..n {
        let order_id: i64 = db
            .query_one(
                "INSERT INTO orders (user_id, amount_minor, currency) VALUES (42, 1000, 'USD') RETURNING id",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let body = canonical_payment(order_id, 1000);
        let event = format!("evt_pay_{order_id}");
        let mut request = client
            .post(format!("{gateway_address}/v1/callbacks/{ACME}"))
            .body(body.clone());
        for (name, value) in sign::sign_now(ACME, &event, &body) {
            request = request.header(name, value);
        }
        assert_eq!(request.send().await.unwrap().status(), 200);
        orders.push(order_id);
    }
    orders
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_150_rate_limited_refunds_a_crashed_holders_refund_finishes_and_retries_back_off() {
    const LIMITED: usize = 150;
    let provider = FakeProvider::start().await;
    let (mut gateway, token, crash_order) = gateway_with_paid_order(&provider, 1).await;
    let db = connect(&gateway.database_url).await;
    let orders = paid_orders(&gateway.address(), &db, LIMITED).await;
    // Until the restart the test holds the recoverer's lock, as another gateway would, so the
    // first gateway's recoverer retries none of the 150 while they are being sent (under load
    // that takes longer than their first backoff) nor is calling for one of them when it is
    // killed: such a call would make a second crashed holder, retried at its lease rather than
    // its backoff. The restart then finds what this test is about, and only that.
    let recoverer_lock = connect(&gateway.database_url).await;
    recoverer_lock
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&recover::RECOVERER_LOCK_KEY],
        )
        .await
        .unwrap();

    // 150 refunds the provider rate-limits: each answered 503, each left processing.
    provider.otherwise(Behavior::RateLimit);
    let client = reqwest::Client::new();
    for (i, order_id) in orders.iter().enumerate() {
        let (status, _, body) = answer(
            post_refund(
                &client,
                &gateway.address(),
                &token,
                *order_id,
                &format!("limited-{i}"),
                &refund_body(300),
            )
            .await,
        )
        .await;
        assert_eq!(status, 503, "{body}");
    }
    // One more whose gateway dies while the provider makes it (the answer is lost).
    kill_during_the_provider_call(&provider, &mut gateway, &token, crash_order).await;
    let crash_payment = format!("pay_{crash_order}");
    assert_eq!(
        provider.calls().len(),
        LIMITED + 1,
        "before the restart the provider saw one call per refund"
    );
    recoverer_lock
        .execute(
            "SELECT pg_advisory_unlock($1)",
            &[&recover::RECOVERER_LOCK_KEY],
        )
        .await
        .unwrap();
    let restarted = provider.calls().len();

    // The restarted gateway's recoverer (every second) must finish the crashed one, whatever
    // the 150 others do; before the fix they took every pass and it never came up.
    until("the crashed holder's refund to finish", async || {
        let status: String = db
            .query_one(
                "SELECT k.status FROM idempotency_keys k JOIN refund_requests r \
                 ON r.idempotency_record_id = k.id WHERE r.order_id = $1",
                &[&crash_order],
            )
            .await
            .unwrap()
            .get(0);
        let calls = provider.calls().len() - restarted;
        assert!(
            status == "succeeded" || calls <= 3 * LIMITED,
            "the crashed holder's refund waited behind {calls} retries of the others"
        );
        status == "succeeded"
    })
    .await;
    let finished_after = provider.calls().len() - restarted;
    assert_eq!(refund_status(&db, crash_order).await, ["pending"]);
    let crash_key = provider.calls_for(&crash_payment)[0]
        .idempotency_key
        .clone()
        .expect("the crashed request's provider key");
    assert_eq!(
        provider.refunds_created(),
        1,
        "only the crashed one was ever made"
    );

    // Let the others be retried a few times: every key is retried no sooner than its backoff,
    // which doubles from the recover interval (1 s here).
    until("a rate-limited refund's third call", async || {
        let mut per_key: HashMap<String, usize> = HashMap::new();
        for call in provider.calls() {
            *per_key
                .entry(call.idempotency_key.unwrap_or_default())
                .or_default() += 1;
        }
        per_key.values().any(|&n| n >= 3)
    })
    .await;
    let calls = provider.calls();
    let mut by_key: HashMap<String, Vec<std::time::Instant>> = HashMap::new();
    for call in &calls {
        let key = call.idempotency_key.clone().unwrap_or_default();
        if key != crash_key {
            by_key.entry(key).or_default().push(call.at);
        }
    }
    assert_eq!(by_key.len(), LIMITED);
    for (key, times) in &by_key {
        for (n, pair) in times.windows(2).enumerate() {
            let gap = pair[1] - pair[0];
            let backoff = Duration::from_secs(1 << n);
            assert!(
                gap >= backoff,
                "{key}: retry {} came {gap:?} after the one before, within its backoff {backoff:?}",
                n + 1
            );
        }
    }
    let span = calls.last().unwrap().at - calls[restarted].at;
    eprintln!(
        "recoverer: the crashed refund finished after {finished_after} provider calls; \
         {} calls in {span:?} after the restart ({:.1}/s) for {LIMITED} rate-limited refunds",
        calls.len() - restarted,
        (calls.len() - restarted) as f64 / span.as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------
// 4. A provider answer PostgreSQL cannot store
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_id_with_a_nul_goes_to_a_person_instead_of_a_call_at_every_lease() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::AcceptAs("re_\u{0}odd")]);
    let (status, _, body) = send(&app, &token, order_id, "nul", 500).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(json(&body)["error"], "refund_needs_review", "{body}");
    // Neither a client retry nor the recoverer calls the provider again.
    let (status, _, _) = send(&app, &token, order_id, "nul", 500).await;
    assert_eq!(status, 409);
    backoff_over(&app.db).await;
    assert_eq!(recover_once(&app).await, (0, 1));
    assert_eq!(provider.calls().len(), 1);
    let request_id = request_id_of(&app, order_id).await;
    let listed = attention_refunds(&app).await;
    let item = listed
        .iter()
        .find(|r| r["refund_request_id"] == request_id)
        .unwrap_or_else(|| panic!("not in attention: {listed:?}"));
    assert_eq!(item["reason"], "unusable_provider_answer", "{item}");
    // The amount stays reserved: the provider may have refunded it.
    let (status, _, body) = send(&app, &token, order_id, "more", 600).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(json(&body)["error"], "amount_exceeds_refundable");
}

/// Issue 37, finding 5: a provider answer is read to 64 KiB, never whole. A 2xx that never
/// ends is cut there (the connection dropped) and goes to a person, as an answer the gateway
/// cannot use: the refund may exist, and asking again would get the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_answer_that_never_ends_is_cut_at_64_kib_and_goes_to_a_person() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Endless]);
    let (status, _, body) = send(&app, &token, order_id, "endless", 500).await;
    assert_eq!(
        (status, json(&body)["error"].as_str()),
        (409, Some("refund_needs_review")),
        "{body}"
    );
    // The gateway hung up once it had read its bound, rather than reading on until its timeout.
    crate::support::until("the provider to see the gateway hang up", async || {
        provider.endless().1 == 1
    })
    .await;
    let (written, _) = provider.endless();
    assert!(
        written < 16 * 1024 * 1024,
        "the provider wrote {written} bytes before the gateway hung up"
    );
    let request_id = request_id_of(&app, order_id).await;
    let listed = attention_refunds(&app).await;
    let item = listed
        .iter()
        .find(|r| r["refund_request_id"] == request_id)
        .unwrap_or_else(|| panic!("not in attention: {listed:?}"));
    assert_eq!(item["reason"], "unusable_provider_answer", "{item}");
    assert_eq!(provider.calls().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_message_with_a_nul_is_stored_cleaned() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Decline(400, "charge\u{0} already refunded")]);
    let (status, _, body) = send(&app, &token, order_id, "nul", 500).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(json(&body)["error"], "provider_declined");
    assert!(
        json(&body)["message"]
            .as_str()
            .is_some_and(|m| m.contains("charge\u{fffd} already refunded")),
        "{body}"
    );
    let (status, replayed, again) = send(&app, &token, order_id, "nul", 500).await;
    assert_eq!((status, replayed, again), (422, true, body));
    assert_eq!(refund_status(&app.db, order_id).await, ["failed"]);
}

// ---------------------------------------------------------------------------------------
// 9. Pending requests whose webhook never came
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_refund_whose_webhook_is_overdue_is_in_attention() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    let (status, _, body) = send(&app, &token, order_id, "quiet", 500).await;
    assert_eq!(status, 202, "{body}");
    let request_id = request_id_of(&app, order_id).await;
    assert!(
        attention_refunds(&app)
            .await
            .iter()
            .all(|r| r["refund_request_id"] != request_id),
        "a fresh pending request is not a problem yet"
    );
    // The default threshold is 24 hours.
    app.db
        .execute(
            "UPDATE refund_requests SET updated_at = now() - interval '25 hours'",
            &[],
        )
        .await
        .unwrap();
    let listed = attention_refunds(&app).await;
    let item = listed
        .iter()
        .find(|r| r["refund_request_id"] == request_id)
        .unwrap_or_else(|| panic!("an overdue pending request is not in attention: {listed:?}"));
    assert_eq!(item["status"], "pending");
    assert_eq!(item["reason"], "webhook_overdue");
    assert_eq!(item["amount_minor"], 500);
}

// ---------------------------------------------------------------------------------------
// From the review: refund ids in use, operators' mistakes, credentials, client retries
// ---------------------------------------------------------------------------------------

/// (id, review_reason, attempts, lease live) of the newest refund request.
async fn last_request(app: &TestApp) -> (i64, Option<String>, i32, bool) {
    let row = app
        .db
        .query_one(
            "SELECT r.id, r.review_reason, r.attempts, coalesce(k.locked_until > now(), false) \
             FROM refund_requests r JOIN idempotency_keys k ON k.id = r.idempotency_record_id \
             ORDER BY r.id DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2), row.get(3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_id_another_request_holds_goes_to_a_person_instead_of_a_503_loop() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    // A provider that answers a second refund with the first one's id.
    provider.script(&[Behavior::AcceptAs("re_same"), Behavior::AcceptAs("re_same")]);
    let (status, body) = send_for_status(&app, &token, order_id, "a", 300).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = send_for_status(&app, &token, order_id, "b", 300).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(json(&body)["reason"], "refund_id_in_use", "{body}");
    let (_, reason, _, live) = last_request(&app).await;
    assert_eq!((reason.as_deref(), live), (Some("refund_id_in_use"), false));
    assert_eq!(recover_once(&app).await, (0, 1));
    assert_eq!(provider.calls().len(), 2, "the provider was called again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_who_pastes_another_requests_refund_id_gets_a_422_and_can_correct_it_at_once() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    let (status, body) = send_for_status(&app, &token, order_id, "first", 300).await;
    assert_eq!(status, 202, "{body}");
    let taken = json(&body)["provider_refund_id"]
        .as_str()
        .unwrap()
        .to_owned();
    provider.script(&[Behavior::Fail500]);
    let (status, body) = send_for_status(&app, &token, order_id, "second", 300).await;
    assert_eq!(status, 503, "{body}");
    let (request_id, ..) = last_request(&app).await;

    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "accepted", "provider_refund_id": taken}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(json(&body)["error"], "invalid_resolution");
    // Nothing of the refused resolution stays: the correct one is taken at once.
    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "declined", "message": "no refund at the provider"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistyped_refund_id_in_a_resolution_is_corrected_and_settles_with_the_webhook() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.script(&[Behavior::Fail500]);
    let (status, body) = send_for_status(&app, &token, order_id, "k", 400).await;
    assert_eq!(status, 503, "{body}");
    let (request_id, ..) = last_request(&app).await;
    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "accepted", "provider_refund_id": "re_typo"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The provider's webhook for the real refund posts, but matches no request.
    let event = format!(
        r#"{{"id":"evt_rf_real","type":"refund.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":400,"currency":"USD","refund_id":"re_real"}}}}"#
    );
    let (status, _, ack) = answer(app.deliver(ACME, "evt_rf_real", &event).await).await;
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );
    assert_eq!(refund_status(&app.db, order_id).await, ["pending"]);
    // The correction finds the refund in the ledger and settles the request at once.
    let (status, body) = resolve(
        &app,
        request_id,
        json_value!({"outcome": "accepted", "provider_refund_id": "re_real"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["status"], "succeeded", "{body}");
    // The 400 counts once: the remaining 600 are refundable.
    let (status, body) = send_for_status(&app, &token, order_id, "rest", 600).await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_401_is_an_unknown_outcome_not_the_merchants_decline() {
    let provider = FakeProvider::start().await;
    // The gateway's api_key is not the one the provider knows.
    let config = crate::support::refund_config(&provider.base_url, "").replace(
        crate::support::provider::PROVIDER_API_KEY,
        "sk_test_rotated_refunds_key_000",
    );
    let app = crate::support::spawn_app_with(&config).await;
    let token = app.token_for(crate::support::MERCHANT).await;
    let order_id = paid_order(&app, 1000).await;
    let (status, body) = send_for_status(&app, &token, order_id, "k401", 500).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(refund_status(&app.db, order_id).await, ["processing"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_retrying_a_rate_limited_refund_waits_for_its_backoff() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    provider.otherwise(Behavior::RateLimit);
    for _ in 0..10 {
        let response = post_refund(
            &app.client,
            &app.address,
            &token,
            order_id,
            "hammer",
            &refund_body(500),
        )
        .await;
        let retry_after: u64 = response
            .headers()
            .get("Retry-After")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .expect("a 503 without Retry-After");
        let (status, _, body) = answer(response).await;
        assert_eq!(status, 503, "{body}");
        assert!(retry_after >= 1, "{retry_after}");
    }
    assert_eq!(
        provider.calls().len(),
        1,
        "retries within the backoff called a rate-limiting provider"
    );
    let (_, _, attempts, _) = last_request(&app).await;
    assert_eq!(attempts, 1, "a refused retry pushed the backoff further");
    // Once the backoff is over, the next retry calls again (and doubles the backoff).
    backoff_over(&app.db).await;
    send_for_status(&app, &token, order_id, "hammer", 500).await;
    assert_eq!(provider.calls().len(), 2);
    assert_eq!(last_request(&app).await.2, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_kept_for_its_ttl_after_its_request_became_final_then_cleaned() {
    let provider = FakeProvider::start().await;
    let (app, token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    let (status, body) = send_for_status(&app, &token, order_id, "done", 400).await;
    assert_eq!(status, 202, "{body}");
    let refund_id = json(&body)["provider_refund_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let event = format!(
        r#"{{"id":"evt_rf_done","type":"refund.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":400,"currency":"USD","refund_id":"{refund_id}"}}}}"#
    );
    let (status, _, ack) = answer(app.deliver(ACME, "evt_rf_done", &event).await).await;
    assert_eq!(status, 200, "{ack}");
    assert_eq!(refund_status(&app.db, order_id).await, ["succeeded"]);
    // The record expired while the request was pending; the request became final just now.
    app.db
        .execute(
            "UPDATE idempotency_keys SET created_at = now() - interval '100 hours', \
             expires_at = now() - interval '28 hours' WHERE op = 'refund.create'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        cleanup_once(&app).await,
        0,
        "cleaned right after the request became final"
    );
    // Its ttl (72 h) after it became final, it goes.
    app.db
        .execute(
            "UPDATE refund_requests SET updated_at = now() - interval '73 hours'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(cleanup_once(&app).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attention_list_of_refund_requests_reads_its_partial_index_at_200k_requests() {
    let provider = FakeProvider::start().await;
    let (app, _token) = refund_app(&provider).await;
    let order_id = paid_order(&app, 1000).await;
    // 200,000 requests, nearly all settled; a few failed, pending or processing.
    app.db
        .batch_execute(&format!(
            "INSERT INTO refund_requests (merchant_id, order_id, provider, payment_id, amount_minor, \
               currency, status, provider_idempotency_key, updated_at) \
             SELECT 42, {order_id}, 'acme', 'pay_{order_id}', 1, 'USD', \
                    CASE WHEN g % 1000 = 0 THEN 'failed' WHEN g % 1000 = 1 THEN 'pending' \
                         WHEN g % 1000 = 2 THEN 'processing' ELSE 'succeeded' END, \
                    'key-' || g, now() - g * interval '1 minute' \
             FROM generate_series(1, 200000) g; \
             ANALYZE refund_requests;"
        ))
        .await
        .unwrap();
    let sql = callback_gateway::refunds::model::ATTENTION_SQL
        .replace("$1", "50")
        .replace("$2", "86400");
    let plan = app.explain(&sql).await;
    println!("{plan}");
    assert!(
        plan.contains("idx_refund_requests_attention")
            && !plan.contains("Seq Scan on refund_requests"),
        "{plan}"
    );
    // 600 qualify (failed, processing without a lease, pending for over a day): one page.
    let listed = attention_refunds(&app).await;
    assert_eq!(
        listed.len() as i64,
        callback_gateway::routes::event_log::ATTENTION_LIMIT
    );
    assert!(
        listed.iter().all(|r| r["status"] != "succeeded"),
        "{listed:?}"
    );
}
