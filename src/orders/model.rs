//! The `orders` table: an order, its status column as an enum, and the queries that read it.
//! Payments read and lock orders through this file alone, without the create request.

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::schema::orders;

/// An order's payment status, as stored in its `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderStatus {
    PendingPayment,
    Paid,
    PartiallyRefunded,
    Refunded,
    /// Its payment's funds are withdrawn for a dispute that has not closed lost.
    Disputed,
    /// Its payment's dispute closed lost.
    ChargedBack,
}

impl OrderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::PendingPayment => "pending_payment",
            OrderStatus::Paid => "paid",
            OrderStatus::PartiallyRefunded => "partially_refunded",
            OrderStatus::Refunded => "refunded",
            OrderStatus::Disputed => "disputed",
            OrderStatus::ChargedBack => "charged_back",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending_payment" => Some(OrderStatus::PendingPayment),
            "paid" => Some(OrderStatus::Paid),
            "partially_refunded" => Some(OrderStatus::PartiallyRefunded),
            "refunded" => Some(OrderStatus::Refunded),
            "disputed" => Some(OrderStatus::Disputed),
            "charged_back" => Some(OrderStatus::ChargedBack),
            _ => None,
        }
    }
}

/// The order as the payment state machine needs it.
#[derive(Debug, Clone)]
pub struct OrderState {
    pub id: i64,
    pub amount_minor: i64,
    pub currency: String,
    pub status: OrderStatus,
}

/// An order's status change: the state a plan saw, and the one it moves to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OrderMove {
    pub order_id: i64,
    pub from: OrderStatus,
    pub to: OrderStatus,
}

impl Order {
    /// The order's status; one the code does not know is an error, never a guess.
    pub fn status(&self) -> QueryResult<OrderStatus> {
        OrderStatus::parse(&self.status).ok_or_else(|| {
            diesel::result::Error::DeserializationError(
                format!("unknown order status {:?}", self.status).into(),
            )
        })
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = orders)]
pub struct Order {
    pub id: i64,
    pub user_id: i64,
    pub amount_minor: i64,
    pub currency: String,
    pub reference: Option<String>,
    pub status: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = orders)]
pub struct NewOrder<'a> {
    pub user_id: i64,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub reference: Option<&'a str>,
    pub status: &'static str,
}

/// An order as the API shows it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct OrderView {
    pub id: i64,
    /// pending_payment, paid, partially_refunded, refunded, disputed or charged_back
    pub status: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reference: Option<String>,
    /// RFC 3339
    pub created_at: String,
}

impl Order {
    /// The order as its API answers show it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(OrderView {
            id: self.id,
            status: self.status.clone(),
            amount_minor: self.amount_minor,
            currency: self.currency.clone(),
            reference: self.reference.clone(),
            created_at: self.created_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        })
        .unwrap_or_default()
    }

    /// The caller's order `id`, or `None` if it does not exist or belongs to someone else.
    pub async fn find_for_user(
        conn: &mut AsyncPgConnection,
        user_id: i64,
        id: i64,
    ) -> QueryResult<Option<Order>> {
        orders::table
            .filter(orders::id.eq(id))
            .filter(orders::user_id.eq(user_id))
            .select(Order::as_select())
            .first(conn)
            .await
            .optional()
    }

    /// Locks the merchant's order for the rest of the transaction (payments change it).
    /// Takes a shared connection so it can be pipelined with other statements.
    pub async fn lock_for_merchant(
        mut conn: &AsyncPgConnection,
        merchant_id: i64,
        id: i64,
    ) -> QueryResult<Option<Order>> {
        orders::table
            .filter(orders::id.eq(id))
            .filter(orders::user_id.eq(merchant_id))
            .select(Order::as_select())
            .for_update()
            .first(&mut conn)
            .await
            .optional()
    }
}
