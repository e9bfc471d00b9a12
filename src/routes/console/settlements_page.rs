//! `GET /console/settlements`: each payout as the last `settle` found it, with the items of
//! its lines that differ, for finance.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, web};
use askama::Template;

use super::page::{Console, ConsoleError, Me, html};
use crate::error::ApiError;
use crate::routes::app_data::{Finance, ReadPool};
use crate::routes::settlements::SettlementQuery;
use crate::settlement::record::{self, SettledPayout};

/// One difference of a payout's lines as the page shows it.
struct Difference {
    state: String,
    kind: String,
    id: String,
    report_minor: String,
    ledger_minor: String,
}

struct PayoutLine {
    payout: SettledPayout,
    differences: Vec<Difference>,
}

#[derive(Template)]
#[template(path = "console/settlements.html")]
struct SettlementsPage {
    me: Option<Me>,
    provider: String,
    state: String,
    payouts: Vec<PayoutLine>,
}

#[utoipa::path(
    get,
    path = "/console/settlements",
    tag = "console",
    security(("console_session" = ["finance"])),
    params(SettlementQuery),
    responses(
        (status = 200, description = "HTML page", content_type = "text/html"),
        (status = 303, description = "no live session: to /console/login"),
        (status = 403, description = "forbidden: the key's role does not include finance", content_type = "text/html"),
    )
)]
pub async fn settlements(
    console: Console<Finance>,
    query: Result<web::Query<SettlementQuery>, actix_web::Error>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ConsoleError> {
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let (state, limit) = query.checked()?;
    let mut conn = read_pool.get().await.map_err(ApiError::from)?;
    let payouts = record::list(&mut conn, query.provider.as_deref(), state, limit)
        .await
        .map_err(ApiError::from)?;
    let text = |value: &serde_json::Value| match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".to_owned(),
        other => other.to_string(),
    };
    let payouts = payouts
        .into_iter()
        .map(|payout| PayoutLine {
            differences: payout
                .differences
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| Difference {
                    state: text(&d["state"]),
                    kind: text(&d["kind"]),
                    id: text(&d["id"]),
                    report_minor: text(&d["report_minor"]),
                    ledger_minor: text(&d["ledger_minor"]),
                })
                .collect(),
            payout,
        })
        .collect();
    html(
        StatusCode::OK,
        &SettlementsPage {
            me: Some(console.me),
            provider: query.provider.clone().unwrap_or_default(),
            state: query.state.clone().unwrap_or_default(),
            payouts,
        },
    )
}
