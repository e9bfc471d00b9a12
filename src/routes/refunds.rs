use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde_json::json;
use tracing_actix_web::RootSpan;

use super::body::read_body;
use super::extract::{ApiPool, KeyHeader, MerchantAuth};
use super::respond::idempotent_response;
use super::state::AppState;
use crate::error::{ApiError, ErrorBody, error_body, refund_refusal_status};
use crate::idempotency::record::{Completion, Fingerprint, IdempotentRequest, Operation, Scope};
use crate::refunds::create::{self, RefundOutcome, Refunds};
use crate::refunds::request::CreateRefundRequest;

/// How a refund request's outcome is stored and answered (the recoverer stores the same).
pub fn respond(outcome: &RefundOutcome) -> Completion {
    match outcome {
        RefundOutcome::Accepted {
            refund_request_id,
            status,
            provider_refund_id,
        } => Completion::succeeded(
            202,
            json!({
                "refund_request_id": refund_request_id,
                "status": status.as_str(),
                "provider_refund_id": provider_refund_id,
            }),
        ),
        RefundOutcome::Refused(refusal) => {
            let mut body = error_body(refusal.kind.code(), &refusal.message);
            if let Some(id) = refusal.refund_request_id {
                body["refund_request_id"] = json!(id);
            }
            Completion::failed(refund_refusal_status(refusal.kind), body)
        }
    }
}

/// `POST /v1/orders/{id}/refunds` (op `refund.create`).
#[utoipa::path(
    post,
    path = "/v1/orders/{id}/refunds",
    tag = "refunds",
    security(("bearer" = [])),
    params(
        ("id" = String, Path, description = "The order id"),
        ("Idempotency-Key" = String, Header, description = "1 to 128 visible ASCII characters; the quoted form \"abc\" means abc"),
    ),
    request_body(content = CreateRefundRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "The provider accepted the refund: {refund_request_id, status, provider_refund_id}; the ledger moves when its refund webhook arrives. Replays carry Idempotent-Replayed: true"),
        (status = 400, description = "missing_idempotency_key, invalid_idempotency_key, invalid_json (stored and replayed)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "order_not_found (stored and replayed)", body = ErrorBody),
        (status = 409, description = "idempotency_key_in_flight: another attempt holds a live lease; Retry-After", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 422, description = "key_reused_with_different_body; or invalid_amount, invalid_reason, not_refundable, amount_exceeds_refundable, provider_declined (stored and replayed)", body = ErrorBody),
        (status = 503, description = "unavailable: the provider gave no known outcome (the request stays processing) or the database is unavailable; retry with the same key", body = ErrorBody),
    )
)]
#[allow(clippy::too_many_arguments)] // one extractor each: the handler stays a thin adapter
pub async fn create_refund(
    merchant: MerchantAuth,
    KeyHeader(key): KeyHeader,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
    refunds: web::Data<Refunds>,
    root_span: RootSpan,
) -> Result<HttpResponse, ApiError> {
    let user_id = merchant.user_id;
    root_span.record("user_id", user_id);
    let body = read_body(&request, payload, &state.settings.server).await?;
    let order = path.into_inner();
    // The order is part of what the key stands for: the same key and body sent for another
    // order is a different request (422), never a replay of this one.
    let mut fingerprinted = format!("POST /v1/orders/{order}/refunds\n").into_bytes();
    fingerprinted.extend_from_slice(&body);
    let idempotent = IdempotentRequest {
        scope: Scope {
            user_id,
            op: Operation::RefundCreate,
            key: key.as_str().to_owned(),
        },
        fingerprint: Fingerprint::of(&fingerprinted),
        expires_at: Utc::now() + state.settings.idempotency.ttl,
    };
    let executed = create::create(
        &api_pool,
        &refunds,
        user_id,
        order.parse().ok(),
        &idempotent,
        &body,
    )
    .await?;
    Ok(idempotent_response(executed, |outcome| match outcome {
        RefundOutcome::Accepted { .. } => "first",
        RefundOutcome::Refused(_) => "refused",
    }))
}
