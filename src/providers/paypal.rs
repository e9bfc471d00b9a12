//! PayPal: SHA256withRSA over `{transmission id}|{transmission time}|{webhook_id}|{CRC-32 of
//! the raw body}`, with the key of the certificate `PAYPAL-CERT-URL` names (checked by
//! `signature::paypal`: https, allowed hosts, chain, dates, bounded cache). The gateway holds
//! no secret, so it cannot sign PayPal deliveries: `send-test-event` and finance replay cannot
//! send them, and a stored PayPal event is replayed by an admin action instead
//! (`POST /admin/events/{provider}/{event_id}/replay`). Event id = body `id`.
//!
//! Money events: `PAYMENT.CAPTURE.COMPLETED` and `PAYMENT.CAPTURE.DENIED` (the capture is the
//! `resource`), `PAYMENT.CAPTURE.REFUNDED` (the `resource` is the refund; its capture is named
//! only by the refund's `up` link). Amounts are decimal strings (`"10.00"`), converted to minor
//! units with the currency's ISO 4217 exponent exactly.
//!
//! With `verify = "fetch"` no signature is checked: the body only names an event, and the
//! gateway asks PayPal's API for it (`GET {api_base_url}/v1/notifications/webhooks-events/{id}`,
//! with an OAuth 2.0 token for the REST app's `client_id` and secret, `api_key`). What PayPal
//! shows is the event, stored as it was shown; a body that names an event PayPal does not know
//! is a stored `rejected unknown_resource`, so a forged body can only name real events of this
//! app, with their real amounts. Replays and `send-test-event --url` work as for Mollie.
//!
//! Disputes: PayPal takes a chargeback's money back as a capture reversal,
//! `PAYMENT.CAPTURE.REVERSED` (the `resource` is the reversal, whose `id` is the dispute id here
//! and whose `up` link names the capture): a withdrawal, without a fee (PayPal gives none in
//! it). `CUSTOMER.DISPUTE.*` events carry no money movement of their own and are ignored.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::body::{self, IdField, Object, Unusable, invalid};
use super::connector::{
    Connector, FetchedEvent, Format, Naming, Rejection, Sample, Signed, Unsignable, Verification,
    Verified,
};
use super::fetch::{self, Fetched, ProviderApi, UNKNOWN_RESOURCE, UNUSABLE_ANSWER, path_safe};
use crate::config::providers::{PaypalProviderSettings, ProviderSettings};
use crate::money::{self, AmountMinor, Currency};
use crate::payments::event::{
    DisputeChange, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount,
};
use crate::signature::paypal::{PaypalError, PaypalSettings, PaypalVerifier};
use crate::signature::scheme::HeaderSource;

pub struct PaypalScheme {
    check: Check,
}

/// How a PayPal delivery is verified. Either holds `None` only if the settings the
/// configuration validated could not be built after all: every delivery is then a 503
/// (logged), never a 401 a provider would not retry.
enum Check {
    /// PayPal's signature, with the certificate it names (`verify = "signature"`).
    Signature(Option<PaypalVerifier>),
    /// The event as PayPal's API shows it (`verify = "fetch"`).
    Fetch(Option<ProviderApi>),
}

impl PaypalScheme {
    pub fn new(settings: &ProviderSettings, fetches: Option<&IntCounterVec>) -> Self {
        if settings.asks_api() {
            return Self {
                check: Check::Fetch(fetch::api_of(settings, &[], fetches)),
            };
        }
        let verifier = settings.paypal.as_ref().and_then(|paypal| {
            PaypalVerifier::new(verifier_settings(paypal, settings))
                .inspect_err(|error| tracing::error!(%error, provider = %settings.name, "PayPal verifier not built"))
                .ok()
        });
        Self {
            check: Check::Signature(verifier),
        }
    }
}

/// The `event_type` of what the gateway stores for an event PayPal's API did not show: the
/// gateway's own, never PayPal's (its types are upper-case).
const FETCH_REJECTED: &str = "gateway.fetch_rejected";

/// An event as PayPal's API shows it: what the gateway reads and stores of it.
#[derive(Deserialize, Serialize)]
struct ShownEvent<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    event_type: Cow<'a, str>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    resource_type: Option<Cow<'a, str>>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    create_time: Option<Cow<'a, str>>,
    #[serde(borrow)]
    resource: &'a RawValue,
}

/// The event of the API's answer `answer` about event `id`: the event as shown, or a stored
/// rejection (unknown, or an answer that is not that event).
fn event_of(id: &str, answer: &Fetched) -> Result<FetchedEvent, String> {
    let bytes = match answer {
        Fetched::NotFound => {
            return rejected_event(
                id,
                UNKNOWN_RESOURCE,
                &format!("PayPal's API knows no event {id} of this app"),
            );
        }
        Fetched::Unusable(why) => return rejected_event(id, UNUSABLE_ANSWER, why),
        Fetched::Found(bytes) => bytes,
    };
    let shown = match serde_json::from_slice::<ShownEvent<'_>>(bytes) {
        Ok(shown) if shown.id == id => shown,
        Ok(shown) => {
            let why = format!("PayPal showed event {:?} when asked for {id}", shown.id);
            return rejected_event(id, UNUSABLE_ANSWER, &why);
        }
        Err(e) => {
            let why = format!("PayPal's answer is not an event: {e}");
            return rejected_event(id, UNUSABLE_ANSWER, &why);
        }
    };
    Ok(FetchedEvent {
        event_id: id.to_owned(),
        body: serde_json::to_vec(&shown).map_err(|e| e.to_string())?,
    })
}

/// What is stored for event `id` that PayPal's API did not show as an event: keyed apart
/// (`{id}:{reason}`), so the event itself stays unclaimed if PayPal shows it later.
fn rejected_event(id: &str, reason: &str, detail: &str) -> Result<FetchedEvent, String> {
    let body = json!({"id": id, "event_type": FETCH_REJECTED, "reason": reason, "detail": detail});
    Ok(FetchedEvent {
        event_id: format!("{id}:{reason}"),
        body: serde_json::to_vec(&body).map_err(|e| e.to_string())?,
    })
}

/// The event id a delivery's body names, fit for a path of PayPal's API.
fn named_event(body: &[u8]) -> Result<String, String> {
    let id = body::event_id_from_body(body, IdField::Id).map_err(|e| e.0)?;
    if !path_safe(&id) {
        return Err(format!(
            "{:?} is not a PayPal event id (letters, digits, - or _)",
            id.chars().take(70).collect::<String>()
        ));
    }
    Ok(id)
}

/// The verifier's settings from the provider's: PayPal's own, with the transmission time
/// allowed to be as old as the retry window and `tolerance_secs` ahead.
pub fn verifier_settings(
    paypal: &PaypalProviderSettings,
    provider: &ProviderSettings,
) -> PaypalSettings {
    PaypalSettings {
        webhook_id: paypal.webhook_id.clone(),
        cert_url_hosts: paypal.cert_url_hosts.clone(),
        extra_roots_pem: paypal
            .extra_roots_pem
            .as_ref()
            .map(|pem| pem.as_bytes().to_vec()),
        max_age: provider.retry_window,
        tolerance: provider.tolerance,
    }
}

impl Connector for PaypalScheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        let verifier = match &self.check {
            Check::Signature(verifier) => verifier,
            Check::Fetch(api) => return ask(api.as_ref(), body),
        };
        let Some(verifier) = verifier else {
            return Verification::Done(Err(Rejection::Unavailable(
                "the PayPal verifier could not be built from its settings".into(),
            )));
        };
        let check = verifier.verify(headers, body, now);
        Verification::Pending(Box::pin(async move {
            match check.await {
                // A retry may carry the first attempt's transmission time, so its age is not
                // clock skew: it is kept out of the skew metric (and its alert).
                Ok(verified) => Ok(Verified {
                    timestamp: None,
                    ..verified
                }),
                Err(PaypalError::Refused(error)) => Err(Rejection::Refused(error)),
                Err(PaypalError::CertificateUnavailable(why)) => Err(Rejection::Unavailable(why)),
            }
        }))
    }

    fn sign(&self, _event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        if let Check::Fetch(_) = self.check {
            // Nothing is signed: the webhook only names the event, and the API is asked again.
            let id = named_event(body).map_err(Unsignable)?;
            return Ok(Signed {
                body: Some(json!({ "id": id }).to_string().into_bytes()),
                ..Signed::headers(Vec::new())
            });
        }
        Err(Unsignable(
            "PayPal signs with its own private key (SHA256withRSA, certificate at PAYPAL-CERT-URL); \
             the gateway holds no key to sign with. Replay a stored PayPal event with \
             POST /admin/events/{provider}/{event_id}/replay"
                .into(),
        ))
    }
}

/// The event a delivery names, as PayPal's API shows it (`verify = "fetch"`).
fn ask<'a>(api: Option<&'a ProviderApi>, body: &'a [u8]) -> Verification<'a> {
    let id = match named_event(body) {
        Ok(id) => id,
        Err(detail) => {
            return Verification::Done(Ok(Verified::new(None, Naming::Unusable(detail))));
        }
    };
    let Some(api) = api else {
        return Verification::Done(Err(fetch::no_api()));
    };
    Verification::Pending(Box::pin(async move {
        let answer = api
            .get(&format!("/v1/notifications/webhooks-events/{id}"))
            .await?;
        let event = event_of(&id, &answer).map_err(Rejection::Unavailable)?;
        Ok(Verified::new(None, Naming::Fetched(vec![event])))
    }))
}

/// PayPal's webhook events (v2 payments).
pub struct PaypalFormat;

impl Format for PaypalFormat {
    fn read(&self, body: &[u8]) -> Reading {
        body::read(body, "event_type", parse)
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        body::event_id_from_body(body, IdField::Id)
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let value = Currency::parse(&s.currency)
            .and_then(|c| money::major_units(i128::from(s.amount_minor), c.code()))
            .unwrap_or_else(|| s.amount_minor.to_string());
        let amount = json!({"currency_code": s.currency, "value": value});
        let (kind, resource) = match event_type {
            "payment.succeeded" | "payment.failed" => {
                let (kind, status) = if event_type == "payment.succeeded" {
                    ("PAYMENT.CAPTURE.COMPLETED", "COMPLETED")
                } else {
                    ("PAYMENT.CAPTURE.DENIED", "DECLINED")
                };
                let mut capture = json!({"id": s.payment_id, "status": status, "amount": amount,
                    "final_capture": true});
                if let Some(order_id) = s.order_id {
                    capture["custom_id"] = json!(order_id.to_string());
                }
                (kind, capture)
            }
            "refund.succeeded" => (
                "PAYMENT.CAPTURE.REFUNDED",
                json!({"id": format!("RF{}", s.event_id), "status": "COMPLETED", "amount": amount,
                       "links": [
                           {"href": format!("https://api.paypal.com/v2/payments/refunds/RF{}", s.event_id), "rel": "self", "method": "GET"},
                           {"href": format!("https://api.paypal.com/v2/payments/captures/{}", s.payment_id), "rel": "up", "method": "GET"}]}),
            ),
            other => (other, json!({})),
        };
        json!({"id": s.event_id, "event_version": "1.0", "create_time": Utc::now().to_rfc3339(),
               "resource_type": "capture", "resource_version": "2.0", "event_type": kind,
               "summary": "sample", "resource": resource})
        .to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if kind == FETCH_REJECTED {
        let reason = match body.string("reason").as_deref() {
            Some(UNUSABLE_ANSWER) => UNUSABLE_ANSWER,
            _ => UNKNOWN_RESOURCE,
        };
        return Ok(Parsed::Rejected {
            reason,
            detail: body.string("detail").unwrap_or_default(),
        });
    }
    if kind == "PAYMENT.CAPTURE.REVERSED" {
        let resource = body.object("resource")?;
        let (amount, currency) = amount_of(&resource)?;
        return Ok(Parsed::Event(PaymentEvent::Dispute {
            payment_id: refunded_capture(&resource)?,
            dispute_id: resource.id("id")?,
            change: DisputeChange::FundsWithdrawn {
                amount,
                fee_minor: 0,
                currency,
                fee_in_other_currency: false,
            },
        }));
    }
    if kind.starts_with("CUSTOMER.DISPUTE.") {
        return Ok(Parsed::Ignored("no_funds_moved"));
    }
    if !matches!(
        kind,
        "PAYMENT.CAPTURE.COMPLETED" | "PAYMENT.CAPTURE.DENIED" | "PAYMENT.CAPTURE.REFUNDED"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let resource = body.object("resource")?;
    let event = match kind {
        "PAYMENT.CAPTURE.COMPLETED" => {
            let (amount, currency) = amount_of(&resource)?;
            PaymentEvent::Succeeded {
                payment_id: resource.id("id")?,
                order_id: resource.order_id("custom_id"),
                amount,
                currency,
            }
        }
        "PAYMENT.CAPTURE.DENIED" => PaymentEvent::Failed {
            payment_id: resource.id("id")?,
            order_id: resource.order_id("custom_id"),
        },
        _ => {
            let (amount, currency) = amount_of(&resource)?;
            PaymentEvent::Refunded {
                payment_id: refunded_capture(&resource)?,
                refund_id: Some(resource.id("id")?),
                refund: RefundAmount::Delta(amount),
                currency,
            }
        }
    };
    Ok(Parsed::Event(event))
}

/// A PayPal `Money`: `currency_code` and a decimal `value`, as ISO 4217 minor units.
fn amount_of(resource: &Object<'_>) -> Result<(AmountMinor, Currency), Unusable> {
    let amount = resource.object("amount")?;
    let currency = amount.currency("currency_code", false)?;
    Ok((amount.decimal_amount("value", currency)?, currency))
}

/// The capture a refund refunds: the last path segment of its `up` link
/// (`.../v2/payments/captures/{capture id}`), the only place PayPal's refund resource names it.
fn refunded_capture(refund: &Object<'_>) -> Result<String, PayloadError> {
    let path = refund.path_of("links");
    let up = refund
        .objects("links")?
        .into_iter()
        .find(|link| link.string("rel").as_deref() == Some("up"))
        .and_then(|link| link.string("href"))
        .ok_or_else(|| invalid(format!("{path} has no \"up\" link to the refunded capture")))?;
    let capture = up
        .split_once("/captures/")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default())
        .filter(|id| crate::text::storable(id, crate::payments::event::MAX_EVENT_ID_LEN))
        .ok_or_else(|| {
            invalid(format!(
                "{path}'s \"up\" link does not name a capture (.../captures/{{id}})"
            ))
        })?;
    Ok(capture.to_owned())
}

/// Whether a vector of the shared fixtures verifies (its certificate's dates aside).
#[cfg(test)]
pub(crate) fn verifies_vector(vector: &serde_json::Value, body: &[u8]) -> bool {
    let headers: Vec<(String, String)> = vector["headers"]
        .as_object()
        .map(|h| {
            h.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let pem = vector["cert_pem"].as_str().unwrap_or_default();
    let webhook_id = vector["webhook_id"].as_str().unwrap_or_default();
    crate::signature::paypal::check_vector(pem.as_bytes(), webhook_id, &headers, body).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str) -> Parsed {
        PaypalFormat.read(body.as_bytes()).parsed
    }

    fn capture(value: &str, currency: &str) -> String {
        format!(
            r#"{{"id":"WH-1","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{{"id":"CAP1","status":"COMPLETED","custom_id":"3","amount":{{"currency_code":"{currency}","value":"{value}"}}}}}}"#
        )
    }

    fn reason(parsed: Parsed) -> &'static str {
        match parsed {
            Parsed::Rejected { reason, .. } | Parsed::Ignored(reason) => reason,
            Parsed::Event(event) => panic!("{event:?}"),
            Parsed::Snapshot(s) => panic!("{s:?}"),
            Parsed::Payout(p) => panic!("{p:?}"),
        }
    }

    #[test]
    fn decimal_amounts_become_minor_units_with_the_iso_exponent_exactly() {
        for (value, currency, minor) in [
            ("10.00", "USD", 1000),
            ("10", "USD", 1000),
            ("0.5", "USD", 50),
            ("19.99", "EUR", 1999),
            ("100", "JPY", 100),
            ("1.234", "BHD", 1234),
            ("00012.30", "USD", 1230),
        ] {
            assert!(
                matches!(
                    read(&capture(value, currency)),
                    Parsed::Event(PaymentEvent::Succeeded { amount, order_id: Some(3), .. }) if amount.get() == minor
                ),
                "{value} {currency}"
            );
        }
    }

    #[test]
    fn more_decimals_than_the_currency_has_is_invalid_amount() {
        for (value, currency) in [("10.001", "USD"), ("100.5", "JPY"), ("1.2345", "BHD")] {
            assert_eq!(
                reason(read(&capture(value, currency))),
                "invalid_amount",
                "{value}"
            );
        }
    }

    #[test]
    fn zeros_past_the_currencys_exponent_change_no_value() {
        for (value, currency, minor) in [
            ("1000.00", "JPY", 1000),
            ("100.0", "JPY", 100),
            ("10.000", "USD", 1000),
            ("1.2340", "BHD", 1234),
        ] {
            assert!(
                matches!(
                    read(&capture(value, currency)),
                    Parsed::Event(PaymentEvent::Succeeded { amount, .. }) if amount.get() == minor
                ),
                "{value} {currency}"
            );
        }
    }

    #[test]
    fn malformed_zero_and_huge_decimals_are_not_amounts() {
        for value in [
            "", ".5", "5.", "-1.00", "1e3", "1,00", " 1.00", "0.00", "abc",
        ] {
            assert_eq!(
                reason(read(&capture(value, "USD"))),
                "invalid_payload",
                "{value:?}"
            );
        }
        let huge = format!("1{}.00", "0".repeat(40));
        assert_eq!(reason(read(&capture(&huge, "USD"))), "amount_out_of_range");
        assert_eq!(
            reason(read(&capture("10000000000000.01", "USD"))),
            "amount_out_of_range"
        );
    }

    #[test]
    fn a_refund_names_its_capture_by_its_up_link() {
        let body = r#"{"id":"WH-2","event_type":"PAYMENT.CAPTURE.REFUNDED","resource":{"id":"RF1","amount":{"currency_code":"USD","value":"2.50"},"links":[{"rel":"self","href":"https://api.paypal.com/v2/payments/refunds/RF1"},{"rel":"up","href":"https://api.paypal.com/v2/payments/captures/CAP1"}]}}"#;
        assert!(matches!(
            read(body),
            Parsed::Event(PaymentEvent::Refunded { ref payment_id, ref refund_id, refund: RefundAmount::Delta(amount), .. })
                if payment_id == "CAP1" && refund_id.as_deref() == Some("RF1") && amount.get() == 250
        ));
        let without = body.replace(r#""rel":"up""#, r#""rel":"parent""#);
        assert_eq!(reason(read(&without)), "invalid_payload");
    }

    #[test]
    fn the_gateway_cannot_sign_for_paypal() {
        let scheme = PaypalScheme {
            check: Check::Signature(None),
        };
        assert!(scheme.sign("WH-1", b"{}", 0).is_err());
    }

    #[test]
    fn an_answer_that_is_not_the_event_asked_for_is_a_stored_unusable_answer() {
        let shown = capture("10.00", "USD");
        let found = event_of("WH-1", &Fetched::Found(shown.clone().into_bytes())).unwrap();
        assert_eq!(found.event_id, "WH-1");
        assert!(matches!(
            PaypalFormat.read(&found.body).parsed,
            Parsed::Event(PaymentEvent::Succeeded { amount, .. }) if amount.get() == 1000
        ));
        for (answer, reason_of_it) in [
            (Fetched::Found(shown.into_bytes()), "unusable_answer"),
            (Fetched::Found(b"[1,2]".to_vec()), "unusable_answer"),
            (Fetched::Unusable("too large".into()), "unusable_answer"),
            (Fetched::NotFound, "unknown_resource"),
        ] {
            let event = event_of("WH-2", &answer).unwrap();
            assert_eq!(event.event_id, format!("WH-2:{reason_of_it}"));
            assert_eq!(reason(PaypalFormat.read(&event.body).parsed), reason_of_it);
        }
    }

    #[test]
    fn a_capture_reversal_withdraws_from_the_capture_its_up_link_names() {
        let body = r#"{"id":"WH-3","event_type":"PAYMENT.CAPTURE.REVERSED","resource_type":"refund","resource":{"id":"RV1","status":"COMPLETED","note_to_payer":"Payment reversed","amount":{"currency_code":"EUR","value":"12.34"},"links":[{"rel":"self","href":"https://api.paypal.com/v2/payments/refunds/RV1"},{"rel":"up","href":"https://api.paypal.com/v2/payments/captures/CAP9"}]}}"#;
        assert_eq!(
            super::body::dispute_summary(&read(body)),
            "withdrawn CAP9 RV1 1234+0 EUR"
        );
        let too_precise = body.replace("12.34", "12.345");
        assert_eq!(reason(read(&too_precise)), "invalid_amount");
        for kind in ["CUSTOMER.DISPUTE.CREATED", "CUSTOMER.DISPUTE.RESOLVED"] {
            let dispute = format!(
                r#"{{"id":"WH-4","event_type":"{kind}","resource":{{"dispute_id":"PP-D-1","status":"RESOLVED"}}}}"#
            );
            assert_eq!(reason(read(&dispute)), "no_funds_moved", "{kind}");
        }
    }
}
