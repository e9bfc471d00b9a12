//! Authentication as extractors: a handler that takes [`MerchantAuth`] or [`AdminAuth`] runs
//! only for an authenticated caller; everyone else gets 401 `unauthorized`.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::{FromRequest, HttpRequest, web};

use super::state::AppState;
use crate::auth;
use crate::error::ApiError;

fn state(request: &HttpRequest) -> Result<web::Data<AppState>, ApiError> {
    request
        .app_data::<web::Data<AppState>>()
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
        let state = state(request);
        Box::pin(async move {
            let token = token.ok_or(ApiError::Unauthorized)?;
            let state = state?;
            let mut conn = state.api_pool.get().await?;
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
        let result = state(request).and_then(|state| {
            let given = auth::bearer_token(request.headers());
            if auth::is_admin(given, state.settings.admin.token.as_ref()) {
                Ok(AdminAuth)
            } else {
                Err(ApiError::Unauthorized)
            }
        });
        std::future::ready(result)
    }
}
