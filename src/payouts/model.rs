//! A payout's row (`payouts`, migration 000063) and its one writer, `payout_apply`.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::one_row::CommittedResult;
use crate::ledger;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The money went from the provider to the bank.
    Payout,
    /// A booked payout failed: the money is back at the provider.
    PayoutReversal,
}

impl Kind {
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Payout => ledger::PAYOUT,
            Kind::PayoutReversal => ledger::PAYOUT_REVERSAL,
        }
    }
}

/// Which of a payout's states the books hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Booked: the payout's amount is in the bank account.
    Paid,
    /// Failed: given back after it was paid, or failed before the books paid it.
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Paid => "paid",
            Status::Failed => "failed",
        }
    }

    fn parse(text: &str) -> diesel::QueryResult<Self> {
        match text {
            "paid" => Ok(Status::Paid),
            "failed" => Ok(Status::Failed),
            other => Err(diesel::result::Error::DeserializationError(
                format!("unknown payout status {other:?}").into(),
            )),
        }
    }
}

/// What the books hold for a payout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Booked {
    pub status: Status,
    /// For `Paid`, exactly what the books moved to the bank.
    pub amount_minor: i64,
    pub currency: String,
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    amount_minor: i64,
    #[diesel(sql_type = Text)]
    currency: String,
}

/// The payout's row, locked until the transaction ends, so two events of one payout are
/// planned one after the other. A payout not seen yet has no row to lock: the first writes of
/// two such events meet at the row's key instead (`state_changed`, then planned again).
pub async fn booked(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    payout_id: &str,
) -> diesel::QueryResult<Option<Booked>> {
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT status, amount_minor, currency FROM payouts \
         WHERE merchant_id = $1 AND provider = $2 AND payout_id = $3 FOR UPDATE",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Text, _>(payout_id)
    .load(conn)
    .await?;
    rows.into_iter()
        .next()
        .map(|row| {
            Ok(Booked {
                status: Status::parse(&row.status)?,
                amount_minor: row.amount_minor,
                currency: row.currency,
            })
        })
        .transpose()
}

/// A payout transfer's entries: `amount_minor` to `account_to`, its negative to `account_from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries {
    pub kind: Kind,
    pub account_to: String,
    pub account_from: String,
    pub amount_minor: i64,
}

/// A payout event's writes: the row's move from the state read, and its transfer if any.
#[derive(Debug)]
pub struct PayoutWrite<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub event_id: &'a str,
    pub payout_id: &'a str,
    /// `None`: the payout has no row yet.
    pub status_from: Option<Status>,
    pub status_to: Status,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub transfer: Option<Entries>,
}

/// What applying a payout write found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Written; the transfer id when one was posted.
    Done(Option<i64>),
    /// The payout's row was not in the state read; nothing was written.
    StateChanged,
    /// The event id posted a transfer before; nothing was written.
    AlreadyPosted,
}

#[derive(QueryableByName)]
struct Result {
    #[diesel(sql_type = Text)]
    result: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    transfer_id: Option<i64>,
}

/// Writes `write` in a subtransaction of the caller's transaction: all of it, or nothing and
/// why (`StateChanged`: the row was not as read; `AlreadyPosted`: the event id posted before).
pub async fn apply(
    conn: &mut AsyncPgConnection,
    write: &PayoutWrite<'_>,
) -> diesel::QueryResult<Applied> {
    let transfer = write.transfer.as_ref();
    let row: Result = diesel::sql_query(
        "SELECT result::text AS result, transfer_id FROM payout_apply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind::<BigInt, _>(write.merchant_id)
    .bind::<Text, _>(write.provider)
    .bind::<Text, _>(write.event_id)
    .bind::<Text, _>(write.payout_id)
    .bind::<Nullable<Text>, _>(write.status_from.map(Status::as_str))
    .bind::<Text, _>(write.status_to.as_str())
    .bind::<BigInt, _>(transfer.map_or(write.amount_minor, |t| t.amount_minor))
    .bind::<Text, _>(write.currency)
    .bind::<Nullable<Text>, _>(transfer.map(|t| t.kind.as_str()))
    .bind::<Nullable<Text>, _>(transfer.map(|t| t.account_to.as_str()))
    .bind::<Nullable<Text>, _>(transfer.map(|t| t.account_from.as_str()))
    .committed_result(conn)
    .await?;
    match row.result.as_str() {
        "applied" => Ok(Applied::Done(row.transfer_id)),
        "state_changed" => Ok(Applied::StateChanged),
        "already_posted" => Ok(Applied::AlreadyPosted),
        other => Err(diesel::result::Error::DeserializationError(
            format!("unknown payout_apply result {other:?}").into(),
        )),
    }
}
