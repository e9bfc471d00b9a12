use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use tracing_actix_web::RootSpan;

use super::body::read_body;
use super::respond::idempotent_response;
use super::state::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::idempotency::record::Completion;
use crate::idempotency::{self};
use crate::metrics::Metrics;
use crate::payments::ack::{ACK_STATUS, Ack, CallbackOutcome};
use crate::payments::callback::ProcessCallback;
use crate::payments::effect::Source;
use crate::providers::Providers;

/// `POST /v1/callbacks/{provider}` (op `payment.callback`): verify the raw body, then claim,
/// apply and acknowledge the event in one transaction.
#[utoipa::path(
    post,
    path = "/v1/callbacks/{provider}",
    tag = "callbacks",
    params(
        ("provider" = String, Path, description = "A configured provider name"),
        ("webhook-id" = Option<String>, Header, description = "standard-webhooks: the event id"),
        ("webhook-timestamp" = Option<String>, Header, description = "standard-webhooks: unix seconds"),
        ("webhook-signature" = Option<String>, Header, description = "standard-webhooks: v1,<base64> ..."),
        ("Stripe-Signature" = Option<String>, Header, description = "stripe: t=<unix>,v1=<hex>"),
        ("X-Timestamp" = Option<String>, Header, description = "hmac-sha256: unix seconds"),
        ("X-Signature" = Option<String>, Header, description = "hmac-sha256: sha256=<hex>"),
    ),
    request_body(content = Object, content_type = "application/json", description = "The provider's raw event (canonical or Stripe payload)"),
    responses(
        (status = 200, description = "Ack (outcome applied, held, ignored or rejected); a redelivery gets the byte-identical ack with Idempotent-Replayed: true", body = Ack),
        (status = 400, description = "invalid_payload: the signed body carries no usable event id (nothing to key it by)", body = ErrorBody),
        (status = 401, description = "invalid_signature: nothing is written", body = ErrorBody),
        (status = 404, description = "unknown_provider", body = ErrorBody),
        (status = 408, description = "request_timeout", body = ErrorBody),
        (status = 409, description = "idempotency_key_in_flight (Retry-After: 2) or out_of_order (Retry-After: 30)", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 422, description = "key_reused_with_different_body", body = ErrorBody),
        (status = 503, description = "unavailable: nothing stored, redeliver (Retry-After: 1)", body = ErrorBody),
    )
)]
pub async fn receive_callback(
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
    providers: web::Data<Providers>,
    metrics: web::Data<Metrics>,
    root_span: RootSpan,
) -> Result<HttpResponse, ApiError> {
    let provider = providers.get(&path).ok_or(ApiError::UnknownProvider)?;
    root_span.record("provider", provider.name());
    let body = read_body(&request, payload, &state.settings.server).await?;

    // Nothing is parsed or written before the signature over the raw bytes holds.
    let now = Utc::now();
    let verified = provider
        .scheme()
        .verify(request.headers(), &body, now.timestamp())
        .inspect_err(|error| tracing::warn!(%error, "callback signature refused"))?;
    metrics.observe_skew(provider.name(), verified.timestamp - now.timestamp());
    let event_id = provider
        .event_id(&verified, &body)
        .map_err(|e| ApiError::InvalidPayload(e.0))?;
    root_span.record("event_id", event_id.as_str());

    let idempotent = provider.idempotent_request(&event_id, &body, now);
    let work = ProcessCallback::new(
        Source {
            merchant_id: provider.merchant_id(),
            provider: provider.name(),
        },
        provider.read_event(&body),
        &state.capture_batcher,
        &event_id,
        &body,
    );
    let respond =
        |outcome: &CallbackOutcome| Completion::succeeded(ACK_STATUS, outcome.ack(&event_id));
    let executed = idempotency::execute(
        &state.pool,
        &state.replication,
        &idempotent,
        &work,
        &respond,
    )
    .await?;
    Ok(idempotent_response(executed, |outcome| {
        outcome.outcome.as_str()
    }))
}
