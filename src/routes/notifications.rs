//! `/admin/notifications` and the merchant endpoint's admin actions: list the notifications,
//! send one (or a merchant's time range) again, enable or disable an endpoint. Through the API
//! pool; each action writes its audit row with its change and wakes this gateway's sender.

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};

use super::app_data::{ApiPool, Operator, ReadPool, Viewer};
use super::extract::{MerchantAuth, Staff};
use super::state::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::notifications::admin::{
    self, Disabled, Enabled, ListFilter, NotificationPage, NotificationView, Redelivered,
};
use crate::notifications::model::StatusFilter;

/// The most notifications one page lists.
const MAX_LIMIT: i64 = 500;
const DEFAULT_LIMIT: i64 = 50;

/// The list's query string.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NotificationQuery {
    pub merchant_id: Option<String>,
    /// pending, failing (pending after a failed attempt), delivered or failed
    pub status: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// 1..=500, default 50.
    pub limit: Option<String>,
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn integer(name: &str, value: &Option<String>) -> Result<Option<i64>, ApiError> {
    present(value)
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| ApiError::InvalidQuery(format!("{name} must be an integer")))
        })
        .transpose()
}

fn time(name: &str, value: &Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    present(value)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::InvalidQuery(format!("{name} must be an RFC 3339 time")))
        })
        .transpose()
}

impl NotificationQuery {
    fn filter(&self) -> Result<ListFilter, ApiError> {
        Ok(ListFilter {
            merchant_id: integer("merchant_id", &self.merchant_id)?,
            status: present(&self.status)
                .map(|v| {
                    StatusFilter::parse(v).ok_or_else(|| {
                        ApiError::InvalidQuery(
                            "status must be pending, failing, delivered or failed".into(),
                        )
                    })
                })
                .transpose()?,
            before: integer("cursor", &self.cursor)?,
        })
    }

    fn limit(&self) -> Result<i64, ApiError> {
        Ok(integer("limit", &self.limit)?
            .map(|n| {
                (1..=MAX_LIMIT).contains(&n).then_some(n).ok_or_else(|| {
                    ApiError::InvalidQuery(format!("limit must be 1 to {MAX_LIMIT}"))
                })
            })
            .transpose()?
            .unwrap_or(DEFAULT_LIMIT))
    }
}

/// `GET /admin/notifications`: newest first, keyset pages.
#[utoipa::path(
    get,
    path = "/admin/notifications",
    tag = "admin",
    security(("operator_key" = ["viewer"])),
    params(NotificationQuery),
    responses(
        (status = 200, body = NotificationPage),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include viewer (required_role)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn list_notifications(
    _staff: Staff<Viewer>,
    query: web::Query<NotificationQuery>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let (filter, limit) = (query.filter()?, query.limit()?);
    let mut conn = api_pool.get().await?;
    let page = admin::page(&mut conn, filter, limit).await?;
    Ok(HttpResponse::Ok().json(page.as_merchant_sees_it()))
}

fn notification_not_found() -> ApiError {
    ApiError::NotFound {
        code: "notification_not_found",
        what: "notification",
    }
}

/// `POST /admin/notifications/{id}/redeliver`: sends it now, whatever its state, under the same
/// `webhook-id` and with the same body; its schedule starts again.
#[utoipa::path(
    post,
    path = "/admin/notifications/{id}/redeliver",
    tag = "admin",
    security(("operator_key" = ["operator"])),
    params(("id" = String, Path)),
    responses(
        (status = 202, description = "pending, due now", body = NotificationView),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include operator (required_role)", body = ErrorBody),
        (status = 404, description = "notification_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn redeliver_notification(
    staff: Staff<Operator>,
    path: web::Path<String>,
    api_pool: web::Data<ApiPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = path
        .into_inner()
        .parse::<i64>()
        .map_err(|_| notification_not_found())?;
    let mut conn = api_pool.get().await?;
    let view = admin::redeliver(&mut conn, id, None, &staff.audit)
        .await?
        .ok_or_else(notification_not_found)?;
    state.notifying.wake_handle().wake();
    Ok(HttpResponse::Accepted().json(view))
}

/// The window of a merchant's redelivery.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// RFC 3339, required: notifications staged at or after.
    pub since: Option<String>,
    /// RFC 3339: staged before (default: now).
    pub until: Option<String>,
    /// The previous call's `next_cursor`: the range goes on after it.
    pub cursor: Option<String>,
    /// Most notifications this call sends again (1 to 10000, default 1000).
    pub limit: Option<i64>,
}

/// The merchant of the path, which must have a notification endpoint in this gateway's
/// configuration (404 `merchant_not_found` otherwise: nothing here could send to it).
fn configured_merchant(path: String, state: &AppState) -> Result<i64, ApiError> {
    state.notifying.merchant(&path).ok_or(ApiError::NotFound {
        code: "merchant_not_found",
        what: "merchant with a notification endpoint",
    })
}

/// `POST /admin/merchants/{id}/notifications/redeliver?since=&until=&cursor=&limit=`: the
/// notifications of the merchant staged in the window are sent again, in order, under their
/// `webhook-id`, at most `limit` per call; `next_cursor` goes on with the rest.
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/notifications/redeliver",
    tag = "admin",
    security(("operator_key" = ["operator"])),
    params(("merchant_id" = String, Path), RangeQuery),
    responses(
        (status = 202, body = Redelivered),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include operator (required_role)", body = ErrorBody),
        (status = 404, description = "merchant_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn redeliver_merchant(
    staff: Staff<Operator>,
    path: web::Path<String>,
    query: Result<web::Query<RangeQuery>, actix_web::Error>,
    api_pool: web::Data<ApiPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    // Read as a result, so the role is checked before the query can be refused.
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let merchant_id = configured_merchant(path.into_inner(), &state)?;
    let since = time("since", &query.since)?
        .ok_or_else(|| ApiError::InvalidQuery("since is required (RFC 3339)".into()))?;
    let until = time("until", &query.until)?.unwrap_or_else(Utc::now);
    let cursor =
        match &query.cursor {
            Some(text) => Some(text.parse::<i64>().ok().filter(|id| *id >= 0).ok_or_else(
                || ApiError::InvalidQuery("cursor: not a cursor of this list".into()),
            )?),
            None => None,
        };
    let limit = query.limit.unwrap_or(admin::REDELIVER_DEFAULT_LIMIT);
    if !(1..=admin::REDELIVER_MAX_LIMIT).contains(&limit) {
        return Err(ApiError::InvalidQuery(format!(
            "limit must be 1 to {}",
            admin::REDELIVER_MAX_LIMIT
        )));
    }
    let mut conn = api_pool.get().await?;
    let redelivered = admin::redeliver_range(
        &mut conn,
        merchant_id,
        (since, until),
        cursor,
        limit,
        &staff.audit,
    )
    .await?;
    state.notifying.wake_handle().wake();
    Ok(HttpResponse::Accepted().json(redelivered))
}

/// `POST /admin/merchants/{id}/endpoint/enable`: a disabled endpoint (410, or 5 days without
/// success) is enabled; its pending notifications come due again at `[notifications]
/// release_per_sec` and go out in order.
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/endpoint/enable",
    tag = "admin",
    security(("operator_key" = ["operator"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 200, body = Enabled),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include operator (required_role)", body = ErrorBody),
        (status = 404, description = "merchant_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn enable_endpoint(
    staff: Staff<Operator>,
    path: web::Path<String>,
    api_pool: web::Data<ApiPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = api_pool.get().await?;
    let merchant_id = state.enabled_merchant(&path, &mut conn).await?;
    let release = state.settings.notifications.release_per_sec;
    let enabled = admin::enable(&mut conn, merchant_id, release, &staff.audit).await?;
    state.notifying.wake_handle().wake();
    Ok(HttpResponse::Ok().json(enabled))
}

/// `POST /admin/merchants/{id}/endpoint/disable`: no sender attempts the endpoint until it is
/// enabled again; its pending notifications wait (at most `[notifications] disabled_keep`).
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/endpoint/disable",
    tag = "admin",
    security(("operator_key" = ["operator"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 200, body = Disabled),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include operator (required_role)", body = ErrorBody),
        (status = 404, description = "merchant_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn disable_endpoint(
    staff: Staff<Operator>,
    path: web::Path<String>,
    api_pool: web::Data<ApiPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = api_pool.get().await?;
    let merchant_id = state.endpoint_merchant(&path, &mut conn).await?;
    let disabled = admin::disable(&mut conn, merchant_id, &staff.audit).await?;
    Ok(HttpResponse::Ok().json(disabled))
}

/// The query string of a merchant's own notifications: no `merchant_id` (the token says
/// whose), and an unknown parameter is refused rather than ignored.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MerchantNotificationQuery {
    /// pending, failing (pending after a failed attempt), delivered or failed
    pub status: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// 1..=500, default 50.
    pub limit: Option<String>,
}

/// `GET /v1/notifications`: the calling merchant's notifications, newest first, keyset pages.
#[utoipa::path(
    get,
    path = "/v1/notifications",
    tag = "merchant",
    security(("bearer" = [])),
    params(MerchantNotificationQuery),
    responses(
        (status = 200, body = NotificationPage),
        (status = 400, description = "invalid_query (also: a parameter this list does not take, such as merchant_id)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn merchant_notifications(
    merchant: MerchantAuth,
    query: Result<web::Query<MerchantNotificationQuery>, actix_web::Error>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let query = NotificationQuery {
        merchant_id: None,
        status: query.status.clone(),
        cursor: query.cursor.clone(),
        limit: query.limit.clone(),
    };
    let mut filter = query.filter()?;
    filter.merchant_id = Some(merchant.user_id);
    let limit = query.limit()?;
    let mut conn = read_pool.get().await?;
    let page = admin::page(&mut conn, filter, limit).await?;
    Ok(HttpResponse::Ok().json(page.as_merchant_sees_it()))
}
