//! How a pooled connection is opened and watched. diesel-async's own `establish` drives the
//! connection in a task that drops every server notice, and the one notice that matters for a
//! replicated database is a WARNING: when a backend waiting for the synchronous standby in
//! COMMIT is cancelled (or terminated), PostgreSQL commits locally, warns "canceling wait for
//! synchronous replication", and reports success. So the gateway drives the connection itself
//! and counts those warnings; a commit is confirmed only when none came while it ran
//! ([`commit_confirmed`]). The same watch notes the errors after which a connection must leave
//! the pool (a read-only node, a closed socket), because a `SELECT 1` on checkout passes on a
//! node that refuses writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use diesel::ConnectionError;
use diesel::connection::{Instrumentation, InstrumentationEvent};
use diesel::result::{DatabaseErrorKind, Error};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use futures_util::StreamExt;
use tokio_postgres::error::{DbError, SqlState};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::tls::{self, SslMode};

/// What the server told one connection outside the answers to its queries.
#[derive(Debug, Default)]
pub struct ConnectionEvents {
    /// WARNINGs that end a synchronous-replication wait without the standby's confirmation.
    abandoned_sync_waits: AtomicU64,
    /// Set after an error that says this connection must not be used again (its node refuses
    /// writes, or its socket closed).
    discard: AtomicBool,
}

impl ConnectionEvents {
    fn abandoned_sync_waits(&self) -> u64 {
        self.abandoned_sync_waits.load(Ordering::Acquire)
    }

    /// True once the connection must leave the pool.
    pub fn must_discard(&self) -> bool {
        self.discard.load(Ordering::Relaxed)
    }

    fn discard(&self) {
        self.discard.store(true, Ordering::Relaxed);
    }
}

/// The instrumentation every pooled connection carries: it holds the connection's events, so
/// the pool and the commit check can reach them through the connection alone.
struct Watch(Arc<ConnectionEvents>);

impl Instrumentation for Watch {
    fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
        if let InstrumentationEvent::FinishQuery {
            error: Some(error), ..
        } = event
            && ends_the_connection(error)
        {
            tracing::warn!(%error, "this database connection leaves the pool");
            self.0.discard();
        }
    }
}

/// Errors after which a connection is no use: its node is (now) read-only (25006; e.g. a
/// demoted primary behind a proxy, or `default_transaction_read_only` set to fence it), or
/// the connection is gone (an administrator or a shutdown ended it: 57P01, 57P02, 57P03).
fn ends_the_connection(error: &Error) -> bool {
    match error {
        Error::DatabaseError(DatabaseErrorKind::ReadOnlyTransaction, _)
        | Error::DatabaseError(DatabaseErrorKind::ClosedConnection, _)
        | Error::DatabaseError(DatabaseErrorKind::UnableToSendCommand, _) => true,
        Error::DatabaseError(_, info) => {
            // diesel does not carry the SQLSTATE of these; the server's text does.
            let message = info.message();
            message.contains("terminating connection") || message.contains("shutting down")
        }
        _ => false,
    }
}

/// True for the WARNING that PostgreSQL sends when a commit's wait for the synchronous
/// standby ends without the standby (pg_cancel_backend, a statement timeout that fired just
/// before COMMIT, pg_terminate_backend, a shutdown). Matched by code and unlocalised severity,
/// not by text, so a server with another `lc_messages` is read the same way.
fn abandons_a_sync_wait(notice: &DbError) -> bool {
    let warning = notice
        .parsed_severity()
        .map(|s| matches!(s, tokio_postgres::error::Severity::Warning))
        .unwrap_or_else(|| notice.severity() == "WARNING");
    warning && (notice.code() == &SqlState::WARNING || notice.code() == &SqlState::ADMIN_SHUTDOWN)
}

/// The events of a pooled connection (`None` for one opened elsewhere, e.g. by `establish`).
/// Borrowed, not cloned: it is read around every commit.
pub fn events_of(conn: &mut AsyncPgConnection) -> Option<&ConnectionEvents> {
    conn.instrumentation()
        .downcast_ref::<Watch>()
        .map(|watch| &*watch.0)
}

/// A point in a connection's history, taken before a commit.
#[derive(Debug, Clone, Copy)]
pub struct CommitMark(Option<u64>);

/// Marks the connection before a commit (or a statement that commits on its own).
pub fn mark_commit(conn: &mut AsyncPgConnection) -> CommitMark {
    CommitMark(events_of(conn).map(|events| events.abandoned_sync_waits()))
}

/// Whether everything committed since `mark` was confirmed: no synchronous-replication wait
/// was abandoned on this connection. A connection without a watch cannot tell, so it is never
/// confirmed (every pooled connection has one).
pub fn commit_confirmed(conn: &mut AsyncPgConnection, mark: CommitMark) -> bool {
    match (mark.0, events_of(conn)) {
        (Some(before), Some(events)) => events.abandoned_sync_waits() == before,
        _ => false,
    }
}

/// Takes the connection out of use if `error` says it is no use (its node refuses writes, or
/// it is gone). The instrumentation sees the errors of statements that return no rows; an
/// error of a statement that returns rows reaches only its caller (diesel-async reads it from
/// the row stream, past the instrumentation), so the callers that hold a connection report
/// them here: `confirmed_transaction` and the capture batcher.
pub fn note_error(conn: &mut AsyncPgConnection, error: &Error) {
    if ends_the_connection(error) {
        tracing::warn!(%error, "this database connection leaves the pool");
        discard(conn);
    }
}

/// Takes a connection out of use: the pool drops it at its next checkout.
pub fn discard(conn: &mut AsyncPgConnection) {
    if let Some(events) = events_of(conn) {
        events.discard();
    }
}

/// How pooled connections are opened: the parsed URL with the gateway's defaults, its TLS
/// connector (`sslmode`, [`super::tls`]), and the session settings each one runs once.
#[derive(Clone)]
pub struct ConnectSpec {
    pub config: tokio_postgres::Config,
    /// `None` for `sslmode=disable`.
    tls: Option<MakeRustlsConnect>,
    sslmode: SslMode,
    pub setup_sql: String,
}

/// Why a database URL cannot be used to connect.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("the PostgreSQL driver cannot read the URL: {0}")]
    Driver(#[from] tokio_postgres::Error),
    #[error("{0}")]
    Tls(String),
}

impl ConnectSpec {
    /// `url` as the driver reads it, plus: `target_session_attrs=read-write` when the pool
    /// writes (a multi-host URL then connects to the primary only, and a single host that is a
    /// standby is refused at connect instead of failing every write), a connect timeout when
    /// the URL names none (a dead host otherwise holds a connect attempt for minutes), and an
    /// `application_name` that tells the pools apart in `pg_stat_activity`.
    pub fn new(
        url: &str,
        writes: bool,
        connect_timeout: Duration,
        application_name: &str,
        setup_sql: String,
    ) -> Result<Self, SpecError> {
        let (url, tls) = tls::split(url).map_err(SpecError::Tls)?;
        let mut config: tokio_postgres::Config = url.parse()?;
        config.ssl_mode(tls.driver_mode());
        if writes {
            config.target_session_attrs(tokio_postgres::config::TargetSessionAttrs::ReadWrite);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(connect_timeout.max(Duration::from_secs(1)));
        }
        if config.get_application_name().is_none() {
            config.application_name(application_name);
        }
        Ok(Self {
            config,
            tls: tls.connector().map_err(SpecError::Tls)?,
            sslmode: tls.mode,
            setup_sql,
        })
    }

    /// Opens a connection, drives it in a task of its own on the current runtime, and runs
    /// the session settings.
    pub async fn connect(&self) -> Result<AsyncPgConnection, ConnectionError> {
        let events = Arc::new(ConnectionEvents::default());
        // The task ends when the connection's client is dropped (once no answer is pending) or
        // when the socket closes. Dropping a connection never sends a cancel request: a commit
        // that still waits for the standby keeps waiting on the server, and it is either
        // replicated or never answered 2xx.
        let refused = |e: tokio_postgres::Error| {
            ConnectionError::BadConnection(format!(
                "cannot connect (sslmode={}): {}",
                self.sslmode.as_str(),
                error_chain(&e)
            ))
        };
        let client = match &self.tls {
            Some(tls) => {
                let (client, connection) =
                    self.config.connect(tls.clone()).await.map_err(refused)?;
                tokio::spawn(drive(connection, events.clone()));
                client
            }
            None => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(refused)?;
                tokio::spawn(drive(connection, events.clone()));
                client
            }
        };
        let mut conn = AsyncPgConnection::try_from(client).await?;
        conn.set_instrumentation(Watch(events));
        if !self.setup_sql.is_empty() {
            conn.batch_execute(&self.setup_sql)
                .await
                .map_err(ConnectionError::CouldntSetupConfiguration)?;
        }
        Ok(conn)
    }
}

/// The driver's error with its causes: a TLS failure's reason (an unknown issuer, a name that
/// does not match, a server without TLS) sits underneath.
fn error_chain(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Polls the connection until it ends or its client is dropped, counting the notices that
/// abandon a synchronous-replication wait. A notice is read before the answer that follows
/// it, so it is counted before the query it belongs to returns.
async fn drive<S>(
    connection: tokio_postgres::Connection<tokio_postgres::Socket, S>,
    events: Arc<ConnectionEvents>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut connection = connection;
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(AsyncMessage::Notice(notice)) if abandons_a_sync_wait(&notice) => {
                events.abandoned_sync_waits.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(
                    code = notice.code().code(),
                    message = notice.message(),
                    "a commit's wait for the synchronous standby was abandoned; it is not confirmed"
                );
            }
            Ok(_) => {}
            Err(error) => {
                events.discard();
                tracing::debug!(%error, "database connection ended");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_node_or_a_closed_connection_ends_the_connection() {
        let info = || {
            Box::new("x".to_owned())
                as Box<dyn diesel::result::DatabaseErrorInformation + Send + Sync>
        };
        assert!(ends_the_connection(&Error::DatabaseError(
            DatabaseErrorKind::ReadOnlyTransaction,
            info()
        )));
        assert!(ends_the_connection(&Error::DatabaseError(
            DatabaseErrorKind::ClosedConnection,
            info()
        )));
        assert!(!ends_the_connection(&Error::DatabaseError(
            DatabaseErrorKind::UniqueViolation,
            info()
        )));
        assert!(!ends_the_connection(&Error::NotFound));
    }
}
