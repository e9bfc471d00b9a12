//! The append-only double-entry ledger: one balanced transfer per applied event, unique per
//! (merchant, provider, event id) forever, and per-merchant balances.

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use crate::db::one_row::CommittedResult;

pub mod checkpoint;

/// The merchant's liability: what the gateway owes the merchant.
pub const MERCHANT_PAYABLE: &str = "merchant_payable";

/// Money captured for the merchant that could not be applied to an order (suspense).
pub const UNAPPLIED_FUNDS: &str = "unapplied_funds";

/// What the merchant paid in dispute fees: the fee a provider takes with a chargeback.
pub const DISPUTE_FEES: &str = "dispute_fees";

/// The provider's clearing account: money held at the payment provider.
pub fn psp_clearing(provider: &str) -> String {
    format!("psp_clearing:{provider}")
}

/// The merchant's bank account that a provider pays out to, one per currency: what the
/// provider paid out and the bank received (its balance is positive).
pub fn bank(provider: &str, currency: &str) -> String {
    format!("bank:{provider}:{currency}")
}

/// The kinds of a payout's transfers (`crate::payouts`): the payout, and its give-back when it
/// failed after it was paid. They move the provider's balance, not a payment's money.
pub const PAYOUT: &str = "payout";
pub const PAYOUT_REVERSAL: &str = "payout_reversal";
/// The kind of a fee `settle` booked from a provider's report (`crate::settlement`).
pub const SETTLEMENT_FEE: &str = "fee";
/// The kind of a conversion `settle` booked: a line settled in another currency than it was
/// paid in (`crate::settlement`).
pub const SETTLEMENT_FX: &str = "fx";

/// The provider's conversions, one balance per currency: what it converted from (positive)
/// and to (negative); their ratio is the rate it applied.
pub fn fx(provider: &str) -> String {
    format!("fx:{provider}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    Payment,
    Refund,
    /// A dispute's withdrawal: the provider took the amount back, and a fee.
    Chargeback,
    /// A dispute's reinstatement: the provider gave the amount back.
    ChargebackReversal,
    /// A refund the provider gave back after it was booked (it failed, was cancelled or came
    /// back from the bank): the refund's exact inverse, the money in clearing again.
    RefundReversal,
}

impl TransferKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferKind::Payment => "payment",
            TransferKind::Refund => "refund",
            TransferKind::Chargeback => "chargeback",
            TransferKind::ChargebackReversal => "chargeback_reversal",
            TransferKind::RefundReversal => "refund_reversal",
        }
    }

    /// Whether the transfer moves money into clearing (to the merchant's side) rather than out.
    fn moves_money_in(self) -> bool {
        matches!(
            self,
            TransferKind::Payment | TransferKind::ChargebackReversal | TransferKind::RefundReversal
        )
    }
}

/// The merchant-side account a transfer posts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MerchantAccount {
    /// Applied to an order: owed to the merchant.
    Payable,
    /// Held: captured, not applicable to its order.
    Unapplied,
}

impl MerchantAccount {
    pub fn name(self) -> &'static str {
        match self {
            MerchantAccount::Payable => MERCHANT_PAYABLE,
            MerchantAccount::Unapplied => UNAPPLIED_FUNDS,
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [MerchantAccount::Payable, MerchantAccount::Unapplied]
            .into_iter()
            .find(|account| account.name() == name)
    }
}

/// A transfer's entries, derived from its amounts so they are balanced by construction: a
/// payment (or a chargeback's reversal) moves money into clearing and owes it to the merchant
/// side; a refund (or a chargeback) reverses that, and a chargeback's fee is a third entry,
/// paid from clearing into `dispute_fees`. Written by `payment_apply_all` (migrations 000021,
/// 000032), the writer of a payment's transfers (a payout's and a settlement's fees have their
/// own: `crate::payouts`, `crate::settlement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries {
    pub account_a: String,
    pub amount_a: i64,
    pub account_b: String,
    pub amount_b: i64,
    /// A chargeback's fee: `dispute_fees` +fee.
    pub account_c: Option<String>,
    pub amount_c: Option<i64>,
}

impl Entries {
    pub fn of(
        kind: TransferKind,
        provider: &str,
        merchant: MerchantAccount,
        amount_minor: i64,
    ) -> Self {
        let clearing = psp_clearing(provider);
        let merchant = merchant.name().to_owned();
        let (account_a, account_b) = if kind.moves_money_in() {
            (clearing, merchant)
        } else {
            (merchant, clearing)
        };
        Self {
            account_a,
            amount_a: amount_minor,
            account_b,
            amount_b: -amount_minor,
            account_c: None,
            amount_c: None,
        }
    }

    /// A chargeback of `amount_minor` with its `fee_minor`: `merchant` +amount, clearing
    /// -(amount + fee), `dispute_fees` +fee (no third entry without a fee). `None` when the sum
    /// does not fit 64 bits (the parser's bounds keep it far below).
    pub fn chargeback(
        provider: &str,
        merchant: MerchantAccount,
        amount_minor: i64,
        fee_minor: i64,
    ) -> Option<Self> {
        let total = amount_minor.checked_add(fee_minor)?;
        let entries = Self::of(TransferKind::Chargeback, provider, merchant, amount_minor);
        Some(if fee_minor == 0 {
            entries
        } else {
            Self {
                amount_b: -total,
                account_c: Some(DISPUTE_FEES.to_owned()),
                amount_c: Some(fee_minor),
                ..entries
            }
        })
    }

    /// The entries' sum (zero for every transfer), exactly.
    pub fn sum(&self) -> i128 {
        i128::from(self.amount_a)
            + i128::from(self.amount_b)
            + i128::from(self.amount_c.unwrap_or(0))
    }
}

/// One account's balance in one currency. Sums are exact: an `i128` holds the sum of any
/// number of 64-bit entries this database can store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Balance {
    pub account: String,
    pub currency: String,
    #[schema(value_type = i64)]
    pub balance_minor: i128,
}

/// What the ledger holds for one refund id: the refund transfer's amount (`None`: no refund
/// transfer carries the id), and whether its reversal is posted (a refund the provider gave
/// back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BookedRefund {
    pub refunded_minor: Option<i64>,
    pub reversed: bool,
    /// The refund was posted against unapplied funds (a held payment's, or one held for
    /// exceeding the capture).
    pub held: bool,
}

#[derive(diesel::QueryableByName)]
struct RefundTransfer {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = BigInt)]
    clearing_minor: i64,
    #[diesel(sql_type = Bool)]
    held: bool,
}

/// What the books hold for refund `refund_id` of `merchant_id` at `provider` (the unique index
/// on the refund id and kind).
pub async fn booked_refund(
    mut conn: &AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    refund_id: &str,
) -> QueryResult<BookedRefund> {
    let rows: Vec<RefundTransfer> = diesel::sql_query(
        "SELECT t.kind, e.amount_minor AS clearing_minor, \
                EXISTS (SELECT 1 FROM ledger_entries u WHERE u.transfer_id = t.id \
                        AND u.account = 'unapplied_funds') AS held \
         FROM ledger_transfers t JOIN ledger_entries e ON e.transfer_id = t.id AND e.account = $4 \
         WHERE t.merchant_id = $1 AND t.provider = $2 AND t.refund_id = $3 \
           AND t.kind IN ('refund', 'refund_reversal')",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Text, _>(refund_id)
    .bind::<Text, _>(psp_clearing(provider))
    .load(&mut conn)
    .await?;
    let refund = rows
        .iter()
        .find(|r| r.kind == TransferKind::Refund.as_str());
    Ok(BookedRefund {
        refunded_minor: refund.map(|r| -r.clearing_minor),
        held: refund.is_some_and(|r| r.held),
        reversed: rows
            .iter()
            .any(|r| r.kind == TransferKind::RefundReversal.as_str()),
    })
}

/// The transfer an event id posted, as far as it tells one event from another: what it did
/// to which payment, under which refund id, and how much it moved through clearing.
/// Asked only after a posting conflicted, never on a first delivery: a late redelivery posts
/// the same transfer again, another event under a reused id another one. The ledger is never
/// dropped, so the answer does not depend on which months of the event log are still there.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct PostedTransfer {
    #[diesel(sql_type = Text)]
    pub kind: String,
    #[diesel(sql_type = Text)]
    pub payment_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub refund_id: Option<String>,
    /// The clearing account's entry (0 for a transfer that has none).
    #[diesel(sql_type = BigInt)]
    pub clearing_minor: i64,
}

/// The transfer `event_id` posted, if any (the unique index on the event id, then the
/// transfer's entries by their index).
pub async fn posted_transfer(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    event_id: &str,
) -> QueryResult<Option<PostedTransfer>> {
    use diesel::OptionalExtension;
    diesel::sql_query(
        "SELECT t.kind, t.payment_id, t.refund_id, \
                coalesce((SELECT sum(e.amount_minor) FROM ledger_entries e \
                          WHERE e.transfer_id = t.id AND e.account = $4), 0)::bigint AS clearing_minor \
         FROM ledger_transfers t \
         WHERE t.merchant_id = $1 AND t.provider = $2 AND t.event_id = $3",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Text, _>(event_id)
    .bind::<Text, _>(psp_clearing(provider))
    .committed_result(conn)
    .await
    .optional()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transfer_sums_to_zero() {
        for kind in [
            TransferKind::Payment,
            TransferKind::Refund,
            TransferKind::Chargeback,
            TransferKind::ChargebackReversal,
            TransferKind::RefundReversal,
        ] {
            for merchant in [MerchantAccount::Payable, MerchantAccount::Unapplied] {
                let e = Entries::of(kind, "acme", merchant, 1999);
                assert_eq!(e.sum(), 0, "{kind:?} {merchant:?}");
                let fee = Entries::chargeback("acme", merchant, 1999, 1500).unwrap();
                assert_eq!(fee.sum(), 0, "{merchant:?}");
            }
        }
    }

    #[test]
    fn a_chargeback_takes_the_amount_and_the_fee_from_clearing() {
        let e = Entries::chargeback("acme", MerchantAccount::Payable, 5000, 1500).unwrap();
        assert_eq!((e.account_a.as_str(), e.amount_a), (MERCHANT_PAYABLE, 5000));
        assert_eq!(
            (e.account_b.as_str(), e.amount_b),
            ("psp_clearing:acme", -6500)
        );
        assert_eq!(
            (e.account_c.as_deref(), e.amount_c),
            (Some(DISPUTE_FEES), Some(1500))
        );
        let no_fee = Entries::chargeback("acme", MerchantAccount::Unapplied, 5000, 0).unwrap();
        assert_eq!(
            (no_fee.account_a.as_str(), no_fee.amount_a),
            (UNAPPLIED_FUNDS, 5000)
        );
        assert_eq!((no_fee.account_c, no_fee.amount_c), (None, None));
    }

    #[test]
    fn a_reinstatement_gives_the_amount_back_like_a_payment() {
        let e = Entries::of(
            TransferKind::ChargebackReversal,
            "acme",
            MerchantAccount::Payable,
            5000,
        );
        assert_eq!(
            (e.account_a.as_str(), e.amount_a),
            ("psp_clearing:acme", 5000)
        );
        assert_eq!(
            (e.account_b.as_str(), e.amount_b),
            (MERCHANT_PAYABLE, -5000)
        );
    }

    #[test]
    fn a_refund_reverses_a_payment() {
        let payment = Entries::of(
            TransferKind::Payment,
            "acme",
            MerchantAccount::Payable,
            1999,
        );
        let refund = Entries::of(TransferKind::Refund, "acme", MerchantAccount::Payable, 1999);
        assert_eq!(
            (payment.account_a.as_str(), payment.amount_a),
            ("psp_clearing:acme", 1999)
        );
        assert_eq!(
            (refund.account_b.as_str(), refund.amount_b),
            ("psp_clearing:acme", -1999)
        );
        assert_eq!(
            (refund.account_a.as_str(), refund.amount_a),
            (MERCHANT_PAYABLE, 1999)
        );
    }

    #[test]
    fn a_refund_given_back_is_the_refunds_exact_inverse() {
        for merchant in [MerchantAccount::Payable, MerchantAccount::Unapplied] {
            let refund = Entries::of(TransferKind::Refund, "acme", merchant, 700);
            let back = Entries::of(TransferKind::RefundReversal, "acme", merchant, 700);
            assert_eq!(
                (back.account_a.as_str(), back.amount_a),
                ("psp_clearing:acme", 700)
            );
            assert_eq!(
                (back.account_b.as_str(), back.amount_b),
                (merchant.name(), -700)
            );
            assert_eq!(
                (refund.account_b.as_str(), refund.amount_b),
                (back.account_a.as_str(), -back.amount_a)
            );
        }
    }

    #[test]
    fn held_money_is_owed_from_unapplied_funds() {
        let held = Entries::of(
            TransferKind::Payment,
            "acme",
            MerchantAccount::Unapplied,
            700,
        );
        assert_eq!(
            (held.account_b.as_str(), held.amount_b),
            (UNAPPLIED_FUNDS, -700)
        );
    }
}
