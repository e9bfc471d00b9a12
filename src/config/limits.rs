//! `[limits]`: how much one source address, or one merchant, may cost the gateway before it
//! answers 429 (docs/access.md, docs/notifications.md). Callbacks of providers that sign their
//! deliveries are never limited: a provider's retry storm is the gateway's job to absorb.

use serde::Deserialize;

use super::rules::{ConfigError, bounded};

/// The abuse limits. Each is a rate with a burst of the same size (a quota refilled evenly).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitSettings {
    /// Bearer keys that are not live (operator keys and merchant tokens, unknown, revoked or
    /// expired), per source address and minute; past it a key is refused before any lookup.
    pub unknown_keys_per_minute: u32,
    /// Refused console sign-ins per source address and minute.
    pub failed_sign_ins_per_minute: u32,
    /// A merchant's endpoint changes, rotations, tests and pings (each an audit row and a
    /// reload of every gateway) per merchant and hour.
    pub endpoint_changes_per_hour: u32,
    /// Deliveries of providers that sign nothing (Mollie: each costs a call to its API) per
    /// source address and minute.
    pub unsigned_deliveries_per_minute: u32,
    /// How many proxies in front of the gateway append to `X-Forwarded-For`: the source
    /// address is that many entries from its right end. 0: the connection's peer (a header a
    /// client writes itself is never believed).
    pub trusted_proxy_hops: u32,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            unknown_keys_per_minute: 30,
            failed_sign_ins_per_minute: 10,
            endpoint_changes_per_hour: 60,
            unsigned_deliveries_per_minute: 600,
            trusted_proxy_hops: 0,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimits {
    unknown_keys_per_minute: Option<u64>,
    failed_sign_ins_per_minute: Option<u64>,
    endpoint_changes_per_hour: Option<u64>,
    unsigned_deliveries_per_minute: Option<u64>,
    trusted_proxy_hops: Option<u64>,
}

pub(super) fn validate(raw: RawLimits) -> Result<LimitSettings, ConfigError> {
    let defaults = LimitSettings::default();
    let rate = |field: &str, value: Option<u64>, default: u32| {
        bounded(field, value, u64::from(default), 1, 1_000_000).map(|v| v as u32)
    };
    Ok(LimitSettings {
        unknown_keys_per_minute: rate(
            "limits.unknown_keys_per_minute",
            raw.unknown_keys_per_minute,
            defaults.unknown_keys_per_minute,
        )?,
        failed_sign_ins_per_minute: rate(
            "limits.failed_sign_ins_per_minute",
            raw.failed_sign_ins_per_minute,
            defaults.failed_sign_ins_per_minute,
        )?,
        endpoint_changes_per_hour: rate(
            "limits.endpoint_changes_per_hour",
            raw.endpoint_changes_per_hour,
            defaults.endpoint_changes_per_hour,
        )?,
        unsigned_deliveries_per_minute: rate(
            "limits.unsigned_deliveries_per_minute",
            raw.unsigned_deliveries_per_minute,
            defaults.unsigned_deliveries_per_minute,
        )?,
        trusted_proxy_hops: bounded(
            "limits.trusted_proxy_hops",
            raw.trusted_proxy_hops,
            0,
            0,
            10,
        )? as u32,
    })
}
