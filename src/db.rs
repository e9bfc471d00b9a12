//! The database: how connections are opened (`connection`, with `tls` for `sslmode` and
//! `watch` for what the server says besides answers: abandoned synchronous-replication waits,
//! connections a failover left unusable), the pool (`pool` holds its type, this file builds
//! it), what a confirmed commit is (`commit`, and `unconfirmed` for why an answer cannot be given
//! as done), the barrier a replay waits for
//! (`replication`), the errors that say the database cannot write at all (`cannot_write`: a
//! full disk), the role it serves as (`roles`), ids after a point-in-time restore (`sequences`), and the embedded migrations (the same `migrations/` that diesel CLI
//! runs). Code that only holds a pool or a connection imports the submodule it needs, not
//! this file, so the pool's users do not depend on how connections are opened.

pub mod cannot_write;
pub mod commit;
pub mod connection;
pub mod one_row;
pub mod pool;
pub mod replication;
pub mod roles;
pub mod sequences;
pub mod tls;
pub mod unconfirmed;
pub mod watch;

use std::time::Duration;

use diesel::sql_types::Text;
use diesel_async::pooled_connection::{
    AsyncDieselConnectionManager, ManagerConfig, PoolableConnection, RecyclingMethod,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use futures_util::FutureExt;

use connection::ConnectSpec;
use one_row::CommittedResult;
use pool::PgPool;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

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
        let unusable =
            conn.is_broken() || watch::events_of(conn).is_none_or(|events| events.must_discard());
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

/// Reverts the newest applied migration (`diesel migration revert`; tests prove a down.sql on
/// a database that holds rows).
pub async fn revert_last_migration(url: &str) -> anyhow::Result<String> {
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    let conn = connect(url).await?;
    tokio::task::spawn_blocking(move || -> anyhow::Result<String> {
        let mut conn = AsyncConnectionWrapper::<AsyncPgConnection>::from(conn);
        let reverted = conn
            .revert_last_migration(MIGRATIONS)
            .map_err(|e| anyhow::anyhow!("revert failed: {e}"))?;
        Ok(reverted.to_string())
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
        .committed_result(&mut conn)
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
        .committed_result(&mut conn)
        .await?;
    Ok(locked.then_some(conn))
}

/// Like [`connect_holding_lock`], waiting for the lock while another session holds it: for a
/// command an operator runs by hand (`history archive`), which must not run beside the pass
/// of a gateway that holds it.
pub async fn connect_waiting_for_lock(url: &str, key: i64) -> anyhow::Result<AsyncPgConnection> {
    if let Some(conn) = connect_holding_lock(url, key).await? {
        return Ok(conn);
    }
    tracing::warn!("waiting for the lock a running pass holds");
    let spec = ConnectSpec::new(
        url,
        true,
        BACKGROUND_CONNECT_TIMEOUT,
        "callback-gateway/background",
        String::new(),
    )?;
    let mut conn = spec.connect().await?;
    diesel::sql_query("SELECT pg_advisory_lock($1)")
        .bind::<diesel::sql_types::BigInt, _>(key)
        .execute(&mut conn)
        .await?;
    Ok(conn)
}
