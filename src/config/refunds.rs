//! `[refunds]`: merchant refunds' leases and the provider call's bounds.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, bounded, hours, within};

/// Merchant refunds (`refund.create`): the lease of a request and the provider call's bounds.
#[derive(Debug, Clone)]
pub struct RefundSettings {
    /// How long one attempt holds a request before another may take it over; longer than
    /// `provider_timeout`, so a live attempt never loses its lease while it waits.
    pub lease: Duration,
    /// How often the background recoverer looks for expired leases.
    pub recover_interval: Duration,
    /// Upper bound of one provider call, connect included.
    pub provider_timeout: Duration,
    pub provider_connect_timeout: Duration,
    /// No provider call for a request older than this (a person resolves it): below the
    /// providers' idempotency key lifetime (Stripe: 24 h), past which a call could refund twice.
    pub max_retry_age: Duration,
    /// A request the provider accepted whose refund webhook has not come after this is listed
    /// in `/admin/attention` (its amount stays reserved meanwhile).
    pub pending_overdue: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRefunds {
    lease_secs: Option<u64>,
    recover_interval_secs: Option<u64>,
    provider_timeout_ms: Option<u64>,
    provider_connect_timeout_ms: Option<u64>,
    max_retry_age_hours: Option<u64>,
    pending_attention_hours: Option<u64>,
}

pub(super) fn validate(raw: RawRefunds) -> Result<RefundSettings, ConfigError> {
    let lease_secs = bounded("refunds.lease_secs", raw.lease_secs, 30, 1, 3600)?;
    let recover_interval_secs = bounded(
        "refunds.recover_interval_secs",
        raw.recover_interval_secs,
        10,
        1,
        3600,
    )?;
    let timeout_ms = bounded(
        "refunds.provider_timeout_ms",
        raw.provider_timeout_ms,
        10_000,
        1,
        600_000,
    )?;
    let connect_ms = raw
        .provider_connect_timeout_ms
        .unwrap_or_else(|| timeout_ms.min(3000));
    within(
        "refunds.provider_connect_timeout_ms",
        connect_ms,
        1,
        timeout_ms,
    )?;
    // A holder still waiting for the provider must never find its lease taken over.
    if lease_secs.saturating_mul(1000) <= timeout_ms {
        return Err(ConfigError(format!(
            "refunds.lease_secs: {lease_secs} s must be greater than the provider call's total timeout \
             (refunds.provider_timeout_ms = {timeout_ms} ms), or a live attempt could lose its lease"
        )));
    }
    // Stripe forgets an idempotency key about 24 hours after its first use: a call after that
    // with the same key may create a second refund.
    let max_retry_age_hours = bounded(
        "refunds.max_retry_age_hours",
        raw.max_retry_age_hours,
        20,
        1,
        23,
    )?;
    let pending_attention_hours = bounded(
        "refunds.pending_attention_hours",
        raw.pending_attention_hours,
        24,
        1,
        720,
    )?;
    Ok(RefundSettings {
        lease: Duration::from_secs(lease_secs),
        recover_interval: Duration::from_secs(recover_interval_secs),
        provider_timeout: Duration::from_millis(timeout_ms),
        provider_connect_timeout: Duration::from_millis(connect_ms),
        max_retry_age: hours(max_retry_age_hours),
        pending_overdue: hours(pending_attention_hours),
    })
}
