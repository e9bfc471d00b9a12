//! `GET /admin/audit`: the audit log, newest first, filtered by actor, action and time, in
//! keyset pages (the console's audit page reads the same query).

use actix_web::{HttpResponse, web};
use chrono::{DateTime, Utc};

use super::extract::{Admin, ApiPool, Staff};
use crate::access::audit::{self, Action, AuditFilter, AuditPage};
use crate::error::{ApiError, ErrorBody};

/// The query string of the log (and of the console's page).
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// The actor's name: an operator, `bootstrap`, `cli:<login>`, or `unknown` (refused
    /// sign-ins).
    pub actor: Option<String>,
    /// e.g. `event.replay`, `console.sign_in` (docs/access.md lists them).
    pub action: Option<String>,
    /// RFC 3339: at or after.
    pub since: Option<String>,
    /// RFC 3339: before.
    pub until: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// 1..=500, default 100.
    pub limit: Option<String>,
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn time(name: &str, value: &Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    present(value)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| ApiError::InvalidQuery(format!("{name} must be an RFC 3339 time")))
        })
        .transpose()
}

impl AuditQuery {
    pub fn filter(&self) -> Result<AuditFilter, ApiError> {
        Ok(AuditFilter {
            actor: present(&self.actor).map(str::to_owned),
            action: present(&self.action)
                .map(|v| {
                    Action::parse(v).ok_or_else(|| {
                        ApiError::InvalidQuery(format!("action {v:?} is not an audited action"))
                    })
                })
                .transpose()?,
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            before: present(&self.cursor)
                .map(|v| {
                    v.parse::<i64>()
                        .ok()
                        .filter(|id| *id > 0)
                        .ok_or_else(|| ApiError::InvalidQuery("unknown cursor".into()))
                })
                .transpose()?,
        })
    }

    pub fn limit(&self) -> Result<i64, ApiError> {
        present(&self.limit)
            .map(|v| {
                v.parse::<i64>()
                    .ok()
                    .filter(|n| (1..=audit::MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::InvalidQuery(format!("limit must be 1 to {}", audit::MAX_LIMIT))
                    })
            })
            .transpose()
            .map(|limit| limit.unwrap_or(audit::DEFAULT_LIMIT))
    }
}

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
