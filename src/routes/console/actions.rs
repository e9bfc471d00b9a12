//! The console's actions: each one a form posted from a page, checked for the role it needs
//! (`Console<R>`, before the form is read) and for its session's form token, then the same
//! domain call as its `/admin/*` route, with its audit row in its own transaction; then back to
//! the page with a notice.

use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use tracing_actix_web::RootSpan;

use super::page::{Console, ConsoleError, Me, see_other};
use super::view;
use crate::error::ApiError;
use crate::notifications::admin;
use crate::payments::callback::{self, Worker};
use crate::providers::registry::Providers;
use crate::refunds::create::{self, Refunds, Resolution};
use crate::routes::app_data::{ApiPool, Finance, Operator};
use crate::routes::state::AppState;
use crate::telemetry;

/// A form that carries nothing but its session's token.
#[derive(serde::Deserialize)]
struct TokenOnly {
    csrf: String,
}

/// The form of `T`, read only now that the role is known to allow the action (an extractor
/// beside `Console<R>` would read it concurrently with the role check, and could answer a
/// malformed form before a too-low role), then checked for the session's token.
async fn form<T: serde::de::DeserializeOwned + 'static>(
    request: &HttpRequest,
    payload: web::Payload,
    me: &Me,
    csrf: impl Fn(&T) -> &str,
) -> Result<T, ConsoleError> {
    let form = web::Form::<T>::from_request(request, &mut payload.into_inner())
        .await
        .map_err(|e| ApiError::InvalidQuery(format!("invalid form: {e}")))?
        .into_inner();
    me.check_form(csrf(&form))?;
    Ok(form)
}

#[utoipa::path(
    post,
    path = "/console/events/{provider}/{event_id}/replay",
    tag = "console",
    security(("console_session" = ["finance"])),
    params(("provider" = String, Path), ("event_id" = String, Path)),
    responses(
        (status = 303, description = "replayed: back to the event's page"),
        (status = 403, description = "forbidden: the key's role does not include finance, or the form is not this session's", content_type = "text/html"),
    )
)]
#[expect(
    clippy::too_many_arguments,
    reason = "an actix handler: each argument is an extractor"
)]
pub async fn replay(
    console: Console<Finance>,
    request: HttpRequest,
    payload: web::Payload,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
    providers: web::Data<Providers>,
    root_span: RootSpan,
) -> Result<HttpResponse, ConsoleError> {
    form::<TokenOnly>(&request, payload, &console.me, |f| &f.csrf).await?;
    state.serving()?;
    let (provider, event_id) = path.into_inner();
    let page = format!(
        "/console/events/{}/{}",
        view::encode(&provider),
        view::encode(&event_id)
    );
    let provider = providers.get(&provider).ok_or(ApiError::UnknownProvider)?;
    root_span.record("provider", provider.name());
    root_span.record("event_id", event_id.as_str());
    let worker = Worker {
        pool: &state.pool,
        replication: &state.replication,
        batcher: &state.capture_batcher,
        notifying: &state.notifying,
    };
    let trace_id = telemetry::trace_id(&root_span);
    callback::replay(
        worker,
        &api_pool,
        provider.as_ref(),
        &event_id,
        &console.me.audit(),
        trace_id.as_deref(),
    )
    .await
    .map_err(ApiError::from)?
    .ok_or(ApiError::NotFound {
        code: "event_not_found",
        what: "event",
    })?;
    Ok(see_other(&format!("{page}?done=replayed")))
}

#[utoipa::path(
    post,
    path = "/console/notifications/{id}/redeliver",
    tag = "console",
    security(("console_session" = ["operator"])),
    params(("id" = String, Path)),
    responses(
        (status = 303, description = "redelivered: back to the notifications page"),
        (status = 403, description = "forbidden: the key's role does not include operator, or the form is not this session's", content_type = "text/html"),
        (status = 404, description = "notification_not_found"),
    )
)]
pub async fn redeliver(
    console: Console<Operator>,
    request: HttpRequest,
    payload: web::Payload,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ConsoleError> {
    form::<TokenOnly>(&request, payload, &console.me, |f| &f.csrf).await?;
    let not_found = || ApiError::NotFound {
        code: "notification_not_found",
        what: "notification",
    };
    let id = path.parse::<i64>().map_err(|_| not_found())?;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    admin::redeliver(&mut conn, id, None, &console.me.audit())
        .await?
        .ok_or_else(not_found)?;
    state.notifying.wake_handle().wake();
    Ok(see_other("/console/notifications?done=redelivered"))
}

#[utoipa::path(
    post,
    path = "/console/merchants/{merchant_id}/endpoint/enable",
    tag = "console",
    security(("console_session" = ["operator"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 303, description = "enabled: back to the notifications page"),
        (status = 403, description = "forbidden: the key's role does not include operator, or the form is not this session's", content_type = "text/html"),
        (status = 404, description = "merchant_not_found"),
    )
)]
pub async fn enable_endpoint(
    console: Console<Operator>,
    request: HttpRequest,
    payload: web::Payload,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ConsoleError> {
    form::<TokenOnly>(&request, payload, &console.me, |f| &f.csrf).await?;
    let release = state.settings.notifications.release_per_sec;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let merchant_id = state.enabled_merchant(&path, &mut conn).await?;
    admin::enable(&mut conn, merchant_id, release, &console.me.audit()).await?;
    state.notifying.wake_handle().wake();
    Ok(see_other("/console/notifications?done=enabled"))
}

#[utoipa::path(
    post,
    path = "/console/merchants/{merchant_id}/endpoint/disable",
    tag = "console",
    security(("console_session" = ["operator"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 303, description = "disabled: back to the notifications page"),
        (status = 403, description = "forbidden: the key's role does not include operator, or the form is not this session's", content_type = "text/html"),
        (status = 404, description = "merchant_not_found"),
    )
)]
pub async fn disable_endpoint(
    console: Console<Operator>,
    request: HttpRequest,
    payload: web::Payload,
    path: web::Path<String>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ConsoleError> {
    form::<TokenOnly>(&request, payload, &console.me, |f| &f.csrf).await?;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let merchant_id = state.endpoint_merchant(&path, &mut conn).await?;
    admin::disable(&mut conn, merchant_id, &console.me.audit()).await?;
    Ok(see_other("/console/notifications?done=disabled"))
}

/// The resolution form of a refund request on the attention page.
#[derive(serde::Deserialize)]
struct ResolveForm {
    csrf: String,
    /// `accepted` or `declined`.
    outcome: String,
    provider_refund_id: Option<String>,
    message: Option<String>,
}

#[utoipa::path(
    post,
    path = "/console/refund-requests/{id}/resolve",
    tag = "console",
    security(("console_session" = ["operator"])),
    params(("id" = String, Path)),
    responses(
        (status = 303, description = "resolved: back to the attention page"),
        (status = 403, description = "forbidden: the key's role does not include operator, or the form is not this session's", content_type = "text/html"),
        (status = 404, description = "refund_request_not_found"),
        (status = 409, description = "refund_not_resolvable"),
        (status = 422, description = "invalid_resolution"),
    )
)]
pub async fn resolve_refund_request(
    console: Console<Operator>,
    request: HttpRequest,
    payload: web::Payload,
    path: web::Path<String>,
    api_pool: web::Data<ApiPool>,
    refunds: web::Data<Refunds>,
) -> Result<HttpResponse, ConsoleError> {
    let form = form::<ResolveForm>(&request, payload, &console.me, |f| &f.csrf).await?;
    if !refunds.notifying.loaded() {
        return Err(ConsoleError::Api(ApiError::Starting));
    }
    let request_id = path.parse::<i64>().map_err(|_| ApiError::NotFound {
        code: "refund_request_not_found",
        what: "refund request",
    })?;
    let resolution = match form.outcome.as_str() {
        "accepted" => Resolution::accepted(
            form.provider_refund_id
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        "declined" => Resolution::declined(form.message.unwrap_or_default().trim().to_owned()),
        _ => {
            return Err(
                ApiError::InvalidResolution("outcome must be accepted or declined".into()).into(),
            );
        }
    }
    .map_err(ApiError::InvalidResolution)?;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    create::resolve(
        &mut conn,
        &refunds,
        request_id,
        resolution,
        &console.me.audit(),
    )
    .await
    .map_err(ApiError::from)?;
    Ok(see_other("/console/attention?done=resolved"))
}
