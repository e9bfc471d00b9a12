//! `GET /console/audit`: the audit log for admins, with the filters and pages of
//! `/admin/audit`.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;

use super::page::{Console, ConsoleError, Me, html};
use super::view::{self, time};
use crate::access::audit::{self, Action, AuditQuery};
use crate::error::ApiError;
use crate::routes::app_data::{Admin, ApiPool};

/// One row as the page shows it (askama escapes every field).
struct AuditLine {
    id: i64,
    at: String,
    actor: String,
    role: String,
    action: String,
    target: String,
    outcome: String,
    changes: String,
    request_id: String,
}

#[derive(Template)]
#[template(path = "console/audit.html")]
struct AuditPage {
    me: Option<Me>,
    actor: String,
    action: String,
    since: String,
    until: String,
    actions: Vec<&'static str>,
    rows: Vec<AuditLine>,
    first_href: String,
    next_href: Option<String>,
    paged: bool,
}

#[utoipa::path(
    get,
    path = "/console/audit",
    tag = "console",
    security(("console_session" = ["admin"])),
    params(AuditQuery),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include admin", content_type = "text/html"),
    )
)]
pub async fn audit(
    console: Console<Admin>,
    query: Result<web::Query<AuditQuery>, actix_web::Error>,
    api_pool: web::Data<ApiPool>,
) -> Result<HttpResponse, ConsoleError> {
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let filter = query.filter().map_err(ApiError::from)?;
    let limit = query.limit().map_err(ApiError::from)?;
    let mut conn = api_pool.get().await.map_err(ApiError::from)?;
    let page = audit::page(&mut conn, &filter, limit).await?;
    drop(conn);
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let filters: Vec<String> = [
        ("actor", &query.actor),
        ("action", &query.action),
        ("since", &query.since),
        ("until", &query.until),
    ]
    .into_iter()
    .filter_map(|(name, value)| {
        value
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| format!("{name}={}", view::encode(v)))
    })
    .collect();
    let href = |cursor: Option<&str>| {
        let mut params = filters.clone();
        if let Some(cursor) = cursor {
            params.push(format!("cursor={}", view::encode(cursor)));
        }
        format!("/console/audit?{}", params.join("&"))
    };
    html(
        StatusCode::OK,
        &AuditPage {
            actor: text(&query.actor),
            action: text(&query.action),
            since: text(&query.since),
            until: text(&query.until),
            actions: Action::ALL.iter().map(|a| a.as_str()).collect(),
            rows: page
                .entries
                .iter()
                .map(|row| AuditLine {
                    id: row.id,
                    at: time(row.at),
                    actor: row.actor.clone(),
                    role: row.role.clone(),
                    action: row.action.clone(),
                    target: row.target.clone().unwrap_or_default(),
                    outcome: row.outcome.clone(),
                    changes: row.changes.to_string(),
                    request_id: row.request_id.clone().unwrap_or_default(),
                })
                .collect(),
            first_href: href(None),
            next_href: page.next_cursor.as_deref().map(|c| href(Some(c))),
            paged: filter.before.is_some(),
            me: Some(console.me),
        },
    )
}
