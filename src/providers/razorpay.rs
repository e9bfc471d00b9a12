//! Razorpay: `X-Razorpay-Signature`, the hex HMAC-SHA256 of the raw body keyed with the
//! webhook secret's UTF-8 bytes; no timestamp is signed. The event id travels in the header
//! `x-razorpay-event-id`, not in the body: a delivery without it cannot be keyed (400
//! `invalid_payload`, nothing stored). Money events: `payment.captured`, `payment.failed`
//! (`payload.payment.entity`) and `refund.processed` (`payload.refund.entity`); disputes
//! `payment.dispute.*` (`payload.dispute.entity`: `id`, `payment_id`, `amount`, `currency`,
//! `amount_deducted`). Razorpay deducts a dispute's money when it is lost, or at once for
//! accounts with "deduct at onset": a dispute event posts a withdrawal of `amount_deducted`
//! whenever it is above 0 (and `lost` always withdraws, `amount` when nothing says more), once
//! per dispute; `won` closes it won. Razorpay gives no fee in the dispute, so none is booked.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::body::{self, Object, Unusable};
use super::connector::{
    Connector, Format, Naming, Sample, Signed, Unsignable, Verification, Verified,
};
use crate::money::AmountMinor;
use crate::payments::event::{
    DisputeChange, DisputeResult, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError};

const SIGNATURE: &str = "x-razorpay-signature";
const EVENT_ID: &str = "x-razorpay-event-id";

pub struct RazorpayScheme {
    keys: Keys,
}

impl RazorpayScheme {
    pub fn new(secrets: &[Secret]) -> Self {
        Self {
            keys: Keys::utf8(secrets.iter().map(Secret::expose), 0),
        }
    }

    /// Verifies a delivery's signature over its raw body, then takes its event id header.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
    ) -> Result<Verified, SignatureError> {
        let signature = headers
            .header(SIGNATURE)
            .ok_or(SignatureError::MissingHeader("X-Razorpay-Signature"))?;
        let candidate = hex::decode(signature.trim())
            .map_err(|_| SignatureError::MalformedHeader("X-Razorpay-Signature"))?;
        self.keys.check_untimed(&[body], &[candidate])?;
        let naming = match headers.header(EVENT_ID) {
            Some(id) => Naming::Header(id.to_owned()),
            None => Naming::MissingHeader(EVENT_ID),
        };
        Ok(Verified::new(None, naming))
    }

    pub fn sign_headers(&self, event_id: &str, body: &[u8]) -> Vec<(String, String)> {
        vec![
            (
                "X-Razorpay-Signature".to_owned(),
                hex::encode(self.keys.sign(&[body])),
            ),
            ("x-razorpay-event-id".to_owned(), event_id.to_owned()),
        ]
    }
}

impl Connector for RazorpayScheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(headers, body).into()
    }

    fn sign(&self, event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        Ok(Signed::headers(self.sign_headers(event_id, body)))
    }

    fn event_id_header(&self) -> Option<&'static str> {
        Some(EVENT_ID)
    }
}

/// Razorpay's webhook payload.
pub struct RazorpayFormat;

impl Format for RazorpayFormat {
    fn read(&self, body: &[u8]) -> Reading {
        body::read(body, "event", parse)
    }

    fn event_id(&self, _body: &[u8]) -> Result<String, PayloadError> {
        Err(PayloadError::new(format!(
            "Razorpay names its events in the {EVENT_ID} header, not in the body"
        )))
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let notes = match s.order_id {
            Some(order_id) => json!({"order_id": order_id.to_string()}),
            None => json!([]),
        };
        let (kind, contains, payload) = match event_type {
            "payment.succeeded" | "payment.failed" => {
                let (kind, status) = if event_type == "payment.succeeded" {
                    ("payment.captured", "captured")
                } else {
                    ("payment.failed", "failed")
                };
                let payment = json!({"id": s.payment_id, "entity": "payment", "amount": s.amount_minor,
                    "currency": s.currency, "status": status, "captured": status == "captured",
                    "method": "card", "notes": notes});
                (
                    kind,
                    json!(["payment"]),
                    json!({"payment": {"entity": payment}}),
                )
            }
            "refund.succeeded" => {
                let refund = json!({"id": format!("rfnd_{}", s.event_id), "entity": "refund",
                    "amount": s.amount_minor, "currency": s.currency, "payment_id": s.payment_id,
                    "status": "processed"});
                (
                    "refund.processed",
                    json!(["refund"]),
                    json!({"refund": {"entity": refund}}),
                )
            }
            other => (other, json!([]), json!({})),
        };
        json!({"entity": "event", "account_id": "acc_test", "event": kind, "contains": contains,
               "payload": payload, "created_at": Utc::now().timestamp()})
        .to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if kind.starts_with("payment.dispute.") {
        return dispute(kind, body);
    }
    if !matches!(
        kind,
        "payment.captured" | "payment.failed" | "refund.processed"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let payload = body.object("payload")?;
    let event = if kind == "refund.processed" {
        // Razorpay refunds by itself a payment authorised late that nobody captured, and tells
        // it like any refund, with the payment's `captured` false: no money of it was ever in
        // the books, and waiting for a capture would answer 409 until Razorpay disables the
        // webhook (docs/providers.md, Razorpay).
        let uncaptured = payload
            .object_if_any("payment")?
            .map(|payment| payment.object("entity"))
            .transpose()?
            .and_then(|payment| payment.member("captured"))
            .is_some_and(|captured| captured.get() == "false");
        if uncaptured {
            return Ok(Parsed::Ignored("auto_refund_of_uncaptured_payment"));
        }
        let refund = payload.object("refund")?.object("entity")?;
        PaymentEvent::Refunded {
            payment_id: refund.id("payment_id")?,
            refund_id: Some(refund.id("id")?),
            refund: RefundAmount::Delta(refund.amount("amount")?),
            currency: refund.currency("currency", false)?,
        }
    } else {
        let payment = payload.object("payment")?.object("entity")?;
        // Razorpay sends empty notes as `[]`, which names no order.
        let order_id = payment
            .object_if_any("notes")?
            .and_then(|notes| notes.order_id("order_id"));
        if kind == "payment.captured" {
            PaymentEvent::Succeeded {
                payment_id: payment.id("id")?,
                order_id,
                amount: payment.amount("amount")?,
                currency: payment.currency("currency", false)?,
            }
        } else {
            PaymentEvent::Failed {
                payment_id: payment.id("id")?,
                order_id,
            }
        }
    };
    Ok(Parsed::Event(event))
}

/// A dispute event: the money is `amount_deducted` (what Razorpay took from the balance).
fn dispute(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    let dispute = match kind {
        "payment.dispute.created"
        | "payment.dispute.under_review"
        | "payment.dispute.action_required"
        | "payment.dispute.lost"
        | "payment.dispute.won" => body
            .object("payload")?
            .object("dispute")?
            .object("entity")?,
        // `closed` ends a fraud or retrieval case, which never moved money.
        "payment.dispute.closed" => return Ok(Parsed::Ignored("no_funds_moved")),
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    let change = if kind == "payment.dispute.won" {
        DisputeChange::Closed(DisputeResult::Won)
    } else {
        let deducted = match dispute.member("amount_deducted") {
            Some(_) => dispute.total("amount_deducted")?,
            None => 0,
        };
        let amount = match AmountMinor::parse(deducted) {
            Some(amount) if deducted > 0 => amount,
            // A lost dispute's money is taken: the disputed amount, when no deduction is given.
            _ if kind == "payment.dispute.lost" => dispute.amount("amount")?,
            _ => return Ok(Parsed::Ignored("no_funds_moved")),
        };
        DisputeChange::FundsWithdrawn {
            amount,
            fee_minor: 0,
            currency: dispute.currency("currency", false)?,
            fee_in_other_currency: false,
        }
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: dispute.id("payment_id")?,
        dispute_id: dispute.id("id")?,
        change,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::{AmountMinor, Currency};

    fn read(body: &str) -> Parsed {
        RazorpayFormat.read(body.as_bytes()).parsed
    }

    #[test]
    fn the_event_id_comes_from_its_header_and_its_absence_is_told_apart() {
        let scheme = RazorpayScheme::new(&[Secret::new("razorpay-webhook-secret")]);
        let body = br#"{"event":"payment.captured"}"#;
        let mut headers = scheme.sign_headers("evt_R1", body);
        assert_eq!(
            scheme.check(&headers, body).map(|v| v.naming),
            Ok(Naming::Header("evt_R1".into()))
        );
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case(EVENT_ID));
        assert_eq!(
            scheme.check(&headers, body).map(|v| v.naming),
            Ok(Naming::MissingHeader(EVENT_ID))
        );
        assert_eq!(
            scheme.check(&headers, br#"{"event":"payment.failed"}"#),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn a_captured_payment_is_a_capture_of_notes_order_id() {
        let body = r#"{"entity":"event","event":"payment.captured","payload":{"payment":{"entity":{"id":"pay_1","amount":50000,"currency":"INR","status":"captured","notes":{"order_id":"12"}}}}}"#;
        assert_eq!(
            read(body),
            Parsed::Event(PaymentEvent::Succeeded {
                payment_id: "pay_1".into(),
                order_id: Some(12),
                amount: AmountMinor::parse(50000).unwrap(),
                currency: Currency::parse("INR").unwrap(),
            })
        );
        let empty_notes = body.replace(r#"{"order_id":"12"}"#, "[]");
        assert!(matches!(
            read(&empty_notes),
            Parsed::Event(PaymentEvent::Succeeded { order_id: None, .. })
        ));
    }

    #[test]
    fn a_processed_refund_names_its_payment_and_refund_id() {
        let body = r#"{"event":"refund.processed","payload":{"refund":{"entity":{"id":"rfnd_1","payment_id":"pay_1","amount":100,"currency":"INR"}}}}"#;
        assert!(matches!(
            read(body),
            Parsed::Event(PaymentEvent::Refunded { ref refund_id, .. }) if refund_id.as_deref() == Some("rfnd_1")
        ));
        assert_eq!(
            read(r#"{"event":"payment.authorized","payload":{}}"#),
            Parsed::Ignored("unsupported_event_type")
        );
    }

    #[test]
    fn an_automatic_refund_of_a_payment_never_captured_is_acknowledged_and_moves_nothing() {
        // Razorpay's refund webhooks fire for its automatic refunds of payments authorised but
        // never captured, the payment entity saying `"captured": false`.
        let refund = |captured: &str| {
            read(&format!(
                r#"{{"event":"refund.processed","payload":{{"refund":{{"entity":{{"id":"rfnd_1","payment_id":"pay_1","amount":50000,"currency":"INR"}}}},"payment":{{"entity":{{"id":"pay_1","amount":50000,"currency":"INR","status":"refunded","captured":{captured}}}}}}}}}"#
            ))
        };
        assert_eq!(
            refund("false"),
            Parsed::Ignored("auto_refund_of_uncaptured_payment")
        );
        assert!(matches!(
            refund("true"),
            Parsed::Event(PaymentEvent::Refunded { .. })
        ));
    }

    #[test]
    fn a_dispute_withdraws_what_razorpay_deducted_and_a_won_one_closes() {
        let dispute = |kind: &str, deducted: &str| {
            let body = format!(
                r#"{{"entity":"event","account_id":"acc_1","event":"{kind}","contains":["payment","dispute"],"payload":{{"payment":{{"entity":{{"id":"pay_1","amount":10000,"currency":"INR"}}}},"dispute":{{"entity":{{"id":"disp_1","entity":"dispute","payment_id":"pay_1","amount":10000,"currency":"INR"{deducted},"reason_code":"chargeback","status":"open","phase":"chargeback"}}}}}},"created_at":1}}"#
            );
            body::dispute_summary(&read(&body))
        };
        let deducted = r#","amount_deducted":10000"#;
        let nothing = r#","amount_deducted":0"#;
        for (kind, amount, expected) in [
            (
                "payment.dispute.created",
                deducted,
                "withdrawn pay_1 disp_1 10000+0 INR",
            ),
            ("payment.dispute.created", nothing, "ignored no_funds_moved"),
            ("payment.dispute.under_review", "", "ignored no_funds_moved"),
            (
                "payment.dispute.lost",
                deducted,
                "withdrawn pay_1 disp_1 10000+0 INR",
            ),
            (
                "payment.dispute.lost",
                nothing,
                "withdrawn pay_1 disp_1 10000+0 INR",
            ),
            ("payment.dispute.won", nothing, "closed pay_1 disp_1 won"),
            ("payment.dispute.closed", nothing, "ignored no_funds_moved"),
        ] {
            assert_eq!(dispute(kind, amount), expected, "{kind} {amount}");
        }
        assert_eq!(
            dispute("payment.dispute.lost", r#","amount_deducted":-5"#),
            "rejected invalid_payload"
        );
    }
}
