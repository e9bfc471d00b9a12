//! What the gateway answers while its database changes under it, on a cluster of the test's
//! own: a pooled connection whose node turned read-only (as a demoted primary, or one an
//! operator fenced with `default_transaction_read_only`) is discarded and the pool reconnects
//! without a restart; a commit that outlasts its bound, and a request that finds no pooled
//! connection in time, are refused; a graceful shutdown while a commit waits for the standby
//! answers that commit 503. Every refusal is a 503 with `Retry-After`, never a 2xx or a 500.

use std::sync::Arc;

use crate::support::cluster::Cluster;
use crate::support::simulator::Event;
use crate::support::{ACME, TestApp, config_with, connect, insert_orders, spawn_app_on};

/// Status, `Retry-After` and body of one delivery of `event`.
async fn deliver(app: &TestApp, event: &Event) -> (u16, Option<String>, String) {
    let response = app.deliver(ACME, &event.id, &event.body).await;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("Retry-After")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, retry_after, response.text().await.unwrap())
}

/// Asserts a refusal a provider can act on: 503 with `Retry-After`.
fn assert_retry_later(what: &str, (status, retry_after, body): &(u16, Option<String>, String)) {
    assert_eq!(*status, 503, "{what}: {body}");
    assert!(retry_after.is_some(), "{what}: a 503 without Retry-After");
}

async fn gateway(cluster: &Cluster, extra: &str) -> TestApp {
    let url = cluster.migrated_database("gateway").await;
    spawn_app_on(&url, &config_with(&url, extra)).await
}

/// The server pids of the callback pool's connections.
async fn callback_backends(db: &tokio_postgres::Client) -> Vec<i32> {
    db.query(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'callback-gateway' ORDER BY pid",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

fn payment_failed(id: &str, order: (i64, i64)) -> Event {
    Event {
        body: format!(
            r#"{{"id":"{id}","type":"payment.failed","data":{{"payment_id":"pay_{id}","order_id":{},"amount_minor":{},"currency":"USD"}}}}"#,
            order.0, order.1
        ),
        ..Event::payment(id, order.0, order.1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_connection_on_a_node_turned_read_only_is_discarded_and_the_pool_reconnects_without_a_restart()
 {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    // One callback connection, so the test knows which backend met the read-only node.
    let app = gateway(
        &cluster,
        "[server]\nworkers = 1\n[database]\npool_size = 1\n",
    )
    .await;
    let orders = insert_orders(&app.db, 3).await;
    let warm = deliver(
        &app,
        &Event::payment("evt_before", orders[0].0, orders[0].1),
    )
    .await;
    assert_eq!(warm.0, 200, "{}", warm.2);
    let before = callback_backends(&app.db).await;
    assert_eq!(before.len(), 1, "{before:?}");

    // The node refuses writes now, also in the sessions already open (they take the setting
    // at the reload): every write fails with 25006, as on a demoted primary.
    cluster
        .set_system("default_transaction_read_only", "on")
        .await;
    let capture = Event::payment("evt_during", orders[1].0, orders[1].1);
    let failed = payment_failed("evt_failed_during", orders[2]);
    for event in [&capture, &failed, &capture] {
        let answer = deliver(&app, event).await;
        assert_retry_later("a write on a read-only node", &answer);
    }
    // Closed when the pool next looks at it (a checkout), and the server ends the backend a
    // moment after the socket closes.
    crate::support::until(
        "the connection that met the read-only node to close",
        async || !callback_backends(&app.db).await.contains(&before[0]),
    )
    .await;

    // Writable again (a new primary at the same address): the pool connects anew, no restart.
    cluster
        .set_system("default_transaction_read_only", "off")
        .await;
    for event in [&capture, &failed] {
        let (status, _, body) = deliver(&app, event).await;
        assert_eq!(status, 200, "{body}");
    }
    let after = callback_backends(&app.db).await;
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before, "a new connection serves the callbacks");
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers").await,
        2,
        "the two captures posted once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_past_its_bound_and_a_request_that_finds_no_pooled_connection_get_503_with_retry_after()
 {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let app = Arc::new(
        gateway(
            &cluster,
            "[server]\nworkers = 1\nacquire_timeout_ms = 300\n[database]\npool_size = 1\ncommit_timeout_ms = 2000\n",
        )
        .await,
    );
    let orders = insert_orders(&app.db, 3).await;
    let watcher = connect(&app.database_url).await;
    cluster.set_synchronous_standby_names("ghost").await;

    // The capture's commit waits for a standby that does not come, holding the only
    // callback connection.
    let capture = Event::payment("evt_waits", orders[0].0, orders[0].1);
    let waiting = tokio::spawn({
        let (app, capture) = (app.clone(), capture.clone());
        async move { deliver(&app, &capture).await }
    });
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
    crate::support::until("a commit waiting for the standby", async || {
        watcher.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) >= 1
    })
    .await;

    // Meanwhile no connection is free: a capture and a general-path event time out on the
    // pool.
    let second = Event::payment("evt_no_connection", orders[1].0, orders[1].1);
    let failed = payment_failed("evt_failed_no_connection", orders[2]);
    for event in [&second, &failed] {
        let answer = deliver(&app, event).await;
        assert_retry_later("no pooled connection within the acquire timeout", &answer);
    }
    // The waiting commit is given up at its bound (its connection dropped, not cancelled).
    assert_retry_later(
        "a commit not confirmed within commit_timeout_ms",
        &waiting.await.unwrap(),
    );

    // The standby is back: the dropped COMMIT completes on the server, and the retries are
    // answered (the first as a replay), each event posted once.
    cluster.set_synchronous_standby_names("").await;
    for event in [&capture, &second, &failed] {
        let (status, _, body) = deliver(&app, event).await;
        assert_eq!(status, 200, "{}: {body}", event.id);
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_shutdown_while_a_commit_waits_for_the_standby_answers_it_503_not_2xx() {
    let cluster = Arc::new(tokio::task::spawn_blocking(Cluster::start).await.unwrap());
    let app = Arc::new(gateway(&cluster, "[database]\ncommit_timeout_ms = 2000\n").await);
    let orders = insert_orders(&app.db, 2).await;
    let watcher = connect(&app.database_url).await;
    cluster.set_synchronous_standby_names("ghost").await;

    let capture = Event::payment("evt_at_shutdown", orders[0].0, orders[0].1);
    let failed = payment_failed("evt_failed_at_shutdown", orders[1]);
    let answers: Vec<_> = [capture, failed]
        .into_iter()
        .map(|event| {
            let app = app.clone();
            tokio::spawn(async move { deliver(&app, &event).await })
        })
        .collect();
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'";
    crate::support::until("two commits waiting for the standby", async || {
        watcher.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) >= 2
    })
    .await;

    // SIGTERM's way: stop accepting, let the requests in flight finish, then stop.
    let stopped = tokio::spawn({
        let app = app.clone();
        async move { app.stop_gracefully().await }
    });
    for answer in answers {
        assert_retry_later(
            "a commit still waiting for the standby at shutdown",
            &answer.await.unwrap(),
        );
    }
    stopped.await.unwrap();
    cluster.set_synchronous_standby_names("").await;
}
