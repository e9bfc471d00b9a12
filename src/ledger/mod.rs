//! The append-only double-entry ledger: one balanced transfer per applied event, unique per
//! (merchant, provider, event id) forever, and per-merchant balances.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use crate::money::Currency;
use crate::schema::{ledger_entries, ledger_transfers};

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

    /// Posts the transfer and its entries. `None` when this event was posted before (its
    /// idempotency record may have expired since): nothing is written then.
    pub async fn post(&self, mut conn: &AsyncPgConnection) -> QueryResult<Option<i64>> {
        let transfer_id: Option<i64> = diesel::insert_into(ledger_transfers::table)
            .values((
                ledger_transfers::merchant_id.eq(self.merchant_id),
                ledger_transfers::provider.eq(self.provider),
                ledger_transfers::event_id.eq(self.event_id),
                ledger_transfers::kind.eq(self.kind.as_str()),
                ledger_transfers::order_id.eq(self.order_id),
                ledger_transfers::payment_id.eq(self.payment_id),
            ))
            .on_conflict((
                ledger_transfers::merchant_id,
                ledger_transfers::provider,
                ledger_transfers::event_id,
            ))
            .do_nothing()
            .returning(ledger_transfers::id)
            .get_result(&mut conn)
            .await
            .optional()?;
        let Some(transfer_id) = transfer_id else {
            return Ok(None);
        };
        // A fixed-size array (not a Vec) keeps the statement's shape static, so it is prepared.
        let rows = self.entries().map(|(account, amount)| {
            (
                ledger_entries::transfer_id.eq(transfer_id),
                ledger_entries::merchant_id.eq(self.merchant_id),
                ledger_entries::account.eq(account),
                ledger_entries::currency.eq(self.currency.code()),
                ledger_entries::amount_minor.eq(amount),
            )
        });
        diesel::insert_into(ledger_entries::table)
            .values(rows)
            .execute(&mut conn)
            .await?;
        Ok(Some(transfer_id))
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
