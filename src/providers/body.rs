//! The reading rules every provider's payload shares: a body is read once into the internal
//! [`PaymentEvent`] (or the reason a signed body is acknowledged without one), through
//! [`Object`], which every provider file uses for the fields it maps.
//!
//! This is the boundary for provider-supplied text: a string the gateway stores (type, payment
//! id, refund id) has no control characters, NUL included, which PostgreSQL TEXT and JSONB
//! refuse; a body that repeats a name in an object the gateway reads is refused (parsers
//! disagree on which one wins, and an ambiguous body must not move money); amounts are judged
//! by their digits, so an integer of any size is merely out of range, and a decimal amount is
//! converted with its currency's ISO 4217 exponent exactly, never through floating point.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::money::{self, AmountMinor, Currency};
use crate::payments::event::{MAX_EVENT_ID_LEN, Parsed, PayloadError, Reading, check_event_id};
use crate::text;

/// A payload error with `message` as its detail.
pub(crate) fn invalid(message: impl Into<String>) -> PayloadError {
    PayloadError::new(message)
}

/// Why a handled type's body cannot be used.
pub(crate) enum Unusable {
    Invalid(PayloadError),
    OutOfRange(PayloadError),
    /// A decimal amount with more decimals than its currency has, or an amount a provider's own
    /// minor unit cannot express in the currency's ISO 4217 one.
    InvalidAmount(PayloadError),
}

impl From<PayloadError> for Unusable {
    fn from(error: PayloadError) -> Self {
        Unusable::Invalid(error)
    }
}

/// A provider format's mapping of a body of type `kind` (the body itself is `top`).
pub(crate) type Parse = fn(&str, &Object<'_>) -> Result<Parsed, Unusable>;

/// `body` read once: its event type from the top-level member `type_field` (which must be a
/// string without control characters), then what `parse` makes of it.
pub(crate) fn read(body: &[u8], type_field: &str, parse: Parse) -> Reading {
    let unusable = |error| Reading {
        event_type: None,
        parsed: Parsed::invalid(error),
    };
    let top = match Object::of_body(body) {
        Ok(top) => top,
        Err(error) => return unusable(error),
    };
    let kind = match top.member(type_field).and_then(text) {
        Some(kind) if !kind.chars().any(char::is_control) => kind,
        _ => {
            return unusable(invalid(format!(
                "{type_field} must be a string without control characters"
            )));
        }
    };
    let parsed = match parse(&kind, &top) {
        Ok(parsed) => parsed,
        Err(Unusable::Invalid(error)) => Parsed::invalid(error),
        Err(Unusable::OutOfRange(error)) => Parsed::Rejected {
            reason: "amount_out_of_range",
            detail: error.0,
        },
        Err(Unusable::InvalidAmount(error)) => Parsed::Rejected {
            reason: "invalid_amount",
            detail: error.0,
        },
    };
    Reading {
        event_type: Some(cut(kind)),
        parsed,
    }
}

/// `text` cut to [`MAX_EVENT_ID_LEN`] bytes at a character boundary, so a row stays small.
fn cut(mut text: String) -> String {
    let mut end = text.len().min(MAX_EVENT_ID_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text
}

/// Where a body names its event id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdField {
    /// The top-level `id` (Stripe, plain HMAC senders, Checkout.com, PayPal).
    Id,
    /// The top-level `event_id` (Square, Paddle).
    EventId,
}

/// The event id a JSON body names at the top level.
pub fn event_id_from_body(body: &[u8], field: IdField) -> Result<String, PayloadError> {
    // Derived structs refuse a repeated name ("duplicate field"), like the objects below, and
    // skip everything else without building it.
    #[derive(serde::Deserialize)]
    struct WithId {
        id: String,
    }
    #[derive(serde::Deserialize)]
    struct WithEventId {
        event_id: String,
    }
    let (id, name) = match field {
        IdField::Id => (serde_json::from_slice::<WithId>(body).map(|b| b.id), "id"),
        IdField::EventId => (
            serde_json::from_slice::<WithEventId>(body).map(|b| b.event_id),
            "event_id",
        ),
    };
    let id = id.map_err(|_| {
        invalid(format!(
            "the body must be a JSON object with a string \"{name}\""
        ))
    })?;
    check_event_id(&id)?;
    Ok(id)
}

/// One JSON object of a body: each name once, each value kept as its text until it is read.
/// Only the objects on the paths the gateway reads are parsed (at most four levels deep), so
/// nesting elsewhere costs one scan and no recursion.
pub(crate) struct Object<'a> {
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
    pub(crate) fn of_body(body: &'a [u8]) -> Result<Self, PayloadError> {
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

    pub(crate) fn path_of(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// The member `name`, unless it is absent or `null`.
    pub(crate) fn member(&self, name: &str) -> Option<&'a RawValue> {
        self.members
            .get(name)
            .copied()
            .filter(|raw| raw.get().trim() != "null")
    }

    /// The member `name`, which must be an object.
    pub(crate) fn object(&self, name: &str) -> Result<Object<'a>, PayloadError> {
        let path = self.path_of(name);
        self.member(name)
            .and_then(|raw| Object::parse(raw, path.clone()))
            .unwrap_or_else(|| Err(invalid(format!("{path} must be an object"))))
    }

    /// The member `name` if it is an object; `None` if it is anything else.
    pub(crate) fn object_if_any(&self, name: &str) -> Result<Option<Object<'a>>, PayloadError> {
        self.member(name)
            .and_then(|raw| Object::parse(raw, self.path_of(name)))
            .transpose()
    }

    /// The objects of the array `name` (absent: none); a member that is not an array, or an
    /// element that is not an object, is unusable.
    pub(crate) fn objects(&self, name: &str) -> Result<Vec<Object<'a>>, PayloadError> {
        let path = self.path_of(name);
        let Some(raw) = self.member(name) else {
            return Ok(Vec::new());
        };
        let elements: Vec<&'a RawValue> = serde_json::from_str(raw.get())
            .map_err(|_| invalid(format!("{path} must be an array of objects")))?;
        elements
            .into_iter()
            .enumerate()
            .map(|(i, element)| {
                Object::parse(element, format!("{path}[{i}]"))
                    .unwrap_or_else(|| Err(invalid(format!("{path}[{i}] must be an object"))))
            })
            .collect()
    }

    /// The member `name` as a string, if it is one (and is Unicode).
    pub(crate) fn string(&self, name: &str) -> Option<String> {
        self.member(name).and_then(text)
    }

    /// An id the gateway stores: a string of 1 to [`MAX_EVENT_ID_LEN`] bytes without control
    /// characters (PostgreSQL TEXT refuses NUL).
    pub(crate) fn id(&self, name: &str) -> Result<String, PayloadError> {
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

    /// An optional id: absent or `null` is `None`, anything else must be a usable id.
    pub(crate) fn optional_id(&self, name: &str) -> Result<Option<String>, PayloadError> {
        match self.member(name) {
            None => Ok(None),
            Some(_) => self.id(name).map(Some),
        }
    }

    /// A positive amount of at most [`AmountMinor::MAX`]; a larger integer, whatever its size,
    /// is out of range.
    pub(crate) fn amount(&self, name: &str) -> Result<AmountMinor, Unusable> {
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

    /// A positive amount in minor units written as a string of digits (Paddle's `"1180"`),
    /// judged by its digits like [`Self::amount`].
    pub(crate) fn amount_in_text(&self, name: &str) -> Result<AmountMinor, Unusable> {
        let path = self.path_of(name);
        let digits = self
            .string(name)
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .ok_or_else(|| invalid(format!("{path} must be a string of digits")))?;
        minor_units(digits.trim_start_matches('0'), "", 0, &path)
    }

    /// A positive decimal amount in major units written as a string (PayPal's `"10.00"`),
    /// converted to minor units with `currency`'s ISO 4217 exponent: split on the point, never
    /// through floating point. More decimals than the currency has is `invalid_amount`.
    pub(crate) fn decimal_amount(
        &self,
        name: &str,
        currency: Currency,
    ) -> Result<AmountMinor, Unusable> {
        let path = self.path_of(name);
        let decimal = self.string(name).unwrap_or_default();
        let (whole, fraction) = match decimal.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (decimal.as_str(), None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
            return Err(Unusable::Invalid(invalid(format!(
                "{path} must be a decimal string such as \"10.00\""
            ))));
        }
        let exponent = money::exponent(currency).ok_or_else(|| {
            invalid(format!(
                "{currency} has no minor unit in ISO 4217, so {path} cannot be converted"
            ))
        })?;
        let fraction = fraction.unwrap_or("");
        if fraction.len() > exponent as usize {
            return Err(Unusable::InvalidAmount(invalid(format!(
                "{path} {decimal:?} has {} decimals; {currency} has {exponent}",
                fraction.len()
            ))));
        }
        minor_units(whole.trim_start_matches('0'), fraction, exponent, &path)
    }

    /// A total of at least 0 and at most [`AmountMinor::MAX`] (Stripe's cumulative refunds).
    pub(crate) fn total(&self, name: &str) -> Result<i64, Unusable> {
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

    /// An order id as an integer, or as a string of digits (metadata values are often
    /// strings); anything else names no order.
    pub(crate) fn order_id(&self, name: &str) -> Option<i64> {
        let raw = self.member(name)?;
        let id = match integer(raw) {
            Integer::Value(id) => Some(id),
            _ => text(raw).and_then(|s| s.parse().ok()),
        };
        id.filter(|id| *id > 0)
    }

    pub(crate) fn currency(&self, name: &str, any_case: bool) -> Result<Currency, PayloadError> {
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

/// `whole` (without leading zeros) and `fraction` (at most `exponent` digits) as minor units:
/// positive, and at most [`AmountMinor::MAX`] whatever the number of digits.
fn minor_units(
    whole: &str,
    fraction: &str,
    exponent: u32,
    path: &str,
) -> Result<AmountMinor, Unusable> {
    // 10^15 minor units has at most 16 digits before the point, so longer is out of range
    // before any arithmetic.
    if whole.len() > 16 {
        return Err(out_of_range(path));
    }
    let scale = 10u128.pow(exponent);
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| out_of_range(path))?
    };
    let padded = format!("{fraction:0<width$}", width = exponent as usize);
    let fraction: u128 = if padded.is_empty() {
        0
    } else {
        padded.parse().map_err(|_| out_of_range(path))?
    };
    let minor = whole * scale + fraction;
    if minor == 0 {
        return Err(Unusable::Invalid(invalid(format!(
            "{path} must be greater than 0"
        ))));
    }
    i64::try_from(minor)
        .ok()
        .and_then(AmountMinor::parse)
        .ok_or_else(|| out_of_range(path))
}

pub(crate) fn out_of_range(path: &str) -> Unusable {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payments::event::{PaymentEvent, RefundAmount};

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
        canonical_reading(body.as_bytes()).parsed
    }

    fn stripe(body: &str) -> Parsed {
        super::super::stripe::read(body.as_bytes()).parsed
    }

    fn canonical_reading(body: &[u8]) -> Reading {
        super::super::canonical::read(body)
    }

    fn event_type(body: &[u8]) -> Option<String> {
        canonical_reading(body).event_type
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
        assert!(event_id_from_body(br#"{"id":"e\u0000"}"#, IdField::Id).is_err());
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
            let reading = canonical_reading(body.as_bytes());
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
            let reading = canonical_reading(body);
            assert_eq!(reason(reading.parsed), "invalid_payload", "{body:?}");
        }
    }

    #[test]
    fn no_detail_carries_a_control_character_into_the_stored_ack() {
        let body = b"{\"type\":\"payment.succeeded\",\"data\":{\"a\\u0000\":1,\"a\\u0000\":2}}";
        match canonical_reading(body).parsed {
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
            let reading = canonical_reading(body.as_bytes());
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
            event_id_from_body(br#"{"id":"evt_9","x":1}"#, IdField::Id).unwrap(),
            "evt_9"
        );
        assert!(event_id_from_body(br#"{"id":""}"#, IdField::Id).is_err());
        assert!(event_id_from_body(br#"{"id":7}"#, IdField::Id).is_err());
        assert!(event_id_from_body(b"nope", IdField::Id).is_err());
        assert!(event_id_from_body(br#"{"id":"a","id":"b"}"#, IdField::Id).is_err());
        assert!(event_id_from_body(br#"{"id":"a\ud800"}"#, IdField::Id).is_err());
    }
}
