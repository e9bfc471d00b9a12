use actix_web::{HttpResponse, web};

use super::app_data::{ApiPool, ReadPool, Viewer};
use super::extract::Staff;
use crate::error::{ApiError, ErrorBody};
use crate::idempotency::record::{IdempotencyRecord, Operation, Scope};
use crate::ledger;

fn parse_op(op: &str) -> Option<Operation> {
    Operation::ALL.into_iter().find(|o| o.as_str() == op)
}

/// `GET /admin/idempotency/{user_id}/{op}/{key}`: one record as stored.
#[utoipa::path(
    get,
    path = "/admin/idempotency/{user_id}/{op}/{key}",
    tag = "admin",
    security(("operator_key" = ["viewer"])),
    params(
        ("user_id" = String, Path),
        ("op" = String, Path, description = "order.create or payment.callback"),
        ("key" = String, Path, description = "The key; for callbacks {provider}:{event id}"),
    ),
    responses(
        (status = 200, body = IdempotencyRecord),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include viewer (required_role)", body = ErrorBody),
        (status = 404, description = "record_not_found", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn idempotency_record(
    _staff: Staff<Viewer>,
    path: web::Path<(String, String, String)>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    let not_found = || ApiError::NotFound {
        code: "record_not_found",
        what: "idempotency record",
    };
    let (user_id, op, key) = path.into_inner();
    let user_id = user_id.parse::<i64>().map_err(|_| not_found())?;
    let op = parse_op(&op).ok_or_else(not_found)?;
    let scope = Scope { user_id, op, key };
    let mut conn = api_pool.get().await?;
    let record = IdempotencyRecord::find(&mut conn, &scope)
        .await?
        .ok_or_else(not_found)?;
    Ok(HttpResponse::Ok().json(record))
}

/// A merchant's balances per account and currency.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Balances {
    pub merchant_id: i64,
    pub balances: Vec<ledger::Balance>,
}

/// `GET /admin/merchants/{merchant_id}/balances`.
#[utoipa::path(
    get,
    path = "/admin/merchants/{merchant_id}/balances",
    tag = "admin",
    security(("operator_key" = ["viewer"])),
    params(("merchant_id" = String, Path)),
    responses(
        (status = 200, body = Balances),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include viewer (required_role)", body = ErrorBody),
        (status = 404, description = "merchant_not_found (not a number)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn balances(
    _staff: Staff<Viewer>,
    path: web::Path<String>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    let merchant_id = path
        .into_inner()
        .parse::<i64>()
        .map_err(|_| ApiError::NotFound {
            code: "merchant_not_found",
            what: "merchant",
        })?;
    let mut conn = read_pool.get().await?;
    let balances = ledger::checkpoint::balances(&mut conn, merchant_id).await?;
    Ok(HttpResponse::Ok().json(Balances {
        merchant_id,
        balances,
    }))
}
