//! `[idempotency]`: how long `order.create` records live, and the expiry cleaner's pace.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, MAX_HOURS, bounded, hours, positive};

#[derive(Debug, Clone)]
pub struct IdempotencySettings {
    /// Lifetime of `order.create` records.
    pub ttl: Duration,
    pub cleanup_interval: Duration,
    pub cleanup_batch_size: i64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    ttl_hours: Option<u64>,
    cleanup_interval_secs: Option<u64>,
    cleanup_batch_size: Option<i64>,
}

pub(super) fn validate(raw: RawIdempotency) -> Result<IdempotencySettings, ConfigError> {
    let ttl_hours = bounded("idempotency.ttl_hours", raw.ttl_hours, 72, 1, MAX_HOURS)?;
    let cleanup_interval_secs = raw.cleanup_interval_secs.unwrap_or(60);
    positive("idempotency.cleanup_interval_secs", cleanup_interval_secs)?;
    let cleanup_batch_size = raw.cleanup_batch_size.unwrap_or(5000);
    if cleanup_batch_size <= 0 {
        return Err(ConfigError(
            "idempotency.cleanup_batch_size must be greater than 0".into(),
        ));
    }
    Ok(IdempotencySettings {
        ttl: hours(ttl_hours),
        cleanup_interval: Duration::from_secs(cleanup_interval_secs),
        cleanup_batch_size,
    })
}
