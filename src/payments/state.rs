//! The payment state machine: given an event and what the database holds, what to do.
//! Pure, so every rule is unit-tested without a database.

use super::event::{PaymentEvent, RefundAmount};
use crate::money::Currency;
use crate::orders::OrderStatus;

/// A payment's state, as stored in its `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentStatus {
    Pending,
    Succeeded,
    Failed,
    PartiallyRefunded,
    Refunded,
}

impl PaymentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Pending => "pending",
            PaymentStatus::Succeeded => "succeeded",
            PaymentStatus::Failed => "failed",
            PaymentStatus::PartiallyRefunded => "partially_refunded",
            PaymentStatus::Refunded => "refunded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(PaymentStatus::Pending),
            "succeeded" => Some(PaymentStatus::Succeeded),
            "failed" => Some(PaymentStatus::Failed),
            "partially_refunded" => Some(PaymentStatus::PartiallyRefunded),
            "refunded" => Some(PaymentStatus::Refunded),
            _ => None,
        }
    }

    /// True once money was captured (refunds included).
    pub fn is_captured(self) -> bool {
        matches!(
            self,
            PaymentStatus::Succeeded | PaymentStatus::PartiallyRefunded | PaymentStatus::Refunded
        )
    }
}

/// The order as the state machine needs it.
#[derive(Debug, Clone)]
pub struct OrderState {
    pub id: i64,
    pub amount_minor: i64,
    pub currency: String,
    pub status: OrderStatus,
}

/// The payment as the state machine needs it.
#[derive(Debug, Clone)]
pub struct PaymentState {
    pub order_id: i64,
    pub status: PaymentStatus,
    pub captured_minor: i64,
    pub refunded_minor: i64,
    pub currency: String,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Capture: payment succeeded, order paid, one `payment` transfer.
    Capture {
        order_id: i64,
        amount_minor: i64,
        currency: Currency,
    },
    /// Record a failed attempt; the order stays payable, nothing is posted.
    RecordFailure { order_id: i64 },
    /// Refund `amount_minor` more: one `refund` transfer.
    Refund {
        order_id: i64,
        amount_minor: i64,
        refunded_total: i64,
        fully_refunded: bool,
        currency: Currency,
    },
    /// Deterministic no-op (stale or superseded event), acknowledged.
    Ignore(&'static str),
    /// Deterministic business-rule violation, acknowledged without a ledger change.
    Reject(&'static str),
    /// Needs an event not seen yet: nothing is stored, the provider retries later.
    OutOfOrder(&'static str),
}

/// Decides what `event` does to `order` and `payment` (either may be unknown).
pub fn plan(
    event: &PaymentEvent,
    order: Option<&OrderState>,
    payment: Option<&PaymentState>,
) -> Plan {
    match event {
        PaymentEvent::Succeeded {
            amount, currency, ..
        } => {
            let Some(order) = order else {
                return Plan::Reject("unknown_order");
            };
            if payment.is_some_and(|p| p.status.is_captured()) {
                return Plan::Ignore("already_succeeded");
            }
            if order.currency != currency.code() {
                return Plan::Reject("currency_mismatch");
            }
            if order.amount_minor != amount.get() {
                return Plan::Reject("amount_mismatch");
            }
            if order.status != OrderStatus::PendingPayment {
                return Plan::Reject("order_already_paid");
            }
            Plan::Capture {
                order_id: order.id,
                amount_minor: amount.get(),
                currency: *currency,
            }
        }
        PaymentEvent::Failed { .. } => {
            let Some(order) = order else {
                return Plan::Reject("unknown_order");
            };
            match payment.map(|p| p.status) {
                Some(status) if status.is_captured() => Plan::Ignore("stale_event"),
                Some(PaymentStatus::Failed) => Plan::Ignore("already_failed"),
                _ => Plan::RecordFailure { order_id: order.id },
            }
        }
        PaymentEvent::Refunded {
            refund, currency, ..
        } => {
            let Some(payment) = payment.filter(|p| p.status.is_captured()) else {
                // A refund before its payment: let the provider redeliver it later.
                return Plan::OutOfOrder("payment_not_captured");
            };
            if payment.currency != currency.code() {
                return Plan::Reject("currency_mismatch");
            }
            let amount_minor = match refund {
                RefundAmount::Delta(amount) => amount.get(),
                RefundAmount::Cumulative(total) => total - payment.refunded_minor,
            };
            if amount_minor <= 0 {
                // An older cumulative total than the one already applied.
                return Plan::Ignore("stale_event");
            }
            let refunded_total = payment.refunded_minor + amount_minor;
            if refunded_total > payment.captured_minor {
                return Plan::Reject("refund_exceeds_captured");
            }
            Plan::Refund {
                order_id: payment.order_id,
                amount_minor,
                refunded_total,
                fully_refunded: refunded_total == payment.captured_minor,
                currency: *currency,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::AmountMinor;

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
            order_id: 7,
            status,
            captured_minor: 5000,
            refunded_minor: refunded,
            currency: "USD".into(),
        }
    }

    fn succeeded(amount: i64, currency: &str) -> PaymentEvent {
        PaymentEvent::Succeeded {
            payment_id: "pi_1".into(),
            order_id: 7,
            amount: AmountMinor::parse(amount).unwrap(),
            currency: Currency::parse(currency).unwrap(),
        }
    }

    fn refund(refund: RefundAmount) -> PaymentEvent {
        PaymentEvent::Refunded {
            payment_id: "pi_1".into(),
            refund,
            currency: usd(),
        }
    }

    fn delta(a: i64) -> RefundAmount {
        RefundAmount::Delta(AmountMinor::parse(a).unwrap())
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
    fn amount_currency_and_order_mismatches_are_rejected() {
        let pending = order(OrderStatus::PendingPayment);
        assert_eq!(
            plan(&succeeded(4999, "USD"), Some(&pending), None),
            Plan::Reject("amount_mismatch")
        );
        assert_eq!(
            plan(&succeeded(5000, "EUR"), Some(&pending), None),
            Plan::Reject("currency_mismatch")
        );
        assert_eq!(
            plan(&succeeded(5000, "USD"), None, None),
            Plan::Reject("unknown_order")
        );
        assert_eq!(
            plan(
                &succeeded(5000, "USD"),
                Some(&order(OrderStatus::Paid)),
                None
            ),
            Plan::Reject("order_already_paid")
        );
    }

    #[test]
    fn a_failure_after_success_is_stale() {
        let failed = PaymentEvent::Failed {
            payment_id: "pi_1".into(),
            order_id: 7,
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
            Plan::RecordFailure { order_id: 7 }
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
    fn cumulative_refunds_post_the_difference() {
        let after_first = payment(PaymentStatus::PartiallyRefunded, 500);
        assert_eq!(
            plan(
                &refund(RefundAmount::Cumulative(800)),
                None,
                Some(&after_first)
            ),
            Plan::Refund {
                order_id: 7,
                amount_minor: 300,
                refunded_total: 800,
                fully_refunded: false,
                currency: usd()
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
    fn a_refund_above_the_captured_amount_is_rejected() {
        let p = payment(PaymentStatus::PartiallyRefunded, 4900);
        assert_eq!(
            plan(&refund(delta(200)), None, Some(&p)),
            Plan::Reject("refund_exceeds_captured")
        );
    }

    #[test]
    fn refunding_the_rest_fully_refunds() {
        let p = payment(PaymentStatus::PartiallyRefunded, 4000);
        assert!(matches!(
            plan(&refund(delta(1000)), None, Some(&p)),
            Plan::Refund {
                fully_refunded: true,
                refunded_total: 5000,
                ..
            }
        ));
    }
}
