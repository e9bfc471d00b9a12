//! The `payment_disputes` table: one row per dispute a provider reported, where its funds are
//! and how it ended, with its columns as enums, and the queries that read it. Its one writer is
//! `payment_disputes_write` (migration 000032), called by `payment_apply` in the transaction
//! that posts the dispute's transfer and moves its payment and order.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::ledger::MerchantAccount;
use crate::schema::payment_disputes;

/// Where a dispute's money is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeFunds {
    /// No funds event yet (the dispute closed before its withdrawal arrived).
    None,
    /// The provider took the amount back.
    Withdrawn,
    /// The provider gave it back.
    Reinstated,
}

impl DisputeFunds {
    pub fn as_str(self) -> &'static str {
        match self {
            DisputeFunds::None => "none",
            DisputeFunds::Withdrawn => "withdrawn",
            DisputeFunds::Reinstated => "reinstated",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            DisputeFunds::None,
            DisputeFunds::Withdrawn,
            DisputeFunds::Reinstated,
        ]
        .into_iter()
        .find(|f| f.as_str() == s)
    }
}

/// How a dispute ended, if it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeOutcome {
    Open,
    Won,
    Lost,
}

impl DisputeOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            DisputeOutcome::Open => "open",
            DisputeOutcome::Won => "won",
            DisputeOutcome::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            DisputeOutcome::Open,
            DisputeOutcome::Won,
            DisputeOutcome::Lost,
        ]
        .into_iter()
        .find(|o| o.as_str() == s)
    }
}

/// Why finance must look at a dispute whatever its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeNote {
    /// Its withdrawal was larger than what remained of the payment (posted all the same: the
    /// provider moved it).
    ExceedsRemaining,
    /// Its fee was charged in another currency than the payment's: the withdrawal is posted
    /// without it.
    FeeNotBooked,
}

impl DisputeNote {
    pub fn as_str(self) -> &'static str {
        match self {
            DisputeNote::ExceedsRemaining => "exceeds_remaining",
            DisputeNote::FeeNotBooked => "fee_not_booked",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [DisputeNote::ExceedsRemaining, DisputeNote::FeeNotBooked]
            .into_iter()
            .find(|n| n.as_str() == s)
    }
}

/// A dispute's values as a plan reads them and as it leaves them (the row without its keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisputeRecord {
    pub funds: DisputeFunds,
    pub outcome: DisputeOutcome,
    pub withdrawn_minor: i64,
    pub fee_minor: i64,
    pub reinstated_minor: i64,
    /// The merchant account its withdrawal was posted against.
    pub account: Option<MerchantAccount>,
    pub note: Option<DisputeNote>,
}

impl DisputeRecord {
    /// A dispute the gateway has not heard of.
    pub const NEW: DisputeRecord = DisputeRecord {
        funds: DisputeFunds::None,
        outcome: DisputeOutcome::Open,
        withdrawn_minor: 0,
        fee_minor: 0,
        reinstated_minor: 0,
        account: None,
        note: None,
    };
}

/// A dispute as the state machine needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputeState {
    pub dispute_id: String,
    /// The payment its first event named; every later event must name the same.
    pub payment_id: String,
    pub record: DisputeRecord,
    /// The reversal that gave its funds back without naming it (Paddle's), if one did.
    pub reinstated_by: Option<String>,
}

/// Identifies a dispute: the provider's dispute id within one merchant and provider.
#[derive(Debug, Clone, Copy)]
pub struct DisputeKey<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub dispute_id: &'a str,
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payment_disputes)]
pub struct Dispute {
    pub dispute_id: String,
    pub payment_id: String,
    pub funds: String,
    pub outcome: String,
    pub withdrawn_minor: i64,
    pub fee_minor: i64,
    pub reinstated_minor: i64,
    pub account: Option<String>,
    pub note: Option<String>,
    pub reinstated_by: Option<String>,
}

impl Dispute {
    /// The state machine's view; a value the code does not know is an error, never a guess.
    pub fn state(&self) -> QueryResult<DisputeState> {
        fn known<T>(what: &str, text: &str, parsed: Option<T>) -> QueryResult<T> {
            parsed.ok_or_else(|| {
                diesel::result::Error::DeserializationError(
                    format!("unknown dispute {what} {text:?}").into(),
                )
            })
        }
        let account = match &self.account {
            Some(a) => Some(known("account", a, MerchantAccount::parse(a))?),
            None => None,
        };
        let note = match &self.note {
            Some(n) => Some(known("note", n, DisputeNote::parse(n))?),
            None => None,
        };
        Ok(DisputeState {
            dispute_id: self.dispute_id.clone(),
            payment_id: self.payment_id.clone(),
            record: DisputeRecord {
                funds: known("funds", &self.funds, DisputeFunds::parse(&self.funds))?,
                outcome: known(
                    "outcome",
                    &self.outcome,
                    DisputeOutcome::parse(&self.outcome),
                )?,
                withdrawn_minor: self.withdrawn_minor,
                fee_minor: self.fee_minor,
                reinstated_minor: self.reinstated_minor,
                account,
                note,
            },
            reinstated_by: self.reinstated_by.clone(),
        })
    }

    /// Reads the disputes a dispute event's plan needs: the one it names (`key`, whichever
    /// payment's it is) and every dispute of its payment (`payment_id`), in one statement (the
    /// unique key and `idx_payment_disputes_payment`). Not locked: every event of a dispute
    /// locks its payment first, which orders them, and the writer's guard catches any other
    /// change.
    pub async fn for_event(
        mut conn: &AsyncPgConnection,
        key: DisputeKey<'_>,
        payment_id: &str,
    ) -> QueryResult<Vec<Dispute>> {
        payment_disputes::table
            .filter(payment_disputes::merchant_id.eq(key.merchant_id))
            .filter(payment_disputes::provider.eq(key.provider))
            .filter(
                payment_disputes::dispute_id
                    .eq(key.dispute_id)
                    .or(payment_disputes::payment_id.eq(payment_id)),
            )
            .order(payment_disputes::id.asc())
            .select(Dispute::as_select())
            .load(&mut conn)
            .await
    }
}

impl Dispute {
    /// Every dispute of a payment, oldest first (`idx_payment_disputes_payment`).
    pub async fn of_payment(
        mut conn: &AsyncPgConnection,
        merchant_id: i64,
        provider: &str,
        payment_id: &str,
    ) -> QueryResult<Vec<Dispute>> {
        payment_disputes::table
            .filter(payment_disputes::merchant_id.eq(merchant_id))
            .filter(payment_disputes::provider.eq(provider))
            .filter(payment_disputes::payment_id.eq(payment_id))
            .order(payment_disputes::id.asc())
            .select(Dispute::as_select())
            .load(&mut conn)
            .await
    }
}

/// A dispute as the event log and the console show it.
#[derive(Debug, Clone, serde::Serialize, Queryable, Selectable, utoipa::ToSchema)]
#[diesel(table_name = payment_disputes)]
pub struct DisputeView {
    pub dispute_id: String,
    pub payment_id: String,
    pub order_id: Option<i64>,
    /// none, withdrawn or reinstated
    pub funds: String,
    /// open, won or lost
    pub outcome: String,
    pub currency: String,
    pub withdrawn_minor: i64,
    pub fee_minor: i64,
    pub reinstated_minor: i64,
    /// merchant_payable, or unapplied_funds for a held payment
    pub account: Option<String>,
    /// exceeds_remaining or fee_not_booked
    pub note: Option<String>,
    #[schema(value_type = String)]
    pub updated_at: DateTime<Utc>,
}

/// The disputes of one payment, oldest first: one lookup of `idx_payment_disputes_payment`.
pub fn of_payment_query<'a>(
    merchant_id: i64,
    provider: &'a str,
    payment_id: &'a str,
) -> payment_disputes::BoxedQuery<
    'a,
    diesel::pg::Pg,
    diesel::dsl::AsSelect<DisputeView, diesel::pg::Pg>,
> {
    payment_disputes::table
        .filter(payment_disputes::merchant_id.eq(merchant_id))
        .filter(payment_disputes::provider.eq(provider))
        .filter(payment_disputes::payment_id.eq(payment_id))
        .order(payment_disputes::id.asc())
        .select(DisputeView::as_select())
        .into_boxed()
}

/// A dispute finance must look at, as `GET /admin/attention` shows it.
#[derive(Debug, Clone, serde::Serialize, QueryableByName, utoipa::ToSchema)]
pub struct DisputeAttention {
    #[diesel(sql_type = BigInt)]
    pub merchant_id: i64,
    #[diesel(sql_type = Text)]
    pub provider: String,
    #[diesel(sql_type = Text)]
    pub dispute_id: String,
    #[diesel(sql_type = Text)]
    pub payment_id: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub order_id: Option<i64>,
    /// none, withdrawn or reinstated
    #[diesel(sql_type = Text)]
    pub funds: String,
    /// open, won or lost
    #[diesel(sql_type = Text)]
    pub outcome: String,
    #[diesel(sql_type = Text)]
    pub currency: String,
    #[diesel(sql_type = BigInt)]
    pub withdrawn_minor: i64,
    #[diesel(sql_type = BigInt)]
    pub fee_minor: i64,
    #[diesel(sql_type = BigInt)]
    pub reinstated_minor: i64,
    /// Why it is listed: `exceeds_remaining` (its withdrawal took more than remained of the
    /// payment), `fee_not_booked` (its fee is in another currency and not in the ledger),
    /// `won_not_reinstated` (closed won, the funds not all given back yet), or `open` (not closed:
    /// the merchant may answer it)
    #[diesel(sql_type = Text)]
    pub reason: String,
    #[diesel(sql_type = Timestamptz)]
    #[schema(value_type = String)]
    pub updated_at: DateTime<Utc>,
}

/// The attention list's statement ($1 limit): newest first from the partial index
/// `idx_payment_disputes_attention_v2` (its predicate, verbatim), never a scan of every dispute.
pub const ATTENTION_SQL: &str = "SELECT d.merchant_id, d.provider, d.dispute_id, d.payment_id, d.order_id, d.funds, \
            d.outcome, d.currency, d.withdrawn_minor, d.fee_minor, d.reinstated_minor, \
            CASE WHEN d.note IS NOT NULL THEN d.note \
                 WHEN d.outcome = 'won' THEN 'won_not_reinstated' \
                 ELSE 'open' END AS reason, \
            d.updated_at \
     FROM payment_disputes d \
     WHERE d.outcome = 'open' OR d.note IS NOT NULL \
        OR (d.outcome = 'won' AND d.reinstated_minor < d.withdrawn_minor) \
     ORDER BY d.updated_at DESC, d.id DESC \
     LIMIT $1";

impl DisputeAttention {
    /// The newest `limit` disputes that are open, closed won with their funds not all back, or
    /// carry a note.
    pub async fn newest(conn: &mut AsyncPgConnection, limit: i64) -> QueryResult<Vec<Self>> {
        diesel::sql_query(ATTENTION_SQL)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip_through_their_text() {
        for f in [
            DisputeFunds::None,
            DisputeFunds::Withdrawn,
            DisputeFunds::Reinstated,
        ] {
            assert_eq!(DisputeFunds::parse(f.as_str()), Some(f));
        }
        for o in [
            DisputeOutcome::Open,
            DisputeOutcome::Won,
            DisputeOutcome::Lost,
        ] {
            assert_eq!(DisputeOutcome::parse(o.as_str()), Some(o));
        }
        for n in [DisputeNote::ExceedsRemaining, DisputeNote::FeeNotBooked] {
            assert_eq!(DisputeNote::parse(n.as_str()), Some(n));
        }
        assert_eq!(DisputeOutcome::parse("closed"), None);
    }
}
