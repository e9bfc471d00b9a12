//! The ledger's side of a settlement: what the books hold for the report's payments and
//! payouts, read in one pass over the transfers of the report's period, and the fees booked.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{Array, BigInt, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::TryStreamExt;

use super::state::ItemKind;
use crate::ledger::psp_clearing;

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    payment_id: String,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Text)]
    currency: String,
    /// The transfer's clearing entry: what moved at the provider, signed from its side.
    #[diesel(sql_type = BigInt)]
    clearing_minor: i64,
}

/// One transfer as a settlement counts it: the item it belongs to and its amount in the
/// report's sense (a refund or a chargeback positive, as the report's lines are turned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Booked {
    pub kind: ItemKind,
    pub id: String,
    pub created_at: DateTime<Utc>,
    pub currency: String,
    pub amount_minor: i64,
}

impl Booked {
    fn from_row(row: Row) -> Option<Self> {
        let (kind, amount) = match row.kind.as_str() {
            "payment" => (ItemKind::Payment, row.clearing_minor),
            "refund" | "refund_reversal" => (ItemKind::Refund, -row.clearing_minor),
            "chargeback" => (ItemKind::Chargeback, -row.clearing_minor),
            "chargeback_reversal" => (ItemKind::ChargebackReversal, row.clearing_minor),
            // What left clearing for the bank: the bank entry is its negative.
            "payout" | "payout_reversal" => (ItemKind::Payout, -row.clearing_minor),
            _ => return None,
        };
        Some(Self {
            kind,
            id: row.payment_id,
            created_at: row.created_at,
            currency: row.currency,
            amount_minor: amount,
        })
    }
}

/// Streams the merchant's transfers from `provider` created in `[from, to)` (a range scan of
/// idx_ledger_transfers_reconcile) into `each`, with their clearing entry.
pub async fn for_each_transfer(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    mut each: impl FnMut(Booked),
) -> anyhow::Result<u64> {
    let mut rows = diesel::sql_query(
        "SELECT t.payment_id, t.kind, t.created_at, e.currency, e.amount_minor AS clearing_minor \
         FROM ledger_transfers t JOIN ledger_entries e ON e.transfer_id = t.id AND e.account = $3 \
         WHERE t.merchant_id = $1 AND t.provider = $2 AND t.created_at >= $4 AND t.created_at < $5",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Text, _>(psp_clearing(provider))
    .bind::<Timestamptz, _>(from)
    .bind::<Timestamptz, _>(to)
    .load_stream::<Row>(conn)
    .await?;
    let mut read = 0;
    while let Some(row) = rows.try_next().await? {
        read += 1;
        if let Some(booked) = Booked::from_row(row) {
            each(booked);
        }
    }
    Ok(read)
}

/// A fee of a report line to book: `fee_minor` from clearing to `psp_fees:<provider>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fee {
    pub reference: String,
    pub payment_id: String,
    pub currency: &'static str,
    pub fee_minor: i64,
}

#[derive(QueryableByName)]
struct Posted {
    #[diesel(sql_type = Text)]
    reference: String,
}

/// Books `fees` each once (`settlement_fees_post`, migration 000064); the references of those
/// booked now.
pub async fn book_fees(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    fees: &[Fee],
) -> diesel::QueryResult<Vec<String>> {
    if fees.is_empty() {
        return Ok(Vec::new());
    }
    let posted: Vec<Posted> = diesel::sql_query(
        "SELECT reference FROM settlement_fees_post($1, $2, $3, $4, $5, $6) AS reference",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Array<Text>, _>(
        fees.iter()
            .map(|f| f.reference.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(
        fees.iter()
            .map(|f| f.payment_id.as_str())
            .collect::<Vec<_>>(),
    )
    .bind::<Array<Text>, _>(fees.iter().map(|f| f.currency).collect::<Vec<_>>())
    .bind::<Array<BigInt>, _>(fees.iter().map(|f| f.fee_minor).collect::<Vec<_>>())
    .load(conn)
    .await?;
    Ok(posted.into_iter().map(|p| p.reference).collect())
}

/// A conversion of a report line to book: `from_minor` of `from_currency` out of clearing into
/// `fx:<provider>`, and `to_minor` of `to_currency` back (`settlement_fx_post`, migration
/// 000066).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conversion {
    pub reference: String,
    pub payment_id: String,
    pub from_currency: &'static str,
    pub from_minor: i64,
    pub to_currency: &'static str,
    pub to_minor: i64,
}

/// Books `conversions` each once; the references of those booked now.
pub async fn book_conversions(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    conversions: &[Conversion],
) -> diesel::QueryResult<Vec<String>> {
    if conversions.is_empty() {
        return Ok(Vec::new());
    }
    let column = |f: fn(&Conversion) -> &str| conversions.iter().map(f).collect::<Vec<_>>();
    let amounts = |f: fn(&Conversion) -> i64| conversions.iter().map(f).collect::<Vec<_>>();
    let posted: Vec<Posted> = diesel::sql_query(
        "SELECT reference FROM settlement_fx_post($1, $2, $3, $4, $5, $6, $7, $8) AS reference",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Array<Text>, _>(column(|c| c.reference.as_str()))
    .bind::<Array<Text>, _>(column(|c| c.payment_id.as_str()))
    .bind::<Array<Text>, _>(column(|c| c.from_currency))
    .bind::<Array<BigInt>, _>(amounts(|c| c.from_minor))
    .bind::<Array<Text>, _>(column(|c| c.to_currency))
    .bind::<Array<BigInt>, _>(amounts(|c| c.to_minor))
    .load(conn)
    .await?;
    Ok(posted.into_iter().map(|p| p.reference).collect())
}
