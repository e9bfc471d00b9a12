//! The event log for admins: `GET /admin/events` (filters, keyset pages), one event with what
//! the gateway did with it, what needs attention, and the filtered events as replayable JSONL
//! (the `export` format), streamed. Read through the API pool; nothing here writes.

use actix_web::{HttpResponse, web};

use super::event_log::{ATTENTION_LIMIT, EventQuery, export_events_stream, find_event};
use super::extract::{AdminAuth, ReadPool};
use super::state::AppState;
use crate::attention::{self, Attention};
use crate::deliveries::read::{self, EventDetail, EventPage};
use crate::error::{ApiError, ErrorBody};
use crate::providers::registry::Providers;

/// `GET /admin/events`: newest first, keyset pages.
#[utoipa::path(
    get,
    path = "/admin/events",
    tag = "admin",
    security(("admin" = [])),
    params(EventQuery),
    responses(
        (status = 200, body = EventPage),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn list_events(
    _admin: AdminAuth,
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
    security(("admin" = [])),
    params(("provider" = String, Path), ("event_id" = String, Path)),
    responses(
        (status = 200, body = EventDetail),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "event_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn event(
    _admin: AdminAuth,
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
    security(("admin" = [])),
    responses(
        (status = 200, body = Attention),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn attention(
    _admin: AdminAuth,
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
    security(("admin" = [])),
    params(EventQuery),
    responses(
        (status = 200, description = "JSONL: {\"provider\",\"id\",\"body\"} a line, then {\"trailer\":{\"events\":N,\"skipped_non_utf8\":M}}", content_type = "application/x-ndjson"),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
    )
)]
pub async fn export_events(
    _admin: AdminAuth,
    query: web::Query<EventQuery>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    export_events_stream(&query, &read_pool.0).await
}
