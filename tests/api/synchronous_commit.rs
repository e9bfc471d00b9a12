//! A commit that waits for the synchronous standby, on a cluster of the test's own whose
//! `synchronous_standby_names` names a standby that never comes (`'ghost'`): every commit
//! waits as it would behind a stalled standby. First what PostgreSQL 15 itself does (the
//! facts the gateway's design rests on), then what the gateway answers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::support::cluster::Cluster;
use crate::support::simulator::Event;
use crate::support::{ACME, answer, config_with, connect, insert_orders, spawn_app_on};

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
