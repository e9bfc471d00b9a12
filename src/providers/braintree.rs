//! Braintree: a form body with `bt_signature` and `bt_payload` (the notification's XML in
//! base64, broken into lines). `bt_signature` is `public_key|signature` pairs joined by `&`;
//! the pair naming the configured `public_key` must carry the hex HMAC-SHA1 of `bt_payload` as
//! sent, keyed with the SHA-1 digest of a private key (the provider's `secrets`, any of which
//! may match during a rotation), as Braintree's SDKs compute it (`Crypto.sha1_hmac_hash`); like
//! them, the payload with one newline more also verifies. The event id is the notification's
//! `{kind}:{subject id}:{timestamp}`, or `{kind}:{SHA-256 of bt_payload}` for a subject without
//! an id (two of one kind can share a second). The body is stored as it came (the signature is in it), so
//! a replay sends the same bytes.
//!
//! Money: `transaction_settled` of a `sale` is the capture (`order-id` the order, `amount` in
//! major units with the ISO 4217 exponent), of a `credit` a refund of its
//! `refunded-transaction-id` (the credit's id is the refund id); `transaction_settlement_declined`
//! of a sale is a failed payment. `dispute_opened` of a `chargeback` withdraws
//! `amount-disputed` (dispute id: the dispute's `id`; no fee, Braintree gives none in it),
//! `dispute_won` gives it back, `dispute_lost`, `dispute_accepted` and `dispute_auto_accepted`
//! close it lost. Retrievals and everything else are acknowledged `ignored`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use ring::hmac;
use serde::Deserialize;

use super::body::{Unusable, decimal_in_minor_units, invalid};
use super::connector::{
    Connector, FORM, Format, Naming, Sample, Signed, Unsignable, Verification, Verified,
};
use crate::config::providers::ProviderSettings;
use crate::money::Currency;
use crate::payments::event::{
    DisputeChange, DisputeResult, MAX_EVENT_ID_LEN, Parsed, PayloadError, PaymentEvent, Reading,
    RefundAmount, check_event_id,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, SignatureError};
use crate::text;

pub struct BraintreeScheme {
    public_key: String,
    /// HMAC-SHA1 keys: the SHA-1 of each private key.
    keys: Vec<hmac::Key>,
}

/// The HMAC key of a private key, as Braintree's SDKs make it.
fn key_of(private_key: &str) -> hmac::Key {
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        private_key.as_bytes(),
    );
    hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, digest.as_ref())
}

/// `bt_signature` and `bt_payload` of a form body.
fn fields(body: &[u8]) -> Result<(String, String), SignatureError> {
    let (mut signature, mut payload) = (None, None);
    for (name, value) in url::form_urlencoded::parse(body) {
        let slot = match name.as_ref() {
            "bt_signature" => &mut signature,
            "bt_payload" => &mut payload,
            _ => continue,
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(SignatureError::MalformedHeader("bt_signature"));
        }
    }
    Ok((
        signature.ok_or(SignatureError::MissingHeader("bt_signature"))?,
        payload.ok_or(SignatureError::MissingHeader("bt_payload"))?,
    ))
}

impl BraintreeScheme {
    pub fn new(settings: &ProviderSettings) -> Self {
        Self::with_keys(
            settings.public_key.as_deref().unwrap_or_default(),
            settings.secrets.iter().map(Secret::expose),
        )
    }

    /// A scheme of one key pair, for the known-answer tests.
    #[cfg(test)]
    pub(crate) fn for_vector(public_key: &str, private_key: &str) -> Self {
        Self::with_keys(public_key, [private_key])
    }

    fn with_keys<'s>(public_key: &str, private_keys: impl IntoIterator<Item = &'s str>) -> Self {
        Self {
            public_key: public_key.to_owned(),
            keys: private_keys.into_iter().map(key_of).collect(),
        }
    }

    /// The signature check of a form body.
    pub fn check(&self, body: &[u8]) -> Result<(), SignatureError> {
        let (signature, payload) = fields(body)?;
        // What the SDKs accept of a payload: base64 in lines, nothing else.
        if payload.is_empty()
            || !payload
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'=' | b'/' | b'\n'))
        {
            return Err(SignatureError::MalformedHeader("bt_payload"));
        }
        let candidates: Vec<Vec<u8>> = signature
            .split('&')
            .filter_map(|pair| pair.split_once('|'))
            .filter(|(public_key, _)| *public_key == self.public_key)
            .filter_map(|(_, hex)| hex::decode(hex).ok())
            .collect();
        if candidates.is_empty() {
            return Err(SignatureError::MissingHeader("bt_signature (public_key)"));
        }
        let with_newline = format!("{payload}\n");
        let matches = self.keys.iter().any(|key| {
            candidates.iter().any(|candidate| {
                [payload.as_bytes(), with_newline.as_bytes()]
                    .iter()
                    .any(|signed| hmac::verify(key, signed, candidate).is_ok())
            })
        });
        if matches {
            Ok(())
        } else {
            Err(SignatureError::NoMatch)
        }
    }

    /// `bt_signature` of `payload` under the first private key.
    fn signature(&self, payload: &str) -> String {
        let signature = self
            .keys
            .first()
            .map(|key| hex::encode(hmac::sign(key, payload.as_bytes())))
            .unwrap_or_default();
        format!("{}|{signature}", self.public_key)
    }
}

impl Connector for BraintreeScheme {
    fn verify<'a>(
        &'a self,
        _headers: &'a dyn HeaderSource,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(body)
            .map(|()| Verified::new(None, Naming::Body))
            .into()
    }

    /// A body that already verifies is sent as it is (its bytes are its identity); one with a
    /// payload only (a sample) gets its `bt_signature`.
    fn sign(&self, _event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        let unchanged = Signed {
            content_type: FORM,
            ..Signed::headers(Vec::new())
        };
        if self.check(body).is_ok() {
            return Ok(unchanged);
        }
        let payload = url::form_urlencoded::parse(body)
            .find(|(name, _)| name == "bt_payload")
            .map(|(_, value)| value.into_owned())
            .ok_or_else(|| Unsignable("a Braintree body needs bt_payload".into()))?;
        if url::form_urlencoded::parse(body).any(|(name, _)| name == "bt_signature") {
            return Err(Unsignable(
                "its bt_signature verifies with no configured private key; signing it again \
                 would change its bytes, so it is not sent"
                    .into(),
            ));
        }
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", &self.signature(&payload))
            .append_pair("bt_payload", &payload)
            .finish();
        Ok(Signed {
            body: Some(form.into_bytes()),
            ..unchanged
        })
    }
}

/// An element's text (attributes such as `type="datetime"` are left aside).
#[derive(Deserialize, Default, Debug)]
struct Text {
    #[serde(rename = "$text", default)]
    text: String,
}

impl Text {
    fn get(field: &Option<Text>) -> Option<&str> {
        field
            .as_ref()
            .map(|t| t.text.trim())
            .filter(|t| !t.is_empty())
    }
}

#[derive(Deserialize, Debug)]
struct Notification {
    #[serde(default)]
    kind: Option<Text>,
    #[serde(default)]
    timestamp: Option<Text>,
    #[serde(default)]
    subject: Subject,
}

#[derive(Deserialize, Default, Debug)]
struct Subject {
    #[serde(default)]
    transaction: Option<Transaction>,
    #[serde(default)]
    dispute: Option<Dispute>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "kebab-case")]
struct Transaction {
    #[serde(default)]
    id: Option<Text>,
    #[serde(rename = "type", default)]
    kind: Option<Text>,
    #[serde(default)]
    currency_iso_code: Option<Text>,
    #[serde(default)]
    amount: Option<Text>,
    #[serde(default)]
    order_id: Option<Text>,
    #[serde(default)]
    refunded_transaction_id: Option<Text>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "kebab-case")]
struct Dispute {
    #[serde(default)]
    id: Option<Text>,
    #[serde(default)]
    kind: Option<Text>,
    #[serde(default)]
    amount_disputed: Option<Text>,
    #[serde(default)]
    currency_iso_code: Option<Text>,
    #[serde(default)]
    transaction: Option<DisputedTransaction>,
}

#[derive(Deserialize, Debug)]
struct DisputedTransaction {
    #[serde(default)]
    id: Option<Text>,
}

/// The hex SHA-256 of a form body's `bt_payload`, as sent (its line breaks included).
fn payload_sha256(body: &[u8]) -> Result<String, PayloadError> {
    use sha2::{Digest, Sha256};
    let payload = url::form_urlencoded::parse(body)
        .find(|(name, _)| name == "bt_payload")
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| invalid("the form has no bt_payload"))?;
    Ok(hex::encode(Sha256::digest(payload.as_bytes())))
}

/// The notification a form body carries (its payload decoded and read).
fn notification(body: &[u8]) -> Result<Notification, PayloadError> {
    let payload = url::form_urlencoded::parse(body)
        .find(|(name, _)| name == "bt_payload")
        .map(|(_, value)| value.into_owned())
        .ok_or_else(|| invalid("the form has no bt_payload"))?;
    let compact: String = payload.chars().filter(|c| *c != '\n').collect();
    let xml = STANDARD
        .decode(compact)
        .map_err(|_| invalid("bt_payload is not base64"))?;
    let xml = std::str::from_utf8(&xml).map_err(|_| invalid("bt_payload is not UTF-8 XML"))?;
    quick_xml::de::from_str(xml)
        .map_err(|e| invalid(format!("bt_payload is not a notification: {e}")))
}

impl Notification {
    fn subject_id(&self) -> Option<&str> {
        match (&self.subject.transaction, &self.subject.dispute) {
            (Some(t), _) => Text::get(&t.id),
            (None, Some(d)) => Text::get(&d.id),
            (None, None) => None,
        }
    }
}

/// A stored id: the text if usable, else why not.
fn id_of(value: Option<&str>, path: &str) -> Result<String, PayloadError> {
    value
        .filter(|v| text::storable(v, MAX_EVENT_ID_LEN))
        .map(str::to_owned)
        .ok_or_else(|| invalid(format!("{path} must be 1 to {MAX_EVENT_ID_LEN} characters")))
}

fn amount_of(
    amount: Option<&str>,
    currency: Option<&str>,
    path: &str,
) -> Result<(crate::money::AmountMinor, Currency), Unusable> {
    let currency = currency.and_then(Currency::parse).ok_or_else(|| {
        invalid(format!(
            "{path}: currency-iso-code must be an ISO 4217 code"
        ))
    })?;
    let amount = decimal_in_minor_units(amount.unwrap_or_default(), currency, path)?;
    Ok((amount, currency))
}

/// Braintree's notifications, read from the form body as it came.
pub struct BraintreeFormat;

impl Format for BraintreeFormat {
    fn read(&self, body: &[u8]) -> Reading {
        let notification = match notification(body) {
            Ok(n) => n,
            Err(error) => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::invalid(error),
                };
            }
        };
        let kind = Text::get(&notification.kind).unwrap_or_default().to_owned();
        let parsed = parse(&kind, &notification).unwrap_or_else(super::body::unusable);
        Reading {
            event_type: Some(super::body::cut(kind)),
            parsed,
        }
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        let n = notification(body)?;
        let kind = Text::get(&n.kind).ok_or_else(|| invalid("the notification has no kind"))?;
        let id = match n.subject_id().filter(|id| !id.is_empty()) {
            Some(subject) => format!(
                "{kind}:{subject}:{}",
                Text::get(&n.timestamp)
                    .ok_or_else(|| invalid("the notification has no timestamp"))?
            ),
            // A subject without an id (Account Updater's daily report, a check): two of one
            // kind may be triggered in one second, so the payload itself names it.
            None => format!("{kind}:{}", payload_sha256(body)?),
        };
        check_event_id(&id)?;
        Ok(id)
    }

    /// A notification of the sample as the SDKs' testing helper builds one (payload only;
    /// signing adds `bt_signature`).
    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let timestamp = Utc::now().format("%Y-%m-%dT%H:%M:%SZ");
        let amount = Currency::parse(&s.currency)
            .and_then(|c| crate::money::major_units(i128::from(s.amount_minor), c.code()))
            .unwrap_or_else(|| s.amount_minor.to_string());
        let order = s.order_id.map(|id| id.to_string()).unwrap_or_default();
        let (kind, subject) = match event_type {
            "payment.succeeded" | "payment.failed" => (
                if event_type == "payment.succeeded" {
                    "transaction_settled"
                } else {
                    "transaction_settlement_declined"
                },
                format!(
                    "<transaction><id>{}</id><type>sale</type><currency-iso-code>{}</currency-iso-code><amount>{amount}</amount><order-id>{order}</order-id></transaction>",
                    s.payment_id, s.currency
                ),
            ),
            "refund.succeeded" => (
                "transaction_settled",
                format!(
                    "<transaction><id>{}</id><type>credit</type><currency-iso-code>{}</currency-iso-code><amount>{amount}</amount><refunded-transaction-id>{}</refunded-transaction-id></transaction>",
                    s.event_id, s.currency, s.payment_id
                ),
            ),
            other => (other, String::new()),
        };
        let xml = format!(
            "<notification><timestamp type=\"datetime\">{timestamp}</timestamp><kind>{kind}</kind><subject>{subject}</subject></notification>"
        );
        let payload = mime_base64(xml.as_bytes());
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_payload", &payload)
            .finish()
    }
}

/// Base64 in lines of 76 characters, each ending in a newline, as Python's
/// `base64.encodebytes` (which Braintree's SDK uses) writes it.
pub fn mime_base64(bytes: &[u8]) -> String {
    let flat = STANDARD.encode(bytes);
    let mut out = String::with_capacity(flat.len() + flat.len() / 76 + 1);
    for chunk in flat.as_bytes().chunks(76) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out
}

fn parse(kind: &str, n: &Notification) -> Result<Parsed, Unusable> {
    let transaction = n.subject.transaction.as_ref();
    let dispute = n.subject.dispute.as_ref();
    let event = match (kind, transaction, dispute) {
        ("transaction_settled", Some(t), _) => {
            let (amount, currency) = amount_of(
                Text::get(&t.amount),
                Text::get(&t.currency_iso_code),
                "transaction.amount",
            )?;
            match Text::get(&t.kind) {
                Some("credit") => PaymentEvent::Refunded {
                    payment_id: id_of(
                        Text::get(&t.refunded_transaction_id),
                        "transaction.refunded-transaction-id",
                    )?,
                    refund_id: Some(id_of(Text::get(&t.id), "transaction.id")?),
                    refund: RefundAmount::Delta(amount),
                    currency,
                },
                _ => PaymentEvent::Succeeded {
                    payment_id: id_of(Text::get(&t.id), "transaction.id")?,
                    order_id: Text::get(&t.order_id)
                        .and_then(|o| o.parse().ok())
                        .filter(|o: &i64| *o > 0),
                    amount,
                    currency,
                },
            }
        }
        ("transaction_settlement_declined", Some(t), _) => match Text::get(&t.kind) {
            Some("credit") => return Ok(Parsed::Ignored("unsupported_event_type")),
            _ => PaymentEvent::Failed {
                payment_id: id_of(Text::get(&t.id), "transaction.id")?,
                order_id: Text::get(&t.order_id)
                    .and_then(|o| o.parse().ok())
                    .filter(|o: &i64| *o > 0),
            },
        },
        (
            "dispute_opened"
            | "dispute_won"
            | "dispute_lost"
            | "dispute_accepted"
            | "dispute_auto_accepted",
            _,
            Some(d),
        ) => {
            if Text::get(&d.kind) != Some("chargeback") {
                // A retrieval or a pre-arbitration notice: no money moves with it.
                return Ok(Parsed::Ignored("no_funds_moved"));
            }
            let change = match kind {
                "dispute_opened" | "dispute_won" => {
                    let (amount, currency) = amount_of(
                        Text::get(&d.amount_disputed),
                        Text::get(&d.currency_iso_code),
                        "dispute.amount-disputed",
                    )?;
                    if kind == "dispute_opened" {
                        DisputeChange::FundsWithdrawn {
                            amount,
                            fee_minor: 0,
                            currency,
                            fee_in_other_currency: false,
                        }
                    } else {
                        DisputeChange::FundsReinstated { amount, currency }
                    }
                }
                _ => DisputeChange::Closed(DisputeResult::Lost),
            };
            PaymentEvent::Dispute {
                payment_id: id_of(
                    d.transaction.as_ref().and_then(|t| Text::get(&t.id)),
                    "dispute.transaction.id",
                )?,
                dispute_id: id_of(Text::get(&d.id), "dispute.id")?,
                change,
            }
        }
        (
            "transaction_settled"
            | "transaction_settlement_declined"
            | "dispute_opened"
            | "dispute_won"
            | "dispute_lost"
            | "dispute_accepted"
            | "dispute_auto_accepted",
            _,
            _,
        ) => {
            return Err(Unusable::Invalid(invalid(format!(
                "a {kind} notification needs its subject"
            ))));
        }
        _ => return Ok(Parsed::Ignored("unsupported_event_type")),
    };
    Ok(Parsed::Event(event))
}

/// A form body of `payload` signed with `private_key` under `public_key`, as the SDKs' testing
/// helper makes one; for tests of other files.
#[cfg(test)]
pub fn sample_form(public_key: &str, private_key: &str, xml: &str) -> Vec<u8> {
    let scheme = BraintreeScheme::with_keys(public_key, [private_key]);
    let payload = mime_base64(xml.as_bytes());
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("bt_signature", &scheme.signature(&payload))
        .append_pair("bt_payload", &payload)
        .finish()
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::body::dispute_summary;

    const PUBLIC: &str = "gateway_test_public_key";
    const PRIVATE: &str = "gateway-test-private-key-0001";

    fn scheme() -> BraintreeScheme {
        BraintreeScheme::with_keys(PUBLIC, [PRIVATE])
    }

    fn xml(kind: &str, subject: &str) -> String {
        format!(
            "<notification><timestamp type=\"datetime\">2026-12-03T10:00:00Z</timestamp><kind>{kind}</kind><subject>{subject}</subject></notification>"
        )
    }

    #[test]
    fn a_sale_settled_captures_and_a_credit_settled_refunds() {
        let sale = sample_form(
            PUBLIC,
            PRIVATE,
            &xml(
                "transaction_settled",
                "<transaction><id>txn1</id><status>settled</status><type>sale</type><currency-iso-code>EUR</currency-iso-code><amount>46.20</amount><order-id>7</order-id></transaction>",
            ),
        );
        assert!(scheme().check(&sale).is_ok());
        assert_eq!(
            BraintreeFormat.event_id(&sale).unwrap(),
            "transaction_settled:txn1:2026-12-03T10:00:00Z"
        );
        assert!(matches!(
            BraintreeFormat.read(&sale).parsed,
            Parsed::Event(PaymentEvent::Succeeded { ref payment_id, order_id: Some(7), amount, .. })
                if payment_id == "txn1" && amount.get() == 4620
        ));
        let credit = sample_form(
            PUBLIC,
            PRIVATE,
            &xml(
                "transaction_settled",
                "<transaction><id>cr1</id><type>credit</type><currency-iso-code>EUR</currency-iso-code><amount>10.00</amount><refunded-transaction-id>txn1</refunded-transaction-id></transaction>",
            ),
        );
        assert!(matches!(
            BraintreeFormat.read(&credit).parsed,
            Parsed::Event(PaymentEvent::Refunded { ref payment_id, ref refund_id, .. })
                if payment_id == "txn1" && refund_id.as_deref() == Some("cr1")
        ));
    }

    #[test]
    fn chargebacks_withdraw_wins_give_back_and_losses_close() {
        let dispute = |kind: &str, dispute_kind: &str| {
            let body = sample_form(
                PUBLIC,
                PRIVATE,
                &xml(
                    kind,
                    &format!(
                        "<dispute><id>dp1</id><kind>{dispute_kind}</kind><amount-disputed>46.20</amount-disputed><currency-iso-code>EUR</currency-iso-code><transaction><id>txn1</id><amount>46.20</amount></transaction></dispute>"
                    ),
                ),
            );
            dispute_summary(&BraintreeFormat.read(&body).parsed)
        };
        assert_eq!(
            dispute("dispute_opened", "chargeback"),
            "withdrawn txn1 dp1 4620+0 EUR"
        );
        assert_eq!(
            dispute("dispute_won", "chargeback"),
            "reinstated txn1 dp1 4620 EUR"
        );
        assert_eq!(
            dispute("dispute_lost", "chargeback"),
            "closed txn1 dp1 lost"
        );
        assert_eq!(
            dispute("dispute_opened", "retrieval"),
            "ignored no_funds_moved"
        );
    }

    #[test]
    fn a_byte_changed_a_foreign_public_key_or_another_private_key_does_not_verify() {
        let body = sample_form(PUBLIC, PRIVATE, &xml("check", ""));
        assert!(scheme().check(&body).is_ok());
        let text = String::from_utf8(body.clone()).unwrap();
        let (signature, payload) = fields(&body).unwrap();
        // One character of the payload changed (the signature is over the payload as sent).
        let mut changed = payload.clone().into_bytes();
        changed[10] = if changed[10] == b'A' { b'B' } else { b'A' };
        let tampered = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", &signature)
            .append_pair("bt_payload", std::str::from_utf8(&changed).unwrap())
            .finish();
        assert_eq!(
            scheme().check(tampered.as_bytes()),
            Err(SignatureError::NoMatch)
        );
        let other_public = BraintreeScheme::with_keys("another_public_key", [PRIVATE]);
        assert!(other_public.check(&body).is_err());
        let other_private = BraintreeScheme::with_keys(PUBLIC, ["another-private-key-0002"]);
        assert_eq!(other_private.check(&body), Err(SignatureError::NoMatch));
        let rotated = BraintreeScheme::with_keys(PUBLIC, ["another-private-key-0002", PRIVATE]);
        assert!(rotated.check(text.as_bytes()).is_ok());
    }

    #[test]
    fn a_payload_only_sample_is_signed_and_a_signed_body_is_sent_unchanged() {
        let sample = BraintreeFormat.sample(
            "payment.succeeded",
            &Sample {
                event_id: "evt_1".into(),
                payment_id: "txn9".into(),
                order_id: Some(7),
                amount_minor: 4620,
                currency: "EUR".into(),
            },
        );
        let signed = scheme().sign("", sample.as_bytes(), 0).unwrap();
        let body = signed.body.unwrap();
        assert!(scheme().check(&body).is_ok());
        assert!(scheme().sign("", &body, 0).unwrap().body.is_none());
    }
}
