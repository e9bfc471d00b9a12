//! Why an answer cannot be given as done although its transaction may have committed: a
//! commit ([`super::commit`]) or a replay ([`super::replication`]) the synchronous standby did
//! not confirm in time. The error types of the callers map these to 503; they depend on
//! nothing else of the database layer.

use std::time::Duration;

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
/// whether its connection is still of use ([`super::watch::note_error`]).
pub trait DatabaseCause {
    fn database_error(&self) -> Option<&diesel::result::Error>;
}

/// A replay could not be confirmed in time: the standby did not confirm a barrier round
/// ([`super::replication`]).
#[derive(Debug, thiserror::Error)]
#[error("the synchronous standby did not confirm the stored answer within {0:?}")]
pub struct ReplayUnconfirmed(pub Duration);

impl ReplayUnconfirmed {
    /// Why, for the log line of the 503 it becomes.
    pub const REASON: &'static str = "the standby did not confirm the stored answer in time";
}
