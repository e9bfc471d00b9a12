//! Delivered notifications are deleted `[notifications] retention_hours` after their delivery,
//! in small batches, by one gateway at a time (elected by an advisory lock, as the expiry
//! cleaner is). Pending and failed notifications are kept: a failed one is the only trace of a
//! change its merchant never heard of, until an admin redelivers it.

use std::time::Duration;

use diesel_async::AsyncPgConnection;

use super::model;
use crate::db;
use crate::metrics::Metrics;

/// Arbitrary but fixed: the advisory lock that elects one gateway for the retention pass.
pub const LOCK_KEY: i64 = 0x6367_775f_6e74_6672; // "cgw_ntfr"

/// One full pass: batches of `batch` until one comes back short; how many were deleted.
pub async fn run_pass(
    conn: &mut AsyncPgConnection,
    retention: Duration,
    batch: i64,
) -> diesel::QueryResult<u64> {
    let mut total = 0u64;
    loop {
        let deleted = model::delete_delivered(conn, retention, batch).await? as u64;
        total += deleted;
        if deleted < u64::try_from(batch).unwrap_or(u64::MAX) {
            return Ok(total);
        }
    }
}

/// A pass every `interval`, by whichever gateway holds the lock, forever.
pub async fn run_periodically(
    database_url: String,
    interval: Duration,
    retention: Duration,
    batch: i64,
    metrics: Metrics,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let pass = async {
            let Some(mut conn) = db::connect_holding_lock(&database_url, LOCK_KEY).await? else {
                return Ok::<_, anyhow::Error>(None);
            };
            Ok(Some(run_pass(&mut conn, retention, batch).await?))
        };
        match pass.await {
            Ok(Some(deleted)) => {
                metrics.record_notifications_deleted(deleted);
                tracing::debug!(deleted, "delivered notifications past retention removed");
            }
            Ok(None) => tracing::debug!("another gateway holds the notification retention lock"),
            Err(error) => {
                tracing::warn!(error = %error, "notification retention pass failed; will retry");
            }
        }
    }
}
