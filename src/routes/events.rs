//! The event log for admins: `GET /admin/events` (filters, keyset pages), one event with what
//! the gateway did with it, what needs attention, and the filtered events as replayable JSONL
//! (the `export` format), streamed; and for merchants their own events (`/v1/events`). Read
//! through the read pool; nothing here writes.

use actix_web::{HttpResponse, web};

use super::app_data::{Finance, ReadPool, Viewer};
use super::event_log::{ATTENTION_LIMIT, EventQuery, export_events_stream, find_event};
use super::extract::{MerchantAuth, Staff};
use super::state::AppState;
use crate::attention::{self, Attention};
use crate::deliveries::read::{
    self, EventDetail, EventPage, MerchantEventDetail, MerchantEventPage,
};
use crate::error::{ApiError, ErrorBody};
use crate::providers::registry::Providers;

/// `GET /admin/events`: newest first, keyset pages.
#[utoipa::path(
    get,
    path = "/admin/events",
    tag = "admin",
    security(("operator_key" = ["viewer"])),
    params(EventQuery),
    responses(
        (status = 200, body = EventPage),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include viewer (required_role)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn list_events(
    _staff: Staff<Viewer>,
    query: web::Query<EventQuery>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    let (filter, cursor, limit) = (query.filter()?, query.cursor()?, query.limit()?);
    let mut conn = read_pool.get().await?;
    let page = read::list(&mut conn, &filter, cursor, limit).await?;
    Ok(HttpResponse::Ok().json(page))
}

/// `GET /admin/events/{provider}/{event_id}`.
#[utoipa::path(
    get,
    path = "/admin/events/{provider}/{event_id}",
    tag = "admin",
    security(("operator_key" = ["viewer"])),
    params(("provider" = String, Path), ("event_id" = String, Path)),
    responses(
        (status = 200, body = EventDetail),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include viewer (required_role)", body = ErrorBody),
        (status = 404, description = "event_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn event(
    _staff: Staff<Viewer>,
    path: web::Path<(String, String)>,
    read_pool: web::Data<ReadPool>,
    providers: web::Data<Providers>,
) -> Result<HttpResponse, ApiError> {
    let (provider, event_id) = path.into_inner();
    let detail = find_event(&read_pool.0, &provider, &event_id, |body| {
        providers.payment_id_of(&provider, body)
    })
    .await?;
    Ok(HttpResponse::Ok().json(detail))
}

/// `GET /admin/attention`: the newest held and rejected events, and refund requests to look at.
#[utoipa::path(
    get,
    path = "/admin/attention",
    tag = "admin",
    security(("operator_key" = ["viewer"])),
    responses(
        (status = 200, body = Attention),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include viewer (required_role)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn attention(
    _staff: Staff<Viewer>,
    read_pool: web::Data<ReadPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = read_pool.get().await?;
    let overdue = state.settings.refunds.pending_overdue;
    let attention = attention::gather(&mut conn, ATTENTION_LIMIT, overdue).await?;
    Ok(HttpResponse::Ok().json(attention))
}

/// `GET /admin/events.jsonl`: every event matching the filters (paging ignored), oldest first,
/// one replay line each, read in keyset batches and streamed with bounded memory, then the
/// trailer line `{"trailer":{"events":N,"skipped_non_utf8":M}}` (absent when it failed).
#[utoipa::path(
    get,
    path = "/admin/events.jsonl",
    tag = "admin",
    security(("operator_key" = ["finance"])),
    params(EventQuery),
    responses(
        (status = 200, description = "JSONL: {\"provider\",\"id\",\"body\"} a line, then {\"trailer\":{\"events\":N,\"skipped_non_utf8\":M}}", content_type = "application/x-ndjson"),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
    (status = 403, description = "forbidden: the key's role does not include finance (required_role)", body = ErrorBody),
    )
)]
pub async fn export_events(
    _staff: Staff<Finance>,
    query: web::Query<EventQuery>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    export_events_stream(&query, &read_pool.0).await
}

/// The query string of a merchant's own event list: no `merchant_id` (the token says whose),
/// and an unknown parameter is refused rather than ignored.
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MerchantEventQuery {
    pub provider: Option<String>,
    /// applied, held, ignored or rejected
    pub outcome: Option<String>,
    /// RFC 3339: received at or after.
    pub since: Option<String>,
    /// RFC 3339: received before.
    pub until: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// 1..=200, default 50.
    pub limit: Option<String>,
}

impl From<&MerchantEventQuery> for EventQuery {
    fn from(q: &MerchantEventQuery) -> Self {
        EventQuery {
            provider: q.provider.clone(),
            outcome: q.outcome.clone(),
            since: q.since.clone(),
            until: q.until.clone(),
            cursor: q.cursor.clone(),
            limit: q.limit.clone(),
            ..EventQuery::default()
        }
    }
}

/// `GET /v1/events`: the calling merchant's own callbacks, newest first, keyset pages.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "merchant",
    security(("bearer" = [])),
    params(MerchantEventQuery),
    responses(
        (status = 200, body = MerchantEventPage),
        (status = 400, description = "invalid_query (also: a parameter this list does not take, such as merchant_id)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn merchant_events(
    merchant: MerchantAuth,
    query: Result<web::Query<MerchantEventQuery>, actix_web::Error>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let query = EventQuery::from(&*query);
    let mut filter = query.filter()?;
    filter.merchant_id = Some(merchant.user_id);
    let (cursor, limit) = (query.cursor()?, query.limit()?);
    let mut conn = read_pool.get().await?;
    let page = read::list(&mut conn, &filter, cursor, limit).await?;
    Ok(HttpResponse::Ok().json(MerchantEventPage::from(page)))
}

/// `GET /v1/events/{provider}/{event_id}`: one of the calling merchant's events with its ack
/// and ledger transfer; another merchant's event is 404, as one that does not exist.
#[utoipa::path(
    get,
    path = "/v1/events/{provider}/{event_id}",
    tag = "merchant",
    security(("bearer" = [])),
    params(("provider" = String, Path), ("event_id" = String, Path)),
    responses(
        (status = 200, body = MerchantEventDetail),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "event_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn merchant_event(
    merchant: MerchantAuth,
    path: web::Path<(String, String)>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    let (provider, event_id) = path.into_inner();
    let mut conn = read_pool.get().await?;
    let detail = read::merchant_detail(&mut conn, merchant.user_id, &provider, &event_id)
        .await?
        .ok_or(ApiError::NotFound {
            code: "event_not_found",
            what: "event",
        })?;
    Ok(HttpResponse::Ok().json(detail))
}
