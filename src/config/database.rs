//! `[database]`: the URLs (TLS as each says), the pools and the bounds of statements and commits.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, Environment, bounded, positive, within};
use crate::secret::Secret;

#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    /// Required by every command that touches the database; see [`Settings::database_url`].
    pub url: Option<Secret>,
    /// Connections for provider callbacks (the process's total, split over its workers).
    pub pool_size: u32,
    /// Connections for everything else: merchants' API, admin, readiness. Kept apart so that
    /// unauthenticated or merchant traffic never makes a provider callback wait.
    pub api_pool_size: u32,
    /// Capture batches one worker runs at once, each on one of its callback connections; the
    /// others stay free for the general path. One gives the largest batches.
    pub capture_batches_per_worker: u32,
    /// Upper bound of any one SQL statement, so a request never holds a connection forever.
    pub statement_timeout: Duration,
    /// How long a request waits for its commit (or a replay for its barrier) to be confirmed,
    /// by the synchronous standby when there is one, before it answers 503. The wait is given
    /// up by dropping the connection, never by cancelling it: a cancelled wait commits locally.
    pub commit_timeout: Duration,
    /// A standby for the read-only work (console, event log, export, reconcile, balances);
    /// `None`: they read from `url`. Callbacks, orders and refunds never read from it.
    pub replica_url: Option<Secret>,
    /// The role that owns the schema: `migrate` and `serve` apply migrations with it, and the
    /// history pass adds, detaches and drops the event log's partitions with it. `None`: `url`
    /// does all of it (one role for everything).
    pub migrate_url: Option<Secret>,
}

impl DatabaseSettings {
    /// Where the read-only work reads: the replica when one is configured.
    pub fn read_url(&self) -> Option<&str> {
        self.replica_url
            .as_ref()
            .or(self.url.as_ref())
            .map(Secret::expose)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    url: Option<String>,
    pool_size: Option<u32>,
    api_pool_size: Option<u32>,
    capture_batches_per_worker: Option<u32>,
    statement_timeout_ms: Option<u64>,
    commit_timeout_ms: Option<u64>,
    replica_url: Option<String>,
    migrate_url: Option<String>,
}

/// `[database]`, with `DATABASE_URL` over `url` and `DATABASE_MIGRATE_URL` over `migrate_url`.
pub(super) fn validate(
    raw: RawDatabase,
    env: &dyn Environment,
) -> Result<DatabaseSettings, ConfigError> {
    let url = env.var("DATABASE_URL").or(raw.url);
    let migrate_url = env.var("DATABASE_MIGRATE_URL").or(raw.migrate_url);
    for (field, url) in [
        ("database.url", &url),
        ("database.replica_url", &raw.replica_url),
        ("database.migrate_url", &migrate_url),
    ] {
        if let Some(url) = url {
            check_database_url(field, url)?;
        }
    }
    let pool_size = raw.pool_size.unwrap_or(16);
    within("database.pool_size", u64::from(pool_size), 1, 1000)?;
    let api_pool_size = raw.api_pool_size.unwrap_or(4);
    within("database.api_pool_size", u64::from(api_pool_size), 1, 1000)?;
    let capture_batches_per_worker = raw.capture_batches_per_worker.unwrap_or(1);
    within(
        "database.capture_batches_per_worker",
        u64::from(capture_batches_per_worker),
        1,
        1000,
    )?;
    let statement_timeout_ms = raw.statement_timeout_ms.unwrap_or(10_000);
    positive("database.statement_timeout_ms", statement_timeout_ms)?;
    let commit_timeout_ms = bounded(
        "database.commit_timeout_ms",
        raw.commit_timeout_ms,
        5_000,
        1,
        600_000,
    )?;
    Ok(DatabaseSettings {
        url: url.map(Secret::new),
        pool_size,
        api_pool_size,
        capture_batches_per_worker,
        statement_timeout: Duration::from_millis(statement_timeout_ms),
        commit_timeout: Duration::from_millis(commit_timeout_ms),
        replica_url: raw.replica_url.map(Secret::new),
        migrate_url: migrate_url.map(Secret::new),
    })
}

/// A PostgreSQL URL the driver can read, refused here rather than at the first connection;
/// the driver's message names the parameter, never its value, and the URL itself is not
/// repeated (it may hold a password).
fn check_database_url(field: &str, url: &str) -> Result<(), ConfigError> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError(format!("{field} must be a postgres:// URL")));
    }
    let (driver_url, tls) =
        crate::db::tls::split(url).map_err(|e| ConfigError(format!("{field}: {e}")))?;
    driver_url.parse::<tokio_postgres::Config>().map_err(|e| {
        ConfigError(format!(
            "{field}: the PostgreSQL driver cannot read it: {e}"
        ))
    })?;
    // Reads sslrootcert now: a missing or bad file stops startup, not every connection.
    tls.connector()
        .map_err(|e| ConfigError(format!("{field}: {e}")))?;
    Ok(())
}
