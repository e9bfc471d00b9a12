//! What a connection's server says besides the answers to its queries. diesel-async's own
//! `establish` drives the connection in a task that drops every server notice, and the one
//! notice that matters for a replicated database is a WARNING: when a backend waiting for the
//! synchronous standby in COMMIT is cancelled (or terminated), PostgreSQL commits locally,
//! warns "canceling wait for synchronous replication", and reports success. So the gateway
//! drives each connection itself ([`drive`]) and counts those warnings; a commit is confirmed
//! only when none came while it ran ([`commit_confirmed`]). The same watch notes the errors
//! after which a connection must leave the pool (a read-only node, a closed socket), because a
//! `SELECT 1` on checkout passes on a node that refuses writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use diesel::connection::{Instrumentation, InstrumentationEvent};
use diesel::result::{DatabaseErrorKind, Error};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use futures_util::StreamExt;
use tokio_postgres::AsyncMessage;
use tokio_postgres::error::{DbError, SqlState};

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
pub struct Watch(Arc<ConnectionEvents>);

impl Watch {
    /// The instrumentation that carries `events` (the ones [`drive`] fills).
    pub fn new(events: Arc<ConnectionEvents>) -> Self {
        Self(events)
    }
}

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

/// Polls the connection until it ends or its client is dropped, counting the notices that
/// abandon a synchronous-replication wait. A notice is read before the answer that follows
/// it, so it is counted before the query it belongs to returns.
pub async fn drive<S>(
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
