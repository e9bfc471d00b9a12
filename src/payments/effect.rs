//! A plan's writes, as the parameters of `payment_apply` (migration 000007): the order's
//! status move, the payment's write and the ledger transfer, each guarded in SQL by the state
//! the plan was made for. Every path (general, one-statement, batched) sends an [`Effect`]
//! built here, so what a plan writes is decided in one place.

use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::AstPass;
use diesel::sql_types::{BigInt, Nullable, Text};

use super::ack::CallbackOutcome;
use super::state::{OrderMove, PaymentStatus, Plan};
use crate::ledger::{Entries, MerchantAccount, TransferKind};
use crate::orders::model::OrderStatus;

/// Where an event comes from: the merchant and the provider whose books it moves.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
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
}

/// A plan that writes nothing: how it is answered instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoWrites {
    Ignore(&'static str),
    Reject(&'static str),
    /// Nothing is stored; the provider retries later.
    Wait(&'static str),
}

impl Effect {
    /// The writes of `plan`, or how a plan that writes nothing is answered.
    pub fn of(
        plan: &Plan,
        source: Source<'_>,
        event_id: &str,
        payment_id: &str,
        refund_id: Option<&str>,
    ) -> Result<Self, NoWrites> {
        let base = |order_id, status: PaymentStatus, amount_minor, currency: &str| Effect {
            merchant_id: source.merchant_id,
            provider: source.provider.to_owned(),
            event_id: event_id.to_owned(),
            payment_id: payment_id.to_owned(),
            order_id,
            order_from: None,
            order_to: None,
            payment_status: status.as_str(),
            amount_minor,
            currency: currency.to_owned(),
            refunded_from: None,
            refunded_to: None,
            kind: None,
            refund_id: None,
            account_a: None,
            amount_a: None,
            account_b: None,
            amount_b: None,
        };
        let effect = match plan {
            &Plan::Capture {
                order_id,
                amount_minor,
                currency,
            } => base(
                Some(order_id),
                PaymentStatus::Succeeded,
                amount_minor,
                currency.code(),
            )
            .moving_order(OrderStatus::PendingPayment, OrderStatus::Paid)
            .posting(TransferKind::Payment, MerchantAccount::Payable),
            &Plan::Hold {
                order_id,
                amount_minor,
                currency,
                ..
            } => base(order_id, PaymentStatus::Held, amount_minor, currency.code())
                .posting(TransferKind::Payment, MerchantAccount::Unapplied),
            Plan::RecordFailure { order_id, currency } => {
                base(Some(*order_id), PaymentStatus::Failed, 0, currency)
            }
            &Plan::Refund {
                amount_minor,
                refunded_before,
                refunded_total,
                payment_to,
                order_move,
                from_unapplied,
                currency,
            } => {
                let merchant = if from_unapplied {
                    MerchantAccount::Unapplied
                } else {
                    MerchantAccount::Payable
                };
                let mut effect = Effect {
                    refunded_from: Some(refunded_before),
                    refunded_to: Some(refunded_total),
                    refund_id: refund_id.map(str::to_owned),
                    ..base(
                        order_move.map(|m| m.order_id),
                        payment_to,
                        amount_minor,
                        currency.code(),
                    )
                }
                .posting(TransferKind::Refund, merchant);
                if let Some(OrderMove { from, to, .. }) = order_move {
                    effect = effect.moving_order(from, to);
                }
                effect
            }
            Plan::Ignore(reason) => return Err(NoWrites::Ignore(reason)),
            Plan::Reject(reason) => return Err(NoWrites::Reject(reason)),
            Plan::OutOfOrder(reason) => return Err(NoWrites::Wait(reason)),
        };
        Ok(effect)
    }

    fn moving_order(self, from: OrderStatus, to: OrderStatus) -> Self {
        Self {
            order_from: Some(from.as_str()),
            order_to: Some(to.as_str()),
            ..self
        }
    }

    /// Adds the transfer of `amount_minor` in `currency` against `merchant`'s side.
    fn posting(self, kind: TransferKind, merchant: MerchantAccount) -> Self {
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

    /// What the event did once `plan`'s effect is applied with `transfer_id`.
    pub fn outcome(plan: &Plan, transfer_id: Option<i64>) -> CallbackOutcome {
        match plan {
            Plan::Hold { reason, .. } => CallbackOutcome::held(reason, transfer_id),
            _ => CallbackOutcome::applied(transfer_id),
        }
    }

    /// The 18 parameters of `payment_apply`, in its order, comma-separated.
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
