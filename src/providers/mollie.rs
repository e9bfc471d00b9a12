//! Mollie: a webhook is a form body `id=tr_...` and nothing else, unsigned. The gateway asks
//! Mollie's API, `GET {api_base_url}/v2/payments/{id}?embed=refunds,chargebacks` with the
//! provider's `api_key`, and the payment it answers is the event: its status, amount,
//! `amountRefunded`, `amountChargedBack`, and its refunds and chargebacks, each by its id. The
//! event id is that state, `{id}:{status}:{amountRefunded}:{amountChargedBack}`, with a digest
//! of the refunds' and chargebacks' ids and states when it has any, so two webhooks that see
//! one state are one event and a later state is a new one; the books move to the state by what
//! they do not hold yet, by the refunds' and chargebacks' own ids
//! ([`crate::payments::snapshot`]), so money never moves twice and never back on an older
//! state.
//!
//! What is stored (the event's body) is what the gateway read from the answer, written by the
//! gateway: the id, status, amounts and the order reference (`metadata.order_id`), a function
//! of the event id and of fields that do not change, so a redelivery is the same bytes. An id
//! the API does not know (404) is a stored `rejected`, reason `unknown_resource`, under
//! `{id}:unknown_resource`: a forged id moves nothing and learns nothing.
//!
//! Money: `paid` is a capture (the status stays `paid` after refunds and chargebacks);
//! `failed`, `canceled` and `expired` a failed payment; `open`, `pending` and `authorized`
//! move nothing. A refund stands while it is `queued`, `pending`, `processing` or `refunded`
//! (what `amountRefunded` counts); one that is `failed` or `canceled` after the books held it
//! is given back. A chargeback is withdrawn, and reinstated once it has `reversedAt`; a second
//! one after a reversal is a chargeback of its own. Mollie's chargeback fee is not in the
//! payment, so none is booked. Amounts are decimal strings (`"10.00"`), converted with the
//! currency's ISO 4217 exponent exactly.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::body::{self, Object, Unusable, invalid};
use super::connector::{
    Answer, Connector, FORM, FetchedEvent, Format, JSON, Naming, Rejection, Sample, Signed,
    Unsignable, Verification, Verified,
};
use super::fetch::{self, Fetched, ProviderApi, UNKNOWN_RESOURCE, UNUSABLE_ANSWER, path_safe};
use crate::config::providers::{ProviderSettings, ResourceOwner};
use crate::payments::event::{
    Parsed, PayloadError, PaymentSnapshot, Reading, SnapshotChargeback, SnapshotRefund,
    SnapshotRefunds, SnapshotStatus, check_event_id,
};
use crate::signature::scheme::HeaderSource;

pub struct MollieScheme {
    api: Option<ProviderApi>,
    /// The profile and mode the payments must belong to, where configured.
    owner: ResourceOwner,
}

impl MollieScheme {
    pub fn new(settings: &ProviderSettings, fetches: Option<&IntCounterVec>) -> Self {
        Self {
            api: fetch::api_of(settings, &[], fetches),
            owner: settings
                .fetch_api
                .as_ref()
                .map(|api| api.owner.clone())
                .unwrap_or_default(),
        }
    }
}

/// Why Mollie's answer is a payment of another account than the configured `owner`, if it is:
/// the key reads every payment of its organisation, across profiles and modes.
fn foreign(owner: &ResourceOwner, answer: &Fetched) -> Option<String> {
    let Fetched::Found(bytes) = answer else {
        return None;
    };
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Account {
        #[serde(default)]
        profile_id: Option<String>,
        #[serde(default)]
        mode: Option<String>,
    }
    let account: Account = serde_json::from_slice(bytes).ok()?;
    for (what, expected, found) in [
        ("profile", &owner.profile_id, &account.profile_id),
        ("mode", &owner.mode, &account.mode),
    ] {
        if let Some(expected) = expected
            && found.as_ref() != Some(expected)
        {
            return Some(format!(
                "the payment's {what} is {}, not the configured {expected}",
                found.as_deref().unwrap_or("absent")
            ));
        }
    }
    None
}

/// The payment id a webhook names: its form's one `id`, which must be a payment's (`tr_`) and
/// safe in a URL path.
pub fn payment_id_of(body: &[u8]) -> Result<String, String> {
    let mut ids = url::form_urlencoded::parse(body).filter(|(name, _)| name == "id");
    let (Some((_, id)), None) = (ids.next(), ids.next()) else {
        return Err("a Mollie webhook is a form with one id".into());
    };
    if !(id.len() > 3 && id.starts_with("tr_") && path_safe(&id)) {
        return Err(format!(
            "{:?} is not a Mollie payment id (tr_ and letters or digits)",
            id.chars().take(70).collect::<String>()
        ));
    }
    Ok(id.into_owned())
}

/// An amount as Mollie writes it.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
struct Amount {
    value: String,
    currency: String,
}

/// The fields of Mollie's payment the gateway reads (a derived struct refuses a repeated name).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Payment<'a> {
    id: Cow<'a, str>,
    status: Cow<'a, str>,
    amount: Amount,
    #[serde(default)]
    amount_refunded: Option<Amount>,
    #[serde(default)]
    amount_charged_back: Option<Amount>,
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    /// The payment's chargebacks, asked for with `embed=chargebacks`.
    #[serde(default, rename = "_embedded")]
    embedded: Option<Embedded>,
}

#[derive(Deserialize)]
struct Embedded {
    #[serde(default)]
    refunds: Option<Vec<Refund>>,
    #[serde(default)]
    chargebacks: Option<Vec<Chargeback>>,
}

/// One of the payment's refunds: its id, amount and status.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
struct Refund {
    id: String,
    amount: Amount,
    status: String,
}

/// One of the payment's chargebacks: its id, amount, and when it was reversed (the bank gave
/// the money back).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
struct Chargeback {
    id: String,
    amount: Amount,
    #[serde(default)]
    reversed_at: Option<String>,
}

/// Whether a refund in `status` stands: what `amountRefunded` counts.
fn refund_stands(status: &str) -> bool {
    !matches!(status, "failed" | "canceled")
}

/// What the gateway stores for a Mollie event: the payment's id and, as the API answered it,
/// the fields the mapping reads (`payment` is null for an id the API does not know).
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    id: Cow<'a, str>,
    #[serde(borrow)]
    payment: Option<StoredPayment<'a>>,
    /// Why the API's answer could not be used (`payment` is then null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unusable: Option<Cow<'a, str>>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredPayment<'a> {
    status: Cow<'a, str>,
    amount: Amount,
    amount_refunded: Option<Amount>,
    amount_charged_back: Option<Amount>,
    #[serde(borrow)]
    order_id: Option<&'a RawValue>,
    /// The refunds and chargebacks as embedded (absent when the answer embedded none; events
    /// stored by older versions have neither).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refunds: Option<Vec<Refund>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chargebacks: Option<Vec<Chargeback>>,
}

impl StoredPayment<'_> {
    /// The event id of this state of payment `id`: `{id}:{status}:{amountRefunded}:
    /// {amountChargedBack}`, then, when it has refunds or chargebacks, the first 12 hex digits
    /// of the SHA-256 of their ids and states: a refund that failed or a chargeback reversed
    /// while the totals stay (or come back to what a webhook saw before) is a new state.
    fn event_id(&self, id: &str) -> String {
        let value = |a: &Option<Amount>| a.as_ref().map_or("0", |a| a.value.as_str()).to_owned();
        let mut event_id = format!(
            "{id}:{}:{}:{}",
            self.status,
            value(&self.amount_refunded),
            value(&self.amount_charged_back)
        );
        let refunds = self.refunds.as_deref().unwrap_or_default();
        let chargebacks = self.chargebacks.as_deref().unwrap_or_default();
        if !refunds.is_empty() || !chargebacks.is_empty() {
            use sha2::{Digest, Sha256};
            let mut digest = Sha256::new();
            for refund in refunds {
                digest.update(format!(
                    "r:{}:{}:{};",
                    refund.id, refund.amount.value, refund.status
                ));
            }
            for chargeback in chargebacks {
                let reversed = chargeback.reversed_at.is_some();
                digest.update(format!(
                    "c:{}:{}:{reversed};",
                    chargeback.id, chargeback.amount.value
                ));
            }
            event_id.push(':');
            event_id.push_str(&hex::encode(digest.finalize())[..12]);
        }
        event_id
    }
}

/// The event of the API's answer `answer` about payment `id`; `Err` for an answer that is
/// not a payment (the delivery is then unavailable: nothing is decided on it).
pub fn event_of(id: &str, answer: &Fetched) -> Result<FetchedEvent, String> {
    let payment = match answer {
        Fetched::NotFound => {
            let body = serde_json::to_vec(&Stored {
                id: Cow::Borrowed(id),
                payment: None,
                unusable: None,
            })
            .map_err(|e| e.to_string())?;
            return Ok(FetchedEvent {
                event_id: format!("{id}:{UNKNOWN_RESOURCE}"),
                body,
            });
        }
        Fetched::Unusable(why) => return unusable_event(id, why),
        Fetched::Found(bytes) => bytes,
    };
    let payment: Payment<'_> = serde_json::from_slice(payment)
        .map_err(|e| format!("Mollie's answer is not a payment: {e}"))?;
    if payment.id != id {
        return Err(format!(
            "Mollie answered payment {:?} when asked for {id}",
            payment.id
        ));
    }
    let order_id = match payment.metadata {
        Some(metadata) if metadata.get().trim_start().starts_with('{') => {
            #[derive(Deserialize)]
            struct Metadata<'a> {
                #[serde(default, borrow)]
                order_id: Option<&'a RawValue>,
            }
            serde_json::from_str::<Metadata<'_>>(metadata.get())
                .ok()
                .and_then(|m| m.order_id)
        }
        _ => None,
    };
    let embedded = payment.embedded.unwrap_or(Embedded {
        refunds: None,
        chargebacks: None,
    });
    let stored = StoredPayment {
        status: payment.status,
        amount: payment.amount,
        amount_refunded: payment.amount_refunded,
        amount_charged_back: payment.amount_charged_back,
        order_id,
        refunds: embedded.refunds,
        chargebacks: embedded.chargebacks,
    };
    let event_id = stored.event_id(id);
    check_event_id(&event_id).map_err(|e| e.0)?;
    let body = serde_json::to_vec(&Stored {
        id: Cow::Borrowed(id),
        payment: Some(stored),
        unusable: None,
    })
    .map_err(|e| e.to_string())?;
    Ok(FetchedEvent { event_id, body })
}

/// The stored rejection of an answer about payment `id` that could not be used (`why`).
fn unusable_event(id: &str, why: &str) -> Result<FetchedEvent, String> {
    let body = serde_json::to_vec(&Stored {
        id: Cow::Borrowed(id),
        payment: None,
        unusable: Some(Cow::Borrowed(why)),
    })
    .map_err(|e| e.to_string())?;
    Ok(FetchedEvent {
        event_id: format!("{id}:{UNUSABLE_ANSWER}"),
        body,
    })
}

/// What every Mollie delivery is answered once stored: Mollie needs only the 2xx, and an
/// unsigned caller must learn nothing of the payment its id names (its status, its amounts:
/// the stored ack's event id carries both). The ack itself is kept in the idempotency record
/// and the event log.
pub const ANSWER: &str = r#"{"received":true}"#;

impl Connector for MollieScheme {
    fn signed(&self) -> bool {
        false
    }

    fn answer(&self) -> Answer {
        Answer::Fixed {
            body: ANSWER,
            content_type: JSON,
        }
    }

    fn verify<'a>(
        &'a self,
        _headers: &'a dyn HeaderSource,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        let id = match payment_id_of(body) {
            Ok(id) => id,
            Err(detail) => {
                return Verification::Done(Ok(Verified::new(None, Naming::Unusable(detail))));
            }
        };
        let Some(api) = &self.api else {
            return Verification::Done(Err(fetch::no_api()));
        };
        Verification::Pending(Box::pin(async move {
            // The refunds and chargebacks embedded: each is matched by its id, and a failed
            // refund or a reversed chargeback is visible only in them.
            let answer = api
                .get(&format!("/v2/payments/{id}?embed=refunds,chargebacks"))
                .await?;
            // An answer that is not the payment, or a payment of another profile or mode,
            // comes the same on every retry: stored.
            let event = match foreign(&self.owner, &answer) {
                Some(why) => unusable_event(&id, &why),
                None => event_of(&id, &answer).or_else(|why| unusable_event(&id, &why)),
            }
            .map_err(Rejection::Unavailable)?;
            Ok(Verified::new(None, Naming::Fetched(vec![event])))
        }))
    }

    /// Mollie signs nothing: a webhook is its payment id, taken from a stored event (or a
    /// sample) as the form Mollie posts. The gateway asks the API again when it arrives.
    fn sign(&self, _event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        let id = match serde_json::from_slice::<Stored<'_>>(body) {
            Ok(stored) => stored.id.into_owned(),
            Err(_) => payment_id_of(body).map_err(Unsignable)?,
        };
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("id", &id)
            .finish();
        Ok(Signed {
            body: Some(form.into_bytes()),
            content_type: FORM,
            ..Signed::headers(Vec::new())
        })
    }
}

/// Mollie's payment, as the gateway stored it from the API's answer.
pub struct MollieFormat;

impl Format for MollieFormat {
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
        let payment = match top.object_if_any("payment") {
            Ok(Some(payment)) => payment,
            Ok(None) if top.member("unusable").is_some() => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::Rejected {
                        reason: UNUSABLE_ANSWER,
                        detail: format!(
                            "Mollie's answer about {} could not be used: {}",
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
                            "Mollie's API knows no payment {}",
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
        let parsed = match snapshot(&top, &payment) {
            Ok(parsed) => parsed,
            Err(unusable) => body::unusable(unusable),
        };
        Reading {
            event_type: status.map(|s| format!("payment.{s}")),
            parsed,
        }
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        let stored: Stored<'_> = serde_json::from_slice(body)
            .map_err(|_| invalid("not a Mollie event as the gateway stores it"))?;
        let id = match stored.payment {
            None if stored.unusable.is_some() => format!("{}:{UNUSABLE_ANSWER}", stored.id),
            None => format!("{}:{UNKNOWN_RESOURCE}", stored.id),
            Some(p) => p.event_id(&stored.id),
        };
        check_event_id(&id)?;
        Ok(id)
    }

    /// The webhook Mollie would post about the sample's payment (its id only): the gateway asks
    /// the API about it, so it answers only where `api_base_url` is an emulator that knows it.
    fn sample(&self, _event_type: &str, s: &Sample) -> String {
        let id: String = s
            .payment_id
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(60)
            .collect();
        format!("id=tr_{id}")
    }
}

/// The payment's state as a snapshot.
fn snapshot(top: &Object<'_>, payment: &Object<'_>) -> Result<Parsed, Unusable> {
    let amount = payment.object("amount")?;
    let currency = amount.currency("currency", false)?;
    let total = |name: &str| -> Result<i64, Unusable> {
        match payment.object_if_any(name)? {
            None => Ok(0),
            Some(total) => {
                if total.currency("currency", false)? != currency {
                    return Err(Unusable::Invalid(invalid(format!(
                        "payment.{name} is in another currency than the payment"
                    ))));
                }
                total.decimal_total("value", currency)
            }
        }
    };
    let status = match payment.string("status").as_deref() {
        Some("paid") => SnapshotStatus::Captured(amount.decimal_amount("value", currency)?),
        Some("failed" | "canceled" | "expired") => SnapshotStatus::Failed,
        Some("open" | "pending" | "authorized") => SnapshotStatus::Pending,
        Some(_) => return Ok(Parsed::Ignored("unsupported_status")),
        None => {
            return Err(Unusable::Invalid(invalid(
                "payment.status must be a string",
            )));
        }
    };
    let payment_id = top.id("id")?;
    let money = |item: &Object<'_>, what: &str| -> Result<i64, Unusable> {
        let amount = item.object("amount")?;
        if amount.currency("currency", false)? != currency {
            return Err(Unusable::Invalid(invalid(format!(
                "a {what} is in another currency than the payment"
            ))));
        }
        amount.decimal_total("value", currency)
    };
    // Answers without the lists (stored by older versions, or not embedded): the totals.
    let refunds = match payment.member("refunds") {
        Some(_) => SnapshotRefunds::Listed(
            payment
                .objects("refunds")?
                .iter()
                .map(|refund| {
                    Ok(SnapshotRefund {
                        id: refund.id("id")?,
                        amount_minor: money(refund, "refund")?,
                        standing: refund_stands(&refund.string("status").unwrap_or_default()),
                    })
                })
                .collect::<Result<_, Unusable>>()?,
        ),
        None => SnapshotRefunds::Total(total("amountRefunded")?),
    };
    let chargebacks = match payment.member("chargebacks") {
        Some(_) => payment
            .objects("chargebacks")?
            .iter()
            .map(|chargeback| {
                Ok(SnapshotChargeback {
                    id: chargeback.id("id")?,
                    amount_minor: money(chargeback, "chargeback")?,
                    reversed: !chargeback.is_null("reversedAt")
                        && chargeback.member("reversedAt").is_some(),
                })
            })
            .collect::<Result<_, Unusable>>()?,
        None => match total("amountChargedBack")? {
            0 => Vec::new(),
            // Not itemised: one chargeback of the payment, never reversed from a total.
            total => vec![SnapshotChargeback {
                id: format!("{payment_id}:chargeback"),
                amount_minor: total,
                reversed: false,
            }],
        },
    };
    Ok(Parsed::Snapshot(Box::new(PaymentSnapshot {
        payment_id,
        order_id: payment.order_id("orderId"),
        currency,
        status,
        refunds,
        chargebacks,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payments::event::SnapshotStatus;

    fn payment(status: &str, refunded: &str, charged_back: &str) -> Vec<u8> {
        format!(
            r#"{{"resource":"payment","id":"tr_WDqYK6vllg","mode":"test","amount":{{"value":"10.00","currency":"EUR"}},"amountRefunded":{{"value":"{refunded}","currency":"EUR"}},"amountChargedBack":{{"value":"{charged_back}","currency":"EUR"}},"status":"{status}","metadata":{{"order_id":"12345"}},"_links":{{}}}}"#
        )
        .into_bytes()
    }

    fn read(event: &FetchedEvent) -> Parsed {
        MollieFormat.read(&event.body).parsed
    }

    #[test]
    fn only_a_form_with_one_payment_id_names_a_payment() {
        assert_eq!(payment_id_of(b"id=tr_WDqYK6vllg").unwrap(), "tr_WDqYK6vllg");
        for bad in [
            &b"id=ord_1"[..],
            b"id=tr_1%2F..%2Fx",
            b"id=tr_1&id=tr_2",
            b"x=tr_1",
            b"",
            b"id=tr_",
        ] {
            assert!(payment_id_of(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_event_id_is_the_fetched_state_and_its_body_the_same_bytes_for_the_same_state() {
        let first = event_of(
            "tr_WDqYK6vllg",
            &Fetched::Found(payment("paid", "0.00", "0.00")),
        )
        .unwrap();
        assert_eq!(first.event_id, "tr_WDqYK6vllg:paid:0.00:0.00");
        // Another answer with other fields the gateway does not read: the same event.
        let mut other = String::from_utf8(payment("paid", "0.00", "0.00")).unwrap();
        other = other.replace(r#""mode":"test""#, r#""mode":"test","description":"x""#);
        let again = event_of("tr_WDqYK6vllg", &Fetched::Found(other.into_bytes())).unwrap();
        assert_eq!(again, first);
        assert_eq!(MollieFormat.event_id(&first.body).unwrap(), first.event_id);
        let refunded = event_of(
            "tr_WDqYK6vllg",
            &Fetched::Found(payment("paid", "2.50", "0.00")),
        )
        .unwrap();
        assert_eq!(refunded.event_id, "tr_WDqYK6vllg:paid:2.50:0.00");
    }

    #[test]
    fn a_paid_payment_is_a_capture_with_its_refunds_and_chargebacks_in_minor_units() {
        let event = event_of(
            "tr_WDqYK6vllg",
            &Fetched::Found(payment("paid", "2.50", "1.00")),
        )
        .unwrap();
        let Parsed::Snapshot(s) = read(&event) else {
            panic!("a snapshot expected");
        };
        assert_eq!(s.order_id, Some(12345));
        assert!(matches!(s.status, SnapshotStatus::Captured(a) if a.get() == 1000));
        // Without the lists embedded: the totals, one chargeback of the payment.
        assert_eq!(s.refunds, SnapshotRefunds::Total(250));
        assert_eq!(
            s.chargebacks,
            vec![SnapshotChargeback {
                id: "tr_WDqYK6vllg:chargeback".into(),
                amount_minor: 100,
                reversed: false,
            }]
        );
        let failed = event_of(
            "tr_WDqYK6vllg",
            &Fetched::Found(payment("expired", "0", "0")),
        )
        .unwrap();
        assert!(matches!(read(&failed), Parsed::Snapshot(s) if s.status == SnapshotStatus::Failed));
        let odd = event_of(
            "tr_WDqYK6vllg",
            &Fetched::Found(payment("paid", "2.505", "0")),
        )
        .unwrap();
        assert!(matches!(
            read(&odd),
            Parsed::Rejected {
                reason: "invalid_amount",
                ..
            }
        ));
    }

    #[test]
    fn an_id_the_api_does_not_know_is_a_stored_rejection() {
        let event = event_of("tr_forged", &Fetched::NotFound).unwrap();
        assert_eq!(event.event_id, "tr_forged:unknown_resource");
        assert!(matches!(
            read(&event),
            Parsed::Rejected {
                reason: UNKNOWN_RESOURCE,
                ..
            }
        ));
        assert_eq!(MollieFormat.event_id(&event.body).unwrap(), event.event_id);
    }

    #[test]
    fn an_answer_about_another_payment_or_no_payment_decides_nothing() {
        assert!(event_of("tr_other", &Fetched::Found(payment("paid", "0", "0"))).is_err());
        assert!(event_of("tr_x", &Fetched::Found(b"<html>".to_vec())).is_err());
    }

    #[test]
    fn a_stored_event_is_sent_again_as_the_webhook_mollie_posts() {
        let event = event_of("tr_WDqYK6vllg", &Fetched::Found(payment("paid", "0", "0"))).unwrap();
        let scheme = MollieScheme {
            api: None,
            owner: ResourceOwner::default(),
        };
        let signed = scheme.sign(&event.event_id, &event.body, 0).unwrap();
        assert_eq!(signed.body.as_deref(), Some(&b"id=tr_WDqYK6vllg"[..]));
        assert_eq!(signed.content_type, FORM);
    }
}
