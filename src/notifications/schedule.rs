//! The delivery schedule, pure: what one attempt's answer means for its notification and its
//! merchant's endpoint, and when the next attempt is due. At once, then after each of the
//! configured delays (the contract's 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h), each with
//! +-20% jitter so a merchant's retries spread out; after the last attempt, failed.

use std::time::Duration;

/// The `last_error` of an attempt that got no answer (no connection, a name that does not
/// resolve).
pub const CONNECTION_FAILED: &str = "connection failed";

/// What one attempt got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A 2xx: delivered.
    Success(u16),
    /// 410 Gone: the merchant retired the endpoint; it is disabled until an admin enables it.
    Gone,
    /// Any other status, a redirect (never followed), a timeout or a connection error.
    Failure(Failure),
}

/// Why an attempt failed, for the notification's `last_error` and the metrics' `result` label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A status other than 2xx, 3xx and 410.
    Status(u16),
    /// A 3xx: the gateway posts to the configured URL only.
    Redirect(u16),
    /// No answer within the attempt timeout.
    Timeout,
    /// The connection could not be made or broke.
    Connection,
    /// The endpoint is, resolves to, or redirects to an address the gateway may not call
    /// (crate::outbound); nothing was sent to it.
    AddressNotAllowed,
}

impl Answer {
    /// The `result` label of `gateway_notification_attempts_total`.
    pub fn label(&self) -> &'static str {
        match self {
            Answer::Success(_) => "delivered",
            Answer::Gone => "gone",
            Answer::Failure(Failure::Status(_)) => "http_error",
            Answer::Failure(Failure::Redirect(_)) => "redirect",
            Answer::Failure(Failure::Timeout) => "timeout",
            Answer::Failure(Failure::Connection) => "connection",
            Answer::Failure(Failure::AddressNotAllowed) => "address_not_allowed",
        }
    }

    /// The HTTP status, when there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            Answer::Success(status)
            | Answer::Failure(Failure::Status(status) | Failure::Redirect(status)) => Some(*status),
            Answer::Gone => Some(410),
            Answer::Failure(
                Failure::Timeout | Failure::Connection | Failure::AddressNotAllowed,
            ) => None,
        }
    }

    /// What the console and the admin API show as the last error (`None` when delivered).
    pub fn error(&self) -> Option<String> {
        match self {
            Answer::Success(_) => None,
            Answer::Gone => Some("410 Gone: endpoint disabled".to_owned()),
            Answer::Failure(Failure::Status(status)) => Some(format!("HTTP {status}")),
            Answer::Failure(Failure::Redirect(status)) => {
                Some(format!("HTTP {status} redirect (not followed)"))
            }
            Answer::Failure(Failure::Timeout) => Some("timeout".to_owned()),
            Answer::Failure(Failure::Connection) => Some(CONNECTION_FAILED.to_owned()),
            Answer::Failure(Failure::AddressNotAllowed) => {
                Some(crate::outbound::ADDRESS_NOT_ALLOWED.to_owned())
            }
        }
    }

    /// Sorts an HTTP status: 2xx delivered, 410 gone, 3xx a redirect, the rest a failure.
    pub fn of_status(status: u16) -> Self {
        match status {
            200..=299 => Answer::Success(status),
            410 => Answer::Gone,
            300..=399 => Answer::Failure(Failure::Redirect(status)),
            _ => Answer::Failure(Failure::Status(status)),
        }
    }
}

/// What becomes of a notification after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Stays pending, due at once, while its endpoint is disabled: enabling sends it.
    WaitForEnable,
    /// Pending, due again after this long.
    RetryAfter(Duration),
    /// That was the last attempt.
    Failed,
}

/// After attempt number `attempt` (1 for the first) got `answer`: what next, under `delays`
/// (the waits before attempts 2, 3, ...). `unit` is a random number in [0, 1) for the jitter.
pub fn next(answer: &Answer, attempt: i32, delays: &[Duration], unit: f64) -> Next {
    match answer {
        Answer::Success(_) => Next::Delivered,
        Answer::Gone => Next::WaitForEnable,
        Answer::Failure(_) => {
            let index = usize::try_from(attempt.max(1) - 1).unwrap_or(usize::MAX);
            match delays.get(index) {
                Some(delay) => Next::RetryAfter(jittered(*delay, unit)),
                None => Next::Failed,
            }
        }
    }
}

/// `delay` scaled into [0.8, 1.2) by `unit` in [0, 1).
pub fn jittered(delay: Duration, unit: f64) -> Duration {
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.5
    };
    delay.mul_f64(0.8 + 0.4 * unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract() -> Vec<Duration> {
        [5, 300, 1800, 7200, 18_000, 36_000, 36_000]
            .into_iter()
            .map(Duration::from_secs)
            .collect()
    }

    #[test]
    fn a_2xx_is_delivered_and_410_waits_for_the_endpoint_to_be_enabled() {
        assert_eq!(
            next(&Answer::of_status(204), 1, &contract(), 0.5),
            Next::Delivered
        );
        assert_eq!(
            next(&Answer::of_status(410), 8, &contract(), 0.5),
            Next::WaitForEnable
        );
    }

    #[test]
    fn failures_follow_the_contract_schedule_and_the_eighth_attempt_is_the_last() {
        let waits: Vec<Next> = (1..=8)
            .map(|attempt| next(&Answer::of_status(500), attempt, &contract(), 0.5))
            .collect();
        assert_eq!(
            waits,
            [5, 300, 1800, 7200, 18_000, 36_000, 36_000]
                .into_iter()
                .map(|s| Next::RetryAfter(Duration::from_secs(s)))
                .chain([Next::Failed])
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let delay = Duration::from_secs(300);
        assert_eq!(jittered(delay, 0.0), Duration::from_secs(240));
        assert!(jittered(delay, 0.999_999) < Duration::from_secs(360));
        assert!(jittered(delay, 0.999_999) > Duration::from_secs(359));
        assert_eq!(jittered(delay, f64::NAN), delay);
    }

    #[test]
    fn redirects_timeouts_and_other_statuses_are_failures_with_their_own_labels() {
        assert_eq!(Answer::of_status(302).label(), "redirect");
        assert_eq!(Answer::of_status(302).status(), Some(302));
        assert_eq!(Answer::of_status(503).label(), "http_error");
        assert_eq!(Answer::Failure(Failure::Timeout).label(), "timeout");
        assert_eq!(Answer::Failure(Failure::Timeout).status(), None);
        assert_eq!(
            next(&Answer::of_status(302), 1, &contract(), 0.5),
            Next::RetryAfter(Duration::from_secs(5))
        );
        assert_eq!(Answer::of_status(200).error(), None);
    }
}
