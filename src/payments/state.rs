//! The payment state machine: given an event and what the database holds, what to do.
//! Pure, so every rule is unit-tested without a database. Money a provider reports captured is
//! never left outside the books: what cannot be applied to its order is held.

mod dispute;

use dispute::Decision;
pub use dispute::{DisputePlan, DisputePosting, Disputes};

use super::ack::CallbackOutcome;
use super::effect::{DisputeWrite, Effect, Source};
use super::event::{PaymentEvent, RefundAmount};
use super::model::{PaymentState, PaymentStatus};
use crate::ledger::{MerchantAccount, TransferKind};
use crate::money::Currency;
use crate::orders::model::OrderStatus;
pub use crate::orders::model::{OrderMove, OrderState};

/// Why an event under an id that posted another body was held or rejected.
pub const EVENT_ID_REUSED: &str = "event_id_reused";
/// Why an applied refund is in front of finance: with what disputes hold back it takes more
/// than was captured.
pub const REFUND_EXCEEDS_REMAINING: &str = "refund_exceeds_remaining";
/// Why a refund the provider reported is held: with the refunds the books already hold, it
/// takes more than was captured (a refund given back, not told yet, made room for it at the
/// provider). The provider moved the money, so it is in the books, in unapplied funds.
pub const REFUND_EXCEEDS_CAPTURED: &str = "refund_exceeds_captured";
/// Why an applied event put a refund's money back: the provider gave the refund back (it
/// failed, was cancelled, or came back from the bank), so the customer was not paid.
pub const REFUND_RETURNED: &str = "refund_returned";

pub use crate::ledger::BookedRefund;

/// What an event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Capture: payment succeeded, order paid, one `payment` transfer to the merchant.
    Capture {
        order_id: i64,
        amount_minor: i64,
        currency: Currency,
    },
    /// Captured money that cannot be applied to its order: one `payment` transfer into
    /// unapplied funds, the payment stored `held`, the order untouched.
    Hold {
        reason: &'static str,
        order_id: Option<i64>,
        amount_minor: i64,
        currency: Currency,
    },
    /// Record a failed attempt; the order stays payable, nothing is posted.
    RecordFailure { order_id: i64, currency: String },
    /// Refund `amount_minor` more: one `refund` transfer, against unapplied funds when the
    /// payment is held (no order changes then).
    Refund {
        change: RefundChange,
        /// With what the payment's disputes hold back, the refunds now take more than was
        /// captured: the provider moved it (a refund made before a chargeback can arrive after
        /// it), so it is booked, and the disputes holding funds are noted for finance.
        exceeds_remaining: bool,
    },
    /// A refund that, with what the books refunded, exceeds the capture: one `refund` against
    /// unapplied funds (held, for finance); the payment's refunded total and its order stay.
    RefundHeld {
        amount_minor: i64,
        currency: Currency,
        /// The payment as read (the writer's guard; it does not change).
        payment: PaymentStatus,
        refunded_minor: i64,
        disputed_minor: i64,
    },
    /// A refund given back: one `refund_reversal`, the exact inverse of the refund (into
    /// clearing, back to the account it was refunded from); the payment's refunded total goes
    /// down by it, so it can be refunded again, and its order's status follows.
    RefundReturn(RefundChange),
    /// A dispute's withdrawal, reinstatement or close (see [`dispute`]).
    Dispute(Box<DisputePlan>),
    /// Deterministic no-op (stale or superseded event), acknowledged.
    Ignore(&'static str),
    /// Deterministic business-rule violation, acknowledged without a ledger change.
    Reject(&'static str),
    /// Needs an event not seen yet: nothing is stored, the provider retries later.
    OutOfOrder(&'static str),
}

/// A plan that writes nothing: how it is answered instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoWrites {
    Ignore(&'static str),
    Reject(&'static str),
    /// Nothing is stored; the provider retries later.
    Wait(&'static str),
}

/// What a refund, or its return, changes: the payment's refunded total and status, and its
/// order's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundChange {
    pub amount_minor: i64,
    pub refunded_before: i64,
    pub refunded_total: i64,
    /// The payment's status and dispute amount the plan read (the writer's guard), and its
    /// status after.
    pub payment_from: PaymentStatus,
    pub disputed_minor: i64,
    pub payment_to: PaymentStatus,
    pub order_move: Option<OrderMove>,
    pub from_unapplied: bool,
    pub currency: Currency,
}

impl RefundChange {
    /// The `kind` transfer of the amount between clearing and the merchant's account it was
    /// refunded from (unapplied funds for a held payment), with the guards and moves above, on
    /// the event's `base` effect.
    fn effect(
        &self,
        base: impl Fn(Option<i64>, PaymentStatus, i64, &str) -> Effect,
        refund_id: Option<&str>,
        kind: TransferKind,
    ) -> Effect {
        let merchant = if self.from_unapplied {
            MerchantAccount::Unapplied
        } else {
            MerchantAccount::Payable
        };
        let mut effect = Effect {
            refunded_from: Some(self.refunded_before),
            refunded_to: Some(self.refunded_total),
            payment_from: Some(self.payment_from.as_str()),
            disputed_from: Some(self.disputed_minor),
            disputed_to: Some(self.disputed_minor),
            refund_id: refund_id.map(str::to_owned),
            ..base(
                self.order_move.map(|m| m.order_id),
                self.payment_to,
                self.amount_minor,
                self.currency.code(),
            )
        }
        .posting(kind, merchant);
        if let Some(OrderMove { from, to, .. }) = self.order_move {
            effect = effect.moving_order(from.as_str(), to.as_str());
        }
        effect
    }
}

impl Plan {
    /// The writes of `plan`, or how a plan that writes nothing is answered.
    pub fn effect(
        &self,
        source: Source<'_>,
        event_id: &str,
        payment_id: &str,
        refund_id: Option<&str>,
    ) -> Result<Effect, NoWrites> {
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
            notify: source.notify,
            reason: None,
            payment_from: None,
            disputed_from: None,
            disputed_to: None,
            dispute_id: None,
            account_c: None,
            amount_c: None,
            dispute: DisputeWrite::default(),
            disputes_exceeded: false,
        };
        let effect = match self {
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
            .moving_order(
                OrderStatus::PendingPayment.as_str(),
                OrderStatus::Paid.as_str(),
            )
            .posting(TransferKind::Payment, MerchantAccount::Payable),
            &Plan::Hold {
                reason,
                order_id,
                amount_minor,
                currency,
            } => Effect {
                reason: Some(reason),
                ..base(order_id, PaymentStatus::Held, amount_minor, currency.code())
            }
            .posting(TransferKind::Payment, MerchantAccount::Unapplied),
            Plan::RecordFailure { order_id, currency } => {
                base(Some(*order_id), PaymentStatus::Failed, 0, currency)
            }
            Plan::Refund {
                change,
                exceeds_remaining,
            } => Effect {
                disputes_exceeded: *exceeds_remaining,
                ..change.effect(base, refund_id, TransferKind::Refund)
            },
            &Plan::RefundHeld {
                amount_minor,
                currency,
                payment,
                refunded_minor,
                disputed_minor,
            } => Effect {
                refunded_from: Some(refunded_minor),
                refunded_to: Some(refunded_minor),
                payment_from: Some(payment.as_str()),
                disputed_from: Some(disputed_minor),
                disputed_to: Some(disputed_minor),
                refund_id: refund_id.map(str::to_owned),
                reason: Some(REFUND_EXCEEDS_CAPTURED),
                ..base(None, payment, amount_minor, currency.code())
            }
            .posting(TransferKind::Refund, MerchantAccount::Unapplied),
            Plan::RefundReturn(change) => Effect {
                reason: Some(REFUND_RETURNED),
                ..change.effect(base, refund_id, TransferKind::RefundReversal)
            },
            Plan::Dispute(dispute) => {
                let base = base(dispute.order_id, dispute.payment_to, 0, &dispute.currency);
                return dispute
                    .effect(base, source.provider)
                    .ok_or(NoWrites::Reject("amount_out_of_range"));
            }
            Plan::Ignore(reason) => return Err(NoWrites::Ignore(reason)),
            Plan::Reject(reason) => return Err(NoWrites::Reject(reason)),
            Plan::OutOfOrder(reason) => return Err(NoWrites::Wait(reason)),
        };
        Ok(effect)
    }

    /// What this plan becomes when its event id already posted a transfer for another body: the
    /// provider reused the id (after the gateway's record of the first event expired) for an
    /// event the books do not have. Captured money is held (reason `event_id_reused`) so it is
    /// in the books and in front of finance, never dropped nor applied on an ambiguous id; a
    /// refund is rejected with that reason (the provider moved money back, finance decides what
    /// it answers). A plan that posts no transfer cannot collide and stays as it is.
    pub fn for_reused_event_id(&self) -> Plan {
        match self {
            &Plan::Capture {
                order_id,
                amount_minor,
                currency,
            } => Plan::Hold {
                reason: EVENT_ID_REUSED,
                order_id: Some(order_id),
                amount_minor,
                currency,
            },
            &Plan::Hold {
                order_id,
                amount_minor,
                currency,
                ..
            } => Plan::Hold {
                reason: EVENT_ID_REUSED,
                order_id,
                amount_minor,
                currency,
            },
            Plan::Refund { .. } | Plan::RefundHeld { .. } | Plan::RefundReturn { .. } => {
                Plan::Reject(EVENT_ID_REUSED)
            }
            // Money moving out on an ambiguous id, as for a refund; a close posts no transfer.
            Plan::Dispute(dispute) if dispute.posting.is_some() => Plan::Reject(EVENT_ID_REUSED),
            other => other.clone(),
        }
    }

    /// What the event did once this plan's effect is applied with `transfer_id`.
    pub fn outcome(&self, transfer_id: Option<i64>) -> CallbackOutcome {
        match self {
            Plan::Hold { reason, .. } => CallbackOutcome::held(reason, transfer_id),
            Plan::RefundHeld { .. } => CallbackOutcome::held(REFUND_EXCEEDS_CAPTURED, transfer_id),
            Plan::RefundReturn { .. } => CallbackOutcome {
                reason: Some(REFUND_RETURNED),
                ..CallbackOutcome::applied(transfer_id)
            },
            Plan::Dispute(dispute) => CallbackOutcome {
                reason: dispute.reason,
                ..CallbackOutcome::applied(transfer_id)
            },
            Plan::Refund {
                exceeds_remaining: true,
                ..
            } => CallbackOutcome {
                reason: Some(REFUND_EXCEEDS_REMAINING),
                ..CallbackOutcome::applied(transfer_id)
            },
            _ => CallbackOutcome::applied(transfer_id),
        }
    }
}

/// The capture `event` plans against the state it expects, or `None` when the event is not a
/// capture of a named order (refunds, failures and holds depend on state the gateway must read).
pub fn expected_capture(event: &PaymentEvent) -> Option<Plan> {
    let PaymentEvent::Succeeded {
        order_id: Some(order_id),
        amount,
        currency,
        ..
    } = event
    else {
        return None;
    };
    let expected_order = OrderState {
        id: *order_id,
        amount_minor: amount.get(),
        currency: currency.code().to_owned(),
        status: OrderStatus::PendingPayment,
    };
    match plan(
        event,
        Some(&expected_order),
        None,
        Disputes::default(),
        None,
    ) {
        capture @ Plan::Capture { .. } => Some(capture),
        _ => None,
    }
}

/// Decides what `event` does to `order`, `payment` and, for a dispute event, the `disputes`
/// it names and its payment has, for a returned refund the `refund` it names (any of them may
/// be unknown).
pub fn plan(
    event: &PaymentEvent,
    order: Option<&OrderState>,
    payment: Option<&PaymentState>,
    disputes: Disputes<'_>,
    refund: Option<BookedRefund>,
) -> Plan {
    match event {
        PaymentEvent::Succeeded {
            amount, currency, ..
        } => plan_capture(amount.get(), *currency, order, payment),
        PaymentEvent::Failed { .. } => {
            let Some(order) = order else {
                return Plan::Reject("unknown_order");
            };
            match payment.map(|p| p.status) {
                Some(status) if status.is_captured() => Plan::Ignore("stale_event"),
                Some(PaymentStatus::Failed) => Plan::Ignore("already_failed"),
                _ => Plan::RecordFailure {
                    order_id: order.id,
                    currency: order.currency.clone(),
                },
            }
        }
        PaymentEvent::Refunded {
            refund, currency, ..
        } => plan_refund(*refund, *currency, order, payment),
        PaymentEvent::RefundReturned {
            reported_minor,
            unnamed,
            ..
        } => plan_refund_return(
            order,
            payment,
            refund.unwrap_or_default(),
            *reported_minor,
            *unnamed,
        ),
        PaymentEvent::Dispute {
            payment_id,
            dispute_id,
            change,
        } => {
            let named = dispute::Named {
                payment_id,
                dispute_id,
            };
            match dispute::plan_dispute(named, *change, order, payment, disputes) {
                Decision::Apply(plan) => Plan::Dispute(plan),
                Decision::Ignore(reason) => Plan::Ignore(reason),
                Decision::Reject(reason) => Plan::Reject(reason),
                Decision::Wait(reason) => Plan::OutOfOrder(reason),
            }
        }
    }
}

fn plan_capture(
    amount_minor: i64,
    currency: Currency,
    order: Option<&OrderState>,
    payment: Option<&PaymentState>,
) -> Plan {
    if payment.is_some_and(|p| p.status.is_captured()) {
        // One provider payment moves money once, whatever order a later event names.
        return Plan::Ignore("payment_already_captured");
    }
    let hold = |reason, order_id| Plan::Hold {
        reason,
        order_id,
        amount_minor,
        currency,
    };
    let Some(order) = order else {
        return hold("unknown_order", None);
    };
    if order.currency != currency.code() {
        return hold("currency_mismatch", Some(order.id));
    }
    if order.amount_minor != amount_minor {
        return hold("amount_mismatch", Some(order.id));
    }
    if order.status != OrderStatus::PendingPayment {
        return hold("order_already_paid", Some(order.id));
    }
    Plan::Capture {
        order_id: order.id,
        amount_minor,
        currency,
    }
}

/// A refund given back: what the books refunded under its id (or, booked under none, the
/// amount the provider reports) comes back, once, as the refund's exact inverse.
fn plan_refund_return(
    order: Option<&OrderState>,
    payment: Option<&PaymentState>,
    refund: BookedRefund,
    reported_minor: Option<i64>,
    unnamed: bool,
) -> Plan {
    let Some(payment) = payment.filter(|p| p.status.is_captured()) else {
        return Plan::OutOfOrder("payment_not_captured");
    };
    if refund.reversed {
        return Plan::Ignore("already_applied");
    }
    let booked = if unnamed {
        reported_minor
    } else {
        refund.refunded_minor
    };
    let Some(amount_minor) = booked.filter(|a| *a > 0) else {
        // The refund itself comes first (the provider reports a failure after the refund):
        // until it is in the books there is nothing to give back, and a retry can help (every
        // refund a provider reports is booked, held when it exceeds the capture).
        return Plan::OutOfOrder("refund_not_booked");
    };
    let Some(currency) = Currency::parse(&payment.currency) else {
        return Plan::Reject("currency_mismatch");
    };
    let held = payment.status == PaymentStatus::Held;
    // On a held payment every refund went to unapplied funds, counted or not; one that
    // exceeded the capture never counted, and when another's return has already taken the
    // count down, what is left counted is less than this refund: it is given back uncounted.
    if refund.held && (!held || payment.refunded_minor < amount_minor) {
        // A refund held for exceeding the capture never counted in the refunded total: it
        // comes back to unapplied funds, where it went.
        return Plan::RefundReturn(RefundChange {
            amount_minor,
            refunded_before: payment.refunded_minor,
            refunded_total: payment.refunded_minor,
            payment_from: payment.status,
            disputed_minor: payment.disputed_minor,
            payment_to: payment.status,
            order_move: None,
            from_unapplied: true,
            currency,
        });
    }
    let Some(refunded_total) = payment
        .refunded_minor
        .checked_sub(amount_minor)
        .filter(|t| *t >= 0)
    else {
        return Plan::Reject("amount_out_of_range");
    };
    let payment_to = if held || payment.status.is_in_dispute() {
        payment.status
    } else {
        PaymentStatus::settled(payment.captured_minor, refunded_total)
    };
    let order_move = order
        .filter(|o| {
            !held
                && payment.order_id == Some(o.id)
                && matches!(
                    o.status,
                    OrderStatus::Refunded | OrderStatus::PartiallyRefunded
                )
        })
        .map(|o| OrderMove {
            order_id: o.id,
            from: o.status,
            to: if refunded_total == 0 {
                OrderStatus::Paid
            } else {
                OrderStatus::PartiallyRefunded
            },
        })
        .filter(|m| m.from != m.to);
    Plan::RefundReturn(RefundChange {
        amount_minor,
        refunded_before: payment.refunded_minor,
        refunded_total,
        payment_from: payment.status,
        disputed_minor: payment.disputed_minor,
        payment_to,
        order_move,
        from_unapplied: held,
        currency,
    })
}

fn plan_refund(
    refund: RefundAmount,
    currency: Currency,
    order: Option<&OrderState>,
    payment: Option<&PaymentState>,
) -> Plan {
    let Some(payment) = payment.filter(|p| p.status.is_captured()) else {
        // A refund before its payment: let the provider redeliver it later.
        return Plan::OutOfOrder("payment_not_captured");
    };
    if payment.currency != currency.code() {
        return Plan::Reject("currency_mismatch");
    }
    let amount_minor = match refund {
        RefundAmount::Delta(amount) => amount.get(),
        RefundAmount::Cumulative(total) => match total.checked_sub(payment.refunded_minor) {
            Some(amount) => amount,
            None => return Plan::Reject("amount_out_of_range"),
        },
    };
    if amount_minor <= 0 {
        // An older cumulative total than the one already applied.
        return Plan::Ignore("stale_event");
    }
    let Some(refunded_total) = payment.refunded_minor.checked_add(amount_minor) else {
        return Plan::Reject("amount_out_of_range");
    };
    if refunded_total > payment.captured_minor {
        // Refunds can be given back (they fail, are cancelled, come back from the bank), and
        // a provider tells of it in its own time: a refund made after one was given back can
        // arrive first. The provider moved this money, so it is booked, and held.
        let Some(currency) = Currency::parse(&payment.currency) else {
            return Plan::Reject("currency_mismatch");
        };
        return Plan::RefundHeld {
            amount_minor,
            currency,
            payment: payment.status,
            refunded_minor: payment.refunded_minor,
            disputed_minor: payment.disputed_minor,
        };
    }
    // A refund the provider reports is money it moved: within what was captured it is booked
    // even when disputes hold part of it back (it was made before a chargeback that arrived
    // first, or the provider refunded a disputed payment). Merchant refunds, which the gateway
    // asks for, stop at what disputes leave (refunds/create.rs); here the excess is noted.
    let Some(refundable) = payment.refundable_minor() else {
        return Plan::Reject("amount_out_of_range");
    };
    let exceeds_remaining = amount_minor > refundable;
    let held = payment.status == PaymentStatus::Held;
    // A payment in dispute stays in dispute; a reinstatement later returns it to what its
    // refunds make it.
    let payment_to = if held || payment.status.is_in_dispute() {
        payment.status
    } else {
        PaymentStatus::settled(payment.captured_minor, refunded_total)
    };
    let fully = refunded_total == payment.captured_minor;
    // A held payment's order never changes; an applied one's follows its refunds.
    let order_move = order
        .filter(|o| {
            !held
                && payment.order_id == Some(o.id)
                && matches!(o.status, OrderStatus::Paid | OrderStatus::PartiallyRefunded)
        })
        .map(|o| OrderMove {
            order_id: o.id,
            from: o.status,
            to: if fully {
                OrderStatus::Refunded
            } else {
                OrderStatus::PartiallyRefunded
            },
        });
    Plan::Refund {
        change: RefundChange {
            amount_minor,
            refunded_before: payment.refunded_minor,
            refunded_total,
            payment_from: payment.status,
            disputed_minor: payment.disputed_minor,
            payment_to,
            order_move,
            from_unapplied: held,
            currency,
        },
        exceeds_remaining,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::AmountMinor;

    /// The plan of an event that is not a dispute's (no dispute to read).
    fn plan(
        event: &PaymentEvent,
        order: Option<&OrderState>,
        payment: Option<&PaymentState>,
    ) -> Plan {
        super::plan(event, order, payment, Disputes::default(), None)
    }

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    fn order(status: OrderStatus) -> OrderState {
        OrderState {
            id: 7,
            amount_minor: 5000,
            currency: "USD".into(),
            status,
        }
    }

    fn payment(status: PaymentStatus, refunded: i64) -> PaymentState {
        PaymentState {
            order_id: Some(7),
            status,
            captured_minor: 5000,
            refunded_minor: refunded,
            disputed_minor: 0,
            currency: "USD".into(),
        }
    }

    fn succeeded(amount: i64, currency: &str) -> PaymentEvent {
        PaymentEvent::Succeeded {
            payment_id: "pi_1".into(),
            order_id: Some(7),
            amount: AmountMinor::parse(amount).unwrap(),
            currency: Currency::parse(currency).unwrap(),
        }
    }

    fn refund(refund: RefundAmount) -> PaymentEvent {
        PaymentEvent::Refunded {
            payment_id: "pi_1".into(),
            refund_id: None,
            refund,
            currency: usd(),
        }
    }

    fn delta(a: i64) -> RefundAmount {
        RefundAmount::Delta(AmountMinor::parse(a).unwrap())
    }

    fn held(reason: &'static str, order_id: Option<i64>, amount: i64, currency: &str) -> Plan {
        Plan::Hold {
            reason,
            order_id,
            amount_minor: amount,
            currency: Currency::parse(currency).unwrap(),
        }
    }

    #[test]
    fn a_matching_payment_captures_the_pending_order() {
        assert_eq!(
            plan(
                &succeeded(5000, "USD"),
                Some(&order(OrderStatus::PendingPayment)),
                None
            ),
            Plan::Capture {
                order_id: 7,
                amount_minor: 5000,
                currency: usd()
            }
        );
    }

    #[test]
    fn captured_money_that_does_not_fit_its_order_is_held() {
        let pending = order(OrderStatus::PendingPayment);
        assert_eq!(
            plan(&succeeded(4999, "USD"), Some(&pending), None),
            held("amount_mismatch", Some(7), 4999, "USD")
        );
        assert_eq!(
            plan(&succeeded(5000, "EUR"), Some(&pending), None),
            held("currency_mismatch", Some(7), 5000, "EUR")
        );
        assert_eq!(
            plan(&succeeded(5000, "USD"), None, None),
            held("unknown_order", None, 5000, "USD")
        );
        assert_eq!(
            plan(
                &succeeded(5000, "USD"),
                Some(&order(OrderStatus::Paid)),
                None
            ),
            held("order_already_paid", Some(7), 5000, "USD")
        );
    }

    #[test]
    fn a_payment_id_captured_before_moves_no_money_again() {
        for status in [
            PaymentStatus::Succeeded,
            PaymentStatus::Held,
            PaymentStatus::Refunded,
        ] {
            assert_eq!(
                plan(
                    &succeeded(5000, "USD"),
                    Some(&order(OrderStatus::PendingPayment)),
                    Some(&payment(status, 0))
                ),
                Plan::Ignore("payment_already_captured"),
                "{status:?}"
            );
        }
    }

    #[test]
    fn a_failure_after_success_is_stale() {
        let failed = PaymentEvent::Failed {
            payment_id: "pi_1".into(),
            order_id: Some(7),
        };
        let paid = order(OrderStatus::Paid);
        assert_eq!(
            plan(
                &failed,
                Some(&paid),
                Some(&payment(PaymentStatus::Succeeded, 0))
            ),
            Plan::Ignore("stale_event")
        );
        assert_eq!(
            plan(&failed, Some(&order(OrderStatus::PendingPayment)), None),
            Plan::RecordFailure {
                order_id: 7,
                currency: "USD".into()
            }
        );
    }

    #[test]
    fn a_failed_attempt_may_still_succeed_later() {
        let pending = order(OrderStatus::PendingPayment);
        assert!(matches!(
            plan(
                &succeeded(5000, "USD"),
                Some(&pending),
                Some(&payment(PaymentStatus::Failed, 0))
            ),
            Plan::Capture { .. }
        ));
    }

    #[test]
    fn a_refund_before_its_payment_is_out_of_order() {
        assert_eq!(
            plan(&refund(delta(100)), None, None),
            Plan::OutOfOrder("payment_not_captured")
        );
        assert_eq!(
            plan(
                &refund(delta(100)),
                None,
                Some(&payment(PaymentStatus::Failed, 0))
            ),
            Plan::OutOfOrder("payment_not_captured")
        );
    }

    #[test]
    fn cumulative_refunds_post_the_difference_and_move_the_order() {
        let after_first = payment(PaymentStatus::PartiallyRefunded, 500);
        assert_eq!(
            plan(
                &refund(RefundAmount::Cumulative(800)),
                Some(&order(OrderStatus::PartiallyRefunded)),
                Some(&after_first)
            ),
            Plan::Refund {
                change: RefundChange {
                    amount_minor: 300,
                    refunded_before: 500,
                    refunded_total: 800,
                    payment_from: PaymentStatus::PartiallyRefunded,
                    disputed_minor: 0,
                    payment_to: PaymentStatus::PartiallyRefunded,
                    order_move: Some(OrderMove {
                        order_id: 7,
                        from: OrderStatus::PartiallyRefunded,
                        to: OrderStatus::PartiallyRefunded,
                    }),
                    from_unapplied: false,
                    currency: usd(),
                },
                exceeds_remaining: false,
            }
        );
    }

    #[test]
    fn an_older_cumulative_total_is_stale() {
        let after_both = payment(PaymentStatus::PartiallyRefunded, 800);
        assert_eq!(
            plan(
                &refund(RefundAmount::Cumulative(500)),
                None,
                Some(&after_both)
            ),
            Plan::Ignore("stale_event")
        );
    }

    #[test]
    fn a_refund_above_the_captured_amount_is_booked_and_held_without_counting_it() {
        let p = payment(PaymentStatus::PartiallyRefunded, 4900);
        let held = plan(&refund(delta(200)), None, Some(&p));
        assert_eq!(
            held,
            Plan::RefundHeld {
                amount_minor: 200,
                currency: usd(),
                payment: PaymentStatus::PartiallyRefunded,
                refunded_minor: 4900,
                disputed_minor: 0,
            }
        );
        let outcome = held.outcome(Some(4));
        assert_eq!(
            (outcome.outcome, outcome.reason),
            (
                crate::payments::ack::Outcome::Held,
                Some(REFUND_EXCEEDS_CAPTURED)
            )
        );
    }

    #[test]
    fn refund_arithmetic_that_would_overflow_is_rejected_not_wrapped() {
        let mut p = payment(PaymentStatus::PartiallyRefunded, i64::MAX - 10);
        p.captured_minor = i64::MAX;
        assert_eq!(
            plan(&refund(delta(1_000)), None, Some(&p)),
            Plan::Reject("amount_out_of_range")
        );
        let p = payment(PaymentStatus::PartiallyRefunded, -5);
        assert_eq!(
            plan(&refund(RefundAmount::Cumulative(i64::MAX)), None, Some(&p)),
            Plan::Reject("amount_out_of_range")
        );
    }

    #[test]
    fn refunding_the_rest_fully_refunds() {
        let p = payment(PaymentStatus::PartiallyRefunded, 4000);
        assert!(matches!(
            plan(
                &refund(delta(1000)),
                Some(&order(OrderStatus::PartiallyRefunded)),
                Some(&p)
            ),
            Plan::Refund {
                change: RefundChange {
                    refunded_total: 5000,
                    payment_to: PaymentStatus::Refunded,
                    order_move: Some(OrderMove {
                        to: OrderStatus::Refunded,
                        ..
                    }),
                    ..
                },
                ..
            }
        ));
    }

    #[test]
    fn a_held_payment_refunds_from_unapplied_funds_without_touching_an_order() {
        let p = payment(PaymentStatus::Held, 0);
        assert_eq!(
            plan(
                &refund(delta(1000)),
                Some(&order(OrderStatus::Paid)),
                Some(&p)
            ),
            Plan::Refund {
                change: RefundChange {
                    amount_minor: 1000,
                    refunded_before: 0,
                    refunded_total: 1000,
                    payment_from: PaymentStatus::Held,
                    disputed_minor: 0,
                    payment_to: PaymentStatus::Held,
                    order_move: None,
                    from_unapplied: true,
                    currency: usd(),
                },
                exceeds_remaining: false,
            }
        );
    }

    #[test]
    fn a_refund_the_provider_made_is_booked_even_where_a_dispute_holds_funds_back_and_noted() {
        let mut disputed = payment(PaymentStatus::Disputed, 0);
        disputed.disputed_minor = 4000;
        // Within what disputes leave: booked as any refund; the payment stays disputed.
        assert_eq!(
            plan(
                &refund(delta(1000)),
                Some(&order(OrderStatus::Disputed)),
                Some(&disputed)
            ),
            Plan::Refund {
                change: RefundChange {
                    amount_minor: 1000,
                    refunded_before: 0,
                    refunded_total: 1000,
                    payment_from: PaymentStatus::Disputed,
                    disputed_minor: 4000,
                    payment_to: PaymentStatus::Disputed,
                    order_move: None,
                    from_unapplied: false,
                    currency: usd(),
                },
                exceeds_remaining: false,
            }
        );
        // Beyond it (the refund came before the chargeback at the provider, and after it
        // here): the provider moved it, so it is booked too, with its reason.
        let over = plan(
            &refund(delta(1001)),
            Some(&order(OrderStatus::Disputed)),
            Some(&disputed),
        );
        assert!(
            matches!(
                over,
                Plan::Refund {
                    change: RefundChange {
                        amount_minor: 1001,
                        refunded_total: 1001,
                        payment_to: PaymentStatus::Disputed,
                        ..
                    },
                    exceeds_remaining: true,
                    ..
                }
            ),
            "{over:?}"
        );
        let outcome = over.outcome(Some(3));
        assert_eq!(
            (outcome.outcome, outcome.reason),
            (
                crate::payments::ack::Outcome::Applied,
                Some(REFUND_EXCEEDS_REMAINING)
            )
        );
        // Beyond what was captured: held, never counted.
        assert!(matches!(
            plan(&refund(delta(5001)), None, Some(&disputed)),
            Plan::RefundHeld { .. }
        ));
    }

    #[test]
    fn a_refund_of_a_charged_back_payment_is_booked_and_it_stays_charged_back() {
        let mut charged_back = payment(PaymentStatus::ChargedBack, 0);
        charged_back.disputed_minor = 5000;
        assert!(matches!(
            plan(
                &refund(delta(1)),
                Some(&order(OrderStatus::ChargedBack)),
                Some(&charged_back)
            ),
            Plan::Refund {
                change: RefundChange {
                    payment_to: PaymentStatus::ChargedBack,
                    order_move: None,
                    ..
                },
                exceeds_remaining: true,
                ..
            }
        ));
        // Reinstated funds are refundable again.
        let mut reinstated = payment(PaymentStatus::Succeeded, 0);
        reinstated.disputed_minor = 0;
        assert!(matches!(
            plan(
                &refund(delta(5000)),
                Some(&order(OrderStatus::Paid)),
                Some(&reinstated)
            ),
            Plan::Refund {
                change: RefundChange {
                    payment_to: PaymentStatus::Refunded,
                    ..
                },
                exceeds_remaining: false,
                ..
            }
        ));
    }

    fn withdrawal(amount: i64) -> PaymentEvent {
        PaymentEvent::Dispute {
            payment_id: "pi_1".into(),
            dispute_id: "du_1".into(),
            change: crate::payments::event::DisputeChange::FundsWithdrawn {
                amount: AmountMinor::parse(amount).unwrap(),
                fee_minor: 0,
                currency: usd(),
                fee_in_other_currency: false,
            },
        }
    }

    #[test]
    fn a_withdrawal_under_a_reused_event_id_is_rejected_and_a_close_stays() {
        let p = payment(PaymentStatus::Succeeded, 0);
        let withdraw = super::plan(&withdrawal(5000), None, Some(&p), Disputes::default(), None);
        assert!(matches!(withdraw, Plan::Dispute(_)), "{withdraw:?}");
        assert_eq!(
            withdraw.for_reused_event_id(),
            Plan::Reject(EVENT_ID_REUSED)
        );
        let close = PaymentEvent::Dispute {
            payment_id: "pi_1".into(),
            dispute_id: "du_1".into(),
            change: crate::payments::event::DisputeChange::Closed(
                crate::payments::event::DisputeResult::Won,
            ),
        };
        let close = super::plan(&close, None, Some(&p), Disputes::default(), None);
        assert!(matches!(close, Plan::Dispute(_)), "{close:?}");
        assert_eq!(close.for_reused_event_id(), close);
    }

    #[test]
    fn a_withdrawal_beyond_what_remains_is_applied_with_its_reason() {
        let p = payment(PaymentStatus::Succeeded, 0);
        let outcome = super::plan(&withdrawal(6000), None, Some(&p), Disputes::default(), None)
            .outcome(Some(9));
        assert_eq!(
            (outcome.outcome, outcome.reason, outcome.transfer_id),
            (
                crate::payments::ack::Outcome::Applied,
                Some("withdrawal_exceeds_remaining"),
                Some(9)
            )
        );
    }

    #[test]
    fn a_dispute_of_an_uncaptured_payment_waits_like_a_refund() {
        assert_eq!(
            super::plan(&withdrawal(100), None, None, Disputes::default(), None),
            Plan::OutOfOrder("payment_not_captured")
        );
    }

    #[test]
    fn statuses_round_trip_through_their_column_text() {
        for s in PaymentStatus::ALL {
            assert_eq!(PaymentStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(PaymentStatus::parse("captured"), None);
    }

    #[test]
    fn a_capture_under_a_reused_event_id_is_held_never_applied() {
        let capture = plan(
            &succeeded(5000, "USD"),
            Some(&order(OrderStatus::PendingPayment)),
            None,
        );
        assert!(matches!(capture, Plan::Capture { .. }));
        assert_eq!(
            capture.for_reused_event_id(),
            Plan::Hold {
                reason: EVENT_ID_REUSED,
                order_id: Some(7),
                amount_minor: 5000,
                currency: usd(),
            }
        );
        let held = plan(&succeeded(5000, "USD"), None, None);
        assert!(matches!(
            held.for_reused_event_id(),
            Plan::Hold {
                reason: EVENT_ID_REUSED,
                order_id: None,
                amount_minor: 5000,
                ..
            }
        ));
    }

    #[test]
    fn a_refund_under_a_reused_event_id_is_rejected_and_other_plans_stay() {
        let refunding = plan(
            &refund(delta(500)),
            Some(&order(OrderStatus::Paid)),
            Some(&payment(PaymentStatus::Succeeded, 0)),
        );
        assert!(matches!(refunding, Plan::Refund { .. }));
        assert_eq!(
            refunding.for_reused_event_id(),
            Plan::Reject(EVENT_ID_REUSED)
        );
        for unchanged in [
            Plan::Ignore("stale_event"),
            Plan::Reject("unknown_order"),
            Plan::OutOfOrder("payment_not_captured"),
            Plan::RecordFailure {
                order_id: 7,
                currency: "USD".into(),
            },
        ] {
            assert_eq!(unchanged.for_reused_event_id(), unchanged);
        }
    }
}

#[cfg(test)]
mod expected_capture_tests {
    use super::*;
    use crate::money::{AmountMinor, Currency};

    #[test]
    fn a_payment_succeeded_expects_its_pending_order_and_captures_it() {
        let event = PaymentEvent::Succeeded {
            payment_id: "pi_1".into(),
            order_id: Some(7),
            amount: AmountMinor::parse(5000).unwrap(),
            currency: Currency::parse("EUR").unwrap(),
        };
        assert_eq!(
            expected_capture(&event),
            Some(Plan::Capture {
                order_id: 7,
                amount_minor: 5000,
                currency: Currency::parse("EUR").unwrap(),
            })
        );
    }

    #[test]
    fn failures_refunds_and_orderless_captures_have_no_one_statement_path() {
        let failed = PaymentEvent::Failed {
            payment_id: "pi_1".into(),
            order_id: Some(7),
        };
        assert_eq!(expected_capture(&failed), None);
        let orderless = PaymentEvent::Succeeded {
            payment_id: "pi_1".into(),
            order_id: None,
            amount: AmountMinor::parse(5000).unwrap(),
            currency: Currency::parse("EUR").unwrap(),
        };
        assert_eq!(expected_capture(&orderless), None);
    }
}
