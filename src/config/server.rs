//! `[server]`: where and how the gateway listens, and whether it serves TLS itself.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, Environment, bounded, positive};

/// The PEM files named by `[server] tls_cert` and `tls_key` (both set, or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The most `body_limit_bytes` may be. The gateway holds a body whole in memory, and the files
/// it writes bodies into are read back with a line bound derived from this
/// ([`crate::lines::MAX_LINE_BYTES`]); providers' callbacks are a few KiB.
pub const MAX_BODY_LIMIT_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub bind: String,
    pub body_limit_bytes: usize,
    /// How long a same-key duplicate waits for the first request to commit.
    pub acquire_timeout: Duration,
    /// Worker threads; defaults to the number of cores.
    pub workers: usize,
    /// How long a client may take to send its body before the request is dropped.
    pub body_read_timeout: Duration,
    /// `Some`: serve HTTPS with these PEM files; `None`: plain HTTP behind a TLS proxy.
    pub tls: Option<TlsFiles>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    bind: Option<String>,
    body_limit_bytes: Option<usize>,
    acquire_timeout_ms: Option<u64>,
    workers: Option<usize>,
    body_read_timeout_ms: Option<u64>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

/// `[server]`, with `GATEWAY_BIND` over `bind`.
pub(super) fn validate(
    raw: RawServer,
    env: &dyn Environment,
) -> Result<ServerSettings, ConfigError> {
    let bind = env
        .var("GATEWAY_BIND")
        .or(raw.bind)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let body_limit_bytes = bounded(
        "server.body_limit_bytes",
        raw.body_limit_bytes.map(|b| b as u64),
        1024 * 1024,
        1,
        MAX_BODY_LIMIT_BYTES as u64,
    )? as usize;
    let acquire_timeout_ms = bounded(
        "server.acquire_timeout_ms",
        raw.acquire_timeout_ms,
        3000,
        1,
        60_000,
    )?;
    let workers = raw.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    positive("server.workers", workers as u64)?;
    let body_read_timeout_ms = raw.body_read_timeout_ms.unwrap_or(10_000);
    positive("server.body_read_timeout_ms", body_read_timeout_ms)?;
    // Only the pairing is checked here; the files are read by `tls::server_config`, which
    // `serve` and `check-config` call (a `migrate` job need not see the private key).
    let tls = match (raw.tls_cert, raw.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError(
                "server.tls_key is required when server.tls_cert is set (set both for HTTPS, or neither)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(ConfigError(
                "server.tls_cert is required when server.tls_key is set (set both for HTTPS, or neither)".into(),
            ));
        }
    };
    Ok(ServerSettings {
        bind,
        body_limit_bytes,
        acquire_timeout: Duration::from_millis(acquire_timeout_ms),
        workers,
        body_read_timeout: Duration::from_millis(body_read_timeout_ms),
        tls,
    })
}
