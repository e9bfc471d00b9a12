//! Mollie: a webhook is a form body `id=tr_...` and nothing else, unsigned. The gateway asks
//! Mollie's API, `GET {api_base_url}/v2/payments/{id}` with the provider's `api_key`, and the
//! payment it answers is the event: its status, amount, `amountRefunded` and
//! `amountChargedBack`. The event id is that state, `{id}:{status}:{amountRefunded}:
//! {amountChargedBack}`, so two webhooks that see one state are one event and a later state is
//! a new one; the books move to the state by what they do not hold yet
//! ([`crate::payments::snapshot`]), so money never moves twice.
//!
//! What is stored (the event's body) is what the gateway read from the answer, written by the
//! gateway: the id, status, amounts and the order reference (`metadata.order_id`), a function
//! of the event id and of fields that do not change, so a redelivery is the same bytes. An id
//! the API does not know (404) is a stored `rejected`, reason `unknown_resource`, under
//! `{id}:unknown_resource`: a forged id moves nothing and learns nothing.
//!
//! Money: `paid` is a capture (the status stays `paid` after refunds and chargebacks);
//! `failed`, `canceled` and `expired` a failed payment; `open`, `pending` and `authorized`
//! move nothing. Refunds are `amountRefunded` and chargebacks `amountChargedBack`, cumulative;
//! Mollie's chargeback fee is not in the payment, so none is booked. Amounts are decimal
//! strings (`"10.00"`), converted with the currency's ISO 4217 exponent exactly.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::body::{self, Object, Unusable, invalid};
use super::connector::{
    Connector, FORM, FetchedEvent, Format, Naming, Rejection, Sample, Signed, Unsignable,
    Verification, Verified,
};
use super::fetch::{self, Fetched, ProviderApi, path_safe};
use crate::config::providers::ProviderSettings;
use crate::payments::event::{
    Parsed, PayloadError, PaymentSnapshot, Reading, SnapshotStatus, check_event_id,
};
use crate::signature::scheme::HeaderSource;

/// The reason of an id the provider's API does not know.
pub const UNKNOWN_RESOURCE: &str = "unknown_resource";

pub struct MollieScheme {
    api: Option<ProviderApi>,
}

impl MollieScheme {
    pub fn new(settings: &ProviderSettings, fetches: Option<&IntCounterVec>) -> Self {
        Self {
            api: fetch::api_of(settings, &[], fetches),
        }
    }
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
    chargebacks: Option<Vec<Chargeback>>,
}

/// One of the payment's chargebacks: its amount, and when it was reversed (the bank gave the
/// money back).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chargeback {
    amount: Amount,
    #[serde(default)]
    reversed_at: Option<String>,
}

/// The chargebacks still standing, in minor units, and how many were reversed; `None` when the
/// answer lists none reversed (the payment's own `amountChargedBack` then stands) or a listed
/// amount cannot be read.
fn after_reversals(chargebacks: &[Chargeback], currency: &str) -> Option<(i64, usize)> {
    let reversed = chargebacks
        .iter()
        .filter(|c| c.reversed_at.is_some())
        .count();
    if reversed == 0 {
        return None;
    }
    let currency = crate::money::Currency::parse(currency)?;
    let mut standing: i64 = 0;
    for chargeback in chargebacks.iter().filter(|c| c.reversed_at.is_none()) {
        if chargeback.amount.currency != currency.code() {
            return None;
        }
        let minor =
            body::decimal_in_minor_units(&chargeback.amount.value, currency, "chargeback").ok()?;
        standing = standing.checked_add(minor.get())?;
    }
    Some((standing, reversed))
}

/// What the gateway stores for a Mollie event: the payment's id and, as the API answered it,
/// the fields the mapping reads (`payment` is null for an id the API does not know).
#[derive(Serialize, Deserialize)]
struct Stored<'a> {
    id: Cow<'a, str>,
    #[serde(borrow)]
    payment: Option<StoredPayment<'a>>,
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
    /// How many of its chargebacks were reversed (absent when none): `amountChargedBack` is
    /// then what still stands after them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reversed_chargebacks: Option<usize>,
}

/// The event of the API's answer `answer` about payment `id`; `Err` for an answer that is
/// not a payment (the delivery is then unavailable: nothing is decided on it).
pub fn event_of(id: &str, answer: &Fetched) -> Result<FetchedEvent, String> {
    let payment = match answer {
        Fetched::NotFound => {
            let body = serde_json::to_vec(&Stored {
                id: Cow::Borrowed(id),
                payment: None,
            })
            .map_err(|e| e.to_string())?;
            return Ok(FetchedEvent {
                event_id: format!("{id}:{UNKNOWN_RESOURCE}"),
                body,
            });
        }
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
    let value = |amount: &Option<Amount>| {
        amount
            .as_ref()
            .map_or_else(|| "0".to_owned(), |a| a.value.clone())
    };
    // A reversed chargeback gives money back: the state is then what still stands, and the
    // reversals are counted into the event id, so a payment that comes back to an amount a
    // webhook already saw (0, then 5.00 charged back, then 0 again) is a new event that moves
    // the money back, not a replay of the first.
    let reversals = payment
        .embedded
        .as_ref()
        .and_then(|e| e.chargebacks.as_deref())
        .and_then(|list| after_reversals(list, &payment.amount.currency));
    let mut amount_charged_back = payment.amount_charged_back;
    if let Some((standing, _)) = reversals {
        let standing = crate::money::major_units(i128::from(standing), &payment.amount.currency)
            .ok_or_else(|| "Mollie's payment is in a currency without a minor unit".to_owned())?;
        amount_charged_back = Some(Amount {
            value: standing,
            currency: payment.amount.currency.clone(),
        });
    }
    let mut event_id = format!(
        "{id}:{}:{}:{}",
        payment.status,
        value(&payment.amount_refunded),
        value(&amount_charged_back)
    );
    if let Some((_, reversed)) = reversals {
        event_id.push_str(&format!(":r{reversed}"));
    }
    check_event_id(&event_id).map_err(|e| e.0)?;
    let body = serde_json::to_vec(&Stored {
        id: Cow::Borrowed(id),
        payment: Some(StoredPayment {
            status: payment.status,
            amount: payment.amount,
            amount_refunded: payment.amount_refunded,
            amount_charged_back,
            order_id,
            reversed_chargebacks: reversals.map(|(_, reversed)| reversed),
        }),
    })
    .map_err(|e| e.to_string())?;
    Ok(FetchedEvent { event_id, body })
}

impl Connector for MollieScheme {
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
            // The chargebacks embedded: a reversed one is visible only in them.
            let answer = api
                .get(&format!("/v2/payments/{id}?embed=chargebacks"))
                .await?;
            let event = event_of(&id, &answer).map_err(Rejection::Unavailable)?;
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
            None => format!("{}:{UNKNOWN_RESOURCE}", stored.id),
            Some(p) => {
                let value =
                    |a: &Option<Amount>| a.as_ref().map_or("0", |a| a.value.as_str()).to_owned();
                let reversals = p
                    .reversed_chargebacks
                    .map_or_else(String::new, |reversed| format!(":r{reversed}"));
                format!(
                    "{}:{}:{}:{}{reversals}",
                    stored.id,
                    p.status,
                    value(&p.amount_refunded),
                    value(&p.amount_charged_back)
                )
            }
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
    Ok(Parsed::Snapshot(Box::new(PaymentSnapshot {
        payment_id: top.id("id")?,
        order_id: payment.order_id("orderId"),
        currency,
        status,
        refunded_total: total("amountRefunded")?,
        charged_back_total: total("amountChargedBack")?,
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
        assert_eq!((s.refunded_total, s.charged_back_total), (250, 100));
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
        let scheme = MollieScheme { api: None };
        let signed = scheme.sign(&event.event_id, &event.body, 0).unwrap();
        assert_eq!(signed.body.as_deref(), Some(&b"id=tr_WDqYK6vllg"[..]));
        assert_eq!(signed.content_type, FORM);
    }
}
