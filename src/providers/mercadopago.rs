//! Mercado Pago: a notification is JSON naming a payment (`data.id`, also in the URL's query as
//! `data.id`), signed in `x-signature: ts=..,v1=..`: `v1` is the hex HMAC-SHA256, under the
//! signature secret, of the manifest `id:{data.id of the query, lower-cased};request-id:
//! {x-request-id};ts:{ts};`, each part left out when the request lacks it, as Mercado Pago
//! documents. The body itself is not signed, so the payment id comes from the signed query: a
//! body naming another payment, or naming one when the query names none, is refused. Then the
//! gateway asks the API, `GET {api_base_url}/v1/payments/{data.id}` with the `api_key`; no
//! fetch runs for a notification whose signature does not hold.
//!
//! The payment the API answers is the event, as for Mollie: its id is `{data.id}:{status}`, so
//! every notification that sees one status is one event; a partial refund leaves the status
//! `approved`, so while something is refunded and the status is not `refunded` the refunded
//! total is added (`{data.id}:approved:{transaction_amount_refunded}`), or a partial refund
//! would never be a new event. What is stored is what the gateway read (status, amounts,
//! currency, `external_reference`), the same bytes for the same event id.
//!
//! Money: `approved`, `refunded`, `charged_back` and `in_mediation` mean captured
//! (`transaction_amount`); `rejected` and `cancelled` a failed payment; `pending`,
//! `in_process` and `authorized` move nothing. `transaction_amount_refunded` is the refunded
//! total; `charged_back` takes back what refunds left. Amounts are JSON numbers, read by their
//! digits with the currency's ISO 4217 exponent, never through floating point. Notifications of
//! other topics are acknowledged `ignored` without a fetch.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::body::{self, Object, Unusable, decimal_in_minor_units, invalid};
use super::connector::{
    Connector, FetchedEvent, Format, Naming, Rejection, Sample, Signed, Unsignable, Verification,
    Verified,
};
use super::fetch::{self, Fetched, ProviderApi, UNKNOWN_RESOURCE, UNUSABLE_ANSWER, path_safe};
use crate::config::providers::ProviderSettings;
use crate::payments::event::{
    Parsed, PayloadError, PaymentSnapshot, Reading, SnapshotChargeback, SnapshotRefunds,
    SnapshotStatus, check_event_id,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError};

pub const SIGNATURE_HEADER: &str = "x-signature";
pub const REQUEST_ID_HEADER: &str = "x-request-id";

pub struct MercadopagoScheme {
    keys: Keys,
    api: Option<ProviderApi>,
}

/// The parts of a notification body the gateway reads (unsigned: only for the topic, and a
/// payment id the query does not carry).
#[derive(Deserialize, Default)]
struct Notification<'a> {
    #[serde(default, borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    data: Option<Data<'a>>,
}

#[derive(Deserialize, Default)]
struct Data<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

/// The fields of the API's payment the gateway reads.
#[derive(Deserialize)]
struct ApiPayment<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    status: Cow<'a, str>,
    #[serde(borrow)]
    transaction_amount: &'a RawValue,
    #[serde(borrow)]
    currency_id: Cow<'a, str>,
    #[serde(default, borrow)]
    transaction_amount_refunded: Option<&'a RawValue>,
    #[serde(default, borrow)]
    external_reference: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    status_detail: Option<Cow<'a, str>>,
}

/// The detail of a `charged_back` payment whose money came back to the merchant.
const REIMBURSED: &str = "reimbursed";

/// The event id of a payment's state: `{id}:{status}`, with the refunded total while a partly
/// refunded payment keeps its status, and `:reimbursed` once a chargeback's money came back
/// (the status stays `charged_back`, so without it the give-back would never be a new event).
fn state_event_id(id: &str, status: &str, refunded: &str, detail: Option<&str>) -> String {
    if status == "charged_back" && detail == Some(REIMBURSED) {
        format!("{id}:{status}:{REIMBURSED}")
    } else if !is_zero(refunded) && status != "refunded" {
        format!("{id}:{status}:{refunded}")
    } else {
        format!("{id}:{status}")
    }
}

/// What the gateway stores for a Mercado Pago event: the payment id, the topic, and the
/// payment as the API described it (`null`: unknown; absent: another topic, not asked).
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    id: Cow<'a, str>,
    #[serde(rename = "type")]
    kind: Cow<'a, str>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    payment: Option<Option<serde_json::Value>>,
    /// Why the API's answer could not be used (`payment` is then null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unusable: Option<String>,
}

/// A member that is present, `null` included (`Some(None)`); absent stays `None` by default.
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<serde_json::Value>>, D::Error> {
    Option::<serde_json::Value>::deserialize(deserializer).map(Some)
}

/// A JSON value's text as a string: a number's digits as written, a string's content.
fn text_of(raw: &RawValue) -> Option<String> {
    let text = raw.get().trim();
    if text.starts_with('"') {
        serde_json::from_str(text).ok()
    } else if text.starts_with('{') || text.starts_with('[') || text == "null" {
        None
    } else {
        Some(text.to_owned())
    }
}

/// Whether a decimal's text is zero (`0`, `0.0`).
fn is_zero(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b == b'0' || b == b'.')
}

impl MercadopagoScheme {
    pub fn new(settings: &ProviderSettings, fetches: Option<&IntCounterVec>) -> Self {
        Self {
            keys: Keys::utf8(settings.secrets.iter().map(Secret::expose), 0),
            api: fetch::api_of(settings, &[], fetches),
        }
    }

    /// The signed manifest of a request: its parts that are present, in Mercado Pago's order.
    pub fn manifest(query_id: Option<&str>, request_id: Option<&str>, ts: &str) -> String {
        let mut manifest = String::new();
        if let Some(id) = query_id {
            manifest.push_str(&format!("id:{};", id.to_ascii_lowercase()));
        }
        if let Some(request_id) = request_id {
            manifest.push_str(&format!("request-id:{request_id};"));
        }
        manifest.push_str(&format!("ts:{ts};"));
        manifest
    }

    /// The signature check; on success the payment id the notification names (the query's),
    /// and the topic.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        query: &str,
        body: &[u8],
    ) -> Result<(Option<String>, Option<String>), SignatureError> {
        let header = headers
            .header(SIGNATURE_HEADER)
            .ok_or(SignatureError::MissingHeader(SIGNATURE_HEADER))?;
        let (mut ts, mut v1) = (None, Vec::new());
        for part in header.split(',') {
            match part.trim().split_once('=') {
                Some(("ts", value)) => ts = Some(value.trim()),
                Some(("v1", value)) => v1.push(
                    hex::decode(value.trim())
                        .map_err(|_| SignatureError::MalformedHeader(SIGNATURE_HEADER))?,
                ),
                _ => {}
            }
        }
        let ts = ts
            .filter(|ts| !ts.is_empty() && ts.bytes().all(|b| b.is_ascii_digit()))
            .ok_or(SignatureError::MalformedHeader(SIGNATURE_HEADER))?;
        if v1.is_empty() {
            return Err(SignatureError::MalformedHeader(SIGNATURE_HEADER));
        }
        let query_id = url::form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "data.id")
            .map(|(_, id)| id.into_owned());
        let request_id = headers.header(REQUEST_ID_HEADER);
        let manifest = Self::manifest(query_id.as_deref(), request_id, ts);
        self.keys.check_untimed(&[manifest.as_bytes()], &v1)?;
        let notification: Notification<'_> = serde_json::from_slice(body).unwrap_or_default();
        let body_id = notification.data.and_then(|d| d.id).and_then(text_of);
        let id = match (query_id, body_id) {
            (Some(signed), Some(unsigned)) if signed != unsigned => {
                // The body is not signed: one that names another payment is not the one the
                // signature was made for.
                return Err(SignatureError::MalformedHeader("data.id"));
            }
            (Some(signed), _) => Some(signed),
            // Signed over no id (Mercado Pago leaves the part out when the query lacks it):
            // a payment only the unsigned body names was never signed for.
            (None, Some(_)) => return Err(SignatureError::MalformedHeader("data.id")),
            (None, None) => None,
        };
        let topic = url::form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| name == "type" || name == "topic")
            .map(|(_, t)| t.into_owned())
            .or_else(|| notification.kind.map(Cow::into_owned));
        Ok((id, topic))
    }
}

/// The stored rejection of an answer about payment `id` that could not be used (`why`).
fn unusable_event(id: &str, why: &str) -> Result<FetchedEvent, String> {
    let body = serde_json::to_vec(&Stored {
        id: Cow::Borrowed(id),
        kind: Cow::Borrowed("payment"),
        payment: Some(None),
        unusable: Some(why.to_owned()),
    })
    .map_err(|e| e.to_string())?;
    Ok(FetchedEvent {
        event_id: format!("{id}:{UNUSABLE_ANSWER}"),
        body,
    })
}

/// The event of the API's answer `answer` about payment `id`; `Err` for an answer that is not
/// that payment (nothing is decided on it).
pub fn event_of(id: &str, answer: &Fetched) -> Result<FetchedEvent, String> {
    let stored = |payment: Option<serde_json::Value>| {
        serde_json::to_vec(&Stored {
            id: Cow::Borrowed(id),
            kind: Cow::Borrowed("payment"),
            payment: Some(payment),
            unusable: None,
        })
        .map_err(|e| e.to_string())
    };
    let bytes = match answer {
        Fetched::NotFound => {
            return Ok(FetchedEvent {
                event_id: format!("{id}:{}", UNKNOWN_RESOURCE),
                body: stored(None)?,
            });
        }
        Fetched::Unusable(why) => return unusable_event(id, why),
        Fetched::Found(bytes) => bytes,
    };
    let payment: ApiPayment<'_> = serde_json::from_slice(bytes)
        .map_err(|e| format!("Mercado Pago's answer is not a payment: {e}"))?;
    if text_of(payment.id).as_deref() != Some(id) {
        return Err(format!(
            "Mercado Pago answered payment {} when asked for {id}",
            payment.id.get()
        ));
    }
    let amount = text_of(payment.transaction_amount).unwrap_or_default();
    let refunded = payment
        .transaction_amount_refunded
        .and_then(text_of)
        .unwrap_or_else(|| "0".to_owned());
    let event_id = state_event_id(
        id,
        &payment.status,
        &refunded,
        payment.status_detail.as_deref(),
    );
    check_event_id(&event_id).map_err(|e| e.0)?;
    let body = stored(Some(json!({
        "status": payment.status,
        "status_detail": payment.status_detail,
        "transaction_amount": amount,
        "currency_id": payment.currency_id,
        "transaction_amount_refunded": refunded,
        "external_reference": payment.external_reference,
    })))?;
    Ok(FetchedEvent { event_id, body })
}

impl Connector for MercadopagoScheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.verify_request(headers, "", body, now)
    }

    fn verify_request<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        query: &'a str,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        let (id, topic) = match self.check(headers, query, body) {
            Ok(found) => found,
            Err(error) => return Verification::Done(Err(Rejection::Refused(error))),
        };
        let Some(id) = id.filter(|id| path_safe(id)) else {
            return Verification::Done(Ok(Verified::new(
                None,
                Naming::Unusable(
                    "data.id must name a payment (letters or digits, in the query or the body)"
                        .into(),
                ),
            )));
        };
        let topic = topic.unwrap_or_else(|| "payment".to_owned());
        if topic != "payment" {
            // Another topic (merchant orders, chargebacks, subscriptions): acknowledged
            // without asking the payments API about an id that is not a payment's.
            let kind: String = topic
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
                .take(64)
                .collect();
            let body = serde_json::to_vec(&Stored {
                id: Cow::Borrowed(&id),
                kind: Cow::Borrowed(&kind),
                payment: None,
                unusable: None,
            });
            return Verification::Done(match body {
                Ok(body) => Ok(Verified::new(
                    None,
                    Naming::Fetched(vec![FetchedEvent {
                        event_id: format!("{id}:{kind}"),
                        body,
                    }]),
                )),
                Err(e) => Err(Rejection::Unavailable(e.to_string())),
            });
        }
        let Some(api) = &self.api else {
            return Verification::Done(Err(fetch::no_api()));
        };
        Verification::Pending(Box::pin(async move {
            let answer = api.get(&format!("/v1/payments/{id}")).await?;
            // An answer that is not the payment comes the same on every retry: stored.
            let event = event_of(&id, &answer)
                .or_else(|why| unusable_event(&id, &why))
                .map_err(Rejection::Unavailable)?;
            Ok(Verified::new(None, Naming::Fetched(vec![event])))
        }))
    }

    /// A notification about the payment a stored event (or a sample) names, signed as Mercado
    /// Pago signs: a fresh `x-request-id`, `ts` now, the payment id in the query.
    fn sign(&self, event_id: &str, body: &[u8], timestamp: i64) -> Result<Signed, Unsignable> {
        let id = match serde_json::from_slice::<Stored<'_>>(body) {
            Ok(stored) => stored.id.into_owned(),
            Err(_) => serde_json::from_slice::<Notification<'_>>(body)
                .ok()
                .and_then(|n| n.data)
                .and_then(|d| d.id)
                .and_then(text_of)
                .ok_or_else(|| Unsignable("not a Mercado Pago notification".into()))?,
        };
        let request_id = format!(
            "{timestamp}-{}",
            hex::encode(&self.keys.sign(&[event_id.as_bytes()])[..8])
        );
        let ts = timestamp.to_string();
        let manifest = MercadopagoScheme::manifest(Some(&id), Some(&request_id), &ts);
        let v1 = hex::encode(self.keys.sign(&[manifest.as_bytes()]));
        let notification = json!({"action": "payment.updated", "api_version": "v1",
            "data": {"id": id}, "type": "payment"});
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("data.id", &id)
            .append_pair("type", "payment")
            .finish();
        Ok(Signed {
            body: Some(notification.to_string().into_bytes()),
            query: Some(query),
            ..Signed::headers(vec![
                (SIGNATURE_HEADER.to_owned(), format!("ts={ts},v1={v1}")),
                (REQUEST_ID_HEADER.to_owned(), request_id),
            ])
        })
    }
}

/// Mercado Pago's payment, as the gateway stored it from the API's answer.
pub struct MercadopagoFormat;

impl Format for MercadopagoFormat {
    fn read(&self, body: &[u8]) -> Reading {
        let top = match Object::of_body(body) {
            Ok(top) => top,
            Err(error) => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::invalid(error),
                };
            }
        };
        let kind = top.string("type").unwrap_or_default();
        if kind != "payment" {
            return Reading {
                event_type: Some(body::cut(kind)),
                parsed: Parsed::Ignored("unsupported_event_type"),
            };
        }
        let payment = match top.object_if_any("payment") {
            Ok(Some(payment)) => payment,
            Ok(None) if top.member("unusable").is_some() => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::Rejected {
                        reason: UNUSABLE_ANSWER,
                        detail: format!(
                            "Mercado Pago's answer about {} could not be used: {}",
                            top.string("id").unwrap_or_default(),
                            top.string("unusable").unwrap_or_default()
                        ),
                    },
                };
            }
            Ok(None) => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::Rejected {
                        reason: UNKNOWN_RESOURCE,
                        detail: format!(
                            "Mercado Pago's API knows no payment {}",
                            top.string("id").unwrap_or_default()
                        ),
                    },
                };
            }
            Err(error) => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::invalid(error),
                };
            }
        };
        let status = payment.string("status");
        Reading {
            event_type: status.map(|s| body::cut(format!("payment.{s}"))),
            parsed: snapshot(&top, &payment).unwrap_or_else(body::unusable),
        }
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        let stored: Stored<'_> = serde_json::from_slice(body)
            .map_err(|_| invalid("not a Mercado Pago event as the gateway stores it"))?;
        let id = match &stored.payment {
            None => format!("{}:{}", stored.id, stored.kind),
            Some(None) if stored.unusable.is_some() => {
                format!("{}:{}", stored.id, UNUSABLE_ANSWER)
            }
            Some(None) => format!("{}:{}", stored.id, UNKNOWN_RESOURCE),
            Some(Some(payment)) => state_event_id(
                &stored.id,
                payment["status"].as_str().unwrap_or_default(),
                payment["transaction_amount_refunded"]
                    .as_str()
                    .unwrap_or("0"),
                payment["status_detail"].as_str(),
            ),
        };
        check_event_id(&id)?;
        Ok(id)
    }

    /// A notification about the sample's payment; the gateway asks the API about it, so it
    /// answers only where `api_base_url` is an emulator that knows it.
    fn sample(&self, _event_type: &str, s: &Sample) -> String {
        let id: String = s
            .payment_id
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(60)
            .collect();
        json!({"action": "payment.updated", "api_version": "v1", "data": {"id": id},
            "date_created": Utc::now().to_rfc3339(), "live_mode": false, "type": "payment"})
        .to_string()
    }
}

fn snapshot(top: &Object<'_>, payment: &Object<'_>) -> Result<Parsed, Unusable> {
    let currency = payment.currency("currency_id", false)?;
    let amount_text = payment.string("transaction_amount").unwrap_or_default();
    let amount = decimal_in_minor_units(&amount_text, currency, "payment.transaction_amount")?;
    let refunded = payment.decimal_total("transaction_amount_refunded", currency)?;
    let status = payment.string("status").unwrap_or_default();
    let payment_id = top.id("id")?;
    let (snapshot_status, chargebacks) = match status.as_str() {
        "approved" | "refunded" | "in_mediation" => (SnapshotStatus::Captured(amount), vec![]),
        // A payment is charged back once: what refunds left, given back when reimbursed.
        "charged_back" => (
            SnapshotStatus::Captured(amount),
            vec![SnapshotChargeback {
                id: format!("{payment_id}:chargeback"),
                amount_minor: amount.get().saturating_sub(refunded).max(0),
                reversed: payment.string("status_detail").as_deref() == Some(REIMBURSED),
            }]
            .into_iter()
            .filter(|c| c.amount_minor > 0)
            .collect(),
        ),
        "rejected" | "cancelled" => (SnapshotStatus::Failed, vec![]),
        "pending" | "in_process" | "authorized" => (SnapshotStatus::Pending, vec![]),
        _ => return Ok(Parsed::Ignored("unsupported_status")),
    };
    Ok(Parsed::Snapshot(Box::new(PaymentSnapshot {
        payment_id,
        order_id: payment.order_id("external_reference"),
        currency,
        status: snapshot_status,
        refunds: SnapshotRefunds::Total(refunded),
        chargebacks,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payments::event::SnapshotStatus;

    fn scheme() -> MercadopagoScheme {
        MercadopagoScheme {
            keys: Keys::utf8(["mercadopago-signature-secret"], 0),
            api: None,
        }
    }

    fn headers(manifest: &str, request_id: Option<&str>, ts: &str) -> Vec<(String, String)> {
        let v1 = hex::encode(scheme().keys.sign(&[manifest.as_bytes()]));
        let mut headers = vec![(SIGNATURE_HEADER.to_owned(), format!("ts={ts},v1={v1}"))];
        if let Some(id) = request_id {
            headers.push((REQUEST_ID_HEADER.to_owned(), id.to_owned()));
        }
        headers
    }

    const BODY: &[u8] = br#"{"action":"payment.updated","data":{"id":"123456"},"type":"payment"}"#;

    #[test]
    fn the_manifest_signs_the_query_id_the_request_id_and_ts() {
        let signed = headers(
            "id:123456;request-id:req-1;ts:1704908010;",
            Some("req-1"),
            "1704908010",
        );
        assert_eq!(
            scheme().check(&signed, "data.id=123456&type=payment", BODY),
            Ok((Some("123456".into()), Some("payment".into())))
        );
        // Another payment id in the query, or another request id: no match.
        assert_eq!(
            scheme().check(&signed, "data.id=123457&type=payment", BODY),
            Err(SignatureError::NoMatch)
        );
        let mut other = signed.clone();
        other[1].1 = "req-2".into();
        assert_eq!(
            scheme().check(&other, "data.id=123456", BODY),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn parts_the_request_lacks_are_left_out_of_the_manifest() {
        assert_eq!(MercadopagoScheme::manifest(None, None, "1"), "ts:1;");
        assert_eq!(
            MercadopagoScheme::manifest(Some("ABC"), None, "1"),
            "id:abc;ts:1;"
        );
        let signed = headers("ts:1704908010;", None, "1704908010");
        // Signed over no id: a payment only the unsigned body names was never signed for.
        assert_eq!(
            scheme().check(&signed, "", BODY),
            Err(SignatureError::MalformedHeader("data.id"))
        );
        assert_eq!(
            scheme().check(&signed, "", br#"{"type":"payment"}"#),
            Ok((None, Some("payment".into())))
        );
    }

    #[test]
    fn an_unsigned_body_naming_another_payment_than_the_signed_query_is_refused() {
        let signed = headers("id:999;ts:1;", None, "1");
        assert_eq!(
            scheme().check(&signed, "data.id=999", BODY),
            Err(SignatureError::MalformedHeader("data.id"))
        );
    }

    #[test]
    fn the_fetched_payment_is_the_event_and_its_amounts_are_exact() {
        let answer = br#"{"id":123456,"status":"approved","status_detail":"accredited","transaction_amount":100.5,"currency_id":"BRL","transaction_amount_refunded":0,"external_reference":"7"}"#;
        let event = event_of("123456", &Fetched::Found(answer.to_vec())).unwrap();
        assert_eq!(event.event_id, "123456:approved");
        assert_eq!(
            MercadopagoFormat.event_id(&event.body).unwrap(),
            event.event_id
        );
        let Parsed::Snapshot(s) = MercadopagoFormat.read(&event.body).parsed else {
            panic!("a snapshot expected");
        };
        assert!(matches!(s.status, SnapshotStatus::Captured(a) if a.get() == 10050));
        assert_eq!(s.order_id, Some(7));
        let partly = String::from_utf8(answer.to_vec()).unwrap().replace(
            r#""transaction_amount_refunded":0"#,
            r#""transaction_amount_refunded":20.25"#,
        );
        let event = event_of("123456", &Fetched::Found(partly.into_bytes())).unwrap();
        assert_eq!(event.event_id, "123456:approved:20.25");
        let Parsed::Snapshot(s) = MercadopagoFormat.read(&event.body).parsed else {
            panic!();
        };
        assert_eq!(s.refunds, SnapshotRefunds::Total(2025));
        let clp = String::from_utf8(answer.to_vec())
            .unwrap()
            .replace("BRL", "CLP");
        let event = event_of("123456", &Fetched::Found(clp.into_bytes())).unwrap();
        assert!(matches!(
            MercadopagoFormat.read(&event.body).parsed,
            Parsed::Rejected {
                reason: "invalid_amount",
                ..
            }
        ));
    }

    #[test]
    fn a_stored_event_is_signed_again_as_a_notification_that_verifies() {
        let answer =
            br#"{"id":42,"status":"approved","transaction_amount":10,"currency_id":"BRL"}"#;
        let event = event_of("42", &Fetched::Found(answer.to_vec())).unwrap();
        let signed = scheme()
            .sign(&event.event_id, &event.body, 1_704_908_010)
            .unwrap();
        let query = signed.query.clone().unwrap();
        let body = signed.body.clone().unwrap();
        assert_eq!(
            scheme().check(&signed.headers, &query, &body),
            Ok((Some("42".into()), Some("payment".into())))
        );
    }
}
