//! Payload adapters: a provider's JSON body into one internal [`PaymentEvent`], or the reason
//! a signed body is acknowledged without one (a type the gateway does not handle, a body it
//! cannot use). Parsed once per delivery.

use serde::Deserialize;
use serde_json::Value;

use crate::money::{AmountMinor, Currency};

/// A body that cannot be used, with the detail the ack carries.
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
        /// The merchant's order the payment is for; `None` when the body names none usable
        /// (the money is then held, reason `unknown_order`).
        order_id: Option<i64>,
        amount: AmountMinor,
        currency: Currency,
    },
    Failed {
        payment_id: String,
        order_id: Option<i64>,
    },
    Refunded {
        payment_id: String,
        /// The provider's refund id, when the payload names it: it posts at most once.
        refund_id: Option<String>,
        refund: RefundAmount,
        currency: Currency,
    },
}

/// A signed body, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Event(PaymentEvent),
    /// Acknowledged and stored without effect: `unsupported_event_type`, `no_payment_intent`.
    Ignored(&'static str),
    /// A handled type whose body is unusable: acknowledged `rejected` with this reason
    /// (`invalid_payload`, `amount_out_of_range`) and detail, and stored.
    Rejected {
        reason: &'static str,
        detail: String,
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
}

impl Parsed {
    /// A body in the canonical format.
    pub fn canonical(body: &[u8]) -> Self {
        Self::read(body, parse_canonical)
    }

    /// A body in Stripe's format.
    pub fn stripe(body: &[u8]) -> Self {
        Self::read(body, parse_stripe)
    }

    fn read(body: &[u8], parse: fn(&str, &Value) -> Result<Parsed, Unusable>) -> Self {
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(e) => return Self::invalid(invalid(format!("the body is not JSON: {e}"))),
        };
        let Some(kind) = field(&value, &["type"]).and_then(Value::as_str) else {
            return Self::invalid(invalid("type must be a string"));
        };
        match parse(kind, &value) {
            Ok(parsed) => parsed,
            Err(Unusable::Invalid(error)) => Self::invalid(error),
            Err(Unusable::OutOfRange(error)) => Parsed::Rejected {
                reason: "amount_out_of_range",
                detail: error.0,
            },
        }
    }

    fn invalid(error: PayloadError) -> Self {
        Parsed::Rejected {
            reason: "invalid_payload",
            detail: error.0,
        }
    }
}

/// Why a handled type's body cannot be used.
enum Unusable {
    Invalid(PayloadError),
    OutOfRange(PayloadError),
}

impl From<PayloadError> for Unusable {
    fn from(error: PayloadError) -> Self {
        Unusable::Invalid(error)
    }
}

pub const MAX_EVENT_ID_LEN: usize = 255;

/// The body's `type` as the provider sent it, for the event log: `None` when the body has no
/// string `type`, cut to [`MAX_EVENT_ID_LEN`] bytes (at a character boundary) so a row stays small.
pub fn event_type(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let typed: Typed<'_> = serde_json::from_slice(body).ok()?;
    let kind = typed.kind?;
    let mut end = kind.len().min(MAX_EVENT_ID_LEN);
    while !kind.is_char_boundary(end) {
        end -= 1;
    }
    Some(kind[..end].to_owned())
}

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

/// A positive amount of at most [`AmountMinor::MAX`]; a larger integer is out of range.
fn amount_at(value: &Value, path: &[&str]) -> Result<AmountMinor, Unusable> {
    let number = field(value, path)
        .and_then(Value::as_i64)
        .filter(|a| *a > 0);
    let Some(number) = number else {
        return Err(Unusable::Invalid(invalid(format!(
            "{} must be an integer greater than 0",
            path.join(".")
        ))));
    };
    AmountMinor::parse(number).ok_or_else(|| {
        Unusable::OutOfRange(invalid(format!(
            "{} is above {} minor units",
            path.join("."),
            AmountMinor::MAX
        )))
    })
}

/// An order id as an integer, or as a string of digits (Stripe metadata values are strings);
/// anything else names no order.
fn order_id_at(value: &Value, path: &[&str]) -> Option<i64> {
    let id = match field(value, path) {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    id.filter(|id| *id > 0)
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

fn parse_canonical(kind: &str, value: &Value) -> Result<Parsed, Unusable> {
    let event = match kind {
        "payment.succeeded" => PaymentEvent::Succeeded {
            payment_id: string_at(value, &["data", "payment_id"])?,
            order_id: order_id_at(value, &["data", "order_id"]),
            amount: amount_at(value, &["data", "amount_minor"])?,
            currency: currency_at(value, &["data", "currency"], false)?,
        },
        "payment.failed" => PaymentEvent::Failed {
            payment_id: string_at(value, &["data", "payment_id"])?,
            order_id: order_id_at(value, &["data", "order_id"]),
        },
        "refund.succeeded" => PaymentEvent::Refunded {
            payment_id: string_at(value, &["data", "payment_id"])?,
            refund_id: match field(value, &["data", "refund_id"]) {
                None | Some(Value::Null) => None,
                Some(_) => Some(string_at(value, &["data", "refund_id"])?),
            },
            refund: RefundAmount::Delta(amount_at(value, &["data", "amount_minor"])?),
            currency: currency_at(value, &["data", "currency"], false)?,
        },
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    Ok(Parsed::Event(event))
}

fn parse_stripe(kind: &str, value: &Value) -> Result<Parsed, Unusable> {
    if !matches!(
        kind,
        "payment_intent.succeeded" | "payment_intent.payment_failed" | "charge.refunded"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let object = field(value, &["data", "object"])
        .filter(|o| o.is_object())
        .ok_or_else(|| invalid("data.object must be an object"))?;
    let event = match kind {
        "payment_intent.succeeded" => PaymentEvent::Succeeded {
            payment_id: string_at(object, &["id"])?,
            order_id: order_id_at(object, &["metadata", "order_id"]),
            amount: amount_at(object, &["amount_received"])?,
            currency: currency_at(object, &["currency"], true)?,
        },
        "payment_intent.payment_failed" => PaymentEvent::Failed {
            payment_id: string_at(object, &["id"])?,
            order_id: order_id_at(object, &["metadata", "order_id"]),
        },
        _ => {
            // A charge of the legacy Charges API has no PaymentIntent, so no payment the
            // gateway could have captured.
            if matches!(object.get("payment_intent"), None | Some(Value::Null)) {
                return Ok(Parsed::Ignored("no_payment_intent"));
            }
            let refunded = field(object, &["amount_refunded"])
                .and_then(Value::as_i64)
                .filter(|a| *a >= 0)
                .ok_or_else(|| {
                    invalid("data.object.amount_refunded must be a non-negative integer")
                })?;
            if refunded > AmountMinor::MAX {
                return Err(Unusable::OutOfRange(invalid(format!(
                    "data.object.amount_refunded is above {} minor units",
                    AmountMinor::MAX
                ))));
            }
            PaymentEvent::Refunded {
                payment_id: string_at(object, &["payment_intent"])?,
                refund_id: None,
                refund: RefundAmount::Cumulative(refunded),
                currency: currency_at(object, &["currency"], true)?,
            }
        }
    };
    Ok(Parsed::Event(event))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_type_is_read_as_sent_and_kept_short() {
        assert_eq!(
            event_type(br#"{"id":"e","type":"payment_intent.succeeded","data":{}}"#).as_deref(),
            Some("payment_intent.succeeded")
        );
        assert_eq!(event_type(br#"{"type":7}"#), None);
        assert_eq!(event_type(b"not json"), None);
        let long = format!(r#"{{"type":"{}"}}"#, "\u{e9}".repeat(200));
        assert!(event_type(long.as_bytes()).is_some_and(|t| t.len() <= MAX_EVENT_ID_LEN));
    }

    fn usd() -> Currency {
        Currency::parse("USD").unwrap()
    }

    fn canonical(body: &str) -> Parsed {
        Parsed::canonical(body.as_bytes())
    }

    fn stripe(body: &str) -> Parsed {
        Parsed::stripe(body.as_bytes())
    }

    fn reason(parsed: Parsed) -> &'static str {
        match parsed {
            Parsed::Ignored(reason) | Parsed::Rejected { reason, .. } => reason,
            Parsed::Event(event) => panic!("expected no event, got {event:?}"),
        }
    }

    #[test]
    fn the_canonical_payment_succeeded_example_parses() {
        let body = r#"{"id":"evt_1","type":"payment.succeeded","data":{"payment_id":"pay_1","order_id":123,"amount_minor":1999,"currency":"USD"}}"#;
        assert_eq!(
            canonical(body),
            Parsed::Event(PaymentEvent::Succeeded {
                payment_id: "pay_1".into(),
                order_id: Some(123),
                amount: AmountMinor::parse(1999).unwrap(),
                currency: usd(),
            })
        );
    }

    #[test]
    fn a_canonical_refund_carries_its_own_amount_and_refund_id() {
        let body = r#"{"id":"evt_2","type":"refund.succeeded","data":{"payment_id":"pay_1","refund_id":"re_1","amount_minor":500,"currency":"USD"}}"#;
        assert_eq!(
            canonical(body),
            Parsed::Event(PaymentEvent::Refunded {
                payment_id: "pay_1".into(),
                refund_id: Some("re_1".into()),
                refund: RefundAmount::Delta(AmountMinor::parse(500).unwrap()),
                currency: usd(),
            })
        );
    }

    #[test]
    fn stripe_events_map_to_the_same_internal_events() {
        let succeeded = r#"{"id":"evt_s","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","amount_received":5000,"currency":"usd","metadata":{"order_id":"7"}}}}"#;
        assert_eq!(
            stripe(succeeded),
            Parsed::Event(PaymentEvent::Succeeded {
                payment_id: "pi_1".into(),
                order_id: Some(7),
                amount: AmountMinor::parse(5000).unwrap(),
                currency: usd(),
            })
        );
        let refunded = r#"{"id":"evt_r","type":"charge.refunded","data":{"object":{"id":"ch_1","payment_intent":"pi_1","amount_refunded":800,"currency":"usd"}}}"#;
        assert_eq!(
            stripe(refunded),
            Parsed::Event(PaymentEvent::Refunded {
                payment_id: "pi_1".into(),
                refund_id: None,
                refund: RefundAmount::Cumulative(800),
                currency: usd(),
            })
        );
    }

    #[test]
    fn a_capture_without_a_usable_order_reference_still_parses() {
        for order in [
            r#""#,
            r#","metadata":{}"#,
            r#","metadata":{"order_id":"abc"}"#,
            r#","metadata":{"order_id":null}"#,
        ] {
            let body = format!(
                r#"{{"id":"e","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_1","amount_received":5,"currency":"eur"{order}}}}}}}"#
            );
            assert!(
                matches!(
                    stripe(&body),
                    Parsed::Event(PaymentEvent::Succeeded { order_id: None, .. })
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn types_the_gateway_does_not_handle_are_ignored() {
        assert_eq!(
            reason(canonical(r#"{"type":"customer.created","data":{}}"#)),
            "unsupported_event_type"
        );
        for kind in [
            "customer.created",
            "charge.succeeded",
            "charge.failed",
            "charge.refund.updated",
            "invoice.created",
        ] {
            let body =
                format!(r#"{{"id":"evt","type":"{kind}","data":{{"object":{{"id":"x"}}}}}}"#);
            assert_eq!(reason(stripe(&body)), "unsupported_event_type", "{kind}");
        }
    }

    #[test]
    fn a_legacy_charge_refund_without_a_payment_intent_is_ignored() {
        let body = r#"{"id":"evt","type":"charge.refunded","data":{"object":{"id":"ch_1","payment_intent":null,"amount_refunded":100,"currency":"usd"}}}"#;
        assert_eq!(reason(stripe(body)), "no_payment_intent");
    }

    #[test]
    fn unusable_bodies_of_handled_types_are_rejected_with_a_detail() {
        for body in [
            r#"{"id":"e","type":"payment.succeeded","data":{"payment_id":"p","order_id":1,"amount_minor":0,"currency":"USD"}}"#,
            r#"{"id":"e","type":"payment.succeeded","data":{"payment_id":"p","order_id":1,"amount_minor":5,"currency":"usd"}}"#,
            r#"{"id":"e","type":"payment.succeeded","data":{"order_id":1,"amount_minor":5,"currency":"USD"}}"#,
            r#"{"id":"e","type":"refund.succeeded","data":{"payment_id":"p","amount_minor":"5","currency":"USD"}}"#,
            r#"[1,2,3]"#,
            "not json",
        ] {
            match canonical(body) {
                Parsed::Rejected { reason, detail } => {
                    assert_eq!(reason, "invalid_payload", "{body}");
                    assert!(!detail.is_empty());
                }
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn amounts_above_ten_to_the_fifteen_are_out_of_range() {
        let body = r#"{"id":"e","type":"refund.succeeded","data":{"payment_id":"p","amount_minor":9223372036854775807,"currency":"USD"}}"#;
        assert_eq!(reason(canonical(body)), "amount_out_of_range");
        let body = r#"{"id":"e","type":"charge.refunded","data":{"object":{"payment_intent":"pi","amount_refunded":1000000000000001,"currency":"usd"}}}"#;
        assert_eq!(reason(stripe(body)), "amount_out_of_range");
    }

    #[test]
    fn non_ascii_text_and_extra_fields_do_not_matter() {
        let body = r#"{"id":"evt_u","type":"payment_intent.succeeded","data":{"object":{"id":"pi_9","amount_received":1500,"currency":"usd","description":"1 × Produkt für Café","metadata":{"order_id":"9","note":"日本"},"charges":{"data":[{"id":"ch_1"}]}},"previous_attributes":{"metadata":{"order_id":null}}}}"#;
        assert!(matches!(
            stripe(body),
            Parsed::Event(PaymentEvent::Succeeded {
                order_id: Some(9),
                ..
            })
        ));
    }

    #[test]
    fn a_nul_character_in_an_id_is_a_payload_error_not_a_database_error() {
        let body =
            r#"{"id":"e","type":"payment.failed","data":{"payment_id":"p\u0000","order_id":1}}"#;
        assert_eq!(reason(canonical(body)), "invalid_payload");
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
