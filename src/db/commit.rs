//! What a transaction's success means with synchronous replication: [`confirmed_transaction`]
//! answers `Ok` only for a commit the standby confirmed (through the connection's
//! [`super::watch`]); [`super::unconfirmed`] says why an answer cannot be given as done.

use std::time::Duration;

use diesel_async::AsyncPgConnection;
use tracing::Instrument;

use super::unconfirmed::{CommitUnconfirmed, DatabaseCause};
use super::watch::{commit_confirmed, discard, mark_commit, note_error};

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
            let commit = tokio::time::timeout(commit_timeout, commit)
                .instrument(tracing::info_span!(target: crate::trace_switch::TRACE, "commit"));
            match commit.await {
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
