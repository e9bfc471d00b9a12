//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, signed content `{t}.{body}`,
//! key = the UTF-8 bytes of the whole secret string (no decoding); event id = body `id`. Its
//! payload (`payload = "stripe"`): `payment_intent.succeeded` (`data.object`: `id`,
//! `amount_received`, lowercase `currency`, `metadata.order_id`), `payment_intent.payment_failed`,
//! `charge.refunded` (`payment_intent`, cumulative `amount_refunded`: the difference is posted),
//! `charge.dispute.funds_withdrawn` / `.funds_reinstated` / `.closed` (`data.object` is the
//! Dispute: `id`, `payment_intent`, `amount`, `currency`, `status`, `balance_transactions[].fee`),
//! and `payout.paid` / `payout.failed` (`data.object` is the Payout: `id`, signed `amount`,
//! lowercase `currency`).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::body::{self, IdField, Object, Unusable};
use super::connector::{
    Connector, Format, Naming, Sample, Signed, Unsignable, Verification, Verified,
};
use crate::money::{AmountMinor, Currency};
use crate::payments::event::{
    DisputeChange, DisputeResult, Parsed, PayloadError, PaymentEvent, PayoutChange, PayoutEvent,
    Reading, RefundAmount,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError, parse_timestamp};

const HEADER: &str = "stripe-signature";

pub struct StripeScheme {
    keys: Keys,
}

impl StripeScheme {
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Self {
            keys: Keys::utf8(secrets.iter().map(Secret::expose), tolerance_secs),
        }
    }

    /// Verifies a delivery's headers over its raw body at unix time `now`.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let header = headers
            .header(HEADER)
            .ok_or(SignatureError::MissingHeader("Stripe-Signature"))?;
        let mut timestamp_text = None;
        let mut candidates = Vec::new();
        for item in header.split(',') {
            let Some((key, value)) = item.trim().split_once('=') else {
                continue;
            };
            match key {
                "t" if timestamp_text.is_none() => timestamp_text = Some(value),
                "t" => return Err(SignatureError::MalformedHeader("Stripe-Signature")),
                // Stripe lists one v1 per active secret; v0 and unknown schemes are ignored.
                "v1" => candidates.extend(hex::decode(value).ok()),
                _ => {}
            }
        }
        let timestamp_text =
            timestamp_text.ok_or(SignatureError::MalformedHeader("Stripe-Signature"))?;
        let timestamp = parse_timestamp(timestamp_text, "Stripe-Signature")?;
        let parts: [&[u8]; 3] = [timestamp_text.as_bytes(), b".", body];
        self.keys.check(&parts, timestamp, now, &candidates)?;
        Ok(Verified::new(Some(timestamp), Naming::Body))
    }

    /// The header that signs `body` with the first secret at `timestamp`.
    pub fn sign_headers(&self, body: &[u8], timestamp: i64) -> Vec<(String, String)> {
        let timestamp = timestamp.to_string();
        let parts: [&[u8]; 3] = [timestamp.as_bytes(), b".", body];
        let signature = hex::encode(self.keys.sign(&parts));
        vec![(
            "Stripe-Signature".to_owned(),
            format!("t={timestamp},v1={signature}"),
        )]
    }
}

impl Connector for StripeScheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(headers, body, now.timestamp()).into()
    }

    fn sign(&self, _event_id: &str, body: &[u8], timestamp: i64) -> Result<Signed, Unsignable> {
        Ok(Signed::headers(self.sign_headers(body, timestamp)))
    }
}

/// Stripe's payload format.
pub struct StripeFormat;

/// A body in Stripe's format.
pub fn read(body: &[u8]) -> Reading {
    body::read(body, "type", parse)
}

impl Format for StripeFormat {
    fn read(&self, body: &[u8]) -> Reading {
        read(body)
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        body::event_id_from_body(body, IdField::Id)
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let stripe_type = match event_type {
            "payment.succeeded" => "payment_intent.succeeded",
            "payment.failed" => "payment_intent.payment_failed",
            "refund.succeeded" => "charge.refunded",
            other => other,
        };
        let metadata = match s.order_id {
            Some(order_id) => json!({"order_id": order_id.to_string()}),
            None => json!({}),
        };
        let object = if stripe_type == "charge.refunded" {
            json!({"id": format!("ch_{}", s.payment_id), "object": "charge", "payment_intent": s.payment_id,
                   "amount_refunded": s.amount_minor, "currency": s.currency.to_lowercase(), "metadata": metadata})
        } else {
            json!({"id": s.payment_id, "object": "payment_intent", "amount_received": s.amount_minor,
                   "currency": s.currency.to_lowercase(), "metadata": metadata})
        };
        json!({"id": s.event_id, "object": "event", "type": stripe_type, "data": {"object": object}})
            .to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if kind.starts_with("charge.dispute.") {
        return parse_dispute(kind, body);
    }
    if kind.starts_with("payout.") {
        return parse_payout(kind, body);
    }
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

/// `charge.dispute.funds_withdrawn`, `.funds_reinstated` and `.closed`: `data.object` is the
/// Dispute (`id`, `payment_intent`, `amount` and lowercase `currency` of the disputed payment,
/// `status`, and `balance_transactions`: the withdrawal, then the reinstatement, each with the
/// `fee` Stripe charged for it in the balance's own `currency`).
fn parse_dispute(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if !matches!(
        kind,
        "charge.dispute.funds_withdrawn"
            | "charge.dispute.funds_reinstated"
            | "charge.dispute.closed"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let object = body.object("data")?.object("object")?;
    // A dispute of a legacy Charges-API charge: no payment the gateway could have captured.
    if object.member("payment_intent").is_none() {
        return Ok(Parsed::Ignored("no_payment_intent"));
    }
    let change = match kind {
        "charge.dispute.funds_withdrawn" => {
            let currency = object.currency("currency", true)?;
            let (fee_minor, fee_in_other_currency) = dispute_fee(&object, currency)?;
            DisputeChange::FundsWithdrawn {
                amount: object.amount("amount")?,
                fee_minor,
                currency,
                fee_in_other_currency,
            }
        }
        "charge.dispute.funds_reinstated" => DisputeChange::FundsReinstated {
            amount: object.amount("amount")?,
            currency: object.currency("currency", true)?,
        },
        _ => match object.string("status").as_deref() {
            Some("won") => DisputeChange::Closed(DisputeResult::Won),
            Some("lost") => DisputeChange::Closed(DisputeResult::Lost),
            // An inquiry closed without becoming a chargeback: no money moved.
            Some("warning_closed") => return Ok(Parsed::Ignored("inquiry_closed")),
            Some(_) => return Ok(Parsed::Ignored("unsupported_dispute_status")),
            None => return Err(body::invalid("data.object.status must be a string").into()),
        },
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: object.id("payment_intent")?,
        dispute_id: object.id("id")?,
        change,
    }))
}

/// `payout.paid` and `payout.failed`: `data.object` is the Payout (`id`, `amount` in minor
/// units, lowercase `currency`). `payout.paid` says the money reached the bank; `payout.failed`
/// that it did not, or came back after `payout.paid` (the Payout object's `status`: "Some payouts
/// that fail might initially show as paid, then change to failed"), and the money is in the
/// Stripe balance again. The other `payout.*` events
/// (`created`, `updated`, `canceled`, `reconciliation_completed`) move nothing in the books: a
/// payout is booked when it is paid.
fn parse_payout(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    let change = match kind {
        "payout.paid" => PayoutChange::Paid,
        "payout.failed" => PayoutChange::Failed,
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    let object = body.object("data")?.object("object")?;
    let amount_minor = object.signed("amount")?;
    if amount_minor == 0 {
        return Ok(Parsed::Ignored("zero_payout"));
    }
    Ok(Parsed::Payout(PayoutEvent {
        payout_id: object.id("id")?,
        change,
        amount_minor,
        currency: object.currency("currency", true)?,
    }))
}

/// The fee of a Stripe dispute's withdrawal: the sum of the positive `fee`s of its balance
/// transactions (a reinstatement's is 0 or negative: a fee given back, which the contract does
/// not book), each in its balance transaction's `currency`. A fee in another currency than the
/// dispute's cannot be booked against the payment (the ledger keeps one currency a payment):
/// it is left out and reported.
fn dispute_fee(object: &Object<'_>, currency: Currency) -> Result<(i64, bool), Unusable> {
    let mut fee_minor = 0i64;
    let mut other_currency = false;
    for transaction in object.objects("balance_transactions")? {
        let fee = transaction.signed("fee")?;
        if fee <= 0 {
            continue;
        }
        if transaction.currency("currency", true)? != currency {
            other_currency = true;
            continue;
        }
        fee_minor = fee_minor
            .checked_add(fee)
            .filter(|sum| *sum <= AmountMinor::MAX)
            .ok_or_else(|| body::out_of_range(&transaction.path_of("fee")))?;
    }
    Ok((fee_minor, other_currency))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed independently: printf '1700000000.{"id":"evt_1"}' | openssl dgst -sha256 -hmac whsec_test_secret
    const SECRET: &str = "whsec_test_secret";
    const BODY: &str = r#"{"id":"evt_1"}"#;
    const SIGNATURE: &str = "248a374f50f943a28b0f6ab50faf9a7e7e29b710fa26df9fb1618b9bf8ea9c9a";
    const T: i64 = 1_700_000_000;

    fn scheme(secrets: &[&str]) -> StripeScheme {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        StripeScheme::new(&secrets, 300)
    }

    fn header(value: &str) -> Vec<(String, String)> {
        vec![("Stripe-Signature".into(), value.into())]
    }

    #[test]
    fn the_whole_secret_string_is_the_key_without_decoding() {
        let h = header(&format!("t={T},v1={SIGNATURE}"));
        assert!(scheme(&[SECRET]).check(&h, BODY.as_bytes(), T).is_ok());
    }

    #[test]
    fn signing_matches_an_independent_implementation() {
        let signed = scheme(&[SECRET]).sign_headers(BODY.as_bytes(), T);
        assert_eq!(signed[0].1, format!("t={T},v1={SIGNATURE}"));
    }

    #[test]
    fn any_v1_may_match_and_v0_is_ignored() {
        let h = header(&format!("t={T},v0=00ff,v1=deadbeef,v1={SIGNATURE}"));
        assert!(
            scheme(&["other", SECRET])
                .check(&h, BODY.as_bytes(), T)
                .is_ok()
        );
    }

    #[test]
    fn a_tampered_body_or_a_wrong_secret_fails() {
        let h = header(&format!("t={T},v1={SIGNATURE}"));
        assert_eq!(
            scheme(&[SECRET]).check(&h, br#"{"id":"evt_2"}"#, T),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            scheme(&["whsec_other"]).check(&h, BODY.as_bytes(), T),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn a_header_without_timestamp_or_with_two_is_malformed() {
        let s = scheme(&[SECRET]);
        for value in [
            format!("v1={SIGNATURE}"),
            format!("t={T},t={T},v1={SIGNATURE}"),
            "garbage".into(),
        ] {
            assert_eq!(
                s.check(&header(&value), BODY.as_bytes(), T),
                Err(SignatureError::MalformedHeader("Stripe-Signature"))
            );
        }
    }

    #[test]
    fn a_stale_timestamp_fails() {
        let h = header(&format!("t={T},v1={SIGNATURE}"));
        assert!(matches!(
            scheme(&[SECRET]).check(&h, BODY.as_bytes(), T + 3600),
            Err(SignatureError::OutsideTolerance { skew_secs: -3600 })
        ));
    }

    fn payout(kind: &str, amount: &str) -> Parsed {
        let body = format!(
            r#"{{"id":"evt_po","object":"event","type":"{kind}","data":{{"object":{{"id":"po_1","object":"payout","amount":{amount},"currency":"eur","status":"paid"}}}}}}"#
        );
        read(body.as_bytes()).parsed
    }

    #[test]
    fn paid_and_failed_payouts_carry_their_signed_amount() {
        let eur = Currency::parse("EUR").unwrap();
        for (kind, change, amount) in [
            ("payout.paid", PayoutChange::Paid, 9000),
            ("payout.failed", PayoutChange::Failed, 9000),
            ("payout.paid", PayoutChange::Paid, -700),
        ] {
            assert_eq!(
                payout(kind, &amount.to_string()),
                Parsed::Payout(PayoutEvent {
                    payout_id: "po_1".into(),
                    change,
                    amount_minor: amount,
                    currency: eur,
                })
            );
        }
    }

    #[test]
    fn other_payout_events_and_zero_move_nothing_and_a_bad_amount_is_rejected() {
        for kind in ["payout.created", "payout.updated", "payout.canceled"] {
            assert_eq!(
                payout(kind, "9000"),
                Parsed::Ignored("unsupported_event_type")
            );
        }
        assert_eq!(payout("payout.paid", "0"), Parsed::Ignored("zero_payout"));
        for amount in ["90.5", "\"9000\"", "10000000000000000"] {
            assert!(
                matches!(payout("payout.paid", amount), Parsed::Rejected { .. }),
                "{amount}"
            );
        }
    }
}
