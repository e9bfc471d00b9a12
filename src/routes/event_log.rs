//! The event log's HTTP side shared by `/admin/events*` and the console: the query string
//! read into filters, one event found, and the filtered events streamed as replayable JSONL
//! (the `export` format). Takes the pool it is given; callers pass the API pool.

use crate::db::pool::PgPool;
use crate::deliveries::read::{
    self, BatchLimit, Cursor, DEFAULT_LIMIT, EventDetail, EventFilter, EventOutcome,
};
use crate::error::ApiError;
use crate::export::{self, Streamed};
use actix_web::HttpResponse;
use actix_web::http::header::CONTENT_TYPE;
use bytes::Bytes;
use chrono::{DateTime, Utc};

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
                    v.parse::<i64>().map_err(|_| {
                        ApiError::InvalidQuery("merchant_id must be an integer".into())
                    })
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

/// How many held and how many rejected events `/admin/attention` lists (the newest).
pub const ATTENTION_LIMIT: i64 = 100;

/// The event, or 404 `event_not_found`; `payment_id_of` reads a body in its provider's format.
pub async fn find_event(
    pool: &PgPool,
    provider: &str,
    event_id: &str,
    payment_id_of: impl FnOnce(&[u8]) -> Option<String>,
) -> Result<EventDetail, ApiError> {
    let mut conn = pool.get().await?;
    read::detail(&mut conn, provider, event_id, payment_id_of)
        .await?
        .ok_or(ApiError::NotFound {
            code: "event_not_found",
            what: "event",
        })
}

/// One export batch: at most this many events, and past the first one this many bytes of
/// bodies. Each batch is two short statements, well under any sane statement_timeout; memory
/// is about three batches (one being read, one in the channel, one being written).
pub const EXPORT_BATCH: BatchLimit = BatchLimit {
    rows: 1000,
    bytes: 4 * 1024 * 1024,
};

/// The JSONL response of the events `query` selects (shared with the console's link): oldest
/// first, read in keyset batches (a connection taken per batch, so a slow download holds none
/// of the API pool between batches), ending with the trailer line. A batch that fails ends
/// the stream with an error and no trailer, so the client holds a recognisably cut file.
pub async fn export_events_stream(
    query: &EventQuery,
    pool: &PgPool,
) -> Result<HttpResponse, ApiError> {
    let filter = query.filter()?;
    let pool = pool.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    actix_web::rt::spawn(async move {
        let streamed = export::by_batches(
            async |after| {
                let mut conn = pool.get().await.map_err(ApiError::from)?;
                read::export_batch(&mut conn, &filter, after, EXPORT_BATCH)
                    .await
                    .map_err(ApiError::from)
            },
            async |chunk| tx.send(Ok(Bytes::from(chunk))).await.is_ok(),
        )
        .await;
        match streamed {
            Streamed::Complete(count) => {
                tracing::info!(
                    events = count.written,
                    skipped_non_utf8 = count.skipped,
                    "event export complete"
                );
            }
            Streamed::Abandoned => tracing::info!("event export abandoned by the client"),
            Streamed::Failed(error) => {
                tracing::error!(error = %error, "event export stopped; no trailer sent");
                let _ = tx.send(Err(std::io::Error::other("export failed"))).await;
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Ok(HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "application/x-ndjson"))
        .streaming(body))
}
