use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use tracing::Instrument;
use tracing_actix_web::RootSpan;

use super::app_data::{ApiPool, Finance, source_address};
use super::body::read_body;
use super::extract::Staff;
use super::respond::idempotent_response;
use super::state::AppState;
use crate::error::{ApiError, ErrorBody};
use crate::idempotency::transmission::{self, Binding, Bound};
use crate::idempotency::{Executed, REPLAYED_HEADER};
use crate::metrics::{Metrics, OutcomeLabel, WriteCommitted};
use crate::payments::ack::{Ack, CallbackOutcome, Outcome};
use crate::payments::callback::{self, Worker};
use crate::providers::connector::{Answer, Event, Events};
use crate::providers::registry::{Provider, Providers};
use crate::signature::scheme::{SignatureError, Transmission};
use crate::telemetry;
use crate::trace_switch::TRACE;

/// `POST /v1/callbacks/{provider}` (op `payment.callback`): verify the raw body, then claim,
/// apply and acknowledge each event it carries in one transaction of its own.
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
        ("x-square-hmacsha256-signature" = Option<String>, Header, description = "square: base64 HMAC of notification_url + body"),
        ("X-Razorpay-Signature" = Option<String>, Header, description = "razorpay: hex HMAC of the body"),
        ("x-razorpay-event-id" = Option<String>, Header, description = "razorpay: the event id"),
        ("Cko-Signature" = Option<String>, Header, description = "checkout: hex HMAC of the body"),
        ("Paddle-Signature" = Option<String>, Header, description = "paddle: ts=<unix>;h1=<hex>[;h1=..]"),
        ("PAYPAL-TRANSMISSION-SIG" = Option<String>, Header, description = "paypal: base64 SHA256withRSA signature (with -ID, -TIME, PAYPAL-CERT-URL, PAYPAL-AUTH-ALGO)"),
    ),
    request_body(content = Object, content_type = "application/json", description = "The provider's raw event (canonical, Stripe, Adyen, Square, Razorpay, Checkout.com, Paddle or PayPal payload)"),
    responses(
        (status = 200, description = "Ack (outcome applied, held, ignored or rejected); a redelivery gets the byte-identical ack with Idempotent-Replayed: true. Adyen: `[accepted]` once every item is stored", body = Ack),
        (status = 400, description = "invalid_payload: the signed body carries no usable event id (nothing to key it by)", body = ErrorBody),
        (status = 401, description = "invalid_signature: nothing is written", body = ErrorBody),
        (status = 404, description = "unknown_provider", body = ErrorBody),
        (status = 408, description = "request_timeout", body = ErrorBody),
        (status = 409, description = "idempotency_key_in_flight (Retry-After: 2) or out_of_order (Retry-After: 30)", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 422, description = "key_reused_with_different_body", body = ErrorBody),
        (status = 429, description = "rate_limited: an unsigned provider's deliveries (Mollie) past [limits] unsigned_deliveries_per_minute from one address (Retry-After); a signed provider's never are", body = ErrorBody),
        (status = 503, description = "unavailable: nothing stored, redeliver (Retry-After: 1); also while the gateway starts, before its first read of the merchants' endpoints", body = ErrorBody),
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
    state.serving()?;
    // A signed provider's deliveries are never limited; an unsigned one's each cost a call to
    // its API, so they are, per source address, before anything is read or asked.
    if !provider.signed()
        && let Some(source) = source_address(&request, &state.limits)
    {
        state.limits.unsigned_delivery(source)?;
    }
    let body = read_body(&request, payload, &state.settings.server).await?;

    // Nothing is parsed or written before the signature over the raw bytes holds.
    let now = Utc::now();
    let verified = provider
        .verify(request.headers(), request.query_string(), &body, now)
        .outcome()
        .instrument(tracing::info_span!(target: TRACE, "verify", provider = provider.name()))
        .await
        .inspect_err(|error| tracing::warn!(%error, "callback signature refused"))?;
    if let Some(timestamp) = verified.timestamp {
        metrics.observe_skew(provider.name(), timestamp - now.timestamp());
    }
    let transmission = verified.transmission.clone();
    let events = provider
        .events(verified, &body)
        .map_err(|e| ApiError::InvalidPayload(e.0))?;
    if let (Some(transmission), Events::One(event)) = (transmission, &events) {
        hold_transmission(&provider, &state, &transmission, event).await?;
    }
    let trace_id = telemetry::trace_id(&root_span);
    let trace_id = trace_id.as_deref();
    match (events, provider.answer()) {
        (Events::One(event), Answer::StoredAck) => {
            root_span.record("event_id", event.id.as_str());
            let executed = execute(&provider, &state, &event, now, trace_id).await?;
            let _answer = answer_span(&executed).entered();
            Ok(idempotent_response(executed, |outcome| {
                outcome.outcome.as_str()
            }))
        }
        (Events::One(event), answer) => {
            answer_all(&provider, &state, vec![event], answer, now, trace_id).await
        }
        (Events::Items(events), answer) => {
            answer_all(&provider, &state, events, answer, now, trace_id).await
        }
    }
}

/// The trace's last step: the answer, stored before (a replay) or made now.
fn answer_span<O>(executed: &Executed<O>) -> tracing::Span {
    tracing::info_span!(
        target: TRACE,
        "answer",
        replayed = matches!(executed, Executed::Replayed(_))
    )
}

/// Holds a weakly signed transmission (PayPal's) to the body it carries: another body under a
/// transmission id verified before is a forgery, refused as an invalid signature (and counted
/// for `/admin/attention`) before its event is claimed.
async fn hold_transmission(
    provider: &Provider,
    state: &AppState,
    transmission: &Transmission,
    event: &Event<'_>,
) -> Result<(), ApiError> {
    let mut conn = state.pool.get().await?;
    let binding = Binding {
        merchant_id: provider.merchant_id(),
        provider: provider.name(),
        transmission_id: &transmission.id,
        event_id: &event.id,
        body: &event.body,
        valid_until: transmission.valid_until,
    };
    match transmission::bind(&mut conn, binding).await? {
        Bound::First | Bound::Again => Ok(()),
        Bound::Reused => {
            let error = SignatureError::TransmissionReused(transmission.id.clone());
            tracing::warn!(%error, event_id = %event.id, "callback refused: a forged body under a genuine transmission");
            Err(error.into())
        }
    }
}

/// This worker's means to run callbacks, from the handlers' shared state.
fn worker(state: &AppState) -> Worker<'_> {
    Worker {
        pool: &state.pool,
        replication: &state.replication,
        batcher: &state.capture_batcher,
        notifying: &state.notifying,
    }
}

/// Claims, applies and acknowledges one event of a verified delivery (the domain's
/// [`callback::execute`]).
async fn execute(
    provider: &Provider,
    state: &AppState,
    event: &Event<'_>,
    now: DateTime<Utc>,
    trace_id: Option<&str>,
) -> Result<Executed<CallbackOutcome>, ApiError> {
    let event = (event.id.as_str(), event.body.as_ref());
    Ok(callback::execute(worker(state), provider, event, now, trace_id, None).await?)
}

/// A delivery answered with a fixed body (Adyen's `[accepted]`) once every event it carries is
/// stored. Each event is its own idempotent event (record, ack, ledger change, event-log row),
/// processed in the order the provider sent them, so an item that depends on an earlier one of
/// the same request (a refund after its capture) finds it. The fixed answer is sent only when
/// every event is stored, first time or before: it carries `Idempotent-Replayed: true` when
/// every one was a replay. Otherwise the answer is the one a retry can change most: a
/// transient failure (503, the items after it are not tried), an event in flight (409), one
/// that came before the event it needs (409 `out_of_order`), then a reused event id (422); the
/// events stored meanwhile stay stored, and the provider's retry replays them.
async fn answer_all(
    provider: &Provider,
    state: &AppState,
    events: Vec<Event<'_>>,
    answer: Answer,
    now: DateTime<Utc>,
    trace_id: Option<&str>,
) -> Result<HttpResponse, ApiError> {
    let mut refusal: Option<ApiError> = None;
    let mut first: Option<Outcome> = None;
    for event in &events {
        match execute(provider, state, event, now, trace_id).await {
            Ok(Executed::First { output, .. }) => {
                first = Some(first.map_or(output.outcome, |o| notable(o, output.outcome)));
            }
            Ok(Executed::Replayed(_)) => {}
            Err(error) => {
                let transient = rank(&error) == 0;
                if refusal.as_ref().is_none_or(|r| rank(&error) < rank(r)) {
                    refusal = Some(error);
                }
                if transient {
                    break;
                }
            }
        }
    }
    if let Some(refusal) = refusal {
        return Err(refusal);
    }
    let _answer =
        tracing::info_span!(target: TRACE, "answer", replayed = first.is_none()).entered();
    let (body, content_type) = match answer {
        Answer::Fixed { body, content_type } => (body, content_type),
        Answer::StoredAck => (r#"{"received":true}"#, "application/json"),
    };
    let mut response = HttpResponse::Ok();
    response.insert_header((CONTENT_TYPE, content_type));
    let label = match first {
        Some(outcome) => outcome.as_str(),
        None => {
            response.insert_header((REPLAYED_HEADER, "true"));
            "replayed"
        }
    };
    let mut response = response.body(body);
    response.extensions_mut().insert(OutcomeLabel(label));
    if first.is_some() {
        response.extensions_mut().insert(WriteCommitted);
    }
    Ok(response)
}

/// Which refusal of a multi-event delivery is answered: the lowest rank, the one a retry can
/// change soonest.
fn rank(error: &ApiError) -> u8 {
    match error {
        ApiError::IdempotencyKeyInFlight => 1,
        ApiError::OutOfOrder(_) => 2,
        ApiError::KeyReusedWithDifferentBody => 3,
        _ => 0,
    }
}

/// Of two first outcomes in one delivery, the one the request is labelled with (metrics and
/// the request log): what finance must look at first.
fn notable(a: Outcome, b: Outcome) -> Outcome {
    let weight = |o: Outcome| match o {
        Outcome::Rejected => 3,
        Outcome::Held => 2,
        Outcome::Applied => 1,
        Outcome::Ignored => 0,
    };
    if weight(b) > weight(a) { b } else { a }
}

/// `POST /admin/events/{provider}/{event_id}/replay`: runs the stored verified body of an event
/// through the callback path again, as a redelivery of it would (no signature: it was verified
/// when it was stored). For providers the gateway cannot sign for (PayPal), this is finance's
/// replay. While the event's record lives the answer is its stored ack with
/// `Idempotent-Replayed: true`; after it expired the ledger still posts nothing twice.
#[utoipa::path(
    post,
    path = "/admin/events/{provider}/{event_id}/replay",
    tag = "admin",
    security(("operator_key" = ["finance"])),
    params(("provider" = String, Path), ("event_id" = String, Path)),
    responses(
        (status = 200, description = "The event's ack (stored or new), as a provider's redelivery gets it", body = Ack),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include finance (required_role)", body = ErrorBody),
        (status = 404, description = "event_not_found or unknown_provider", body = ErrorBody),
        (status = 409, description = "out_of_order or idempotency_key_in_flight", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn replay_stored(
    staff: Staff<Finance>,
    path: web::Path<(String, String)>,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
    providers: web::Data<Providers>,
    root_span: RootSpan,
) -> Result<HttpResponse, ApiError> {
    let (provider_name, event_id) = path.into_inner();
    let provider = providers
        .get(&provider_name)
        .ok_or(ApiError::UnknownProvider)?;
    state.serving()?;
    root_span.record("provider", provider.name());
    root_span.record("event_id", event_id.as_str());
    let trace_id = telemetry::trace_id(&root_span);
    let executed = callback::replay(
        worker(&state),
        &api_pool,
        provider.as_ref(),
        &event_id,
        &staff.audit,
        trace_id.as_deref(),
    )
    .await?
    .ok_or(ApiError::NotFound {
        code: "event_not_found",
        what: "event",
    })?;
    let _answer = answer_span(&executed).entered();
    Ok(idempotent_response(executed, |outcome| {
        outcome.outcome.as_str()
    }))
}
