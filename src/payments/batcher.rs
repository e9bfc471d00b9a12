//! Concurrent captures share a statement. Each actix worker has one batcher: a capture waits in
//! its queue until the worker's pool has a connection free, then every capture queued by that
//! time goes out in one statement (`payment_capture_batch`) with one commit. When connections
//! are free a capture goes out alone at once, so batching adds no wait; under load the queue
//! fills while the connections are busy and each round trip and commit serves many deliveries.
//!
//! Items stay independent: each runs in its own subtransaction, waits for locks only briefly
//! (an item that would wait is sent down the general path), and if the statement as a whole
//! fails (an item's error, a connection lost, a commit refused) nothing of it committed and
//! every item takes the general path on its own, so one bad item cannot fail the others.
//! Nothing is answered before the statement has committed.

use diesel_async::AsyncPgConnection;
use tokio::sync::{mpsc, oneshot};

use super::capture::{Capture, run_batch};
use crate::db::PgPool;
use crate::error::ApiError;
use crate::idempotency::OneStatement;
use crate::metrics::Metrics;

/// The most captures in one statement.
const MAX_BATCH: usize = 64;

struct Job {
    capture: Capture,
    answer: oneshot::Sender<Result<OneStatement, ApiError>>,
}

/// A worker's capture queue.
#[derive(Clone)]
pub struct CaptureBatcher {
    queue: mpsc::UnboundedSender<Job>,
    metrics: Metrics,
}

impl CaptureBatcher {
    /// Starts the batching task on the current runtime (the worker's own).
    pub fn spawn(pool: PgPool, metrics: Metrics) -> Self {
        let (queue, jobs) = mpsc::unbounded_channel();
        tokio::spawn(batch_jobs(pool, metrics.clone(), jobs));
        Self { queue, metrics }
    }

    /// Runs `capture` in the next statement and waits for its answer.
    pub async fn run(&self, capture: Capture) -> Result<OneStatement, ApiError> {
        let (answer, answered) = oneshot::channel();
        self.metrics.capture_queued();
        self.queue
            .send(Job { capture, answer })
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

fn stopped() -> ApiError {
    ApiError::Unavailable(anyhow::anyhow!("the capture batcher has stopped"))
}

async fn batch_jobs(pool: PgPool, metrics: Metrics, mut jobs: mpsc::UnboundedReceiver<Job>) {
    while let Some(first) = jobs.recv().await {
        // Wait for a connection first: whatever queues meanwhile joins this statement.
        let connection = pool.get_owned().await;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        metrics.observe_capture_batch(batch.len());
        match connection {
            Ok(mut conn) => {
                tokio::spawn(async move { run_jobs(&mut conn, batch).await });
            }
            Err(error) => {
                for job in batch {
                    let _ = job.answer.send(Err(ApiError::pool_unavailable(&error)));
                }
            }
        }
    }
}

async fn run_jobs(conn: &mut AsyncPgConnection, mut batch: Vec<Job>) {
    if batch.len() == 1 {
        // Alone: the plain statement, with the session's full lock timeout.
        if let Some(job) = batch.pop() {
            let answer = job.capture.run(conn).await.map_err(ApiError::from);
            let _ = job.answer.send(answer);
        }
        return;
    }
    let captures: Vec<&Capture> = batch.iter().map(|job| &job.capture).collect();
    match run_batch(conn, &captures).await {
        Ok(answers) => {
            for (job, answer) in batch.into_iter().zip(answers) {
                // A batch waits for locks only briefly; an item that found its key held goes
                // down the general path, which waits the full acquire timeout.
                let answer = match answer {
                    OneStatement::InFlight => OneStatement::Declined,
                    other => other,
                };
                let _ = job.answer.send(Ok(answer));
            }
        }
        Err(error) => {
            // The statement failed, so nothing of it committed (had it committed and only the
            // answer been lost, the general path finds the records and replays them). Every item
            // goes down the general path on a connection of its own, so one bad item cannot fail
            // the others.
            tracing::warn!(%error, items = captures.len(), "capture batch failed; its items take the general path");
            for job in batch {
                let _ = job.answer.send(Ok(OneStatement::Declined));
            }
        }
    }
}
