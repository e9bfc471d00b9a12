//! `GET /admin/settlements`: each payout as the last `settle` found it (docs/settlement.md).

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};

use super::app_data::{Finance, ReadPool};
use super::extract::Staff;
use crate::error::{ApiError, ErrorBody};
use crate::settlement::State;
use crate::settlement::record::{self, SettledPayout};

/// At most this many payouts an answer.
pub const MAX_LIMIT: i64 = 500;

#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SettlementQuery {
    /// Only this provider's payouts.
    pub provider: Option<String>,
    /// Only payouts in this state (matched, missing_in_ledger, missing_in_report,
    /// payout_unbalanced).
    pub state: Option<String>,
    /// How many, newest first (1 to 500, default 100).
    pub limit: Option<i64>,
}

impl SettlementQuery {
    /// The state and limit, checked.
    pub fn checked(&self) -> Result<(Option<&str>, i64), ApiError> {
        let state = match self.state.as_deref() {
            None => None,
            Some(text) => Some(
                State::ALL
                    .iter()
                    .map(|s| s.as_str())
                    .find(|s| *s == text)
                    .ok_or_else(|| {
                        ApiError::InvalidQuery(format!("state {text:?} is not a settlement state"))
                    })?,
            ),
        };
        let limit = self.limit.unwrap_or(100);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::InvalidQuery(format!(
                "limit must be 1 to {MAX_LIMIT}"
            )));
        }
        Ok((state, limit))
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Settlements {
    pub payouts: Vec<SettledPayout>,
}

#[utoipa::path(
    get,
    path = "/admin/settlements",
    tag = "admin",
    security(("operator_key" = ["finance"])),
    params(SettlementQuery),
    responses(
        (status = 200, description = "each payout's last settlement, newest first", body = Settlements),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "unauthorized", body = ErrorBody),
        (status = 403, description = "forbidden: the key's role does not include finance (required_role)", body = ErrorBody),
    )
)]
pub async fn list_settlements(
    _staff: Staff<Finance>,
    query: Result<web::Query<SettlementQuery>, actix_web::Error>,
    read_pool: web::Data<ReadPool>,
) -> Result<HttpResponse, ApiError> {
    let query = query.map_err(|e| ApiError::InvalidQuery(e.to_string()))?;
    let (state, limit) = query.checked()?;
    let mut conn = read_pool.get().await?;
    let payouts = record::list(&mut conn, query.provider.as_deref(), state, limit).await?;
    Ok(HttpResponse::Ok().json(Settlements { payouts }))
}
