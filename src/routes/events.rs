//! The event log for admins: `GET /admin/events` (filters, keyset pages), one event with what
//! the gateway did with it, what needs attention, and the filtered events as replayable JSONL
//! (the `export` format), streamed. Read through the API pool; nothing here writes.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpResponse, web};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::TryStreamExt;

use super::extract::{AdminAuth, ApiPool};
use crate::deliveries::read::{
    self, Attention, Cursor, DEFAULT_LIMIT, EventDetail, EventFilter, EventOutcome, EventPage,
};
use crate::error::{ApiError, ErrorBody};
use crate::export::ReplayLine;
use crate::providers::Providers;

/// The query string of the event list (and of the console's list and export link).
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventQuery {
    pub provider: Option<String>,
    pub merchant_id: Option<String>,
    /// applied, held, ignored or rejected
    pub outcome: Option<String>,
    /// The body's `type` as the provider sent it.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub event_type: Option<String>,
    /// RFC 3339: received at or after.
    pub since: Option<String>,
    /// RFC 3339: received before.
    pub until: Option<String>,
    pub event_id: Option<String>,
    /// 1..=200, default 50.
    pub limit: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
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

impl EventQuery {
    /// The filters; an empty parameter is no filter.
    pub fn filter(&self) -> Result<EventFilter, ApiError> {
        Ok(EventFilter {
            provider: present(&self.provider).map(str::to_owned),
            merchant_id: present(&self.merchant_id)
                .map(|v| {
                    v.parse::<i64>()
                        .map_err(|_| ApiError::InvalidQuery("merchant_id must be an integer".into()))
                })
                .transpose()?,
            outcome: present(&self.outcome)
                .map(|v| {
                    EventOutcome::parse(v).ok_or_else(|| {
                        ApiError::InvalidQuery(
                            "outcome must be applied, held, ignored or rejected".into(),
                        )
                    })
                })
                .transpose()?,
            event_type: present(&self.event_type).map(str::to_owned),
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            event_id: present(&self.event_id).map(str::to_owned),
        })
    }

    pub fn cursor(&self) -> Result<Option<Cursor>, ApiError> {
        present(&self.cursor)
            .map(|v| {
                Cursor::decode(v).ok_or_else(|| ApiError::InvalidQuery("unknown cursor".into()))
            })
            .transpose()
    }

    pub fn limit(&self) -> Result<i64, ApiError> {
        present(&self.limit)
            .map(|v| {
                v.parse::<i64>()
                    .ok()
                    .filter(|n| (1..=read::MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidQuery(format!("limit must be 1 to {}", read::MAX_LIMIT))
                    })
            })
            .transpose()
            .map(|limit| limit.unwrap_or(DEFAULT_LIMIT))
    }
}

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
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let (filter, cursor, limit) = (query.filter()?, query.cursor()?, query.limit()?);
    let mut conn = api_pool.get().await?;
    let page = read::list(&mut conn, &filter, cursor, limit).await?;
    Ok(HttpResponse::Ok().json(page))
}

/// The event, or 404 `event_not_found`.
pub async fn find_event(
    api_pool: &ApiPool,
    providers: &Providers,
    provider: &str,
    event_id: &str,
) -> Result<EventDetail, ApiError> {
    let parser = providers.get(provider);
    let payment_id_of = |body: &[u8]| match parser?.parse_event(body) {
        crate::payments::event::Parsed::Event(event) => Some(event.payment_id().to_owned()),
        _ => None,
    };
    let mut conn = api_pool.get().await?;
    read::detail(&mut conn, provider, event_id, payment_id_of)
        .await?
        .ok_or(ApiError::NotFound {
            code: "event_not_found",
            what: "event",
        })
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
    api_pool: web::Data<ApiPool>,
    providers: web::Data<Providers>,
) -> Result<HttpResponse, ApiError> {
    let (provider, event_id) = path.into_inner();
    let detail = find_event(&api_pool, &providers, &provider, &event_id).await?;
    Ok(HttpResponse::Ok().json(detail))
}

/// How many held and how many rejected events `/admin/attention` lists (the newest).
pub const ATTENTION_LIMIT: i64 = 100;

/// `GET /admin/attention`: the newest held and rejected events.
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
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let mut conn = api_pool.get().await?;
    let attention = read::attention(&mut conn, ATTENTION_LIMIT).await?;
    Ok(HttpResponse::Ok().json(attention))
}

/// `GET /admin/events.jsonl`: every event matching the filters (paging ignored), oldest first,
/// one replay line each, streamed with bounded memory (a bounded channel from the reader).
#[utoipa::path(
    get,
    path = "/admin/events.jsonl",
    tag = "admin",
    security(("admin" = [])),
    params(EventQuery),
    responses(
        (status = 200, description = "JSONL: {\"provider\",\"id\",\"body\"} a line", content_type = "application/x-ndjson"),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
    )
)]
pub async fn export_events(
    _admin: AdminAuth,
    query: web::Query<EventQuery>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    export_events_stream(&query, &api_pool).await
}

/// The JSONL response of the events `query` selects (shared with the console's link).
pub async fn export_events_stream(
    query: &EventQuery,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    let filter = query.filter()?;
    let mut conn = api_pool.get_owned().await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    actix_web::rt::spawn(async move {
        let result = async {
            let mut rows = read::stream_bodies(&mut conn, &filter).await?;
            while let Some((provider, id, body)) = rows.try_next().await? {
                let Ok(body) = std::str::from_utf8(&body) else {
                    continue;
                };
                let mut line = serde_json::to_vec(&ReplayLine {
                    provider: &provider,
                    id: &id,
                    body,
                })
                .unwrap_or_default();
                line.push(b'\n');
                if tx.send(Ok(Bytes::from(line))).await.is_err() {
                    break; // the client went away
                }
            }
            Ok::<_, diesel::result::Error>(())
        }
        .await;
        if let Err(error) = result {
            tracing::error!(%error, "event export stopped");
            let _ = tx.send(Err(std::io::Error::other("export failed"))).await;
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "application/x-ndjson"))
        .streaming(body))
}
