//! The bb8 pool of `AsyncPgConnection`s and the embedded migrations (the same `migrations/`
//! that diesel CLI runs). `connection` opens and watches pooled connections (abandoned
//! synchronous-replication waits, connections a failover left unusable); `replication` is the
//! barrier a replay waits for.

pub mod connection;
pub mod replication;
pub mod tls;

use std::time::Duration;

pub use connection::{CommitMark, ConnectSpec, commit_confirmed, discard, mark_commit, note_error};
use diesel::sql_types::Text;
use diesel_async::pooled_connection::PoolableConnection;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use futures_util::FutureExt;

pub type PgPool = bb8::Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// Limits applied to every pooled connection when it is opened.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Bounds every lock wait, in particular a duplicate waiting on the unique index for the
    /// first request of its key (the acquire timeout).
    pub lock_timeout: Duration,
    /// Bounds every statement.
    pub statement_timeout: Duration,
    /// Plans every statement for its own values (`plan_cache_mode = force_custom_plan`). The
    /// API pool's event-log reads need it: after five runs of a prepared statement PostgreSQL
    /// may keep a generic plan, and the generic plan of "this event id, newest first, limit
    /// $n" walks the whole history backwards by time (measured: 57 ms at 109,000 events and
    /// growing, against 0.2 ms planned for the value). The callback pool keeps generic plans:
    /// its statements are the same few, and planning them each time costs CPU per event.
    pub custom_plans: bool,
}

impl SessionLimits {
    /// The statements each pooled connection runs once when it opens.
    pub fn sql(self) -> String {
        // A transaction left idle (a handler that stalls mid-transaction) is ended by the
        // server too, so it cannot hold its locks forever.
        let idle = self.statement_timeout.saturating_mul(2);
        format!(
            "SET lock_timeout = {}; SET statement_timeout = {}; SET idle_in_transaction_session_timeout = {};{}",
            self.lock_timeout.as_millis().max(1),
            self.statement_timeout.as_millis().max(1),
            idle.as_millis().max(1),
            if self.custom_plans {
                " SET plan_cache_mode = force_custom_plan;"
            } else {
                ""
            },
        )
    }
}

/// Builds the pool without connecting: `/readyz` tells whether the database answers.
pub fn build_pool(spec: ConnectSpec, size: u32, checkout_timeout: Duration) -> PgPool {
    let mut config = ManagerConfig::default();
    // A connection's I/O task runs on the runtime that opens it. Each actix worker has a
    // pool of its own (see startup.rs), so its connections live on its own runtime: no
    // cross-thread hop per round trip, and a worker stopping at shutdown only closes the
    // connections of its own requests, which it drains first.
    config.custom_setup = Box::new(move |_url| {
        let spec = spec.clone();
        async move { spec.connect().await }.boxed()
    });
    // No test query on checkout (one round trip saved per request): a connection whose
    // socket closed, whose transaction broke, or that met a read-only node or a shutdown is
    // dropped instead of handed out, and its replacement connects to the primary of the
    // moment (a multi-host URL is tried host by host). A `SELECT 1` would pass on a node
    // that no longer takes writes.
    config.recycling_method = RecyclingMethod::CustomFunction(Box::new(|conn| {
        let unusable = conn.is_broken()
            || connection::events_of(conn).is_none_or(|events| events.must_discard());
        async move {
            if unusable {
                Err(diesel::result::Error::BrokenTransactionManager)
            } else {
                Ok(())
            }
        }
        .boxed()
    }));
    // The URL is the spec's; the manager's own copy is never read.
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new_with_config("", config);
    bb8::Pool::builder()
        .max_size(size)
        .connection_timeout(checkout_timeout)
        .test_on_check_out(true)
        .build_unchecked(manager)
}

/// A transaction's commit that cannot be answered as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CommitUnconfirmed {
    /// The server ended the commit's wait for the synchronous standby (cancel, terminate,
    /// shutdown) and committed locally only.
    #[error("the commit's wait for the synchronous standby was abandoned")]
    Abandoned,
    /// No confirmation within the commit bound; the connection was dropped (not cancelled).
    #[error("the commit was not confirmed within the commit bound")]
    TimedOut,
}

impl CommitUnconfirmed {
    /// Why, for the log line of the 503 it becomes.
    pub fn reason(self) -> &'static str {
        match self {
            CommitUnconfirmed::Abandoned => {
                "the commit's wait for the synchronous standby was abandoned"
            }
            CommitUnconfirmed::TimedOut => "the commit outlasted the commit bound",
        }
    }
}

/// An error that may carry the database's own, so that the transaction that met it can tell
/// whether its connection is still of use ([`note_error`]).
pub trait DatabaseCause {
    fn database_error(&self) -> Option<&diesel::result::Error>;
}

/// Runs `work` in a transaction, like diesel's `transaction`, and answers `Ok` only for a
/// commit that was confirmed within `commit_timeout`: with synchronous replication, one the
/// standby acknowledged. Past the bound the connection is dropped, never cancelled (a
/// cancelled wait commits locally and only warns), and the caller answers 503; the commit
/// then either reaches the standby or is never acknowledged, and the client's retry decides.
pub async fn confirmed_transaction<R, E>(
    conn: &mut AsyncPgConnection,
    commit_timeout: Duration,
    work: impl AsyncFnOnce(&mut AsyncPgConnection) -> Result<R, E>,
) -> Result<R, E>
where
    E: From<diesel::result::Error> + From<CommitUnconfirmed> + DatabaseCause,
{
    use diesel_async::{AnsiTransactionManager, TransactionManager};
    AnsiTransactionManager::begin_transaction(conn).await?;
    match work(conn).await {
        Ok(value) => {
            let mark = mark_commit(conn);
            let commit = AnsiTransactionManager::commit_transaction(conn);
            match tokio::time::timeout(commit_timeout, commit).await {
                Ok(Ok(())) if commit_confirmed(conn, mark) => Ok(value),
                Ok(Ok(())) => Err(CommitUnconfirmed::Abandoned.into()),
                Ok(Err(error)) => {
                    note_error(conn, &error);
                    Err(error.into())
                }
                Err(_) => {
                    // The dropped COMMIT left the transaction manager broken, so the pool
                    // drops this connection anyway; say so explicitly.
                    discard(conn);
                    Err(CommitUnconfirmed::TimedOut.into())
                }
            }
        }
        Err(error) => {
            if let Some(cause) = error.database_error() {
                note_error(conn, cause);
            }
            match AnsiTransactionManager::rollback_transaction(conn).await {
                Ok(()) | Err(diesel::result::Error::BrokenTransactionManager) => Err(error),
                Err(rollback) => Err(rollback.into()),
            }
        }
    }
}

/// Applies pending migrations over a connection of its own; returns the versions applied.
pub async fn run_migrations(url: &str) -> anyhow::Result<Vec<String>> {
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    let conn = connect(url).await?;
    tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<String>> {
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::from(conn);
        let applied = conn
            .run_pending_migrations(MIGRATIONS)
            .map_err(|e| anyhow::anyhow!("migration failed: {e}"))?;
        Ok(applied.iter().map(ToString::to_string).collect())
    })
    .await?
}

/// Reverts every migration (tests prove that each `down.sql` works).
pub async fn revert_all_migrations(url: &str) -> anyhow::Result<Vec<String>> {
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    let conn = connect(url).await?;
    tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<String>> {
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::from(conn);
        let reverted = conn
            .revert_all_migrations(MIGRATIONS)
            .map_err(|e| anyhow::anyhow!("revert failed: {e}"))?;
        Ok(reverted.iter().map(ToString::to_string).collect())
    })
    .await?
}

/// The version of the newest embedded migration; the schema is current when it is applied.
pub fn latest_migration_version() -> String {
    use diesel::migration::MigrationSource;
    MigrationSource::<diesel::pg::Pg>::migrations(&MIGRATIONS)
        .ok()
        .and_then(|migrations| {
            migrations
                .iter()
                .map(|m| m.name().version().to_string())
                .max()
        })
        .unwrap_or_default()
}

#[derive(diesel::QueryableByName)]
struct Applied {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    applied: bool,
}

/// True when the database answers and the newest migration is applied.
pub async fn is_ready(pool: &PgPool, latest_version: &str) -> bool {
    let check = async {
        let mut conn = pool.get().await.ok()?;
        let row: Applied = diesel::sql_query(
            "SELECT EXISTS (SELECT 1 FROM __diesel_schema_migrations WHERE version = $1) AS applied",
        )
        .bind::<Text, _>(latest_version)
        .get_result(&mut *conn)
        .await
        .ok()?;
        Some(row.applied)
    };
    // A probe must answer promptly even when the pool waits for a dead server.
    matches!(
        tokio::time::timeout(Duration::from_secs(2), check).await,
        Ok(Some(true))
    )
}

#[derive(diesel::QueryableByName)]
struct Locked {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    locked: bool,
}

/// How long a background pass waits for its connection when the URL names no connect timeout.
const BACKGROUND_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection of its own to the primary of `url`, opened and watched as the pools open
/// theirs (TLS as the URL's `sslmode` says): for the CLI commands that write.
pub async fn connect(url: &str) -> anyhow::Result<AsyncPgConnection> {
    connect_as(url, "callback-gateway/command").await
}

/// Like [`connect`], under `application_name` (how `pg_stat_activity` tells it apart).
pub async fn connect_as(url: &str, application_name: &str) -> anyhow::Result<AsyncPgConnection> {
    let spec = ConnectSpec::new(
        url,
        true,
        BACKGROUND_CONNECT_TIMEOUT,
        application_name,
        String::new(),
    )?;
    Ok(spec.connect().await?)
}

/// Like [`connect`], to any node of `url` (a standby included): for the commands that only
/// read (export, reconcile).
pub async fn connect_reader(url: &str) -> anyhow::Result<AsyncPgConnection> {
    let spec = ConnectSpec::new(
        url,
        false,
        BACKGROUND_CONNECT_TIMEOUT,
        "callback-gateway/command",
        String::new(),
    )?;
    Ok(spec.connect().await?)
}

/// A connection of its own that holds the session advisory lock `key`, or `None` when another
/// session (another gateway) holds it: how one instance among many is elected for a background
/// pass. The lock dies with the connection.
pub async fn connect_holding_lock(
    url: &str,
    key: i64,
) -> anyhow::Result<Option<AsyncPgConnection>> {
    // Like the pools' connections: on a multi-host URL the primary only (the pass writes),
    // and watched, so its commits can be confirmed.
    let spec = ConnectSpec::new(
        url,
        true,
        BACKGROUND_CONNECT_TIMEOUT,
        "callback-gateway/background",
        String::new(),
    )?;
    let mut conn = spec.connect().await?;
    let Locked { locked } = diesel::sql_query("SELECT pg_try_advisory_lock($1) AS locked")
        .bind::<diesel::sql_types::BigInt, _>(key)
        .get_result(&mut conn)
        .await?;
    Ok(locked.then_some(conn))
}
