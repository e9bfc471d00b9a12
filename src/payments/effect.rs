//! A plan's writes, as the parameters of `payment_apply` (migrations 000007, 000032): the
//! order's status move, the payment's write, the ledger transfer and a dispute's row, each
//! guarded in SQL by the state the plan was made for. Every path (general, one-statement,
//! batched) sends an [`Effect`] built by `Plan::effect` (in [`super::state`]), so what a plan
//! writes is decided in one place; this file only knows the parameters, so the SQL paths need
//! not know the planner.

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::AstPass;
use diesel::sql_types::{BigInt, Nullable, Text};

use crate::ledger::{Entries, MerchantAccount, TransferKind};

/// Where an event comes from: the merchant and the provider whose books it moves, and whether
/// that merchant hears of the changes (it has a notification endpoint).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub notify: bool,
}

/// The writes of one plan for one event, as the parameters of `payment_apply`, every value
/// owned so it can wait in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    pub merchant_id: i64,
    pub provider: String,
    pub event_id: String,
    pub payment_id: String,
    pub order_id: Option<i64>,
    /// The order's status the plan saw and the one it moves to; `None` leaves the order alone.
    pub order_from: Option<&'static str>,
    pub order_to: Option<&'static str>,
    pub payment_status: &'static str,
    /// Captured amount (0 for a failure); for a refund, the refund's amount.
    pub amount_minor: i64,
    pub currency: String,
    /// For a refund: the refunded total the plan read, and the new one.
    pub refunded_from: Option<i64>,
    pub refunded_to: Option<i64>,
    /// The transfer's kind; `None` posts nothing.
    pub kind: Option<&'static str>,
    pub refund_id: Option<String>,
    pub account_a: Option<String>,
    pub amount_a: Option<i64>,
    pub account_b: Option<String>,
    pub amount_b: Option<i64>,
    /// Stage the merchant's notification of what this writes (an order's move, a held capture).
    pub notify: bool,
    /// Why a capture is held, for its notification.
    pub reason: Option<&'static str>,
    // What only the general path writes (refunds and disputes, in `payment_apply`); the
    // one-statement capture never binds these.
    /// For a change of a captured payment: the status the plan read, and the dispute amount
    /// (withdrawn minus reinstated) it read and leaves.
    pub payment_from: Option<&'static str>,
    pub disputed_from: Option<i64>,
    pub disputed_to: Option<i64>,
    /// A dispute transfer's dispute id (each kind posts once per dispute id).
    pub dispute_id: Option<String>,
    /// A chargeback's fee entry.
    pub account_c: Option<String>,
    pub amount_c: Option<i64>,
    /// The dispute's row, as read and as written (all `None`: no dispute to write).
    pub dispute: DisputeWrite,
    /// A refund that, with what the payment's disputes hold back, takes more than was captured
    /// (the provider moved it all the same): the disputes holding funds are noted for finance.
    pub disputes_exceeded: bool,
}

/// A dispute row's write (`payment_disputes_write`): the funds and outcome the plan read
/// (`None`: no row yet), and every value it leaves; `funds_to` `None` writes nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisputeWrite {
    pub funds_from: Option<&'static str>,
    pub outcome_from: Option<&'static str>,
    pub funds_to: Option<&'static str>,
    pub outcome_to: Option<&'static str>,
    pub withdrawn_minor: Option<i64>,
    pub fee_minor: Option<i64>,
    pub reinstated_minor: Option<i64>,
    pub account: Option<&'static str>,
    pub note: Option<&'static str>,
    /// The reversal that gives the dispute's funds back without naming it (Paddle's).
    pub reinstated_by: Option<String>,
}

impl Effect {
    /// Adds the order's move from status `from` to `to`.
    pub fn moving_order(self, from: &'static str, to: &'static str) -> Self {
        Self {
            order_from: Some(from),
            order_to: Some(to),
            ..self
        }
    }

    /// Adds the transfer of `amount_minor` in `currency` against `merchant`'s side.
    pub fn posting(self, kind: TransferKind, merchant: MerchantAccount) -> Self {
        let entries = Entries::of(kind, &self.provider, merchant, self.amount_minor);
        self.with_entries(kind, entries)
    }

    /// Adds a transfer of `kind` with these `entries` (balanced by their constructor).
    pub fn with_entries(self, kind: TransferKind, entries: Entries) -> Self {
        Self {
            kind: Some(kind.as_str()),
            account_a: Some(entries.account_a),
            amount_a: Some(entries.amount_a),
            account_b: Some(entries.account_b),
            amount_b: Some(entries.amount_b),
            account_c: entries.account_c,
            amount_c: entries.amount_c,
            ..self
        }
    }

    /// The 18 parameters every path binds (the one-statement capture's, and the first 18 of
    /// `payment_apply`), in their order, comma-separated; the notification's, `notify` and
    /// `reason`, come last in each routine (see the callers).
    pub fn walk_params<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_bind_param::<BigInt, _>(&self.merchant_id)?;
        for text in [&self.provider, &self.event_id, &self.payment_id] {
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(text)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.order_id)?;
        for status in [&self.order_from, &self.order_to] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(status)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.payment_status)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.amount_minor)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.currency)?;
        for amount in [&self.refunded_from, &self.refunded_to] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<BigInt>, _>(amount)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.kind)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.refund_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.account_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.amount_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.account_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.amount_b)?;
        Ok(())
    }

    /// The 33 parameters of `payment_apply` (migration 000032): the 18 above, then what only
    /// the general path writes.
    pub fn walk_general_params<'b>(&'b self, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        self.walk_params(out)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.payment_from)?;
        for amount in [&self.disputed_from, &self.disputed_to] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<BigInt>, _>(amount)?;
        }
        for text in [&self.dispute_id, &self.account_c] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(text)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Nullable<BigInt>, _>(&self.amount_c)?;
        let d = &self.dispute;
        for text in [&d.funds_from, &d.outcome_from, &d.funds_to, &d.outcome_to] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(text)?;
        }
        for amount in [&d.withdrawn_minor, &d.fee_minor, &d.reinstated_minor] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<BigInt>, _>(amount)?;
        }
        for text in [&d.account, &d.note] {
            out.push_sql(", ");
            out.push_bind_param::<Nullable<Text>, _>(text)?;
        }
        Ok(())
    }
}
