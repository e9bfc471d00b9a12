//! What a provider event means for a payment: the internal [`PaymentEvent`] every provider's
//! payload maps onto (in `providers/`), or the reason a signed body is acknowledged without one.
//! The write path reads only these types, so it never learns a provider's name or format.

use crate::money::{AmountMinor, Currency};
use crate::text;

/// A body that cannot be used, with the detail the ack carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PayloadError(pub String);

impl PayloadError {
    /// The detail is stored in the ack (JSONB): any control character a message might quote
    /// from the body is replaced, so the detail itself can never make the write fail.
    pub fn new(message: impl Into<String>) -> Self {
        PayloadError(text::printable(&message.into()))
    }
}

/// How much a refund event refunds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundAmount {
    /// This event's own refund (canonical `refund.succeeded`, and most providers).
    Delta(AmountMinor),
    /// Everything refunded so far (Stripe `charge.refunded`): post the difference.
    Cumulative(i64),
}

/// What a provider event means for a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentEvent {
    Succeeded {
        payment_id: String,
        /// The merchant's order the payment is for; `None` when the body names none usable
        /// (the money is then held, reason `unknown_order`).
        order_id: Option<i64>,
        amount: AmountMinor,
        currency: Currency,
    },
    Failed {
        payment_id: String,
        order_id: Option<i64>,
    },
    Refunded {
        payment_id: String,
        /// The provider's refund id, when the payload names it: it posts at most once.
        refund_id: Option<String>,
        refund: RefundAmount,
        currency: Currency,
    },
    /// A refund the provider reported, given back: it failed after it was booked, was
    /// cancelled, or its money came back from the bank. Named by its refund id; what it gives
    /// back is what the books hold for that refund.
    RefundReturned {
        payment_id: String,
        refund_id: String,
        /// The refund's amount as the provider reports it, when it does.
        reported_minor: Option<i64>,
        /// The books hold the refund under no id (an older version booked it by the
        /// provider's total): what comes back is `reported_minor`.
        unnamed: bool,
    },
    /// Money a provider takes back for a dispute (a chargeback), gives back, or the dispute's end.
    Dispute {
        payment_id: String,
        /// The provider's dispute id: its withdrawal and its reinstatement post at most once.
        dispute_id: String,
        change: DisputeChange,
    },
}

/// What a dispute event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeChange {
    /// The provider took `amount` back from the merchant, and `fee_minor` (0 or more) for it.
    FundsWithdrawn {
        amount: AmountMinor,
        fee_minor: i64,
        currency: Currency,
        /// The provider charged a fee in another currency than `currency`: it is not in
        /// `fee_minor`, and the gateway cannot book it.
        fee_in_other_currency: bool,
    },
    /// The provider gave `amount` back.
    FundsReinstated {
        amount: AmountMinor,
        currency: Currency,
    },
    /// The provider gave `amount` back for one of the payment's withdrawals without naming
    /// which (Paddle's `chargeback_reverse` names only its transaction). The event's dispute
    /// id is the reversal's own; the planner picks the withdrawal it gives back.
    FundsReinstatedUnnamed {
        amount: AmountMinor,
        currency: Currency,
    },
    Closed(DisputeResult),
}

/// How a closed dispute ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeResult {
    Won,
    Lost,
}

/// A provider's payout of the merchant's balance to its bank account, or its failure: not a
/// payment's event (it moves the balance, not one payment's money), so it has its own writer
/// (`crate::payouts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutEvent {
    pub payout_id: String,
    pub change: PayoutChange,
    /// As the provider reports it: negative for a payout that debits the bank (Stripe
    /// reclaims a negative balance that way). Never 0.
    pub amount_minor: i64,
    pub currency: Currency,
}

/// What a payout event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayoutChange {
    /// The money reached the bank (Stripe `payout.paid`).
    Paid,
    /// The payout failed, before or after it was paid (Stripe `payout.failed`): the money is
    /// back in the provider's balance.
    Failed,
}

/// What a provider's API says a payment is now (Mollie, Mercado Pago): not one change but the
/// whole state. The gateway moves the books to it by what they do not hold yet: the capture if
/// it is missing, each refund and chargeback the provider names that the books do not have,
/// and the give-back of each one the provider reversed. Nothing is ever inferred from a total
/// that went down: an older state, fetched late or replayed, moves nothing back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentSnapshot {
    pub payment_id: String,
    pub order_id: Option<i64>,
    pub currency: Currency,
    pub status: SnapshotStatus,
    pub refunds: SnapshotRefunds,
    /// The payment's chargebacks, oldest first, each by the provider's id.
    pub chargebacks: Vec<SnapshotChargeback>,
}

/// A snapshot's refunds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotRefunds {
    /// Only the refunded total is known (Mercado Pago's `transaction_amount_refunded`): booked by
    /// its difference from the books, never given back from a lower total.
    Total(i64),
    /// Each refund by its id (Mollie's, embedded), oldest first.
    Listed(Vec<SnapshotRefund>),
}

/// One refund of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotRefund {
    pub id: String,
    pub amount_minor: i64,
    /// Whether it stands (made, pending or paid); `false` once it failed or was cancelled.
    pub standing: bool,
}

/// One chargeback of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotChargeback {
    pub id: String,
    pub amount_minor: i64,
    /// The provider gave its money back.
    pub reversed: bool,
}

impl PaymentSnapshot {
    /// A captured payment with nothing refunded or charged back: the capture alone.
    pub fn is_capture_only(&self) -> bool {
        let refunded = match &self.refunds {
            SnapshotRefunds::Total(total) => *total > 0,
            SnapshotRefunds::Listed(list) => !list.is_empty(),
        };
        !refunded && self.chargebacks.is_empty()
    }
}

/// Where a snapshot's payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotStatus {
    /// The money was captured (it stays so after refunds and chargebacks).
    Captured(AmountMinor),
    /// The payment failed, expired or was canceled: nothing was captured.
    Failed,
    /// Not decided yet (open, pending, authorized): nothing moves.
    Pending,
}

/// A signed body, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Event(PaymentEvent),
    /// A payment's whole state from its provider's API.
    Snapshot(Box<PaymentSnapshot>),
    /// Money the provider paid out to the merchant's bank, or a payout that failed.
    Payout(PayoutEvent),
    /// Acknowledged and stored without effect: `unsupported_event_type`, `no_payment_intent`.
    Ignored(&'static str),
    /// A handled type whose body is unusable: acknowledged `rejected` with this reason
    /// (`invalid_payload`, `amount_out_of_range`, `invalid_amount`) and detail, and stored.
    Rejected {
        reason: &'static str,
        detail: String,
    },
}

/// A body read once: the type the event log records, and what the body means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The body's event type as the provider names it, cut to [`MAX_EVENT_ID_LEN`] bytes;
    /// `None` when there is no usable one.
    pub event_type: Option<String>,
    pub parsed: Parsed,
}

impl PaymentEvent {
    pub fn payment_id(&self) -> &str {
        match self {
            PaymentEvent::Succeeded { payment_id, .. }
            | PaymentEvent::Failed { payment_id, .. }
            | PaymentEvent::Refunded { payment_id, .. }
            | PaymentEvent::RefundReturned { payment_id, .. }
            | PaymentEvent::Dispute { payment_id, .. } => payment_id,
        }
    }
}

impl Parsed {
    /// A handled type whose body is unusable.
    pub fn invalid(error: PayloadError) -> Self {
        Parsed::Rejected {
            reason: "invalid_payload",
            detail: error.0,
        }
    }
}

pub const MAX_EVENT_ID_LEN: usize = 255;

/// An event id as a key: 1 to 255 characters, none of them control characters.
pub fn check_event_id(id: &str) -> Result<(), PayloadError> {
    if !text::storable(id, MAX_EVENT_ID_LEN) {
        return Err(PayloadError::new(format!(
            "the event id must be 1 to {MAX_EVENT_ID_LEN} characters without control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_is_1_to_255_characters_without_control_characters() {
        assert!(check_event_id("evt_1").is_ok());
        assert!(check_event_id("").is_err());
        assert!(check_event_id(&"e".repeat(256)).is_err());
        assert!(check_event_id("e\u{0}").is_err());
    }

    #[test]
    fn a_payload_error_never_carries_a_control_character() {
        assert_eq!(PayloadError::new("a\u{0}b").0, "a\u{fffd}b");
    }
}
