//! The `payments` table, read: one row per provider payment, holding its state. Its one writer
//! is `payment_apply_all`, reached through [`super::apply`] and the one-statement capture.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::schema::payments;

/// A payment's state, as stored in its `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentStatus {
    Pending,
    Succeeded,
    Failed,
    PartiallyRefunded,
    Refunded,
    /// Captured, but not applicable to its order: the money sits in unapplied funds. A held
    /// payment stays held through its disputes (their money moves in unapplied funds too).
    Held,
    /// The provider withdrew funds for a dispute that has not closed lost.
    Disputed,
    /// A dispute closed lost while its funds were withdrawn.
    ChargedBack,
}

impl PaymentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Pending => "pending",
            PaymentStatus::Succeeded => "succeeded",
            PaymentStatus::Failed => "failed",
            PaymentStatus::PartiallyRefunded => "partially_refunded",
            PaymentStatus::Refunded => "refunded",
            PaymentStatus::Held => "held",
            PaymentStatus::Disputed => "disputed",
            PaymentStatus::ChargedBack => "charged_back",
        }
    }

    /// Every status a payment can be in.
    pub const ALL: [PaymentStatus; 8] = [
        PaymentStatus::Pending,
        PaymentStatus::Succeeded,
        PaymentStatus::Failed,
        PaymentStatus::PartiallyRefunded,
        PaymentStatus::Refunded,
        PaymentStatus::Held,
        PaymentStatus::Disputed,
        PaymentStatus::ChargedBack,
    ];

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == s)
    }

    /// True once money was captured (held, refunded and disputed included).
    pub fn is_captured(self) -> bool {
        matches!(
            self,
            PaymentStatus::Succeeded
                | PaymentStatus::PartiallyRefunded
                | PaymentStatus::Refunded
                | PaymentStatus::Held
                | PaymentStatus::Disputed
                | PaymentStatus::ChargedBack
        )
    }

    /// True while a dispute holds funds of it back (or kept them, closed lost).
    pub fn is_in_dispute(self) -> bool {
        matches!(self, PaymentStatus::Disputed | PaymentStatus::ChargedBack)
    }

    /// An applied payment's status from its refunds alone (no dispute holding funds back).
    pub fn settled(captured_minor: i64, refunded_minor: i64) -> Self {
        if refunded_minor <= 0 {
            PaymentStatus::Succeeded
        } else if refunded_minor >= captured_minor {
            PaymentStatus::Refunded
        } else {
            PaymentStatus::PartiallyRefunded
        }
    }
}

/// The payment as the state machine needs it.
#[derive(Debug, Clone)]
pub struct PaymentState {
    pub order_id: Option<i64>,
    pub status: PaymentStatus,
    pub captured_minor: i64,
    pub refunded_minor: i64,
    /// What disputes hold back of it: withdrawn minus reinstated.
    pub disputed_minor: i64,
    pub currency: String,
}

impl PaymentState {
    /// What may still be refunded: captured - refunded - withdrawn + reinstated (`None` beyond
    /// 64 bits; negative when a withdrawal took more than remained).
    pub fn refundable_minor(&self) -> Option<i64> {
        self.captured_minor
            .checked_sub(self.refunded_minor)?
            .checked_sub(self.disputed_minor)
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct Payment {
    pub order_id: Option<i64>,
    pub status: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
    pub disputed_minor: i64,
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
    /// The state machine's view; a status the code does not know is an error, never a guess.
    pub fn state(&self) -> QueryResult<PaymentState> {
        let status = PaymentStatus::parse(&self.status).ok_or_else(|| {
            diesel::result::Error::DeserializationError(
                format!("unknown payment status {:?}", self.status).into(),
            )
        })?;
        Ok(PaymentState {
            order_id: self.order_id,
            status,
            captured_minor: self.amount_minor,
            refunded_minor: self.refunded_minor,
            disputed_minor: self.disputed_minor,
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
}

/// The payment that paid an order (captured and applied to it), as a refund needs it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = payments)]
pub struct OrderPayment {
    pub provider: String,
    pub payment_id: String,
    pub amount_minor: i64,
    pub refunded_minor: i64,
    pub disputed_minor: i64,
    pub currency: String,
}

impl OrderPayment {
    /// What may still be refunded of it, before refund requests in flight: captured - refunded
    /// - withdrawn + reinstated, never below zero.
    pub fn refundable_minor(&self) -> i64 {
        self.amount_minor
            .saturating_sub(self.refunded_minor)
            .saturating_sub(self.disputed_minor)
            .max(0)
    }

    /// The merchant's payment applied to `order_id` (a held payment never is), if any.
    pub async fn of_order(
        conn: &mut AsyncPgConnection,
        merchant_id: i64,
        order_id: i64,
    ) -> QueryResult<Option<OrderPayment>> {
        payments::table
            .filter(payments::merchant_id.eq(merchant_id))
            .filter(payments::order_id.eq(order_id))
            .filter(payments::status.eq_any([
                PaymentStatus::Succeeded.as_str(),
                PaymentStatus::PartiallyRefunded.as_str(),
                PaymentStatus::Refunded.as_str(),
                PaymentStatus::Disputed.as_str(),
                PaymentStatus::ChargedBack.as_str(),
            ]))
            .select(OrderPayment::as_select())
            .first(conn)
            .await
            .optional()
    }
}
