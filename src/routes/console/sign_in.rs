//! Signing in and out of the console: an operator key (or the `[admin] token`) checked as a
//! bearer key is, a server-side session in a cookie, and an audit row for each sign-in,
//! refused ones at most [`crate::access::sign_in::ROWS_PER_WINDOW`] a minute and one count.
//! The form carries a token its cookie must match (no sign-in from another site's form), and
//! past `[limits] failed_sign_ins_per_minute` refusals an address gets 429 before its key is
//! looked up.

use actix_web::http::StatusCode;
use actix_web::http::header::LOCATION;
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use chrono::Utc;
use serde_json::json;

use super::page::{ConsoleError, Me, html};
use super::session::{self, Sessions};
use crate::access::audit::{self, Action, Entry};
use crate::access::operator;
use crate::access::sign_in::{Admit, FailedSignIns, WINDOW};
use crate::error::ApiError;
use crate::limits::Limits;
use crate::routes::app_data::{AdminToken, ApiPool, request_id, source_address};
use crate::routes::extract::actor_of_key;

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginPage {
    me: Option<Me>,
    refused: bool,
    /// The token the form posts back; its cookie carries the same.
    csrf: String,
}

/// The sign-in page with a fresh form token, and its cookie.
fn login_form(sessions: &Sessions, https: bool) -> Result<HttpResponse, ConsoleError> {
    let (csrf, cookie) = sessions.login_form(https);
    let mut response = html(
        StatusCode::OK,
        &LoginPage {
            me: None,
            refused: false,
            csrf,
        },
    )?;
    response
        .add_cookie(&cookie)
        .map_err(|e| ApiError::Internal(e.into()))?;
    Ok(response)
}

pub async fn login_page(
    request: HttpRequest,
    sessions: web::Data<Sessions>,
) -> Result<HttpResponse, ConsoleError> {
    login_form(&sessions, over_https(&request))
}

#[derive(serde::Deserialize)]
pub struct LoginForm {
    token: Option<String>,
    csrf: Option<String>,
}

/// Whether the form's token is its cookie's (constant time): a form from another site has no
/// such cookie to send.
fn form_is_ours(request: &HttpRequest, form: &LoginForm) -> bool {
    use subtle::ConstantTimeEq;
    match (request.cookie(session::LOGIN_COOKIE), form.csrf.as_deref()) {
        (Some(cookie), Some(csrf)) if !csrf.is_empty() => {
            cookie.value().as_bytes().ct_eq(csrf.as_bytes()).into()
        }
        _ => false,
    }
}

/// Whether the browser reached us over HTTPS: the gateway's own TLS, or what the TLS-terminating
/// proxy says in `Forwarded: proto=https` or `X-Forwarded-Proto: https` (actix reads both). A
/// client that lies only makes its own cookie `Secure`, which it then cannot send over HTTP.
pub(crate) fn over_https(request: &HttpRequest) -> bool {
    request
        .connection_info()
        .scheme()
        .eq_ignore_ascii_case("https")
}

/// `POST /console/login`: an operator key (or the `[admin] token`), checked as `Staff` checks a
/// bearer key. A missing, unknown, revoked and expired key take the same path and get the same
/// 401 page. Each sign-in is an audit row; failed ones at most [`crate::access::sign_in`]'s
/// limit a minute, the rest counted in one row.
pub async fn login(
    request: HttpRequest,
    form: web::Form<LoginForm>,
    bootstrap: web::Data<AdminToken>,
    api_pool: web::Data<ApiPool>,
    sessions: web::Data<Sessions>,
    failed: web::Data<FailedSignIns>,
    limits: web::Data<Limits>,
) -> Result<HttpResponse, ConsoleError> {
    if !form_is_ours(&request, &form) {
        tracing::warn!("console sign-in refused: the form is not the sign-in page's");
        return Err(ConsoleError::StaleForm);
    }
    let source = source_address(&request, &limits);
    let key = form
        .token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let closed = || match source {
        Some(source) => limits.sign_in(source).map_err(ApiError::from),
        None => Ok(()),
    };
    let found = match key {
        Some(key) => actor_of_key(key, bootstrap.0.as_ref(), &api_pool, closed).await?,
        None => {
            closed()?;
            Err(operator::Denied::Unknown)
        }
    };
    let peer = request.peer_addr().map(|a| a.ip().to_string());
    let request_id = request_id(&request);
    let actor = match found {
        Ok(actor) => actor,
        Err(denied) => {
            tracing::warn!(denied = denied.as_str(), "console sign-in refused");
            sign_in_refused(&api_pool, &failed, denied, peer, request_id).await?;
            if let Some(source) = source {
                limits.sign_in_refused(source).map_err(ApiError::from)?;
            }
            // The same form again, with the token its cookie still carries: a refusal sets no
            // cookie at all.
            return html(
                StatusCode::UNAUTHORIZED,
                &LoginPage {
                    me: None,
                    refused: true,
                    csrf: form.csrf.clone().unwrap_or_default(),
                },
            );
        }
    };
    let owner = match actor.operator_id {
        Some(id) => session::Owner::Operator(id),
        None => session::Owner::Bootstrap,
    };
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let context = actor.in_request(request_id);
    let entry = Entry::new(Action::SignIn, None, "succeeded").with_changes(json!({"peer": peer}));
    audit::record(&mut conn, &context, entry).await?;
    Ok(HttpResponse::SeeOther()
        .cookie(sessions.start(Utc::now(), over_https(&request), owner))
        .insert_header((LOCATION, "/console/events"))
        .finish())
}

/// The audit row of a refused sign-in, or its count in the minute's summary row once the
/// minute has its share of rows (a flood of guesses then writes one row a minute).
async fn sign_in_refused(
    api_pool: &ApiPool,
    failed: &web::Data<FailedSignIns>,
    denied: operator::Denied,
    peer: Option<String>,
    request_id: Option<String>,
) -> Result<(), ConsoleError> {
    match failed.admit(std::time::Instant::now()) {
        Admit::Row => {
            let mut conn = api_pool.get().await.map_err(ApiError::from)?;
            let changes = json!({"reason": denied.as_str(), "peer": peer});
            audit::record_refused_sign_in(&mut conn, request_id.as_deref(), changes).await?;
        }
        Admit::Counted {
            schedule_summary: Some(after),
        } => {
            let (api_pool, failed) = (api_pool.clone(), failed.clone());
            actix_web::rt::spawn(async move {
                tokio::time::sleep(after).await;
                let counted = failed.take_counted();
                let changes = json!({"suppressed": counted, "window_secs": WINDOW.as_secs()});
                let written = match api_pool.get().await {
                    Ok(mut conn) => audit::record_refused_sign_in(&mut conn, None, changes)
                        .await
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                if let Err(error) = written {
                    tracing::error!(%error, counted, "the summary row of refused sign-ins was not written");
                }
            });
        }
        Admit::Counted {
            schedule_summary: None,
        } => {}
    }
    Ok(())
}

/// `POST /console/logout`: ends the session, back to sign-in.
pub async fn logout(request: HttpRequest, sessions: web::Data<Sessions>) -> HttpResponse {
    let cookie = request.cookie(session::COOKIE);
    HttpResponse::SeeOther()
        .cookie(sessions.end(cookie.as_ref().map(|c| c.value()), over_https(&request)))
        .insert_header((LOCATION, "/console/login"))
        .finish()
}
