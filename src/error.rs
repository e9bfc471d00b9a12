//! `ApiError`: every error a request can end in, each with a stable snake_case `error` code,
//! and the one table from the domain's errors and refusals to HTTP. Database and pool errors
//! are a transient 503 `unavailable` whose transaction rolled back, so a retry runs as the
//! first time; a database that cannot write at all (a full disk) is a 503
//! `database_cannot_write`, as transient and stored as little.

use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, RETRY_AFTER};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

use crate::access::audit::InvalidQuery;
use crate::access::role::Role;
use crate::db::cannot_write::CannotWrite;
use crate::idempotency::error::IdempotencyError;
use crate::idempotency::key::KeyError;
use crate::limits::Limited;
use crate::notifications::endpoints::{EndpointError, InvalidEndpoint};
use crate::orders::request::RejectionKind;
use crate::refunds::error::{RefundError, ResolveError};
use crate::refunds::request::RefusalKind;
use crate::signature::scheme::{Rejection, SignatureError};

/// Seconds a client should wait before retrying a key that is still in flight.
pub const IN_FLIGHT_RETRY_AFTER_SECS: u32 = 2;
/// Seconds a provider should wait before redelivering an event that came too early.
pub const OUT_OF_ORDER_RETRY_AFTER_SECS: u32 = 30;
/// Seconds a provider should wait while its API refuses the gateway's key: an operator has to
/// act first.
pub const PROVIDER_KEY_RETRY_AFTER_SECS: u32 = 60;
/// Seconds a client should wait while the database cannot write (a full disk): space comes
/// back when an operator acts, not within a second.
pub const CANNOT_WRITE_RETRY_AFTER_SECS: u32 = 30;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing or unknown bearer token")]
    Unauthorized,
    /// A known operator key whose role does not include the route's.
    #[error("this needs the {required_role} role")]
    Forbidden { required_role: Role },
    #[error(transparent)]
    IdempotencyKey(#[from] KeyError),
    #[error("request body exceeds {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("request body was not received in time")]
    BodyTimeout,
    #[error("request body could not be read: {0}")]
    BodyUnreadable(String),
    #[error("a request with this idempotency key is still being processed")]
    IdempotencyKeyInFlight,
    #[error("this idempotency key was used with a different request body")]
    KeyReusedWithDifferentBody,
    #[error("{what} not found")]
    NotFound {
        code: &'static str,
        what: &'static str,
    },
    #[error("no provider is configured under this name")]
    UnknownProvider,
    #[error("signature verification failed: {0}")]
    InvalidSignature(#[from] SignatureError),
    #[error("{0}")]
    InvalidPayload(String),
    /// A query parameter that cannot be read (an admin filter, a cursor).
    #[error("{0}")]
    InvalidQuery(String),
    /// A JSON body that is not the shape the route takes (an unknown field, a wrong type).
    #[error("{0}")]
    InvalidRequest(String),
    /// A merchant endpoint's URL or description the API does not take.
    #[error("{message}")]
    InvalidEndpoint { code: &'static str, message: String },
    /// The merchant has as many endpoints as `[notifications] endpoints_per_merchant` allows.
    #[error("{0}")]
    TooManyEndpoints(String),
    /// A feature the gateway's configuration leaves off (e.g. endpoints by API without
    /// `[secrets] key`): a retry cannot help until an operator configures it.
    #[error("{0}")]
    NotConfigured(&'static str),
    #[error("event arrived before one it depends on: {0}")]
    OutOfOrder(&'static str),
    #[error("the database is unavailable")]
    Unavailable(#[source] anyhow::Error),
    /// The database answers but cannot write (its disk is full, its file system read-only):
    /// the transaction rolled back and nothing was stored, so a retry helps once space returns.
    #[error("the database cannot write ({})", reason.as_str())]
    CannotWrite {
        reason: CannotWrite,
        #[source]
        source: anyhow::Error,
    },
    /// The provider's API refused the gateway's `api_key` (401 or 403) during a fetch: no
    /// retry helps until an operator fixes the key, so it is a 503 (the provider keeps the
    /// event and retries) with an alert, never a stored rejection.
    #[error("the provider's API refused the configured api_key: {0}")]
    ProviderKeyRefused(String),
    /// The gateway stopped retrying this refund request; a person resolves it (docs/refunds.md).
    #[error(
        "refund request {refund_request_id} needs a person ({reason}): the gateway will not call the provider for it again; an operator resolves it"
    )]
    RefundNeedsReview {
        refund_request_id: i64,
        reason: &'static str,
    },
    /// The provider's refund API gave no known outcome (now, or moments ago: the next call
    /// waits its backoff); the request stays processing.
    #[error("the provider's refund API is unavailable; retry after {retry_after_secs} s")]
    RefundBackingOff { retry_after_secs: u64 },
    /// An operator's resolution of a request that is final, or being sent now.
    #[error("the refund request is not processing, or an attempt is calling the provider now")]
    RefundNotResolvable,
    #[error("{0}")]
    InvalidResolution(String),
    /// More load than the database can take: shed at once, retry shortly.
    #[error("saturated: {0}")]
    Saturated(&'static str),
    /// The gateway has not read the merchants' endpoints yet (it just started): what it would
    /// write now could miss a merchant's notification, so it asks for a retry instead.
    #[error("the gateway is starting: its merchant endpoints are not loaded yet")]
    Starting,
    /// An operator disabled the merchant's endpoint: only an operator's enable lifts it.
    #[error("an operator disabled this endpoint; only an operator can enable it again")]
    EndpointDisabledByOperator,
    /// Over an abuse limit (`limit` names which): nothing was looked up or stored.
    #[error("too many requests ({limit}); retry after {retry_after_secs} s")]
    RateLimited {
        limit: &'static str,
        retry_after_secs: u64,
    },
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl From<Limited> for ApiError {
    fn from(limited: Limited) -> Self {
        ApiError::RateLimited {
            limit: limited.limit,
            retry_after_secs: limited.retry_after_secs(),
        }
    }
}

impl ApiError {
    /// No pooled connection came (timeout or connect failure); also for each of the requests
    /// that shared one failed checkout.
    pub fn pool_unavailable(error: &dyn std::fmt::Display) -> Self {
        ApiError::Unavailable(anyhow::anyhow!("database pool: {error}"))
    }

    /// The stable code clients match on.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::Forbidden { .. } => "forbidden",
            ApiError::IdempotencyKey(KeyError::Missing) => "missing_idempotency_key",
            ApiError::IdempotencyKey(_) => "invalid_idempotency_key",
            ApiError::PayloadTooLarge { .. } => "payload_too_large",
            ApiError::BodyTimeout => "request_timeout",
            ApiError::BodyUnreadable(_) => "invalid_body",
            ApiError::IdempotencyKeyInFlight => "idempotency_key_in_flight",
            ApiError::KeyReusedWithDifferentBody => "key_reused_with_different_body",
            ApiError::NotFound { code, .. } => code,
            ApiError::UnknownProvider => "unknown_provider",
            ApiError::InvalidSignature(_) => "invalid_signature",
            ApiError::InvalidPayload(_) => "invalid_payload",
            ApiError::InvalidQuery(_) => "invalid_query",
            ApiError::InvalidRequest(_) => "invalid_request",
            ApiError::InvalidEndpoint { code, .. } => code,
            ApiError::TooManyEndpoints(_) => "too_many_endpoints",
            ApiError::EndpointDisabledByOperator => "endpoint_disabled_by_operator",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::NotConfigured(_) => "not_configured",
            ApiError::OutOfOrder(_) => "out_of_order",
            ApiError::RefundNeedsReview { .. } => "refund_needs_review",
            ApiError::RefundNotResolvable => "refund_not_resolvable",
            ApiError::InvalidResolution(_) => "invalid_resolution",
            ApiError::Unavailable(_)
            | ApiError::Saturated(_)
            | ApiError::Starting
            | ApiError::RefundBackingOff { .. }
            | ApiError::ProviderKeyRefused(_) => "unavailable",
            ApiError::CannotWrite { .. } => "database_cannot_write",
            ApiError::Internal(_) => "internal",
        }
    }

    /// The `outcome` label of the request metrics and log line.
    pub fn outcome_label(&self) -> &'static str {
        match self {
            ApiError::IdempotencyKeyInFlight => "in_flight",
            ApiError::KeyReusedWithDifferentBody => "mismatch",
            ApiError::OutOfOrder(_) => "out_of_order",
            ApiError::InvalidSignature(_) => "invalid_signature",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Saturated(_) => "saturated",
            ApiError::Starting => "starting",
            ApiError::RefundBackingOff { .. } => "provider_unavailable",
            ApiError::ProviderKeyRefused(_) => "provider_key_refused",
            other => other.code(),
        }
    }

    /// The message clients see: never a cause chain, a secret or a signature.
    fn public_message(&self) -> String {
        match self {
            ApiError::Unavailable(_)
            | ApiError::Saturated(_)
            | ApiError::Starting
            | ApiError::ProviderKeyRefused(_) => {
                "the service is temporarily unavailable; retry".into()
            }
            ApiError::CannotWrite { .. } => {
                "the database cannot store anything now; nothing was stored, retry later".into()
            }
            ApiError::RefundBackingOff { retry_after_secs } => format!(
                "the payment provider did not confirm the refund; retry with the same key after {retry_after_secs} s"
            ),
            ApiError::Internal(_) => "internal error".into(),
            ApiError::InvalidSignature(_) => "signature verification failed".into(),
            other => other.to_string(),
        }
    }
}

/// The shape of every error body.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    /// Stable snake_case code, e.g. idempotency_key_in_flight.
    pub error: &'a str,
    pub message: &'a str,
    /// For out_of_order: what the event waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
}

/// `{"error": code, "message": ..}`.
pub fn error_body(code: &str, message: &str) -> serde_json::Value {
    serde_json::to_value(ErrorBody {
        error: code,
        message,
        reason: None,
    })
    .unwrap_or_default()
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized | ApiError::InvalidSignature(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::IdempotencyKey(_)
            | ApiError::InvalidPayload(_)
            | ApiError::InvalidQuery(_)
            | ApiError::InvalidRequest(_)
            | ApiError::InvalidEndpoint { .. }
            | ApiError::BodyUnreadable(_) => StatusCode::BAD_REQUEST,
            ApiError::TooManyEndpoints(_) | ApiError::EndpointDisabledByOperator => {
                StatusCode::CONFLICT
            }
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotConfigured(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            ApiError::IdempotencyKeyInFlight
            | ApiError::OutOfOrder(_)
            | ApiError::RefundNeedsReview { .. }
            | ApiError::RefundNotResolvable => StatusCode::CONFLICT,
            ApiError::KeyReusedWithDifferentBody | ApiError::InvalidResolution(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::NotFound { .. } | ApiError::UnknownProvider => StatusCode::NOT_FOUND,
            ApiError::Unavailable(_)
            | ApiError::CannotWrite { .. }
            | ApiError::Saturated(_)
            | ApiError::Starting
            | ApiError::RefundBackingOff { .. }
            | ApiError::ProviderKeyRefused(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if status.is_server_error() && !matches!(self, ApiError::Saturated(_) | ApiError::Starting)
        {
            // The whole cause chain goes to the log, never to the client.
            tracing::error!(error.code = self.code(), error.cause = ?anyhow_chain(self), "request failed");
        }
        let mut response = HttpResponse::build(status);
        response.insert_header((CONTENT_TYPE, "application/json"));
        match self {
            ApiError::IdempotencyKeyInFlight => {
                response.insert_header((RETRY_AFTER, IN_FLIGHT_RETRY_AFTER_SECS.to_string()));
            }
            ApiError::OutOfOrder(_) => {
                response.insert_header((RETRY_AFTER, OUT_OF_ORDER_RETRY_AFTER_SECS.to_string()));
            }
            ApiError::Unavailable(_) | ApiError::Saturated(_) | ApiError::Starting => {
                response.insert_header((RETRY_AFTER, "1"));
            }
            ApiError::RateLimited {
                retry_after_secs, ..
            } => {
                response.insert_header((RETRY_AFTER, retry_after_secs.to_string()));
            }
            ApiError::RefundBackingOff { retry_after_secs } => {
                response.insert_header((RETRY_AFTER, retry_after_secs.to_string()));
            }
            ApiError::ProviderKeyRefused(_) => {
                response.insert_header((RETRY_AFTER, PROVIDER_KEY_RETRY_AFTER_SECS.to_string()));
            }
            ApiError::CannotWrite { .. } => {
                response.insert_header((RETRY_AFTER, CANNOT_WRITE_RETRY_AFTER_SECS.to_string()));
            }
            _ => {}
        }
        let mut body = error_body(self.code(), &self.public_message());
        match self {
            ApiError::OutOfOrder(reason) => body["reason"] = json!(reason),
            ApiError::Forbidden { required_role } => {
                body["required_role"] = json!(required_role.as_str());
            }
            ApiError::RefundNeedsReview {
                refund_request_id,
                reason,
            } => {
                body["reason"] = json!(reason);
                body["refund_request_id"] = json!(refund_request_id);
            }
            _ => {}
        }
        response.body(body.to_string())
    }
}

fn anyhow_chain(error: &ApiError) -> Vec<String> {
    let mut chain = Vec::new();
    let mut current: Option<&dyn std::error::Error> = Some(error);
    while let Some(e) = current {
        chain.push(e.to_string());
        current = e.source();
    }
    chain
}

impl From<diesel::result::Error> for ApiError {
    fn from(error: diesel::result::Error) -> Self {
        use diesel::result::Error as E;
        if let Some(reason) = CannotWrite::of(&error) {
            return ApiError::CannotWrite {
                reason,
                source: error.into(),
            };
        }
        match error {
            // Anything the server said or failed to say: the transaction is gone, retry.
            E::DatabaseError(..)
            | E::BrokenTransactionManager
            | E::RollbackErrorOnCommit { .. } => ApiError::Unavailable(error.into()),
            other => ApiError::Internal(other.into()),
        }
    }
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for ApiError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        ApiError::pool_unavailable(&error)
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> Self {
        match rejection {
            Rejection::Refused(error) => ApiError::InvalidSignature(error),
            Rejection::Unavailable(why) => ApiError::Unavailable(anyhow::anyhow!(why)),
            Rejection::KeyRefused(why) => ApiError::ProviderKeyRefused(why),
        }
    }
}

impl From<InvalidQuery> for ApiError {
    fn from(error: InvalidQuery) -> Self {
        ApiError::InvalidQuery(error.0)
    }
}

impl From<IdempotencyError> for ApiError {
    fn from(error: IdempotencyError) -> Self {
        match error {
            IdempotencyError::InFlight => ApiError::IdempotencyKeyInFlight,
            IdempotencyError::KeyReusedWithDifferentBody => ApiError::KeyReusedWithDifferentBody,
            IdempotencyError::NotYet(reason) => ApiError::OutOfOrder(reason),
            IdempotencyError::Database(error) => error.into(),
            IdempotencyError::Pool(error) => ApiError::pool_unavailable(&error),
            IdempotencyError::Saturated(why) => ApiError::Saturated(why),
            IdempotencyError::Unconfirmed(why) => {
                ApiError::Unavailable(anyhow::anyhow!("commit not confirmed: {why}"))
            }
            IdempotencyError::ProviderUnavailable => {
                ApiError::Unavailable(anyhow::anyhow!("the provider's API could not be asked"))
            }
        }
    }
}

impl From<EndpointError> for ApiError {
    fn from(error: EndpointError) -> Self {
        match error {
            EndpointError::Invalid(invalid @ InvalidEndpoint::Url(_)) => {
                ApiError::InvalidEndpoint {
                    code: "invalid_url",
                    message: invalid.to_string(),
                }
            }
            EndpointError::Invalid(invalid @ InvalidEndpoint::Description) => {
                ApiError::InvalidEndpoint {
                    code: "invalid_description",
                    message: invalid.to_string(),
                }
            }
            EndpointError::Invalid(invalid @ InvalidEndpoint::EventType(_)) => {
                ApiError::InvalidEndpoint {
                    code: "unknown_event_type",
                    message: invalid.to_string(),
                }
            }
            EndpointError::Invalid(invalid @ InvalidEndpoint::Rate) => ApiError::InvalidEndpoint {
                code: "rate_out_of_range",
                message: invalid.to_string(),
            },
            EndpointError::Invalid(invalid @ InvalidEndpoint::Address(_)) => {
                ApiError::InvalidEndpoint {
                    code: crate::outbound::ADDRESS_NOT_ALLOWED,
                    message: invalid.to_string(),
                }
            }
            EndpointError::NotFound => ApiError::NotFound {
                code: "endpoint_not_found",
                what: "endpoint",
            },
            EndpointError::TooMany(_) => ApiError::TooManyEndpoints(error.to_string()),
            EndpointError::DisabledByOperator => ApiError::EndpointDisabledByOperator,
            EndpointError::NoKey => ApiError::NotConfigured(
                "the gateway has no [secrets] key: endpoints by API are off (docs/notifications.md)",
            ),
            EndpointError::Database(error) => error.into(),
        }
    }
}

/// The status a refused `order.create` is stored and replayed with.
pub fn order_rejection_status(kind: RejectionKind) -> u16 {
    match kind {
        RejectionKind::InvalidJson => 400,
        RejectionKind::InvalidAmount
        | RejectionKind::UnknownCurrency
        | RejectionKind::InvalidReference => 422,
    }
}

impl From<RefundError> for ApiError {
    fn from(error: RefundError) -> Self {
        match error {
            RefundError::InFlight => ApiError::IdempotencyKeyInFlight,
            RefundError::KeyReusedWithDifferentBody => ApiError::KeyReusedWithDifferentBody,
            RefundError::ProviderUnavailable { retry_after } => ApiError::RefundBackingOff {
                retry_after_secs: retry_after.as_secs() + 1,
            },
            RefundError::NeedsReview(review) => ApiError::RefundNeedsReview {
                refund_request_id: review.refund_request_id,
                reason: review.reason.as_str(),
            },
            RefundError::Database(error) => error.into(),
            RefundError::Pool(error) => ApiError::pool_unavailable(&error),
            RefundError::Unconfirmed(why) => {
                ApiError::Unavailable(anyhow::anyhow!("commit not confirmed: {why}"))
            }
        }
    }
}

impl From<ResolveError> for ApiError {
    fn from(error: ResolveError) -> Self {
        match error {
            ResolveError::NotFound => ApiError::NotFound {
                code: "refund_request_not_found",
                what: "refund request",
            },
            ResolveError::NotResolvable => ApiError::RefundNotResolvable,
            ResolveError::RefundIdInUse { held_by } => ApiError::InvalidResolution(format!(
                "provider_refund_id is already refund request {held_by}'s; check the provider's dashboard for the right one"
            )),
            ResolveError::Refund(error) => error.into(),
        }
    }
}

/// The status a refused `refund.create` is stored and replayed with.
pub fn refund_refusal_status(kind: RefusalKind) -> u16 {
    match kind {
        RefusalKind::InvalidJson => 400,
        RefusalKind::OrderNotFound => 404,
        RefusalKind::InvalidAmount
        | RefusalKind::InvalidReason
        | RefusalKind::NotRefundable
        | RefusalKind::AmountExceedsRefundable
        | RefusalKind::ProviderDeclined => 422,
    }
}
