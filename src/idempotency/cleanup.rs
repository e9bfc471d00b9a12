//! Expiry: deletes expired, finished idempotency records (and transmission bindings past
//! their window, `transmission.rs`) in small batches so no long lock or large transaction ever
//! competes with traffic. The ledger is never touched: its own
//! uniqueness keeps a late redelivery from posting twice once its record is gone.

use std::time::Duration;

use diesel::sql_types::BigInt;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::transmission;
use crate::db;

/// Arbitrary but fixed: the advisory lock that elects one cleaner among many gateways.
pub const CLEANER_LOCK_KEY: i64 = 0x6367_775f_636c_6e72; // "cgw_clnr"

/// The statement of one batch. `ORDER BY expires_at` walks the expires_at index, and
/// `SKIP LOCKED` lets two cleaners (or a cleaner and a late request) pass each other.
/// A `refund.create` record outlives its refund request: it stays while the request is not
/// final (processing or pending: the provider's webhook has not come) and for its ttl after the
/// request became final, because once it is gone the client's retry with the same key is a new
/// request, with a new provider idempotency key, and the provider would refund again.
pub const DELETE_BATCH_SQL: &str = "DELETE FROM idempotency_keys WHERE id IN (\
     SELECT k.id FROM idempotency_keys k \
     WHERE k.expires_at < now() AND k.status <> 'processing' \
       AND (k.op <> 'refund.create' OR NOT EXISTS (\
            SELECT 1 FROM refund_requests r WHERE r.idempotency_record_id = k.id \
              AND (r.status IN ('processing', 'pending') \
                   OR r.updated_at > now() - (k.expires_at - k.created_at)))) \
     ORDER BY k.expires_at LIMIT $1 FOR UPDATE OF k SKIP LOCKED)";

/// Deletes one batch of at most `batch_size` expired, non-processing rows.
pub async fn delete_batch(
    conn: &mut AsyncPgConnection,
    batch_size: i64,
) -> diesel::QueryResult<u64> {
    let deleted = diesel::sql_query(DELETE_BATCH_SQL)
        .bind::<BigInt, _>(batch_size)
        .execute(conn)
        .await?;
    Ok(deleted as u64)
}

/// One full pass: batches until one comes back short. Returns the rows deleted.
pub async fn run_pass(conn: &mut AsyncPgConnection, batch_size: i64) -> diesel::QueryResult<u64> {
    let mut total = 0;
    loop {
        let deleted = delete_batch(conn, batch_size).await?;
        total += deleted;
        if deleted < batch_size as u64 {
            return Ok(total);
        }
    }
}

/// Runs a pass on a connection of its own if no other gateway holds the cleaner lock.
/// Returns `None` when another instance is cleaning. The lock dies with the connection.
pub async fn run_exclusive_pass(
    database_url: &str,
    batch_size: i64,
) -> anyhow::Result<Option<u64>> {
    let Some(mut conn) = db::connect_holding_lock(database_url, CLEANER_LOCK_KEY).await? else {
        return Ok(None);
    };
    let deleted = run_pass(&mut conn, batch_size).await?;
    let transmissions = transmission::delete_expired(&mut conn, batch_size).await?;
    if transmissions > 0 {
        tracing::debug!(transmissions, "expired transmission bindings removed");
    }
    Ok(Some(deleted))
}

/// The background cleaner inside `serve`: a pass every `interval`, forever.
pub async fn run_periodically(
    database_url: String,
    interval: Duration,
    batch_size: i64,
    metrics: crate::metrics::Metrics,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match run_exclusive_pass(&database_url, batch_size).await {
            Ok(Some(deleted)) => {
                metrics.record_cleanup(deleted);
                tracing::info!(deleted, "expired idempotency records removed");
            }
            Ok(None) => tracing::debug!("another gateway holds the cleaner lock"),
            Err(error) => tracing::warn!(error = %error, "idempotency cleanup failed; will retry"),
        }
    }
}
