//! What every section's validation shares: the error, the environment `env:` secrets are read
//! from, and the rules of values (bounds, key lengths, outgoing URLs).

use std::time::Duration;

/// A configuration problem, phrased as one line that names the offending field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Reads the environment; a seam so tests can load settings without touching the process env.
pub trait Environment {
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Environment for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

/// A URL the gateway calls out to: `https://`, or `http://` only on a loopback address; no
/// `user:password@`, no fragment, and a query only when `query_allowed`. Errors never repeat
/// the value (until it is known to carry no userinfo, it may hold a password).
pub(super) fn outbound_url(
    field: &str,
    value: &str,
    query_allowed: bool,
) -> Result<reqwest::Url, ConfigError> {
    let parsed =
        reqwest::Url::parse(value).map_err(|e| ConfigError(format!("{field}: not a URL: {e}")))?;
    // A password in the URL would reach every log line that names it (reqwest's errors quote
    // the URL); credentials belong in secrets, which are never logged.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ConfigError(format!(
            "{field}: must not carry user:password@"
        )));
    }
    if value.len() > 2048 {
        return Err(ConfigError(format!("{field}: longer than 2048 characters")));
    }
    let host = parsed.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let allowed = match parsed.scheme() {
        "https" => parsed.host().is_some(),
        "http" => loopback,
        _ => false,
    };
    let query_ok = query_allowed || parsed.query().is_none();
    if !allowed || !query_ok || parsed.fragment().is_some() {
        let query = if query_allowed { "" } else { " without query" };
        return Err(ConfigError(format!(
            "{field}: must be an https:// URL{query} (http:// only on 127.0.0.0/8, ::1 or localhost)"
        )));
    }
    Ok(parsed)
}

/// `env:NAME` reads the variable NAME; any other value is the secret itself.
pub(super) fn resolve_secret(
    field: &str,
    value: &str,
    env: &dyn Environment,
) -> Result<String, ConfigError> {
    let resolved = match value.strip_prefix("env:") {
        Some(var) => env.var(var).ok_or_else(|| {
            ConfigError(format!(
                "{field}: environment variable {var} is not set or empty"
            ))
        })?,
        None => value.to_owned(),
    };
    if resolved.is_empty() {
        return Err(ConfigError(format!("{field} is empty")));
    }
    Ok(resolved)
}

/// A year: the longest record lifetime or retry window a setting may name.
pub(super) const MAX_HOURS: u64 = 8760;

pub(super) fn within(field: &str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if !(min..=max).contains(&value) {
        return Err(ConfigError(format!(
            "{field} must be between {min} and {max} (got {value})"
        )));
    }
    Ok(())
}

/// A bounded setting: `value`, or `default` when the file leaves it out, refused outside
/// `min..=max` with the message of [`within`].
pub(super) fn bounded(
    field: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ConfigError> {
    let value = value.unwrap_or(default);
    within(field, value, min, max)?;
    Ok(value)
}

/// Signing secrets and tokens are refused below this many bytes of key.
pub(super) const MIN_SECRET_BYTES: usize = 16;

/// A signing key or token shorter than this is guessable.
pub(super) fn long_enough(field: &str, key_bytes: usize) -> Result<(), ConfigError> {
    if key_bytes < MIN_SECRET_BYTES {
        return Err(ConfigError(format!(
            "{field} must be at least {MIN_SECRET_BYTES} bytes of key (got {key_bytes})"
        )));
    }
    Ok(())
}

pub(super) fn positive(field: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError(format!("{field} must be greater than 0")));
    }
    Ok(())
}

pub(super) fn hours(h: u64) -> Duration {
    Duration::from_secs(h.saturating_mul(3600))
}
