//! Authentication as extractors: a handler that takes [`MerchantAuth`] or [`AdminAuth`] runs
//! only for an authenticated caller; everyone else gets 401 `unauthorized`.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};

use crate::auth;
use crate::db::pool::PgPool;
use crate::error::ApiError;
use crate::idempotency::key::IdempotencyKey;
use crate::secret::Secret;

/// This worker's pool for merchants' API, admin and readiness: their traffic, whoever sends
/// it, can never make a provider callback wait for a connection.
#[derive(Clone)]
pub struct ApiPool(pub PgPool);

impl std::ops::Deref for ApiPool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.0
    }
}

/// This worker's pool for the read-only work: the console, the event log API and its export,
/// and balances. It reads from `[database] replica_url` when one is set (a standby: its data
/// lags the primary by the replication delay), otherwise it is the API pool. A route that
/// only reads and may show slightly old data takes this one; callbacks, orders and refunds
/// never do.
#[derive(Clone)]
pub struct ReadPool(pub PgPool);

impl std::ops::Deref for ReadPool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.0
    }
}

/// The configured admin token, as [`AdminAuth`] compares it.
pub struct AdminToken(pub Option<Secret>);

fn app_data<T: 'static>(request: &HttpRequest) -> Result<web::Data<T>, ApiError> {
    request
        .app_data::<web::Data<T>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("application state missing")))
}

/// The merchant (API user) a bearer token belongs to. The lookup uses the API pool, so a
/// flood of bad tokens never takes a connection provider callbacks need.
#[derive(Debug, Clone, Copy)]
pub struct MerchantAuth {
    pub user_id: i64,
}

impl FromRequest for MerchantAuth {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let token = auth::bearer_token(request.headers()).map(str::to_owned);
        let api_pool = app_data::<ApiPool>(request);
        Box::pin(async move {
            let token = token.ok_or(ApiError::Unauthorized)?;
            let api_pool = api_pool?;
            let mut conn = api_pool.get().await?;
            let user_id = auth::authenticate(&mut conn, &token)
                .await?
                .ok_or(ApiError::Unauthorized)?;
            tracing::Span::current().record("user_id", user_id);
            Ok(MerchantAuth { user_id })
        })
    }
}

/// Proof that the request carries the admin token (compared in constant time).
#[derive(Debug, Clone, Copy)]
pub struct AdminAuth;

impl FromRequest for AdminAuth {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let result = app_data::<AdminToken>(request).and_then(|expected| {
            let given = auth::bearer_token(request.headers());
            if auth::is_admin(given, expected.0.as_ref()) {
                Ok(AdminAuth)
            } else {
                Err(ApiError::Unauthorized)
            }
        });
        std::future::ready(result)
    }
}

/// The request's `Idempotency-Key` header, parsed (400 `missing_idempotency_key` /
/// `invalid_idempotency_key` otherwise).
#[derive(Debug, Clone)]
pub struct KeyHeader(pub IdempotencyKey);

impl FromRequest for KeyHeader {
    type Error = ApiError;
    type Future = std::future::Ready<Result<Self, ApiError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let header = request
            .headers()
            .get("Idempotency-Key")
            .map(|v| v.as_bytes());
        std::future::ready(
            IdempotencyKey::parse(header)
                .map(KeyHeader)
                .map_err(ApiError::from),
        )
    }
}
