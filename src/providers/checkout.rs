//! Checkout.com: `Cko-Signature`, the hex HMAC-SHA256 of the raw body keyed with the webhook's
//! signature key (UTF-8 bytes); no timestamp is signed. Event id = body `id`. Money events:
//! `payment_captured`, `payment_declined` and `payment_refunded`, each with `data`; and its
//! dispute events, whose `data` is the dispute (`id`, `payment_id`, `amount`, `currency`):
//! `dispute_evidence_required` / `dispute_received` withdraw (Checkout.com debits the disputed
//! amount when the chargeback arrives), `dispute_won` reinstates, `dispute_lost`,
//! `dispute_expired` and `dispute_accepted` close lost, `dispute_canceled` reinstates as
//! `dispute_won` does (Checkout.com: "canceled by the issuing bank and your account is credited
//! back the disputed amount"). The
//! dispute events carry no fee, so none is booked.
//! Checkout.com publishes no test vector: the one in tests/vectors/own.json is ours.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::body::{self, IdField, Object, Unusable};
use super::connector::{
    Connector, Format, Naming, Sample, Signed, Unsignable, Verification, Verified,
};
use crate::money::{self, AmountMinor, Currency};
use crate::payments::event::{
    DisputeChange, DisputeResult, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError};

const HEADER: &str = "cko-signature";

pub struct CheckoutScheme {
    keys: Keys,
}

impl CheckoutScheme {
    pub fn new(secrets: &[Secret]) -> Self {
        Self {
            keys: Keys::utf8(secrets.iter().map(Secret::expose), 0),
        }
    }

    /// Verifies a delivery's signature over its raw body.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
    ) -> Result<Verified, SignatureError> {
        let signature = headers
            .header(HEADER)
            .ok_or(SignatureError::MissingHeader("Cko-Signature"))?;
        let candidate = hex::decode(signature.trim())
            .map_err(|_| SignatureError::MalformedHeader("Cko-Signature"))?;
        self.keys.check_untimed(&[body], &[candidate])?;
        Ok(Verified::new(None, Naming::Body))
    }

    pub fn sign_headers(&self, body: &[u8]) -> Vec<(String, String)> {
        vec![(
            "Cko-Signature".to_owned(),
            hex::encode(self.keys.sign(&[body])),
        )]
    }
}

impl Connector for CheckoutScheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(headers, body).into()
    }

    fn sign(&self, _event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        Ok(Signed::headers(self.sign_headers(body)))
    }
}

/// Checkout.com's webhook payload.
pub struct CheckoutFormat;

impl Format for CheckoutFormat {
    fn read(&self, body: &[u8]) -> Reading {
        body::read(body, "type", parse)
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        body::event_id_from_body(body, IdField::Id)
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let kind = match event_type {
            "payment.succeeded" => "payment_captured",
            "payment.failed" => "payment_declined",
            "refund.succeeded" => "payment_refunded",
            other => other,
        };
        let mut data = json!({"id": s.payment_id, "action_id": format!("act_{}", s.event_id),
            "amount": s.amount_minor, "currency": s.currency, "response_code": "10000",
            "processed_on": Utc::now().to_rfc3339()});
        if let Some(order_id) = s.order_id {
            data["reference"] = json!(order_id.to_string());
        }
        json!({"id": s.event_id, "type": kind, "version": "1.0.33",
               "created_on": Utc::now().to_rfc3339(), "data": data})
        .to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if kind.starts_with("dispute_") {
        return dispute(kind, body);
    }
    if !matches!(
        kind,
        "payment_captured" | "payment_declined" | "payment_refunded"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let data = body.object("data")?;
    let event = match kind {
        "payment_captured" => {
            let (amount, currency) = amount_of(&data)?;
            PaymentEvent::Succeeded {
                payment_id: data.id("id")?,
                order_id: data.order_id("reference"),
                amount,
                currency,
            }
        }
        "payment_declined" => PaymentEvent::Failed {
            payment_id: data.id("id")?,
            order_id: data.order_id("reference"),
        },
        // The refund's own action id posts once, whatever event carries it.
        _ => {
            let (amount, currency) = amount_of(&data)?;
            PaymentEvent::Refunded {
                payment_id: data.id("id")?,
                refund_id: data.optional_id("action_id")?,
                refund: RefundAmount::Delta(amount),
                currency,
            }
        }
    };
    Ok(Parsed::Event(event))
}

/// `data.amount` and `data.currency`, the amount in the ISO 4217 minor units the ledger keeps.
fn amount_of(data: &Object<'_>) -> Result<(AmountMinor, Currency), Unusable> {
    let currency = data.currency("currency", false)?;
    let amount = data.amount("amount")?;
    let amount = body::iso_minor_units(
        amount,
        currency,
        checkout_decimals(currency),
        "Checkout.com",
        "data.amount",
    )?;
    Ok((amount, currency))
}

/// Checkout.com's decimals for `currency` ("Format the amount value"): none for the currencies
/// it takes as the full amount, three for those it divides by 1000 (ISO 4217's three-decimal
/// ones), two for every other: CLP among them, which has none in ISO 4217.
fn checkout_decimals(currency: Currency) -> Option<u32> {
    const FULL_AMOUNT: [&str; 15] = [
        "BIF", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VUV", "VND", "XAF",
        "XOF", "XPF",
    ];
    match money::exponent(currency)? {
        _ if FULL_AMOUNT.contains(&currency.code()) => Some(0),
        3 => Some(3),
        _ => Some(2),
    }
}

/// A dispute event: `data.id` names the dispute, `data.payment_id` the disputed payment.
fn dispute(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    let data = match kind {
        "dispute_evidence_required"
        | "dispute_received"
        | "dispute_won"
        | "dispute_lost"
        | "dispute_expired"
        | "dispute_accepted"
        | "dispute_canceled" => body.object("data")?,
        // Evidence submitted, acknowledged, arbitration notices: no money moves with them.
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    let change = match kind {
        "dispute_evidence_required" | "dispute_received" => {
            let (amount, currency) = amount_of(&data)?;
            DisputeChange::FundsWithdrawn {
                amount,
                fee_minor: 0,
                currency,
                fee_in_other_currency: false,
            }
        }
        // Won, or cancelled by the issuing bank: Checkout.com's event types say the account is
        // credited back the disputed amount in both.
        "dispute_won" | "dispute_canceled" => {
            let (amount, currency) = amount_of(&data)?;
            DisputeChange::FundsReinstated { amount, currency }
        }
        _ => DisputeChange::Closed(DisputeResult::Lost),
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: data.id("payment_id")?,
        dispute_id: data.id("id")?,
        change,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str) -> Parsed {
        CheckoutFormat.read(body.as_bytes()).parsed
    }

    #[test]
    fn a_captured_payment_is_a_capture_of_its_reference() {
        let body = r#"{"id":"evt_1","type":"payment_captured","data":{"id":"pay_1","action_id":"act_1","reference":"31","amount":20,"currency":"EUR"}}"#;
        assert_eq!(
            read(body),
            Parsed::Event(PaymentEvent::Succeeded {
                payment_id: "pay_1".into(),
                order_id: Some(31),
                amount: AmountMinor::parse(20).unwrap(),
                currency: Currency::parse("EUR").unwrap(),
            })
        );
        let text_reference = body.replace(r#""31""#, r#""ORD-5023-4E89""#);
        assert!(matches!(
            read(&text_reference),
            Parsed::Event(PaymentEvent::Succeeded { order_id: None, .. })
        ));
    }

    #[test]
    fn amounts_in_checkout_minor_units_are_booked_in_iso_minor_units() {
        // Checkout.com, "Format the amount value": the full amount for JPY and the like, divided
        // by 1000 for BHD and the like, divided by 100 for every other currency, CLP included
        // (0 decimals in ISO 4217).
        let captured = |amount: i64, currency: &str| {
            let body = format!(
                r#"{{"id":"evt_1","type":"payment_captured","data":{{"id":"pay_1","reference":"31","amount":{amount},"currency":"{currency}"}}}}"#
            );
            match read(&body) {
                Parsed::Event(PaymentEvent::Succeeded { amount, .. }) => Ok(amount.get()),
                other => Err(format!("{other:?}")),
            }
        };
        assert_eq!(captured(1_000_000, "CLP"), Ok(10_000));
        assert_eq!(captured(5000, "JPY"), Ok(5000));
        assert_eq!(captured(100_000, "BHD"), Ok(100_000));
        assert_eq!(captured(1130, "EUR"), Ok(1130));
        let part_of_a_peso = captured(1_000_050, "CLP").unwrap_err();
        assert!(
            part_of_a_peso.contains("invalid_amount"),
            "{part_of_a_peso}"
        );
    }

    #[test]
    fn a_refund_names_its_payment_and_its_action_as_the_refund_id() {
        let body = r#"{"id":"evt_2","type":"payment_refunded","data":{"id":"pay_1","action_id":"act_9","amount":5,"currency":"EUR"}}"#;
        assert!(matches!(
            read(body),
            Parsed::Event(PaymentEvent::Refunded { ref payment_id, ref refund_id, .. })
                if payment_id == "pay_1" && refund_id.as_deref() == Some("act_9")
        ));
    }

    #[test]
    fn a_tampered_body_fails() {
        let scheme = CheckoutScheme::new(&[Secret::new("cko-webhook-signature-key-0001")]);
        let body = br#"{"id":"evt_1"}"#;
        let headers = scheme.sign_headers(body);
        assert!(scheme.check(&headers, body).is_ok());
        assert_eq!(
            scheme.check(&headers, br#"{"id":"evt_2"}"#),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn dispute_events_withdraw_reinstate_and_close() {
        let read = |kind: &str| {
            let body = format!(
                r#"{{"id":"evt_d","type":"{kind}","data":{{"id":"dsp_1","category":"fraudulent","amount":4200,"currency":"GBP","reason_code":"10.4","payment_id":"pay_1","payment_action_id":"act_1"}}}}"#
            );
            body::dispute_summary(&CheckoutFormat.read(body.as_bytes()).parsed)
        };
        for (kind, expected) in [
            (
                "dispute_evidence_required",
                "withdrawn pay_1 dsp_1 4200+0 GBP",
            ),
            ("dispute_received", "withdrawn pay_1 dsp_1 4200+0 GBP"),
            ("dispute_won", "reinstated pay_1 dsp_1 4200 GBP"),
            ("dispute_lost", "closed pay_1 dsp_1 lost"),
            ("dispute_expired", "closed pay_1 dsp_1 lost"),
            ("dispute_accepted", "closed pay_1 dsp_1 lost"),
            ("dispute_canceled", "reinstated pay_1 dsp_1 4200 GBP"),
            (
                "dispute_evidence_submitted",
                "ignored unsupported_event_type",
            ),
        ] {
            assert_eq!(read(kind), expected, "{kind}");
        }
        let no_amount =
            r#"{"id":"e","type":"dispute_won","data":{"id":"dsp_1","payment_id":"pay_1"}}"#;
        assert_eq!(
            body::dispute_summary(&read_body(no_amount)),
            "rejected invalid_payload"
        );
    }

    fn read_body(body: &str) -> Parsed {
        CheckoutFormat.read(body.as_bytes()).parsed
    }
}
