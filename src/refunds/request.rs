//! A refund request (`POST /v1/orders/{id}/refunds`) and the ways it can be refused: pure, so
//! the rules are unit-tested without a database and the HTTP table can name each refusal.

use serde::Deserialize;

use crate::money::AmountMinor;

/// The body of `POST /v1/orders/{id}/refunds`.
#[derive(Debug, utoipa::ToSchema)]
#[allow(dead_code)] // documents the request; parsing is lenient on purpose (see ValidRefund)
pub struct CreateRefundRequest {
    /// Integer minor units of the order's currency, greater than 0.
    amount_minor: i64,
    /// Why (free text, at most 255 bytes), e.g. requested_by_customer.
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct CreateRefundBody {
    amount_minor: serde_json::Value,
    #[serde(default)]
    reason: Option<serde_json::Value>,
}

/// A validated refund request.
#[derive(Debug, PartialEq, Eq)]
pub struct ValidRefund {
    pub amount: AmountMinor,
    pub reason: Option<String>,
}

/// Why a refund request was refused: deterministic, so stored and replayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    InvalidJson,
    InvalidAmount,
    InvalidReason,
    /// Not the caller's order (or no such order).
    OrderNotFound,
    /// Not paid, already fully refunded, or its provider has no refund API configured.
    NotRefundable,
    /// More than what is still refundable, counting refund requests in flight.
    AmountExceedsRefundable,
    /// The provider answered 4xx (other than 409 and 429).
    ProviderDeclined,
}

impl RefusalKind {
    /// The stable `error` code clients match on.
    pub fn code(self) -> &'static str {
        match self {
            RefusalKind::InvalidJson => "invalid_json",
            RefusalKind::InvalidAmount => "invalid_amount",
            RefusalKind::InvalidReason => "invalid_reason",
            RefusalKind::OrderNotFound => "order_not_found",
            RefusalKind::NotRefundable => "not_refundable",
            RefusalKind::AmountExceedsRefundable => "amount_exceeds_refundable",
            RefusalKind::ProviderDeclined => "provider_declined",
        }
    }
}

/// A deterministic refusal: stored and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundRefusal {
    pub kind: RefusalKind,
    pub message: String,
    /// The refund request it concerns, once one exists (provider_declined).
    pub refund_request_id: Option<i64>,
}

impl RefundRefusal {
    pub fn new(kind: RefusalKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            refund_request_id: None,
        }
    }
}

const MAX_REASON_LEN: usize = 255;

impl ValidRefund {
    pub fn parse(body: &[u8]) -> Result<Self, RefundRefusal> {
        let parsed: CreateRefundBody = serde_json::from_slice(body).map_err(|e| {
            RefundRefusal::new(
                RefusalKind::InvalidJson,
                format!("the body is not a valid refund request: {e}"),
            )
        })?;
        let amount = parsed
            .amount_minor
            .as_i64()
            .and_then(AmountMinor::parse)
            .ok_or_else(|| {
                RefundRefusal::new(
                    RefusalKind::InvalidAmount,
                    "amount_minor must be an integer greater than 0",
                )
            })?;
        let reason = match parsed.reason {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s))
                if s.len() <= MAX_REASON_LEN && !s.chars().any(char::is_control) =>
            {
                Some(s)
            }
            Some(_) => {
                return Err(RefundRefusal::new(
                    RefusalKind::InvalidReason,
                    format!(
                        "reason must be a string of at most {MAX_REASON_LEN} bytes without control characters"
                    ),
                ));
            }
        };
        Ok(Self { amount, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(body: &str) -> RefusalKind {
        ValidRefund::parse(body.as_bytes()).unwrap_err().kind
    }

    #[test]
    fn a_well_formed_request_is_valid() {
        let valid = ValidRefund::parse(br#"{"amount_minor":500,"reason":"requested_by_customer"}"#)
            .unwrap();
        assert_eq!(valid.amount.get(), 500);
        assert_eq!(valid.reason.as_deref(), Some("requested_by_customer"));
    }

    #[test]
    fn the_reason_is_optional() {
        assert_eq!(
            ValidRefund::parse(br#"{"amount_minor":1}"#).unwrap().reason,
            None
        );
    }

    #[test]
    fn zero_negative_fractional_or_textual_amounts_are_invalid() {
        for amount in ["0", "-5", "1.5", "\"500\""] {
            let body = format!(r#"{{"amount_minor":{amount}}}"#);
            assert_eq!(refusal(&body), RefusalKind::InvalidAmount, "{amount}");
        }
    }

    #[test]
    fn malformed_json_and_bad_reasons_are_refused() {
        assert_eq!(refusal("{nope"), RefusalKind::InvalidJson);
        assert_eq!(
            refusal(r#"{"amount_minor":1,"reason":7}"#),
            RefusalKind::InvalidReason
        );
    }
}
