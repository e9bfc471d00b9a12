//! Abuse limits ([`crate::config::limits`]): keyed rate limiters (the `governor` crate's GCRA,
//! one state per key) per source address or merchant, each refusal a 429 with `Retry-After`
//! counted in `gateway_rate_limited_total{limit}`.
//!
//! Two kinds:
//! - a charge per request (a merchant's endpoint changes, an unsigned provider's deliveries):
//!   the limiter decides before any work;
//! - a charge per failure (keys that are not live, refused sign-ins): only what failed costs,
//!   so an operator's busy script is never slowed by its own success. A failure past the quota
//!   closes its address until the limiter would let the next one through, and a closed
//!   address is refused before its key is even looked up: a flood of guesses costs no
//!   database lookup once past the quota.
//!
//! Callbacks of providers that sign their deliveries never come here (their route asks only
//! for an unsigned provider), so the limits cost the signed-callback path nothing. Each gateway
//! limits on its own: with N gateways behind a balancer a client gets up to N times a quota.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::limits::LimitSettings;
use crate::metrics::Metrics;

/// Keys a keyed limiter holds before it forgets those whose state is back to full (bounds its
/// memory whatever the number of addresses seen).
const FORGET_ABOVE: usize = 10_000;

/// A request over a limit: which, and how long until one more would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    /// The `limit` label: `unknown_key`, `failed_sign_in`, `endpoint_change`,
    /// `unsigned_delivery`.
    pub limit: &'static str,
    pub retry_after: Duration,
}

impl Limited {
    /// `Retry-After` in whole seconds, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// One quota, per key.
struct Keyed<K: Hash + Eq + Clone> {
    name: &'static str,
    limiter: DefaultKeyedRateLimiter<K>,
    clock: DefaultClock,
}

impl<K: Hash + Eq + Clone> Keyed<K> {
    fn new(name: &'static str, quota: Quota) -> Self {
        Self {
            name,
            limiter: RateLimiter::keyed(quota),
            clock: DefaultClock::default(),
        }
    }

    /// One more for `key`: `Err` when over its quota.
    fn charge(&self, key: &K) -> Result<(), Limited> {
        let charged = self.limiter.check_key(key).map_err(|not_until| Limited {
            limit: self.name,
            retry_after: not_until.wait_time_from(self.clock.now()),
        });
        if self.limiter.len() > FORGET_ABOVE {
            self.limiter.retain_recent();
        }
        charged
    }
}

/// Failures per source address: charged on each failure; past the quota the address is closed
/// until the limiter would pass the next one.
struct Failures {
    keyed: Keyed<IpAddr>,
    closed: Mutex<HashMap<IpAddr, Instant>>,
}

impl Failures {
    fn new(name: &'static str, quota: Quota) -> Self {
        Self {
            keyed: Keyed::new(name, quota),
            closed: Mutex::default(),
        }
    }

    /// `Err` while `address` is closed.
    fn check(&self, address: IpAddr) -> Result<(), Limited> {
        let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
        let Some(until) = closed.get(&address).copied() else {
            return Ok(());
        };
        let now = Instant::now();
        if until <= now {
            closed.remove(&address);
            return Ok(());
        }
        Err(Limited {
            limit: self.keyed.name,
            retry_after: until - now,
        })
    }

    /// One more failure from `address`: `Err` (and the address closed) past the quota.
    fn failed(&self, address: IpAddr) -> Result<(), Limited> {
        let limited = self.keyed.charge(&address);
        if let Err(limited) = &limited {
            let now = Instant::now();
            let mut closed = self.closed.lock().unwrap_or_else(|e| e.into_inner());
            if closed.len() > FORGET_ABOVE {
                closed.retain(|_, until| *until > now);
            }
            closed.insert(address, now + limited.retry_after);
        }
        limited
    }
}

/// The limits of one gateway, shared by its workers.
pub struct Limits {
    unknown_keys: Failures,
    failed_sign_ins: Failures,
    endpoint_changes: Keyed<i64>,
    unsigned_deliveries: Keyed<IpAddr>,
    trusted_proxy_hops: usize,
    metrics: Metrics,
}

fn per_minute(n: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

fn per_hour(n: u32) -> Quota {
    Quota::per_hour(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

impl Limits {
    pub fn new(settings: &LimitSettings, metrics: Metrics) -> Self {
        Self {
            unknown_keys: Failures::new(
                "unknown_key",
                per_minute(settings.unknown_keys_per_minute),
            ),
            failed_sign_ins: Failures::new(
                "failed_sign_in",
                per_minute(settings.failed_sign_ins_per_minute),
            ),
            endpoint_changes: Keyed::new(
                "endpoint_change",
                per_hour(settings.endpoint_changes_per_hour),
            ),
            unsigned_deliveries: Keyed::new(
                "unsigned_delivery",
                per_minute(settings.unsigned_deliveries_per_minute),
            ),
            trusted_proxy_hops: settings.trusted_proxy_hops as usize,
            metrics,
        }
    }

    fn counted(&self, result: Result<(), Limited>) -> Result<(), Limited> {
        if let Err(limited) = &result {
            self.metrics.record_rate_limited(limited.limit);
        }
        result
    }

    /// Before a bearer key is looked up: `Err` while its address is closed to key guesses.
    pub fn key_lookup(&self, address: IpAddr) -> Result<(), Limited> {
        self.counted(self.unknown_keys.check(address))
    }

    /// A bearer key from `address` was not live.
    pub fn key_refused(&self, address: IpAddr) -> Result<(), Limited> {
        self.counted(self.unknown_keys.failed(address))
    }

    /// Before a console sign-in is checked: `Err` while its address is closed.
    pub fn sign_in(&self, address: IpAddr) -> Result<(), Limited> {
        self.counted(self.failed_sign_ins.check(address))
    }

    /// A console sign-in from `address` was refused.
    pub fn sign_in_refused(&self, address: IpAddr) -> Result<(), Limited> {
        self.counted(self.failed_sign_ins.failed(address))
    }

    /// One change, rotation, test or ping of `merchant_id`'s endpoint.
    pub fn endpoint_change(&self, merchant_id: i64) -> Result<(), Limited> {
        self.counted(self.endpoint_changes.charge(&merchant_id))
    }

    /// One delivery of a provider that signs nothing, from `address`.
    pub fn unsigned_delivery(&self, address: IpAddr) -> Result<(), Limited> {
        self.counted(self.unsigned_deliveries.charge(&address))
    }

    /// The source address of a request: its peer, or with `trusted_proxy_hops` the entry of
    /// `X-Forwarded-For` that many places from its right end (each trusted proxy appends the
    /// address it got the request from; what a client wrote itself sits further left).
    pub fn source(&self, peer: Option<IpAddr>, forwarded_for: &[&str]) -> Option<IpAddr> {
        if self.trusted_proxy_hops == 0 {
            return peer;
        }
        let entries: Vec<&str> = forwarded_for
            .iter()
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        entries
            .len()
            .checked_sub(self.trusted_proxy_hops)
            .and_then(|i| entries.get(i))
            .and_then(|e| e.parse::<IpAddr>().ok())
            .or(peer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(settings: LimitSettings) -> Limits {
        Limits::new(&settings, Metrics::new())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn failures_past_the_quota_close_their_address_only() {
        let limits = limits(LimitSettings {
            unknown_keys_per_minute: 2,
            ..LimitSettings::default()
        });
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for _ in 0..2 {
            assert_eq!(limits.key_lookup(a), Ok(()));
            assert_eq!(limits.key_refused(a), Ok(()));
        }
        let limited = limits.key_refused(a).unwrap_err();
        assert_eq!(limited.limit, "unknown_key");
        assert!(
            (1..=30).contains(&limited.retry_after_secs()),
            "{limited:?}"
        );
        assert!(limits.key_lookup(a).is_err(), "closed before any lookup");
        assert_eq!(limits.key_lookup(b), Ok(()), "another address");
    }

    #[test]
    fn a_merchants_changes_are_charged_each_and_apart_from_anothers() {
        let limits = limits(LimitSettings {
            endpoint_changes_per_hour: 3,
            ..LimitSettings::default()
        });
        for _ in 0..3 {
            assert_eq!(limits.endpoint_change(42), Ok(()));
        }
        let limited = limits.endpoint_change(42).unwrap_err();
        assert!(limited.retry_after_secs() >= 1000, "{limited:?}");
        assert_eq!(limits.endpoint_change(43), Ok(()));
    }

    #[test]
    fn the_source_is_the_peer_unless_proxies_are_trusted_and_then_never_what_the_client_wrote() {
        let peer = Some(ip("10.0.0.9"));
        let direct = limits(LimitSettings::default());
        assert_eq!(direct.source(peer, &["203.0.113.5"]), peer);
        let behind_one = limits(LimitSettings {
            trusted_proxy_hops: 1,
            ..LimitSettings::default()
        });
        // The client wrote 1.2.3.4 itself; the proxy appended what it saw.
        assert_eq!(
            behind_one.source(peer, &["1.2.3.4, 198.51.100.7"]),
            Some(ip("198.51.100.7"))
        );
        assert_eq!(behind_one.source(peer, &[]), peer);
        let behind_two = limits(LimitSettings {
            trusted_proxy_hops: 2,
            ..LimitSettings::default()
        });
        assert_eq!(
            behind_two.source(peer, &["1.2.3.4", "198.51.100.7, 10.0.0.3"]),
            Some(ip("198.51.100.7"))
        );
    }
}
