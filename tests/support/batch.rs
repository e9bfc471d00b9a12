//! Making a capture batch certain: with one worker, one capture statement at a time and a
//! capture waiting for an order the test has locked, every capture delivered meanwhile queues,
//! and they all go out in one statement once the lock is released.

use std::sync::Arc;

use super::simulator::Event;
use super::{TestApp, answer, connect, until, until_lock_waiters};

/// A delivery's answer: (status, replayed, body).
pub type Delivery = tokio::task::JoinHandle<(u16, bool, String)>;

/// Locks `order_id` in an open transaction on a connection of the test's own.
pub async fn lock_order(app: &TestApp, order_id: i64) -> tokio_postgres::Client {
    let holder = connect(&app.database_url).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM orders WHERE id = $1 FOR UPDATE",
            &[&order_id],
        )
        .await
        .unwrap();
    holder
}

/// Delivers `event` from its provider in a task of its own.
pub fn deliver(app: &Arc<TestApp>, event: &Event) -> Delivery {
    let (app, provider, id, body) = (
        app.clone(),
        event.provider,
        event.id.clone(),
        event.body.clone(),
    );
    tokio::spawn(async move { answer(app.deliver(provider, &id, &body).await).await })
}

/// The first capture holds the worker's capture statement, waiting for `blocked`'s lock; then
/// `rest` queue behind it (the gateway's queue gauge says when all of them have). Returns the
/// tasks.
pub async fn queue_behind_a_blocked_capture(
    app: &Arc<TestApp>,
    blocked: &Event,
    rest: &[Event],
) -> (Delivery, Vec<Delivery>) {
    let first = deliver(app, blocked);
    until_lock_waiters(app, 1).await;
    let queued = rest.iter().map(|event| deliver(app, event)).collect();
    until("the captures to queue", async || {
        app.metric("gateway_capture_queue_length").await >= rest.len() as f64
    })
    .await;
    (first, queued)
}
