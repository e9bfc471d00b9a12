//! Orders (`order.create`): validation of a create request, and the `orders` table.

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde::Deserialize;

use crate::idempotency::IdempotentWork;
use crate::idempotency::error::IdempotencyError;
use crate::money::{AmountMinor, Currency};
use crate::schema::orders;

/// An order's payment status, as stored in its `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderStatus {
    PendingPayment,
    Paid,
    PartiallyRefunded,
    Refunded,
}

impl OrderStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            OrderStatus::PendingPayment => "pending_payment",
            OrderStatus::Paid => "paid",
            OrderStatus::PartiallyRefunded => "partially_refunded",
            OrderStatus::Refunded => "refunded",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending_payment" => Some(OrderStatus::PendingPayment),
            "paid" => Some(OrderStatus::Paid),
            "partially_refunded" => Some(OrderStatus::PartiallyRefunded),
            "refunded" => Some(OrderStatus::Refunded),
            _ => None,
        }
    }
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
struct NewOrder<'a> {
    user_id: i64,
    amount_minor: i64,
    currency: &'a str,
    reference: Option<&'a str>,
    status: &'static str,
}

/// An order as the API shows it.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct OrderView {
    pub id: i64,
    /// pending_payment, paid, partially_refunded or refunded
    pub status: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reference: Option<String>,
    /// RFC 3339
    pub created_at: String,
}

/// The body of `POST /v1/orders`.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)] // documents the request; parsing is lenient on purpose (see ValidOrder)
pub struct CreateOrderRequest {
    /// Integer minor units, greater than 0.
    amount_minor: i64,
    /// Upper-case ISO 4217 code.
    currency: String,
    /// At most 255 bytes, no control characters.
    reference: Option<String>,
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

/// The body of `POST /v1/orders`.
#[derive(Debug, Deserialize)]
struct CreateOrderBody {
    amount_minor: serde_json::Value,
    currency: serde_json::Value,
    #[serde(default)]
    reference: Option<serde_json::Value>,
}

/// A validated create request.
#[derive(Debug, PartialEq, Eq)]
pub struct ValidOrder {
    pub amount: AmountMinor,
    pub currency: Currency,
    pub reference: Option<String>,
}

/// Why a create request was refused: deterministic, so stored and replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectionKind {
    InvalidJson,
    InvalidAmount,
    UnknownCurrency,
    InvalidReference,
}

impl RejectionKind {
    /// The stable `error` code clients match on.
    pub fn code(self) -> &'static str {
        match self {
            RejectionKind::InvalidJson => "invalid_json",
            RejectionKind::InvalidAmount => "invalid_amount",
            RejectionKind::UnknownCurrency => "unknown_currency",
            RejectionKind::InvalidReference => "invalid_reference",
        }
    }
}

/// A deterministic refusal of a create request: stored and replayed.
#[derive(Debug, PartialEq, Eq)]
pub struct OrderRejection {
    pub kind: RejectionKind,
    pub message: String,
}

const MAX_REFERENCE_LEN: usize = 255;

impl ValidOrder {
    pub fn parse(body: &[u8]) -> Result<Self, OrderRejection> {
        let reject = |kind, message: String| OrderRejection { kind, message };
        let parsed: CreateOrderBody = serde_json::from_slice(body).map_err(|e| {
            reject(
                RejectionKind::InvalidJson,
                format!("the body is not a valid order: {e}"),
            )
        })?;
        let amount = parsed
            .amount_minor
            .as_i64()
            .and_then(AmountMinor::parse)
            .ok_or_else(|| {
                reject(
                    RejectionKind::InvalidAmount,
                    "amount_minor must be an integer greater than 0".into(),
                )
            })?;
        let currency = parsed
            .currency
            .as_str()
            .and_then(Currency::parse)
            .ok_or_else(|| {
                reject(
                    RejectionKind::UnknownCurrency,
                    "currency must be an upper-case ISO 4217 code such as USD".into(),
                )
            })?;
        let reference = match parsed.reference {
            None | Some(serde_json::Value::Null) => None,
            // PostgreSQL text cannot hold NUL, and no reference needs control characters.
            Some(serde_json::Value::String(s))
                if s.len() <= MAX_REFERENCE_LEN && !s.chars().any(char::is_control) =>
            {
                Some(s)
            }
            Some(_) => {
                return Err(reject(
                    RejectionKind::InvalidReference,
                    format!(
                        "reference must be a string of at most {MAX_REFERENCE_LEN} bytes without control characters"
                    ),
                ));
            }
        };
        Ok(Self {
            amount,
            currency,
            reference,
        })
    }
}

/// `order.create` for one user and raw body, run inside the idempotency transaction.
pub struct CreateOrder<'a> {
    pub user_id: i64,
    pub body: &'a [u8],
}

impl IdempotentWork for CreateOrder<'_> {
    /// The created order, or why it was refused.
    type Output = Result<Order, OrderRejection>;

    fn run<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, Result<Self::Output, IdempotencyError>> {
        async move {
            let valid = match ValidOrder::parse(self.body) {
                Ok(valid) => valid,
                Err(rejection) => return Ok(Err(rejection)),
            };
            let order: Order = diesel::insert_into(orders::table)
                .values(NewOrder {
                    user_id: self.user_id,
                    amount_minor: valid.amount.get(),
                    currency: valid.currency.code(),
                    reference: valid.reference.as_deref(),
                    status: OrderStatus::PendingPayment.as_str(),
                })
                .returning(Order::as_returning())
                .get_result(conn)
                .await?;
            Ok(Ok(order))
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejection_code(body: &str) -> &'static str {
        ValidOrder::parse(body.as_bytes()).unwrap_err().kind.code()
    }

    #[test]
    fn a_well_formed_order_is_valid() {
        let valid =
            ValidOrder::parse(br#"{"amount_minor":1999,"currency":"USD","reference":"cart-77"}"#)
                .unwrap();
        assert_eq!(valid.amount.get(), 1999);
        assert_eq!(valid.currency.code(), "USD");
        assert_eq!(valid.reference.as_deref(), Some("cart-77"));
    }

    #[test]
    fn malformed_json_is_invalid_json() {
        let rejection = ValidOrder::parse(b"{not json").unwrap_err();
        assert_eq!(rejection.kind, RejectionKind::InvalidJson);
    }

    #[test]
    fn zero_negative_fractional_or_textual_amounts_are_invalid() {
        for amount in ["0", "-1", "19.99", "\"1999\""] {
            let body = format!(r#"{{"amount_minor":{amount},"currency":"USD"}}"#);
            assert_eq!(rejection_code(&body), "invalid_amount", "amount {amount}");
        }
    }

    #[test]
    fn an_unknown_currency_is_rejected() {
        assert_eq!(
            rejection_code(r#"{"amount_minor":1,"currency":"ZZZ"}"#),
            "unknown_currency"
        );
        assert_eq!(
            rejection_code(r#"{"amount_minor":1,"currency":"usd"}"#),
            "unknown_currency"
        );
    }

    #[test]
    fn a_reference_with_a_nul_character_is_rejected() {
        assert_eq!(
            rejection_code(r#"{"amount_minor":1,"currency":"USD","reference":"a\u0000b"}"#),
            "invalid_reference"
        );
    }

    #[test]
    fn an_overlong_reference_is_rejected() {
        let body = format!(
            r#"{{"amount_minor":1,"currency":"USD","reference":"{}"}}"#,
            "r".repeat(256)
        );
        assert_eq!(rejection_code(&body), "invalid_reference");
    }
}
