//! A create request (`POST /v1/orders`) and its validation: pure, so every rule is
//! unit-tested without a database, and the HTTP error mapping can name a refusal's kind.

use serde::Deserialize;

use crate::money::{AmountMinor, Currency};

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
