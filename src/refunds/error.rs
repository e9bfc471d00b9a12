//! Why a refund request ended without a stored answer; below the HTTP layer, which maps it.

use super::review::Review;

/// Nothing new was stored (or the record stays `processing`): a retry may finish it.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    #[error("a request with this idempotency key is still being processed")]
    InFlight,
    #[error("this idempotency key was used with a different request")]
    KeyReusedWithDifferentBody,
    /// The provider's outcome is unknown (409, 429, 5xx, timeout, network: now, or moments
    /// ago with its backoff still running): the lease was released and the record stays
    /// processing; the next call waits `retry_after`.
    #[error("the provider's refund outcome is unknown; the next call waits {retry_after:?}")]
    ProviderUnavailable { retry_after: std::time::Duration },
    /// The gateway stopped retrying the request on its own; it stays processing (its amount
    /// reserved) until a person resolves it.
    #[error("refund request {} needs a person: {}", .0.refund_request_id, .0.reason.as_str())]
    NeedsReview(Review),
    #[error("database error")]
    Database(#[from] diesel::result::Error),
    #[error("database pool: {0}")]
    Pool(String),
    /// A phase's commit, or a replay's barrier, was not confirmed (by the synchronous standby,
    /// when there is one): nothing may be answered as done, and phase 1 must not be followed
    /// by a provider call, since a failover could lose it and the client's retry would then
    /// create a new request with a new provider key. A retry decides again.
    #[error("commit not confirmed: {0}")]
    Unconfirmed(&'static str),
}

impl crate::db::unconfirmed::DatabaseCause for RefundError {
    fn database_error(&self) -> Option<&diesel::result::Error> {
        match self {
            RefundError::Database(error) => Some(error),
            _ => None,
        }
    }
}

impl crate::db::unconfirmed::DatabaseCause for ResolveError {
    fn database_error(&self) -> Option<&diesel::result::Error> {
        match self {
            ResolveError::Refund(error) => error.database_error(),
            _ => None,
        }
    }
}

impl From<crate::db::unconfirmed::CommitUnconfirmed> for RefundError {
    fn from(error: crate::db::unconfirmed::CommitUnconfirmed) -> Self {
        RefundError::Unconfirmed(error.reason())
    }
}

impl From<crate::db::unconfirmed::ReplayUnconfirmed> for RefundError {
    fn from(_: crate::db::unconfirmed::ReplayUnconfirmed) -> Self {
        RefundError::Unconfirmed(crate::db::unconfirmed::ReplayUnconfirmed::REASON)
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for RefundError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        RefundError::Pool(error.to_string())
    }
}

/// Why an operator's resolution of a refund request was not stored.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("no such refund request")]
    NotFound,
    /// Final already, or an attempt may be calling the provider for it now.
    #[error("the refund request is final, or an attempt may be calling the provider for it now")]
    NotResolvable,
    /// The refund id is another request's (uq_refund_requests_provider_refund).
    #[error("refund request {held_by} already holds this provider_refund_id")]
    RefundIdInUse { held_by: i64 },
    #[error(transparent)]
    Refund(#[from] RefundError),
}

impl From<crate::db::unconfirmed::CommitUnconfirmed> for ResolveError {
    fn from(error: crate::db::unconfirmed::CommitUnconfirmed) -> Self {
        ResolveError::Refund(error.into())
    }
}

impl From<diesel::result::Error> for ResolveError {
    fn from(error: diesel::result::Error) -> Self {
        ResolveError::Refund(error.into())
    }
}
