//! A commit that waits for the synchronous standby, on a cluster of the test's own whose
//! `synchronous_standby_names` names a standby that never comes (`'ghost'`): every commit
//! waits as it would behind a stalled standby. First what PostgreSQL 15 itself does (the
//! facts the gateway's design rests on), then what the gateway answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::refunds::{json, paid_order, post_refund, refund_body};
use crate::support::cluster::Cluster;
use crate::support::provider::{Behavior, FakeProvider};
use crate::support::simulator::Event;
use crate::support::{
    ACME, MERCHANT, answer, config_with, connect, insert_orders, refund_config, spawn_app_on,
};

/// A client whose notices are kept (tokio-postgres hands them to whoever drives the connection).
async fn client_with_notices(url: &str) -> (tokio_postgres::Client, Arc<Mutex<Vec<String>>>) {
    let (client, mut connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    let notices = Arc::new(Mutex::new(Vec::new()));
    let kept = notices.clone();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notice(notice) = message {
                kept.lock().unwrap().push(format!(
                    "{} {} {}",
                    notice.severity(),
                    notice.code().code(),
                    notice.message()
                ));
            }
        }
    });
    (client, notices)
}

async fn scalar(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
}

/// Polls until `n` backends wait for the synchronous standby, each for at least `for_ms`.
async fn until_waiting_for_the_standby(db: &tokio_postgres::Client, n: i64, for_ms: i64) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' \
         AND now() - state_change > interval '{for_ms} milliseconds'"
    );
    let started = std::time::Instant::now();
    while scalar(db, &sql).await < n {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{n} commits did not wait for the standby"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_keeps_a_commit_waiting_past_statement_timeout_and_a_cancel_commits_it_locally_with_only_a_warning()
 {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let url = cluster.url("postgres");
    let watcher = connect(&url).await;
    watcher
        .batch_execute("CREATE TABLE t (x int)")
        .await
        .unwrap();
    cluster.set_synchronous_standby_names("ghost").await;

    // Three ways of committing, each with a 200 ms statement timeout: an autocommit statement
    // over the simple protocol, one over the extended protocol (Parse/Bind/Execute/Sync, as
    // the gateway's prepared statements), and an explicit COMMIT (as diesel's transactions).
    let (simple, simple_notices) = client_with_notices(&url).await;
    let (extended, _) = client_with_notices(&url).await;
    let (explicit, _) = client_with_notices(&url).await;
    for client in [&simple, &extended, &explicit] {
        client
            .batch_execute("SET statement_timeout = 200")
            .await
            .unwrap();
    }
    explicit
        .batch_execute("BEGIN; INSERT INTO t VALUES (3)")
        .await
        .unwrap();
    let simple = Arc::new(simple);
    let extended = Arc::new(extended);
    let explicit = Arc::new(explicit);
    let pid = |client: Arc<tokio_postgres::Client>| async move {
        client
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get::<_, i32>(0)
    };
    let (simple_pid, extended_pid) = (pid(simple.clone()).await, pid(extended.clone()).await);
    let simple_commit = tokio::spawn({
        let c = simple.clone();
        async move { c.batch_execute("INSERT INTO t VALUES (1)").await }
    });
    let extended_commit = tokio::spawn({
        let c = extended.clone();
        async move { c.execute("INSERT INTO t VALUES ($1)", &[&2i32]).await }
    });
    let explicit_commit = tokio::spawn({
        let c = explicit.clone();
        async move { c.batch_execute("COMMIT").await }
    });

    // Five times the statement timeout later, all three still wait: statement_timeout is
    // disabled before the commit (postgres.c finish_xact_command) and does not cancel it.
    until_waiting_for_the_standby(&watcher, 3, 1000).await;
    assert!(
        !simple_commit.is_finished()
            && !extended_commit.is_finished()
            && !explicit_commit.is_finished(),
        "a commit waiting for the standby returned"
    );
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM t").await,
        0,
        "a waiting commit is not visible yet"
    );

    // A cancel ends the wait: the commit is reported as a success with only a WARNING, and
    // the row is visible although no standby ever had it.
    watcher
        .execute("SELECT pg_cancel_backend($1)", &[&simple_pid])
        .await
        .unwrap();
    simple_commit
        .await
        .unwrap()
        .expect("a cancelled wait is reported as a successful commit");
    let notices = simple_notices.lock().unwrap().clone();
    assert!(
        notices.iter().any(|n| n.starts_with("WARNING 01000")),
        "the cancelled wait only warns: {notices:?}"
    );
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM t WHERE x = 1").await,
        1
    );

    // A terminate ends the connection without an answer; the row is committed all the same.
    watcher
        .execute("SELECT pg_terminate_backend($1)", &[&extended_pid])
        .await
        .unwrap();
    assert!(
        extended_commit.await.unwrap().is_err(),
        "a terminated wait gives the client an error, not an answer"
    );
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM t WHERE x = 2").await,
        1
    );

    // The standby "comes back": the explicit COMMIT, still waiting, finishes.
    cluster.set_synchronous_standby_names("").await;
    explicit_commit.await.unwrap().unwrap();
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM t WHERE x = 3").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_whose_wait_for_the_standby_is_cancelled_gets_503_and_is_replayed_only_once_the_standby_confirms()
 {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let url = cluster.migrated_database("gateway").await;
    let app = spawn_app_on(
        &url,
        &config_with(
            &url,
            "[database]\nstatement_timeout_ms = 500\ncommit_timeout_ms = 3000\n",
        ),
    )
    .await;
    let orders = insert_orders(&app.db, 2).await;
    // A capture takes the one-statement path (its commit ends the statement); a failed
    // payment takes the general path (BEGIN .. COMMIT).
    let capture = Event::payment("evt_capture_cancelled", orders[0].0, orders[0].1);
    let failed = Event {
        body: format!(
            r#"{{"id":"evt_failed_cancelled","type":"payment.failed","data":{{"payment_id":"pay_f","order_id":{},"amount_minor":{},"currency":"USD"}}}}"#,
            orders[1].0, orders[1].1
        ),
        id: "evt_failed_cancelled".into(),
        ..capture.clone()
    };
    let watcher = connect(&url).await;
    cluster.set_synchronous_standby_names("ghost").await;

    let app = Arc::new(app);
    let send = |event: Event| {
        let app = app.clone();
        tokio::spawn(async move { answer(app.deliver(ACME, &event.id, &event.body).await).await })
    };
    let (capture_answer, failed_answer) = (send(capture.clone()), send(failed.clone()));
    until_waiting_for_the_standby(&watcher, 2, 0).await;
    // An operator (or anything) cancels the waits: PostgreSQL commits both locally.
    watcher
        .batch_execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        )
        .await
        .unwrap();
    for (what, answered) in [
        ("capture", capture_answer),
        ("failed payment", failed_answer),
    ] {
        let (status, _, body) = answered.await.unwrap();
        assert_eq!(
            status, 503,
            "the {what} whose wait for the standby was cancelled must not be acknowledged: {body}"
        );
    }
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM idempotency_keys").await,
        2,
        "both records are committed locally (visible, on one node only)"
    );

    // The provider retries: the stored acks are not replayed while the standby cannot
    // confirm them.
    for event in [&capture, &failed] {
        let (status, _, body) = answer(app.deliver(ACME, &event.id, &event.body).await).await;
        assert_eq!(
            status, 503,
            "a replay of an unconfirmed record must wait for the standby: {body}"
        );
    }

    // The standby is back: the same retries replay the stored acks, posted once.
    cluster.set_synchronous_standby_names("").await;
    for event in [&capture, &failed] {
        let (status, replayed, body) =
            answer(app.deliver(ACME, &event.id, &event.body).await).await;
        assert_eq!((status, replayed), (200, true), "{body}");
    }
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM ledger_transfers").await,
        1,
        "the capture is posted once"
    );
}

/// Cancels every commit that waits for the standby: PostgreSQL commits each locally.
async fn cancel_the_waits(watcher: &tokio_postgres::Client) {
    watcher
        .batch_execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
        )
        .await
        .unwrap();
}

/// The gateway on a migrated database of a cluster of the test's own (the standby settings
/// are the cluster's), with a 3 s commit bound.
async fn gateway_on_own_cluster(extra: &str) -> (Arc<Cluster>, crate::support::TestApp) {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let url = cluster.migrated_database("gateway").await;
    let config = config_with(
        &url,
        &format!("[database]\ncommit_timeout_ms = 3000\n{extra}"),
    );
    let app = spawn_app_on(&url, &config).await;
    (cluster, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_whose_wait_for_the_standby_is_cancelled_gets_503_and_is_replayed_only_once_the_standby_confirms()
 {
    let (cluster, app) = gateway_on_own_cluster("").await;
    let token = app.token_for(MERCHANT).await;
    let watcher = connect(&app.database_url).await;
    cluster.set_synchronous_standby_names("ghost").await;
    let body = r#"{"amount_minor":2500,"currency":"USD","reference":"cart-sync"}"#;

    let app = Arc::new(app);
    let first = tokio::spawn({
        let (app, token) = (app.clone(), token.clone());
        async move { answer(app.post_order(&token, "order-sync-1", body).await).await }
    });
    until_waiting_for_the_standby(&watcher, 1, 0).await;
    cancel_the_waits(&watcher).await;
    let (status, _, reply) = first.await.unwrap();
    assert_eq!(
        status, 503,
        "an order whose commit was not confirmed must not be answered 201: {reply}"
    );
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM orders").await,
        1,
        "the order is committed locally (visible, on one node only)"
    );

    let (status, _, reply) = answer(app.post_order(&token, "order-sync-1", body).await).await;
    assert_eq!(
        status, 503,
        "the stored 201 is not replayed while the standby cannot confirm it: {reply}"
    );

    cluster.set_synchronous_standby_names("").await;
    let (status, replayed, reply) =
        answer(app.post_order(&token, "order-sync-1", body).await).await;
    assert_eq!((status, replayed), (201, true), "{reply}");
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM orders").await,
        1,
        "one order"
    );
}

/// A refund gateway on a cluster of the test's own (see [`gateway_on_own_cluster`]), with a
/// paid order of 1000; the order's id and the merchant's token.
async fn refund_gateway_on_own_cluster(
    provider: &FakeProvider,
) -> (Arc<Cluster>, Arc<crate::support::TestApp>, i64, String) {
    let (cluster, app) = gateway_on_own_cluster(&refund_config(&provider.base_url, "")).await;
    let token = app.token_for(MERCHANT).await;
    let order_id = paid_order(&app, 1000).await;
    (cluster, Arc::new(app), order_id, token)
}

async fn refund(app: &crate::support::TestApp, token: &str, order_id: i64) -> (u16, bool, String) {
    answer(
        post_refund(
            &app.client,
            &app.address,
            token,
            order_id,
            "refund-sync-1",
            &refund_body(400),
        )
        .await,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_whose_phase_one_wait_is_cancelled_gets_503_and_the_provider_is_called_only_once_it_is_confirmed()
 {
    let provider = FakeProvider::start().await;
    let (cluster, app, order_id, token) = refund_gateway_on_own_cluster(&provider).await;
    let watcher = connect(&app.database_url).await;
    cluster.set_synchronous_standby_names("ghost").await;

    let first = tokio::spawn({
        let (app, token) = (app.clone(), token.clone());
        async move { refund(&app, &token, order_id).await }
    });
    until_waiting_for_the_standby(&watcher, 1, 0).await;
    cancel_the_waits(&watcher).await;
    let (status, _, reply) = first.await.unwrap();
    assert_eq!(
        status, 503,
        "phase 1 was not confirmed: no provider call, no 202: {reply}"
    );
    assert_eq!(
        provider.calls().len(),
        0,
        "the provider must not be called for a phase 1 a failover could lose"
    );
    assert_eq!(
        scalar(&watcher, "SELECT count(*) FROM refund_requests").await,
        1,
        "phase 1 is committed locally (visible, on one node only)"
    );

    // The client's retry while the standby is away: the request is in flight (its lease),
    // still no provider call.
    let (status, _, reply) = refund(&app, &token, order_id).await;
    assert!(matches!(status, 409 | 503), "{status} {reply}");
    assert_eq!(provider.calls().len(), 0);

    // The standby is back and the lease has run out: the retry takes the request over, the
    // takeover's commit is confirmed, and the provider is called once, under phase 1's key.
    cluster.set_synchronous_standby_names("").await;
    watcher
        .execute(
            "UPDATE idempotency_keys SET locked_until = now() WHERE op = 'refund.create'",
            &[],
        )
        .await
        .unwrap();
    let (status, replayed, reply) = refund(&app, &token, order_id).await;
    assert_eq!((status, replayed), (202, false), "{reply}");
    let calls = provider.calls();
    assert_eq!(calls.len(), 1, "one provider call");
    let key: String = watcher
        .query_one("SELECT provider_idempotency_key FROM refund_requests", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(calls[0].idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(provider.refunds_created(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_whose_phase_three_wait_is_cancelled_gets_503_and_its_202_is_replayed_only_once_confirmed()
 {
    let provider = FakeProvider::start().await;
    let (cluster, app, order_id, token) = refund_gateway_on_own_cluster(&provider).await;
    let watcher = connect(&app.database_url).await;
    provider.script(&[Behavior::Hold]);

    let first = tokio::spawn({
        let (app, token) = (app.clone(), token.clone());
        async move { refund(&app, &token, order_id).await }
    });
    // Phase 1 is confirmed (the provider is being called); phase 3 will wait.
    provider.until_calls(1).await;
    cluster.set_synchronous_standby_names("ghost").await;
    provider.let_go();
    until_waiting_for_the_standby(&watcher, 1, 0).await;
    cancel_the_waits(&watcher).await;
    let (status, _, reply) = first.await.unwrap();
    assert_eq!(
        status, 503,
        "phase 3 was not confirmed: the 202 must not be sent: {reply}"
    );
    assert_eq!(
        scalar(
            &watcher,
            "SELECT count(*) FROM idempotency_keys WHERE op = 'refund.create' AND status <> 'processing'"
        )
        .await,
        1,
        "phase 3 is committed locally (visible, on one node only)"
    );

    let (status, _, reply) = refund(&app, &token, order_id).await;
    assert_eq!(
        status, 503,
        "the stored 202 is not replayed while the standby cannot confirm it: {reply}"
    );

    cluster.set_synchronous_standby_names("").await;
    let (status, replayed, reply) = refund(&app, &token, order_id).await;
    assert_eq!((status, replayed), (202, true), "{reply}");
    assert_eq!(json(&reply)["status"], "pending", "{reply}");
    assert_eq!(provider.calls().len(), 1, "one provider call");
    assert_eq!(provider.refunds_created(), 1);
}
