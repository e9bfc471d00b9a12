//! What every console page and action shares: who is signed in ([`Me`]), the extractor that
//! checks their session and role ([`Console`]), and how a refusal or a page is answered.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::http::StatusCode;
use actix_web::http::header::{CONTENT_TYPE, LOCATION};
use actix_web::{FromRequest, HttpRequest, HttpResponse, ResponseError, web};
use askama::Template;
use chrono::Utc;

use super::session::{self, Sessions};
use crate::access::Actor;
use crate::access::audit;
use crate::access::operator;
use crate::access::role::Role;
use crate::error::ApiError;
use crate::routes::app_data::{AdminToken, ApiPool, Needs, request_id};

/// Why a console request did not get its page.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No live session (none, expired, signed out, or its key revoked or expired): see the
    /// sign-in page.
    #[error("sign in first")]
    SignIn,
    /// Signed in, with a role too low for this page or action.
    #[error("this needs the {0} role")]
    Forbidden(Role),
    /// A form without its session's `csrf` token: not sent by a page of this session.
    #[error("the form does not belong to this session; reload the page and try again")]
    StaleForm,
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
            ConsoleError::Forbidden(_) | ConsoleError::StaleForm => StatusCode::FORBIDDEN,
            ConsoleError::Api(error) => error.status_code(),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            ConsoleError::SignIn => see_other("/console/login"),
            ConsoleError::Forbidden(role) => refusal_page(Some(*role), &self.to_string()),
            ConsoleError::StaleForm => refusal_page(None, &self.to_string()),
            ConsoleError::Api(error) => error.error_response(),
        }
    }
}

pub fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((LOCATION, to))
        .finish()
}

pub fn html(status: StatusCode, page: &impl Template) -> Result<HttpResponse, ConsoleError> {
    Ok(HttpResponse::build(status)
        .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
        .body(page.render()?))
}

#[derive(Template)]
#[template(path = "console/refused.html")]
struct RefusedPage {
    me: Option<Me>,
    required_role: Option<&'static str>,
    message: String,
}

/// The 403 page: the role a page or action needs, or why a form was refused.
fn refusal_page(required_role: Option<Role>, message: &str) -> HttpResponse {
    let page = RefusedPage {
        me: None,
        required_role: required_role.map(Role::as_str),
        message: message.to_owned(),
    };
    match page.render() {
        Ok(body) => HttpResponse::Forbidden()
            .insert_header((CONTENT_TYPE, "text/html; charset=utf-8"))
            .body(body),
        Err(error) => ApiError::Internal(error.into()).error_response(),
    }
}

/// The signed-in person, as every page shows them and decides what to offer.
#[derive(Debug, Clone)]
pub struct Me {
    pub actor: Actor,
    /// The session's form token.
    pub csrf: String,
    pub request_id: Option<String>,
}

impl Me {
    pub fn name(&self) -> &str {
        &self.actor.name
    }

    pub fn role(&self) -> &'static str {
        self.actor.role.as_str()
    }

    /// Replays (and the export), and the settlements page.
    pub fn can_replay(&self) -> bool {
        self.actor.may(Role::Finance)
    }

    /// Redelivery, refund resolution, endpoint enable and disable.
    pub fn can_operate(&self) -> bool {
        self.actor.may(Role::Operator)
    }

    /// The audit log.
    pub fn can_administer(&self) -> bool {
        self.actor.may(Role::Admin)
    }

    /// Who acts, for the audit rows of an action.
    pub fn audit(&self) -> audit::Context {
        self.actor.in_request(self.request_id.clone())
    }

    /// Refuses a form that does not carry this session's token (compared in constant time).
    pub fn check_form(&self, csrf: &str) -> Result<(), ConsoleError> {
        use subtle::ConstantTimeEq;
        if bool::from(self.csrf.as_bytes().ct_eq(csrf.as_bytes())) {
            Ok(())
        } else {
            Err(ConsoleError::StaleForm)
        }
    }
}

/// A signed-in browser whose key's role includes `R`'s: no live session (or a key revoked or
/// expired since sign-in, which also ends the session) is [`ConsoleError::SignIn`], a role too
/// low [`ConsoleError::Forbidden`]. An operator's session costs one primary-key lookup of its
/// key's row a request, on the API pool (the primary), so a revocation is seen at once.
pub struct Console<R> {
    pub me: Me,
    needs: PhantomData<R>,
}

impl<R: Needs> FromRequest for Console<R> {
    type Error = ConsoleError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ConsoleError>>>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let sessions = request.app_data::<web::Data<Sessions>>().cloned();
        let cookie = request.cookie(session::COOKIE);
        let bootstrap = request.app_data::<web::Data<AdminToken>>().cloned();
        let api_pool = request.app_data::<web::Data<ApiPool>>().cloned();
        let request_id = request_id(request);
        Box::pin(async move {
            let (Some(sessions), Some(cookie)) = (sessions, cookie) else {
                return Err(ConsoleError::SignIn);
            };
            let live = sessions
                .find(cookie.value(), Utc::now())
                .ok_or(ConsoleError::SignIn)?;
            let actor = match live.owner {
                session::Owner::Bootstrap => bootstrap
                    .filter(|token| token.0.is_some())
                    .map(|_| Actor::bootstrap()),
                session::Owner::Operator(id) => {
                    let api_pool = api_pool.ok_or_else(|| {
                        ApiError::Internal(anyhow::anyhow!("application state missing"))
                    })?;
                    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
                    operator::current(&mut conn, id, Utc::now()).await?.ok()
                }
            };
            let Some(actor) = actor else {
                // Its key was revoked or expired since sign-in: the session ends now.
                sessions.end_all_of(live.owner);
                return Err(ConsoleError::SignIn);
            };
            if !actor.may(R::ROLE) {
                return Err(ConsoleError::Forbidden(R::ROLE));
            }
            Ok(Console {
                me: Me {
                    actor,
                    csrf: live.csrf,
                    request_id,
                },
                needs: PhantomData,
            })
        })
    }
}
