use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde_json::json;
use tracing_actix_web::RootSpan;

use super::app_data::{ApiPool, Operator};
use super::body::read_body;
use super::extract::{KeyHeader, MerchantAuth, Staff};
use super::respond::idempotent_response;
use super::state::AppState;
use crate::error::{ApiError, ErrorBody, error_body, refund_refusal_status};
use crate::idempotency::record::{Completion, Fingerprint, IdempotentRequest, Operation, Scope};
use crate::refunds::create::{self, RefundOutcome, Refunds, Resolution};
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
        (status = 409, description = "idempotency_key_in_flight: another attempt holds a live lease; Retry-After. refund_needs_review: the gateway stopped retrying this request (older than [refunds] max_retry_age_hours, or the provider's answer could not be stored), with refund_request_id and reason; an operator resolves it", body = ErrorBody),
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
    state.serving()?;
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
        &state.replication,
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

/// The body of `POST /admin/refund-requests/{id}/resolve`: what the operator found at the
/// provider.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum ResolveRefundRequest {
    /// The provider made the refund under this id.
    Accepted { provider_refund_id: String },
    /// The provider has no such refund; the reserved amount is released.
    Declined { message: String },
}

impl ResolveRefundRequest {
    /// The resolution, if its strings can be stored and shown as they are.
    pub fn parse(self) -> Result<Resolution, String> {
        match self {
            ResolveRefundRequest::Accepted { provider_refund_id } => {
                Resolution::accepted(provider_refund_id)
            }
            ResolveRefundRequest::Declined { message } => Resolution::declined(message),
        }
    }
}

/// `POST /admin/refund-requests/{id}/resolve`: an operator's answer for a refund request the
/// gateway stopped retrying (or a pending one whose refund id was wrong), stored as the
/// provider's would have been; the client's retry with its key then replays it.
#[utoipa::path(
    post,
    path = "/admin/refund-requests/{id}/resolve",
    tag = "admin",
    security(("operator_key" = ["operator"])),
    params(("id" = String, Path, description = "The refund request id")),
    request_body(content = ResolveRefundRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "{refund_request_id, status}: pending (or succeeded, if its webhook already posted) when accepted, failed when declined. A processing request must have no live lease; a pending one (accepted under a wrong refund id) is corrected or withdrawn"),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include operator (required_role)", body = ErrorBody),
        (status = 404, description = "refund_request_not_found", body = ErrorBody),
        (status = 409, description = "refund_not_resolvable: final already, or an attempt may be calling the provider now", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 422, description = "invalid_resolution (also: the provider_refund_id is another request's, named in the message)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn resolve_refund_request(
    staff: Staff<Operator>,
    request: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
    refunds: web::Data<Refunds>,
) -> Result<HttpResponse, ApiError> {
    let request_id = path
        .into_inner()
        .parse::<i64>()
        .map_err(|_| ApiError::NotFound {
            code: "refund_request_not_found",
            what: "refund request",
        })?;
    state.serving()?;
    // The server's body limit and read timeout, as for every other body.
    let body = read_body(&request, payload, &state.settings.server).await?;
    let resolution = serde_json::from_slice::<ResolveRefundRequest>(&body)
        .map_err(|e| ApiError::InvalidResolution(format!("invalid resolution: {e}")))?
        .parse()
        .map_err(ApiError::InvalidResolution)?;
    let mut conn = api_pool.get().await?;
    let status = create::resolve(&mut conn, &refunds, request_id, resolution, &staff.audit).await?;
    tracing::info!(
        refund_request_id = request_id,
        status = status.as_str(),
        "refund request resolved by an operator"
    );
    Ok(HttpResponse::Ok().json(json!({
        "refund_request_id": request_id,
        "status": status.as_str(),
    })))
}
