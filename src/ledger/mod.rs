//! The append-only double-entry ledger: one balanced transfer per applied event, unique per
//! (merchant, provider, event id) forever, and per-merchant balances.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use crate::money::Currency;

#[expect(
    clippy::too_many_arguments,
    reason = "the call mirrors the SQL function's parameters, one per column written"
)]
mod sql {
    use diesel::sql_types::{BigInt, Text};

    diesel::define_sql_function! {
        /// Inserts the transfer (ON CONFLICT DO NOTHING) and, when new, its two entries; returns
        /// the transfer id or NULL (migration 000005).
        fn ledger_post_transfer(
            merchant_id: BigInt,
            provider: Text,
            event_id: Text,
            kind: Text,
            order_id: BigInt,
            payment_id: Text,
            currency: Text,
            account_a: Text,
            amount_a: BigInt,
            account_b: Text,
            amount_b: BigInt,
        ) -> diesel::sql_types::Nullable<BigInt>;
    }
}
use sql::ledger_post_transfer;

/// The merchant's liability: what the gateway owes the merchant.
pub const MERCHANT_PAYABLE: &str = "merchant_payable";

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

/// A transfer to post: its two entries are derived, so it is balanced by construction.
#[derive(Debug, Clone)]
pub struct NewTransfer<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub event_id: &'a str,
    pub kind: TransferKind,
    pub order_id: i64,
    pub payment_id: &'a str,
    pub currency: Currency,
    /// Positive: the amount captured or refunded.
    pub amount_minor: i64,
}

impl NewTransfer<'_> {
    /// (account, signed amount): a payment moves money into clearing and owes it to the
    /// merchant; a refund reverses that. The amounts always sum to zero.
    pub fn entries(&self) -> [(String, i64); 2] {
        let clearing = psp_clearing(self.provider);
        let amount = self.amount_minor;
        match self.kind {
            TransferKind::Payment => [(clearing, amount), (MERCHANT_PAYABLE.to_owned(), -amount)],
            TransferKind::Refund => [(MERCHANT_PAYABLE.to_owned(), amount), (clearing, -amount)],
        }
    }

    /// Posts the transfer and its entries in one prepared call. `None` when this event was
    /// posted before (its idempotency record may have expired since): nothing is written then.
    pub async fn post(&self, mut conn: &AsyncPgConnection) -> QueryResult<Option<i64>> {
        let [(account_a, amount_a), (account_b, amount_b)] = self.entries();
        diesel::select(ledger_post_transfer(
            self.merchant_id,
            self.provider,
            self.event_id,
            self.kind.as_str(),
            self.order_id,
            self.payment_id,
            self.currency.code(),
            account_a,
            amount_a,
            account_b,
            amount_b,
        ))
        .get_result(&mut conn)
        .await
    }
}

/// One account's balance in one currency.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, QueryableByName, utoipa::ToSchema)]
pub struct Balance {
    #[diesel(sql_type = Text)]
    pub account: String,
    #[diesel(sql_type = Text)]
    pub currency: String,
    #[diesel(sql_type = BigInt)]
    pub balance_minor: i64,
}

/// A merchant's balances per account and currency; they sum to zero per currency.
pub async fn balances(conn: &mut AsyncPgConnection, merchant_id: i64) -> QueryResult<Vec<Balance>> {
    diesel::sql_query(
        "SELECT account, currency, SUM(amount_minor)::BIGINT AS balance_minor \
         FROM ledger_entries WHERE merchant_id = $1 \
         GROUP BY account, currency ORDER BY account, currency",
    )
    .bind::<BigInt, _>(merchant_id)
    .load(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transfer(kind: TransferKind) -> NewTransfer<'static> {
        NewTransfer {
            merchant_id: 42,
            provider: "acme",
            event_id: "evt_1",
            kind,
            order_id: 1,
            payment_id: "pay_1",
            currency: Currency::parse("USD").unwrap_or_else(|| unreachable!()),
            amount_minor: 1999,
        }
    }

    #[test]
    fn every_transfer_sums_to_zero() {
        for kind in [TransferKind::Payment, TransferKind::Refund] {
            let sum: i64 = transfer(kind).entries().iter().map(|(_, a)| a).sum();
            assert_eq!(sum, 0, "{kind:?}");
        }
    }

    #[test]
    fn a_refund_reverses_a_payment() {
        let payment = transfer(TransferKind::Payment).entries();
        let refund = transfer(TransferKind::Refund).entries();
        assert_eq!(payment[0], ("psp_clearing:acme".to_owned(), 1999));
        assert_eq!(refund[1], ("psp_clearing:acme".to_owned(), -1999));
        assert_eq!(refund[0], (MERCHANT_PAYABLE.to_owned(), 1999));
    }
}
