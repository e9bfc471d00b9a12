//! Why idempotent work ended without a response; beside the engine so the work itself
//! (payments, orders) can name it without the engine.

/// Why an idempotent request ended without a response to store. Nothing was stored, so a
/// retry runs as the first time.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    #[error("a request with this idempotency key is still being processed")]
    InFlight,
    #[error("this idempotency key was used with a different request body")]
    KeyReusedWithDifferentBody,
    /// The operation cannot run yet (an event that depends on one not seen yet).
    #[error("the operation must wait for an earlier one: {0}")]
    NotYet(&'static str),
    #[error("database error")]
    Database(#[from] diesel::result::Error),
    /// No pooled connection came in time, or the server refused one.
    #[error("database pool: {0}")]
    Pool(String),
    /// The commit was not confirmed: its wait for the synchronous standby was abandoned
    /// (PostgreSQL then commits locally and only warns), or it outlasted the commit bound, or
    /// a replay's barrier was not confirmed in time. A retry decides again.
    #[error("commit not confirmed: {0}")]
    Unconfirmed(&'static str),
    /// More work is queued than the database can take; shed at once instead of queueing.
    #[error("saturated: {0}")]
    Saturated(&'static str),
    /// A provider that must be asked could not be asked now (a replay of its event).
    #[error("the provider's API could not be asked")]
    ProviderUnavailable,
}

impl crate::db::unconfirmed::DatabaseCause for IdempotencyError {
    fn database_error(&self) -> Option<&diesel::result::Error> {
        match self {
            IdempotencyError::Database(error) => Some(error),
            _ => None,
        }
    }
}

impl From<crate::db::unconfirmed::CommitUnconfirmed> for IdempotencyError {
    fn from(error: crate::db::unconfirmed::CommitUnconfirmed) -> Self {
        IdempotencyError::Unconfirmed(error.reason())
    }
}

impl From<crate::db::unconfirmed::ReplayUnconfirmed> for IdempotencyError {
    fn from(_: crate::db::unconfirmed::ReplayUnconfirmed) -> Self {
        IdempotencyError::Unconfirmed(crate::db::unconfirmed::ReplayUnconfirmed::REASON)
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for IdempotencyError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        IdempotencyError::Pool(error.to_string())
    }
}
