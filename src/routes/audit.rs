//! `GET /admin/audit`: the audit log, newest first, filtered by actor, action and time, in
//! keyset pages (the console's audit page reads the same query, [`AuditQuery`]).

use actix_web::{HttpResponse, web};

use super::app_data::{Admin, ApiPool};
use super::extract::Staff;
use crate::access::audit::{self, AuditPage, AuditQuery};
use crate::error::{ApiError, ErrorBody};

/// `GET /admin/audit`: who did what, newest first. Read from the primary (the API pool): the
/// trail is what security reads after an incident, not a report that may lag.
#[utoipa::path(
    get,
    path = "/admin/audit",
    tag = "admin",
    security(("operator_key" = ["admin"])),
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPage),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include admin (required_role)", body = ErrorBody),
        (status = 503, description = "unavailable", body = ErrorBody),
    )
)]
pub async fn list_audit(
    _staff: Staff<Admin>,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ApiError> {
    // Read as a result, so the role is checked before the query can be refused.
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let (filter, limit) = (query.filter()?, query.limit()?);
    let mut conn = api_pool.get().await?;
    Ok(HttpResponse::Ok().json(audit::page(&mut conn, &filter, limit).await?))
}
