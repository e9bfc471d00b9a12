use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use tracing::Instrument;
use tracing_actix_web::RootSpan;

use super::body::read_body;
use super::extract::{ApiPool, Finance, Staff};
use super::respond::idempotent_response;
use super::state::AppState;
use crate::access::audit::{self, Action, Entry};
use crate::deliveries::read::stored_body;
use crate::error::{ApiError, ErrorBody};
use crate::idempotency::audited::Audited;
use crate::idempotency::record::Completion;
use crate::idempotency::transmission::{self, Binding, Bound};
use crate::idempotency::{self, Executed, REPLAYED_HEADER};
use crate::metrics::{Metrics, OutcomeLabel, WriteCommitted};
use crate::payments::ack::{ACK_STATUS, Ack, CallbackOutcome, Outcome};
use crate::payments::callback::ProcessCallback;
use crate::payments::effect::Source;
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
            let executed = execute(&provider, &state, &event, now, trace_id, None).await?;
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

/// Claims, applies and acknowledges one event of a verified delivery in one transaction;
/// `replayed_by`: a person's replay of a stored event, whose audit row joins that transaction.
async fn execute(
    provider: &Provider,
    state: &AppState,
    event: &Event<'_>,
    now: DateTime<Utc>,
    trace_id: Option<&str>,
    replayed_by: Option<&audit::Context>,
) -> Result<Executed<CallbackOutcome>, ApiError> {
    let idempotent = provider.idempotent_request(&event.id, &event.body, now);
    let work = ProcessCallback::new(
        Source {
            merchant_id: provider.merchant_id(),
            provider: provider.name(),
            // Decided now, from this gateway's view of the merchant's endpoint (an endpoint made
            // by API reaches it within a second): a lookup in memory, nothing on the database.
            notify: state.notifying.wants(provider.merchant_id()),
        },
        provider.read_event(&event.body),
        &state.capture_batcher,
        &event.id,
        &event.body,
    )
    .traced(trace_id);
    let respond =
        |outcome: &CallbackOutcome| Completion::succeeded(ACK_STATUS, outcome.ack(&event.id));
    let (pool, replication) = (&state.pool, &state.replication);
    let executed = match replayed_by {
        None => idempotency::execute(pool, replication, &idempotent, &work, &respond).await?,
        Some(context) => {
            let entry = |outcome: &CallbackOutcome| {
                replay_entry(provider.name(), &event.id, outcome.outcome.as_str())
            };
            let audited = Audited::new(&work, context, entry);
            idempotency::execute(pool, replication, &idempotent, &audited, &respond).await?
        }
    };
    if let Executed::First { output, .. } = &executed
        && matches!(output.outcome, Outcome::Applied | Outcome::Held)
    {
        // Committed: the sender finds what the change staged now rather than at its next poll.
        state.notifying.committed(provider.merchant_id());
    }
    Ok(executed)
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
        match execute(provider, state, event, now, trace_id, None).await {
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

/// The audit row of a person's replay of a stored event: `outcome` is what the event did now,
/// or `replayed` when the stored answer was sent again.
fn replay_entry(provider: &str, event_id: &str, outcome: &str) -> Entry {
    Entry::new(
        Action::EventReplay,
        Some(format!("event:{provider}/{event_id}")),
        outcome,
    )
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
    let executed = replay_event(
        &providers,
        &state,
        &api_pool,
        (&provider_name, event_id),
        &staff.audit,
        &root_span,
    )
    .await?;
    let _answer = answer_span(&executed).entered();
    Ok(idempotent_response(executed, |outcome| {
        outcome.outcome.as_str()
    }))
}

/// A person's replay of the stored event `(provider, event id)` (the admin route's and the
/// console's): its audit row commits in the event's transaction when the event runs, or is
/// written alone when the stored answer is sent again (nothing ran).
pub async fn replay_event(
    providers: &Providers,
    state: &AppState,
    api_pool: &ApiPool,
    (provider_name, event_id): (&str, String),
    audit: &audit::Context,
    root_span: &RootSpan,
) -> Result<Executed<CallbackOutcome>, ApiError> {
    let trace_id = telemetry::trace_id(root_span);
    let provider = providers
        .get(provider_name)
        .ok_or(ApiError::UnknownProvider)?;
    root_span.record("provider", provider.name());
    root_span.record("event_id", event_id.as_str());
    let body = {
        let mut conn = api_pool.get().await?;
        stored_body(&mut conn, provider.name(), &event_id)
            .await?
            .ok_or(ApiError::NotFound {
                code: "event_not_found",
                what: "event",
            })?
    };
    let event = Event {
        id: event_id,
        body: std::borrow::Cow::Borrowed(&body),
    };
    let executed = execute(
        &provider,
        state,
        &event,
        Utc::now(),
        trace_id.as_deref(),
        Some(audit),
    )
    .await?;
    if let Executed::Replayed(_) = &executed {
        // Answered from the stored record: nothing ran, so no transaction to join; the
        // replay itself is still on the record.
        let mut conn = api_pool.get().await?;
        let entry = replay_entry(provider.name(), &event.id, "replayed");
        audit::record(&mut conn, audit, entry).await?;
    }
    Ok(executed)
}
