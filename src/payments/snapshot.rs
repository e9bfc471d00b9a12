//! A provider's whole state of a payment ([`PaymentSnapshot`], from Mollie's or Mercado Pago's
//! API) as the ordinary events that bring the books to it. Pure: each event is decided from
//! the snapshot and what the ledger holds for the payment ([`Books`]), so what the books
//! already reflect has no event, and the planner ([`super::state`]) decides each event as it
//! decides any other.
//!
//! Refunds and chargebacks are matched by the provider's own ids, never by totals: a refund
//! the provider names that the books do not hold is booked while it stands, and given back
//! once the provider says it failed or was cancelled; a chargeback it names is withdrawn, and
//! reinstated once it is reversed. A total that went down (an older state fetched late, or a
//! stored one replayed) therefore moves nothing back, and a second chargeback after a
//! reversal is a chargeback of its own. Where the provider gives only a total (Mercado Pago's
//! refunds), the books move up to it and never down.
//!
//! Books written by older versions name their refunds by no id and their chargebacks by
//! their running totals (`{payment}:chargeback:{total}`): what they hold counts for the
//! provider's oldest refunds and chargebacks, in order, so nothing is posted twice after an
//! upgrade, and a reversal of one of them gives back one of those withdrawals.

use std::collections::HashMap;

use super::ack::{CallbackOutcome, Outcome};
use super::dispute::{DisputeFunds, DisputeState};
use super::event::{
    DisputeChange, PaymentEvent, PaymentSnapshot, RefundAmount, SnapshotRefunds, SnapshotStatus,
};
use super::model::{PaymentState, PaymentStatus};
use crate::ledger::BookedRefund;
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

/// What the books hold for a snapshot's payment.
#[derive(Debug, Clone, Copy)]
pub struct Books<'a> {
    pub payment: Option<&'a PaymentState>,
    /// What the ledger holds for each refund id the snapshot lists.
    pub refunds: &'a HashMap<String, BookedRefund>,
    /// Every dispute of the payment.
    pub disputes: &'a [DisputeState],
}

/// The id of the give-back of chargeback `id` when it names no dispute the books hold (the
/// withdrawal was booked by an older version under a total).
pub fn reversal_id(chargeback_id: &str) -> String {
    format!("{chargeback_id}:reversal")
}

/// The next event `stage` of `snapshot` needs, given what the books hold; `None` when the
/// books reflect that part of the snapshot.
pub fn next(snapshot: &PaymentSnapshot, stage: Stage, books: Books<'_>) -> Option<PaymentEvent> {
    let payment_id = snapshot.payment_id.clone();
    let captured = books.payment.filter(|p| p.status.is_captured());
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
                if books.payment.is_none_or(|p| {
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
        Stage::Refunds => next_refund(snapshot, captured?, books.refunds),
        Stage::Chargebacks => next_chargeback(snapshot, books.disputes),
    }
}

fn next_refund(
    snapshot: &PaymentSnapshot,
    payment: &PaymentState,
    booked: &HashMap<String, BookedRefund>,
) -> Option<PaymentEvent> {
    let payment_id = snapshot.payment_id.clone();
    let list = match &snapshot.refunds {
        SnapshotRefunds::Total(total) => {
            return (*total > payment.refunded_minor).then_some(PaymentEvent::Refunded {
                payment_id,
                refund_id: None,
                refund: RefundAmount::Cumulative(*total),
                currency: snapshot.currency,
            });
        }
        SnapshotRefunds::Listed(list) => list,
    };
    // Refunds the books hold under no id (an older version booked them by the total): they
    // count for the provider's oldest refunds.
    let named: i64 = list
        .iter()
        .filter_map(|r| booked.get(&r.id).and_then(|b| b.refunded_minor))
        .sum();
    let mut unnamed = payment.refunded_minor.saturating_sub(named).max(0);
    for refund in list {
        let books = booked.get(&refund.id).copied().unwrap_or_default();
        let given_back = |unnamed| PaymentEvent::RefundReturned {
            payment_id: payment_id.clone(),
            refund_id: refund.id.clone(),
            reported_minor: Some(refund.amount_minor),
            unnamed,
        };
        match books.refunded_minor {
            Some(_) if !refund.standing && !books.reversed => return Some(given_back(false)),
            Some(_) => {}
            None if refund.amount_minor <= unnamed => {
                unnamed -= refund.amount_minor;
                if !refund.standing && !books.reversed {
                    return Some(given_back(true));
                }
            }
            None if refund.standing => {
                return Some(PaymentEvent::Refunded {
                    payment_id,
                    refund_id: Some(refund.id.clone()),
                    refund: RefundAmount::Delta(AmountMinor::parse(refund.amount_minor)?),
                    currency: snapshot.currency,
                });
            }
            // Failed or cancelled before the books held it: nothing moved.
            None => {}
        }
    }
    None
}

fn next_chargeback(snapshot: &PaymentSnapshot, disputes: &[DisputeState]) -> Option<PaymentEvent> {
    let payment_id = snapshot.payment_id.clone();
    let named = |id: &str| snapshot.chargebacks.iter().any(|c| c.id == id);
    // Withdrawals the books hold under ids the provider does not use (an older version's
    // running totals): they count for the provider's oldest chargebacks.
    let mut unnamed: i64 = disputes
        .iter()
        .filter(|d| !named(&d.dispute_id))
        .map(|d| d.record.withdrawn_minor)
        .sum();
    for chargeback in &snapshot.chargebacks {
        let dispute = |change| {
            Some(PaymentEvent::Dispute {
                payment_id: payment_id.clone(),
                dispute_id: chargeback.id.clone(),
                change,
            })
        };
        let amount = AmountMinor::parse(chargeback.amount_minor)?;
        match disputes.iter().find(|d| d.dispute_id == chargeback.id) {
            Some(d) => {
                if chargeback.reversed && d.record.funds == DisputeFunds::Withdrawn {
                    return dispute(DisputeChange::FundsReinstated {
                        amount: AmountMinor::parse(
                            d.record.withdrawn_minor - d.record.reinstated_minor,
                        )?,
                        currency: snapshot.currency,
                    });
                }
            }
            None if chargeback.amount_minor <= unnamed => {
                unnamed -= chargeback.amount_minor;
                let reversal = reversal_id(&chargeback.id);
                let given_back = disputes
                    .iter()
                    .any(|d| d.reinstated_by.as_deref() == Some(reversal.as_str()));
                if chargeback.reversed && !given_back {
                    return Some(PaymentEvent::Dispute {
                        payment_id: payment_id.clone(),
                        dispute_id: reversal,
                        change: DisputeChange::FundsReinstatedUnnamed {
                            amount,
                            currency: snapshot.currency,
                        },
                    });
                }
            }
            None => {
                // A reversed one is withdrawn first; the next step gives it back.
                return dispute(DisputeChange::FundsWithdrawn {
                    amount,
                    fee_minor: 0,
                    currency: snapshot.currency,
                    fee_in_other_currency: false,
                });
            }
        }
    }
    None
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
    use crate::payments::dispute::{DisputeOutcome, DisputeRecord};
    use crate::payments::event::{SnapshotChargeback, SnapshotRefund};

    fn eur() -> Currency {
        Currency::parse("EUR").unwrap()
    }

    fn snapshot(
        status: SnapshotStatus,
        refunds: SnapshotRefunds,
        chargebacks: Vec<SnapshotChargeback>,
    ) -> PaymentSnapshot {
        PaymentSnapshot {
            payment_id: "tr_1".into(),
            order_id: Some(7),
            currency: eur(),
            status,
            refunds,
            chargebacks,
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

    fn refund(id: &str, amount: i64, standing: bool) -> SnapshotRefund {
        SnapshotRefund {
            id: id.into(),
            amount_minor: amount,
            standing,
        }
    }

    fn chargeback(id: &str, amount: i64, reversed: bool) -> SnapshotChargeback {
        SnapshotChargeback {
            id: id.into(),
            amount_minor: amount,
            reversed,
        }
    }

    fn withdrawn(id: &str, amount: i64, reinstated: i64) -> DisputeState {
        DisputeState {
            dispute_id: id.into(),
            payment_id: "tr_1".into(),
            record: DisputeRecord {
                funds: if reinstated > 0 {
                    DisputeFunds::Reinstated
                } else {
                    DisputeFunds::Withdrawn
                },
                outcome: DisputeOutcome::Open,
                withdrawn_minor: amount,
                reinstated_minor: reinstated,
                ..DisputeRecord::NEW
            },
            reinstated_by: None,
        }
    }

    fn next_of(
        s: &PaymentSnapshot,
        stage: Stage,
        payment: Option<&PaymentState>,
        refunds: &[(&str, BookedRefund)],
        disputes: &[DisputeState],
    ) -> Option<PaymentEvent> {
        let refunds: HashMap<String, BookedRefund> = refunds
            .iter()
            .map(|(id, b)| ((*id).to_owned(), *b))
            .collect();
        next(
            s,
            stage,
            Books {
                payment,
                refunds: &refunds,
                disputes,
            },
        )
    }

    fn booked(amount: i64, reversed: bool) -> BookedRefund {
        BookedRefund {
            refunded_minor: Some(amount),
            reversed,
            held: false,
        }
    }

    #[test]
    fn a_first_paid_state_captures_and_a_captured_payment_is_not_captured_again() {
        let s = snapshot(paid(), SnapshotRefunds::Listed(vec![]), vec![]);
        assert!(matches!(
            next_of(&s, Stage::Status, None, &[], &[]),
            Some(PaymentEvent::Succeeded { .. })
        ));
        let p = payment(0, 0);
        for stage in Stage::ALL {
            assert_eq!(next_of(&s, stage, Some(&p), &[], &[]), None, "{stage:?}");
        }
    }

    #[test]
    fn each_standing_refund_is_booked_by_its_id_and_one_that_failed_after_is_given_back() {
        let s = snapshot(
            paid(),
            SnapshotRefunds::Listed(vec![refund("re_1", 1000, true), refund("re_2", 500, true)]),
            vec![],
        );
        let p = payment(0, 0);
        assert_eq!(
            next_of(&s, Stage::Refunds, Some(&p), &[], &[]),
            Some(PaymentEvent::Refunded {
                payment_id: "tr_1".into(),
                refund_id: Some("re_1".into()),
                refund: RefundAmount::Delta(AmountMinor::parse(1000).unwrap()),
                currency: eur(),
            })
        );
        let p = payment(1000, 0);
        assert!(matches!(
            next_of(&s, Stage::Refunds, Some(&p), &[("re_1", booked(1000, false))], &[]),
            Some(PaymentEvent::Refunded { refund_id: Some(id), .. }) if id == "re_2"
        ));
        let failed = snapshot(
            paid(),
            SnapshotRefunds::Listed(vec![refund("re_1", 1000, false), refund("re_2", 500, true)]),
            vec![],
        );
        let p = payment(1500, 0);
        let both = [("re_1", booked(1000, false)), ("re_2", booked(500, false))];
        assert_eq!(
            next_of(&failed, Stage::Refunds, Some(&p), &both, &[]),
            Some(PaymentEvent::RefundReturned {
                payment_id: "tr_1".into(),
                refund_id: "re_1".into(),
                reported_minor: Some(1000),
                unnamed: false,
            })
        );
        let given_back = [("re_1", booked(1000, true)), ("re_2", booked(500, false))];
        assert_eq!(
            next_of(&failed, Stage::Refunds, Some(&p), &given_back, &[]),
            None
        );
    }

    #[test]
    fn a_refund_that_failed_before_the_books_held_it_moves_nothing() {
        let s = snapshot(
            paid(),
            SnapshotRefunds::Listed(vec![refund("re_1", 1000, false)]),
            vec![],
        );
        assert_eq!(
            next_of(&s, Stage::Refunds, Some(&payment(0, 0)), &[], &[]),
            None
        );
    }

    #[test]
    fn refunds_an_older_version_booked_by_the_total_count_for_the_oldest_ones() {
        let s = snapshot(
            paid(),
            SnapshotRefunds::Listed(vec![refund("re_1", 1000, false), refund("re_2", 500, true)]),
            vec![],
        );
        // 1000 refunded under no id: re_1's. Its failure gives those 1000 back; re_2 is new.
        let p = payment(1000, 0);
        assert_eq!(
            next_of(&s, Stage::Refunds, Some(&p), &[], &[]),
            Some(PaymentEvent::RefundReturned {
                payment_id: "tr_1".into(),
                refund_id: "re_1".into(),
                reported_minor: Some(1000),
                unnamed: true,
            })
        );
        let returned = [(
            "re_1",
            BookedRefund {
                refunded_minor: None,
                reversed: true,
                held: false,
            },
        )];
        assert!(matches!(
            next_of(&s, Stage::Refunds, Some(&p), &returned, &[]),
            Some(PaymentEvent::Refunded { refund_id: Some(id), .. }) if id == "re_2"
        ));
    }

    #[test]
    fn a_total_that_went_down_gives_nothing_back() {
        let s = snapshot(paid(), SnapshotRefunds::Total(1000), vec![]);
        assert_eq!(
            next_of(&s, Stage::Refunds, Some(&payment(3000, 0)), &[], &[]),
            None
        );
        // An older state of the chargebacks: the books' withdrawal stays.
        let older = snapshot(paid(), SnapshotRefunds::Total(0), vec![]);
        let held = [withdrawn("tr_1:chargeback", 2000, 0)];
        assert_eq!(
            next_of(
                &older,
                Stage::Chargebacks,
                Some(&payment(0, 2000)),
                &[],
                &held
            ),
            None
        );
        // A stale state that lists the chargeback not reversed, after its reversal.
        let stale = snapshot(
            paid(),
            SnapshotRefunds::Total(0),
            vec![chargeback("chb_1", 2000, false)],
        );
        let given_back = [withdrawn("chb_1", 2000, 2000)];
        assert_eq!(
            next_of(
                &stale,
                Stage::Chargebacks,
                Some(&payment(0, 0)),
                &[],
                &given_back
            ),
            None
        );
    }

    #[test]
    fn a_chargeback_after_a_reversal_is_a_chargeback_of_its_own() {
        let s = snapshot(
            paid(),
            SnapshotRefunds::Total(0),
            vec![
                chargeback("chb_1", 500, true),
                chargeback("chb_2", 500, false),
            ],
        );
        let p = payment(0, 0);
        let first_back = [withdrawn("chb_1", 500, 500)];
        assert!(matches!(
            next_of(&s, Stage::Chargebacks, Some(&p), &[], &first_back),
            Some(PaymentEvent::Dispute { dispute_id, change: DisputeChange::FundsWithdrawn { amount, .. }, .. })
                if dispute_id == "chb_2" && amount.get() == 500
        ));
        // Seen for the first time already reversed: withdrawn, then given back.
        assert!(matches!(
            next_of(&s, Stage::Chargebacks, Some(&p), &[], &[]),
            Some(PaymentEvent::Dispute { dispute_id, change: DisputeChange::FundsWithdrawn { .. }, .. })
                if dispute_id == "chb_1"
        ));
        let first_held = [withdrawn("chb_1", 500, 0)];
        assert!(matches!(
            next_of(&s, Stage::Chargebacks, Some(&p), &[], &first_held),
            Some(PaymentEvent::Dispute { dispute_id, change: DisputeChange::FundsReinstated { .. }, .. })
                if dispute_id == "chb_1"
        ));
    }

    #[test]
    fn chargebacks_an_older_version_booked_by_the_total_count_for_the_oldest_ones() {
        let s = snapshot(
            paid(),
            SnapshotRefunds::Total(0),
            vec![
                chargeback("chb_1", 500, true),
                chargeback("chb_2", 700, false),
            ],
        );
        let legacy = [withdrawn("tr_1:chargeback:500", 500, 0)];
        let p = payment(0, 500);
        assert_eq!(
            next_of(&s, Stage::Chargebacks, Some(&p), &[], &legacy),
            Some(PaymentEvent::Dispute {
                payment_id: "tr_1".into(),
                dispute_id: "chb_1:reversal".into(),
                change: DisputeChange::FundsReinstatedUnnamed {
                    amount: AmountMinor::parse(500).unwrap(),
                    currency: eur(),
                },
            })
        );
        let mut given_back = withdrawn("tr_1:chargeback:500", 500, 500);
        given_back.reinstated_by = Some("chb_1:reversal".into());
        assert!(matches!(
            next_of(&s, Stage::Chargebacks, Some(&p), &[], &[given_back]),
            Some(PaymentEvent::Dispute { dispute_id, change: DisputeChange::FundsWithdrawn { .. }, .. })
                if dispute_id == "chb_2"
        ));
    }

    #[test]
    fn a_failed_payment_is_recorded_once_and_never_after_a_capture() {
        let s = snapshot(SnapshotStatus::Failed, SnapshotRefunds::Total(0), vec![]);
        assert!(matches!(
            next_of(&s, Stage::Status, None, &[], &[]),
            Some(PaymentEvent::Failed { .. })
        ));
        assert_eq!(
            next_of(&s, Stage::Status, Some(&payment(0, 0)), &[], &[]),
            None
        );
        let pending = snapshot(SnapshotStatus::Pending, SnapshotRefunds::Total(0), vec![]);
        assert_eq!(next_of(&pending, Stage::Status, None, &[], &[]), None);
    }

    #[test]
    fn the_ack_of_several_stages_names_every_transfer_and_the_most_notable_outcome() {
        let s = snapshot(paid(), SnapshotRefunds::Total(1000), vec![]);
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
        let pending = snapshot(SnapshotStatus::Pending, SnapshotRefunds::Total(0), vec![]);
        let none = combined(Vec::new(), &pending, false);
        assert_eq!(none.reason, Some("payment_pending"));
        let again = combined(Vec::new(), &s, true);
        assert_eq!(again.reason, Some("already_applied"));
    }
}
