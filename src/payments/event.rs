//! Payload adapters: a provider's JSON body into one internal [`PaymentEvent`], or the reason
//! a signed body is acknowledged without one (a type the gateway does not handle, a body it
//! cannot use). Parsed once per delivery; the event log's type comes from the same reading.
//!
//! This is the boundary for provider-supplied text: a string the gateway stores (type, payment
//! id, refund id) has no control characters, NUL included, which PostgreSQL TEXT and JSONB
//! refuse; a body that repeats a name in an object the gateway reads is refused (parsers
//! disagree on which one wins, and an ambiguous body must not move money); amounts are judged
//! by their digits, so an integer of any size is merely out of range.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::money::{AmountMinor, Currency};
use crate::text;

/// A body that cannot be used, with the detail the ack carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PayloadError(pub String);

/// The detail is stored in the ack (JSONB): any control character a message might quote from
/// the body is replaced, so the detail itself can never make the write fail.
fn invalid(message: impl Into<String>) -> PayloadError {
    PayloadError(text::printable(&message.into()))
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

/// A body read once: the type the event log records, and what the body means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// The body's `type`, cut to [`MAX_EVENT_ID_LEN`] bytes; `None` when there is no usable one.
    pub event_type: Option<String>,
    pub parsed: Parsed,
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
        Reading::canonical(body).parsed
    }

    /// A body in Stripe's format.
    pub fn stripe(body: &[u8]) -> Self {
        Reading::stripe(body).parsed
    }

    fn invalid(error: PayloadError) -> Self {
        Parsed::Rejected {
            reason: "invalid_payload",
            detail: error.0,
        }
    }
}

impl Reading {
    /// A body in the canonical format.
    pub fn canonical(body: &[u8]) -> Self {
        Self::read(body, parse_canonical)
    }

    /// A body in Stripe's format.
    pub fn stripe(body: &[u8]) -> Self {
        Self::read(body, parse_stripe)
    }

    fn read(body: &[u8], parse: fn(&str, &Object<'_>) -> Result<Parsed, Unusable>) -> Self {
        let unusable = |error| Reading {
            event_type: None,
            parsed: Parsed::invalid(error),
        };
        let top = match Object::of_body(body) {
            Ok(top) => top,
            Err(error) => return unusable(error),
        };
        let kind = match top.member("type").and_then(text) {
            Some(kind) if !kind.chars().any(char::is_control) => kind,
            _ => return unusable(invalid("type must be a string without control characters")),
        };
        let parsed = match parse(&kind, &top) {
            Ok(parsed) => parsed,
            Err(Unusable::Invalid(error)) => Parsed::invalid(error),
            Err(Unusable::OutOfRange(error)) => Parsed::Rejected {
                reason: "amount_out_of_range",
                detail: error.0,
            },
        };
        Reading {
            event_type: Some(cut(kind)),
            parsed,
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

/// `text` cut to [`MAX_EVENT_ID_LEN`] bytes at a character boundary, so a row stays small.
fn cut(mut text: String) -> String {
    let mut end = text.len().min(MAX_EVENT_ID_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// The body's `type` as the event log records it: what the payload reading reads (`None` when
/// the body has no usable `type`).
pub fn event_type(body: &[u8]) -> Option<String> {
    Reading::canonical(body).event_type
}

/// An event id as a key: 1 to 255 characters, none of them control characters.
pub fn check_event_id(id: &str) -> Result<(), PayloadError> {
    if !text::storable(id, MAX_EVENT_ID_LEN) {
        return Err(invalid(format!(
            "the event id must be 1 to {MAX_EVENT_ID_LEN} characters without control characters"
        )));
    }
    Ok(())
}

/// The top-level `id` of a JSON body (Stripe and plain HMAC senders).
pub fn event_id_from_body(body: &[u8]) -> Result<String, PayloadError> {
    // A derived struct refuses a repeated `id` ("duplicate field"), like the objects below.
    #[derive(serde::Deserialize)]
    struct WithId {
        id: String,
    }
    let with_id: WithId = serde_json::from_slice(body)
        .map_err(|_| invalid("the body must be a JSON object with a string \"id\""))?;
    check_event_id(&with_id.id)?;
    Ok(with_id.id)
}

/// One JSON object of a body: each name once, each value kept as its text until it is read.
/// Only the objects on the paths the gateway reads are parsed (at most `data.object.metadata`),
/// so nesting elsewhere costs one scan and no recursion.
struct Object<'a> {
    /// Where the object is, for details (`data.object`); empty for the body itself.
    path: String,
    members: BTreeMap<Cow<'a, str>, &'a RawValue>,
}

/// The members of an object, refusing a repeated name.
struct Members<'a>(BTreeMap<Cow<'a, str>, &'a RawValue>);

/// A member's name, borrowed from the body unless it has escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = Name<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, name: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(name)))
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = BTreeMap::new();
                while let Some(Name(name)) = map.next_key()? {
                    let value: &'de RawValue = map.next_value()?;
                    if members.contains_key(&name) {
                        return Err(de::Error::custom(format_args!(
                            "the name {name:?} appears twice"
                        )));
                    }
                    members.insert(name, value);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

impl<'a> Object<'a> {
    /// The body itself, which must be a JSON object (and valid UTF-8).
    fn of_body(body: &'a [u8]) -> Result<Self, PayloadError> {
        let raw: &'a RawValue = serde_json::from_slice(body)
            .map_err(|e| invalid(format!("the body is not JSON: {e}")))?;
        Self::parse(raw, String::new()).ok_or_else(|| invalid("the body must be a JSON object"))?
    }

    /// `raw` as an object at `path`: `None` when it is not an object at all.
    fn parse(raw: &'a RawValue, path: String) -> Option<Result<Self, PayloadError>> {
        if !raw.get().trim_start().starts_with('{') {
            return None;
        }
        Some(match serde_json::from_str::<Members<'a>>(raw.get()) {
            Ok(Members(members)) => Ok(Object { path, members }),
            Err(e) if path.is_empty() => Err(invalid(format!("the body is unusable: {e}"))),
            Err(e) => Err(invalid(format!("{path} is unusable: {e}"))),
        })
    }

    fn path_of(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// The member `name`, unless it is absent or `null`.
    fn member(&self, name: &str) -> Option<&'a RawValue> {
        self.members
            .get(name)
            .copied()
            .filter(|raw| raw.get().trim() != "null")
    }

    /// The member `name`, which must be an object.
    fn object(&self, name: &str) -> Result<Object<'a>, PayloadError> {
        let path = self.path_of(name);
        self.member(name)
            .and_then(|raw| Object::parse(raw, path.clone()))
            .unwrap_or_else(|| Err(invalid(format!("{path} must be an object"))))
    }

    /// The member `name` if it is an object; `None` if it is anything else.
    fn object_if_any(&self, name: &str) -> Result<Option<Object<'a>>, PayloadError> {
        self.member(name)
            .and_then(|raw| Object::parse(raw, self.path_of(name)))
            .transpose()
    }

    /// An id the gateway stores: a string of 1 to [`MAX_EVENT_ID_LEN`] bytes without control
    /// characters (PostgreSQL TEXT refuses NUL).
    fn id(&self, name: &str) -> Result<String, PayloadError> {
        self.member(name)
            .and_then(text)
            .filter(|s| text::storable(s, MAX_EVENT_ID_LEN))
            .ok_or_else(|| {
                invalid(format!(
                    "{} must be a string of 1 to {MAX_EVENT_ID_LEN} characters without control characters",
                    self.path_of(name)
                ))
            })
    }

    /// A positive amount of at most [`AmountMinor::MAX`]; a larger integer, whatever its size,
    /// is out of range.
    fn amount(&self, name: &str) -> Result<AmountMinor, Unusable> {
        let path = self.path_of(name);
        match self.member(name).map(integer) {
            Some(Integer::Value(n)) if n > AmountMinor::MAX => Err(out_of_range(&path)),
            Some(Integer::TooLarge) => Err(out_of_range(&path)),
            Some(Integer::Value(n)) if n > 0 => {
                AmountMinor::parse(n).ok_or_else(|| out_of_range(&path))
            }
            _ => Err(Unusable::Invalid(invalid(format!(
                "{path} must be an integer greater than 0"
            )))),
        }
    }

    /// A total of at least 0 and at most [`AmountMinor::MAX`] (Stripe's cumulative refunds).
    fn total(&self, name: &str) -> Result<i64, Unusable> {
        let path = self.path_of(name);
        match self.member(name).map(integer) {
            Some(Integer::Value(n)) if n > AmountMinor::MAX => Err(out_of_range(&path)),
            Some(Integer::TooLarge) => Err(out_of_range(&path)),
            Some(Integer::Value(n)) => Ok(n),
            _ => Err(Unusable::Invalid(invalid(format!(
                "{path} must be a non-negative integer"
            )))),
        }
    }

    /// An order id as an integer, or as a string of digits (Stripe metadata values are
    /// strings); anything else names no order.
    fn order_id(&self, name: &str) -> Option<i64> {
        let raw = self.member(name)?;
        let id = match integer(raw) {
            Integer::Value(id) => Some(id),
            _ => text(raw).and_then(|s| s.parse().ok()),
        };
        id.filter(|id| *id > 0)
    }

    fn currency(&self, name: &str, any_case: bool) -> Result<Currency, PayloadError> {
        let code = self.member(name).and_then(text);
        let currency = match code {
            Some(code) if any_case => Currency::parse_any_case(&code),
            Some(code) => Currency::parse(&code),
            None => None,
        };
        currency.ok_or_else(|| {
            invalid(format!(
                "{} must be an ISO 4217 currency code",
                self.path_of(name)
            ))
        })
    }
}

fn out_of_range(path: &str) -> Unusable {
    Unusable::OutOfRange(invalid(format!(
        "{path} is above {} minor units",
        AmountMinor::MAX
    )))
}

/// A JSON string's value; `None` for any other value (or a string that is not Unicode, such
/// as one with a lone surrogate escape).
fn text(raw: &RawValue) -> Option<String> {
    if !raw.get().trim_start().starts_with('"') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// A JSON number read by its digits.
enum Integer {
    /// A non-negative integer literal that fits 64 bits.
    Value(i64),
    /// A non-negative integer literal above `i64::MAX`, however many digits it has.
    TooLarge,
    /// Anything else: a negative number, a fraction, an exponent, a string.
    Not,
}

fn integer(raw: &RawValue) -> Integer {
    let digits = raw.get().trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Integer::Not;
    }
    // All digits (JSON allows no leading zeros), so the only failure is overflow.
    match digits.parse() {
        Ok(n) => Integer::Value(n),
        Err(_) => Integer::TooLarge,
    }
}

fn parse_canonical(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if !matches!(
        kind,
        "payment.succeeded" | "payment.failed" | "refund.succeeded"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let data = body.object("data")?;
    let event = match kind {
        "payment.succeeded" => PaymentEvent::Succeeded {
            payment_id: data.id("payment_id")?,
            order_id: data.order_id("order_id"),
            amount: data.amount("amount_minor")?,
            currency: data.currency("currency", false)?,
        },
        "payment.failed" => PaymentEvent::Failed {
            payment_id: data.id("payment_id")?,
            order_id: data.order_id("order_id"),
        },
        _ => PaymentEvent::Refunded {
            payment_id: data.id("payment_id")?,
            refund_id: match data.member("refund_id") {
                None => None,
                Some(_) => Some(data.id("refund_id")?),
            },
            refund: RefundAmount::Delta(data.amount("amount_minor")?),
            currency: data.currency("currency", false)?,
        },
    };
    Ok(Parsed::Event(event))
}

fn parse_stripe(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if !matches!(
        kind,
        "payment_intent.succeeded" | "payment_intent.payment_failed" | "charge.refunded"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let object = body.object("data")?.object("object")?;
    let order_id = || -> Result<Option<i64>, PayloadError> {
        Ok(object
            .object_if_any("metadata")?
            .and_then(|metadata| metadata.order_id("order_id")))
    };
    let event = match kind {
        "payment_intent.succeeded" => PaymentEvent::Succeeded {
            payment_id: object.id("id")?,
            order_id: order_id()?,
            amount: object.amount("amount_received")?,
            currency: object.currency("currency", true)?,
        },
        "payment_intent.payment_failed" => PaymentEvent::Failed {
            payment_id: object.id("id")?,
            order_id: order_id()?,
        },
        _ => {
            // A charge of the legacy Charges API has no PaymentIntent, so no payment the
            // gateway could have captured.
            if object.member("payment_intent").is_none() {
                return Ok(Parsed::Ignored("no_payment_intent"));
            }
            let refunded = object.total("amount_refunded")?;
            PaymentEvent::Refunded {
                payment_id: object.id("payment_intent")?,
                refund_id: None,
                refund: RefundAmount::Cumulative(refunded),
                currency: object.currency("currency", true)?,
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
    fn a_type_with_a_nul_or_another_control_character_is_an_unusable_body() {
        for kind in [
            r#""payment.succeeded\u0000""#,
            r#""customer.created\u0000""#,
            r#""\u0000""#,
            r#""payment.failed\u0007""#,
        ] {
            let body = format!(
                r#"{{"id":"e","type":{kind},"data":{{"payment_id":"p","order_id":1,"amount_minor":5,"currency":"USD"}}}}"#
            );
            let reading = Reading::canonical(body.as_bytes());
            assert_eq!(reading.event_type, None, "{body}");
            assert_eq!(reason(reading.parsed), "invalid_payload", "{body}");
        }
    }

    #[test]
    fn invalid_utf8_raw_nul_bytes_and_lone_surrogates_are_unusable_bodies() {
        for body in [
            &b"{\"type\":\"payment.succeeded\xff\",\"data\":{}}"[..],
            b"{\"type\":\"payment.succeeded\0\",\"data\":{}}",
            b"{\"type\":\"payment.succeeded\",\"data\":{\"payment_id\":\"\\ud800\",\"order_id\":1,\"amount_minor\":5,\"currency\":\"USD\"}}",
            b"{\"type\":\"payment\\udc00\"}",
        ] {
            let reading = Reading::canonical(body);
            assert_eq!(reason(reading.parsed), "invalid_payload", "{body:?}");
        }
    }

    #[test]
    fn no_detail_carries_a_control_character_into_the_stored_ack() {
        let body = b"{\"type\":\"payment.succeeded\",\"data\":{\"a\\u0000\":1,\"a\\u0000\":2}}";
        match Parsed::canonical(body) {
            Parsed::Rejected { reason, detail } => {
                assert_eq!(reason, "invalid_payload");
                assert!(!detail.chars().any(char::is_control), "{detail:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_name_repeated_in_an_object_the_gateway_reads_makes_the_body_unusable() {
        let data = r#""data":{"payment_id":"p","order_id":1,"amount_minor":5,"currency":"USD"}"#;
        for body in [
            format!(r#"{{"type":"payment.failed","type":"payment.succeeded",{data}}}"#),
            format!(r#"{{"type":"payment.succeeded",{data},{data}}}"#),
            r#"{"type":"payment.succeeded","data":{"payment_id":"p","order_id":1,"amount_minor":5,"amount_minor":6,"currency":"USD"}}"#.into(),
        ] {
            let reading = Reading::canonical(body.as_bytes());
            // The log records the type only where the body itself is unambiguous about it.
            let top_level_repeat = body.matches(r#""type""#).count() > 1 || body.matches(r#""data""#).count() > 1;
            assert_eq!(
                reading.event_type.is_none(),
                top_level_repeat,
                "the log reads what the parser reads: {body}"
            );
            assert_eq!(reason(reading.parsed), "invalid_payload", "{body}");
        }
        let stripe_body = r#"{"id":"e","type":"payment_intent.succeeded","data":{"object":{"id":"pi","amount_received":5,"currency":"usd","metadata":{"order_id":"1","order_id":"2"}}}}"#;
        assert_eq!(reason(stripe(stripe_body)), "invalid_payload");
        // Names repeated where the gateway reads nothing do not matter.
        let elsewhere = format!(r#"{{"type":"payment.succeeded",{data},"extra":{{"x":1,"x":2}}}}"#);
        assert!(matches!(canonical(&elsewhere), Parsed::Event(_)));
    }

    #[test]
    fn integers_above_ten_to_the_fifteen_are_out_of_range_however_many_digits_they_have() {
        let huge = format!("1{}", "0".repeat(400));
        for amount in [
            "1000000000000001",
            "9223372036854775808",
            "18446744073709551616",
            huge.as_str(),
        ] {
            let body = format!(
                r#"{{"type":"payment.succeeded","data":{{"payment_id":"p","order_id":1,"amount_minor":{amount},"currency":"USD"}}}}"#
            );
            assert_eq!(reason(canonical(&body)), "amount_out_of_range", "{amount}");
            let body = format!(
                r#"{{"type":"charge.refunded","data":{{"object":{{"payment_intent":"pi","amount_refunded":{amount},"currency":"usd"}}}}}}"#
            );
            assert_eq!(reason(stripe(&body)), "amount_out_of_range", "{amount}");
        }
    }

    #[test]
    fn fractions_exponents_strings_negatives_and_zero_are_not_amounts() {
        for amount in [
            "5.5",
            "5.0",
            "1e3",
            "1e20",
            "-5",
            "-99999999999999999999",
            "\"5\"",
            "0",
            "null",
            "true",
        ] {
            let body = format!(
                r#"{{"type":"payment.succeeded","data":{{"payment_id":"p","order_id":1,"amount_minor":{amount},"currency":"USD"}}}}"#
            );
            assert_eq!(reason(canonical(&body)), "invalid_payload", "{amount}");
        }
        let zero = r#"{"type":"charge.refunded","data":{"object":{"payment_intent":"pi","amount_refunded":0,"currency":"usd"}}}"#;
        assert!(
            matches!(stripe(zero), Parsed::Event(_)),
            "a cumulative total may be 0"
        );
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
        assert!(event_id_from_body(br#"{"id":"a","id":"b"}"#).is_err());
        assert!(event_id_from_body(br#"{"id":"a\ud800"}"#).is_err());
    }
}
