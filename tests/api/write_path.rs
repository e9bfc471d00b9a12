//! One write path: every payment effect is written by one guarded routine, whichever path
//! (one-statement, batched, general) a delivery takes, and the paths answer alike.

use std::sync::Arc;

use crate::support::batch::{lock_order, queue_behind_a_blocked_capture};
use crate::support::simulator::Event;
use crate::support::{
    ACME, MERCHANT, OTHER_MERCHANT, THIRD, THIRD_MERCHANT, TestApp, answer, connect, spawn_app,
    spawn_app_with, until_lock_waiters_on,
};

fn capture(event_id: &str, payment_id: &str, order_id: i64, amount: i64, currency: &str) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","data":{{"payment_id":"{payment_id}","order_id":{order_id},"amount_minor":{amount},"currency":"{currency}"}}}}"#
    )
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The general path's lock on an order: `SELECT .. FROM orders .. FOR UPDATE`.
const ORDER_LOCK_QUERY: &str = "%FROM \"orders\"%FOR UPDATE%";

/// A short acquire timeout, so a one-statement attempt that waits for a locked order gives up
/// quickly and the delivery continues on the general path. Merchant 42 has a notification
/// endpoint (nothing listens there: the rows stay staged), so every path stages its
/// notifications too.
const SHORT_WAIT: &str = "[server]\nacquire_timeout_ms = 400\nworkers = 1\n\
    [[merchants]]\nid = 42\nnotify_url = \"http://127.0.0.1:9/hooks\"\n\
    notify_secret = \"whsec_bWVyY2hhbnQtNDItbm90aWZpY2F0aW9uLXNlY3JldA==\"\n";

#[tokio::test]
async fn each_of_ledger_transfers_ledger_entries_payments_and_disputes_has_exactly_its_writers() {
    let app = spawn_app().await;
    let writes = "insert\\s+into|update|delete\\s+from";
    // The ledger has one writer per kind of money, each guarded by its own state: a payment's
    // transfers (payment, refund, chargeback and their reversals) by payment_apply_all, a
    // payout's by payout_apply (migration 000063, under the payout's row), a settlement's fees
    // by settlement_fees_post (000064, once per report reference) and its conversions by
    // settlement_fx_post (000066, the same). None writes another's kinds.
    let ledger_writers =
        "payment_apply_all, payout_apply, settlement_fees_post, settlement_fx_post";
    for (table, verbs, writer) in [
        ("ledger_transfers", writes, ledger_writers),
        ("ledger_entries", writes, ledger_writers),
        ("payments", writes, "payment_apply_all"),
        ("orders", "update", "payment_apply_all"),
        ("payment_disputes", writes, "payment_disputes_write"),
        ("callback_deliveries", writes, "callback_record_deliveries"),
        (
            "idempotency_keys",
            "insert\\s+into",
            "idempotency_claim_all",
        ),
        // The outbox: staged only by its writer, which every changing routine calls.
        (
            "merchant_notifications",
            "insert\\s+into",
            "notifications_stage",
        ),
    ] {
        let rows = app
            .db
            .query(
                "SELECT proname::text FROM pg_proc \
                 WHERE pronamespace = 'public'::regnamespace \
                   AND prosrc ~* ('(' || $1 || ')\\s+' || $2 || '\\M') \
                 ORDER BY 1",
                &[&verbs, &table],
            )
            .await
            .unwrap();
        let writers: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        assert_eq!(writers.join(", "), writer, "routines that {verbs} {table}");
    }
    // And no Rust code writes them around the routines.
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut stack = vec![std::path::PathBuf::from(src)];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap().to_lowercase();
        for table in [
            "ledger_transfers",
            "ledger_entries",
            "payments",
            "payment_disputes",
            "callback_deliveries",
            "merchant_notifications",
        ] {
            let inserts_only = table == "merchant_notifications";
            for write in [
                format!("insert into {table}"),
                format!("update {table}"),
                format!("insert_into({table}::table"),
                format!("update({table}::table"),
            ] {
                // The senders update notifications' delivery state; only staging is the writer's.
                if inserts_only && write.starts_with("update") {
                    continue;
                }
                assert!(!text.contains(&write), "{} writes {table}", path.display());
            }
        }
    }
}

#[tokio::test]
async fn two_events_of_one_payment_id_for_two_orders_on_the_general_path_post_one_transfer() {
    let app = Arc::new(spawn_app_with(SHORT_WAIT).await);
    let first_order = app.create_order(MERCHANT, 1999, "USD").await;
    let second_order = app.create_order(MERCHANT, 1999, "USD").await;
    // Both orders locked: each delivery's one-statement attempt times out on its order and
    // declines, and both continue on the general path, waiting for the same locks.
    let side = connect(&app.database_url).await;
    side.batch_execute(&format!(
        "BEGIN; SELECT * FROM orders WHERE id IN ({first_order}, {second_order}) FOR UPDATE"
    ))
    .await
    .unwrap();
    let deliveries: Vec<_> = [("evt_a", first_order), ("evt_b", second_order)]
        .into_iter()
        .map(|(event, order)| {
            let app = app.clone();
            let body = capture(event, "pay_shared", order, 1999, "USD");
            tokio::spawn(async move { answer(app.deliver(ACME, event, &body).await).await })
        })
        .collect();
    until_lock_waiters_on(&app, 2, ORDER_LOCK_QUERY).await;
    side.batch_execute("COMMIT").await.unwrap();
    let mut outcomes = Vec::new();
    for delivery in deliveries {
        let (status, _, ack) = delivery.await.unwrap();
        assert_eq!(status, 200, "{ack}");
        let ack = json(&ack);
        outcomes.push(format!("{}/{}", ack["outcome"], ack["reason"]));
    }
    outcomes.sort();
    assert_eq!(
        outcomes,
        [
            r#""applied"/null"#,
            r#""ignored"/"payment_already_captured""#
        ],
        "one provider payment moves money once"
    );
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 1);
    assert_eq!(
        app.count("SELECT count(*) FROM orders WHERE status = 'paid'")
            .await,
        1
    );
}

/// A database state a capture can meet, set up through SQL on a fresh app; returns the order
/// the capture names.
#[derive(Debug, Clone, Copy)]
enum State {
    PendingOrder,
    PendingOrderAfterAFailedAttempt,
    OrderPaidByAnotherPayment,
    OrderOfAnotherAmount,
    OrderInAnotherCurrency,
    NoSuchOrder,
    AnotherMerchantsOrder,
    PaymentAlreadyCaptured,
    PaymentAlreadyHeld,
    PaymentDisputed,
    PaymentChargedBack,
    EventPostedBeforeItsRecordExpired,
}

const STATES: [State; 12] = [
    State::PendingOrder,
    State::PendingOrderAfterAFailedAttempt,
    State::OrderPaidByAnotherPayment,
    State::OrderOfAnotherAmount,
    State::OrderInAnotherCurrency,
    State::NoSuchOrder,
    State::AnotherMerchantsOrder,
    State::PaymentAlreadyCaptured,
    State::PaymentAlreadyHeld,
    State::PaymentDisputed,
    State::PaymentChargedBack,
    State::EventPostedBeforeItsRecordExpired,
];

async fn set_up(app: &TestApp, state: State) -> i64 {
    let order = |merchant: i64, amount: i64, currency: &str, status: &str| {
        format!(
            "INSERT INTO orders (user_id, amount_minor, currency, status) \
             VALUES ({merchant}, {amount}, '{currency}', '{status}') RETURNING id"
        )
    };
    let insert =
        |sql: String| async move { app.db.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) };
    let payment = |order_id: i64, status: &str| {
        format!(
            "INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency) \
             VALUES ({MERCHANT}, '{ACME}', 'pay_1', {order_id}, '{status}', 1999, 'USD') RETURNING id"
        )
    };
    match state {
        State::PendingOrder => insert(order(MERCHANT, 1999, "USD", "pending_payment")).await,
        State::PendingOrderAfterAFailedAttempt => {
            let id = insert(order(MERCHANT, 1999, "USD", "pending_payment")).await;
            insert(payment(id, "failed")).await;
            id
        }
        State::OrderPaidByAnotherPayment => insert(order(MERCHANT, 1999, "USD", "paid")).await,
        State::OrderOfAnotherAmount => {
            insert(order(MERCHANT, 2500, "USD", "pending_payment")).await
        }
        State::OrderInAnotherCurrency => {
            insert(order(MERCHANT, 1999, "EUR", "pending_payment")).await
        }
        State::NoSuchOrder => 999_999,
        State::AnotherMerchantsOrder => {
            insert(order(OTHER_MERCHANT, 1999, "USD", "pending_payment")).await
        }
        State::PaymentAlreadyCaptured
        | State::PaymentAlreadyHeld
        | State::PaymentDisputed
        | State::PaymentChargedBack => {
            let id = insert(order(MERCHANT, 1999, "USD", "pending_payment")).await;
            let status = match state {
                State::PaymentAlreadyCaptured => "succeeded",
                State::PaymentDisputed => "disputed",
                State::PaymentChargedBack => "charged_back",
                _ => "held",
            };
            insert(payment(id, status)).await;
            id
        }
        State::EventPostedBeforeItsRecordExpired => {
            let id = insert(order(MERCHANT, 1999, "USD", "pending_payment")).await;
            let transfer = insert(format!(
                "INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, order_id, payment_id) \
                 VALUES ({MERCHANT}, '{ACME}', 'evt_1', 'payment', {id}, 'pay_0') RETURNING id"
            ))
            .await;
            app.db
                .batch_execute(&format!(
                    "INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
                     VALUES ({transfer}, {MERCHANT}, 'psp_clearing:{ACME}', 'USD', 1999), \
                            ({transfer}, {MERCHANT}, 'merchant_payable', 'USD', -1999)"
                ))
                .await
                .unwrap();
            id
        }
    }
}

/// What a delivery did, as a user checks it: the ack (without the transfer's id), and the
/// books, the order and the payment afterwards.
async fn observe(app: &TestApp, order: i64, status: u16, ack: &str) -> String {
    let mut ack = json(ack);
    let posted = ack.as_object_mut().unwrap().remove("transfer_id").is_some();
    let rows = app
        .db
        .query(
            "SELECT account || ' ' || currency || ' ' || sum(amount_minor)::text \
             FROM ledger_entries WHERE merchant_id = $1 GROUP BY account, currency ORDER BY 1",
            &[&MERCHANT],
        )
        .await
        .unwrap();
    let books: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let order_status = app
        .db
        .query_opt("SELECT status FROM orders WHERE id = $1", &[&order])
        .await
        .unwrap()
        .map(|r| r.get::<_, String>(0));
    let payment_status = app
        .db
        .query_opt(
            "SELECT status FROM payments WHERE payment_id = 'pay_1'",
            &[],
        )
        .await
        .unwrap()
        .map(|r| r.get::<_, String>(0));
    let notifications: Vec<String> = app
        .db
        .query(
            "SELECT kind || ' ' || object_status || ' ' || coalesce(detail, '') \
             FROM merchant_notifications WHERE merchant_id = $1 ORDER BY id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    format!(
        "{status} {ack} posted={posted} books={books:?} order={order_status:?} payment={payment_status:?} notifications={notifications:?}"
    )
}

/// Delivers the capture of `order` with the one-statement path free to take it.
async fn through_the_one_statement_path(state: State) -> String {
    let app = spawn_app_with(SHORT_WAIT).await;
    let order = set_up(&app, state).await;
    let body = capture("evt_1", "pay_1", order, 1999, "USD");
    // A 503 changed nothing (on a busy machine the cold pool's first connection can take
    // longer than the 400 ms acquire timeout); the provider retries, as here.
    for _ in 0..20 {
        let (status, _, ack) = answer(app.deliver(ACME, "evt_1", &body).await).await;
        if status != 503 {
            return observe(&app, order, status, &ack).await;
        }
    }
    panic!("20 deliveries in a row answered 503")
}

/// True once a backend runs `waiting` with a count of at least one; false once `delivery` has
/// been answered without that being seen.
async fn waiting_or_answered<T>(
    app: &TestApp,
    waiting: &str,
    delivery: &tokio::task::JoinHandle<T>,
) -> bool {
    let started = std::time::Instant::now();
    loop {
        if app.count(waiting).await >= 1 {
            return true;
        }
        if delivery.is_finished() {
            return false;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no lock wait and no answer after 60 s"
        );
        tokio::task::yield_now().await;
    }
}

/// Delivers the capture of `order` while its row is locked, so the one-statement attempt gives
/// up and the general path decides (once the lock is released) from the same state.
async fn through_the_general_path(state: State) -> String {
    let app = Arc::new(spawn_app_with(SHORT_WAIT).await);
    let order = set_up(&app, state).await;
    let side = connect(&app.database_url).await;
    side.batch_execute(&format!(
        "BEGIN; SELECT * FROM orders WHERE id = {order} FOR UPDATE"
    ))
    .await
    .unwrap();
    let body = capture("evt_1", "pay_1", order, 1999, "USD");
    // The general path locks only this merchant's orders; another's it never waits for.
    let merchants_order = app
        .count(&format!(
            "SELECT count(*) FROM orders WHERE id = {order} AND user_id = {MERCHANT}"
        ))
        .await
        > 0;
    let send = || {
        let (app, body) = (app.clone(), body.clone());
        tokio::spawn(async move { answer(app.deliver(ACME, "evt_1", &body).await).await })
    };
    let mut delivery = send();
    if merchants_order {
        // The general path waits for the order's lock at most the lock timeout (400 ms here)
        // and then answers 503, rolled back, state unchanged; on a busy machine that can pass
        // before a poll sees the wait. The provider's retry then waits again, and is seen.
        let waiting = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE '{ORDER_LOCK_QUERY}'"
        );
        let mut retries = 0;
        while !waiting_or_answered(&app, &waiting, &delivery).await {
            let (status, _, ack) = (&mut delivery).await.unwrap();
            assert_eq!(
                status, 503,
                "a delivery that never waited for the lock: {ack}"
            );
            retries += 1;
            assert!(
                retries < 20,
                "the lock wait was never seen in 20 deliveries"
            );
            delivery = send();
        }
    }
    side.batch_execute("COMMIT").await.unwrap();
    let (status, _, ack) = delivery.await.unwrap();
    observe(&app, order, status, &ack).await
}

/// Delivers the capture of `order` inside a batch, between captures of another merchant's
/// orders, so `callback_first_delivery_batch` writes them all at once or, when this one's state
/// is not the one planned, one by one. One worker with one connection makes the batch certain:
/// the connection is busy with a capture waiting for a locked order while the others queue.
async fn through_a_batch(state: State) -> String {
    let app = Arc::new(spawn_app_with(&format!("{SHORT_WAIT}[database]\npool_size = 1\n")).await);
    let order = set_up(&app, state).await;
    let mut companions = Vec::new();
    for n in 0..3 {
        let id: i64 = app
            .db
            .query_one(
                "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 1999, 'USD') RETURNING id",
                &[&THIRD_MERCHANT],
            )
            .await
            .unwrap()
            .get(0);
        let event = format!("evt_c{n}");
        companions.push((
            Event {
                provider: THIRD,
                body: capture(&event, &format!("pay_c{n}"), id, 1999, "USD"),
                id: event,
                amount_minor: 1999,
            },
            id,
        ));
    }
    let this = Event {
        provider: ACME,
        id: "evt_1".into(),
        body: capture("evt_1", "pay_1", order, 1999, "USD"),
        amount_minor: 1999,
    };
    let side = lock_order(&app, companions[0].1).await;
    let (blocking, mut queued) = queue_behind_a_blocked_capture(
        &app,
        &companions[0].0,
        &[companions[1].0.clone(), this, companions[2].0.clone()],
    )
    .await;
    let this = queued.remove(1);
    side.batch_execute("ROLLBACK").await.unwrap();
    for companion in std::iter::once(blocking).chain(queued) {
        let (status, _, ack) = companion.await.unwrap();
        assert_eq!(status, 200, "{ack}");
        assert!(ack.contains(r#""outcome": "applied""#), "{ack}");
    }
    assert_eq!(
        app.count(&format!(
            "SELECT count(*) FROM ledger_transfers WHERE merchant_id = {THIRD_MERCHANT}"
        ))
        .await,
        3,
        "the other captures of the batch applied once each, whatever became of this one"
    );
    let (status, _, ack) = this.await.unwrap();
    observe(&app, order, status, &ack).await
}

#[tokio::test]
async fn the_one_statement_path_and_the_general_path_answer_every_state_alike() {
    for state in STATES {
        let fast = through_the_one_statement_path(state).await;
        let general = through_the_general_path(state).await;
        assert_eq!(fast, general, "{state:?}");
    }
    // The table is not vacuous: the states end differently.
    let pending = through_the_general_path(State::PendingOrder).await;
    assert!(
        pending.contains(r#""outcome":"applied""#)
            && pending.contains("order=Some(\"paid\")")
            && pending.contains(r#"notifications=["order.paid paid "]"#),
        "{pending}"
    );
    let held = through_the_one_statement_path(State::OrderOfAnotherAmount).await;
    assert!(
        held.contains(r#""reason":"amount_mismatch""#)
            && held.contains("unapplied_funds USD -1999")
            && held.contains(r#"notifications=["payment.held held amount_mismatch"]"#),
        "{held}"
    );
}

#[tokio::test]
async fn a_batch_answers_every_state_as_the_general_path_does() {
    for state in STATES {
        let batched = through_a_batch(state).await;
        let general = through_the_general_path(state).await;
        assert_eq!(batched, general, "{state:?}");
    }
}

#[tokio::test]
async fn a_capture_under_an_event_id_that_posted_another_payment_is_held_on_every_path() {
    // The event id posted pay_0 and its record expired; the same id now captures pay_1.
    let state = State::EventPostedBeforeItsRecordExpired;
    for (path, observed) in [
        ("one statement", through_the_one_statement_path(state).await),
        ("general", through_the_general_path(state).await),
        ("batch", through_a_batch(state).await),
    ] {
        assert!(
            observed.contains(r#""outcome":"held""#)
                && observed.contains(r#""reason":"event_id_reused""#)
                && observed.contains("posted=true")
                && observed.contains("unapplied_funds USD -1999")
                && observed.contains(r#"order=Some("pending_payment")"#)
                && observed.contains(r#"payment=Some("held")"#),
            "{path}: {observed}"
        );
    }
}
