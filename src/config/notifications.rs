//! `[notifications]`: how the sender delivers merchant notifications and what the table keeps.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, MAX_HOURS, bounded, hours, within};

/// Merchant notifications: how the sender in `serve` delivers them, and how long delivered
/// ones are kept.
#[derive(Debug, Clone)]
pub struct NotificationSettings {
    /// Delivered notifications are deleted this long after their delivery.
    pub retention: Duration,
    /// Failed notifications (every attempt of the schedule failed) are deleted this long after
    /// their last attempt: long enough for an operator to redeliver them, not forever.
    pub failed_retention: Duration,
    /// The most pending notifications a disabled endpoint's merchant keeps: beyond it the
    /// retention pass deletes the first due (the newest stay) and counts them on the endpoint.
    pub disabled_keep: u64,
    /// How fast the pending notifications of an endpoint that is enabled again come due, per
    /// second (they would otherwise all come due at once).
    pub release_per_sec: u64,
    /// Attempts one gateway has in flight at once, over all merchants.
    pub concurrency: usize,
    /// Attempts one gateway has in flight at once for one merchant, so a slow endpoint holds
    /// at most this many of the others' slots.
    pub per_merchant_concurrency: usize,
    /// Upper bound of one attempt (connect, request, answer); the contract's 15 s by default.
    pub attempt_timeout: Duration,
    /// The waits before the second, third... attempt (each +-20% jitter); after the last
    /// attempt a notification is failed. Tests shorten it.
    pub retry_delays: Vec<Duration>,
    /// How often a sender looks for due notifications it was not woken for (those staged by
    /// another gateway, retries coming due).
    pub poll_interval: Duration,
    /// After a merchant endpoint's secret is rotated, notifications carry the old secret's
    /// signature beside the new one for this long.
    pub secret_overlap: Duration,
    /// Endpoints created by API may be plain `http://` (local setups and tests only).
    pub allow_http: bool,
    /// At most this many endpoints made by API per merchant (10 by default).
    pub endpoints_per_merchant: i64,
}

impl NotificationSettings {
    /// The contract's schedule after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
    pub const DEFAULT_RETRY_DELAYS_MS: [u64; 7] = [
        5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
    ];

    /// How long a claimed notification is kept from other senders: twice the attempt's bound,
    /// so a live attempt has finished and stored its result long before, and one of a sender
    /// that died is sent again within it (30 s by default, within the contract's 60 s).
    pub fn claim_lease(&self) -> Duration {
        self.attempt_timeout.saturating_mul(2)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotifications {
    retention_hours: Option<u64>,
    failed_retention_hours: Option<u64>,
    disabled_keep: Option<u64>,
    release_per_sec: Option<u64>,
    concurrency: Option<u64>,
    per_merchant_concurrency: Option<u64>,
    attempt_timeout_ms: Option<u64>,
    retry_delays_ms: Option<Vec<u64>>,
    poll_interval_ms: Option<u64>,
    secret_overlap_hours: Option<u64>,
    allow_http: Option<bool>,
    allow_hosts: Option<Vec<String>>,
    endpoints_per_merchant: Option<u64>,
}

pub(super) fn validate(raw: RawNotifications) -> Result<NotificationSettings, ConfigError> {
    let retention_hours = bounded(
        "notifications.retention_hours",
        raw.retention_hours,
        168,
        1,
        MAX_HOURS,
    )?;
    let failed_retention_hours = bounded(
        "notifications.failed_retention_hours",
        raw.failed_retention_hours,
        720,
        1,
        MAX_HOURS,
    )?;
    let disabled_keep = bounded(
        "notifications.disabled_keep",
        raw.disabled_keep,
        100_000,
        1,
        10_000_000,
    )?;
    let release_per_sec = bounded(
        "notifications.release_per_sec",
        raw.release_per_sec,
        100,
        1,
        100_000,
    )?;
    let concurrency = bounded("notifications.concurrency", raw.concurrency, 64, 1, 1000)?;
    let per_merchant = bounded(
        "notifications.per_merchant_concurrency",
        raw.per_merchant_concurrency,
        8,
        1,
        concurrency,
    )?;
    // The contract bounds an attempt by 15 s; the setting may only shorten it (tests do).
    let attempt_timeout_ms = bounded(
        "notifications.attempt_timeout_ms",
        raw.attempt_timeout_ms,
        15_000,
        100,
        15_000,
    )?;
    let delays = raw
        .retry_delays_ms
        .unwrap_or_else(|| NotificationSettings::DEFAULT_RETRY_DELAYS_MS.to_vec());
    within(
        "notifications.retry_delays_ms (its length)",
        delays.len() as u64,
        1,
        20,
    )?;
    for (i, delay) in delays.iter().enumerate() {
        // A week at most: beyond it the endpoint is disabled long before (5 days).
        within(
            &format!("notifications.retry_delays_ms[{i}]"),
            *delay,
            1,
            7 * 24 * 3_600_000,
        )?;
    }
    // A dead sender's claim passes after twice the attempt timeout; with this poll the row is
    // sent again within the contract's 60 s.
    let poll_interval_ms = bounded(
        "notifications.poll_interval_ms",
        raw.poll_interval_ms,
        1000,
        10,
        30_000,
    )?;
    // A week at most: an old secret that signs on for longer is not rotated out.
    let secret_overlap_hours = bounded(
        "notifications.secret_overlap_hours",
        raw.secret_overlap_hours,
        24,
        0,
        168,
    )?;
    // The global form exempted a host for every merchant, on any port: one merchant's
    // exemption was everyone's way in. An exemption names an origin for one merchant now.
    if raw.allow_hosts.is_some_and(|hosts| !hosts.is_empty()) {
        return Err(ConfigError(
            "notifications.allow_hosts: an exemption now names an origin for one merchant: \
             write it under that merchant, [[merchants]] id = N, allow_hosts = \
             [\"https://host:port\"]"
                .into(),
        ));
    }
    let endpoints_per_merchant = bounded(
        "notifications.endpoints_per_merchant",
        raw.endpoints_per_merchant,
        10,
        1,
        100,
    )?;
    Ok(NotificationSettings {
        endpoints_per_merchant: i64::try_from(endpoints_per_merchant).unwrap_or(100),
        secret_overlap: hours(secret_overlap_hours),
        allow_http: raw.allow_http.unwrap_or(false),
        retention: hours(retention_hours),
        failed_retention: hours(failed_retention_hours),
        disabled_keep,
        release_per_sec,
        concurrency: concurrency as usize,
        per_merchant_concurrency: per_merchant as usize,
        attempt_timeout: Duration::from_millis(attempt_timeout_ms),
        retry_delays: delays.into_iter().map(Duration::from_millis).collect(),
        poll_interval: Duration::from_millis(poll_interval_ms),
    })
}
