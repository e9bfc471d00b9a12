//! Balances from checkpoints (issue 27): a read adds only the entries after the merchant's
//! checkpoint, and is exact whatever the checkpoints are: moved while captures commit, taken
//! while an earlier entry is still uncommitted, or deleted.

use std::collections::BTreeMap;

use callback_gateway::ledger::checkpoint;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::Value;

use crate::support::{ACME, MERCHANT, TestApp, answer, spawn_app};

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
async fn the_chart_and_a_balance_read_after_a_checkpoint_are_index_scans_at_200k_rows() {
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
    let chart = app
        .explain(
            &callback_gateway::deliveries::read::PER_MINUTE_SQL
                .replace("$1", "'2026-11-29T23:00:00Z'::timestamptz"),
        )
        .await;
    println!("-- chart:\n{chart}\n");
    assert!(
        chart.contains("idx_callback_deliveries_received") && !chart.contains("Seq Scan"),
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
