//! A provider's whole state of a payment ([`PaymentSnapshot`], from Mollie's or Mercado Pago's
//! API) as the ordinary events that bring the books to it. Pure: each stage's event is decided
//! from the snapshot and what the ledger holds for the payment, so a stage the books already
//! reflect has no event, and the planner ([`super::state`]) decides each event as it decides
//! any other (the capture once per payment, a cumulative refund by its difference).

use super::ack::{CallbackOutcome, Outcome};
use super::event::{DisputeChange, PaymentEvent, PaymentSnapshot, RefundAmount, SnapshotStatus};
use super::model::{PaymentState, PaymentStatus};
use crate::money::AmountMinor;

/// The stages of a snapshot, applied in this order in one transaction: refunds and chargebacks
/// need the capture before them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Status,
    Refunds,
    Chargebacks,
}

impl Stage {
    pub const ALL: [Stage; 3] = [Stage::Status, Stage::Refunds, Stage::Chargebacks];
}

/// The event `stage` of `snapshot` needs, given the payment as the ledger holds it; `None`
/// when the books already reflect that part of the snapshot.
pub fn step(
    snapshot: &PaymentSnapshot,
    stage: Stage,
    payment: Option<&PaymentState>,
) -> Option<PaymentEvent> {
    let payment_id = snapshot.payment_id.clone();
    let captured = payment.filter(|p| p.status.is_captured());
    match stage {
        Stage::Status => match snapshot.status {
            SnapshotStatus::Captured(amount) if captured.is_none() => {
                Some(PaymentEvent::Succeeded {
                    payment_id,
                    order_id: snapshot.order_id,
                    amount,
                    currency: snapshot.currency,
                })
            }
            SnapshotStatus::Failed
                if payment.is_none_or(|p| {
                    !p.status.is_captured() && p.status != PaymentStatus::Failed
                }) =>
            {
                Some(PaymentEvent::Failed {
                    payment_id,
                    order_id: snapshot.order_id,
                })
            }
            _ => None,
        },
        Stage::Refunds => {
            let payment = captured?;
            (snapshot.refunded_total > payment.refunded_minor).then_some(PaymentEvent::Refunded {
                payment_id,
                refund_id: None,
                refund: RefundAmount::Cumulative(snapshot.refunded_total),
                currency: snapshot.currency,
            })
        }
        Stage::Chargebacks => {
            let payment = captured?;
            let total = snapshot.charged_back_total;
            let difference = total.checked_sub(payment.disputed_minor)?;
            // Named after the total it brings the books to: a second delivery that sees the
            // same total while the first is still being written names the same dispute, which
            // posts once.
            let change = if difference > 0 {
                DisputeChange::FundsWithdrawn {
                    amount: AmountMinor::parse(difference)?,
                    fee_minor: 0,
                    currency: snapshot.currency,
                    fee_in_other_currency: false,
                }
            } else if difference < 0 {
                DisputeChange::FundsReinstatedUnnamed {
                    amount: AmountMinor::parse(difference.checked_neg()?)?,
                    currency: snapshot.currency,
                }
            } else {
                return None;
            };
            let kind = if difference > 0 {
                "chargeback"
            } else {
                "reversal"
            };
            Some(PaymentEvent::Dispute {
                dispute_id: format!("{payment_id}:{kind}:{total}"),
                payment_id,
                change,
            })
        }
    }
}

/// The ack of a snapshot whose stages ended in `outcomes` (in stage order; stages with nothing
/// to do left out): the outcome finance must look at first (rejected, then held, then
/// applied), every transfer it posted, and without any stage, why nothing moved.
pub fn combined(
    outcomes: Vec<CallbackOutcome>,
    snapshot: &PaymentSnapshot,
    known: bool,
) -> CallbackOutcome {
    let transfers: Vec<i64> = outcomes.iter().filter_map(|o| o.transfer_id).collect();
    let weight = |o: &CallbackOutcome| match o.outcome {
        Outcome::Rejected => 3,
        Outcome::Held => 2,
        Outcome::Applied => 1,
        Outcome::Ignored => 0,
    };
    let mut notable: Option<CallbackOutcome> = None;
    for outcome in outcomes {
        if notable
            .as_ref()
            .is_none_or(|n| weight(&outcome) > weight(n))
        {
            notable = Some(outcome);
        }
    }
    let mut outcome = notable.unwrap_or_else(|| match snapshot.status {
        SnapshotStatus::Pending if !known => CallbackOutcome::ignored("payment_pending"),
        _ => CallbackOutcome::ignored("already_applied"),
    });
    outcome.transfer_id = transfers.first().copied();
    if transfers.len() > 1 {
        outcome.transfer_ids = transfers;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Currency;

    fn snapshot(status: SnapshotStatus, refunded: i64, charged_back: i64) -> PaymentSnapshot {
        PaymentSnapshot {
            payment_id: "tr_1".into(),
            order_id: Some(7),
            currency: Currency::parse("EUR").unwrap(),
            status,
            refunded_total: refunded,
            charged_back_total: charged_back,
        }
    }

    fn paid() -> SnapshotStatus {
        SnapshotStatus::Captured(AmountMinor::parse(5000).unwrap())
    }

    fn payment(refunded: i64, disputed: i64) -> PaymentState {
        PaymentState {
            order_id: Some(7),
            status: PaymentStatus::Succeeded,
            captured_minor: 5000,
            refunded_minor: refunded,
            disputed_minor: disputed,
            currency: "EUR".into(),
        }
    }

    #[test]
    fn a_first_paid_state_captures_and_a_captured_payment_is_not_captured_again() {
        let s = snapshot(paid(), 0, 0);
        assert!(matches!(
            step(&s, Stage::Status, None),
            Some(PaymentEvent::Succeeded { .. })
        ));
        assert_eq!(step(&s, Stage::Status, Some(&payment(0, 0))), None);
        assert_eq!(step(&s, Stage::Refunds, Some(&payment(0, 0))), None);
        assert_eq!(step(&s, Stage::Chargebacks, Some(&payment(0, 0))), None);
    }

    #[test]
    fn refunds_move_by_the_difference_from_what_the_ledger_holds() {
        let s = snapshot(paid(), 3000, 0);
        assert_eq!(
            step(&s, Stage::Refunds, Some(&payment(1000, 0))),
            Some(PaymentEvent::Refunded {
                payment_id: "tr_1".into(),
                refund_id: None,
                refund: RefundAmount::Cumulative(3000),
                currency: Currency::parse("EUR").unwrap(),
            })
        );
        assert_eq!(step(&s, Stage::Refunds, Some(&payment(3000, 0))), None);
        // Before the capture is in the books, a refund has nothing to refund.
        assert_eq!(step(&s, Stage::Refunds, None), None);
    }

    #[test]
    fn chargebacks_withdraw_the_difference_and_a_smaller_total_gives_back() {
        let s = snapshot(paid(), 0, 2500);
        let Some(PaymentEvent::Dispute {
            dispute_id, change, ..
        }) = step(&s, Stage::Chargebacks, Some(&payment(0, 1000)))
        else {
            panic!("a withdrawal expected");
        };
        assert_eq!(dispute_id, "tr_1:chargeback:2500");
        assert!(
            matches!(change, DisputeChange::FundsWithdrawn { amount, .. } if amount.get() == 1500)
        );
        let back = snapshot(paid(), 0, 0);
        assert!(matches!(
            step(&back, Stage::Chargebacks, Some(&payment(0, 1000))),
            Some(PaymentEvent::Dispute {
                change: DisputeChange::FundsReinstatedUnnamed { .. },
                ..
            })
        ));
    }

    #[test]
    fn a_failed_payment_is_recorded_once_and_never_after_a_capture() {
        let s = snapshot(SnapshotStatus::Failed, 0, 0);
        assert!(matches!(
            step(&s, Stage::Status, None),
            Some(PaymentEvent::Failed { .. })
        ));
        assert_eq!(step(&s, Stage::Status, Some(&payment(0, 0))), None);
        let pending = snapshot(SnapshotStatus::Pending, 0, 0);
        assert_eq!(step(&pending, Stage::Status, None), None);
    }

    #[test]
    fn the_ack_of_several_stages_names_every_transfer_and_the_most_notable_outcome() {
        let s = snapshot(paid(), 1000, 0);
        let both = combined(
            vec![
                CallbackOutcome::held("unknown_order", Some(1)),
                CallbackOutcome::applied(Some(2)),
            ],
            &s,
            false,
        );
        assert_eq!(both.outcome, Outcome::Held);
        assert_eq!((both.transfer_id, both.transfer_ids), (Some(1), vec![1, 2]));
        let none = combined(Vec::new(), &snapshot(SnapshotStatus::Pending, 0, 0), false);
        assert_eq!(none.reason, Some("payment_pending"));
        let again = combined(Vec::new(), &s, true);
        assert_eq!(again.reason, Some("already_applied"));
    }
}
