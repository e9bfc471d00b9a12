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
    /// More work is queued than the database can take; shed at once instead of queueing.
    #[error("saturated: {0}")]
    Saturated(&'static str),
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for IdempotencyError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        IdempotencyError::Pool(error.to_string())
    }
}
