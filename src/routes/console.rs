//! `/console`: the read-only web console for finance and operators, rendered on the server
//! from askama templates (`templates/console/`, checked at compile time, HTML-escaped by
//! default), one stylesheet, no JavaScript. It reads through the API pool, like `/admin/*`.
//! Every response carries a Content-Security-Policy that allows no inline script.

mod session;
mod view;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, CONTENT_TYPE, LOCATION};
use actix_web::middleware::DefaultHeaders;
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, web};
use askama::Template;
use chrono::{Duration, Utc};

pub use session::Sessions;

use super::event_log::{ATTENTION_LIMIT, EventQuery, export_events_stream, find_event};
use super::extract::{AdminToken, ReadPool};
use super::state::AppState;
use crate::attention;
use crate::auth;
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

/// The console's routes, under one scope that adds the security headers.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/console")
            .wrap(
                DefaultHeaders::new()
                    .add(("Content-Security-Policy", CSP))
                    .add(("X-Content-Type-Options", "nosniff"))
                    .add(("X-Frame-Options", "DENY"))
                    .add(("Referrer-Policy", "no-referrer"))
                    .add((header::CACHE_CONTROL, "no-store")),
            )
            .route("", web::get().to(home))
            .route("/login", web::get().to(login_page))
            .route("/login", web::post().to(login))
            .route("/logout", web::post().to(logout))
            .route("/events", web::get().to(events))
            .route("/events.jsonl", web::get().to(export))
            .route("/events/{provider}/{event_id}", web::get().to(event))
            .route("/attention", web::get().to(attention))
            .route("/notifications", web::get().to(notifications))
            .route("/balances", web::get().to(balances))
            .route("/static/console.css", web::get().to(stylesheet)),
    );
}

/// Why a console request did not get its page.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No live session: see the sign-in page.
    #[error("sign in first")]
    SignIn,
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<diesel::result::Error> for ConsoleError {
    fn from(error: diesel::result::Error) -> Self {
        ConsoleError::Api(error.into())
    }
}

impl From<askama::Error> for ConsoleError {
    fn from(error: askama::Error) -> Self {
        ConsoleError::Api(ApiError::Internal(error.into()))
    }
}

impl ResponseError for ConsoleError {
    fn status_code(&self) -> StatusCode {
        match self {
            ConsoleError::SignIn => StatusCode::SEE_OTHER,
            ConsoleError::Api(error) => error.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            ConsoleError::SignIn => see_other("/console/login"),
            ConsoleError::Api(error) => error.error_response(),
        }
    }
}

fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish()
}

fn html(status: StatusCode, page: &impl Template) -> Result<HttpResponse, ConsoleError> {
    Ok(HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .body(page.render()?))
}

/// A request from a signed-in browser; any other gets [`ConsoleError::SignIn`].
pub struct Session;

impl FromRequest for Session {
    type Error = ConsoleError;
    type Future = std::future::Ready<Result<Self, ConsoleError>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let live = request
            .app_data::<web::Data<Sessions>>()
            .zip(request.cookie(session::COOKIE))
            .is_some_and(|(sessions, cookie)| sessions.is_live(cookie.value(), Utc::now()));
        std::future::ready(if live {
            Ok(Session)
        } else {
            Err(ConsoleError::SignIn)
        })
    }
}

/// `GET /console`: the events for a signed-in browser, else sign-in.
async fn home(session: Result<Session, ConsoleError>) -> HttpResponse {
    match session {
        Ok(Session) => see_other("/console/events"),
        Err(_) => see_other("/console/login"),
    }
}

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginPage {
    signed_in: bool,
    refused: bool,
}

async fn login_page() -> Result<HttpResponse, ConsoleError> {
    html(
        StatusCode::OK,
        &LoginPage {
            signed_in: false,
            refused: false,
        },
    )
}

#[derive(serde::Deserialize)]
struct LoginForm {
    token: Option<String>,
}

/// Whether the browser reached us over HTTPS: the gateway's own TLS, or what the TLS-terminating
/// proxy says in `Forwarded: proto=https` or `X-Forwarded-Proto: https` (actix reads both). A
/// client that lies only makes its own cookie `Secure`, which it then cannot send over HTTP.
fn over_https(request: &HttpRequest) -> bool {
    request
        .connection_info()
        .scheme()
        .eq_ignore_ascii_case("https")
}

/// `POST /console/login`: the admin token, compared as `AdminAuth` compares it (a missing and
/// a wrong token take the same path and get the same 401 page).
async fn login(
    request: HttpRequest,
    form: web::Form<LoginForm>,
    expected: web::Data<AdminToken>,
    sessions: web::Data<Sessions>,
) -> Result<HttpResponse, ConsoleError> {
    let given = form
        .token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    if !auth::is_admin(given, expected.0.as_ref()) {
        return html(
            StatusCode::UNAUTHORIZED,
            &LoginPage {
                signed_in: false,
                refused: true,
            },
        );
    }
    Ok(HttpResponse::SeeOther()
        .cookie(sessions.start(Utc::now(), over_https(&request)))
        .insert_header((LOCATION, "/console/events"))
        .finish())
}

/// `POST /console/logout`: ends the session, back to sign-in.
async fn logout(request: HttpRequest, sessions: web::Data<Sessions>) -> HttpResponse {
    let cookie = request.cookie(session::COOKIE);
    HttpResponse::SeeOther()
        .cookie(sessions.end(cookie.as_ref().map(|c| c.value()), over_https(&request)))
        .insert_header((LOCATION, "/console/login"))
        .finish()
}

#[derive(Template)]
#[template(path = "console/events.html")]
struct EventsPage {
    signed_in: bool,
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
async fn events(
    _session: Session,
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
            signed_in: true,
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
async fn export(
    _session: Session,
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
    signed_in: bool,
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
}

/// `GET /console/events/{provider}/{event_id}`.
async fn event(
    _session: Session,
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
            signed_in: true,
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
        },
    )
}

#[derive(Template)]
#[template(path = "console/attention.html")]
struct AttentionPage {
    signed_in: bool,
    held: Vec<EventLine>,
    rejected: Vec<EventLine>,
    refund_requests: Vec<RefundAttention>,
    disputes: Vec<DisputeAttention>,
    reused_transmissions: Vec<ReusedTransmission>,
}

/// `GET /console/attention`: held and rejected events, stuck or failed refund requests, and
/// open or noted disputes, newest first.
async fn attention(
    _session: Session,
    read_pool: web::Data<ReadPool>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let overdue = state.settings.refunds.pending_overdue;
    let attention = attention::gather(&mut conn, ATTENTION_LIMIT, overdue).await?;
    html(
        StatusCode::OK,
        &AttentionPage {
            signed_in: true,
            held: attention.held.iter().map(EventLine::from).collect(),
            rejected: attention.rejected.iter().map(EventLine::from).collect(),
            refund_requests: attention.refund_requests,
            disputes: attention.disputes,
            reused_transmissions: attention.reused_transmissions,
        },
    )
}

#[derive(Template)]
#[template(path = "console/notifications.html")]
struct NotificationsPage {
    signed_in: bool,
    failing: Vec<NotificationLine>,
    failed: Vec<NotificationLine>,
    disabled: Vec<EndpointLine>,
}

/// One notification as the console's table shows it (askama escapes every field).
struct NotificationLine {
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
async fn notifications(
    _session: Session,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ConsoleError> {
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let found = notifications::admin::attention(&mut conn, NOTIFICATIONS_LIMIT).await?;
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    html(
        StatusCode::OK,
        &NotificationsPage {
            signed_in: true,
            failing: found.failing.iter().map(NotificationLine::from).collect(),
            failed: found.failed.iter().map(NotificationLine::from).collect(),
            disabled: found
                .disabled
                .iter()
                .map(|e| EndpointLine {
                    merchant_id: e.merchant_id,
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
    signed_in: bool,
    chart: Chart,
    merchants: Vec<MerchantBalances>,
}

/// `GET /console/balances`: each configured merchant's balances, and callbacks per minute by
/// outcome over the last hour.
async fn balances(
    _session: Session,
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
            signed_in: true,
            chart: Chart::of(&counts, now),
            merchants,
        },
    )
}

async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/css; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(STYLESHEET)
}
