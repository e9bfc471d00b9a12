//! Concurrent captures share one statement and one commit (src/payments/batcher.rs). One worker
//! with one pooled connection makes batches certain: while the connection serves a capture that
//! waits for an order this test has locked, every other capture queues, and they all go out
//! together once it is free.

use std::sync::Arc;

use crate::support::batch::{lock_order, queue_behind_a_blocked_capture};
use crate::support::simulator::Event;
use crate::support::{ACME, TestApp, answer, insert_orders, spawn_app_with};

const ONE_CONNECTION: &str = "[server]\nworkers = 1\n[database]\npool_size = 1\n";

/// An app with one worker and one pooled connection, `n` pending orders and a payment event
/// for each.
async fn one_connection_app_with_orders(n: i64) -> (Arc<TestApp>, Vec<(i64, i64)>, Vec<Event>) {
    let app = Arc::new(spawn_app_with(ONE_CONNECTION).await);
    let orders = insert_orders(&app.db, n).await;
    let events = orders
        .iter()
        .map(|&(order_id, amount)| Event::payment(&format!("evt_{order_id}"), order_id, amount))
        .collect();
    (app, orders, events)
}

#[tokio::test]
async fn captures_queued_behind_a_busy_connection_commit_together_and_each_applies_once() {
    let (app, orders, events) = one_connection_app_with_orders(21).await;
    let holder = lock_order(&app, orders[0].0).await;
    let (first, queued) = queue_behind_a_blocked_capture(&app, &events[0], &events[1..]).await;
    holder.batch_execute("ROLLBACK").await.unwrap();

    let mut acks = vec![first.await.unwrap()];
    for task in queued {
        acks.push(task.await.unwrap());
    }
    for (status, replayed, ack) in &acks {
        assert_eq!((*status, *replayed), (200, false), "{ack}");
        assert!(ack.contains(r#""outcome": "applied""#), "{ack}");
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 21);
    assert_eq!(
        app.count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await,
        21
    );
    assert_eq!(
        app.metric("gateway_capture_batch_size_sum").await,
        21.0,
        "every capture went through the batcher"
    );
    assert_eq!(
        app.metric("gateway_capture_batch_size_count").await,
        2.0,
        "the blocked capture alone, then the 20 queued behind it in one statement"
    );

    // Each redelivery gets its own ack back, byte for byte.
    for (event, (_, _, first_ack)) in events.iter().zip(&acks) {
        let (status, replayed, again) =
            answer(app.deliver(ACME, &event.id, &event.body).await).await;
        assert_eq!((status, replayed), (200, true));
        assert_eq!(&again, first_ack);
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 21);
}

#[tokio::test]
async fn a_capture_whose_order_is_locked_does_not_hold_up_its_batch() {
    let (app, orders, events) = one_connection_app_with_orders(4).await;
    // events[0] keeps the connection busy; events[1]'s order stays locked throughout the batch.
    let first_holder = lock_order(&app, orders[0].0).await;
    let batch_holder = lock_order(&app, orders[1].0).await;
    let (first, mut queued) = queue_behind_a_blocked_capture(&app, &events[0], &events[1..]).await;
    first_holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(first.await.unwrap().0, 200);

    // The other two of the batch are answered while events[1]'s order is still locked.
    let locked = queued.remove(0);
    for task in queued {
        let (status, _, ack) = task.await.unwrap();
        assert_eq!(status, 200, "{ack}");
        assert!(ack.contains(r#""outcome": "applied""#), "{ack}");
    }
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM idempotency_keys WHERE idem_key = 'acme:{}'",
            events[1].id
        ))
        .await,
        0,
        "nothing of the locked capture was kept"
    );
    // It went down the general path, which waits for the lock and then applies it.
    batch_holder.batch_execute("ROLLBACK").await.unwrap();
    let (status, replayed, ack) = locked.await.unwrap();
    assert_eq!((status, replayed), (200, false), "{ack}");
    assert!(ack.contains(r#""outcome": "applied""#), "{ack}");
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 4);
}

#[tokio::test]
async fn an_item_that_fails_its_batch_fails_alone() {
    let (app, orders, events) = one_connection_app_with_orders(6).await;
    // A fault injected into the database: storing one event's body fails, every time.
    app.db
        .batch_execute(&format!(
            "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'injected fault'; END $$; \
             CREATE TRIGGER poison BEFORE INSERT ON callback_deliveries FOR EACH ROW \
             WHEN (NEW.event_id = '{}') EXECUTE FUNCTION refuse_poison();",
            events[3].id
        ))
        .await
        .unwrap();
    let holder = lock_order(&app, orders[0].0).await;
    let (first, queued) = queue_behind_a_blocked_capture(&app, &events[0], &events[1..]).await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(first.await.unwrap().0, 200);

    for (i, task) in queued.into_iter().enumerate() {
        let (status, _, body) = task.await.unwrap();
        if i + 1 == 3 {
            assert_eq!(status, 503, "{body}");
            assert!(body.contains("unavailable"), "{body}");
        } else {
            assert_eq!(status, 200, "{body}");
            assert!(body.contains(r#""outcome": "applied""#), "{body}");
        }
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 5);
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM idempotency_keys WHERE idem_key = 'acme:{}'",
            events[3].id
        ))
        .await,
        0,
        "the failed event left no record: its redelivery runs as the first time"
    );
}

#[tokio::test]
async fn a_worker_runs_one_capture_batch_at_once_and_its_other_connection_serves_the_general_path()
{
    // One worker, two callback connections, the default of one capture batch at a time.
    let app = Arc::new(spawn_app_with("[server]\nworkers = 1\n[database]\npool_size = 2\n").await);
    let orders = insert_orders(&app.db, 3).await;
    let events: Vec<Event> = orders
        .iter()
        .map(|&(order_id, amount)| Event::payment(&format!("evt_{order_id}"), order_id, amount))
        .collect();
    let holder = lock_order(&app, orders[0].0).await;
    let (first, queued) = queue_behind_a_blocked_capture(&app, &events[0], &events[1..2]).await;

    // A failed payment is not a capture: it takes the general path, on the connection the
    // batches leave free, and is answered while the capture batch still waits for its lock.
    let failed = format!(
        r#"{{"id":"evt_failed","type":"payment.failed","data":{{"payment_id":"pay_failed","order_id":{},"amount_minor":{},"currency":"USD"}}}}"#,
        orders[2].0, orders[2].1
    );
    let (status, _, ack) = answer(app.deliver(ACME, "evt_failed", &failed).await).await;
    assert_eq!(status, 200, "{ack}");
    assert!(
        !first.is_finished() && queued.iter().all(|task| !task.is_finished()),
        "the captures still wait: the queued one did not take the free connection"
    );

    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(first.await.unwrap().0, 200);
    for task in queued {
        let (status, _, ack) = task.await.unwrap();
        assert_eq!(status, 200, "{ack}");
        assert!(ack.contains(r#""outcome": "applied""#), "{ack}");
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 2);
}
