//! The ledger's side of a reconciliation: one streamed pass over the transfers in the window.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::TryStreamExt;

use super::classify::Kind;
use crate::ledger::{
    DISPUTE_FEES, PAYOUT, PAYOUT_REVERSAL, SETTLEMENT_FEE, SETTLEMENT_FX, UNAPPLIED_FUNDS,
    psp_clearing,
};
use crate::money::Currency;

/// The query, kept beside this file so a test can EXPLAIN exactly what runs.
pub const LEDGER_WINDOW_SQL: &str = include_str!("ledger_window.sql");

#[derive(Debug, QueryableByName)]
struct Row {
    #[diesel(sql_type = Text)]
    payment_id: String,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = BigInt)]
    amount_minor: i64,
    #[diesel(sql_type = Text)]
    account: String,
}

/// One ledger movement as the reconciliation sees it: a transfer's amount for the payment, or
/// a chargeback's fee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub payment_id: String,
    pub kind: Kind,
    pub created_at: DateTime<Utc>,
    /// `None` when the stored code is not one the gateway knows: the item can only mismatch.
    pub currency: Option<Currency>,
    /// What moved at the provider: the entry's size, whatever its sign.
    pub amount_minor: i64,
    pub held: bool,
}

impl Transfer {
    fn from_row(row: Row) -> Option<Self> {
        // A payout moves the provider's balance to the bank, and a settlement's fee is the
        // provider's charge, neither a payment's money: `settle` matches them to the provider's
        // report, not this comparison.
        if [PAYOUT, PAYOUT_REVERSAL, SETTLEMENT_FEE, SETTLEMENT_FX].contains(&row.kind.as_str()) {
            return None;
        }
        let kind = if row.account == DISPUTE_FEES {
            Some(Kind::DisputeFee)
        } else {
            Kind::parse(&row.kind).filter(|kind| *kind != Kind::DisputeFee)
        };
        let Some(kind) = kind else {
            tracing::warn!(
                kind = row.kind,
                payment_id = row.payment_id,
                "skipped a transfer of unknown kind"
            );
            return None;
        };
        Some(Self {
            currency: Currency::parse(&row.currency),
            amount_minor: row.amount_minor.saturating_abs(),
            held: row.account == UNAPPLIED_FUNDS,
            payment_id: row.payment_id,
            kind,
            created_at: row.created_at,
        })
    }
}

/// Streams every transfer of `merchant_id` from `provider` created in `[from, to)` into `each`
/// (a chargeback with a fee twice: its amount and its fee); returns how many transfers were read.
pub async fn for_each_transfer(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    mut each: impl FnMut(Transfer),
) -> anyhow::Result<u64> {
    let mut rows = diesel::sql_query(LEDGER_WINDOW_SQL)
        .bind::<BigInt, _>(merchant_id)
        .bind::<Text, _>(provider)
        .bind::<Text, _>(psp_clearing(provider))
        .bind::<Timestamptz, _>(from)
        .bind::<Timestamptz, _>(to)
        .load_stream::<Row>(conn)
        .await?;
    let mut read = 0u64;
    while let Some(row) = rows.try_next().await? {
        if row.account != DISPUTE_FEES {
            read += 1;
        }
        if let Some(transfer) = Transfer::from_row(row) {
            each(transfer);
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str, amount_minor: i64, account: &str) -> Row {
        Row {
            payment_id: "pay_1".into(),
            kind: kind.into(),
            created_at: DateTime::<Utc>::UNIX_EPOCH,
            currency: "EUR".into(),
            amount_minor,
            account: account.into(),
        }
    }

    #[test]
    fn a_refund_and_its_return_count_the_size_of_their_merchant_entries() {
        let transfer = Transfer::from_row(row("refund", 500, "merchant_payable"));
        assert_eq!(
            transfer.map(|t| (t.kind, t.amount_minor, t.held)),
            Some((Kind::Refund, 500, false))
        );
        let returned = Transfer::from_row(row("refund_reversal", -500, "merchant_payable"));
        assert_eq!(
            returned.map(|t| (t.kind, t.amount_minor, t.held)),
            Some((Kind::RefundReversal, 500, false))
        );
    }

    #[test]
    fn a_payout_is_no_payment_movement() {
        assert_eq!(
            Transfer::from_row(row("payout", 9000, "bank:stripe:EUR")),
            None
        );
        assert_eq!(
            Transfer::from_row(row("payout_reversal", -9000, "bank:stripe:EUR")),
            None
        );
    }

    #[test]
    fn a_chargeback_is_its_amount_and_its_fee_apart() {
        let amount = Transfer::from_row(row("chargeback", 5000, "merchant_payable"));
        assert_eq!(
            amount.map(|t| (t.kind, t.amount_minor)),
            Some((Kind::Chargeback, 5000))
        );
        let fee = Transfer::from_row(row("chargeback", 1500, DISPUTE_FEES));
        assert_eq!(
            fee.map(|t| (t.kind, t.amount_minor, t.held)),
            Some((Kind::DisputeFee, 1500, false))
        );
        let back = Transfer::from_row(row("chargeback_reversal", -5000, UNAPPLIED_FUNDS));
        assert_eq!(
            back.map(|t| (t.kind, t.amount_minor, t.held)),
            Some((Kind::ChargebackReversal, 5000, true))
        );
    }

    #[test]
    fn a_capture_booked_to_unapplied_funds_is_held() {
        let transfer = Transfer::from_row(row("payment", 4620, UNAPPLIED_FUNDS));
        assert_eq!(transfer.map(|t| t.held), Some(true));
    }

    #[test]
    fn a_transfer_of_unknown_kind_is_skipped() {
        assert_eq!(
            Transfer::from_row(row("payout", 1, "merchant_payable")),
            None
        );
        assert_eq!(
            Transfer::from_row(row("dispute_fee", 1, "merchant_payable")),
            None,
            "no transfer has that kind"
        );
    }
}
