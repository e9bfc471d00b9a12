//! Authentication as extractors: a handler that takes [`MerchantAuth`] runs only for a
//! merchant's API token, one that takes [`Staff`] only for an operator key (or the `[admin]
//! token`) whose role includes the one the handler names; everyone else gets 401
//! `unauthorized`, or 403 `forbidden` for a role too low.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpMessage, HttpRequest, web};
use chrono::Utc;
use tracing_actix_web::RequestId;

use crate::access::Actor;
use crate::access::audit;
use crate::access::operator::{self, Denied};
use crate::access::role::Role;
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

/// The configured admin token (the break-glass `bootstrap` actor), as [`Staff`] compares it.
pub struct AdminToken(pub Option<Secret>);

fn app_data<T: 'static>(request: &HttpRequest) -> Result<web::Data<T>, ApiError> {
    request
        .app_data::<web::Data<T>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("application state missing")))
}

/// The merchant (API user) a bearer token belongs to. The lookup uses the API pool, so a
/// flood of bad tokens never takes a connection provider callbacks need.
#[derive(Debug, Clone)]
pub struct MerchantAuth {
    pub user_id: i64,
    /// The request's id, for the audit rows of the merchant's own changes.
    pub request_id: Option<String>,
}

impl MerchantAuth {
    /// The merchant as the audit log names it.
    pub fn audit(&self) -> audit::Context {
        audit::Context::merchant(self.user_id, self.request_id.clone())
    }
}

impl FromRequest for MerchantAuth {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let token = auth::bearer_token(request.headers()).map(str::to_owned);
        let api_pool = app_data::<ApiPool>(request);
        let request_id = request_id(request);
        Box::pin(async move {
            let token = token.ok_or(ApiError::Unauthorized)?;
            let api_pool = api_pool?;
            let mut conn = api_pool.get().await?;
            let user_id = auth::authenticate(&mut conn, &token)
                .await?
                .ok_or(ApiError::Unauthorized)?;
            tracing::Span::current().record("user_id", user_id);
            Ok(MerchantAuth {
                user_id,
                request_id,
            })
        })
    }
}

/// The least role a route needs, as a type: a handler that takes `Staff<Finance>` runs only
/// for a key whose role includes finance. The route's OpenAPI entry names the same role, and
/// the role table test holds the two together.
pub trait Needs {
    const ROLE: Role;
}

/// Events, event detail, attention, balances, notifications, idempotency records.
pub struct Viewer;
/// + the export and replays of stored events.
pub struct Finance;
/// + redelivery, refund-request resolution, endpoint enable and disable.
pub struct Operator;
/// + the audit log, operators and merchants' endpoints.
pub struct Admin;

impl Needs for Viewer {
    const ROLE: Role = Role::Viewer;
}
impl Needs for Finance {
    const ROLE: Role = Role::Finance;
}
impl Needs for Operator {
    const ROLE: Role = Role::Operator;
}
impl Needs for Admin {
    const ROLE: Role = Role::Admin;
}

/// A person (or the break-glass token) whose bearer key's role includes `R`'s: 401
/// `unauthorized` for no key or an unknown, revoked or expired one, 403 `forbidden` with
/// `required_role` for a role too low. An operator key costs one lookup of its unique index
/// on the API pool (the primary: a revocation is seen by the next request), the `[admin]
/// token` none.
pub struct Staff<R> {
    pub actor: Actor,
    /// Who acts and in which request, for the audit rows of what the handler does.
    pub audit: audit::Context,
    needs: PhantomData<R>,
}

/// The actor a bearer or console key stands for: the `[admin] token` (compared in constant
/// time) is `bootstrap`; anything else must be a live operator key.
pub async fn actor_of_key(
    key: &str,
    bootstrap: Option<&Secret>,
    api_pool: &ApiPool,
) -> Result<Result<Actor, Denied>, ApiError> {
    if auth::is_admin(Some(key), bootstrap) {
        return Ok(Ok(Actor::bootstrap()));
    }
    if !key.starts_with(operator::KEY_PREFIX) {
        return Ok(Err(Denied::Unknown));
    }
    let mut conn = api_pool.get().await?;
    Ok(operator::authenticate(&mut conn, key, Utc::now()).await?)
}

/// The request's id, as its log lines carry it.
pub fn request_id(request: &HttpRequest) -> Option<String> {
    request
        .extensions()
        .get::<RequestId>()
        .map(ToString::to_string)
}

impl<R: Needs> FromRequest for Staff<R> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let key = auth::bearer_token(request.headers()).map(str::to_owned);
        let bootstrap = app_data::<AdminToken>(request);
        let api_pool = app_data::<ApiPool>(request);
        let request_id = request_id(request);
        let path = request.path().to_owned();
        Box::pin(async move {
            let key = key.ok_or(ApiError::Unauthorized)?;
            let (bootstrap, api_pool) = (bootstrap?, api_pool?);
            let actor = actor_of_key(&key, bootstrap.0.as_ref(), &api_pool)
                .await?
                .map_err(|denied| {
                    tracing::warn!(denied = denied.as_str(), %path, "admin key refused");
                    ApiError::Unauthorized
                })?;
            if !actor.may(R::ROLE) {
                tracing::warn!(actor = %actor.name, role = %actor.role, required_role = %R::ROLE, %path, "admin request above the key's role");
                return Err(ApiError::Forbidden {
                    required_role: R::ROLE,
                });
            }
            Ok(Staff {
                audit: actor.in_request(request_id),
                actor,
                needs: PhantomData,
            })
        })
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
