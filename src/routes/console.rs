//! `/console`: the web console for finance and operators, rendered on the server from askama
//! templates (`templates/console/`, checked at compile time, HTML-escaped by default), one
//! stylesheet, no JavaScript. A person signs in with their operator key; each page and action
//! needs a role (`Console<R>`, as `Staff<R>` for `/admin/*`), and a page offers only the
//! actions its viewer's role allows, while the action itself checks again. Every response
//! carries a Content-Security-Policy that allows no inline script.

pub mod actions;
pub mod audit_page;
mod page;
mod session;
pub mod settlements_page;
pub mod sign_in;
mod view;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, CONTENT_TYPE};
use actix_web::middleware::DefaultHeaders;
use actix_web::{HttpResponse, web};
use askama::Template;
use chrono::{Duration, Utc};

pub use page::{Console, ConsoleError, Me};
use page::{html, see_other};
pub use session::Sessions;

use super::app_data::{Finance, ReadPool, Viewer};
use super::event_log::{ATTENTION_LIMIT, EventQuery, export_events_stream, find_event};
use super::state::AppState;
use crate::attention;
use crate::config::merchants::MerchantSettings;
use crate::deliveries::minutes;
use crate::deliveries::read::{self, EntryView, EventOutcome, OrderView, PaymentView};
use crate::error::ApiError;
use crate::idempotency::transmission::ReusedTransmission;
use crate::ledger;
use crate::notifications::{self, admin::NotificationView};
use crate::payments::dispute::{DisputeAttention, DisputeView};
use crate::providers::registry::Providers;
use crate::refunds::model::RefundAttention;
use view::{Chart, EventLine, filter_query, pretty_json, time};

/// No inline script or style from anywhere; only the gateway's own stylesheet.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLESHEET: &str = include_str!("../../static/console.css");

/// The headers of every console answer (the route table in `startup` wraps the `/console`
/// scope in them): no script or style from elsewhere, no framing, no sniffing, no referrer,
/// nothing cached.
pub fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add(("Content-Security-Policy", CSP))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("X-Frame-Options", "DENY"))
        .add(("Referrer-Policy", "no-referrer"))
        .add((header::CACHE_CONTROL, "no-store"))
}

/// `GET /console`: the events for a signed-in browser, else sign-in.
#[utoipa::path(
    get,
    path = "/console",
    tag = "console",
    security(("console_session" = ["viewer"])),
    responses(
        (status = 303, description = "to /console/events when signed in, else to /console/login"),
    )
)]
pub async fn home(session: Result<Console<Viewer>, ConsoleError>) -> HttpResponse {
    match session {
        Ok(_) => see_other("/console/events"),
        Err(_) => see_other("/console/login"),
    }
}

/// `?done=` after an action: which notice its page shows (only these texts, never the query's).
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    done: Option<String>,
}

impl Done {
    fn notice(&self) -> Option<&'static str> {
        match self.done.as_deref()? {
            "replayed" => Some("Replayed. The audit log has the outcome."),
            "redelivered" => Some("Redelivery queued: it goes out now, under the same webhook-id."),
            "enabled" => {
                Some("Endpoint enabled: its pending notifications go out at the release rate.")
            }
            "disabled" => Some("Endpoint disabled: nothing is sent to it until it is enabled."),
            "resolved" => Some("Refund request resolved."),
            _ => None,
        }
    }
}

#[derive(Template)]
#[template(path = "console/events.html")]
struct EventsPage {
    me: Option<Me>,
    q: EventQueryText,
    outcomes: Vec<&'static str>,
    events: Vec<EventLine>,
    export_href: String,
    first_href: String,
    next_href: Option<String>,
    paged: bool,
}

/// The filter form's values, as typed.
#[derive(Default)]
struct EventQueryText {
    provider: String,
    merchant_id: String,
    outcome: String,
    event_type: String,
    since: String,
    until: String,
    event_id: String,
    limit: String,
}

impl From<&EventQuery> for EventQueryText {
    fn from(q: &EventQuery) -> Self {
        let text = |v: &Option<String>| v.clone().unwrap_or_default();
        Self {
            provider: text(&q.provider),
            merchant_id: text(&q.merchant_id),
            outcome: text(&q.outcome),
            event_type: text(&q.event_type),
            since: text(&q.since),
            until: text(&q.until),
            event_id: text(&q.event_id),
            limit: text(&q.limit),
        }
    }
}

/// `GET /console/events`: the filtered list, newest first, keyset pages.
#[utoipa::path(
    get,
    path = "/console/events",
    tag = "console",
    security(("console_session" = ["viewer"])),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include viewer", content_type = "text/html"),
    )
)]
pub async fn events(
    console: Console<Viewer>,
    query: web::Query<EventQuery>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ConsoleError> {
    let (filter, cursor, limit) = (query.filter()?, query.cursor()?, query.limit()?);
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let page = read::list(&mut conn, &filter, cursor, limit).await?;
    drop(conn);
    let filters = filter_query(&filter);
    // The list's own links keep its filters and page size; the export takes every page.
    let limit_param = match &query.limit {
        Some(l) if !l.trim().is_empty() => format!("limit={}", view::encode(l.trim())),
        _ => String::new(),
    };
    let list_href = |cursor: Option<&str>| {
        let cursor = cursor.map(|c| format!("cursor={}", view::encode(c)));
        let params: Vec<&str> = [limit_param.as_str(), filters.as_str()]
            .into_iter()
            .chain(cursor.as_deref())
            .filter(|p| !p.is_empty())
            .collect();
        format!("/console/events?{}", params.join("&"))
    };
    html(
        StatusCode::OK,
        &EventsPage {
            me: Some(console.me),
            q: EventQueryText::from(&*query),
            outcomes: EventOutcome::ALL.iter().map(|o| o.as_str()).collect(),
            events: page.events.iter().map(EventLine::from).collect(),
            export_href: format!("/console/events.jsonl?{filters}"),
            first_href: list_href(None),
            next_href: page.next_cursor.as_deref().map(|c| list_href(Some(c))),
            paged: cursor.is_some(),
        },
    )
}

/// `GET /console/events.jsonl`: the same export as `/admin/events.jsonl`, for the console's
/// link (a browser sends its session cookie, not the admin bearer token).
#[utoipa::path(
    get,
    path = "/console/events.jsonl",
    tag = "console",
    security(("console_session" = ["finance"])),
    responses(
        (status = 200, description = "HTML page", content_type = "application/x-ndjson"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include finance", content_type = "text/html"),
    )
)]
pub async fn export(
    _console: Console<Finance>,
    query: web::Query<EventQuery>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ConsoleError> {
    Ok(export_events_stream(&query, &read_pool.0).await?)
}

struct TransferText {
    id: i64,
    kind: String,
    payment_id: String,
    dispute_id: Option<String>,
    created_at: String,
    entries: Vec<EntryView>,
}

#[derive(Template)]
#[template(path = "console/event.html")]
struct EventPage {
    me: Option<Me>,
    e: EventLine,
    ack: Option<String>,
    raw_body: String,
    transfer: Option<TransferText>,
    payment: Option<PaymentView>,
    disputes: Vec<DisputeView>,
    order: Option<OrderView>,
    /// The trace the delivery was received in, and its page in the trace viewer
    /// (`[telemetry] trace_url`) when one is configured.
    trace_id: Option<String>,
    trace_href: Option<String>,
    /// Where its replay form posts.
    replay_href: String,
    notice: Option<&'static str>,
}

/// `GET /console/events/{provider}/{event_id}`.
#[utoipa::path(
    get,
    path = "/console/events/{provider}/{event_id}",
    tag = "console",
    security(("console_session" = ["viewer"])),
    params(("provider" = String, Path), ("event_id" = String, Path)),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include viewer", content_type = "text/html"),
    )
)]
pub async fn event(
    console: Console<Viewer>,
    done: web::Query<Done>,
    path: web::Path<(String, String)>,
    read_pool: web::Data<ReadPool>,
    providers: web::Data<Providers>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let (provider, event_id) = path.into_inner();
    let detail = find_event(&read_pool.0, &provider, &event_id, |body| {
        providers.payment_id_of(&provider, body)
    })
    .await?;
    html(
        StatusCode::OK,
        &EventPage {
            me: Some(console.me),
            e: EventLine::from(&detail.event),
            ack: detail
                .ack
                .as_ref()
                .and_then(|ack| serde_json::to_string_pretty(ack).ok()),
            raw_body: pretty_json(&detail.raw_body),
            transfer: detail.transfer.map(|t| TransferText {
                id: t.transfer.id,
                kind: t.transfer.kind,
                payment_id: t.transfer.payment_id,
                dispute_id: t.transfer.dispute_id,
                created_at: time(t.transfer.created_at),
                entries: t.entries,
            }),
            payment: detail.payment,
            disputes: detail.disputes,
            order: detail.order,
            trace_href: detail.event.trace_id.as_deref().and_then(|id| {
                let link = state.settings.telemetry.as_ref()?.trace_url.as_ref()?;
                Some(link.replace("{trace_id}", id))
            }),
            trace_id: detail.event.trace_id,
            replay_href: format!(
                "/console/events/{}/{}/replay",
                view::encode(&provider),
                view::encode(&event_id)
            ),
            notice: done.notice(),
        },
    )
}

#[derive(Template)]
#[template(path = "console/attention.html")]
struct AttentionPage {
    me: Option<Me>,
    held: Vec<EventLine>,
    rejected: Vec<EventLine>,
    refund_requests: Vec<RefundAttention>,
    disputes: Vec<DisputeAttention>,
    reused_transmissions: Vec<ReusedTransmission>,
    /// Notifications refused for their endpoint's address.
    refused_addresses: Vec<NotificationLine>,
    can_operate: bool,
    csrf: String,
    notice: Option<&'static str>,
}

/// `GET /console/attention`: held and rejected events, stuck or failed refund requests, and
/// open or noted disputes, newest first.
#[utoipa::path(
    get,
    path = "/console/attention",
    tag = "console",
    security(("console_session" = ["viewer"])),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include viewer", content_type = "text/html"),
    )
)]
pub async fn attention(
    console: Console<Viewer>,
    done: web::Query<Done>,
    read_pool: web::Data<ReadPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let overdue = state.settings.refunds.pending_overdue;
    let attention = attention::gather(&mut conn, ATTENTION_LIMIT, overdue).await?;
    html(
        StatusCode::OK,
        &AttentionPage {
            held: attention.held.iter().map(EventLine::from).collect(),
            rejected: attention.rejected.iter().map(EventLine::from).collect(),
            refund_requests: attention.refund_requests,
            disputes: attention.disputes,
            reused_transmissions: attention.reused_transmissions,
            refused_addresses: attention
                .refused_addresses
                .iter()
                .map(NotificationLine::from)
                .collect(),
            can_operate: console.me.can_operate(),
            csrf: console.me.csrf.clone(),
            notice: done.notice(),
            me: Some(console.me),
        },
    )
}

#[derive(Template)]
#[template(path = "console/notifications.html")]
struct NotificationsPage {
    me: Option<Me>,
    failing: Vec<NotificationLine>,
    failed: Vec<NotificationLine>,
    disabled: Vec<EndpointLine>,
    endpoints: Vec<EndpointState>,
    can_operate: bool,
    csrf: String,
    notice: Option<&'static str>,
}

/// A configured endpoint and whether it is disabled now.
struct EndpointState {
    merchant_id: i64,
    disabled: bool,
}

/// One notification as the console's table shows it (askama escapes every field).
struct NotificationLine {
    id: i64,
    webhook_id: String,
    merchant_id: i64,
    kind: String,
    order_id: String,
    reference: String,
    attempts: i32,
    last_error: String,
    last_attempt_at: String,
    next_attempt_at: String,
}

impl From<&NotificationView> for NotificationLine {
    fn from(n: &NotificationView) -> Self {
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        Self {
            id: n.id,
            webhook_id: n.webhook_id.clone(),
            merchant_id: n.merchant_id,
            kind: n.kind.clone(),
            order_id: n.order_id.map(|id| id.to_string()).unwrap_or_default(),
            reference: text(&n.payload["data"]["reference"]),
            attempts: n.attempts,
            last_error: n.last_error.clone().unwrap_or_default(),
            last_attempt_at: n.last_attempt_at.map(time).unwrap_or_default(),
            next_attempt_at: n.next_attempt_at.map(time).unwrap_or_default(),
        }
    }
}

struct EndpointLine {
    merchant_id: i64,
    /// `file` (the configuration file's) or the id of an endpoint made by API.
    endpoint_id: String,
    disabled_at: String,
    reason: String,
    last_success_at: String,
    last_error: String,
    /// Pending notifications dropped beyond what a disabled endpoint keeps.
    dropped: i64,
}

/// How many failing and how many failed notifications the page lists (the newest).
const NOTIFICATIONS_LIMIT: i64 = 100;

/// `GET /console/notifications`: notifications whose last attempt failed, those that failed
/// for good, and the disabled endpoints (enable and redeliver: docs/notifications.md).
#[utoipa::path(
    get,
    path = "/console/notifications",
    tag = "console",
    security(("console_session" = ["viewer"])),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include viewer", content_type = "text/html"),
    )
)]
pub async fn notifications(
    console: Console<Viewer>,
    done: web::Query<Done>,
    read_pool: web::Data<ReadPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let found = notifications::admin::attention(&mut conn, NOTIFICATIONS_LIMIT).await?;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let endpoints = MerchantSettings::endpoints(&state.settings.merchants)
        .map(|(merchant_id, _)| EndpointState {
            merchant_id,
            disabled: found.disabled.iter().any(|e| e.merchant_id == merchant_id),
        })
        .collect();
    html(
        StatusCode::OK,
        &NotificationsPage {
            endpoints,
            can_operate: console.me.can_operate(),
            csrf: console.me.csrf.clone(),
            notice: done.notice(),
            me: Some(console.me),
            failing: found.failing.iter().map(NotificationLine::from).collect(),
            failed: found.failed.iter().map(NotificationLine::from).collect(),
            disabled: found
                .disabled
                .iter()
                .map(|e| EndpointLine {
                    merchant_id: e.merchant_id,
                    endpoint_id: e.endpoint_id.clone(),
                    disabled_at: e.disabled_at.map(time).unwrap_or_default(),
                    reason: text(&e.disabled_reason),
                    last_success_at: e.last_success_at.map(time).unwrap_or_default(),
                    last_error: text(&e.last_error),
                    dropped: e.dropped,
                })
                .collect(),
        },
    )
}

struct MerchantBalances {
    merchant_id: i64,
    balances: Vec<ledger::Balance>,
}

#[derive(Template)]
#[template(path = "console/balances.html")]
struct BalancesPage {
    me: Option<Me>,
    chart: Chart,
    merchants: Vec<MerchantBalances>,
}

/// `GET /console/balances`: each configured merchant's balances, and callbacks per minute by
/// outcome over the last hour.
#[utoipa::path(
    get,
    path = "/console/balances",
    tag = "console",
    security(("console_session" = ["viewer"])),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include viewer", content_type = "text/html"),
    )
)]
pub async fn balances(
    console: Console<Viewer>,
    read_pool: web::Data<ReadPool>,
    providers: web::Data<Providers>,
) -> Result<HttpResponse, ConsoleError> {
    let now = Utc::now();
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let counts = minutes::per_minute(&mut conn, now - Duration::hours(1)).await?;
    let mut merchants = Vec::new();
    for merchant_id in providers.merchant_ids() {
        merchants.push(MerchantBalances {
            merchant_id,
            balances: ledger::checkpoint::balances(&mut conn, merchant_id).await?,
        });
    }
    html(
        StatusCode::OK,
        &BalancesPage {
            me: Some(console.me),
            chart: Chart::of(&counts, now),
            merchants,
        },
    )
}

/// `GET /console/static/console.css`: the one stylesheet.
pub async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/css; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(STYLESHEET)
}
