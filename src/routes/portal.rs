//! The merchant portal (docs/portal.md): `POST /v1/portal-sessions` (the merchant's token) or
//! `POST /admin/merchants/{id}/portal-sessions` (an operator) makes a one-time link; opening it
//! (a button, so a link preview cannot spend it) makes a session whose cookie is scoped to
//! `/portal`. The pages show the merchant its own endpoints, notifications and events, and
//! nothing of another merchant's: every query is the merchant's, by the session's merchant id.
//! Each change is the same domain call as the API's, with its audit row (actor
//! `merchant:<id>`), checked for the session's form token. Server-rendered, no script, the
//! console's security headers; readable on a phone.

use std::future::Future;
use std::pin::Pin;

use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, CONTENT_TYPE, LOCATION};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, web};
use askama::Template;
use chrono::{DateTime, Utc};

use super::app_data::{ApiPool, Operator, ReadPool, request_id, source_address};
use super::console::sign_in::over_https;
use super::extract::{MerchantAuth, Staff};
use super::state::AppState;
use crate::access::audit::{self, Action, Entry};
use crate::deliveries::read::{self as events, EventFilter, MerchantEvent};
use crate::error::{ApiError, ErrorBody};
use crate::notifications::admin::{self as notifications, ListFilter, NotificationView};
use crate::notifications::endpoints::{
    self, By, EVENT_TYPES, EndpointError, EndpointView, Given, WithSecret,
};
use crate::notifications::model::{self, StatusFilter};
use crate::portal::sessions::{self, COOKIE};

const STYLESHEET: &str = include_str!("../../static/portal.css");
/// The most notifications and events a page lists.
const PAGE: i64 = 50;

/// Why a portal request did not get its page.
#[derive(Debug, thiserror::Error)]
pub enum PortalError {
    /// No live session: none, expired, or signed out.
    #[error("this portal session has ended; ask for a new link")]
    Ended,
    /// A form without its session's `csrf` token: not sent by a page of this session.
    #[error("the form does not belong to this session; reload the page and try again")]
    StaleForm,
    #[error("not found")]
    NotFound,
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<diesel::result::Error> for PortalError {
    fn from(error: diesel::result::Error) -> Self {
        PortalError::Api(error.into())
    }
}

impl From<askama::Error> for PortalError {
    fn from(error: askama::Error) -> Self {
        PortalError::Api(ApiError::Internal(error.into()))
    }
}

#[derive(Template)]
#[template(path = "portal/message.html")]
struct MessagePage {
    session: Option<Session>,
    title: &'static str,
    message: String,
}

impl ResponseError for PortalError {
    fn status_code(&self) -> StatusCode {
        match self {
            PortalError::Ended => StatusCode::UNAUTHORIZED,
            PortalError::StaleForm => StatusCode::FORBIDDEN,
            PortalError::NotFound => StatusCode::NOT_FOUND,
            PortalError::Api(error) => error.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        let title = match self {
            PortalError::Ended => "Session ended",
            PortalError::StaleForm => "Form refused",
            PortalError::NotFound => "Not found",
            PortalError::Api(error) => return error.error_response(),
        };
        message(self.status_code(), title, &self.to_string())
    }
}

fn message(status: StatusCode, title: &'static str, text: &str) -> HttpResponse {
    let page = MessagePage {
        session: None,
        title,
        message: text.to_owned(),
    };
    match page.render() {
        Ok(body) => HttpResponse::build(status)
            .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
            .body(body),
        Err(error) => ApiError::Internal(error.into()).error_response(),
    }
}

fn html(status: StatusCode, page: &impl Template) -> Result<HttpResponse, PortalError> {
    Ok(HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .body(page.render()?))
}

fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish()
}

/// The merchant a live portal session is for (one primary-key lookup a request, on the API
/// pool, so signing out ends it at once).
#[derive(Debug, Clone)]
pub struct Session {
    pub merchant_id: i64,
    /// What its forms carry.
    pub csrf: String,
    /// Who asked for its link.
    created_by: String,
    request_id: Option<String>,
}

impl Session {
    /// Who acts, for the audit rows: the merchant, and the operator who opened its portal if
    /// one did.
    fn audit(&self) -> audit::Context {
        audit::Context::portal(self.merchant_id, &self.created_by, self.request_id.clone())
    }

    /// Refuses a form that does not carry this session's token (constant time).
    fn check(&self, form: &Form) -> Result<(), PortalError> {
        use subtle::ConstantTimeEq;
        let given = form.one("csrf").unwrap_or_default();
        if bool::from(self.csrf.as_bytes().ct_eq(given.as_bytes())) {
            Ok(())
        } else {
            Err(PortalError::StaleForm)
        }
    }
}

impl FromRequest for Session {
    type Error = PortalError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, PortalError>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let cookie = request.cookie(COOKIE);
        let api_pool = request.app_data::<web::Data<ApiPool>>().cloned();
        let guesses = Guesses::of(request);
        let request_id = request_id(request);
        Box::pin(async move {
            let (Some(cookie), Some(api_pool)) = (cookie, api_pool) else {
                return Err(PortalError::Ended);
            };
            guesses.before()?;
            let mut conn = api_pool.get().await.map_err(ApiError::from)?;
            let Some(live) = sessions::find(&mut conn, cookie.value()).await? else {
                guesses.refused()?;
                return Err(PortalError::Ended);
            };
            Ok(Session {
                merchant_id: live.merchant_id,
                csrf: live.csrf,
                created_by: live.created_by,
                request_id,
            })
        })
    }
}

/// A portal session cookie or link token, like a bearer key, is a secret that can be guessed:
/// each source address gets the same `[limits] unknown_keys_per_minute` of wrong ones (429
/// with Retry-After past it), checked before the database is asked.
struct Guesses {
    limits: Option<web::Data<crate::limits::Limits>>,
    source: Option<std::net::IpAddr>,
}

impl Guesses {
    fn of(request: &HttpRequest) -> Self {
        let limits = request
            .app_data::<web::Data<crate::limits::Limits>>()
            .cloned();
        let source = limits
            .as_ref()
            .and_then(|limits| source_address(request, limits));
        Self { limits, source }
    }

    fn before(&self) -> Result<(), ApiError> {
        match (&self.limits, self.source) {
            (Some(limits), Some(source)) => Ok(limits.key_lookup(source)?),
            _ => Ok(()),
        }
    }

    fn refused(&self) -> Result<(), ApiError> {
        match (&self.limits, self.source) {
            (Some(limits), Some(source)) => Ok(limits.key_refused(source)?),
            _ => Ok(()),
        }
    }
}

/// A posted form's fields, in order; a name may repeat (the filter's checkboxes).
struct Form(Vec<(String, String)>);

impl Form {
    async fn read(request: &HttpRequest, payload: web::Payload) -> Result<Self, PortalError> {
        let fields =
            web::Form::<Vec<(String, String)>>::from_request(request, &mut payload.into_inner())
                .await
                .map_err(|e| ApiError::InvalidQuery(format!("invalid form: {e}")))?
                .into_inner();
        Ok(Form(fields))
    }

    fn one(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The endpoint's fields as the form gives them: an empty rate is no limit, a rate that
    /// is not a number is out of range.
    fn endpoint(&self) -> Given {
        let rate = self.one("rate_limit_per_sec").map(str::trim).unwrap_or("");
        Given {
            url: self.one("url").map(|u| u.trim().to_owned()),
            description: self.one("description").map(str::to_owned),
            filter_types: Some(self.all("filter_types")),
            rate_limit_per_sec: Some(if rate.is_empty() {
                None
            } else {
                Some(rate.parse::<i64>().unwrap_or(0))
            }),
            disabled: None,
        }
    }
}

// The links.

/// A one-time link to the portal.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct PortalLink {
    /// `[portal] public_url` + `path` when it is set; else the path alone.
    pub url: String,
    /// `/portal/open/<token>`: opened once, before `expires_at`.
    pub path: String,
    #[schema(value_type = String)]
    pub expires_at: DateTime<Utc>,
}

async fn make_link(
    merchant_id: i64,
    context: &audit::Context,
    state: &AppState,
    api_pool: &ApiPool,
) -> Result<HttpResponse, ApiError> {
    // Each link is a row and an audit row nobody may delete: a merchant's are charged to its
    // hourly budget of endpoint changes, as the portal's own changes are.
    state.limits.endpoint_change(merchant_id)?;
    let mut conn = api_pool.get().await?;
    let link = sessions::create_link(
        &mut conn,
        merchant_id,
        &context.actor,
        state.settings.portal.link_minutes,
    )
    .await?;
    let entry = Entry::new(
        Action::PortalLink,
        Some(format!("merchant:{merchant_id}")),
        "created",
    )
    .with_changes(serde_json::json!({"expires_at": link.expires_at}));
    audit::record(&mut conn, context, entry).await?;
    let path = format!("/portal/open/{}", link.token);
    let url = match &state.settings.portal.public_url {
        Some(base) => format!("{base}{path}"),
        None => path.clone(),
    };
    Ok(HttpResponse::Created()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(PortalLink {
            url,
            path,
            expires_at: link.expires_at,
        }))
}

/// `POST /v1/portal-sessions`: a one-time link to the calling merchant's portal.
#[utoipa::path(
    post,
    path = "/v1/portal-sessions",
    tag = "merchant",
    security(("bearer" = [])),
    responses(
        (status = 201, body = PortalLink),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 429, description = "rate_limited: past [limits] endpoint_changes_per_hour for this merchant (Retry-After)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn merchant_link(
    merchant: MerchantAuth,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    make_link(merchant.user_id, &merchant.audit(), &state, &api_pool).await
}

/// `POST /admin/merchants/{merchant_id}/portal-sessions`: a one-time link to that merchant's
/// portal, for an operator to hand over.
#[utoipa::path(
    post,
    path = "/admin/merchants/{merchant_id}/portal-sessions",
    tag = "admin",
    security(("operator_key" = ["operator"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 201, body = PortalLink),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include operator (required_role)", body = ErrorBody),
        (status = 404, description = "merchant_not_found: no merchant with this id holds an API token", body = ErrorBody),
    )
)]
pub async fn admin_link(
    staff: Staff<Operator>,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let merchant_id = path
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or(ApiError::NotFound {
            code: "merchant_not_found",
            what: "merchant",
        })?;
    let mut conn = api_pool.get().await?;
    if !sessions::known_merchant(&mut conn, merchant_id).await? {
        return Err(ApiError::NotFound {
            code: "merchant_not_found",
            what: "merchant",
        });
    }
    drop(conn);
    make_link(merchant_id, &staff.audit, &state, &api_pool).await
}

#[derive(Template)]
#[template(path = "portal/open.html")]
struct OpenPage {
    session: Option<Session>,
    token: String,
}

/// `GET /portal/open/{token}`: a button that opens the link. Looking at the page spends nothing,
/// so a mail scanner or a chat preview that fetches the link leaves it to its merchant.
pub async fn open_page(path: web::Path<String>) -> Result<HttpResponse, PortalError> {
    html(
        StatusCode::OK,
        &OpenPage {
            session: None,
            token: path.into_inner(),
        },
    )
}

/// `POST /portal/open`: spends the link (once, before it expires) and starts the session.
pub async fn open(
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    if cross_site(&request) {
        return Err(PortalError::StaleForm);
    }
    let guesses = Guesses::of(&request);
    guesses.before()?;
    let form = Form::read(&request, payload).await?;
    let token = form.one("token").unwrap_or_default();
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let Some(opened) = sessions::open_link(&mut conn, token).await? else {
        guesses.refused()?;
        return Ok(message(
            StatusCode::NOT_FOUND,
            "Link not valid",
            "This link was used already, has expired, or never existed. Ask for a new one.",
        ));
    };
    let context =
        audit::Context::portal(opened.merchant_id, &opened.created_by, request_id(&request));
    let entry = Entry::new(
        Action::PortalOpen,
        Some(format!("merchant:{}", opened.merchant_id)),
        "opened",
    );
    audit::record(&mut conn, &context, entry).await?;
    let cookie = cookie(
        opened.token,
        CookieDuration::minutes(sessions::SESSION_MINUTES),
        secure(&state, &request),
    );
    Ok(HttpResponse::SeeOther()
        .insert_header((LOCATION, "/portal"))
        .cookie(cookie)
        .finish())
}

/// Whether a form was posted from another site: its browser says so (`Sec-Fetch-Site`), or its
/// `Origin` names another host than the request's. The link's button has no session token to
/// carry yet, so this is what keeps another site from opening its own merchant's portal in the
/// visitor's browser (the visitor would then act in the attacker's portal).
fn cross_site(request: &HttpRequest) -> bool {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    if let Some(site) = header("sec-fetch-site") {
        return !matches!(site.as_str(), "same-origin" | "none");
    }
    match (header("origin"), header("host")) {
        (Some(origin), Some(host)) => reqwest::Url::parse(&origin).ok().is_none_or(|url| {
            let origin_host = match url.port() {
                Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
                None => url.host_str().unwrap_or_default().to_owned(),
            };
            !origin_host.eq_ignore_ascii_case(&host)
        }),
        _ => false,
    }
}

/// Whether the session cookie is `Secure`: as the console's (`[console] secure_cookie`; by
/// default under the gateway's own TLS, or when the proxy says the request was HTTPS).
fn secure(state: &AppState, request: &HttpRequest) -> bool {
    state
        .settings
        .console
        .secure_cookie
        .applies(over_https(request))
}

/// The session cookie: HttpOnly, SameSite=Strict, scoped to `/portal`, Secure as [`secure`].
fn cookie(value: String, max_age: CookieDuration, https: bool) -> Cookie<'static> {
    Cookie::build(COOKIE, value)
        .path("/portal")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(https)
        .max_age(max_age)
        .finish()
}

/// `POST /portal/logout`: ends the session.
pub async fn logout(
    session: Session,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    session.check(&Form::read(&request, payload).await?)?;
    if let Some(cookie) = request.cookie(COOKIE) {
        let mut conn = api_pool.get().await.map_err(ApiError::from)?;
        sessions::end(&mut conn, cookie.value()).await?;
    }
    let mut page = message(
        StatusCode::OK,
        "Signed out",
        "This portal session has ended.",
    );
    page.add_cookie(&cookie(
        String::new(),
        CookieDuration::ZERO,
        secure(&state, &request),
    ))
    .map_err(|e| ApiError::Internal(e.into()))?;
    Ok(page)
}

// The endpoints.

/// A filter checkbox as a form shows it.
pub struct TypeChoice {
    pub name: &'static str,
    pub checked: bool,
}

/// What an endpoint form shows: the values given (or stored) and the error, if any.
#[derive(Default)]
pub struct EndpointForm {
    pub url: String,
    pub description: String,
    pub rate: String,
    pub types: Vec<String>,
    pub error: Option<String>,
}

impl EndpointForm {
    fn of(view: &EndpointView) -> Self {
        Self {
            url: view.url.clone(),
            description: view.description.clone(),
            rate: view
                .rate_limit_per_sec
                .map(|r| r.to_string())
                .unwrap_or_default(),
            types: view.filter_types.clone(),
            error: None,
        }
    }

    fn given(form: &Form, error: String) -> Self {
        Self {
            url: form.one("url").unwrap_or_default().to_owned(),
            description: form.one("description").unwrap_or_default().to_owned(),
            rate: form
                .one("rate_limit_per_sec")
                .unwrap_or_default()
                .to_owned(),
            types: form.all("filter_types"),
            error: Some(error),
        }
    }

    pub fn choices(&self) -> Vec<TypeChoice> {
        EVENT_TYPES
            .iter()
            .map(|name| TypeChoice {
                name,
                checked: self.types.iter().any(|t| t == name),
            })
            .collect()
    }
}

#[derive(Template)]
#[template(path = "portal/endpoints.html")]
struct EndpointsPage {
    session: Option<Session>,
    endpoints: Vec<EndpointView>,
    form: EndpointForm,
    notice: Option<&'static str>,
}

/// `?done=` after an action: which notice its page shows (only these texts).
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    done: Option<String>,
}

fn notice(done: &Done) -> Option<&'static str> {
    match done.done.as_deref()? {
        "tested" => Some("A ping notification is on its way to this endpoint."),
        "changed" => Some("Saved."),
        "disabled" => Some("Disabled: its notifications wait until it is enabled."),
        "enabled" => Some("Enabled: its waiting notifications go out now."),
        "redelivered" => Some("It is sent again now, with the same webhook-id."),
        _ => None,
    }
}

/// `GET /portal`: the merchant's endpoints, and a form for a new one.
pub async fn home(
    session: Session,
    done: web::Query<Done>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let endpoints = endpoints::list(&mut conn, session.merchant_id).await?;
    html(
        StatusCode::OK,
        &EndpointsPage {
            session: Some(session),
            endpoints,
            form: EndpointForm::default(),
            notice: notice(&done),
        },
    )
}

#[derive(Template)]
#[template(path = "portal/secret.html")]
struct SecretPage {
    session: Option<Session>,
    created: WithSecret,
    made: bool,
}

/// The message of a refused endpoint change, as its form shows it.
fn refusal(error: EndpointError) -> Result<String, PortalError> {
    match error {
        EndpointError::Database(error) => Err(error.into()),
        EndpointError::NotFound => Err(PortalError::NotFound),
        other => {
            let api = ApiError::from(other);
            Ok(format!("{} ({})", api, api.code()))
        }
    }
}

/// `POST /portal/endpoints`: a new endpoint; its secret is shown on the answer, this once.
pub async fn create(
    session: Session,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    let form = Form::read(&request, payload).await?;
    session.check(&form)?;
    state
        .limits
        .endpoint_change(session.merchant_id)
        .map_err(ApiError::from)?;
    let settings = &state.settings;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let made = match endpoints::check(settings, session.merchant_id, form.endpoint())
        .and_then(endpoints::Change::into_fields)
    {
        Ok(fields) => {
            endpoints::create(
                &mut conn,
                settings.secrets.key.as_ref(),
                (session.merchant_id, By::Merchant),
                fields,
                settings.notifications.endpoints_per_merchant,
                &session.audit(),
            )
            .await
        }
        Err(invalid) => Err(invalid.into()),
    };
    match made {
        Ok(created) => {
            state.notifying.endpoints_changed();
            html(
                StatusCode::CREATED,
                &SecretPage {
                    session: Some(session),
                    created,
                    made: true,
                },
            )
        }
        Err(error) => {
            let why = refusal(error)?;
            let status = if why.contains("(too_many_endpoints)")
                || why.contains("(endpoint_disabled_by_operator)")
            {
                StatusCode::CONFLICT
            } else {
                StatusCode::BAD_REQUEST
            };
            let endpoints = endpoints::list(&mut conn, session.merchant_id).await?;
            html(
                status,
                &EndpointsPage {
                    session: Some(session),
                    endpoints,
                    form: EndpointForm::given(&form, why),
                    notice: None,
                },
            )
        }
    }
}

#[derive(Template)]
#[template(path = "portal/endpoint.html")]
struct EndpointPage {
    session: Option<Session>,
    endpoint: EndpointView,
    form: EndpointForm,
    notice: Option<&'static str>,
}

async fn own_endpoint(
    conn: &mut diesel_async::AsyncPgConnection,
    session: &Session,
    id: &str,
) -> Result<EndpointView, PortalError> {
    endpoints::find(conn, session.merchant_id, id)
        .await?
        .ok_or(PortalError::NotFound)
}

/// `GET /portal/endpoints/{id}`: one endpoint, its form, and its actions.
pub async fn endpoint(
    session: Session,
    path: web::Path<String>,
    done: web::Query<Done>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let endpoint = own_endpoint(&mut conn, &session, &path).await?;
    html(
        StatusCode::OK,
        &EndpointPage {
            form: EndpointForm::of(&endpoint),
            session: Some(session),
            endpoint,
            notice: notice(&done),
        },
    )
}

/// `POST /portal/endpoints/{id}`: its URL, description, filter and rate.
pub async fn update(
    session: Session,
    path: web::Path<String>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    let form = Form::read(&request, payload).await?;
    session.check(&form)?;
    state
        .limits
        .endpoint_change(session.merchant_id)
        .map_err(ApiError::from)?;
    let settings = &state.settings;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let endpoint = own_endpoint(&mut conn, &session, &path).await?;
    let changed = match endpoints::check(settings, session.merchant_id, form.endpoint()) {
        Ok(change) => {
            endpoints::update(
                &mut conn,
                session.merchant_id,
                &endpoint.id,
                change,
                (By::Merchant, settings.notifications.release_per_sec),
                &session.audit(),
            )
            .await
        }
        Err(invalid) => Err(invalid.into()),
    };
    match changed {
        Ok(_) => {
            state.notifying.endpoints_changed();
            Ok(see_other(&format!(
                "/portal/endpoints/{}?done=changed",
                endpoint.id
            )))
        }
        Err(error) => {
            let why = refusal(error)?;
            html(
                StatusCode::BAD_REQUEST,
                &EndpointPage {
                    session: Some(session),
                    endpoint,
                    form: EndpointForm::given(&form, why),
                    notice: None,
                },
            )
        }
    }
}

/// The endpoint actions without fields.
#[derive(Debug, Clone, Copy)]
pub enum EndpointAction {
    Rotate,
    Test,
    Disable,
    Enable,
}

/// `POST /portal/endpoints/{id}/{rotate,test,disable,enable}`.
pub async fn act(
    session: Session,
    path: web::Path<(String, String)>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    let (id, action) = path.into_inner();
    let action = match action.as_str() {
        "rotate" => EndpointAction::Rotate,
        "test" => EndpointAction::Test,
        "disable" => EndpointAction::Disable,
        "enable" => EndpointAction::Enable,
        _ => return Err(PortalError::NotFound),
    };
    session.check(&Form::read(&request, payload).await?)?;
    state
        .limits
        .endpoint_change(session.merchant_id)
        .map_err(ApiError::from)?;
    let settings = &state.settings;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let endpoint = own_endpoint(&mut conn, &session, &id).await?;
    let back = |done: &str| see_other(&format!("/portal/endpoints/{}?done={done}", endpoint.id));
    let outcome = match action {
        EndpointAction::Rotate => {
            let rotated = endpoints::rotate(
                &mut conn,
                settings.secrets.key.as_ref(),
                (session.merchant_id, &endpoint.id, By::Merchant),
                settings.notifications.secret_overlap,
                &session.audit(),
            )
            .await;
            match rotated {
                Ok(created) => {
                    state.notifying.endpoints_changed();
                    return html(
                        StatusCode::OK,
                        &SecretPage {
                            session: Some(session),
                            created,
                            made: false,
                        },
                    );
                }
                Err(error) => Err(error),
            }
        }
        EndpointAction::Test => endpoints::ping(
            &mut conn,
            session.merchant_id,
            &endpoint.id,
            &session.audit(),
        )
        .await
        .map(|_| {
            state.notifying.wake_handle().wake();
            back("tested")
        }),
        EndpointAction::Disable | EndpointAction::Enable => {
            let disabled = matches!(action, EndpointAction::Disable);
            let change = endpoints::Change {
                disabled: Some(disabled),
                ..endpoints::Change::default()
            };
            endpoints::update(
                &mut conn,
                session.merchant_id,
                &endpoint.id,
                change,
                (By::Merchant, settings.notifications.release_per_sec),
                &session.audit(),
            )
            .await
            .map(|_| {
                state.notifying.endpoints_changed();
                state.notifying.wake_handle().wake();
                back(if disabled { "disabled" } else { "enabled" })
            })
        }
    };
    match outcome {
        Ok(answer) => Ok(answer),
        Err(error) => {
            let why = refusal(error)?;
            html(
                StatusCode::CONFLICT,
                &EndpointPage {
                    form: EndpointForm {
                        error: Some(why),
                        ..EndpointForm::of(&endpoint)
                    },
                    session: Some(session),
                    endpoint,
                    notice: None,
                },
            )
        }
    }
}

// The notifications.

#[derive(Template)]
#[template(path = "portal/notifications.html")]
struct NotificationsPage {
    session: Option<Session>,
    notifications: Vec<NotificationView>,
    status: String,
    next_cursor: Option<String>,
}

/// The list's query string.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ListQuery {
    status: Option<String>,
    cursor: Option<String>,
}

/// `GET /portal/notifications`: the merchant's notifications, newest first, by status.
pub async fn notifications_page(
    session: Session,
    query: web::Query<ListQuery>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, PortalError> {
    let status_text = query.status.clone().unwrap_or_default();
    let status = match status_text.as_str() {
        "" => None,
        text => Some(StatusFilter::parse(text).ok_or(PortalError::NotFound)?),
    };
    let before = match query.cursor.as_deref() {
        None | Some("") => None,
        Some(text) => Some(text.parse::<i64>().map_err(|_| PortalError::NotFound)?),
    };
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let filter = ListFilter {
        merchant_id: Some(session.merchant_id),
        status,
        before,
    };
    let page = notifications::page(&mut conn, filter, PAGE)
        .await?
        .as_merchant_sees_it();
    html(
        StatusCode::OK,
        &NotificationsPage {
            session: Some(session),
            notifications: page.notifications,
            status: status_text,
            next_cursor: page.next_cursor,
        },
    )
}

#[derive(Template)]
#[template(path = "portal/notification.html")]
struct NotificationPage {
    session: Option<Session>,
    notification: NotificationView,
    attempts: Vec<AttemptLine>,
    body: String,
    notice: Option<&'static str>,
}

/// One attempt as a notification's page lists it.
pub struct AttemptLine {
    pub attempt: i32,
    pub at: DateTime<Utc>,
    pub delivered: bool,
    pub status_code: Option<i32>,
    pub error: Option<String>,
}

/// The most attempts a notification's page lists.
const ATTEMPTS_SHOWN: i64 = 50;

/// `GET /portal/notifications/{id}`: one notification, its attempts, its body, its next retry.
pub async fn notification(
    session: Session,
    path: web::Path<i64>,
    done: web::Query<Done>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, PortalError> {
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let row = model::find(&mut conn, *path)
        .await?
        .filter(|n| n.merchant_id == session.merchant_id)
        .ok_or(PortalError::NotFound)?;
    let notification = NotificationView::from(&row).as_merchant_sees_it();
    // The bytes every attempt sends (and signs), as they go out.
    let body = String::from_utf8_lossy(&crate::notifications::body::render(&row)).into_owned();
    // Its failed attempts, and on top its success, which is the row's own.
    let mut attempts: Vec<AttemptLine> = Vec::new();
    if let (Some(at), true) = (row.delivered_at, row.status == "delivered") {
        attempts.push(AttemptLine {
            attempt: row.attempts,
            at,
            delivered: true,
            status_code: row.last_status,
            error: None,
        });
    }
    attempts.extend(
        model::failed_attempts(&mut conn, row.id, ATTEMPTS_SHOWN)
            .await?
            .into_iter()
            .map(|failed| AttemptLine {
                attempt: failed.attempt,
                at: failed.finished_at,
                delivered: false,
                status_code: failed.status_code,
                error: failed
                    .error
                    .map(|e| NotificationView::error_as_merchant_sees_it(&e)),
            }),
    );
    html(
        StatusCode::OK,
        &NotificationPage {
            session: Some(session),
            notification,
            attempts,
            body,
            notice: notice(&done),
        },
    )
}

/// `POST /portal/notifications/{id}/redeliver`: sent again now, same `webhook-id`.
pub async fn redeliver(
    session: Session,
    path: web::Path<i64>,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, PortalError> {
    session.check(&Form::read(&request, payload).await?)?;
    state
        .limits
        .endpoint_change(session.merchant_id)
        .map_err(ApiError::from)?;
    let id = path.into_inner();
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    notifications::redeliver(&mut conn, id, Some(session.merchant_id), &session.audit())
        .await?
        .ok_or(PortalError::NotFound)?;
    state.notifying.wake_handle().wake();
    Ok(see_other(&format!(
        "/portal/notifications/{id}?done=redelivered"
    )))
}

// The events.

#[derive(Template)]
#[template(path = "portal/events.html")]
struct EventsPage {
    session: Option<Session>,
    events: Vec<MerchantEvent>,
}

/// `GET /portal/events`: the merchant's most recent callbacks and what each did.
pub async fn events_page(
    session: Session,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, PortalError> {
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let filter = EventFilter {
        merchant_id: Some(session.merchant_id),
        ..EventFilter::default()
    };
    let page = events::list(&mut conn, &filter, None, PAGE).await?;
    html(
        StatusCode::OK,
        &EventsPage {
            session: Some(session),
            events: page.events.into_iter().map(MerchantEvent::from).collect(),
        },
    )
}

/// `GET /portal/static/portal.css`: the portal's one stylesheet.
pub async fn stylesheet() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((CONTENT_TYPE, "text/css; charset=utf-8"))
        .insert_header((header::CACHE_CONTROL, "public, max-age=3600"))
        .body(STYLESHEET)
}
