//! Payouts in the books: a provider paid the merchant's balance out to its bank, or the payout
//! failed. A payout is not a payment's event, so it has its own plan and writer
//! ([`model::apply`], `payout_apply` of migration 000063); it runs on the general path like
//! any event, in the transaction that claims the event's idempotency key and stores its ack.
//!
//! A payout is booked when it is paid (`psp_clearing:<provider>` to `bank:<provider>:<currency>`)
//! and given back when it fails after that. The payout's row remembers which of the two the
//! books hold, so its events post at most once each in any order: a failure that arrives before
//! the payment books nothing and the late payment then books nothing either.

pub mod model;

use diesel_async::AsyncPgConnection;

pub use self::model::Kind;
use self::model::{Applied, Booked, PayoutWrite, Status};
use crate::idempotency::error::IdempotencyError;
use crate::ledger;
use crate::payments::ack::CallbackOutcome;
use crate::payments::effect::Source;
use crate::payments::event::{PayoutChange, PayoutEvent};

/// How often a payout event plans again when a concurrent event of the same payout changed its
/// row between the read and the write (the second plan reads the row locked).
const MAX_PLANS: usize = 3;

/// What a payout event does to the books, given what they hold for its payout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Move the payout's row and, with a transfer, post it.
    Write {
        to: Status,
        transfer: Option<Transfer>,
    },
    /// Nothing to write: acknowledged `ignored` with this reason.
    Ignore(&'static str),
}

/// A payout's transfer: the kind and the amount that moves from clearing to the bank (negative
/// for a payout that debits the bank), in the payout's currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub kind: Kind,
    pub amount_minor: i64,
    pub currency: String,
}

/// Plans `event` against what the books hold for its payout.
pub fn plan(event: &PayoutEvent, booked: Option<&Booked>) -> Plan {
    match (event.change, booked.map(|b| b.status)) {
        (PayoutChange::Paid, None) => Plan::Write {
            to: Status::Paid,
            transfer: Some(Transfer {
                kind: Kind::Payout,
                amount_minor: event.amount_minor,
                currency: event.currency.code().to_owned(),
            }),
        },
        // The failure came first (or was the payout's end after all): the money never left
        // the provider in the books, and must not now.
        (PayoutChange::Paid, Some(Status::Failed)) => Plan::Ignore("payout_failed"),
        (PayoutChange::Failed, None) => Plan::Write {
            to: Status::Failed,
            transfer: None,
        },
        // What comes back is what the books paid out, whatever this event says.
        (PayoutChange::Failed, Some(Status::Paid)) => Plan::Write {
            to: Status::Failed,
            transfer: booked.map(|paid| Transfer {
                kind: Kind::PayoutReversal,
                amount_minor: paid.amount_minor,
                currency: paid.currency.clone(),
            }),
        },
        (PayoutChange::Paid, Some(Status::Paid)) | (PayoutChange::Failed, Some(Status::Failed)) => {
            Plan::Ignore("already_applied")
        }
    }
}

/// Decides and writes a payout event inside the caller's transaction.
pub async fn decide(
    conn: &mut AsyncPgConnection,
    source: Source<'_>,
    event_id: &str,
    event: &PayoutEvent,
) -> Result<CallbackOutcome, IdempotencyError> {
    for _ in 0..MAX_PLANS {
        let booked =
            model::booked(conn, source.merchant_id, source.provider, &event.payout_id).await?;
        let (to, transfer) = match plan(event, booked.as_ref()) {
            Plan::Ignore(reason) => return Ok(CallbackOutcome::ignored(reason)),
            Plan::Write { to, transfer } => (to, transfer),
        };
        let write = PayoutWrite {
            merchant_id: source.merchant_id,
            provider: source.provider,
            event_id,
            payout_id: &event.payout_id,
            status_from: booked.as_ref().map(|b| b.status),
            status_to: to,
            amount_minor: booked
                .as_ref()
                .map_or(event.amount_minor, |b| b.amount_minor),
            currency: booked
                .as_ref()
                .map_or(event.currency.code(), |b| b.currency.as_str()),
            transfer: transfer.as_ref().map(|t| entries(source.provider, t)),
        };
        match model::apply(conn, &write).await? {
            Applied::Done(transfer_id) => return Ok(CallbackOutcome::applied(transfer_id)),
            // The event id posted before under another payout's state: this event is in the books.
            Applied::AlreadyPosted => return Ok(CallbackOutcome::ignored("already_applied")),
            Applied::StateChanged => continue,
        }
    }
    Err(IdempotencyError::NotYet("state_kept_changing"))
}

/// A payout transfer's two entries: the account that receives the amount, and the one it
/// leaves (a reversal the other way round).
fn entries(provider: &str, transfer: &Transfer) -> model::Entries {
    let clearing = ledger::psp_clearing(provider);
    let bank = ledger::bank(provider, &transfer.currency);
    let (to, from) = match transfer.kind {
        Kind::Payout => (bank, clearing),
        Kind::PayoutReversal => (clearing, bank),
    };
    model::Entries {
        kind: transfer.kind,
        account_to: to,
        account_from: from,
        amount_minor: transfer.amount_minor,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Currency;

    fn event(change: PayoutChange, amount_minor: i64) -> PayoutEvent {
        PayoutEvent {
            payout_id: "po_1".into(),
            change,
            amount_minor,
            currency: Currency::parse("EUR").unwrap(),
        }
    }

    fn booked(status: Status, amount_minor: i64) -> Booked {
        Booked {
            status,
            amount_minor,
            currency: "EUR".into(),
        }
    }

    #[test]
    fn a_paid_payout_moves_its_amount_from_clearing_to_the_bank() {
        let plan = plan(&event(PayoutChange::Paid, 9000), None);
        let Plan::Write {
            to: Status::Paid,
            transfer: Some(transfer),
        } = plan
        else {
            panic!("{plan:?}");
        };
        let entries = entries("stripe", &transfer);
        assert_eq!(
            (entries.account_to.as_str(), entries.account_from.as_str()),
            ("bank:stripe:EUR", "psp_clearing:stripe")
        );
        assert_eq!((entries.kind, entries.amount_minor), (Kind::Payout, 9000));
    }

    #[test]
    fn a_failure_after_the_payment_gives_back_what_the_books_paid_out() {
        // The failure's own amount differs: the books give back what they moved.
        let plan = plan(
            &event(PayoutChange::Failed, 1),
            Some(&booked(Status::Paid, 9000)),
        );
        let Plan::Write {
            to: Status::Failed,
            transfer: Some(transfer),
        } = plan
        else {
            panic!("{plan:?}");
        };
        let entries = entries("stripe", &transfer);
        assert_eq!(
            (entries.account_to.as_str(), entries.account_from.as_str()),
            ("psp_clearing:stripe", "bank:stripe:EUR")
        );
        assert_eq!(
            (entries.kind, entries.amount_minor),
            (Kind::PayoutReversal, 9000)
        );
    }

    #[test]
    fn a_failure_first_books_nothing_and_the_late_payment_nothing_either() {
        assert_eq!(
            plan(&event(PayoutChange::Failed, 9000), None),
            Plan::Write {
                to: Status::Failed,
                transfer: None
            }
        );
        assert_eq!(
            plan(
                &event(PayoutChange::Paid, 9000),
                Some(&booked(Status::Failed, 9000))
            ),
            Plan::Ignore("payout_failed")
        );
    }

    #[test]
    fn each_state_posts_once() {
        assert_eq!(
            plan(
                &event(PayoutChange::Paid, 9000),
                Some(&booked(Status::Paid, 9000))
            ),
            Plan::Ignore("already_applied")
        );
        assert_eq!(
            plan(
                &event(PayoutChange::Failed, 9000),
                Some(&booked(Status::Failed, 9000))
            ),
            Plan::Ignore("already_applied")
        );
    }
}
