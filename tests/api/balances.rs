//! The read caches (issue 27). Balances from checkpoints: a read adds only the entries after the
//! merchant's checkpoint, and is exact whatever the checkpoints are: moved while captures
//! commit, taken while an earlier entry is still uncommitted, or deleted. The chart's
//! per-minute counts: a read adds only the deliveries after the counted position, and equals a
//! count of the deliveries however the passes and the callbacks interleave.

use std::collections::BTreeMap;

use callback_gateway::deliveries::minutes;
use callback_gateway::ledger::checkpoint;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::Value;

use crate::support::{ACME, MERCHANT, TestApp, answer, sequential_scans_of_data, spawn_app};

fn capture(order_id: i64, amount_minor: i64) -> String {
    format!(
        r#"{{"id":"evt_{order_id}","type":"payment.succeeded","data":{{"payment_id":"pay_{order_id}","order_id":{order_id},"amount_minor":{amount_minor},"currency":"USD"}}}}"#
    )
}

/// What the balances endpoint answers for `merchant_id`, as (account, currency) -> amount.
async fn answered(app: &TestApp, merchant_id: i64) -> BTreeMap<(String, String), i128> {
    let (status, _, body) = answer(
        app.admin_get(&format!("/admin/merchants/{merchant_id}/balances"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    json["balances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                (
                    b["account"].as_str().unwrap().to_owned(),
                    b["currency"].as_str().unwrap().to_owned(),
                ),
                b["balance_minor"].as_i64().unwrap().into(),
            )
        })
        .collect()
}

/// Every committed entry of `merchant_id`, summed the slow way.
async fn summed(app: &TestApp, merchant_id: i64) -> BTreeMap<(String, String), i128> {
    app.db
        .query(
            "SELECT account, currency, sum(amount_minor)::TEXT FROM ledger_entries \
             WHERE merchant_id = $1 GROUP BY account, currency",
            &[&merchant_id],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| {
            (
                (row.get::<_, String>(0), row.get::<_, String>(1)),
                row.get::<_, String>(2).parse().unwrap(),
            )
        })
        .collect()
}

async fn checkpointer(app: &TestApp) -> AsyncPgConnection {
    AsyncPgConnection::establish(&app.database_url)
        .await
        .unwrap()
}

async fn checkpointed_through(app: &TestApp, merchant_id: i64) -> Option<i64> {
    app.db
        .query_opt(
            "SELECT through_entry_id FROM ledger_balance_checkpoints WHERE merchant_id = $1",
            &[&merchant_id],
        )
        .await
        .unwrap()
        .map(|row| row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balances_equal_the_sum_of_entries_through_checkpoints_concurrent_captures_and_deletions() {
    let app = spawn_app().await;
    let mut conn = checkpointer(&app).await;
    let orders = crate::support::insert_orders(&app.db, 60).await;
    let app = &app;
    for (round, chunk) in orders.chunks(12).enumerate() {
        // Captures commit while passes note and move positions.
        let deliveries = futures_util::future::join_all(chunk.iter().map(|(id, amount)| {
            let body = capture(*id, *amount);
            let event = format!("evt_{id}");
            async move { answer(app.deliver(ACME, &event, &body).await).await }
        }));
        let passes = async {
            for _ in 0..3 {
                checkpoint::pass(&mut conn).await.unwrap();
            }
        };
        let (answers, ()) = tokio::join!(deliveries, passes);
        assert!(
            answers.iter().all(|(status, ..)| *status == 200),
            "{answers:?}"
        );
        // One held capture too (no such order): money in unapplied_funds.
        let held = capture(1_000_000 + round as i64, 250);
        answer(app.deliver(ACME, &format!("evt_held_{round}"), &held).await).await;
        checkpoint::pass(&mut conn).await.unwrap();
        assert_eq!(
            answered(app, MERCHANT).await,
            summed(app, MERCHANT).await,
            "round {round}"
        );
    }
    assert!(
        checkpointed_through(app, MERCHANT).await.is_some(),
        "no checkpoint was ever finished"
    );
    let expected = summed(app, MERCHANT).await;
    assert_eq!(expected.len(), 3, "{expected:?}");

    // The checkpoint is a cache: deleting it changes no answer, and the next passes rebuild it.
    app.db
        .execute("DELETE FROM ledger_balance_checkpoints", &[])
        .await
        .unwrap();
    assert_eq!(answered(app, MERCHANT).await, expected);
    let (id, amount) = crate::support::insert_orders(&app.db, 1).await[0];
    answer(
        app.deliver(ACME, &format!("evt_{id}"), &capture(id, amount))
            .await,
    )
    .await;
    for _ in 0..2 {
        checkpoint::pass(&mut conn).await.unwrap();
    }
    assert!(checkpointed_through(app, MERCHANT).await.is_some());
    assert_eq!(answered(app, MERCHANT).await, summed(app, MERCHANT).await);
    // A merchant with no entries at all has no balances.
    assert!(answered(app, 777).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_waits_for_an_entry_that_commits_after_a_later_one() {
    let app = spawn_app().await;
    let mut conn = checkpointer(&app).await;
    // A transaction posts a transfer and keeps it uncommitted...
    let (mut slow, connection) = tokio_postgres::connect(&app.database_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let slow = slow.transaction().await.unwrap();
    let early: i64 = slow
        .query(
            "WITH t AS (INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, payment_id) \
                        VALUES (42, 'acme', 'evt_slow', 'payment', 'pay_slow') RETURNING id) \
             INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
             SELECT t.id, 42, a.account, 'USD', a.amount FROM t, \
                    (VALUES ('psp_clearing:acme', 700), ('unapplied_funds', -700)) a(account, amount) \
             RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, i64>(0))
        .max()
        .unwrap();
    // ...while a capture with later entry ids commits.
    let (id, amount) = crate::support::insert_orders(&app.db, 1).await[0];
    let (status, _, ack) = answer(
        app.deliver(ACME, &format!("evt_{id}"), &capture(id, amount))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{ack}");
    let later: i64 = app
        .db
        .query_one("SELECT max(id) FROM ledger_entries", &[])
        .await
        .unwrap()
        .get(0);
    assert!(later > early);

    // A position noted now must not be finished while the earlier entry may still commit.
    checkpoint::pass(&mut conn).await.unwrap();
    let second = checkpoint::pass(&mut conn).await.unwrap();
    assert_eq!(
        second.finished_at, None,
        "finished while an earlier entry was uncommitted"
    );
    slow.commit().await.unwrap();
    let third = checkpoint::pass(&mut conn).await.unwrap();
    assert_eq!(third.finished_at, Some(later));
    assert_eq!(checkpointed_through(&app, MERCHANT).await, Some(later));
    let balances = answered(&app, MERCHANT).await;
    assert_eq!(balances, summed(&app, MERCHANT).await);
    assert_eq!(
        balances[&("unapplied_funds".to_owned(), "USD".to_owned())],
        -700,
        "the late entry is in the checkpoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_and_a_balance_read_after_the_caches_are_index_scans_at_200k_rows() {
    let app = spawn_app().await;
    crate::events::load_events(&app, 200_000).await;
    // 200,000 two-entry transfers over three merchants.
    app.db
        .batch_execute(
            "INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, payment_id) \
             SELECT g, 42 + g % 3, 'acme', 'evt_' || g, 'payment', 'pay_' || g \
             FROM generate_series(1, 200000) g; \
             INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
             SELECT g, 42 + g % 3, a.account, 'USD', a.sign * (1000 + g % 500) \
             FROM generate_series(1, 200000) g, \
                  (VALUES ('psp_clearing:acme', 1), ('merchant_payable', -1)) a(account, sign); \
             ANALYZE ledger_transfers; ANALYZE ledger_entries;",
        )
        .await
        .unwrap();
    // The counts cover every delivery but the 50 with the highest ids, and the hour of minutes
    // the chart shows.
    app.db
        .batch_execute(
            "UPDATE callback_minute_state SET through_delivery_id = 199950; \
             INSERT INTO callback_minute_counts (minute, outcome, count) \
             SELECT m, o, 1 FROM generate_series(29933220, 29933279) m, \
                  unnest(ARRAY['applied', 'held', 'ignored', 'rejected']) o; \
             ANALYZE callback_minute_counts;",
        )
        .await
        .unwrap();
    let chart = app
        .explain(
            &minutes::PER_MINUTE_SQL
                .replace("$1", "(29933280 - 60)")
                .replace("$2", "199950"),
        )
        .await;
    println!("-- chart:\n{chart}\n");
    assert!(
        sequential_scans_of_data(&chart)
            .iter()
            .all(|scan| !scan.contains("on callback_deliveries"))
            && chart.contains("_pkey on callback_deliveries"),
        "{chart}"
    );
    let tail = app
        .explain(
            &checkpoint::SUMS_SQL
                .replace("$1", "42")
                .replace("$2", "399000")
                .replace("$3::BIGINT", "NULL::BIGINT")
                .replace("$3", "NULL"),
        )
        .await;
    println!("-- balances after a checkpoint at entry 399,000:\n{tail}\n");
    // Either the merchant's tail of idx_ledger_entries_merchant_tail or the primary key's range
    // after the checkpoint: both read only the entries after it.
    assert!(
        !tail.contains("Seq Scan")
            && (tail.contains("idx_ledger_entries_merchant_tail")
                || tail.contains("ledger_entries_pkey")),
        "{tail}"
    );
}

/// The chart's counts the slow way: every delivery in the minutes from the one holding `since`.
async fn counted(app: &TestApp, since: chrono::DateTime<chrono::Utc>) -> Vec<(i64, String, i64)> {
    app.db
        .query(
            "SELECT (floor(extract(epoch FROM received_at) / 60))::BIGINT, \
                    COALESCE(outcome, 'unknown'), count(*) \
             FROM callback_deliveries WHERE received_at >= to_timestamp($1::BIGINT * 60) \
             GROUP BY 1, 2 ORDER BY 1, 2",
            &[&since.timestamp().div_euclid(60)],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

async fn charted(
    conn: &mut AsyncPgConnection,
    since: chrono::DateTime<chrono::Utc>,
) -> Vec<(i64, String, i64)> {
    minutes::per_minute(conn, since)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.minute, c.outcome, c.count))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_counts_equal_the_deliveries_through_passes_concurrent_callbacks_and_a_reset() {
    let app = spawn_app().await;
    let mut job = checkpointer(&app).await;
    let mut reader = checkpointer(&app).await;
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    let orders = crate::support::insert_orders(&app.db, 48).await;
    let app = &app;
    let mut moved = false;
    for (round, chunk) in orders.chunks(12).enumerate() {
        // Applied captures, and an ignored event, commit while passes note and move positions.
        let deliveries = futures_util::future::join_all(chunk.iter().map(|(id, amount)| {
            let body = capture(*id, *amount);
            let event = format!("evt_{id}");
            async move { answer(app.deliver(ACME, &event, &body).await).await }
        }));
        let passes = async {
            let mut any = false;
            for _ in 0..3 {
                any |= minutes::pass(&mut job).await.unwrap().is_some();
            }
            any
        };
        let (answers, any) = tokio::join!(deliveries, passes);
        moved |= any;
        assert!(
            answers.iter().all(|(status, ..)| *status == 200),
            "{answers:?}"
        );
        let ignored =
            format!(r#"{{"id":"evt_other_{round}","type":"customer.created","data":{{}}}}"#);
        answer(
            app.deliver(ACME, &format!("evt_other_{round}"), &ignored)
                .await,
        )
        .await;
        minutes::pass(&mut job).await.unwrap();
        let expected = counted(app, since).await;
        assert_eq!(charted(&mut reader, since).await, expected, "round {round}");
        assert_eq!(
            expected.iter().map(|(_, _, n)| n).sum::<i64>(),
            12 * (round as i64 + 1) + round as i64 + 1
        );
    }
    assert!(
        moved || minutes::pass(&mut job).await.unwrap().is_some(),
        "the counts never moved"
    );
    assert!(
        app.count("SELECT count(*) FROM callback_minute_counts")
            .await
            > 0
    );

    // Rebuilt from nothing: the counts emptied with their position reset (docs/console.md).
    app.db
        .batch_execute(
            "BEGIN; TRUNCATE callback_minute_counts; \
             UPDATE callback_minute_state \
             SET through_delivery_id = 0, pending_delivery_id = NULL, pending_writers = NULL; \
             COMMIT;",
        )
        .await
        .unwrap();
    let expected = counted(app, since).await;
    assert_eq!(charted(&mut reader, since).await, expected);
    for _ in 0..2 {
        minutes::pass(&mut job).await.unwrap();
    }
    assert!(
        app.count("SELECT count(*) FROM callback_minute_counts")
            .await
            > 0
    );
    assert_eq!(charted(&mut reader, since).await, expected);
}
