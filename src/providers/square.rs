//! Square: `x-square-hmacsha256-signature`, the base64 HMAC-SHA256 of the endpoint's
//! notification URL exactly as registered (`notification_url`, byte for byte) followed by the
//! raw body, keyed with the signature key's UTF-8 bytes; no timestamp is signed. Event id =
//! body `event_id`. Money events: `payment.created` / `payment.updated` with
//! `data.object.payment`, `refund.created` / `refund.updated` with `data.object.refund`, and
//! `dispute.created` / `dispute.state.updated` (`dispute.state.changed` before 2021) with
//! `data.object.dispute`, read by its `state` (docs/providers.md names the source of every
//! mapped field).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde_json::json;

use super::body::{self, IdField, Object, Unusable};
use super::connector::{
    Connector, Format, Naming, Sample, Signed, Unsignable, Verification, Verified,
};
use crate::money::{AmountMinor, Currency};
use crate::payments::event::{
    DisputeChange, DisputeResult, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError};

const HEADER: &str = "x-square-hmacsha256-signature";

pub struct SquareScheme {
    keys: Keys,
    notification_url: String,
}

impl SquareScheme {
    pub fn new(secrets: &[Secret], notification_url: &str) -> Self {
        Self {
            keys: Keys::utf8(secrets.iter().map(Secret::expose), 0),
            notification_url: notification_url.to_owned(),
        }
    }

    /// Verifies a delivery's signature over the notification URL and the raw body.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
    ) -> Result<Verified, SignatureError> {
        let signature = headers.header(HEADER).ok_or(SignatureError::MissingHeader(
            "x-square-hmacsha256-signature",
        ))?;
        let candidate = STANDARD
            .decode(signature.trim())
            .map_err(|_| SignatureError::MalformedHeader("x-square-hmacsha256-signature"))?;
        let parts: [&[u8]; 2] = [self.notification_url.as_bytes(), body];
        self.keys.check_untimed(&parts, &[candidate])?;
        Ok(Verified::new(None, Naming::Body))
    }

    pub fn sign_headers(&self, body: &[u8]) -> Vec<(String, String)> {
        let parts: [&[u8]; 2] = [self.notification_url.as_bytes(), body];
        vec![(
            "x-square-hmacsha256-signature".to_owned(),
            STANDARD.encode(self.keys.sign(&parts)),
        )]
    }
}

impl Connector for SquareScheme {
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

/// Square's webhook payload.
pub struct SquareFormat;

impl Format for SquareFormat {
    fn read(&self, body: &[u8]) -> Reading {
        body::read(body, "type", parse)
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        body::event_id_from_body(body, IdField::EventId)
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let money = json!({"amount": s.amount_minor, "currency": s.currency});
        let reference = s.order_id.map(|id| id.to_string());
        let (kind, object_type, object) = match event_type {
            "payment.succeeded" | "payment.failed" => {
                let status = if event_type == "payment.succeeded" {
                    "COMPLETED"
                } else {
                    "FAILED"
                };
                let payment = json!({"id": s.payment_id, "amount_money": money, "total_money": money,
                    "status": status, "source_type": "CARD", "reference_id": reference});
                ("payment.updated", "payment", json!({"payment": payment}))
            }
            "refund.succeeded" => {
                let refund = json!({"id": format!("re_{}", s.event_id), "payment_id": s.payment_id,
                    "amount_money": money, "status": "COMPLETED"});
                ("refund.updated", "refund", json!({"refund": refund}))
            }
            other => (other, "unknown", json!({})),
        };
        json!({"merchant_id": "ML_TEST", "type": kind, "event_id": s.event_id,
               "created_at": Utc::now().to_rfc3339(),
               "data": {"type": object_type, "id": s.payment_id, "object": object}})
        .to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if matches!(
        kind,
        "dispute.created" | "dispute.state.updated" | "dispute.state.changed"
    ) {
        return dispute(&body.object("data")?.object("object")?.object("dispute")?);
    }
    let object = match kind {
        "payment.created" | "payment.updated" | "refund.created" | "refund.updated" => {
            body.object("data")?.object("object")?
        }
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    let event = if kind.starts_with("payment.") {
        let payment = object.object("payment")?;
        // A payment moves money when it is COMPLETED (captured); APPROVED is only authorised.
        match payment.string("status").as_deref() {
            Some("COMPLETED") => {
                // total_money is amount_money plus the tip: what the buyer paid.
                let money = match payment.object_if_any("total_money")? {
                    Some(total) => total,
                    None => payment.object("amount_money")?,
                };
                let (amount, currency) = money_of(&money)?;
                PaymentEvent::Succeeded {
                    payment_id: payment.id("id")?,
                    order_id: payment.order_id("reference_id"),
                    amount,
                    currency,
                }
            }
            Some("FAILED" | "CANCELED") => PaymentEvent::Failed {
                payment_id: payment.id("id")?,
                order_id: payment.order_id("reference_id"),
            },
            _ => return Ok(Parsed::Ignored("payment_not_completed")),
        }
    } else {
        let refund = object.object("refund")?;
        if refund.string("status").as_deref() != Some("COMPLETED") {
            return Ok(Parsed::Ignored("refund_not_completed"));
        }
        let (amount, currency) = money_of(&refund.object("amount_money")?)?;
        PaymentEvent::Refunded {
            payment_id: refund.id("payment_id")?,
            refund_id: Some(refund.id("id")?),
            refund: RefundAmount::Delta(amount),
            currency,
        }
    };
    Ok(Parsed::Event(event))
}

/// A Square `Dispute` by its `state`: Square takes the disputed `amount_money` from the
/// seller once the chargeback is formal (`EVIDENCE_REQUIRED`, `PROCESSING`,
/// `WAITING_THIRD_PARTY`: one withdrawal, however many of them arrive), gives it back when it is
/// `WON`, and keeps it when `LOST` or `ACCEPTED`. An inquiry (`INQUIRY_*`) moves no money, and
/// Square charges no dispute fee. The dispute is its `id` (`dispute_id` in older versions), its
/// payment `disputed_payment.payment_id`.
fn dispute(dispute: &Object<'_>) -> Result<Parsed, Unusable> {
    let change = match dispute.string("state").as_deref() {
        Some("EVIDENCE_REQUIRED" | "PROCESSING" | "WAITING_THIRD_PARTY") => {
            let (amount, currency) = money_of(&dispute.object("amount_money")?)?;
            DisputeChange::FundsWithdrawn {
                amount,
                fee_minor: 0,
                currency,
                fee_in_other_currency: false,
            }
        }
        Some("WON") => {
            let (amount, currency) = money_of(&dispute.object("amount_money")?)?;
            DisputeChange::FundsReinstated { amount, currency }
        }
        Some("LOST" | "ACCEPTED") => DisputeChange::Closed(DisputeResult::Lost),
        Some(state) if state.starts_with("INQUIRY_") => return Ok(Parsed::Ignored("inquiry")),
        Some(_) => return Ok(Parsed::Ignored("unsupported_dispute_state")),
        None => {
            return Err(
                body::invalid(format!("{} must be a string", dispute.path_of("state"))).into(),
            );
        }
    };
    let dispute_id = match dispute.member("id") {
        Some(_) => dispute.id("id")?,
        None => dispute.id("dispute_id")?,
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: dispute.object("disputed_payment")?.id("payment_id")?,
        dispute_id,
        change,
    }))
}

/// A Square `Money` object: `amount` in the currency's smallest unit, `currency` upper case.
fn money_of(money: &Object<'_>) -> Result<(AmountMinor, Currency), Unusable> {
    Ok((money.amount("amount")?, money.currency("currency", false)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scheme(url: &str) -> SquareScheme {
        SquareScheme::new(&[Secret::new("square-signature-key")], url)
    }

    fn read(body: &str) -> Parsed {
        SquareFormat.read(body.as_bytes()).parsed
    }

    #[test]
    fn the_notification_url_is_signed_byte_for_byte() {
        let body = br#"{"event_id":"e1","type":"payment.updated"}"#;
        let signed = scheme("https://gw.example/v1/callbacks/square").sign_headers(body);
        assert!(
            scheme("https://gw.example/v1/callbacks/square")
                .check(&signed, body)
                .is_ok()
        );
        for other in [
            "https://gw.example/v1/callbacks/squarf",
            "https://gw.example/v1/callbacks/square/",
            "http://gw.example/v1/callbacks/square",
        ] {
            assert_eq!(
                scheme(other).check(&signed, body),
                Err(SignatureError::NoMatch),
                "{other}"
            );
        }
    }

    #[test]
    fn a_completed_payment_is_a_capture_of_its_reference_id() {
        let body = r#"{"type":"payment.updated","event_id":"e","data":{"type":"payment","id":"P1","object":{"payment":{"id":"P1","status":"COMPLETED","reference_id":"42","amount_money":{"amount":1000,"currency":"USD"},"total_money":{"amount":1200,"currency":"USD"}}}}}"#;
        assert_eq!(
            read(body),
            Parsed::Event(PaymentEvent::Succeeded {
                payment_id: "P1".into(),
                order_id: Some(42),
                amount: AmountMinor::parse(1200).unwrap(),
                currency: Currency::parse("USD").unwrap(),
            })
        );
    }

    #[test]
    fn an_approved_payment_moves_no_money_and_a_failed_one_is_a_failure() {
        let payment = |status: &str| {
            format!(
                r#"{{"type":"payment.created","event_id":"e","data":{{"object":{{"payment":{{"id":"P1","status":"{status}","amount_money":{{"amount":5,"currency":"USD"}}}}}}}}}}"#
            )
        };
        assert_eq!(
            read(&payment("APPROVED")),
            Parsed::Ignored("payment_not_completed")
        );
        assert!(matches!(
            read(&payment("CANCELED")),
            Parsed::Event(PaymentEvent::Failed { .. })
        ));
    }

    #[test]
    fn a_completed_refund_names_its_payment_and_refund_id() {
        let body = r#"{"type":"refund.updated","event_id":"e","data":{"object":{"refund":{"id":"R1","payment_id":"P1","status":"COMPLETED","amount_money":{"amount":300,"currency":"USD"}}}}}"#;
        assert!(matches!(
            read(body),
            Parsed::Event(PaymentEvent::Refunded { ref payment_id, ref refund_id, .. })
                if payment_id == "P1" && refund_id.as_deref() == Some("R1")
        ));
        let pending = body.replace("COMPLETED", "PENDING");
        assert_eq!(read(&pending), Parsed::Ignored("refund_not_completed"));
    }

    #[test]
    fn the_event_id_is_the_body_event_id() {
        assert_eq!(
            SquareFormat.event_id(br#"{"event_id":"ev-1","type":"x"}"#),
            Ok("ev-1".into())
        );
    }

    #[test]
    fn samples_read_back_as_what_they_stand_for() {
        let sample = Sample {
            event_id: "evt_1".into(),
            payment_id: "P9".into(),
            order_id: Some(7),
            amount_minor: 4620,
            currency: "EUR".into(),
        };
        assert!(matches!(
            read(&SquareFormat.sample("payment.succeeded", &sample)),
            Parsed::Event(PaymentEvent::Succeeded {
                order_id: Some(7),
                ..
            })
        ));
        let refund = SquareFormat.sample("refund.succeeded", &sample);
        assert!(matches!(
            read(&refund),
            Parsed::Event(PaymentEvent::Refunded { .. })
        ));
        assert_eq!(SquareFormat.event_id(refund.as_bytes()), Ok("evt_1".into()));
    }

    #[test]
    fn a_dispute_is_read_by_its_state() {
        let dispute = |kind: &str, state: &str, id_field: &str| {
            let body = format!(
                r#"{{"merchant_id":"ML1","type":"{kind}","event_id":"e1","data":{{"type":"dispute","id":"DP1","object":{{"dispute":{{"{id_field}":"DP1","amount_money":{{"amount":2500,"currency":"USD"}},"reason":"NOT_RECEIVED","state":"{state}","disputed_payment":{{"payment_id":"PAY1"}},"card_brand":"VISA"}}}}}}}}"#
            );
            body::dispute_summary(&read(&body))
        };
        for (kind, state, expected) in [
            (
                "dispute.created",
                "EVIDENCE_REQUIRED",
                "withdrawn PAY1 DP1 2500+0 USD",
            ),
            (
                "dispute.state.updated",
                "PROCESSING",
                "withdrawn PAY1 DP1 2500+0 USD",
            ),
            (
                "dispute.state.changed",
                "WAITING_THIRD_PARTY",
                "withdrawn PAY1 DP1 2500+0 USD",
            ),
            (
                "dispute.state.updated",
                "WON",
                "reinstated PAY1 DP1 2500 USD",
            ),
            ("dispute.state.updated", "LOST", "closed PAY1 DP1 lost"),
            ("dispute.state.updated", "ACCEPTED", "closed PAY1 DP1 lost"),
            (
                "dispute.created",
                "INQUIRY_EVIDENCE_REQUIRED",
                "ignored inquiry",
            ),
            ("dispute.state.updated", "INQUIRY_CLOSED", "ignored inquiry"),
            (
                "dispute.state.updated",
                "SOMETHING_NEW",
                "ignored unsupported_dispute_state",
            ),
        ] {
            assert_eq!(dispute(kind, state, "id"), expected, "{kind} {state}");
        }
        // Older versions name the dispute `dispute_id`.
        assert_eq!(
            dispute("dispute.created", "EVIDENCE_REQUIRED", "dispute_id"),
            "withdrawn PAY1 DP1 2500+0 USD"
        );
        assert_eq!(
            dispute("dispute.evidence.added", "PROCESSING", "id"),
            "ignored unsupported_event_type"
        );
    }
}
