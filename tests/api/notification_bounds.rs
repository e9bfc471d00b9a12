//! What bounds the notification table and the work around it (issue 37, finding 4): what a
//! disabled endpoint keeps, how fast an enabled one gets its backlog, how much of a range one
//! redelivery takes, and what the backlog gauge reads. (Failed rows under retention:
//! notifications::delivered_and_failed_notifications_are_deleted_after_their_retention_...)

use callback_gateway::notifications::model::{self, BACKLOG_EXACT};
use callback_gateway::notifications::retention;

use crate::notifications::{admin_post, notify_config, urlencode};
use crate::support::gateway::GatewayProcess;
use crate::support::receiver::{MERCHANT_WHSEC, Receiver};
use crate::support::{TestApp, metric_sample, spawn_app_with, until};

/// Merchant 42's endpoint disabled (it answered 410), with `n` pending notifications staged one
/// a second apart, the first an hour ago; their ids, oldest first.
async fn disabled_with_pending(app: &TestApp, n: i32) -> Vec<i64> {
    app.db
        .execute(
            "INSERT INTO notification_endpoints (merchant_id, disabled_at, disabled_reason) \
             VALUES (42, now(), 'gone')",
            &[],
        )
        .await
        .unwrap();
    app.db
        .query(
            "INSERT INTO merchant_notifications (merchant_id, kind, object_status, created_at, next_attempt_at) \
             SELECT 42, 'order.paid', 'paid-' || g, now() - interval '1 hour' + g * interval '1 second', \
                    now() - interval '1 hour' + g * interval '1 second' \
             FROM generate_series(1, $1) g ORDER BY g RETURNING id",
            &[&n],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn pending_ids(app: &TestApp) -> Vec<i64> {
    app.db
        .query(
            "SELECT id FROM merchant_notifications WHERE merchant_id = 42 AND status = 'pending' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_endpoint_keeps_its_newest_pending_up_to_the_bound_and_counts_what_went() {
    let receiver = Receiver::start(MERCHANT_WHSEC).await;
    let app = spawn_app_with(&notify_config(&receiver.url, "disabled_keep = 5")).await;
    let ids = disabled_with_pending(&app, 12).await;
    let mut conn = callback_gateway::db::connect(&app.database_url)
        .await
        .unwrap();
    let keep = retention::Keep::of(&app.settings);
    let removed = retention::run_pass(&mut conn, &keep, 2).await.unwrap();
    assert_eq!(removed.dropped, 7);
    assert_eq!(pending_ids(&app).await, ids[7..], "the newest 5 are kept");
    assert_eq!(
        app.count("SELECT dropped FROM notification_endpoints WHERE merchant_id = 42")
            .await,
        7
    );
    // Nothing more goes while it stays at the bound.
    let again = retention::run_pass(&mut conn, &keep, 2).await.unwrap();
    assert_eq!(again.dropped, 0);
    // The console's notifications page shows it beside the disabled endpoint.
    let cookie = crate::console::session_cookie(&app, &crate::console::no_redirects()).await;
    let page = app
        .client
        .get(app.url("/console/notifications"))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains(r#"<td class="dropped">7</td>"#),
        "the dropped count on the console: {page}"
    );
    // Enabled again: what is left goes out, and the count is in the answer.
    let (status, enabled) = admin_post(&app, "/admin/merchants/42/endpoint/enable").await;
    assert_eq!(status, 200, "{enabled}");
    assert_eq!(enabled["pending"], 5);
    assert_eq!(enabled["endpoints"][0]["dropped"], 7);
    receiver.until_delivered(5).await;
    // An endpoint that is not disabled keeps every pending row, however many.
    let db = &app.db;
    db.batch_execute(
        "INSERT INTO merchant_notifications (merchant_id, kind, object_status, next_attempt_at) \
         SELECT 42, 'order.paid', 'later', now() + interval '1 hour' FROM generate_series(1, 9)",
    )
    .await
    .unwrap();
    assert_eq!(
        retention::run_pass(&mut conn, &keep, 2)
            .await
            .unwrap()
            .dropped,
        0
    );
}

/// `serve` runs the pass (every `cleanup_interval_secs`) and counts what it dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_trims_a_disabled_endpoints_backlog_and_counts_it_in_its_metrics() {
    let receiver = Receiver::start(MERCHANT_WHSEC).await;
    let extra = format!(
        "{}\n[idempotency]\ncleanup_interval_secs = 1\n",
        notify_config(&receiver.url, "disabled_keep = 5")
    );
    let gateway = GatewayProcess::spawn(&extra).await;
    let db = crate::support::connect(&gateway.database_url).await;
    db.batch_execute(
        "INSERT INTO notification_endpoints (merchant_id, disabled_at, disabled_reason) VALUES (42, now(), 'gone'); \
         INSERT INTO merchant_notifications (merchant_id, kind, object_status) \
         SELECT 42, 'order.paid', 'paid' FROM generate_series(1, 12)",
    )
    .await
    .unwrap();
    let client = reqwest::Client::new();
    until("serve's retention pass to drop 7", async || {
        let metrics = client
            .get(format!("{}/metrics", gateway.address()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric_sample(&metrics, "gateway_notifications_dropped_total", &[]) == Some(7.0)
    })
    .await;
    let kept: i64 = db
        .query_one(
            "SELECT count(*) FROM merchant_notifications WHERE status = 'pending'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kept, 5);
}

#[tokio::test]
async fn an_endpoint_enabled_again_gets_its_backlog_at_the_release_rate_in_order() {
    // No merchant here has an endpoint, so no sender claims the rows while the test reads.
    let app = crate::support::spawn_app().await;
    let ids = disabled_with_pending(&app, 30).await;
    let mut conn = callback_gateway::db::connect(&app.database_url)
        .await
        .unwrap();
    let enabled = callback_gateway::notifications::admin::enable(
        &mut conn,
        42,
        10,
        &callback_gateway::access::command_line(),
    )
    .await
    .unwrap();
    assert_eq!(enabled.pending, 30);
    assert_eq!(
        app.count("SELECT count(*) FROM notification_endpoints WHERE disabled_at IS NULL")
            .await,
        1
    );
    // Due 100 ms apart from the enable on, in the order they were due.
    let rows = app
        .db
        .query(
            "SELECT id, (extract(epoch FROM next_attempt_at - min(next_attempt_at) OVER ()) * 1000)::bigint, \
                    min(next_attempt_at) OVER () <= now() \
             FROM merchant_notifications WHERE merchant_id = 42 ORDER BY next_attempt_at, id",
            &[],
        )
        .await
        .unwrap();
    let due: Vec<(i64, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(i64, i64)> = ids
        .iter()
        .enumerate()
        .map(|(k, id)| (*id, 100 * k as i64))
        .collect();
    assert_eq!(due, expected);
    assert!(rows[0].get::<_, bool>(2), "the first is due at once");
}

#[tokio::test]
async fn a_range_redelivery_takes_at_most_its_limit_per_call_and_a_cursor_goes_on() {
    let receiver = Receiver::start(MERCHANT_WHSEC).await;
    let app = spawn_app_with(&notify_config(&receiver.url, "")).await;
    // Disabled, so that what is redelivered stays pending for the test to count.
    let ids = disabled_with_pending(&app, 25).await;
    app.db
        .execute(
            "UPDATE merchant_notifications SET status = 'failed', attempts = 8, last_error = 'HTTP 500' \
             WHERE id = ANY($1)",
            &[&ids[..12].to_vec()],
        )
        .await
        .unwrap();
    let since = urlencode(&(chrono::Utc::now() - chrono::Duration::hours(2)).to_rfc3339());
    let mut parts = Vec::new();
    let mut path = format!("/admin/merchants/42/notifications/redeliver?since={since}&limit=10");
    loop {
        let (status, part) = admin_post(&app, &path).await;
        assert_eq!(status, 202, "{part}");
        parts.push(part["redelivered"].as_i64().unwrap());
        match part["next_cursor"].as_str() {
            Some(cursor) => {
                path = format!(
                    "/admin/merchants/42/notifications/redeliver?since={since}&limit=10&cursor={cursor}"
                )
            }
            None => break,
        }
    }
    assert_eq!(parts, [10, 10, 5]);
    assert_eq!(pending_ids(&app).await, ids);
    assert_eq!(
        app.count(
            "SELECT count(*) FROM merchant_notifications WHERE attempts = 0 AND last_error IS NULL"
        )
        .await,
        25,
        "each redelivered once, from its first attempt"
    );
    for bad in ["limit=0", "limit=10001", "cursor=abc"] {
        let (status, error) = admin_post(
            &app,
            &format!("/admin/merchants/42/notifications/redeliver?since={since}&{bad}"),
        )
        .await;
        assert_eq!(
            (status, error["error"].as_str()),
            (400, Some("invalid_query")),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn the_backlog_gauge_counts_at_most_10_000_rows_estimates_beyond_and_finds_the_oldest() {
    let app = crate::support::spawn_app().await;
    // A few rows: counted exactly; the oldest is a retried one (due later, staged first).
    app.db
        .batch_execute(
            "INSERT INTO merchant_notifications (merchant_id, kind, object_status, created_at, next_attempt_at, last_error) VALUES \
               (42, 'order.paid', 'retried', now() - interval '2 hours', now() + interval '1 hour', 'HTTP 500'), \
               (42, 'order.paid', 'fresh', now() - interval '1 minute', now() - interval '1 minute', NULL), \
               (44, 'order.paid', 'unreached', now() - interval '30 minutes', now() - interval '30 minutes', NULL)",
        )
        .await
        .unwrap();
    let mut conn = callback_gateway::db::connect(&app.database_url)
        .await
        .unwrap();
    let backlog = model::backlog(&mut conn).await.unwrap();
    assert_eq!((backlog.pending, backlog.estimated), (3, false));
    let oldest = backlog.oldest_secs.unwrap();
    assert!((7200.0..7300.0).contains(&oldest), "oldest {oldest}");
    // Without the retried row, the oldest is merchant 44's row that no sender reached.
    app.db
        .batch_execute("DELETE FROM merchant_notifications WHERE object_status = 'retried'")
        .await
        .unwrap();
    let oldest = model::backlog(&mut conn)
        .await
        .unwrap()
        .oldest_secs
        .unwrap();
    assert!((1800.0..1900.0).contains(&oldest), "oldest {oldest}");

    // 25,000 pending rows: the count stops at 10,001 and the index's estimate is taken.
    app.db
        .batch_execute(
            "INSERT INTO merchant_notifications (merchant_id, kind, object_status) \
             SELECT 40 + g % 5, 'order.paid', 'paid' FROM generate_series(1, 24998) g; \
             ANALYZE merchant_notifications",
        )
        .await
        .unwrap();
    let backlog = model::backlog(&mut conn).await.unwrap();
    assert!(backlog.estimated);
    assert!(
        (23_750..=26_250).contains(&backlog.pending),
        "estimate {}",
        backlog.pending
    );
    let plan: Vec<String> = app
        .db
        .query(
            &format!(
                "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) SELECT count(*) FROM (SELECT 1 FROM merchant_notifications WHERE status = 'pending' LIMIT {}) t",
                BACKLOG_EXACT + 1
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Limit (actual rows=10001"),
        "the count reads 10,001 rows at most:\n{plan}"
    );
}

/// A change staged while its endpoint was being deleted (it read the endpoint just before the
/// deletion committed) commits a row no gateway can send: the retention pass sends it where the
/// deletion sent the rest (failed while the merchant has endpoints made by API, to its file
/// endpoint once it has none), fails a file endpoint's row the configuration does not name
/// after the grace, and leaves every other pending row alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_notification_no_gateway_can_send_goes_where_its_endpoints_deletion_sent_the_rest()
 {
    let receiver = Receiver::start(MERCHANT_WHSEC).await;
    let app = spawn_app_with(&notify_config(&receiver.url, "")).await;
    // Merchant 42 has a file endpoint and one made by API (both disabled: nothing is sent
    // during the test); merchant 44 has no endpoint in this configuration.
    app.db
        .batch_execute(
            "INSERT INTO webhook_endpoints (id, merchant_id, url, secret_sealed) \
             VALUES ('ep_00000000000000000000aaaa', 42, 'https://merchant.example/live', '\\x00'); \
             INSERT INTO notification_endpoints (merchant_id, endpoint_id, disabled_at, disabled_reason) \
             VALUES (42, 'ep_00000000000000000000aaaa', now(), 'operator'), \
                    (42, 'file', now(), 'operator'); \
             INSERT INTO merchant_notifications (merchant_id, endpoint_id, kind, object_status, created_at) \
             VALUES (42, 'ep_00000000000000000000dead', 'order.paid', 'paid', now()), \
                    (42, 'ep_00000000000000000000aaaa', 'order.paid', 'paid', now()), \
                    (42, 'file', 'order.paid', 'paid', now()), \
                    (44, 'file', 'order.paid', 'paid', now() - interval '11 minutes'), \
                    (44, 'file', 'order.paid', 'paid', now());",
        )
        .await
        .unwrap();
    let mut conn = callback_gateway::db::connect(&app.database_url)
        .await
        .unwrap();
    let keep = retention::Keep::of(&app.settings);
    let removed = retention::run_pass(&mut conn, &keep, 2).await.unwrap();
    assert_eq!((removed.orphaned, removed.moved), (2, 0));
    let rows = async || -> Vec<(i64, String, String, Option<String>)> {
        app.db
            .query(
                "SELECT merchant_id, endpoint_id, status, last_error FROM merchant_notifications \
                 ORDER BY id",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    };
    let row = |merchant: i64, endpoint: &str, status: &str, error: Option<&str>| {
        (
            merchant,
            endpoint.to_owned(),
            status.to_owned(),
            error.map(str::to_owned),
        )
    };
    assert_eq!(
        rows().await,
        [
            row(
                42,
                "ep_00000000000000000000dead",
                "failed",
                Some("endpoint deleted")
            ),
            row(42, "ep_00000000000000000000aaaa", "pending", None),
            row(42, "file", "pending", None),
            row(44, "file", "failed", Some("no endpoint")),
            row(44, "file", "pending", None),
        ]
    );
    // Its last endpoint made by API deleted, merchant 42's stray row goes to its file endpoint.
    app.db
        .batch_execute(
            "DELETE FROM webhook_endpoints; \
             UPDATE merchant_notifications SET endpoint_id = 'file' \
             WHERE endpoint_id = 'ep_00000000000000000000aaaa'; \
             INSERT INTO merchant_notifications (merchant_id, endpoint_id, kind, object_status) \
             VALUES (42, 'ep_00000000000000000000aaaa', 'order.refunded', 'refunded');",
        )
        .await
        .unwrap();
    let removed = retention::run_pass(&mut conn, &keep, 2).await.unwrap();
    assert_eq!((removed.orphaned, removed.moved), (0, 1));
    assert_eq!(rows().await.last(), Some(&row(42, "file", "pending", None)));
}
