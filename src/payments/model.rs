//! The `payments` table: one row per provider payment, holding its state.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::state::{PaymentState, PaymentStatus};
use crate::schema::payments;

// The writes go through prepared helper functions (migration 000005): diesel would re-plan an
// ON CONFLICT DO UPDATE or an UPDATE on every call.
diesel::define_sql_function! {
    fn payments_upsert(
        merchant_id: diesel::sql_types::BigInt,
        provider: diesel::sql_types::Text,
        payment_id: diesel::sql_types::Text,
        order_id: diesel::sql_types::BigInt,
        status: diesel::sql_types::Text,
        amount_minor: diesel::sql_types::BigInt,
        currency: diesel::sql_types::Text,
    ) -> diesel::sql_types::Integer;
}

diesel::define_sql_function! {
    fn payments_record_refund(
        merchant_id: diesel::sql_types::BigInt,
        provider: diesel::sql_types::Text,
        payment_id: diesel::sql_types::Text,
        refunded_minor: diesel::sql_types::BigInt,
        status: diesel::sql_types::Text,
    ) -> diesel::sql_types::Integer;
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct Payment {
    pub order_id: i64,
    pub status: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
    pub currency: String,
}

/// Identifies a payment: the provider's payment id within one merchant and provider.
#[derive(Debug, Clone, Copy)]
pub struct PaymentKey<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub payment_id: &'a str,
}

// Every query takes a shared connection so the callback path can pipeline them.
impl Payment {
    pub fn state(&self) -> Option<PaymentState> {
        Some(PaymentState {
            order_id: self.order_id,
            status: PaymentStatus::parse(&self.status)?,
            captured_minor: self.amount_minor,
            refunded_minor: self.refunded_minor,
            currency: self.currency.clone(),
        })
    }

    /// Reads the payment; `lock` holds its row until the transaction ends.
    pub async fn find(
        mut conn: &AsyncPgConnection,
        key: PaymentKey<'_>,
        lock: bool,
    ) -> QueryResult<Option<Payment>> {
        let query = payments::table
            .filter(payments::merchant_id.eq(key.merchant_id))
            .filter(payments::provider.eq(key.provider))
            .filter(payments::payment_id.eq(key.payment_id))
            .select(Payment::as_select());
        if lock {
            query.for_update().first(&mut conn).await.optional()
        } else {
            query.first(&mut conn).await.optional()
        }
    }

    /// Creates or moves the payment to `status` with `captured` minor units (0 for a failure).
    pub async fn upsert(
        mut conn: &AsyncPgConnection,
        key: PaymentKey<'_>,
        order_id: i64,
        status: PaymentStatus,
        captured_minor: i64,
        currency: &str,
    ) -> QueryResult<()> {
        diesel::select(payments_upsert(
            key.merchant_id,
            key.provider,
            key.payment_id,
            order_id,
            status.as_str(),
            captured_minor,
            currency,
        ))
        .execute(&mut conn)
        .await
        .map(|_| ())
    }

    pub async fn record_refund(
        mut conn: &AsyncPgConnection,
        key: PaymentKey<'_>,
        refunded_total: i64,
        status: PaymentStatus,
    ) -> QueryResult<()> {
        diesel::select(payments_record_refund(
            key.merchant_id,
            key.provider,
            key.payment_id,
            refunded_total,
            status.as_str(),
        ))
        .execute(&mut conn)
        .await
        .map(|_| ())
    }
}
