//! Authentication as extractors: a handler that takes [`MerchantAuth`] runs only for a
//! merchant's API token, one that takes [`Staff`] only for an operator key (or the `[admin]
//! token`) whose role includes the one the handler names; everyone else gets 401
//! `unauthorized`, or 403 `forbidden` for a role too low.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};
use chrono::Utc;

use super::app_data::{AdminToken, ApiPool, Needs, request_id, source_address};
use crate::access::Actor;
use crate::access::audit;
use crate::access::operator::{self, Denied};
use crate::auth;
use crate::error::ApiError;
use crate::idempotency::key::IdempotencyKey;
use crate::limits::Limits;
use crate::secret::Secret;

fn app_data<T: 'static>(request: &HttpRequest) -> Result<web::Data<T>, ApiError> {
    request
        .app_data::<web::Data<T>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("application state missing")))
}

/// The merchant (API user) a bearer token belongs to. The lookup uses the API pool, so a
/// flood of bad tokens never takes a connection provider callbacks need; and past
/// `[limits] unknown_keys_per_minute` refused keys from one address, that address's keys are
/// refused (429) before any lookup.
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
        let limits = app_data::<Limits>(request);
        let source = limits
            .as_ref()
            .ok()
            .and_then(|limits| source_address(request, limits));
        let request_id = request_id(request);
        Box::pin(async move {
            let token = token.ok_or(ApiError::Unauthorized)?;
            let (api_pool, limits) = (api_pool?, limits?);
            if let Some(source) = source {
                limits.key_lookup(source)?;
            }
            let mut conn = api_pool.get().await?;
            let found = auth::authenticate(&mut conn, &token).await?;
            drop(conn);
            let Some(user_id) = found else {
                if let Some(source) = source {
                    limits.key_refused(source)?;
                }
                return Err(ApiError::Unauthorized);
            };
            tracing::Span::current().record("user_id", user_id);
            Ok(MerchantAuth {
                user_id,
                request_id,
            })
        })
    }
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
/// time) is `bootstrap`; anything else must be a live operator key. `closed` is asked before
/// the lookup (an address past its limit of refused keys gets no lookup; the break-glass
/// token costs none and is always checked).
pub async fn actor_of_key(
    key: &str,
    bootstrap: Option<&Secret>,
    api_pool: &ApiPool,
    closed: impl FnOnce() -> Result<(), ApiError>,
) -> Result<Result<Actor, Denied>, ApiError> {
    if auth::is_admin(Some(key), bootstrap) {
        return Ok(Ok(Actor::bootstrap()));
    }
    closed()?;
    if !key.starts_with(operator::KEY_PREFIX) {
        return Ok(Err(Denied::Unknown));
    }
    let mut conn = api_pool.get().await?;
    Ok(operator::authenticate(&mut conn, key, Utc::now()).await?)
}

impl<R: Needs> FromRequest for Staff<R> {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let key = auth::bearer_token(request.headers()).map(str::to_owned);
        let bootstrap = app_data::<AdminToken>(request);
        let api_pool = app_data::<ApiPool>(request);
        let limits = app_data::<Limits>(request);
        let source = limits
            .as_ref()
            .ok()
            .and_then(|limits| source_address(request, limits));
        let request_id = request_id(request);
        let path = request.path().to_owned();
        Box::pin(async move {
            let key = key.ok_or(ApiError::Unauthorized)?;
            let (bootstrap, api_pool, limits) = (bootstrap?, api_pool?, limits?);
            let closed = || match source {
                Some(source) => limits.key_lookup(source).map_err(ApiError::from),
                None => Ok(()),
            };
            let found = actor_of_key(&key, bootstrap.0.as_ref(), &api_pool, closed).await?;
            let actor = match found {
                Ok(actor) => actor,
                Err(denied) => {
                    tracing::warn!(denied = denied.as_str(), %path, "admin key refused");
                    if let Some(source) = source {
                        limits.key_refused(source)?;
                    }
                    return Err(ApiError::Unauthorized);
                }
            };
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
