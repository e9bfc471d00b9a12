use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use tracing_actix_web::RootSpan;

use super::app_data::ApiPool;
use super::body::read_body;
use super::extract::{KeyHeader, MerchantAuth};
use super::respond::idempotent_response;
use super::state::AppState;
use crate::error::{ApiError, ErrorBody, error_body, order_rejection_status};
use crate::idempotency::record::{Completion, Fingerprint, IdempotentRequest, Operation, Scope};
use crate::idempotency::{self};
use crate::orders::create::CreateOrder;
use crate::orders::model::{Order, OrderView};
use crate::orders::request::{CreateOrderRequest, OrderRejection};

/// How a create request is stored and answered.
fn respond(output: &Result<Order, OrderRejection>) -> Completion {
    match output {
        Ok(order) => Completion::succeeded(201, order.to_json()),
        Err(rejection) => Completion::failed(
            order_rejection_status(rejection.kind),
            error_body(rejection.kind.code(), &rejection.message),
        ),
    }
}

/// `POST /v1/orders` (op `order.create`).
#[utoipa::path(
    post,
    path = "/v1/orders",
    tag = "orders",
    security(("bearer" = [])),
    params(("Idempotency-Key" = String, Header, description = "1 to 128 visible ASCII characters; the quoted form \"abc\" means abc")),
    request_body(content = CreateOrderRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "Created, or the replay of an earlier 201 (Idempotent-Replayed: true)", body = OrderView),
        (status = 400, description = "missing_idempotency_key, invalid_idempotency_key, invalid_json (stored and replayed)", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 408, description = "request_timeout: the body did not arrive in time", body = ErrorBody),
        (status = 409, description = "idempotency_key_in_flight, with Retry-After: 2", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 422, description = "key_reused_with_different_body; or invalid_amount, unknown_currency, invalid_reference (stored and replayed)", body = ErrorBody),
        (status = 503, description = "unavailable: nothing stored, retry", body = ErrorBody),
    )
)]
pub async fn create_order(
    merchant: MerchantAuth,
    KeyHeader(key): KeyHeader,
    request: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
    root_span: RootSpan,
) -> Result<HttpResponse, ApiError> {
    let user_id = merchant.user_id;
    root_span.record("user_id", user_id);
    let body = read_body(&request, payload, &state.settings.server).await?;
    let idempotent = IdempotentRequest {
        scope: Scope {
            user_id,
            op: Operation::OrderCreate,
            key: key.as_str().to_owned(),
        },
        fingerprint: Fingerprint::of(&body),
        expires_at: Utc::now() + state.settings.idempotency.ttl,
    };
    let executed = idempotency::execute(
        &api_pool,
        &state.replication,
        &idempotent,
        &CreateOrder {
            user_id,
            body: &body,
        },
        &respond,
    )
    .await?;
    Ok(idempotent_response(executed, |_| "first"))
}

/// `GET /v1/orders/{id}`: the caller's own order, 404 for anyone else's.
#[utoipa::path(
    get,
    path = "/v1/orders/{id}",
    tag = "orders",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The order id")),
    responses(
        (status = 200, body = OrderView),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 404, description = "order_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn get_order(
    merchant: MerchantAuth,
    path: web::Path<String>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let user_id = merchant.user_id;
    let not_found = ApiError::NotFound {
        code: "order_not_found",
        what: "order",
    };
    let Ok(id) = path.into_inner().parse::<i64>() else {
        return Err(not_found);
    };
    let mut conn = api_pool.get().await?;
    let order = Order::find_for_user(&mut conn, user_id, id)
        .await?
        .ok_or(not_found)?;
    Ok(HttpResponse::Ok().json(order.to_json()))
}
