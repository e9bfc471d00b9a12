//! Why a refund request ended without a stored answer; below the HTTP layer, which maps it.

/// Nothing new was stored (or the record stays `processing`): a retry may finish it.
#[derive(Debug, thiserror::Error)]
pub enum RefundError {
    #[error("a request with this idempotency key is still being processed")]
    InFlight,
    #[error("this idempotency key was used with a different request")]
    KeyReusedWithDifferentBody,
    /// The provider's outcome is unknown (409, 429, 5xx, timeout, network): the lease was
    /// released and the record stays processing for the next attempt.
    #[error("the provider's refund API is unavailable: {0}")]
    ProviderUnavailable(String),
    #[error("database error")]
    Database(#[from] diesel::result::Error),
    #[error("database pool: {0}")]
    Pool(String),
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for RefundError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        RefundError::Pool(error.to_string())
    }
}
