//! Disputes in the state machine: what a withdrawal, a reinstatement or a close does to a
//! payment, its order, the dispute's row and the ledger. Pure, like the rest of the planner.
//!
//! The rules (docs/disputes.md):
//! - every dispute event needs its payment captured here, else it waits (`out_of_order`);
//! - a withdrawal posts one `chargeback` (clearing -(amount + fee), the merchant's side
//!   +amount, `dispute_fees` +fee), even when it takes more than remains of the payment (the
//!   provider moved it; the dispute is then noted for finance); a second one for the same
//!   dispute is ignored;
//! - a reinstatement needs its withdrawal (else it waits) and posts one `chargeback_reversal`,
//!   the amount back to the account the withdrawal came from;
//! - a reinstatement that names no dispute (Paddle's) gives back one of the payment's
//!   withdrawals, the same one whatever order the events came in ([`reversal_target`]), once
//!   per reversal id;
//! - a close records won or lost;
//! - the payment's status follows from all of its disputes as they are after the event
//!   ([`status_with`]), never from the path that led there: `charged_back` while one closed
//!   lost holds funds back, `disputed` while an open one does, else what its refunds make it
//!   (a dispute closed won holds nothing back, even before its funds are all back). Its order
//!   follows. A held payment stays held and no order moves for it: its money was never the
//!   order's.

use crate::ledger::{Entries, MerchantAccount, TransferKind};
use crate::money::{AmountMinor, Currency};
use crate::orders::model::{OrderMove, OrderState, OrderStatus};
use crate::payments::dispute::{
    DisputeFunds, DisputeNote, DisputeOutcome, DisputeRecord, DisputeState,
};
use crate::payments::effect::{DisputeWrite, Effect};
use crate::payments::event::{DisputeChange, DisputeResult};
use crate::payments::model::{PaymentState, PaymentStatus};

/// Why an applied withdrawal is in front of finance (its ack's reason).
pub const EXCEEDS_REMAINING: &str = "withdrawal_exceeds_remaining";
pub const FEE_NOT_BOOKED: &str = "fee_not_booked";

/// The ids a dispute event names.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub payment_id: &'a str,
    pub dispute_id: &'a str,
}

/// What a dispute event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputePlan {
    pub dispute_id: String,
    /// The payment's status, refunded total and dispute amount as read (the writer's guard),
    /// and as the plan leaves them.
    pub payment_from: PaymentStatus,
    pub payment_to: PaymentStatus,
    pub refunded_minor: i64,
    pub disputed_from: i64,
    pub disputed_to: i64,
    /// The order the payment is applied to (`None` for a held payment), and its move.
    pub order_id: Option<i64>,
    pub order_move: Option<OrderMove>,
    /// The payment's currency: every amount of the dispute is in it.
    pub currency: String,
    pub posting: Option<DisputePosting>,
    /// The dispute's funds and outcome as read (`None`: no row yet), and its row afterwards.
    pub dispute_from: Option<(DisputeFunds, DisputeOutcome)>,
    pub dispute_to: DisputeRecord,
    /// The id of the reversal that gives this dispute's funds back without naming it.
    pub reinstated_by: Option<String>,
    /// Why the applied event is in front of finance, if it is.
    pub reason: Option<&'static str>,
}

/// What a dispute event does: a plan to apply, or how it is answered without writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Apply(Box<DisputePlan>),
    Ignore(&'static str),
    Reject(&'static str),
    /// Needs an event not seen yet: nothing is stored, the provider retries later.
    Wait(&'static str),
}

/// The transfer a dispute event posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputePosting {
    Chargeback {
        amount_minor: i64,
        fee_minor: i64,
        account: MerchantAccount,
    },
    Reversal {
        amount_minor: i64,
        account: MerchantAccount,
    },
}

impl DisputePosting {
    /// The amount moved for the merchant (a chargeback's fee apart).
    pub fn amount_minor(self) -> i64 {
        match self {
            DisputePosting::Chargeback { amount_minor, .. }
            | DisputePosting::Reversal { amount_minor, .. } => amount_minor,
        }
    }
}

/// The disputes a dispute event's plan reads, under its payment's lock: the one the event
/// names (by its id, whichever payment's it is), and every dispute of the event's payment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disputes<'a>(pub &'a [DisputeState]);

impl<'a> Disputes<'a> {
    fn named(self, dispute_id: &str) -> Option<&'a DisputeState> {
        self.0.iter().find(|d| d.dispute_id == dispute_id)
    }

    fn of_payment(self, payment_id: &'a str) -> impl Iterator<Item = &'a DisputeState> + Clone {
        self.0.iter().filter(move |d| d.payment_id == payment_id)
    }
}

/// Decides what a dispute event does. `payment` and `disputes` as read, under the payment's
/// lock.
pub fn plan_dispute(
    named: Named<'_>,
    change: DisputeChange,
    order: Option<&OrderState>,
    payment: Option<&PaymentState>,
    disputes: Disputes<'_>,
) -> Decision {
    let Some(payment) = payment.filter(|p| p.status.is_captured()) else {
        // A dispute of a payment not captured here yet: let the provider redeliver it later.
        return Decision::Wait("payment_not_captured");
    };
    // The dispute the event changes: the one it names, or for a reversal that names none the
    // withdrawal it gives back.
    let (dispute_id, from, reinstated_by) = match change {
        DisputeChange::FundsReinstatedUnnamed { amount, .. } => {
            if disputes
                .of_payment(named.payment_id)
                .any(|d| d.reinstated_by.as_deref() == Some(named.dispute_id))
            {
                // This reversal gave a withdrawal back already (reported again, another event id).
                return Decision::Ignore("already_applied");
            }
            let Some(target) = reversal_target(
                disputes.of_payment(named.payment_id),
                named.payment_id,
                amount.get(),
            ) else {
                // Its chargeback has not arrived yet: let the provider redeliver this later.
                return Decision::Wait("dispute_not_withdrawn");
            };
            (
                target.dispute_id.as_str(),
                Some(target.record),
                Some(named.dispute_id.to_owned()),
            )
        }
        _ => {
            let seen = disputes.named(named.dispute_id);
            if seen.is_some_and(|d| d.payment_id != named.payment_id) {
                return Decision::Reject("dispute_payment_mismatch");
            }
            if let (None, DisputeChange::FundsWithdrawn { amount, .. }) = (seen, change)
                && legacy_withdrawal(disputes, named.payment_id, amount.get())
            {
                return Decision::Ignore("already_applied");
            }
            (named.dispute_id, seen.map(|d| d.record), None)
        }
    };
    let record = from.unwrap_or(DisputeRecord::NEW);
    let step = match change {
        DisputeChange::FundsWithdrawn {
            amount,
            fee_minor,
            currency,
            fee_in_other_currency,
        } => withdraw(
            payment,
            record,
            amount,
            fee_minor,
            currency,
            fee_in_other_currency,
        ),
        DisputeChange::FundsReinstated { amount, currency }
        | DisputeChange::FundsReinstatedUnnamed { amount, currency } => {
            reinstate(payment, record, amount, currency)
        }
        DisputeChange::Closed(result) => close(payment, record, result),
    };
    let step = match step {
        Ok(step) => step,
        Err(decision) => return decision,
    };
    // The payment's status follows from every one of its disputes as they will be: the one
    // changed here as the step leaves it, the others as read. So it does not depend on the
    // order in which their events arrived.
    let others = disputes
        .of_payment(named.payment_id)
        .filter(|d| d.dispute_id != dispute_id)
        .map(|d| d.record);
    let payment_to = status_with(payment, others.chain([step.record]));
    let held = payment.status == PaymentStatus::Held;
    let order_id = if held { None } else { payment.order_id };
    Decision::Apply(Box::new(DisputePlan {
        dispute_id: dispute_id.to_owned(),
        payment_from: payment.status,
        payment_to,
        refunded_minor: payment.refunded_minor,
        disputed_from: payment.disputed_minor,
        disputed_to: step.disputed_to,
        order_id,
        order_move: order_following(order, order_id, payment_to),
        currency: payment.currency.clone(),
        posting: step.posting,
        dispute_from: from.map(|r| (r.funds, r.outcome)),
        dispute_to: step.record,
        reinstated_by,
        reason: step.reason,
    }))
}

/// A captured payment's status, given every one of its disputes: `charged_back` while a
/// dispute closed lost holds funds back, else `disputed` while an open one does, else what its
/// refunds make it. A dispute closed won holds nothing back as far as the payment goes, even
/// before (or without) all of its funds coming back: the dispute is over, and what the
/// provider still holds is in `/admin/attention` (`won_not_reinstated`). A held payment stays
/// held: its money was never its order's.
pub(crate) fn status_with(
    payment: &PaymentState,
    disputes: impl IntoIterator<Item = DisputeRecord>,
) -> PaymentStatus {
    if payment.status == PaymentStatus::Held {
        return PaymentStatus::Held;
    }
    let (mut open, mut lost) = (false, false);
    for dispute in disputes {
        if dispute.withdrawn_minor > dispute.reinstated_minor {
            match dispute.outcome {
                DisputeOutcome::Open => open = true,
                DisputeOutcome::Lost => lost = true,
                DisputeOutcome::Won => {}
            }
        }
    }
    if lost {
        PaymentStatus::ChargedBack
    } else if open {
        PaymentStatus::Disputed
    } else {
        PaymentStatus::settled(payment.captured_minor, payment.refunded_minor)
    }
}

/// The withdrawal a reversal that names none gives back: one of the payment's disputes whose
/// funds are withdrawn, of the reversal's own amount, the smallest dispute id first (Paddle's
/// adjustment ids grow with time, so the oldest). A reversal gives a chargeback back whole
/// (Paddle makes one when it wins a contested chargeback, GoCardless's chargebacks are of the
/// whole payment), so none of its amount yet means its chargeback has not arrived: it waits
/// (409) for it. Taking a larger withdrawal in part instead would leave that chargeback's own
/// reversal nothing to take when it came, answered 409 for the provider's whole retry window
/// (a kept simulator case, paddle-124008769698869). The one exception is a dispute recorded
/// before disputes were keyed by their chargeback (named after the payment, or
/// `{payment}:chargeback[:total]`): it may hold several chargebacks, so it takes a smaller
/// reversal in part, after any of the reversal's own amount. The choice depends on the
/// disputes there are, not on the order their events came in.
fn reversal_target<'a>(
    disputes: impl Iterator<Item = &'a DisputeState>,
    payment_id: &str,
    amount: i64,
) -> Option<&'a DisputeState> {
    let legacy = |d: &DisputeState| {
        d.dispute_id == payment_id
            || d.dispute_id
                .strip_prefix(payment_id)
                .is_some_and(|rest| rest.starts_with(":chargeback"))
    };
    disputes
        .filter(|d| {
            d.record.funds == DisputeFunds::Withdrawn
                && (d.record.withdrawn_minor == amount
                    || (legacy(d) && d.record.withdrawn_minor > amount))
        })
        .min_by_key(|d| (d.record.withdrawn_minor != amount, d.dispute_id.clone()))
}

/// Whether the payment has a withdrawal of `amount` under a dispute named after the payment
/// itself: how Paddle's chargebacks were keyed before they were keyed by their adjustment id
/// (migration 000046's version). Such a chargeback reported again under its adjustment id is
/// the same one, posted once; another amount is another chargeback.
fn legacy_withdrawal<'a>(disputes: Disputes<'a>, payment_id: &'a str, amount: i64) -> bool {
    disputes.of_payment(payment_id).any(|d| {
        d.dispute_id == payment_id
            && d.record.funds == DisputeFunds::Withdrawn
            && d.record.withdrawn_minor == amount
    })
}

/// What one dispute event changes, before the parts every event shares are added.
struct Step {
    disputed_to: i64,
    posting: Option<DisputePosting>,
    record: DisputeRecord,
    reason: Option<&'static str>,
}

fn withdraw(
    payment: &PaymentState,
    record: DisputeRecord,
    amount: AmountMinor,
    fee_minor: i64,
    currency: Currency,
    fee_in_other_currency: bool,
) -> Result<Step, Decision> {
    if currency.code() != payment.currency {
        return Err(Decision::Reject("currency_mismatch"));
    }
    let amount = amount.get();
    if record.funds != DisputeFunds::None {
        // The same withdrawal reported again (under another event id) is posted once. Another
        // amount cannot be the same one: money the books cannot take for this dispute, so it
        // is rejected, in front of finance, rather than ignored.
        return Err(if amount == record.withdrawn_minor {
            Decision::Ignore("already_applied")
        } else {
            Decision::Reject("dispute_already_withdrawn")
        });
    }
    let (Some(remaining), Some(disputed_to), Some(_)) = (
        payment.refundable_minor(),
        payment.disputed_minor.checked_add(amount),
        amount.checked_add(fee_minor),
    ) else {
        return Err(Decision::Reject("amount_out_of_range"));
    };
    let held = payment.status == PaymentStatus::Held;
    let exceeds = amount > remaining;
    let (note, reason) = if exceeds {
        (Some(DisputeNote::ExceedsRemaining), Some(EXCEEDS_REMAINING))
    } else if fee_in_other_currency {
        (Some(DisputeNote::FeeNotBooked), Some(FEE_NOT_BOOKED))
    } else {
        (record.note, None)
    };
    let account = if held {
        MerchantAccount::Unapplied
    } else {
        MerchantAccount::Payable
    };
    Ok(Step {
        disputed_to,
        posting: Some(DisputePosting::Chargeback {
            amount_minor: amount,
            fee_minor,
            account,
        }),
        record: DisputeRecord {
            funds: DisputeFunds::Withdrawn,
            withdrawn_minor: amount,
            fee_minor,
            account: Some(account),
            note,
            ..record
        },
        reason,
    })
}

fn reinstate(
    payment: &PaymentState,
    record: DisputeRecord,
    amount: AmountMinor,
    currency: Currency,
) -> Result<Step, Decision> {
    if currency.code() != payment.currency {
        return Err(Decision::Reject("currency_mismatch"));
    }
    let amount = amount.get();
    match record.funds {
        // Its withdrawal has not arrived yet: let the provider redeliver this later.
        DisputeFunds::None => return Err(Decision::Wait("dispute_not_withdrawn")),
        // Reported again: posted once. Another amount (a second partial reinstatement, which
        // the one reversal a dispute posts cannot take) is rejected, in front of finance.
        DisputeFunds::Reinstated if amount == record.reinstated_minor => {
            return Err(Decision::Ignore("already_applied"));
        }
        DisputeFunds::Reinstated => return Err(Decision::Reject("dispute_already_reinstated")),
        DisputeFunds::Withdrawn => {}
    }
    if amount > record.withdrawn_minor {
        return Err(Decision::Reject("reinstatement_exceeds_withdrawal"));
    }
    let Some(disputed_to) = payment
        .disputed_minor
        .checked_sub(amount)
        .filter(|d| *d >= 0)
    else {
        return Err(Decision::Reject("amount_out_of_range"));
    };
    let held = payment.status == PaymentStatus::Held;
    let account = record.account.unwrap_or(if held {
        MerchantAccount::Unapplied
    } else {
        MerchantAccount::Payable
    });
    Ok(Step {
        disputed_to,
        posting: Some(DisputePosting::Reversal {
            amount_minor: amount,
            account,
        }),
        record: DisputeRecord {
            funds: DisputeFunds::Reinstated,
            reinstated_minor: amount,
            ..record
        },
        reason: None,
    })
}

fn close(
    payment: &PaymentState,
    record: DisputeRecord,
    result: DisputeResult,
) -> Result<Step, Decision> {
    let outcome = match result {
        DisputeResult::Won => DisputeOutcome::Won,
        DisputeResult::Lost => DisputeOutcome::Lost,
    };
    if record.outcome == outcome {
        return Err(Decision::Ignore("already_applied"));
    }
    if record.outcome != DisputeOutcome::Open {
        // A provider's final word does not change; the first one stands.
        return Err(Decision::Ignore("dispute_already_closed"));
    }
    Ok(Step {
        disputed_to: payment.disputed_minor,
        posting: None,
        record: DisputeRecord { outcome, ..record },
        reason: None,
    })
}

/// The move of the order a payment is applied to, when its status follows the payment's.
fn order_following(
    order: Option<&OrderState>,
    order_id: Option<i64>,
    payment_to: PaymentStatus,
) -> Option<OrderMove> {
    let order = order.filter(|o| Some(o.id) == order_id)?;
    let to = match payment_to {
        PaymentStatus::Succeeded => OrderStatus::Paid,
        PaymentStatus::PartiallyRefunded => OrderStatus::PartiallyRefunded,
        PaymentStatus::Refunded => OrderStatus::Refunded,
        PaymentStatus::Disputed => OrderStatus::Disputed,
        PaymentStatus::ChargedBack => OrderStatus::ChargedBack,
        PaymentStatus::Pending | PaymentStatus::Failed | PaymentStatus::Held => return None,
    };
    let follows = matches!(
        order.status,
        OrderStatus::Paid
            | OrderStatus::PartiallyRefunded
            | OrderStatus::Refunded
            | OrderStatus::Disputed
            | OrderStatus::ChargedBack
    );
    (follows && order.status != to).then_some(OrderMove {
        order_id: order.id,
        from: order.status,
        to,
    })
}

impl DisputePlan {
    /// The plan's writes, on `base` (its keys, order id, payment status and currency set);
    /// `None` when a chargeback's amount and fee do not fit 64 bits together (the planner
    /// refuses such a plan first).
    pub fn effect(&self, base: Effect, provider: &str) -> Option<Effect> {
        let mut effect = Effect {
            amount_minor: self.posting.map_or(0, DisputePosting::amount_minor),
            refunded_from: Some(self.refunded_minor),
            refunded_to: Some(self.refunded_minor),
            payment_from: Some(self.payment_from.as_str()),
            disputed_from: Some(self.disputed_from),
            disputed_to: Some(self.disputed_to),
            dispute_id: Some(self.dispute_id.clone()),
            dispute: DisputeWrite {
                funds_from: self.dispute_from.map(|(funds, _)| funds.as_str()),
                outcome_from: self.dispute_from.map(|(_, outcome)| outcome.as_str()),
                funds_to: Some(self.dispute_to.funds.as_str()),
                outcome_to: Some(self.dispute_to.outcome.as_str()),
                withdrawn_minor: Some(self.dispute_to.withdrawn_minor),
                fee_minor: Some(self.dispute_to.fee_minor),
                reinstated_minor: Some(self.dispute_to.reinstated_minor),
                account: self.dispute_to.account.map(MerchantAccount::name),
                note: self.dispute_to.note.map(DisputeNote::as_str),
                reinstated_by: self.reinstated_by.clone(),
            },
            ..base
        };
        effect = match self.posting {
            Some(DisputePosting::Chargeback {
                amount_minor,
                fee_minor,
                account,
            }) => {
                let entries = Entries::chargeback(provider, account, amount_minor, fee_minor)?;
                effect.with_entries(TransferKind::Chargeback, entries)
            }
            Some(DisputePosting::Reversal {
                amount_minor,
                account,
            }) => {
                let kind = TransferKind::ChargebackReversal;
                effect.with_entries(kind, Entries::of(kind, provider, account, amount_minor))
            }
            None => effect,
        };
        if let Some(OrderMove { from, to, .. }) = self.order_move {
            effect = effect.moving_order(from.as_str(), to.as_str());
        }
        Some(effect)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payments::event::PaymentEvent;

    /// The decision for a dispute `event` (the planner's entry point, as `state::plan` calls it).
    fn plan(
        event: &PaymentEvent,
        order: Option<&OrderState>,
        payment: Option<&PaymentState>,
        dispute: Option<&DisputeState>,
    ) -> Decision {
        let PaymentEvent::Dispute {
            payment_id,
            dispute_id,
            change,
        } = event
        else {
            panic!("not a dispute event: {event:?}");
        };
        let named = Named {
            payment_id,
            dispute_id,
        };
        let read: Vec<DisputeState> = dispute.into_iter().cloned().collect();
        plan_dispute(named, *change, order, payment, Disputes(&read))
    }

    const CAPTURED: i64 = 5000;

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    fn amount(a: i64) -> AmountMinor {
        AmountMinor::parse(a).unwrap()
    }

    fn order(status: OrderStatus) -> OrderState {
        OrderState {
            id: 7,
            amount_minor: CAPTURED,
            currency: "USD".into(),
            status,
        }
    }

    fn payment(status: PaymentStatus, refunded: i64, disputed: i64) -> PaymentState {
        PaymentState {
            order_id: Some(7),
            status,
            captured_minor: CAPTURED,
            refunded_minor: refunded,
            disputed_minor: disputed,
            currency: "USD".into(),
        }
    }

    fn event(change: DisputeChange) -> PaymentEvent {
        PaymentEvent::Dispute {
            payment_id: "pi_1".into(),
            dispute_id: "du_1".into(),
            change,
        }
    }

    fn withdrawal(a: i64, fee: i64) -> PaymentEvent {
        event(DisputeChange::FundsWithdrawn {
            amount: amount(a),
            fee_minor: fee,
            currency: usd(),
            fee_in_other_currency: false,
        })
    }

    fn reinstatement(a: i64) -> PaymentEvent {
        event(DisputeChange::FundsReinstated {
            amount: amount(a),
            currency: usd(),
        })
    }

    fn closed(result: DisputeResult) -> PaymentEvent {
        event(DisputeChange::Closed(result))
    }

    fn dispute(funds: DisputeFunds, outcome: DisputeOutcome, withdrawn: i64) -> DisputeState {
        DisputeState {
            dispute_id: "du_1".into(),
            payment_id: "pi_1".into(),
            record: DisputeRecord {
                funds,
                outcome,
                withdrawn_minor: withdrawn,
                fee_minor: 1500,
                account: (funds != DisputeFunds::None).then_some(MerchantAccount::Payable),
                ..DisputeRecord::NEW
            },
            reinstated_by: None,
        }
    }

    /// Another dispute of payment `pi_1`, `id`.
    fn another(
        id: &str,
        funds: DisputeFunds,
        outcome: DisputeOutcome,
        withdrawn: i64,
    ) -> DisputeState {
        let mut d = dispute(funds, outcome, withdrawn);
        d.dispute_id = id.into();
        if funds == DisputeFunds::Reinstated {
            d.record.reinstated_minor = withdrawn;
        }
        d
    }

    /// The decision for `event` with these disputes read (the named one among them or not).
    fn plan_with(
        event: &PaymentEvent,
        order: Option<&OrderState>,
        payment: Option<&PaymentState>,
        read: &[DisputeState],
    ) -> Decision {
        let PaymentEvent::Dispute {
            payment_id,
            dispute_id,
            change,
        } = event
        else {
            panic!("not a dispute event: {event:?}");
        };
        let named = Named {
            payment_id,
            dispute_id,
        };
        plan_dispute(named, *change, order, payment, Disputes(read))
    }

    fn planned_with(
        event: &PaymentEvent,
        order: Option<&OrderState>,
        payment: &PaymentState,
        read: &[DisputeState],
    ) -> DisputePlan {
        match plan_with(event, order, Some(payment), read) {
            Decision::Apply(plan) => *plan,
            other => panic!("expected a dispute plan, got {other:?}"),
        }
    }

    fn planned(
        event: &PaymentEvent,
        order: Option<&OrderState>,
        payment: &PaymentState,
        dispute: Option<&DisputeState>,
    ) -> DisputePlan {
        match plan(event, order, Some(payment), dispute) {
            Decision::Apply(plan) => *plan,
            other => panic!("expected a dispute plan, got {other:?}"),
        }
    }

    /// The entries' accounts and amounts of a plan's transfer.
    fn entries(plan: &DisputePlan) -> Vec<(String, i64)> {
        let effect = plan.effect(empty_effect(), "acme").unwrap();
        let mut out = vec![
            (effect.account_a.unwrap(), effect.amount_a.unwrap()),
            (effect.account_b.unwrap(), effect.amount_b.unwrap()),
        ];
        if let (Some(account), Some(amount)) = (effect.account_c, effect.amount_c) {
            out.push((account, amount));
        }
        out
    }

    /// What `Plan::effect` hands a dispute plan before it adds its own writes.
    fn empty_effect() -> Effect {
        Effect {
            merchant_id: 42,
            provider: "acme".into(),
            event_id: "evt".into(),
            payment_id: "pi_1".into(),
            order_id: None,
            order_from: None,
            order_to: None,
            payment_status: "disputed",
            amount_minor: 0,
            currency: "USD".into(),
            refunded_from: None,
            refunded_to: None,
            kind: None,
            refund_id: None,
            account_a: None,
            amount_a: None,
            account_b: None,
            amount_b: None,
            payment_from: None,
            disputed_from: None,
            disputed_to: None,
            dispute_id: None,
            account_c: None,
            amount_c: None,
            dispute: DisputeWrite::default(),
            disputes_exceeded: false,
            notify: false,
            reason: None,
        }
    }

    fn acct(name: &str, amount: i64) -> (String, i64) {
        (name.to_owned(), amount)
    }

    #[test]
    fn a_withdrawal_on_a_captured_payment_charges_the_amount_and_the_fee_and_disputes_the_order() {
        let plan = planned(
            &withdrawal(5000, 1500),
            Some(&order(OrderStatus::Paid)),
            &payment(PaymentStatus::Succeeded, 0, 0),
            None,
        );
        assert_eq!(plan.payment_to, PaymentStatus::Disputed);
        assert_eq!((plan.disputed_from, plan.disputed_to), (0, 5000));
        assert_eq!(
            plan.order_move,
            Some(OrderMove {
                order_id: 7,
                from: OrderStatus::Paid,
                to: OrderStatus::Disputed
            })
        );
        assert_eq!(
            entries(&plan),
            [
                acct("merchant_payable", 5000),
                acct("psp_clearing:acme", -6500),
                acct("dispute_fees", 1500)
            ]
        );
        assert_eq!(plan.dispute_from, None);
        assert_eq!(plan.dispute_to.funds, DisputeFunds::Withdrawn);
        assert_eq!(plan.reason, None);
    }

    #[test]
    fn a_withdrawal_of_a_partially_refunded_payment_within_what_remains_is_not_noted() {
        let plan = planned(
            &withdrawal(3000, 0),
            Some(&order(OrderStatus::PartiallyRefunded)),
            &payment(PaymentStatus::PartiallyRefunded, 2000, 0),
            None,
        );
        assert_eq!(plan.payment_to, PaymentStatus::Disputed);
        assert_eq!(plan.order_move.map(|m| m.to), Some(OrderStatus::Disputed));
        assert_eq!(plan.reason, None);
        assert_eq!(
            entries(&plan),
            [
                acct("merchant_payable", 3000),
                acct("psp_clearing:acme", -3000)
            ],
            "no fee, no third entry"
        );
    }

    #[test]
    fn a_withdrawal_larger_than_what_remains_is_posted_and_noted() {
        let plan = planned(
            &withdrawal(3000, 1500),
            Some(&order(OrderStatus::PartiallyRefunded)),
            &payment(PaymentStatus::PartiallyRefunded, 2500, 0),
            None,
        );
        assert_eq!(plan.reason, Some(EXCEEDS_REMAINING));
        assert_eq!(plan.dispute_to.note, Some(DisputeNote::ExceedsRemaining));
        assert_eq!(plan.disputed_to, 3000);
        assert!(plan.posting.is_some(), "the provider moved it: posted");
    }

    #[test]
    fn a_withdrawal_of_a_refunded_payment_is_posted_noted_and_disputes_it() {
        let plan = planned(
            &withdrawal(5000, 1500),
            Some(&order(OrderStatus::Refunded)),
            &payment(PaymentStatus::Refunded, 5000, 0),
            None,
        );
        assert_eq!(plan.reason, Some(EXCEEDS_REMAINING));
        assert_eq!(plan.payment_to, PaymentStatus::Disputed);
        assert_eq!(plan.order_move.map(|m| m.from), Some(OrderStatus::Refunded));
    }

    #[test]
    fn a_withdrawal_on_a_held_payment_comes_from_unapplied_funds_and_moves_no_order() {
        let plan = planned(
            &withdrawal(5000, 1500),
            Some(&order(OrderStatus::Paid)),
            &payment(PaymentStatus::Held, 0, 0),
            None,
        );
        assert_eq!(plan.payment_to, PaymentStatus::Held);
        assert_eq!((plan.order_id, plan.order_move), (None, None));
        assert_eq!(
            entries(&plan),
            [
                acct("unapplied_funds", 5000),
                acct("psp_clearing:acme", -6500),
                acct("dispute_fees", 1500)
            ]
        );
        assert_eq!(plan.dispute_to.account, Some(MerchantAccount::Unapplied));
    }

    #[test]
    fn a_second_dispute_on_an_already_disputed_payment_adds_to_what_is_held_back() {
        let plan = planned(
            &withdrawal(1000, 0),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 2000),
            None,
        );
        assert_eq!(plan.payment_to, PaymentStatus::Disputed);
        assert_eq!((plan.disputed_from, plan.disputed_to), (2000, 3000));
        assert_eq!(plan.order_move, None, "the order is disputed already");
        assert_eq!(plan.reason, None);
    }

    #[test]
    fn a_second_withdrawal_of_the_same_dispute_is_ignored() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        assert_eq!(
            plan(
                &withdrawal(5000, 1500),
                None,
                Some(&payment(PaymentStatus::Disputed, 0, 5000)),
                Some(&seen)
            ),
            Decision::Ignore("already_applied")
        );
        let back = dispute(DisputeFunds::Reinstated, DisputeOutcome::Won, 5000);
        assert_eq!(
            plan(
                &withdrawal(5000, 1500),
                None,
                Some(&payment(PaymentStatus::Succeeded, 0, 0)),
                Some(&back)
            ),
            Decision::Ignore("already_applied")
        );
    }

    #[test]
    fn a_dispute_of_a_payment_not_captured_here_waits() {
        for event in [
            withdrawal(5000, 0),
            reinstatement(5000),
            closed(DisputeResult::Lost),
        ] {
            assert_eq!(
                plan(&event, None, None, None),
                Decision::Wait("payment_not_captured")
            );
            assert_eq!(
                plan(
                    &event,
                    None,
                    Some(&payment(PaymentStatus::Failed, 0, 0)),
                    None
                ),
                Decision::Wait("payment_not_captured")
            );
        }
    }

    #[test]
    fn a_reinstatement_before_its_withdrawal_waits() {
        let p = payment(PaymentStatus::Succeeded, 0, 0);
        assert_eq!(
            plan(&reinstatement(5000), None, Some(&p), None),
            Decision::Wait("dispute_not_withdrawn")
        );
        let closed_first = dispute(DisputeFunds::None, DisputeOutcome::Won, 0);
        assert_eq!(
            plan(&reinstatement(5000), None, Some(&p), Some(&closed_first)),
            Decision::Wait("dispute_not_withdrawn")
        );
    }

    #[test]
    fn a_reinstatement_gives_the_amount_back_and_returns_payment_and_order_to_before() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        let plan = planned(
            &reinstatement(5000),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 5000),
            Some(&seen),
        );
        assert_eq!(plan.payment_to, PaymentStatus::Succeeded);
        assert_eq!(plan.order_move.map(|m| m.to), Some(OrderStatus::Paid));
        assert_eq!(plan.disputed_to, 0);
        assert_eq!(
            entries(&plan),
            [
                acct("psp_clearing:acme", 5000),
                acct("merchant_payable", -5000)
            ],
            "the amount back, not the fee"
        );
        assert_eq!(
            plan.dispute_from,
            Some((DisputeFunds::Withdrawn, DisputeOutcome::Open))
        );
        assert_eq!(plan.dispute_to.reinstated_minor, 5000);
    }

    #[test]
    fn a_reinstatement_returns_a_partially_refunded_payment_to_partially_refunded() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Won, 3000);
        let plan = planned(
            &reinstatement(3000),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 1000, 3000),
            Some(&seen),
        );
        assert_eq!(plan.payment_to, PaymentStatus::PartiallyRefunded);
        assert_eq!(
            plan.order_move.map(|m| m.to),
            Some(OrderStatus::PartiallyRefunded)
        );
    }

    #[test]
    fn a_reinstatement_while_another_dispute_holds_funds_keeps_the_payment_disputed() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 1000);
        let other = another("du_2", DisputeFunds::Withdrawn, DisputeOutcome::Open, 2000);
        let plan = planned_with(
            &reinstatement(1000),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 3000),
            &[seen, other],
        );
        assert_eq!(plan.payment_to, PaymentStatus::Disputed);
        assert_eq!((plan.disputed_to, plan.order_move), (2000, None));
    }

    #[test]
    fn a_payment_is_charged_back_while_a_lost_dispute_holds_funds_whatever_another_does() {
        let lost = another("du_2", DisputeFunds::Withdrawn, DisputeOutcome::Lost, 2000);
        // An open dispute's reinstatement: the lost one still holds its funds.
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 1000);
        let plan = planned_with(
            &reinstatement(1000),
            Some(&order(OrderStatus::ChargedBack)),
            &payment(PaymentStatus::ChargedBack, 0, 3000),
            &[seen, lost.clone()],
        );
        assert_eq!(
            (plan.payment_to, plan.order_move),
            (PaymentStatus::ChargedBack, None)
        );
        // A new withdrawal beside it: charged back, not merely disputed.
        let plan = planned_with(
            &withdrawal(1000, 0),
            Some(&order(OrderStatus::ChargedBack)),
            &payment(PaymentStatus::ChargedBack, 0, 2000),
            &[lost],
        );
        assert_eq!(plan.payment_to, PaymentStatus::ChargedBack);
    }

    #[test]
    fn a_partial_reinstatement_keeps_the_dispute_open_until_it_closes_won_then_the_payment_is_paid_again()
     {
        // 5000 withdrawn, 3000 back: still disputed while the dispute is open.
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        let plan = planned(
            &reinstatement(3000),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 5000),
            Some(&seen),
        );
        assert_eq!(
            (plan.payment_to, plan.disputed_to, plan.order_move),
            (PaymentStatus::Disputed, 2000, None)
        );
        // Then it closes won: the dispute is over, the payment and its order are as before.
        let partly = DisputeState {
            record: plan.dispute_to,
            ..seen.clone()
        };
        let plan = planned(
            &closed(DisputeResult::Won),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 2000),
            Some(&partly),
        );
        assert_eq!(
            (plan.payment_to, plan.disputed_to),
            (PaymentStatus::Succeeded, 2000)
        );
        assert_eq!(plan.order_move.map(|m| m.to), Some(OrderStatus::Paid));
        // Closed won first, then the partial reinstatement: the same end.
        let won = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Won, 5000);
        let plan = planned(
            &reinstatement(3000),
            Some(&order(OrderStatus::Paid)),
            &payment(PaymentStatus::Succeeded, 0, 5000),
            Some(&won),
        );
        assert_eq!(
            (plan.payment_to, plan.disputed_to, plan.order_move),
            (PaymentStatus::Succeeded, 2000, None)
        );
        // Closed lost instead: charged back, the 2000 kept.
        let plan = planned(
            &closed(DisputeResult::Lost),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 2000),
            Some(&partly),
        );
        assert_eq!(plan.payment_to, PaymentStatus::ChargedBack);
    }

    fn unnamed_reversal(reversal_id: &str, a: i64) -> PaymentEvent {
        PaymentEvent::Dispute {
            payment_id: "pi_1".into(),
            dispute_id: reversal_id.into(),
            change: DisputeChange::FundsReinstatedUnnamed {
                amount: amount(a),
                currency: usd(),
            },
        }
    }

    #[test]
    fn a_chargeback_keyed_by_its_payment_before_is_not_posted_again_under_its_adjustment_id() {
        // Paddle's chargebacks were keyed by their transaction (the payment id) until they were
        // keyed by their adjustment id: the same chargeback reported again is the same one.
        let legacy = DisputeState {
            dispute_id: "pi_1".into(),
            ..dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000)
        };
        let p = payment(PaymentStatus::Disputed, 0, 5000);
        let read = [legacy];
        assert_eq!(
            plan_with(&withdrawal(5000, 0), None, Some(&p), &read),
            Decision::Ignore("already_applied")
        );
        // Another amount is another chargeback.
        assert!(matches!(
            plan_with(&withdrawal(2000, 0), None, Some(&p), &read),
            Decision::Apply(_)
        ));
    }

    #[test]
    fn a_reversal_naming_no_dispute_gives_back_only_a_withdrawal_of_its_amount_the_oldest_by_id() {
        let big = another("adj_1", DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        let same = another("adj_3", DisputeFunds::Withdrawn, DisputeOutcome::Open, 2000);
        let back = another(
            "adj_0",
            DisputeFunds::Reinstated,
            DisputeOutcome::Open,
            2000,
        );
        let read = [big.clone(), same.clone(), back];
        let plan = planned_with(
            &unnamed_reversal("adj_9", 2000),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 7000),
            &read,
        );
        assert_eq!(plan.dispute_id, "adj_3", "the one of the same amount");
        assert_eq!(plan.reinstated_by.as_deref(), Some("adj_9"));
        assert_eq!(plan.dispute_to.funds, DisputeFunds::Reinstated);
        assert_eq!(
            (plan.disputed_to, plan.payment_to),
            (5000, PaymentStatus::Disputed)
        );
        // Two of its amount: the oldest (smallest id).
        let twin = another("adj_2", DisputeFunds::Withdrawn, DisputeOutcome::Open, 2000);
        let plan = planned_with(
            &unnamed_reversal("adj_9", 2000),
            None,
            &payment(PaymentStatus::Disputed, 0, 9000),
            &[same.clone(), twin, big.clone()],
        );
        assert_eq!(plan.dispute_id, "adj_2");
        // No withdrawal of its amount, only a larger one: it waits for its own chargeback
        // rather than taking the larger one in part, which would leave that one's reversal
        // nothing to take (the simulator's case paddle-124008769698869).
        assert_eq!(
            plan_with(
                &unnamed_reversal("adj_9", 1000),
                None,
                Some(&payment(PaymentStatus::Disputed, 0, 7000)),
                &[same.clone(), big.clone()]
            ),
            Decision::Wait("dispute_not_withdrawn")
        );
        // The same reversal again (another event id): posted once.
        let mut done = same.clone();
        done.record.funds = DisputeFunds::Reinstated;
        done.reinstated_by = Some("adj_9".into());
        let read = [big, done];
        assert_eq!(
            plan_with(
                &unnamed_reversal("adj_9", 2000),
                None,
                Some(&payment(PaymentStatus::Disputed, 0, 5000)),
                &read
            ),
            Decision::Ignore("already_applied")
        );
        // A dispute recorded before disputes were keyed by their chargeback may hold several:
        // it takes a smaller reversal in part.
        let legacy = another(
            "pi_1:chargeback:7000",
            DisputeFunds::Withdrawn,
            DisputeOutcome::Open,
            7000,
        );
        let plan = planned_with(
            &unnamed_reversal("adj_9", 1000),
            None,
            &payment(PaymentStatus::Disputed, 0, 7000),
            &[legacy],
        );
        assert_eq!(plan.dispute_id, "pi_1:chargeback:7000");
        // Only a smaller withdrawal there: it waits for one that can take it, rather than being
        // refused for good by the one that happened to arrive first.
        let small = another("adj_1", DisputeFunds::Withdrawn, DisputeOutcome::Open, 2000);
        assert_eq!(
            plan_with(
                &unnamed_reversal("adj_9", 3000),
                None,
                Some(&payment(PaymentStatus::Disputed, 0, 2000)),
                &[small]
            ),
            Decision::Wait("dispute_not_withdrawn")
        );
        // Before any withdrawal of its payment: it waits for one.
        assert_eq!(
            plan_with(
                &unnamed_reversal("adj_9", 2000),
                None,
                Some(&payment(PaymentStatus::Succeeded, 0, 0)),
                &[]
            ),
            Decision::Wait("dispute_not_withdrawn")
        );
    }

    #[test]
    fn a_reinstatement_of_a_held_payment_goes_back_to_unapplied_funds() {
        let mut seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        seen.record.account = Some(MerchantAccount::Unapplied);
        let plan = planned(
            &reinstatement(5000),
            None,
            &payment(PaymentStatus::Held, 0, 5000),
            Some(&seen),
        );
        assert_eq!(plan.payment_to, PaymentStatus::Held);
        assert_eq!(
            entries(&plan),
            [
                acct("psp_clearing:acme", 5000),
                acct("unapplied_funds", -5000)
            ]
        );
    }

    #[test]
    fn a_reinstatement_above_the_withdrawal_or_repeated_is_not_posted() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 4000);
        let p = payment(PaymentStatus::Disputed, 0, 4000);
        assert_eq!(
            plan(&reinstatement(4001), None, Some(&p), Some(&seen)),
            Decision::Reject("reinstatement_exceeds_withdrawal")
        );
        let mut back = dispute(DisputeFunds::Reinstated, DisputeOutcome::Open, 4000);
        back.record.reinstated_minor = 4000;
        let after = payment(PaymentStatus::Succeeded, 0, 0);
        assert_eq!(
            plan(&reinstatement(4000), None, Some(&after), Some(&back)),
            Decision::Ignore("already_applied")
        );
        // Another amount is not the same reinstatement: money the books cannot take, in
        // front of finance as a rejection, never silently ignored.
        assert_eq!(
            plan(&reinstatement(1000), None, Some(&after), Some(&back)),
            Decision::Reject("dispute_already_reinstated")
        );
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 4000);
        assert_eq!(
            plan(&withdrawal(3000, 0), None, Some(&p), Some(&seen)),
            Decision::Reject("dispute_already_withdrawn")
        );
    }

    #[test]
    fn a_close_lost_while_funds_are_withdrawn_charges_the_payment_and_its_order_back() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        let plan = planned(
            &closed(DisputeResult::Lost),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 5000),
            Some(&seen),
        );
        assert_eq!(plan.payment_to, PaymentStatus::ChargedBack);
        assert_eq!(
            plan.order_move.map(|m| m.to),
            Some(OrderStatus::ChargedBack)
        );
        assert_eq!(plan.posting, None, "a close moves no money");
        assert_eq!(plan.dispute_to.outcome, DisputeOutcome::Lost);
        assert_eq!(plan.disputed_to, 5000);
    }

    #[test]
    fn a_close_before_any_funds_event_is_recorded_and_moves_nothing() {
        for result in [DisputeResult::Won, DisputeResult::Lost] {
            let plan = planned(
                &closed(result),
                Some(&order(OrderStatus::Paid)),
                &payment(PaymentStatus::Succeeded, 0, 0),
                None,
            );
            assert_eq!(plan.payment_to, PaymentStatus::Succeeded, "{result:?}");
            assert_eq!((plan.order_move, plan.posting), (None, None));
            assert_eq!(plan.dispute_to.funds, DisputeFunds::None);
        }
    }

    #[test]
    fn a_withdrawal_after_a_close_lost_charges_back_at_once() {
        let lost = dispute(DisputeFunds::None, DisputeOutcome::Lost, 0);
        let plan = planned(
            &withdrawal(5000, 1500),
            Some(&order(OrderStatus::Paid)),
            &payment(PaymentStatus::Succeeded, 0, 0),
            Some(&lost),
        );
        assert_eq!(plan.payment_to, PaymentStatus::ChargedBack);
        assert_eq!(
            plan.order_move.map(|m| m.to),
            Some(OrderStatus::ChargedBack)
        );
        assert_eq!(plan.dispute_to.outcome, DisputeOutcome::Lost);
    }

    #[test]
    fn a_withdrawal_after_a_close_won_is_booked_and_leaves_the_payment_as_its_refunds_make_it() {
        // Its close came first: the dispute is over, so the withdrawal (posted: the provider
        // moved it) does not dispute the payment; finance sees the funds not back yet.
        let won = dispute(DisputeFunds::None, DisputeOutcome::Won, 0);
        let plan = planned(
            &withdrawal(5000, 0),
            Some(&order(OrderStatus::Paid)),
            &payment(PaymentStatus::Succeeded, 0, 0),
            Some(&won),
        );
        assert!(plan.posting.is_some());
        assert_eq!(
            (plan.payment_to, plan.disputed_to, plan.order_move),
            (PaymentStatus::Succeeded, 5000, None)
        );
    }

    #[test]
    fn a_close_won_while_funds_are_withdrawn_ends_the_dispute_and_the_order_is_paid_again() {
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        let plan = planned(
            &closed(DisputeResult::Won),
            Some(&order(OrderStatus::Disputed)),
            &payment(PaymentStatus::Disputed, 0, 5000),
            Some(&seen),
        );
        assert_eq!(plan.payment_to, PaymentStatus::Succeeded);
        assert_eq!(plan.order_move.map(|m| m.to), Some(OrderStatus::Paid));
        assert_eq!(plan.dispute_to.outcome, DisputeOutcome::Won);
        // Its funds (still withdrawn) are what the provider holds: disputed_minor keeps them.
        assert_eq!(plan.disputed_to, 5000);
    }

    #[test]
    fn a_close_lost_of_a_held_payment_keeps_it_held() {
        let mut seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        seen.record.account = Some(MerchantAccount::Unapplied);
        let plan = planned(
            &closed(DisputeResult::Lost),
            None,
            &payment(PaymentStatus::Held, 0, 5000),
            Some(&seen),
        );
        assert_eq!(plan.payment_to, PaymentStatus::Held);
    }

    #[test]
    fn a_closed_dispute_keeps_its_first_outcome() {
        let won = dispute(DisputeFunds::Reinstated, DisputeOutcome::Won, 5000);
        let p = payment(PaymentStatus::Succeeded, 0, 0);
        assert_eq!(
            plan(&closed(DisputeResult::Won), None, Some(&p), Some(&won)),
            Decision::Ignore("already_applied")
        );
        assert_eq!(
            plan(&closed(DisputeResult::Lost), None, Some(&p), Some(&won)),
            Decision::Ignore("dispute_already_closed")
        );
    }

    #[test]
    fn funds_in_another_currency_than_the_payment_are_rejected() {
        let eur = Currency::parse("EUR").unwrap();
        let p = payment(PaymentStatus::Succeeded, 0, 0);
        let out = event(DisputeChange::FundsWithdrawn {
            amount: amount(5000),
            fee_minor: 0,
            currency: eur,
            fee_in_other_currency: false,
        });
        assert_eq!(
            plan(&out, None, Some(&p), None),
            Decision::Reject("currency_mismatch")
        );
        let seen = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        let back = event(DisputeChange::FundsReinstated {
            amount: amount(5000),
            currency: eur,
        });
        assert_eq!(
            plan(
                &back,
                None,
                Some(&payment(PaymentStatus::Disputed, 0, 5000)),
                Some(&seen)
            ),
            Decision::Reject("currency_mismatch")
        );
    }

    #[test]
    fn a_dispute_id_seen_for_another_payment_is_rejected() {
        let mut other = dispute(DisputeFunds::Withdrawn, DisputeOutcome::Open, 5000);
        other.payment_id = "pi_other".into();
        assert_eq!(
            plan(
                &closed(DisputeResult::Lost),
                None,
                Some(&payment(PaymentStatus::Succeeded, 0, 0)),
                Some(&other)
            ),
            Decision::Reject("dispute_payment_mismatch")
        );
    }

    #[test]
    fn a_fee_in_another_currency_is_left_out_and_noted() {
        let out = event(DisputeChange::FundsWithdrawn {
            amount: amount(5000),
            fee_minor: 0,
            currency: usd(),
            fee_in_other_currency: true,
        });
        let plan = planned(&out, None, &payment(PaymentStatus::Succeeded, 0, 0), None);
        assert_eq!(plan.reason, Some(FEE_NOT_BOOKED));
        assert_eq!(plan.dispute_to.note, Some(DisputeNote::FeeNotBooked));
    }

    #[test]
    fn withdrawn_totals_beyond_64_bits_are_rejected_not_wrapped() {
        let mut p = payment(PaymentStatus::Disputed, 0, i64::MAX - 10);
        p.captured_minor = i64::MAX;
        assert_eq!(
            plan(&withdrawal(1000, 0), None, Some(&p), None),
            Decision::Reject("amount_out_of_range")
        );
    }
}
