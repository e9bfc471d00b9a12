//! Concurrent first deliveries share a statement. Each actix worker has one batcher: an
//! attempt waits in its queue until the batcher may start another statement (at most
//! `capture_batches_per_worker` at once) and the worker's pool has a connection free, then
//! every attempt queued by that time goes out in one statement (`callback_first_delivery_batch`)
//! with one commit. When connections are free an attempt goes out alone at once, so batching
//! adds no wait; under load the queue fills while the connections are busy and each round trip
//! and commit serves many deliveries.
//!
//! The queue is bounded: past [`QUEUE_CAPACITY`] waiting attempts a delivery is refused at once
//! (503, `Retry-After: 1`) instead of waiting longer than a provider's patience while memory
//! grows. Items stay independent: each runs in its own subtransaction, waits for locks only
//! briefly (an item that would wait is sent down the general path), and if the statement as a
//! whole fails nothing of it committed and every item takes the general path on its own, so
//! one bad item cannot fail the others. Nothing is answered before the statement has committed,
//! and a commit is an answer only when it was confirmed: a statement whose wait for the
//! synchronous standby was abandoned (the connection saw PostgreSQL's "committed locally"
//! warning) answers every item 503. A delivery waits for its answer at most the statement's
//! and the commit's bounds; past them it answers 503 while the statement goes on holding its
//! connection (never cancelled: a cancelled wait commits locally), and a queued attempt whose
//! delivery has already been answered is left out of the next statement.

use std::sync::Arc;

use diesel::QueryResult;
use diesel_async::AsyncPgConnection;
use futures_util::future::BoxFuture;
use opentelemetry::trace::TraceContextExt;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::db::pool::PgPool;
use crate::db::watch::{commit_confirmed, mark_commit, note_error};
use crate::idempotency::error::IdempotencyError;
use crate::idempotency::record::OneStatement;
use crate::metrics::Metrics;
use crate::trace_switch::{TRACE, tracing_on};

/// The most attempts in one statement. Each item runs in one subtransaction, which takes a
/// subtransaction id, and PostgreSQL caches only 64 per transaction before every snapshot of
/// every other backend gets slower.
const MAX_BATCH: usize = 64;

/// Attempts a worker lets wait for a connection: a few batches' worth, so a queued delivery
/// waits a few round trips at most.
pub const QUEUE_CAPACITY: usize = 4 * MAX_BATCH;

/// A one-statement attempt the batcher sends alone or with others in one statement. The
/// batcher knows only this, not what an item writes, so the statements stay in their own
/// file (the capture implements it, in `super::callback`).
pub trait BatchItem: Send + Sync + Sized + 'static {
    /// What the attempt did, when it finished.
    type Output: Send + 'static;

    /// This attempt alone: one statement, with the session's full lock timeout.
    fn run_alone<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, QueryResult<OneStatement<Self::Output>>>;

    /// Several attempts in one statement and one commit; the answers come in their order.
    fn run_batch<'c>(
        conn: &'c mut AsyncPgConnection,
        items: &'c [&'c Self],
    ) -> BoxFuture<'c, QueryResult<Vec<OneStatement<Self::Output>>>>;
}

type Answer<O> = Result<OneStatement<O>, IdempotencyError>;

struct Job<J: BatchItem> {
    item: J,
    answer: oneshot::Sender<Answer<J::Output>>,
    /// The span waiting for the answer (disabled while tracing is off): the statement's span
    /// links to it and it to the statement's.
    caller: tracing::Span,
}

/// A worker's first-delivery queue.
pub struct Batcher<J: BatchItem> {
    queue: mpsc::Sender<Job<J>>,
    metrics: Metrics,
    /// How long a delivery waits for its statement to be committed and confirmed.
    answer_timeout: std::time::Duration,
}

// By hand: the derive would ask `J: Clone`, and only the queue's sender is cloned.
impl<J: BatchItem> Clone for Batcher<J> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            metrics: self.metrics.clone(),
            answer_timeout: self.answer_timeout,
        }
    }
}

impl<J: BatchItem> Batcher<J> {
    /// Starts the batching task on the current runtime (the worker's own); it runs at most
    /// `in_flight` statements at once.
    pub fn spawn(
        pool: PgPool,
        metrics: Metrics,
        in_flight: usize,
        answer_timeout: std::time::Duration,
    ) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(batch_jobs(pool, metrics.clone(), jobs, in_flight.max(1)));
        Self {
            queue,
            metrics,
            answer_timeout,
        }
    }

    /// Runs `item` in the next statement and waits for its answer; refuses at once when
    /// the queue is full.
    pub async fn run(&self, item: J) -> Answer<J::Output> {
        let (answer, answered) = oneshot::channel();
        // Only a traced process needs the caller's span (a clone costs a registry lookup).
        let caller = if tracing_on() {
            tracing::Span::current()
        } else {
            tracing::Span::none()
        };
        // Counted before it is sent: the batching task may take it out at once.
        self.metrics.capture_queued();
        self.queue
            .try_send(Job {
                item,
                answer,
                caller,
            })
            .map_err(|error| {
                self.metrics.capture_refused();
                match error {
                    mpsc::error::TrySendError::Full(_) => {
                        IdempotencyError::Saturated("the capture queue is full")
                    }
                    mpsc::error::TrySendError::Closed(_) => stopped(),
                }
            })?;
        match tokio::time::timeout(self.answer_timeout, answered).await {
            Ok(answer) => answer.map_err(|_| stopped())?,
            Err(_) => Err(IdempotencyError::Unconfirmed(
                "the capture statement was not committed and confirmed in time",
            )),
        }
    }
}

fn stopped() -> IdempotencyError {
    IdempotencyError::Pool("the capture batcher has stopped".into())
}

async fn batch_jobs<J: BatchItem>(
    pool: PgPool,
    metrics: Metrics,
    mut jobs: mpsc::Receiver<Job<J>>,
    in_flight: usize,
) {
    // Few statements at once make large batches, which cost PostgreSQL less per delivery, and
    // leave the pool's other connections to the general path (docs/performance.md).
    let slots = Arc::new(Semaphore::new(in_flight));
    while let Some(first) = jobs.recv().await {
        // Wait for a slot and a connection first: whatever queues meanwhile joins this
        // statement.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let connection = pool.get_owned().await;
        // A delivery that stopped waiting has been answered (503): it is not run.
        let mut batch: Vec<Job<J>> = Vec::with_capacity(MAX_BATCH);
        batch.extend(Some(first).filter(|job| !job.answer.is_closed()));
        let mut taken = 1;
        while batch.len() < MAX_BATCH {
            let Ok(job) = jobs.try_recv() else {
                break;
            };
            taken += 1;
            if !job.answer.is_closed() {
                batch.push(job);
            }
        }
        // Every job taken out leaves the queue's gauge, those that stopped waiting too (the
        // sender reads the gauge to yield to the callback path).
        metrics.observe_capture_batch(batch.len(), taken);
        if batch.is_empty() {
            continue;
        }
        match connection {
            Ok(mut conn) => {
                let statement = statement_span(&batch);
                tokio::spawn(
                    async move {
                        run_jobs(&mut conn, batch).await;
                        drop(slot);
                    }
                    .instrument(statement),
                );
            }
            Err(error) => {
                let error = error.to_string();
                for job in batch {
                    let _ = job.answer.send(Err(IdempotencyError::Pool(error.clone())));
                }
            }
        }
    }
}

/// The span of one statement (claim, write and commit of every item in it): in the trace of
/// its first item, and linked both ways with every item's waiting span, so each request's
/// trace leads to the statement it shared.
fn statement_span<J: BatchItem>(batch: &[Job<J>]) -> tracing::Span {
    // Created inside the first traced caller's span, so it is in a sampled trace (the trace
    // layer's filter looks at the span around a new one) and that span is its parent.
    let Some(first) = batch.iter().find(|job| !job.caller.is_disabled()) else {
        return tracing::Span::none();
    };
    let span = first
        .caller
        .in_scope(|| tracing::info_span!(target: TRACE, "capture_statement", items = batch.len()));
    if span.is_disabled() {
        return span;
    }
    for job in batch {
        span.add_link(job.caller.context().span().span_context().clone());
    }
    let statement = span.context().span().span_context().clone();
    for job in batch {
        job.caller.add_link(statement.clone());
    }
    span
}

/// The answer of an item whose statement committed without the standby's confirmation.
fn unconfirmed<O>() -> Answer<O> {
    Err(IdempotencyError::Unconfirmed(
        "the commit's wait for the synchronous standby was abandoned",
    ))
}

async fn run_jobs<J: BatchItem>(conn: &mut AsyncPgConnection, mut batch: Vec<Job<J>>) {
    let mark = mark_commit(conn);
    if batch.len() == 1 {
        // Alone: the plain statement, with the session's full lock timeout.
        if let Some(job) = batch.pop() {
            let answer = job.item.run_alone(conn).await.map_err(|error| {
                note_error(conn, &error);
                IdempotencyError::from(error)
            });
            let answer = match answer {
                Ok(_) if !commit_confirmed(conn, mark) => unconfirmed(),
                other => other,
            };
            let _ = job.answer.send(answer);
        }
        return;
    }
    let items: Vec<&J> = batch.iter().map(|job| &job.item).collect();
    match J::run_batch(conn, &items).await {
        Ok(_) if !commit_confirmed(conn, mark) => {
            for job in batch {
                let _ = job.answer.send(unconfirmed());
            }
        }
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
            note_error(conn, &error);
            // The statement failed, so nothing of it committed (had it committed and only the
            // answer been lost, the general path finds the records and replays them). Every item
            // goes down the general path on a connection of its own, so one bad item cannot fail
            // the others.
            tracing::warn!(%error, items = items.len(), "capture batch failed; its items take the general path");
            for job in batch {
                let _ = job.answer.send(Ok(OneStatement::Declined));
            }
        }
    }
}
