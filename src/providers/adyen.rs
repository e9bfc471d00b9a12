//! Adyen: one request carries one or more notification items, each signed on its own: its
//! `additionalData.hmacSignature` is the base64 HMAC-SHA256 of eight of its fields joined by
//! `:` without escaping (`pspReference:originalReference:merchantAccountCode:merchantReference:
//! value:currency:eventCode:success`, a missing field as the empty string), keyed with the
//! hex decoding of the 64-character HMAC key. There is no event id: each item is its own event,
//! `{pspReference}:{eventCode}:{success}`. The answer is `[accepted]` once every item is stored.
//! Only the signed fields are mapped: anything else in an item is not covered by the signature.
//!
//! Money events: `AUTHORISATION` with `success` `"true"` is the capture (Adyen's default is
//! immediate automatic capture; see docs/providers.md for manual capture), `"false"` a failed
//! payment; `CAPTURE` captures the payment `originalReference` (once: whichever of the two
//! arrives first posts it); `REFUND` refunds `originalReference`, its own `pspReference` being
//! the refund id; `REFUND_FAILED` and `REFUNDED_REVERSED` (the refund did not reach the
//! cardholder, or came back) give that refund back (a `refund_reversal`, reason
//! `refund_returned`). Amounts are in Adyen's minor units, which differ from ISO 4217 for four
//! currencies; they are converted to the ISO minor units the ledger keeps.
//!
//! Disputes (the dispute's `pspReference` is its id, `originalReference` the disputed payment,
//! `amount` what moves): `CHARGEBACK` (and `DISPUTE_OPENED_WITH_CHARGEBACK`, which Adyen sends
//! when a chargeback comes without a notice first: the same dispute, posted once) withdraws,
//! `CHARGEBACK_REVERSED` reinstates, `SECOND_CHARGEBACK` withdraws again as the dispute's second
//! stage (`{pspReference}:second`, its own once-only id), which `PREARBITRATION_WON` /
//! `PREARBITRATION_LOST` close. Adyen's chargeback fee is not among the signed fields (it comes
//! with the settlement), so no fee is booked. The notices that move no money are ignored.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::json;
use serde_json::value::RawValue;

use super::body::{self, Object, Unusable, invalid};
use super::connector::{
    Answer, Connector, Format, NamedItem, Naming, Sample, Signed, Unsignable, Verification,
    Verified,
};
use crate::money::{self, AmountMinor, Currency};
use crate::payments::event::{
    DisputeChange, DisputeResult, MAX_EVENT_ID_LEN, Parsed, PayloadError, PaymentEvent, Reading,
    RefundAmount, check_event_id,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError};

/// Adyen's answer to a delivery whose every item is stored.
pub const ACCEPTED: &str = "[accepted]";

/// A JSON string, borrowed from the body unless it has escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor(std::marker::PhantomData))
    }
}

/// The request: its items, each kept as the bytes it is.
#[derive(Deserialize)]
struct Notification<'a> {
    #[serde(default, borrow)]
    live: Option<Text<'a>>,
    #[serde(rename = "notificationItems", borrow)]
    items: Vec<Wrapped<'a>>,
}

#[derive(Deserialize)]
struct Wrapped<'a> {
    #[serde(rename = "NotificationRequestItem", borrow)]
    item: &'a RawValue,
}

/// The signed fields of an item, and its signature. A derived struct refuses a repeated name
/// ("duplicate field"), so an item cannot carry two of any of them.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SignedItem<'a> {
    #[serde(default, borrow)]
    psp_reference: Option<Text<'a>>,
    #[serde(default, borrow)]
    original_reference: Option<Text<'a>>,
    #[serde(default, borrow)]
    merchant_account_code: Option<Text<'a>>,
    #[serde(default, borrow)]
    merchant_reference: Option<Text<'a>>,
    #[serde(default, borrow)]
    amount: Option<SignedAmount<'a>>,
    #[serde(default, borrow)]
    event_code: Option<Text<'a>>,
    #[serde(default, borrow)]
    success: Option<Text<'a>>,
    #[serde(default, borrow)]
    additional_data: Option<AdditionalData<'a>>,
}

#[derive(Deserialize, Default)]
struct SignedAmount<'a> {
    #[serde(default, borrow)]
    value: Option<&'a RawValue>,
    #[serde(default, borrow)]
    currency: Option<Text<'a>>,
}

#[derive(Deserialize, Default)]
struct AdditionalData<'a> {
    #[serde(rename = "hmacSignature", default, borrow)]
    hmac_signature: Option<Text<'a>>,
}

/// The signed fields of an item, which must be a JSON object (a derived struct would also read
/// an array, by position).
fn signed_fields(item: &RawValue) -> Option<SignedItem<'_>> {
    if !item.get().trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str(item.get()).ok()
}

fn text<'s>(field: &'s Option<Text<'_>>) -> &'s str {
    field.as_ref().map_or("", |t| t.0.as_ref())
}

impl SignedItem<'_> {
    /// The eight signed fields, joined by `:` (as slices: nothing is copied).
    fn signed_parts(&self) -> [&[u8]; 15] {
        let (value, currency) = match &self.amount {
            // The integer as it is written (0 is "0").
            Some(amount) => (
                amount.value.map_or("", |v| v.get().trim()),
                text(&amount.currency),
            ),
            None => ("", ""),
        };
        [
            text(&self.psp_reference).as_bytes(),
            b":",
            text(&self.original_reference).as_bytes(),
            b":",
            text(&self.merchant_account_code).as_bytes(),
            b":",
            text(&self.merchant_reference).as_bytes(),
            b":",
            value.as_bytes(),
            b":",
            currency.as_bytes(),
            b":",
            text(&self.event_code).as_bytes(),
            b":",
            text(&self.success).as_bytes(),
        ]
    }

    fn signature(&self) -> Option<&str> {
        self.additional_data
            .as_ref()
            .and_then(|data| data.hmac_signature.as_ref())
            .map(|t| t.0.as_ref())
    }

    /// The item's event id: `{pspReference}:{eventCode}:{success}`.
    fn event_id(&self) -> String {
        format!(
            "{}:{}:{}",
            text(&self.psp_reference),
            text(&self.event_code),
            text(&self.success)
        )
    }
}

pub struct AdyenScheme {
    keys: Keys,
}

impl AdyenScheme {
    pub fn new(secrets: &[Secret]) -> Self {
        Self {
            keys: Keys::hex(secrets.iter().map(Secret::expose)),
        }
    }

    /// Checks every item's signature; any item that does not verify refuses the whole
    /// request, so nothing of it is stored.
    pub fn check(&self, body: &[u8]) -> Result<Verified, SignatureError> {
        let missing = SignatureError::MissingHeader("additionalData.hmacSignature");
        let notification: Notification<'_> = serde_json::from_slice(body)
            .map_err(|_| SignatureError::MalformedHeader("notificationItems"))?;
        if notification.items.is_empty() {
            return Err(missing);
        }
        let start = body.as_ptr() as usize;
        let mut items = Vec::with_capacity(notification.items.len());
        for Wrapped { item } in notification.items {
            let fields = signed_fields(item)
                .ok_or(SignatureError::MalformedHeader("NotificationRequestItem"))?;
            let signature = fields.signature().ok_or(missing.clone())?;
            let candidate = STANDARD
                .decode(signature)
                .map_err(|_| SignatureError::MalformedHeader("additionalData.hmacSignature"))?;
            self.keys
                .check_untimed(&fields.signed_parts(), &[candidate])?;
            // The item's text is borrowed from the body, so its place in it is exact.
            let offset = (item.get().as_ptr() as usize).saturating_sub(start);
            items.push(NamedItem {
                span: offset..offset + item.get().len(),
                event_id: fields.event_id(),
            });
        }
        Ok(Verified::new(None, Naming::Items(items)))
    }

    /// The signature of an item under the first key.
    fn signature_of(&self, fields: &SignedItem<'_>) -> String {
        STANDARD.encode(self.keys.sign(&fields.signed_parts()))
    }
}

impl Connector for AdyenScheme {
    fn verify<'a>(
        &'a self,
        _headers: &'a dyn HeaderSource,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(body).into()
    }

    /// Signs each item of a notification, or of a bare item (an exported event) wrapped into
    /// one. An item that already carries a signature the gateway verifies is sent unchanged:
    /// its bytes are its identity, and another signature would make it another body (a 422,
    /// or after its record expired an event posted again under a reused id).
    fn sign(&self, _event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        let unreadable =
            |e: serde_json::Error| Unsignable(format!("not an Adyen notification or item: {e}"));
        let (live, raw_items, wrapped) = match serde_json::from_slice::<Notification<'_>>(body) {
            Ok(notification) => (
                notification.live.map(|l| l.0.into_owned()),
                notification
                    .items
                    .into_iter()
                    .map(|w| w.item)
                    .collect::<Vec<_>>(),
                false,
            ),
            Err(_) => (
                None,
                vec![serde_json::from_slice::<&RawValue>(body).map_err(unreadable)?],
                true,
            ),
        };
        let mut changed = wrapped;
        let mut items: Vec<Cow<'_, str>> = Vec::with_capacity(raw_items.len());
        for raw in raw_items {
            let fields = signed_fields(raw)
                .ok_or_else(|| Unsignable("an Adyen item must be a JSON object".into()))?;
            match fields.signature() {
                Some(signature) => {
                    let candidate = STANDARD.decode(signature).unwrap_or_default();
                    if self
                        .keys
                        .check_untimed(&fields.signed_parts(), &[candidate])
                        .is_err()
                    {
                        return Err(Unsignable(format!(
                            "item {} carries a signature no configured key verifies; signing it \
                             again would change its bytes, so it is not sent",
                            fields.event_id()
                        )));
                    }
                    items.push(Cow::Borrowed(raw.get()));
                }
                None => {
                    let mut value: serde_json::Value =
                        serde_json::from_str(raw.get()).map_err(unreadable)?;
                    value["additionalData"]["hmacSignature"] = json!(self.signature_of(&fields));
                    items.push(Cow::Owned(value.to_string()));
                    changed = true;
                }
            }
        }
        if !changed {
            return Ok(Signed::headers(Vec::new()));
        }
        let mut out = String::from("{");
        if let Some(live) = live {
            out.push_str(&format!("\"live\":{},", json!(live)));
        }
        out.push_str("\"notificationItems\":[");
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"NotificationRequestItem\":");
            out.push_str(item);
            out.push('}');
        }
        out.push_str("]}");
        Ok(Signed {
            body: Some(out.into_bytes()),
            ..Signed::headers(Vec::new())
        })
    }

    fn answer(&self) -> Answer {
        Answer::Fixed {
            body: ACCEPTED,
            content_type: "text/plain; charset=utf-8",
        }
    }
}

/// The signed string of a notification's first item (its eight fields joined by `:`).
pub fn signed_string(body: &[u8]) -> Option<String> {
    let notification: Notification<'_> = serde_json::from_slice(body).ok()?;
    let fields = signed_fields(notification.items.first()?.item)?;
    let joined: Vec<u8> = fields.signed_parts().concat();
    String::from_utf8(joined).ok()
}

/// Adyen's notification items.
pub struct AdyenFormat;

impl Format for AdyenFormat {
    /// One notification item.
    fn read(&self, item: &[u8]) -> Reading {
        body::read(item, "eventCode", parse)
    }

    /// The id of a bare item, or of a notification's only item.
    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        let item = match serde_json::from_slice::<Notification<'_>>(body) {
            Ok(notification) if notification.items.len() == 1 => notification.items[0].item,
            Ok(_) => {
                return Err(invalid(
                    "a notification of several items has no single event id",
                ));
            }
            Err(_) => serde_json::from_slice(body)
                .map_err(|_| invalid("not an Adyen notification item"))?,
        };
        let id = signed_fields(item)
            .map(|fields| fields.event_id())
            .ok_or_else(|| invalid("not an Adyen notification item"))?;
        check_event_id(&id)?;
        Ok(id)
    }

    /// A notification of one unsigned item; signing adds its `hmacSignature`.
    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let reference = s
            .order_id
            .map_or_else(|| format!("sample-{}", s.event_id), |id| id.to_string());
        let mut item = json!({"merchantAccountCode": "TestMerchant", "merchantReference": reference,
            "amount": {"value": s.amount_minor, "currency": s.currency},
            "eventDate": Utc::now().to_rfc3339(), "paymentMethod": "visa"});
        let (code, psp, original, success) = match event_type {
            "payment.succeeded" => ("AUTHORISATION", s.payment_id.clone(), None, "true"),
            "payment.failed" => ("AUTHORISATION", s.payment_id.clone(), None, "false"),
            "refund.succeeded" => (
                "REFUND",
                format!("R{}", s.event_id),
                Some(s.payment_id.clone()),
                "true",
            ),
            other => (other, s.event_id.clone(), None, "true"),
        };
        item["eventCode"] = json!(code);
        item["pspReference"] = json!(psp);
        item["success"] = json!(success);
        if let Some(original) = original {
            item["originalReference"] = json!(original);
        }
        json!({"live": "false", "notificationItems": [{"NotificationRequestItem": item}]})
            .to_string()
    }
}

fn parse(kind: &str, item: &Object<'_>) -> Result<Parsed, Unusable> {
    let success = item.string("success").as_deref() == Some("true");
    let event = match kind {
        "AUTHORISATION" if success => {
            let (amount, currency) = amount_of(item)?;
            PaymentEvent::Succeeded {
                payment_id: item.id("pspReference")?,
                order_id: item.order_id("merchantReference"),
                amount,
                currency,
            }
        }
        "AUTHORISATION" => PaymentEvent::Failed {
            payment_id: item.id("pspReference")?,
            order_id: item.order_id("merchantReference"),
        },
        "CAPTURE" | "REFUND" if !success => return Ok(Parsed::Ignored("unsuccessful")),
        "CAPTURE" => {
            let (amount, currency) = amount_of(item)?;
            PaymentEvent::Succeeded {
                payment_id: item.id("originalReference")?,
                order_id: item.order_id("merchantReference"),
                amount,
                currency,
            }
        }
        "REFUND" => {
            let (amount, currency) = amount_of(item)?;
            PaymentEvent::Refunded {
                payment_id: item.id("originalReference")?,
                refund_id: Some(item.id("pspReference")?),
                refund: RefundAmount::Delta(amount),
                currency,
            }
        }
        // A refund the card scheme rejected after Adyen reported it, or whose money came back:
        // what the books refunded under its `pspReference` is given back.
        "REFUND_FAILED" | "REFUNDED_REVERSED" if success => {
            let (amount, _) = amount_of(item)?;
            PaymentEvent::RefundReturned {
                payment_id: item.id("originalReference")?,
                refund_id: item.id("pspReference")?,
                reported_minor: Some(amount.get()),
                unnamed: false,
            }
        }
        "CHARGEBACK"
        | "DISPUTE_OPENED_WITH_CHARGEBACK"
        | "CHARGEBACK_REVERSED"
        | "SECOND_CHARGEBACK"
        | "PREARBITRATION_WON"
        | "PREARBITRATION_LOST" => return dispute(kind, success, item),
        // Notices of a dispute's progress: no money moves with them.
        "NOTIFICATION_OF_CHARGEBACK"
        | "REQUEST_FOR_INFORMATION"
        | "NOTIFICATION_OF_FRAUD"
        | "INFORMATION_SUPPLIED"
        | "DISPUTE_DEFENSE_PERIOD_ENDED"
        | "ISSUER_RESPONSE_TIMEFRAME_EXPIRED"
        | "ISSUER_COMMENTS" => return Ok(Parsed::Ignored("no_funds_moved")),
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    Ok(Parsed::Event(event))
}

/// A dispute item: `pspReference` names the dispute (every event of one dispute has it),
/// `originalReference` the disputed payment, `amount` the money that moves.
fn dispute(kind: &str, success: bool, item: &Object<'_>) -> Result<Parsed, Unusable> {
    if !success {
        return Ok(Parsed::Ignored("unsuccessful"));
    }
    let first_stage = item.id("pspReference")?;
    // The second stage withdraws again after a reversal: its own id, so it posts once too.
    let second_stage = || {
        let id = format!("{first_stage}:second");
        if id.len() > MAX_EVENT_ID_LEN {
            return Err(invalid(format!(
                "pspReference is too long to name a second chargeback (at most {} characters)",
                MAX_EVENT_ID_LEN - ":second".len()
            )));
        }
        Ok(id)
    };
    let withdrawn = |item: &Object<'_>| -> Result<DisputeChange, Unusable> {
        let (amount, currency) = amount_of(item)?;
        Ok(DisputeChange::FundsWithdrawn {
            amount,
            fee_minor: 0,
            currency,
            fee_in_other_currency: false,
        })
    };
    let (dispute_id, change) = match kind {
        "CHARGEBACK" | "DISPUTE_OPENED_WITH_CHARGEBACK" => (first_stage.clone(), withdrawn(item)?),
        "SECOND_CHARGEBACK" => (second_stage()?, withdrawn(item)?),
        "CHARGEBACK_REVERSED" => {
            let (amount, currency) = amount_of(item)?;
            (
                first_stage.clone(),
                DisputeChange::FundsReinstated { amount, currency },
            )
        }
        "PREARBITRATION_WON" => (second_stage()?, DisputeChange::Closed(DisputeResult::Won)),
        _ => (second_stage()?, DisputeChange::Closed(DisputeResult::Lost)),
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: item.id("originalReference")?,
        dispute_id,
        change,
    }))
}

/// An item's `amount` in the ISO 4217 minor units the ledger keeps.
fn amount_of(item: &Object<'_>) -> Result<(AmountMinor, Currency), Unusable> {
    let amount = item.object("amount")?;
    let currency = amount.currency("currency", false)?;
    let value = amount.amount("value")?;
    Ok((iso_minor_units(value, currency, "amount.value")?, currency))
}

/// Adyen's number of decimals for `currency`: ISO 4217's, except the four its currency table
/// ("Currency codes and minor units") says differ: CLP and ISK with 2, CVE and IDR with 0.
pub fn adyen_decimals(currency: Currency) -> Option<u32> {
    match currency.code() {
        "CLP" | "ISK" => Some(2),
        "CVE" | "IDR" => Some(0),
        _ => money::exponent(currency),
    }
}

/// `value` in Adyen's minor units of `currency` as ISO 4217 minor units, exactly.
fn iso_minor_units(
    value: AmountMinor,
    currency: Currency,
    path: &str,
) -> Result<AmountMinor, Unusable> {
    body::iso_minor_units(value, currency, adyen_decimals(currency), "Adyen", path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

    fn scheme() -> AdyenScheme {
        AdyenScheme::new(&[Secret::new(KEY)])
    }

    fn item(psp: &str, code: &str, value: i64) -> String {
        format!(
            r#"{{"pspReference":"{psp}","merchantAccountCode":"TestMerchant","merchantReference":"5","amount":{{"value":{value},"currency":"EUR"}},"eventCode":"{code}","success":"true"}}"#
        )
    }

    /// A notification of `items`, each signed.
    fn signed(items: &[String]) -> Vec<u8> {
        let body = format!(
            r#"{{"live":"false","notificationItems":[{}]}}"#,
            items
                .iter()
                .map(|i| format!(r#"{{"NotificationRequestItem":{i}}}"#))
                .collect::<Vec<_>>()
                .join(",")
        );
        scheme().sign("", body.as_bytes(), 0).unwrap().body.unwrap()
    }

    #[test]
    fn every_item_is_named_by_its_fields_and_found_where_it_is() {
        let body = signed(&[item("P1", "AUTHORISATION", 100), item("R1", "REFUND", 40)]);
        let Naming::Items(items) = scheme().check(&body).unwrap().naming else {
            panic!("items expected");
        };
        let ids: Vec<&str> = items.iter().map(|i| i.event_id.as_str()).collect();
        assert_eq!(ids, ["P1:AUTHORISATION:true", "R1:REFUND:true"]);
        let first: serde_json::Value =
            serde_json::from_slice(&body[items[0].span.clone()]).unwrap();
        assert_eq!(first["pspReference"], "P1");
    }

    #[test]
    fn one_bad_item_refuses_the_whole_request() {
        let body = String::from_utf8(signed(&[
            item("P1", "AUTHORISATION", 100),
            item("P2", "AUTHORISATION", 200),
        ]))
        .unwrap();
        // The second item's amount changes after signing.
        let tampered = body.replacen(r#""value":200"#, r#""value":201"#, 1);
        assert_eq!(
            scheme().check(tampered.as_bytes()),
            Err(SignatureError::NoMatch)
        );
        let unsigned =
            r#"{"notificationItems":[{"NotificationRequestItem":{"pspReference":"P"}}]}"#;
        assert_eq!(
            scheme().check(unsigned.as_bytes()),
            Err(SignatureError::MissingHeader(
                "additionalData.hmacSignature"
            ))
        );
        assert!(scheme().check(br#"{"notificationItems":[]}"#).is_err());
    }

    #[test]
    fn an_item_must_be_an_object_and_its_id_usable() {
        assert!(AdyenFormat.event_id(b"[\"\x7f\"]").is_err());
        assert!(
            AdyenFormat
                .event_id(br#"{"pspReference":"P\u0000","eventCode":"X","success":"true"}"#)
                .is_err()
        );
        let array = r#"{"notificationItems":[{"NotificationRequestItem":["P","","","","1","EUR","AUTHORISATION","true"]}]}"#;
        assert_eq!(
            scheme().check(array.as_bytes()),
            Err(SignatureError::MalformedHeader("NotificationRequestItem"))
        );
    }

    #[test]
    fn an_item_that_repeats_a_signed_field_is_refused() {
        let body = String::from_utf8(signed(&[item("P1", "AUTHORISATION", 100)])).unwrap();
        let repeated = body.replacen(
            r#""pspReference":"P1""#,
            r#""pspReference":"P1","pspReference":"P2""#,
            1,
        );
        assert!(scheme().check(repeated.as_bytes()).is_err());
    }

    #[test]
    fn signing_keeps_an_item_that_already_verifies_byte_for_byte() {
        let body = signed(&[item("P1", "AUTHORISATION", 100)]);
        let Naming::Items(items) = scheme().check(&body).unwrap().naming else {
            panic!();
        };
        let exported = &body[items[0].span.clone()];
        let wrapped = scheme().sign("", exported, 0).unwrap().body.unwrap();
        let Naming::Items(again) = scheme().check(&wrapped).unwrap().naming else {
            panic!();
        };
        assert_eq!(&wrapped[again[0].span.clone()], exported);
        let other = AdyenScheme::new(&[Secret::new("00".repeat(32))]);
        assert!(
            other.sign("", exported, 0).is_err(),
            "never re-signed into another body"
        );
    }

    #[test]
    fn authorisation_captures_refund_refunds_its_original_reference() {
        let read = |i: &str| AdyenFormat.read(i.as_bytes()).parsed;
        assert!(matches!(
            read(&item("P1", "AUTHORISATION", 1130)),
            Parsed::Event(PaymentEvent::Succeeded { ref payment_id, order_id: Some(5), amount, .. })
                if payment_id == "P1" && amount.get() == 1130
        ));
        let refund = item("R1", "REFUND", 500)
            .replace(r#""eventCode""#, r#""originalReference":"P1","eventCode""#);
        assert!(matches!(
            read(&refund),
            Parsed::Event(PaymentEvent::Refunded { ref payment_id, ref refund_id, .. })
                if payment_id == "P1" && refund_id.as_deref() == Some("R1")
        ));
        let failed = item("P2", "AUTHORISATION", 1).replace(r#""true""#, r#""false""#);
        assert!(matches!(
            read(&failed),
            Parsed::Event(PaymentEvent::Failed { .. })
        ));
        assert_eq!(
            read(&item("P3", "REPORT_AVAILABLE", 0)),
            Parsed::Ignored("unsupported_event_type")
        );
        assert!(matches!(
            read(&item("P4", "AUTHORISATION", 0)),
            Parsed::Rejected {
                reason: "invalid_payload",
                ..
            }
        ));
    }

    #[test]
    fn adyen_minor_units_become_iso_minor_units_exactly() {
        let currency = |c| Currency::parse(c).unwrap();
        let amount = |v| AmountMinor::parse(v).unwrap();
        let convert = |v, c| iso_minor_units(amount(v), currency(c), "v").map(AmountMinor::get);
        assert!(matches!(convert(1130, "EUR"), Ok(1130)));
        assert!(matches!(convert(1130, "JPY"), Ok(1130)));
        // CLP has 0 decimals in ISO 4217 and 2 at Adyen; IDR 2 and 0.
        assert!(matches!(convert(150000, "CLP"), Ok(1500)));
        assert!(matches!(
            convert(150001, "CLP"),
            Err(Unusable::InvalidAmount(_))
        ));
        assert!(matches!(convert(15000, "IDR"), Ok(1500000)));
    }

    #[test]
    fn chargebacks_withdraw_reversals_reinstate_and_notices_move_nothing() {
        let read = |code: &str, success: &str| {
            let item = format!(
                r#"{{"pspReference":"D1","originalReference":"P1","merchantAccountCode":"TestMerchant","merchantReference":"5","amount":{{"value":1130,"currency":"EUR"}},"eventCode":"{code}","success":"{success}"}}"#
            );
            body::dispute_summary(&AdyenFormat.read(item.as_bytes()).parsed)
        };
        for (code, expected) in [
            ("CHARGEBACK", "withdrawn P1 D1 1130+0 EUR"),
            (
                "DISPUTE_OPENED_WITH_CHARGEBACK",
                "withdrawn P1 D1 1130+0 EUR",
            ),
            ("CHARGEBACK_REVERSED", "reinstated P1 D1 1130 EUR"),
            ("SECOND_CHARGEBACK", "withdrawn P1 D1:second 1130+0 EUR"),
            ("PREARBITRATION_WON", "closed P1 D1:second won"),
            ("PREARBITRATION_LOST", "closed P1 D1:second lost"),
            ("NOTIFICATION_OF_CHARGEBACK", "ignored no_funds_moved"),
            ("REQUEST_FOR_INFORMATION", "ignored no_funds_moved"),
            ("NOTIFICATION_OF_FRAUD", "ignored no_funds_moved"),
            ("DISPUTE_DEFENSE_PERIOD_ENDED", "ignored no_funds_moved"),
        ] {
            assert_eq!(read(code, "true"), expected, "{code}");
        }
        assert_eq!(read("CHARGEBACK", "false"), "ignored unsuccessful");
        let no_payment = item("D2", "CHARGEBACK", 100);
        assert_eq!(
            body::dispute_summary(&AdyenFormat.read(no_payment.as_bytes()).parsed),
            "rejected invalid_payload"
        );
    }
}
