//! What the notification table keeps, bounded in time and in rows, by one gateway at a time
//! (elected by an advisory lock, as the expiry cleaner is), in small batches:
//!
//! - delivered notifications are deleted `[notifications] retention_hours` after delivery;
//! - failed ones (every attempt of the schedule failed) `failed_retention_hours` after their
//!   last attempt: until then a failed row is the trace of a change its merchant never heard
//!   of, and an operator can redeliver it;
//! - a disabled endpoint keeps at most `disabled_keep` pending notifications: its
//!   rows keep coming while nothing is sent to it, so beyond the bound the first due go (the
//!   newest stay, so each order's latest change among them is heard once it is enabled), and
//!   are counted on the endpoint (`dropped`, shown to admins and on the console).
//!
//! - a pending notification no gateway can send (staged by a change that read its endpoint
//!   just before the endpoint's deletion committed, or for a file endpoint the configuration
//!   no longer names) goes where the deletion sent the rest: the merchant's file endpoint, or
//!   failed (`endpoint deleted`; `no endpoint` for the file's, after a grace for rollouts).
//!
//! Pending notifications of an endpoint that works are never deleted.

use std::time::Duration;

use diesel_async::AsyncPgConnection;

use super::model;
use crate::config::Settings;
use crate::config::merchants::MerchantSettings;
use crate::db;
use crate::metrics::Metrics;

/// Arbitrary but fixed: the advisory lock that elects one gateway for the retention pass.
pub const LOCK_KEY: i64 = 0x6367_775f_6e74_6672; // "cgw_ntfr"

/// How many batches of a disabled endpoint's overflow one count of its pending rows serves.
const COUNTED_BATCHES: i64 = 20;

/// What a pass keeps: the retention settings, and the merchants whose file endpoint this
/// gateway's configuration names.
#[derive(Debug, Clone)]
pub struct Keep {
    pub delivered: Duration,
    pub failed: Duration,
    pub disabled_pending: u64,
    pub file_merchants: Vec<i64>,
}

impl Keep {
    pub fn of(settings: &Settings) -> Self {
        let notifications = &settings.notifications;
        Self {
            delivered: notifications.retention,
            failed: notifications.failed_retention,
            disabled_pending: notifications.disabled_keep,
            file_merchants: MerchantSettings::endpoints(&settings.merchants)
                .map(|(id, _)| id)
                .collect(),
        }
    }
}

/// What a pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    pub delivered: u64,
    pub failed: u64,
    /// Pending notifications of disabled endpoints beyond what they keep.
    pub dropped: u64,
    /// Pending notifications no gateway could send, failed (`endpoint deleted`, `no
    /// endpoint`).
    pub orphaned: u64,
    /// Pending notifications of a deleted endpoint moved to the merchant's file endpoint.
    pub moved: u64,
}

/// One full pass: each kind in batches of `batch` until one comes back short.
pub async fn run_pass(
    conn: &mut AsyncPgConnection,
    keep: &Keep,
    batch: i64,
) -> diesel::QueryResult<Removed> {
    let full = |n: u64| n >= u64::try_from(batch).unwrap_or(u64::MAX);
    let mut removed = Removed::default();
    loop {
        let n = model::delete_delivered(conn, keep.delivered, batch).await? as u64;
        removed.delivered += n;
        if !full(n) {
            break;
        }
    }
    loop {
        let n = model::delete_failed(conn, keep.failed, batch).await? as u64;
        removed.failed += n;
        if !full(n) {
            break;
        }
    }
    loop {
        let settled = model::settle_orphans(conn, &keep.file_merchants, batch).await?;
        removed.orphaned += settled.failed as u64;
        removed.moved += settled.moved as u64;
        if !full((settled.failed + settled.moved) as u64) {
            break;
        }
    }
    let bound = i64::try_from(keep.disabled_pending).unwrap_or(i64::MAX);
    // A count reads at most this far past the bound, and serves that many batches of deletes.
    let reach = batch.saturating_mul(COUNTED_BATCHES);
    for endpoint in model::disabled_endpoints(conn).await? {
        let key = model::EndpointKey::new(endpoint.merchant_id, &endpoint.endpoint_id);
        let mut dropped_here = 0u64;
        'counts: loop {
            let pending = model::pending_upto(conn, &key, bound.saturating_add(reach)).await?;
            let mut over = pending - bound;
            while over > 0 {
                let dropped = model::drop_first_due(conn, &key, over.min(batch)).await?;
                if dropped <= 0 {
                    // Enabled meanwhile, or its rows held by a claim: the next pass looks again.
                    break 'counts;
                }
                over -= dropped;
                dropped_here += dropped as u64;
            }
            if pending < bound.saturating_add(reach) {
                break;
            }
        }
        if dropped_here > 0 {
            removed.dropped += dropped_here;
            tracing::warn!(
                merchant_id = key.merchant_id,
                endpoint_id = %key.endpoint_id,
                dropped = dropped_here,
                kept = keep.disabled_pending,
                "a disabled endpoint's first due pending notifications were dropped beyond what it keeps"
            );
        }
    }
    Ok(removed)
}

/// A pass every `interval`, by whichever gateway holds the lock, forever.
pub async fn run_periodically(
    database_url: String,
    interval: Duration,
    keep: Keep,
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
            Ok(Some(run_pass(&mut conn, &keep, batch).await?))
        };
        match pass.await {
            Ok(Some(removed)) => {
                metrics.record_notifications_deleted(removed.delivered + removed.failed);
                metrics.record_notifications_dropped(removed.dropped);
                if removed.orphaned > 0 {
                    tracing::warn!(
                        failed = removed.orphaned,
                        "pending notifications of deleted endpoints failed (endpoint deleted)"
                    );
                }
                tracing::debug!(?removed, "notifications past retention removed");
            }
            Ok(None) => tracing::debug!("another gateway holds the notification retention lock"),
            Err(error) => {
                tracing::warn!(error = %error, "notification retention pass failed; will retry");
            }
        }
    }
}
