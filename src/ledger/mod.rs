//! The append-only double-entry ledger: one balanced transfer per applied event, unique per
//! (merchant, provider, event id) forever, and per-merchant balances.

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bool, Bytea, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

pub mod checkpoint;

/// The merchant's liability: what the gateway owes the merchant.
pub const MERCHANT_PAYABLE: &str = "merchant_payable";

/// Money captured for the merchant that could not be applied to an order (suspense).
pub const UNAPPLIED_FUNDS: &str = "unapplied_funds";

/// The provider's clearing account: money held at the payment provider.
pub fn psp_clearing(provider: &str) -> String {
    format!("psp_clearing:{provider}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    Payment,
    Refund,
}

impl TransferKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferKind::Payment => "payment",
            TransferKind::Refund => "refund",
        }
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
}

/// A transfer's two entries, derived from one amount so they are balanced by construction:
/// a payment moves money into clearing and owes it to the merchant side; a refund reverses
/// that. Written by `ledger_post_transfer` (migration 000007), the ledger's one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries {
    pub account_a: String,
    pub amount_a: i64,
    pub account_b: String,
    pub amount_b: i64,
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
        let (account_a, account_b) = match kind {
            TransferKind::Payment => (clearing, merchant),
            TransferKind::Refund => (merchant, clearing),
        };
        Self {
            account_a,
            amount_a: amount_minor,
            account_b,
            amount_b: -amount_minor,
        }
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

/// What the ledger holds for an event id, seen by a delivery with some body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventPosting {
    /// No transfer carries the event id (a conflict was on a refund id instead).
    NotPosted,
    /// The delivery that posted it had this very body: a late redelivery.
    SameBody,
    /// It was posted by another body (or by a delivery the event log does not have): the
    /// provider reused the event id for another event.
    AnotherBody,
}

#[derive(diesel::QueryableByName)]
struct EventPostingRow {
    #[diesel(sql_type = Bool)]
    posted: bool,
    #[diesel(sql_type = Nullable<Bool>)]
    same_body: Option<bool>,
}

/// Whether `event_id` posted a transfer, and with which body (the event log keeps the body of
/// every first delivery, in the same transaction as its transfer). Two unique-index lookups;
/// only asked after a posting conflicted, never on a first delivery.
pub async fn event_posting(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    event_id: &str,
    body: &[u8],
) -> QueryResult<EventPosting> {
    let row: EventPostingRow = diesel::sql_query(
        "SELECT EXISTS (SELECT 1 FROM ledger_transfers \
                        WHERE merchant_id = $1 AND provider = $2 AND event_id = $3) AS posted, \
                (SELECT body = $4 FROM callback_deliveries \
                 WHERE merchant_id = $1 AND provider = $2 AND event_id = $3) AS same_body",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<Text, _>(provider)
    .bind::<Text, _>(event_id)
    .bind::<Bytea, _>(body)
    .get_result(conn)
    .await?;
    Ok(match (row.posted, row.same_body) {
        (false, _) => EventPosting::NotPosted,
        (true, Some(true)) => EventPosting::SameBody,
        (true, _) => EventPosting::AnotherBody,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transfer_sums_to_zero() {
        for kind in [TransferKind::Payment, TransferKind::Refund] {
            for merchant in [MerchantAccount::Payable, MerchantAccount::Unapplied] {
                let e = Entries::of(kind, "acme", merchant, 1999);
                assert_eq!(e.amount_a + e.amount_b, 0, "{kind:?} {merchant:?}");
            }
        }
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
