//! Payload adapters: a provider's JSON body into one internal [`PaymentEvent`].

use serde::Deserialize;
use serde_json::Value;

use crate::config::PayloadFormat;
use crate::money::{AmountMinor, Currency};

/// A signed body that cannot be understood: 400 `invalid_payload`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PayloadError(pub String);

fn invalid(message: impl Into<String>) -> PayloadError {
    PayloadError(message.into())
}

/// How much a refund event refunds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundAmount {
    /// This event's own refund (canonical `refund.succeeded`).
    Delta(AmountMinor),
    /// Everything refunded so far (Stripe `charge.refunded`): post the difference.
    Cumulative(i64),
}

/// What a provider event means for a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentEvent {
    Succeeded {
        payment_id: String,
        order_id: i64,
        amount: AmountMinor,
        currency: Currency,
    },
    Failed {
        payment_id: String,
        order_id: i64,
    },
    Refunded {
        payment_id: String,
        refund: RefundAmount,
        currency: Currency,
    },
}

impl PaymentEvent {
    pub fn payment_id(&self) -> &str {
        match self {
            PaymentEvent::Succeeded { payment_id, .. }
            | PaymentEvent::Failed { payment_id, .. }
            | PaymentEvent::Refunded { payment_id, .. } => payment_id,
        }
    }

    pub fn parse(format: PayloadFormat, body: &[u8]) -> Result<Self, PayloadError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| invalid(format!("the body is not JSON: {e}")))?;
        match format {
            PayloadFormat::Canonical => parse_canonical(&value),
            PayloadFormat::Stripe => parse_stripe(&value),
        }
    }
}

pub const MAX_EVENT_ID_LEN: usize = 255;

/// An event id as a key: 1 to 255 characters, none of them control characters.
pub fn check_event_id(id: &str) -> Result<(), PayloadError> {
    if id.is_empty() || id.len() > MAX_EVENT_ID_LEN || id.chars().any(char::is_control) {
        return Err(invalid(format!(
            "the event id must be 1 to {MAX_EVENT_ID_LEN} characters without control characters"
        )));
    }
    Ok(())
}

/// The top-level `id` of a JSON body (Stripe and plain HMAC senders).
pub fn event_id_from_body(body: &[u8]) -> Result<String, PayloadError> {
    #[derive(Deserialize)]
    struct WithId {
        id: String,
    }
    let with_id: WithId = serde_json::from_slice(body)
        .map_err(|_| invalid("the body must be a JSON object with a string \"id\""))?;
    check_event_id(&with_id.id)?;
    Ok(with_id.id)
}

fn field<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn string_at(value: &Value, path: &[&str]) -> Result<String, PayloadError> {
    field(value, path)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= MAX_EVENT_ID_LEN && !s.chars().any(char::is_control))
        .map(str::to_owned)
        .ok_or_else(|| {
            invalid(format!(
                "{} must be a string of 1 to {MAX_EVENT_ID_LEN} characters without control characters",
                path.join(".")
            ))
        })
}

fn amount_at(value: &Value, path: &[&str]) -> Result<AmountMinor, PayloadError> {
    field(value, path)
        .and_then(Value::as_i64)
        .and_then(AmountMinor::parse)
        .ok_or_else(|| {
            invalid(format!(
                "{} must be an integer greater than 0",
                path.join(".")
            ))
        })
}

/// An order id as an integer, or as a string of digits (Stripe metadata values are strings).
fn order_id_at(value: &Value, path: &[&str]) -> Result<i64, PayloadError> {
    let id = match field(value, path) {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    id.filter(|id| *id > 0).ok_or_else(|| {
        invalid(format!(
            "{} must be a positive integer order id",
            path.join(".")
        ))
    })
}

fn currency_at(value: &Value, path: &[&str], any_case: bool) -> Result<Currency, PayloadError> {
    let code = field(value, path).and_then(Value::as_str);
    let currency = if any_case {
        code.and_then(Currency::parse_any_case)
    } else {
        code.and_then(Currency::parse)
    };
    currency.ok_or_else(|| {
        invalid(format!(
            "{} must be an ISO 4217 currency code",
            path.join(".")
        ))
    })
}

fn parse_canonical(value: &Value) -> Result<PaymentEvent, PayloadError> {
    let kind = string_at(value, &["type"])?;
    let payment_id = string_at(value, &["data", "payment_id"])?;
    match kind.as_str() {
        "payment.succeeded" => Ok(PaymentEvent::Succeeded {
            payment_id,
            order_id: order_id_at(value, &["data", "order_id"])?,
            amount: amount_at(value, &["data", "amount_minor"])?,
            currency: currency_at(value, &["data", "currency"], false)?,
        }),
        "payment.failed" => Ok(PaymentEvent::Failed {
            payment_id,
            order_id: order_id_at(value, &["data", "order_id"])?,
        }),
        "refund.succeeded" => Ok(PaymentEvent::Refunded {
            payment_id,
            refund: RefundAmount::Delta(amount_at(value, &["data", "amount_minor"])?),
            currency: currency_at(value, &["data", "currency"], false)?,
        }),
        other => Err(invalid(format!("unsupported event type {other:?}"))),
    }
}

fn parse_stripe(value: &Value) -> Result<PaymentEvent, PayloadError> {
    let kind = string_at(value, &["type"])?;
    let object = field(value, &["data", "object"])
        .filter(|o| o.is_object())
        .ok_or_else(|| invalid("data.object must be an object"))?;
    match kind.as_str() {
        "payment_intent.succeeded" => Ok(PaymentEvent::Succeeded {
            payment_id: string_at(object, &["id"])?,
            order_id: order_id_at(object, &["metadata", "order_id"])?,
            amount: amount_at(object, &["amount_received"])?,
            currency: currency_at(object, &["currency"], true)?,
        }),
        "payment_intent.payment_failed" => Ok(PaymentEvent::Failed {
            payment_id: string_at(object, &["id"])?,
            order_id: order_id_at(object, &["metadata", "order_id"])?,
        }),
        "charge.refunded" => {
            let refunded = field(object, &["amount_refunded"])
                .and_then(Value::as_i64)
                .filter(|a| *a >= 0)
                .ok_or_else(|| {
                    invalid("data.object.amount_refunded must be a non-negative integer")
                })?;
            Ok(PaymentEvent::Refunded {
                payment_id: string_at(object, &["payment_intent"])?,
                refund: RefundAmount::Cumulative(refunded),
                currency: currency_at(object, &["currency"], true)?,
            })
        }
        other => Err(invalid(format!("unsupported event type {other:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    #[test]
    fn the_canonical_payment_succeeded_example_parses() {
        let body = br#"{"id":"evt_1","type":"payment.succeeded","data":{"payment_id":"pay_1","order_id":123,"amount_minor":1999,"currency":"USD"}}"#;
        assert_eq!(
            PaymentEvent::parse(PayloadFormat::Canonical, body).unwrap(),
            PaymentEvent::Succeeded {
                payment_id: "pay_1".into(),
                order_id: 123,
                amount: AmountMinor::parse(1999).unwrap(),
                currency: usd(),
            }
        );
    }

    #[test]
    fn a_canonical_refund_carries_its_own_amount() {
        let body = br#"{"id":"evt_2","type":"refund.succeeded","data":{"payment_id":"pay_1","order_id":123,"amount_minor":500,"currency":"USD"}}"#;
        let event = PaymentEvent::parse(PayloadFormat::Canonical, body).unwrap();
        assert!(
            matches!(event, PaymentEvent::Refunded { refund: RefundAmount::Delta(a), .. } if a.get() == 500)
        );
    }

    #[test]
    fn stripe_events_map_to_the_same_internal_events() {
        let succeeded = br#"{"id":"evt_s","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount_received":5000,"currency":"usd","metadata":{"order_id":"7"}}}}"#;
        assert_eq!(
            PaymentEvent::parse(PayloadFormat::Stripe, succeeded).unwrap(),
            PaymentEvent::Succeeded {
                payment_id: "pi_1".into(),
                order_id: 7,
                amount: AmountMinor::parse(5000).unwrap(),
                currency: usd(),
            }
        );
        let refunded = br#"{"id":"evt_r","type":"charge.refunded","data":{"object":{"id":"ch_1","payment_intent":"pi_1","amount_refunded":800,"currency":"usd"}}}"#;
        assert_eq!(
            PaymentEvent::parse(PayloadFormat::Stripe, refunded).unwrap(),
            PaymentEvent::Refunded {
                payment_id: "pi_1".into(),
                refund: RefundAmount::Cumulative(800),
                currency: usd(),
            }
        );
    }

    #[test]
    fn unsupported_types_and_missing_fields_are_payload_errors() {
        for body in [
            r#"{"id":"e","type":"customer.created","data":{"payment_id":"p"}}"#,
            r#"{"id":"e","type":"payment.succeeded","data":{"payment_id":"p","order_id":1,"amount_minor":0,"currency":"USD"}}"#,
            r#"{"id":"e","type":"payment.succeeded","data":{"payment_id":"p","order_id":1,"amount_minor":5,"currency":"usd"}}"#,
            r#"[1,2,3]"#,
            "not json",
        ] {
            assert!(
                PaymentEvent::parse(PayloadFormat::Canonical, body.as_bytes()).is_err(),
                "{body}"
            );
        }
    }

    #[test]
    fn a_nul_character_in_an_id_is_a_payload_error_not_a_database_error() {
        let body =
            br#"{"id":"e","type":"payment.failed","data":{"payment_id":"p\u0000","order_id":1}}"#;
        assert!(PaymentEvent::parse(PayloadFormat::Canonical, body).is_err());
        assert!(event_id_from_body(br#"{"id":"e\u0000"}"#).is_err());
    }

    #[test]
    fn the_event_id_comes_from_the_top_level_id() {
        assert_eq!(
            event_id_from_body(br#"{"id":"evt_9","x":1}"#).unwrap(),
            "evt_9"
        );
        assert!(event_id_from_body(br#"{"id":""}"#).is_err());
        assert!(event_id_from_body(br#"{"id":7}"#).is_err());
        assert!(event_id_from_body(b"nope").is_err());
    }
}
