use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use tracing_actix_web::RootSpan;

use super::{idempotent_response, read_body};
use crate::error::{ApiError, ErrorBody};
use std::sync::OnceLock;

use crate::idempotency;
use crate::metrics::Metrics;
use crate::payments::ProcessCallback;
use crate::startup::AppState;

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
        (status = 200, description = "Ack (outcome applied, ignored or rejected); a redelivery gets the byte-identical ack with Idempotent-Replayed: true", body = crate::payments::Ack),
        (status = 400, description = "invalid_payload", body = ErrorBody),
        (status = 401, description = "invalid_signature: nothing is written", body = ErrorBody),
        (status = 404, description = "unknown_provider", body = ErrorBody),
        (status = 408, description = "request_timeout", body = ErrorBody),
        (status = 409, description = "idempotency_key_in_flight (Retry-After: 2) or out_of_order (Retry-After: 30)", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 422, description = "key_reused_with_different_body", body = ErrorBody),
        (status = 503, description = "unavailable: nothing stored, redeliver", body = ErrorBody),
    )
)]
pub async fn receive_callback(
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
    metrics: web::Data<Metrics>,
    root_span: RootSpan,
) -> Result<HttpResponse, ApiError> {
    let provider = state
        .providers
        .get(&path)
        .ok_or(ApiError::UnknownProvider)?;
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
    let work = ProcessCallback {
        provider: &provider,
        batcher: &state.capture_batcher,
        event_id: &event_id,
        body: &body,
        outcome: OnceLock::new(),
    };
    let executed = idempotency::execute(&state.pool, &idempotent, &work).await?;
    // A replay's label is set by idempotent_response; a first one says how the event ended.
    let first_outcome = work.outcome.get().copied().unwrap_or("first");
    Ok(idempotent_response(executed, first_outcome))
}
