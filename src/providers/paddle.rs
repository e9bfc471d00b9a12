//! Paddle Billing: `Paddle-Signature: ts=<unix>;h1=<hex>[;h1=<hex>...]`, the hex HMAC-SHA256
//! of `{ts}:{raw body}` keyed with the notification destination's secret key (UTF-8 bytes).
//! During a secret rotation Paddle sends one `h1` per key: any may match. `tolerance_secs`
//! applies to `ts`. Event id = body `event_id`. Money events: `transaction.completed`,
//! `transaction.payment_failed`, and `adjustment.created` / `adjustment.updated` of action
//! `refund` once `approved`; Paddle writes amounts as strings of minor units (`"1180"`).
//! Chargebacks are adjustments too: action `chargeback` withdraws `totals.total` with the fee
//! `payout_totals.chargeback_fee.amount`, action `chargeback_reverse` reinstates, each once
//! `approved`. Each adjustment is its own money movement with its own id (`adj_...`; Paddle
//! never changes one), so a chargeback's adjustment id names its dispute: a transaction charged
//! back, reversed and charged back again is two withdrawals. A `chargeback_reverse` names only
//! its transaction, not the chargeback it reverses: it is a reinstatement of one of the
//! payment's withdrawals (`FundsReinstatedUnnamed`, the planner picks which), once per reversal
//! adjustment id. `chargeback_warning` (a warning, no money moved) is ignored.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::body::{self, IdField, Object, Unusable};
use super::connector::{
    Connector, Format, Naming, Sample, Signed, Unsignable, Verification, Verified,
};
use crate::money::Currency;
use crate::payments::event::{
    DisputeChange, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError, parse_timestamp};

const HEADER: &str = "paddle-signature";

pub struct PaddleScheme {
    keys: Keys,
}

impl PaddleScheme {
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
            .ok_or(SignatureError::MissingHeader("Paddle-Signature"))?;
        let mut timestamp_text = None;
        let mut candidates = Vec::new();
        for item in header.split(';') {
            let Some((key, value)) = item.trim().split_once('=') else {
                continue;
            };
            match key {
                "ts" if timestamp_text.is_none() => timestamp_text = Some(value),
                "ts" => return Err(SignatureError::MalformedHeader("Paddle-Signature")),
                "h1" => candidates.extend(hex::decode(value).ok()),
                _ => {}
            }
        }
        let timestamp_text =
            timestamp_text.ok_or(SignatureError::MalformedHeader("Paddle-Signature"))?;
        let timestamp = parse_timestamp(timestamp_text, "Paddle-Signature")?;
        let parts: [&[u8]; 3] = [timestamp_text.as_bytes(), b":", body];
        self.keys.check(&parts, timestamp, now, &candidates)?;
        Ok(Verified::new(Some(timestamp), Naming::Body))
    }

    pub fn sign_headers(&self, body: &[u8], timestamp: i64) -> Vec<(String, String)> {
        let timestamp = timestamp.to_string();
        let parts: [&[u8]; 3] = [timestamp.as_bytes(), b":", body];
        let signature = hex::encode(self.keys.sign(&parts));
        vec![(
            "Paddle-Signature".to_owned(),
            format!("ts={timestamp};h1={signature}"),
        )]
    }
}

impl Connector for PaddleScheme {
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

/// Paddle Billing's webhook payload.
pub struct PaddleFormat;

impl Format for PaddleFormat {
    fn read(&self, body: &[u8]) -> Reading {
        body::read(body, "event_type", parse)
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        body::event_id_from_body(body, IdField::EventId)
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let custom_data = s.order_id.map(|id| json!({"order_id": id.to_string()}));
        let amount = s.amount_minor.to_string();
        let (kind, data) = match event_type {
            "payment.succeeded" | "payment.failed" => {
                let (kind, status) = if event_type == "payment.succeeded" {
                    ("transaction.completed", "completed")
                } else {
                    ("transaction.payment_failed", "past_due")
                };
                let data = json!({"id": s.payment_id, "status": status, "currency_code": s.currency,
                    "custom_data": custom_data, "origin": "web",
                    "details": {"totals": {"subtotal": amount, "tax": "0", "total": amount, "grand_total": amount,
                                           "currency_code": s.currency}}});
                (kind, data)
            }
            "refund.succeeded" => {
                let data = json!({"id": format!("adj_{}", s.event_id), "action": "refund", "type": "full",
                    "transaction_id": s.payment_id, "status": "approved", "currency_code": s.currency,
                    "reason": "sample", "totals": {"subtotal": amount, "tax": "0", "total": amount,
                                                   "currency_code": s.currency}});
                ("adjustment.updated", data)
            }
            other => (other, json!({})),
        };
        json!({"event_id": s.event_id, "event_type": kind, "occurred_at": Utc::now().to_rfc3339(),
               "notification_id": format!("ntf_{}", s.event_id), "data": data})
        .to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    let data = match kind {
        "transaction.completed"
        | "transaction.payment_failed"
        | "adjustment.created"
        | "adjustment.updated" => body.object("data")?,
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    let order_id = || -> Result<Option<i64>, PayloadError> {
        Ok(data
            .object_if_any("custom_data")?
            .and_then(|custom| custom.order_id("order_id")))
    };
    let event = match kind {
        "transaction.completed" => {
            let totals = data.object("details")?.object("totals")?;
            PaymentEvent::Succeeded {
                payment_id: data.id("id")?,
                order_id: order_id()?,
                amount: totals.amount_in_text("grand_total")?,
                currency: data.currency("currency_code", false)?,
            }
        }
        "transaction.payment_failed" => PaymentEvent::Failed {
            payment_id: data.id("id")?,
            order_id: order_id()?,
        },
        _ if matches!(
            data.string("action").as_deref(),
            Some("chargeback" | "chargeback_reverse" | "chargeback_warning")
        ) =>
        {
            return chargeback(&data);
        }
        _ => {
            if data.string("action").as_deref() != Some("refund") {
                return Ok(Parsed::Ignored("unsupported_adjustment"));
            }
            // Most live refunds are created pending_approval; adjustment.updated says approved.
            if data.string("status").as_deref() != Some("approved") {
                return Ok(Parsed::Ignored("refund_not_approved"));
            }
            PaymentEvent::Refunded {
                payment_id: data.id("transaction_id")?,
                refund_id: Some(data.id("id")?),
                refund: RefundAmount::Delta(data.object("totals")?.amount_in_text("total")?),
                currency: data.currency("currency_code", false)?,
            }
        }
    };
    Ok(Parsed::Event(event))
}

/// A chargeback adjustment (`action` `chargeback`, `chargeback_reverse` or `chargeback_warning`).
fn chargeback(data: &Object<'_>) -> Result<Parsed, Unusable> {
    let action = data.string("action").unwrap_or_default();
    if action == "chargeback_warning" {
        return Ok(Parsed::Ignored("chargeback_warning"));
    }
    if data.string("status").as_deref() != Some("approved") {
        return Ok(Parsed::Ignored("chargeback_not_approved"));
    }
    let amount = data.object("totals")?.amount_in_text("total")?;
    let currency = data.currency("currency_code", false)?;
    let change = if action == "chargeback" {
        let (fee_minor, fee_in_other_currency) = chargeback_fee(data, currency)?;
        DisputeChange::FundsWithdrawn {
            amount,
            fee_minor,
            currency,
            fee_in_other_currency,
        }
    } else {
        DisputeChange::FundsReinstatedUnnamed { amount, currency }
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: data.id("transaction_id")?,
        dispute_id: data.id("id")?,
        change,
    }))
}

/// `payout_totals.chargeback_fee.amount`, in the payout's `currency_code`: booked when that is
/// the adjustment's currency; in another currency it is not booked, and the dispute is noted.
fn chargeback_fee(data: &Object<'_>, currency: Currency) -> Result<(i64, bool), Unusable> {
    let Some(payout) = data.object_if_any("payout_totals")? else {
        return Ok((0, false));
    };
    let Some(fee) = payout.object_if_any("chargeback_fee")? else {
        return Ok((0, false));
    };
    let zero = fee
        .string("amount")
        .is_some_and(|a| !a.is_empty() && a.bytes().all(|b| b == b'0'));
    if zero {
        return Ok((0, false));
    }
    let amount = fee.amount_in_text("amount")?.get();
    if payout.currency("currency_code", false)? != currency {
        return Ok((0, true));
    }
    Ok((amount, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::{AmountMinor, Currency};

    const SECRET: &str = "pdl_ntfset_test_secret_key";
    const T: i64 = 1_700_000_000;

    fn scheme() -> PaddleScheme {
        PaddleScheme::new(&[Secret::new(SECRET)], 5)
    }

    fn read(body: &str) -> Parsed {
        PaddleFormat.read(body.as_bytes()).parsed
    }

    #[test]
    fn any_h1_may_match_during_a_rotation() {
        let body = br#"{"event_id":"evt_1"}"#;
        let signed = scheme().sign_headers(body, T);
        let h1 = signed[0].1.split_once(";h1=").unwrap().1.to_owned();
        let rotated = vec![(
            "Paddle-Signature".to_owned(),
            format!("ts={T};h1={};h1={h1}", "ab".repeat(32)),
        )];
        assert!(scheme().check(&rotated, body, T).is_ok());
    }

    #[test]
    fn the_tolerance_applies_to_ts_and_ts_is_signed() {
        let body = br#"{"event_id":"evt_1"}"#;
        let signed = scheme().sign_headers(body, T);
        assert!(scheme().check(&signed, body, T + 5).is_ok());
        assert!(matches!(
            scheme().check(&signed, body, T + 6),
            Err(SignatureError::OutsideTolerance { skew_secs: -6 })
        ));
        let moved = vec![(
            "Paddle-Signature".to_owned(),
            signed[0]
                .1
                .replace(&format!("ts={T}"), &format!("ts={}", T + 1)),
        )];
        assert_eq!(
            scheme().check(&moved, body, T),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn a_header_without_ts_or_with_two_is_malformed() {
        for value in ["h1=00", "ts=1;ts=2;h1=00", "garbage"] {
            let headers = vec![("Paddle-Signature".to_owned(), value.to_owned())];
            assert_eq!(
                scheme().check(&headers, b"{}", T),
                Err(SignatureError::MalformedHeader("Paddle-Signature"))
            );
        }
    }

    #[test]
    fn a_completed_transaction_is_a_capture_of_its_grand_total() {
        let body = r#"{"event_id":"evt_1","event_type":"transaction.completed","data":{"id":"txn_1","currency_code":"USD","custom_data":{"order_id":"8"},"details":{"totals":{"total":"1000","grand_total":"1180"}}}}"#;
        assert_eq!(
            read(body),
            Parsed::Event(PaymentEvent::Succeeded {
                payment_id: "txn_1".into(),
                order_id: Some(8),
                amount: AmountMinor::parse(1180).unwrap(),
                currency: Currency::parse("USD").unwrap(),
            })
        );
        for bad in [r#""11.80""#, "1180", r#""-1""#, r#""""#] {
            let body = body.replace(r#""1180""#, bad);
            assert_eq!(
                match read(&body) {
                    Parsed::Rejected { reason, .. } => reason,
                    other => panic!("{bad}: {other:?}"),
                },
                "invalid_payload",
                "{bad}"
            );
        }
        let huge = body.replace(r#""1180""#, &format!("\"1{}\"", "0".repeat(30)));
        assert!(matches!(
            read(&huge),
            Parsed::Rejected {
                reason: "amount_out_of_range",
                ..
            }
        ));
    }

    #[test]
    fn only_approved_refund_adjustments_move_money() {
        let body = r#"{"event_id":"evt_2","event_type":"adjustment.created","data":{"id":"adj_1","action":"refund","status":"approved","transaction_id":"txn_1","currency_code":"USD","totals":{"total":"500"}}}"#;
        assert!(matches!(
            read(body),
            Parsed::Event(PaymentEvent::Refunded { ref payment_id, ref refund_id, .. })
                if payment_id == "txn_1" && refund_id.as_deref() == Some("adj_1")
        ));
        assert_eq!(
            read(&body.replace("approved", "pending_approval")),
            Parsed::Ignored("refund_not_approved")
        );
        assert_eq!(
            read(&body.replace(r#""refund""#, r#""credit""#)),
            Parsed::Ignored("unsupported_adjustment")
        );
    }

    #[test]
    fn chargeback_adjustments_withdraw_with_their_fee_and_reverse() {
        let adjustment = |action: &str, status: &str, payout: &str| {
            let body = format!(
                r#"{{"event_id":"evt_1","event_type":"adjustment.created","notification_id":"ntf_1","data":{{"id":"adj_1","action":"{action}","type":"full","transaction_id":"txn_1","status":"{status}","currency_code":"USD","reason":"fraud","totals":{{"subtotal":"5000","tax":"0","total":"5000","fee":"0","earnings":"-5000","currency_code":"USD"}}{payout}}}}}"#
            );
            body::dispute_summary(&read(&body))
        };
        let fee = r#","payout_totals":{"subtotal":"5000","tax":"0","total":"5000","fee":"0","chargeback_fee":{"amount":"1500","original":null},"earnings":"-6500","currency_code":"USD"}"#;
        let fee_in_eur = fee.replace(r#""currency_code":"USD""#, r#""currency_code":"EUR""#);
        let no_fee = r#","payout_totals":{"total":"5000","chargeback_fee":{"amount":"0","original":null},"currency_code":"USD"}"#;
        for (action, status, payout, expected) in [
            (
                "chargeback",
                "approved",
                fee,
                "withdrawn txn_1 adj_1 5000+1500 USD",
            ),
            (
                "chargeback",
                "approved",
                fee_in_eur.as_str(),
                "withdrawn txn_1 adj_1 5000+0? USD",
            ),
            (
                "chargeback",
                "approved",
                no_fee,
                "withdrawn txn_1 adj_1 5000+0 USD",
            ),
            (
                "chargeback",
                "approved",
                "",
                "withdrawn txn_1 adj_1 5000+0 USD",
            ),
            (
                "chargeback_reverse",
                "approved",
                "",
                "reinstated-unnamed txn_1 adj_1 5000 USD",
            ),
            (
                "chargeback",
                "pending_approval",
                fee,
                "ignored chargeback_not_approved",
            ),
            (
                "chargeback_warning",
                "approved",
                fee,
                "ignored chargeback_warning",
            ),
        ] {
            assert_eq!(
                adjustment(action, status, payout),
                expected,
                "{action} {status}"
            );
        }
    }
}
