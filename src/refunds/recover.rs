//! The background recoverer inside `serve`: finishes `refund.create` records whose lease
//! expired (their holder crashed or hung) or was released (the provider was unavailable), so a
//! crash never needs a client retry. One gateway at a time, elected by an advisory lock.
//!
//! It must neither hammer a provider nor starve anyone: a request whose outcome stayed unknown
//! is due again only after its backoff (doubling from the recover interval), a crashed holder's
//! request is taken before every released one, and a pass stops starting attempts once it has
//! run for its budget (the recover interval), so the next pass chooses again from the top. A
//! crashed holder's refund is thus taken within its lease, plus one interval, plus the pass in
//! progress (at most the budget and one provider call).

use std::time::{Duration, Instant};

use super::create::{Refunds, recover};
use super::error::RefundError;
use super::model::RefundRequest;
use crate::db;
use crate::metrics::Metrics;

/// Arbitrary but fixed: the advisory lock that elects one recoverer among many gateways.
pub const RECOVERER_LOCK_KEY: i64 = 0x6367_775f_7266_6e64; // "cgw_rfnd"

/// At most this many records per pass; the next pass takes the rest.
const BATCH: i64 = 100;

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Requests it finished (their answer stored).
    pub finished: usize,
    /// Requests waiting for a person after it (retries stopped).
    pub needing_review: i64,
}

/// One pass on a connection of its own if no other gateway holds the recoverer lock, or `None`
/// when another instance is recovering. It starts no attempt after `budget`. The lock dies
/// with the connection.
pub async fn run_exclusive_pass(
    database_url: &str,
    refunds: &Refunds,
    budget: Duration,
) -> anyhow::Result<Option<Pass>> {
    let Some(mut conn) = db::connect_holding_lock(database_url, RECOVERER_LOCK_KEY).await? else {
        return Ok(None);
    };
    let started = Instant::now();
    let due = RefundRequest::due(&mut conn, BATCH).await?;
    let mut finished = 0;
    for request in &due {
        if started.elapsed() >= budget {
            break;
        }
        match recover(&mut conn, refunds, request).await {
            Ok(true) => finished += 1,
            Ok(false) => {}
            Err(error @ RefundError::Unconfirmed(_)) => {
                // A commit outlasted its bound on this connection (dropped, not cancelled:
                // the connection is no longer usable), or the standby did not confirm it:
                // the pass ends; the next one connects anew.
                return Err(anyhow::anyhow!(
                    "record {}: {error}; the pass stops here",
                    request.record_id
                ));
            }
            Err(error) => tracing::warn!(
                record_id = request.record_id,
                error = %error,
                "refund recovery attempt did not finish; the next pass retries"
            ),
        }
    }
    let needing_review = RefundRequest::needing_review(&mut conn).await?;
    Ok(Some(Pass {
        finished,
        needing_review,
    }))
}

/// A pass every `interval`, forever; the liveness gauge moves at start and after each pass
/// that reached the database.
pub async fn run_periodically(
    database_url: String,
    refunds: Refunds,
    interval: Duration,
    metrics: Metrics,
) {
    metrics.record_refund_recoverer_pass();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match run_exclusive_pass(&database_url, &refunds, interval).await {
            Ok(outcome) => {
                match outcome {
                    Some(pass) => {
                        if pass.finished > 0 {
                            tracing::info!(
                                finished = pass.finished,
                                "abandoned refund requests finished"
                            );
                        }
                        metrics.record_refunds_needing_review(pass.needing_review);
                    }
                    None => tracing::debug!("another gateway holds the refund recoverer lock"),
                }
                // A failed pass leaves the gauge alone, so the stalled alert hears of it.
                metrics.record_refund_recoverer_pass();
            }
            Err(error) => tracing::warn!(error = %error, "refund recovery pass failed; will retry"),
        }
    }
}
