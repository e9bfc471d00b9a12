//! Merchant endpoints by API: `/v1/webhook-endpoints` for a merchant with its API token, and
//! the same under `/admin/merchants/{merchant_id}/webhook-endpoints` for admins. Create, list,
//! change (URL, description, disabled), delete, rotate the secret, send a `ping`. Each change
//! commits with its audit row and reaches every running gateway within about a second
//! (docs/notifications.md); this one reloads at once.

use actix_web::{HttpRequest, HttpResponse, web};

use super::app_data::{Admin, ApiPool};
use super::body::read_body;
use super::extract::{MerchantAuth, Staff};
use super::state::AppState;
use crate::access::audit;
use crate::error::{ApiError, ErrorBody};
use crate::notifications::body::webhook_id;
use crate::notifications::endpoints::{self, By, Change, EndpointView, Given, WithSecret};

/// The body of a creation: `{"url": "https://..", "description": "..", "filter_types": [..],
/// "rate_limit_per_sec": n}`.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// `https://` (plain `http://` only with `[notifications] allow_http`), at most 2,048 bytes,
    /// not an address the outgoing rules refuse.
    pub url: String,
    /// At most 256 characters.
    pub description: Option<String>,
    /// The event types it receives (`order.paid`, ..); absent or empty: every type.
    pub filter_types: Option<Vec<String>>,
    /// 1 to 1000 notifications a second (each gateway); absent or null: no limit.
    pub rate_limit_per_sec: Option<i64>,
}

/// Reads a field that may be absent (`None`), null (`Some(None)`) or a value.
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// The body of a change: any of its fields.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointChange {
    pub url: Option<String>,
    pub description: Option<String>,
    /// Replaces the filter; empty: every type.
    pub filter_types: Option<Vec<String>>,
    /// 1 to 1000; null: no limit from now on.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>)]
    pub rate_limit_per_sec: Option<Option<i64>>,
    /// true: nothing is sent until it is enabled again (its notifications wait); false: enabled,
    /// its waiting notifications go out at `[notifications] release_per_sec`.
    pub disabled: Option<bool>,
}

/// The endpoints of a merchant, oldest first.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EndpointList {
    pub endpoints: Vec<EndpointView>,
}

/// A staged `ping`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Pinged {
    pub notification_id: i64,
    /// The `webhook-id` it goes out under.
    pub webhook_id: String,
}

/// Who asks for whose endpoint: the merchant itself, or an admin naming it.
struct Acting {
    merchant_id: i64,
    audit: audit::Context,
    by: By,
}

impl Acting {
    /// A merchant's own change, rotation, test or ping is charged to its limit (each writes an
    /// audit row nobody may delete and reloads every gateway); an admin's is not.
    fn charge(&self, state: &AppState) -> Result<(), ApiError> {
        if self.by == By::Merchant {
            state.limits.endpoint_change(self.merchant_id)?;
        }
        Ok(())
    }
}

impl From<&MerchantAuth> for Acting {
    fn from(merchant: &MerchantAuth) -> Self {
        Self {
            merchant_id: merchant.user_id,
            audit: merchant.audit(),
            by: By::Merchant,
        }
    }
}

fn for_merchant(staff: &Staff<Admin>, merchant_id: &str) -> Result<Acting, ApiError> {
    let merchant_id =
        merchant_id
            .parse::<i64>()
            .ok()
            .filter(|id| *id > 0)
            .ok_or(ApiError::NotFound {
                code: "merchant_not_found",
                what: "merchant",
            })?;
    Ok(Acting {
        merchant_id,
        audit: staff.audit.clone(),
        by: By::Admin,
    })
}

/// The JSON body as `T`, within the server's body bounds; an unknown field is refused.
async fn json_body<T: serde::de::DeserializeOwned>(
    request: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<T, ApiError> {
    let body = read_body(request, payload, &state.settings.server).await?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::InvalidRequest(format!("invalid body: {e}")))
}

async fn create(
    acting: Acting,
    request: HttpRequest,
    payload: web::Payload,
    state: &AppState,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    acting.charge(state)?;
    let new: NewEndpoint = json_body(&request, payload, state).await?;
    let settings = &state.settings;
    let given = Given {
        url: Some(new.url),
        description: new.description,
        filter_types: new.filter_types,
        rate_limit_per_sec: Some(new.rate_limit_per_sec),
        disabled: None,
    };
    let fields = endpoints::check(settings, acting.merchant_id, given)
        .and_then(Change::into_fields)
        .map_err(endpoints::EndpointError::from)?;
    let mut conn = api_pool.get().await?;
    let created = endpoints::create(
        &mut conn,
        settings.secrets.key.as_ref(),
        (acting.merchant_id, acting.by),
        fields,
        settings.notifications.endpoints_per_merchant,
        &acting.audit,
    )
    .await?;
    state.notifying.endpoints_changed();
    Ok(HttpResponse::Created().json(created))
}

async fn list(acting: Acting, api_pool: &ApiPool) -> Result<HttpResponse, ApiError> {
    let mut conn = api_pool.get().await?;
    let endpoints = endpoints::list(&mut conn, acting.merchant_id).await?;
    Ok(HttpResponse::Ok().json(EndpointList { endpoints }))
}

async fn update(
    acting: Acting,
    id: &str,
    request: HttpRequest,
    payload: web::Payload,
    state: &AppState,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    acting.charge(state)?;
    let change: EndpointChange = json_body(&request, payload, state).await?;
    let settings = &state.settings;
    let given = Given {
        url: change.url,
        description: change.description,
        filter_types: change.filter_types,
        rate_limit_per_sec: change.rate_limit_per_sec,
        disabled: change.disabled,
    };
    let change = endpoints::check(settings, acting.merchant_id, given)
        .map_err(endpoints::EndpointError::from)?;
    let mut conn = api_pool.get().await?;
    let updated = endpoints::update(
        &mut conn,
        acting.merchant_id,
        id,
        change,
        (acting.by, settings.notifications.release_per_sec),
        &acting.audit,
    )
    .await?;
    state.notifying.endpoints_changed();
    state.notifying.wake_handle().wake();
    Ok(HttpResponse::Ok().json(updated))
}

async fn delete(
    acting: Acting,
    id: &str,
    state: &AppState,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    acting.charge(state)?;
    let fallback = state
        .notifying
        .directory()
        .has_config_endpoint(acting.merchant_id);
    let mut conn = api_pool.get().await?;
    endpoints::delete(&mut conn, acting.merchant_id, id, fallback, &acting.audit).await?;
    state.notifying.endpoints_changed();
    Ok(HttpResponse::NoContent().finish())
}

async fn rotate(
    acting: Acting,
    id: &str,
    state: &AppState,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    acting.charge(state)?;
    let settings = &state.settings;
    let mut conn = api_pool.get().await?;
    let rotated = endpoints::rotate(
        &mut conn,
        settings.secrets.key.as_ref(),
        (acting.merchant_id, id, acting.by),
        settings.notifications.secret_overlap,
        &acting.audit,
    )
    .await?;
    state.notifying.endpoints_changed();
    Ok(HttpResponse::Ok().json(rotated))
}

async fn ping(
    acting: Acting,
    id: &str,
    state: &AppState,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    acting.charge(state)?;
    let mut conn = api_pool.get().await?;
    let notification_id = endpoints::ping(&mut conn, acting.merchant_id, id, &acting.audit).await?;
    state.notifying.wake_handle().wake();
    Ok(HttpResponse::Accepted().json(Pinged {
        notification_id,
        webhook_id: webhook_id(notification_id),
    }))
}

// The merchant's routes.

/// `POST /v1/webhook-endpoints`: a notification endpoint of the merchant, with its secret (shown
/// this once).
#[utoipa::path(
    post,
    path = "/v1/webhook-endpoints",
    tag = "merchant",
    security(("bearer" = [])),
    request_body(content = NewEndpoint, content_type = "application/json"),
    responses(
        (status = 201, body = WithSecret),
        (status = 400, description = "invalid_url, address_not_allowed, invalid_description, unknown_event_type, rate_out_of_range or invalid_request (an unknown field): nothing stored", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 409, description = "too_many_endpoints: the merchant has [notifications] endpoints_per_merchant already; endpoint_disabled_by_operator: an operator disabled one of the merchant's endpoints, only an operator enables it", body = ErrorBody),
        (status = 429, description = "rate_limited: past [limits] endpoint_changes_per_hour for this merchant (Retry-After)", body = ErrorBody),
        (status = 501, description = "not_configured: the gateway has no [secrets] key", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn merchant_create(
    merchant: MerchantAuth,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    create((&merchant).into(), request, payload, &state, &api_pool).await
}

/// `GET /v1/webhook-endpoints`.
#[utoipa::path(
    get,
    path = "/v1/webhook-endpoints",
    tag = "merchant",
    security(("bearer" = [])),
    responses(
        (status = 200, body = EndpointList),
        (status = 401, description = "unauthorized", body = ErrorBody),
    )
)]
pub async fn merchant_list(
    merchant: MerchantAuth,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    list((&merchant).into(), &api_pool).await
}

/// `PATCH /v1/webhook-endpoints/{id}`: its `url`, `description`, `filter_types`,
/// `rate_limit_per_sec` or `disabled`.
#[utoipa::path(
    patch,
    path = "/v1/webhook-endpoints/{id}",
    tag = "merchant",
    security(("bearer" = [])),
    params(("id" = String, Path)),
    request_body(content = EndpointChange, content_type = "application/json"),
    responses(
        (status = 200, body = EndpointView),
        (status = 400, description = "invalid_url, address_not_allowed, invalid_description, unknown_event_type, rate_out_of_range or invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 409, description = "endpoint_disabled_by_operator: an operator disabled this endpoint (enabling it, or rotating its secret, is an operator's)", body = ErrorBody),
        (status = 429, description = "rate_limited: past [limits] endpoint_changes_per_hour for this merchant (Retry-After)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found (also another merchant's)", body = ErrorBody),
    )
)]
pub async fn merchant_update(
    merchant: MerchantAuth,
    path: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    update(
        (&merchant).into(),
        &path,
        request,
        payload,
        &state,
        &api_pool,
    )
    .await
}

/// `DELETE /v1/webhook-endpoints/{id}`: its waiting notifications fail (`endpoint deleted`)
/// unless the configuration file names an endpoint for the merchant.
#[utoipa::path(
    delete,
    path = "/v1/webhook-endpoints/{id}",
    tag = "merchant",
    security(("bearer" = [])),
    params(("id" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 429, description = "rate_limited: past [limits] endpoint_changes_per_hour for this merchant (Retry-After)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
    )
)]
pub async fn merchant_delete(
    merchant: MerchantAuth,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    delete((&merchant).into(), &path, &state, &api_pool).await
}

/// `POST /v1/webhook-endpoints/{id}/rotate-secret`: a new secret (shown this once); the old one
/// signs beside it for `[notifications] secret_overlap_hours`.
#[utoipa::path(
    post,
    path = "/v1/webhook-endpoints/{id}/rotate-secret",
    tag = "merchant",
    security(("bearer" = [])),
    params(("id" = String, Path)),
    responses(
        (status = 200, body = WithSecret),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 409, description = "endpoint_disabled_by_operator: an operator disabled this endpoint (enabling it, or rotating its secret, is an operator's)", body = ErrorBody),
        (status = 429, description = "rate_limited: past [limits] endpoint_changes_per_hour for this merchant (Retry-After)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
        (status = 501, description = "not_configured", body = ErrorBody),
    )
)]
pub async fn merchant_rotate(
    merchant: MerchantAuth,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    rotate((&merchant).into(), &path, &state, &api_pool).await
}

/// `POST /v1/webhook-endpoints/{id}/test`: stages a `ping` notification.
#[utoipa::path(
    post,
    path = "/v1/webhook-endpoints/{id}/test",
    tag = "merchant",
    security(("bearer" = [])),
    params(("id" = String, Path)),
    responses(
        (status = 202, body = Pinged),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 429, description = "rate_limited: past [limits] endpoint_changes_per_hour for this merchant (Retry-After)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
    )
)]
pub async fn merchant_ping(
    merchant: MerchantAuth,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    ping((&merchant).into(), &path, &state, &api_pool).await
}

// The admins' routes: the same, for the merchant of the path.

/// `POST /admin/merchants/{merchant_id}/webhook-endpoints`.
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/webhook-endpoints",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(("merchant_id" = String, Path)),
    request_body(content = NewEndpoint, content_type = "application/json"),
    responses(
        (status = 201, body = WithSecret),
        (status = 400, description = "invalid_url, address_not_allowed, invalid_description, unknown_event_type, rate_out_of_range or invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
        (status = 409, description = "too_many_endpoints", body = ErrorBody),
        (status = 501, description = "not_configured", body = ErrorBody),
    )
)]
pub async fn admin_create(
    staff: Staff<Admin>,
    path: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    create(
        for_merchant(&staff, &path)?,
        request,
        payload,
        &state,
        &api_pool,
    )
    .await
}

/// `GET /admin/merchants/{merchant_id}/webhook-endpoints`.
#[utoipa::path(
    get,
    path = "/admin/merchants/{merchant_id}/webhook-endpoints",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 200, body = EndpointList),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
    )
)]
pub async fn admin_list(
    staff: Staff<Admin>,
    path: web::Path<String>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    list(for_merchant(&staff, &path)?, &api_pool).await
}

/// `PATCH /admin/merchants/{merchant_id}/webhook-endpoints/{id}`.
#[utoipa::path(
    patch,
    path = "/admin/merchants/{merchant_id}/webhook-endpoints/{id}",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(("merchant_id" = String, Path), ("id" = String, Path)),
    request_body(content = EndpointChange, content_type = "application/json"),
    responses(
        (status = 200, body = EndpointView),
        (status = 400, description = "invalid_url, invalid_description or invalid_request", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
    )
)]
pub async fn admin_update(
    staff: Staff<Admin>,
    path: web::Path<(String, String)>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let (merchant_id, id) = path.into_inner();
    let acting = for_merchant(&staff, &merchant_id)?;
    update(acting, &id, request, payload, &state, &api_pool).await
}

/// `DELETE /admin/merchants/{merchant_id}/webhook-endpoints/{id}`.
#[utoipa::path(
    delete,
    path = "/admin/merchants/{merchant_id}/webhook-endpoints/{id}",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(("merchant_id" = String, Path), ("id" = String, Path)),
    responses(
        (status = 204, description = "deleted"),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
    )
)]
pub async fn admin_delete(
    staff: Staff<Admin>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let (merchant_id, id) = path.into_inner();
    delete(for_merchant(&staff, &merchant_id)?, &id, &state, &api_pool).await
}

/// `POST /admin/merchants/{merchant_id}/webhook-endpoints/{id}/rotate-secret`.
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/webhook-endpoints/{id}/rotate-secret",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(("merchant_id" = String, Path), ("id" = String, Path)),
    responses(
        (status = 200, body = WithSecret),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
        (status = 501, description = "not_configured", body = ErrorBody),
    )
)]
pub async fn admin_rotate(
    staff: Staff<Admin>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let (merchant_id, id) = path.into_inner();
    rotate(for_merchant(&staff, &merchant_id)?, &id, &state, &api_pool).await
}

/// `POST /admin/merchants/{merchant_id}/webhook-endpoints/{id}/test`.
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/webhook-endpoints/{id}/test",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(("merchant_id" = String, Path), ("id" = String, Path)),
    responses(
        (status = 202, body = Pinged),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
        (status = 404, description = "endpoint_not_found", body = ErrorBody),
    )
)]
pub async fn admin_ping(
    staff: Staff<Admin>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let (merchant_id, id) = path.into_inner();
    ping(for_merchant(&staff, &merchant_id)?, &id, &state, &api_pool).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn example() -> serde_json::Value {
        json!({"url": "https://merchant.example/hooks", "description": "orders"})
    }

    #[test]
    fn a_creation_body_with_an_unknown_field_is_refused() {
        assert!(serde_json::from_value::<NewEndpoint>(example()).is_ok());
        let mut extra = example();
        extra["events"] = json!(["order.paid"]);
        assert!(serde_json::from_value::<NewEndpoint>(extra).is_err());
    }
}
