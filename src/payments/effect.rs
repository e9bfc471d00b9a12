//! A plan's writes, as the parameters of `payment_apply` (migration 000007): the order's
//! status move, the payment's write and the ledger transfer, each guarded in SQL by the state
//! the plan was made for. Every path (general, one-statement, batched) sends an [`Effect`]
//! built by `Plan::effect` (in [`super::state`]), so what a plan writes is decided in one
//! place; this file only knows the parameters, so the SQL paths need not know the planner.

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
        Self {
            kind: Some(kind.as_str()),
            account_a: Some(entries.account_a),
            amount_a: Some(entries.amount_a),
            account_b: Some(entries.account_b),
            amount_b: Some(entries.amount_b),
            ..self
        }
    }

    /// The first 18 parameters of `payment_apply`, in its order, comma-separated (its
    /// notification's, `notify` and `reason`, come last in each routine; see the callers).
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
}
