//! The last settlement of each payout (`settlement_payouts`, migration 000065): written by
//! `settle`, read by `GET /admin/settlements` and the console's settlements page.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Jsonb, Nullable, Text, Timestamptz};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use super::state::{Judged, State};
use crate::access::audit;

/// One payout as a run found it.
#[derive(Debug, Clone)]
pub struct PayoutRecord {
    pub payout_id: String,
    pub state: State,
    pub currency: String,
    /// What its lines add up to (or the amount it states, when it names no lines).
    pub report_minor: i128,
    pub stated_minor: Option<i128>,
    pub ledger_minor: Option<i128>,
    pub lines: u64,
    pub differing_items: u64,
    pub differences: Vec<Judged>,
    pub bank: Option<State>,
    pub report_file: String,
}

/// Replaces the rows of `records`' payouts, in one transaction with the run's audit row.
pub async fn replace(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    records: &[PayoutRecord],
    (actor, entry): (&audit::Context, audit::Entry),
) -> diesel::QueryResult<()> {
    conn.transaction(async |conn| {
        audit::record(conn, actor, entry).await?;
        for record in records {
            let differences: Vec<serde_json::Value> = record
                .differences
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "kind": d.kind.as_str(), "id": d.id, "state": d.state.as_str(),
                        "report_minor": d.report_minor.map(|a| a.to_string()),
                        "ledger_minor": d.ledger_minor.map(|a| a.to_string()),
                    })
                })
                .collect();
            diesel::sql_query(
                "INSERT INTO settlement_payouts (merchant_id, provider, payout_id, state, \
                     currency, report_minor, stated_minor, ledger_minor, lines, differing_items, \
                     differences, bank, report_file) \
                     VALUES ($1, $2, $3, $4, $5, $6::text::numeric, $7::text::numeric, \
                             $8::text::numeric, $9, $10, $11, $12, $13) \
                     ON CONFLICT (merchant_id, provider, payout_id) DO UPDATE SET \
                     state = EXCLUDED.state, currency = EXCLUDED.currency, \
                     report_minor = EXCLUDED.report_minor, stated_minor = EXCLUDED.stated_minor, \
                     ledger_minor = EXCLUDED.ledger_minor, lines = EXCLUDED.lines, \
                     differing_items = EXCLUDED.differing_items, \
                     differences = EXCLUDED.differences, bank = EXCLUDED.bank, \
                     report_file = EXCLUDED.report_file, settled_at = now()",
            )
            .bind::<BigInt, _>(merchant_id)
            .bind::<Text, _>(provider)
            .bind::<Text, _>(&record.payout_id)
            .bind::<Text, _>(record.state.as_str())
            .bind::<Text, _>(&record.currency)
            .bind::<Text, _>(record.report_minor.to_string())
            .bind::<Nullable<Text>, _>(record.stated_minor.map(|a| a.to_string()))
            .bind::<Nullable<Text>, _>(record.ledger_minor.map(|a| a.to_string()))
            .bind::<BigInt, _>(i64::try_from(record.lines).unwrap_or(i64::MAX))
            .bind::<BigInt, _>(i64::try_from(record.differing_items).unwrap_or(i64::MAX))
            .bind::<Jsonb, _>(serde_json::Value::Array(differences))
            .bind::<Nullable<Text>, _>(record.bank.map(State::as_str))
            .bind::<Text, _>(&record.report_file)
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    })
    .await
}

/// A payout's row as finance reads it.
#[derive(Debug, Clone, Serialize, QueryableByName, utoipa::ToSchema)]
pub struct SettledPayout {
    #[diesel(sql_type = BigInt)]
    pub merchant_id: i64,
    #[diesel(sql_type = Text)]
    pub provider: String,
    #[diesel(sql_type = Text)]
    pub payout_id: String,
    /// matched, missing_in_ledger, missing_in_report, payout_unbalanced
    #[diesel(sql_type = Text)]
    pub state: String,
    #[diesel(sql_type = Text)]
    pub currency: String,
    /// Minor units, as a string (exact beyond 64 bits).
    #[diesel(sql_type = Text)]
    pub report_minor: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub stated_minor: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub ledger_minor: Option<String>,
    #[diesel(sql_type = BigInt)]
    pub lines: i64,
    #[diesel(sql_type = BigInt)]
    pub differing_items: i64,
    #[diesel(sql_type = Jsonb)]
    #[schema(value_type = Vec<Object>)]
    pub differences: serde_json::Value,
    #[diesel(sql_type = Nullable<Text>)]
    pub bank: Option<String>,
    #[diesel(sql_type = Text)]
    pub report_file: String,
    #[diesel(sql_type = Timestamptz)]
    pub settled_at: DateTime<Utc>,
}

/// The newest `limit` payouts, of one provider and in one state when asked.
pub async fn list(
    conn: &mut AsyncPgConnection,
    provider: Option<&str>,
    state: Option<&str>,
    limit: i64,
) -> diesel::QueryResult<Vec<SettledPayout>> {
    diesel::sql_query(
        "SELECT merchant_id, provider, payout_id, state, currency, report_minor::text AS report_minor, \
         stated_minor::text AS stated_minor, ledger_minor::text AS ledger_minor, lines, \
         differing_items, differences, bank, report_file, settled_at \
         FROM settlement_payouts \
         WHERE ($1::text IS NULL OR provider = $1) AND ($2::text IS NULL OR state = $2) \
         ORDER BY settled_at DESC, payout_id LIMIT $3",
    )
    .bind::<Nullable<Text>, _>(provider)
    .bind::<Nullable<Text>, _>(state)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await
}
