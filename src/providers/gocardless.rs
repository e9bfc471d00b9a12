//! GoCardless: `Webhook-Signature` is the hex HMAC-SHA256 of the raw body under the webhook
//! endpoint's secret (its UTF-8 bytes). The body is `{"events":[..]}`, unrelated events
//! batched; each is its own event (record, ack, ledger change), keyed by its `id`, as Adyen's
//! items are. Events carry no amounts: for the ones that move money the gateway asks the API,
//! `GET {api_base_url}/payments/{links.payment}` (or `/refunds/{links.refund}` for a refund,
//! whose event names only the refund), with the `api_key` and `GoCardless-Version`. A fetch
//! runs only after the signature held, and any fetch that cannot be made answers the whole
//! delivery 503 (nothing stored; GoCardless retries it).
//!
//! What is stored per event: the event as GoCardless sent it, with the fields the mapping
//! reads from the API's answer (amount, currency, order reference; a refund's payment), which
//! do not change, so a redelivery is the same bytes. A resource the API does not know is a
//! stored `rejected`, reason `unknown_resource`.
//!
//! Money: `payments` `confirmed` (collected) and `paid_out` capture the payment (whichever
//! comes first; the other finds it captured); `failed` is a failed payment; `charged_back` and
//! `late_failure` (collected, then failed by the bank) withdraw the payment's amount under the
//! reporting event's id (no fee: GoCardless gives none in the payment), so a payment charged
//! back again after `chargeback_cancelled` is a second withdrawal; `chargeback_cancelled` gives
//! one of the payment's withdrawals back. `refunds` `created`, `paid` and `refund_settled`
//! refund the refund's amount once (its id is the refund id); `failed`, `bounced` and
//! `funds_returned` give it back (a `refund_reversal`, reason `refund_returned`). Amounts are
//! integers in the currency's minor unit. Everything else is acknowledged `ignored`.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use prometheus::IntCounterVec;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;

use super::body::{self, Object, Unusable, invalid};
use super::connector::{
    Connector, FetchedEvent, Format, Naming, Rejection, Sample, Signed, Unsignable, Verification,
    Verified,
};
use super::fetch::{self, Fetched, ProviderApi, UNKNOWN_RESOURCE, UNUSABLE_ANSWER, path_safe};
use crate::config::providers::ProviderSettings;
use crate::payments::event::{
    DisputeChange, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount, check_event_id,
};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError};

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "Webhook-Signature";
/// The API version every call names (GoCardless requires the header).
const API_HEADERS: &[(&str, &str)] = &[("GoCardless-Version", "2015-07-06")];

pub struct GocardlessScheme {
    keys: Keys,
    api: Option<ProviderApi>,
    /// The creditor the payments must belong to, where configured.
    creditor: Option<String>,
}

#[derive(Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    events: Vec<&'a RawValue>,
}

/// The fields of an event the gateway reads.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    resource_type: Cow<'a, str>,
    #[serde(borrow)]
    action: Cow<'a, str>,
    #[serde(default, borrow)]
    links: Option<Links<'a>>,
}

#[derive(Deserialize, Default)]
struct Links<'a> {
    #[serde(default, borrow)]
    payment: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refund: Option<Cow<'a, str>>,
}

/// What the API is asked for an event of `resource_type` and `action`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asks {
    Payment,
    Refund,
    Nothing,
}

fn asks(resource_type: &str, action: &str) -> Asks {
    match (resource_type, action) {
        (
            "payments",
            "confirmed"
            | "paid_out"
            | "failed"
            | "charged_back"
            | "chargeback_cancelled"
            | "late_failure",
        ) => Asks::Payment,
        (
            "refunds",
            "created" | "paid" | "refund_settled" | "failed" | "funds_returned" | "bounced",
        ) => Asks::Refund,
        _ => Asks::Nothing,
    }
}

#[derive(Deserialize)]
struct PaymentLinks<'a> {
    #[serde(default, borrow)]
    creditor: Option<Cow<'a, str>>,
}

/// The answer of `GET /payments/{id}`, in its envelope.
#[derive(Deserialize)]
struct PaymentAnswer<'a> {
    #[serde(borrow)]
    payments: ApiPayment<'a>,
}

#[derive(Deserialize)]
struct ApiPayment<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(default, borrow)]
    links: Option<PaymentLinks<'a>>,
    #[serde(borrow)]
    amount: &'a RawValue,
    #[serde(borrow)]
    currency: Cow<'a, str>,
    #[serde(default, borrow)]
    metadata: Option<Metadata<'a>>,
}

#[derive(Deserialize, Default)]
struct Metadata<'a> {
    #[serde(default, borrow)]
    order_id: Option<&'a RawValue>,
}

/// The answer of `GET /refunds/{id}`, in its envelope.
#[derive(Deserialize)]
struct RefundAnswer<'a> {
    #[serde(borrow)]
    refunds: ApiRefund<'a>,
}

#[derive(Deserialize)]
struct ApiRefund<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    amount: &'a RawValue,
    #[serde(borrow)]
    currency: Cow<'a, str>,
    #[serde(borrow)]
    links: Links<'a>,
}

/// What the gateway stores for one GoCardless event: the event as sent, and what the API said
/// (`null`: it does not know the resource; absent: not asked).
#[derive(Serialize)]
struct Stored<'a> {
    event: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    payment: Option<Option<serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refund: Option<Option<serde_json::Value>>,
    /// Why the API's answer could not be used: the same on every retry, so a stored rejection.
    #[serde(skip_serializing_if = "Option::is_none")]
    unusable: Option<String>,
}

impl GocardlessScheme {
    pub fn new(settings: &ProviderSettings, fetches: Option<&IntCounterVec>) -> Self {
        Self {
            keys: Keys::utf8(settings.secrets.iter().map(Secret::expose), 0),
            api: fetch::api_of(settings, API_HEADERS, fetches),
            creditor: settings
                .fetch_api
                .as_ref()
                .and_then(|api| api.owner.creditor.clone()),
        }
    }

    /// The signature check alone.
    pub fn check(&self, headers: &dyn HeaderSource, body: &[u8]) -> Result<(), SignatureError> {
        let signature = headers
            .header(SIGNATURE_HEADER)
            .ok_or(SignatureError::MissingHeader(SIGNATURE_HEADER))?;
        let candidate = hex::decode(signature.trim())
            .map_err(|_| SignatureError::MalformedHeader(SIGNATURE_HEADER))?;
        self.keys.check_untimed(&[body], &[candidate])
    }

    /// What the API is asked for `item` (the resource's path), and its fields; `Err` for an
    /// event the gateway cannot key.
    fn plan(item: &RawValue) -> Result<(Item<'_>, Option<String>), Rejection> {
        let fields: Item<'_> = serde_json::from_str(item.get())
            // Not an event the gateway can key: the whole delivery is unusable (400).
            .map_err(|_| Rejection::Refused(SignatureError::MalformedHeader("events[]")))?;
        let links = fields.links.as_ref();
        let path = match asks(&fields.resource_type, &fields.action) {
            Asks::Payment => links
                .and_then(|l| l.payment.as_deref())
                .filter(|id| path_safe(id))
                .map(|id| format!("/payments/{id}")),
            Asks::Refund => links
                .and_then(|l| l.refund.as_deref())
                .filter(|id| path_safe(id))
                .map(|id| format!("/refunds/{id}")),
            Asks::Nothing => None,
        };
        Ok((fields, path))
    }

    /// The stored event of `item`, with the API's `answer` about its resource.
    fn event(
        &self,
        item: &RawValue,
        fields: Item<'_>,
        answer: Option<&Fetched>,
    ) -> Result<FetchedEvent, Rejection> {
        let links = fields.links.unwrap_or_default();
        let mut stored = Stored {
            event: item,
            payment: None,
            refund: None,
            unusable: None,
        };
        match (asks(&fields.resource_type, &fields.action), answer) {
            (Asks::Payment, Some(answer)) => {
                let id = links.payment.as_deref().unwrap_or_default();
                match payment_view(id, answer, self.creditor.as_deref()) {
                    Ok(view) => stored.payment = Some(view),
                    Err(why) => stored.unusable = Some(why),
                }
            }
            (Asks::Refund, Some(answer)) => {
                let id = links.refund.as_deref().unwrap_or_default();
                match refund_view(id, answer) {
                    Ok(view) => stored.refund = Some(view),
                    Err(why) => stored.unusable = Some(why),
                }
            }
            _ => {}
        }
        let body = serde_json::to_vec(&stored)
            .map_err(|e| Rejection::Unavailable(format!("event not stored: {e}")))?;
        Ok(FetchedEvent {
            event_id: fields.id.into_owned(),
            body,
        })
    }

    /// Every event of a batch, asking the API once per resource: GoCardless batches events
    /// of one payment together, and a batch waits on no more fetches than its resources.
    async fn events(
        &self,
        api: &ProviderApi,
        items: &[&RawValue],
    ) -> Result<Vec<FetchedEvent>, Rejection> {
        let planned = items
            .iter()
            .map(|item| Self::plan(item))
            .collect::<Result<Vec<_>, _>>()?;
        let mut paths: Vec<String> = planned.iter().filter_map(|(_, p)| p.clone()).collect();
        paths.sort_unstable();
        paths.dedup();
        let answers =
            futures_util::future::try_join_all(paths.iter().map(|path| api.get(path))).await?;
        let answered: std::collections::HashMap<String, Fetched> =
            paths.into_iter().zip(answers).collect();
        planned
            .into_iter()
            .zip(items)
            .map(|((fields, path), item)| {
                let answer = path.and_then(|p| answered.get(&p));
                self.event(item, fields, answer)
            })
            .collect()
    }
}

/// The fields of the API's payment the mapping reads; `None` when the API does not know it.
fn payment_view(
    id: &str,
    answer: &Fetched,
    creditor: Option<&str>,
) -> Result<Option<serde_json::Value>, String> {
    let bytes = match answer {
        Fetched::Found(bytes) => bytes,
        Fetched::NotFound => return Ok(None),
        Fetched::Unusable(why) => return Err(why.clone()),
    };
    let answer: PaymentAnswer<'_> = serde_json::from_slice(bytes)
        .map_err(|e| format!("GoCardless's answer is not a payment: {e}"))?;
    let payment = answer.payments;
    if payment.id != id {
        return Err(format!(
            "GoCardless answered payment {:?} when asked for {id}",
            payment.id
        ));
    }
    // The key reads every creditor of its organisation: a payment of another is not ours.
    if let Some(expected) = creditor {
        let found = payment.links.as_ref().and_then(|l| l.creditor.as_deref());
        if found != Some(expected) {
            return Err(format!(
                "the payment's creditor is {}, not the configured {expected}",
                found.unwrap_or("absent")
            ));
        }
    }
    let order_id = payment.metadata.unwrap_or_default().order_id;
    Ok(Some(json!({
        "id": payment.id,
        "amount": raw(payment.amount)?,
        "currency": payment.currency,
        "order_id": order_id.map(raw).transpose()?,
    })))
}

/// The fields of the API's refund the mapping reads; `None` when the API does not know it.
fn refund_view(id: &str, answer: &Fetched) -> Result<Option<serde_json::Value>, String> {
    let bytes = match answer {
        Fetched::Found(bytes) => bytes,
        Fetched::NotFound => return Ok(None),
        Fetched::Unusable(why) => return Err(why.clone()),
    };
    let answer: RefundAnswer<'_> = serde_json::from_slice(bytes)
        .map_err(|e| format!("GoCardless's answer is not a refund: {e}"))?;
    let refund = answer.refunds;
    if refund.id != id {
        return Err(format!(
            "GoCardless answered refund {:?} when asked for {id}",
            refund.id
        ));
    }
    Ok(Some(json!({
        "id": refund.id,
        "amount": raw(refund.amount)?,
        "currency": refund.currency,
        "payment": refund.links.payment,
    })))
}

/// A raw JSON value as a value: its text is kept for the mapping to judge (an integer of any
/// size is read by its digits there).
fn raw(value: &RawValue) -> Result<serde_json::Value, String> {
    // A number is kept as the string of its digits, so nothing rounds it on the way.
    let text = value.get().trim();
    if text.starts_with('"') || text.starts_with('{') || text.starts_with('[') {
        return serde_json::from_str(text).map_err(|e| e.to_string());
    }
    Ok(serde_json::Value::String(format!("#{text}")))
}

impl Connector for GocardlessScheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        _now: DateTime<Utc>,
    ) -> Verification<'a> {
        // No fetch runs for a request whose signature does not hold.
        if let Err(error) = self.check(headers, body) {
            return Verification::Done(Err(Rejection::Refused(error)));
        }
        let Ok(batch) = serde_json::from_slice::<Batch<'_>>(body) else {
            return Verification::Done(Ok(Verified::new(
                None,
                Naming::Unusable("a GoCardless webhook is {\"events\":[..]}".into()),
            )));
        };
        let Some(api) = &self.api else {
            return Verification::Done(Err(fetch::no_api()));
        };
        Verification::Pending(Box::pin(async move {
            match self.events(api, &batch.events).await {
                Ok(events) => Ok(Verified::new(None, Naming::Fetched(events))),
                Err(Rejection::Refused(_)) => Ok(Verified::new(
                    None,
                    Naming::Unusable(
                        "every event needs a string id, resource_type and action".into(),
                    ),
                )),
                Err(other) => Err(other),
            }
        }))
    }

    /// Signs a webhook body, or a stored event sent again as a webhook of that one event.
    fn sign(&self, _event_id: &str, body: &[u8], _timestamp: i64) -> Result<Signed, Unsignable> {
        #[derive(Deserialize)]
        struct StoredEvent<'a> {
            #[serde(borrow)]
            event: &'a RawValue,
        }
        let body = match serde_json::from_slice::<StoredEvent<'_>>(body) {
            Ok(stored) => format!("{{\"events\":[{}]}}", stored.event.get()).into_bytes(),
            Err(_) => body.to_vec(),
        };
        let signature = hex::encode(self.keys.sign(&[&body]));
        Ok(Signed {
            body: Some(body),
            ..Signed::headers(vec![(SIGNATURE_HEADER.to_owned(), signature)])
        })
    }
}

/// GoCardless's events, each as the gateway stored it with the API's answer.
pub struct GocardlessFormat;

impl Format for GocardlessFormat {
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
        let event = match top.object("event") {
            Ok(event) => event,
            Err(error) => {
                return Reading {
                    event_type: None,
                    parsed: Parsed::invalid(error),
                };
            }
        };
        let (Some(resource_type), Some(action)) =
            (event.string("resource_type"), event.string("action"))
        else {
            return Reading {
                event_type: None,
                parsed: Parsed::invalid(invalid(
                    "event.resource_type and event.action must be strings",
                )),
            };
        };
        let kind = format!("{resource_type}.{action}");
        let parsed = parse(&resource_type, &action, &top, &event).unwrap_or_else(body::unusable);
        Reading {
            event_type: Some(body::cut(kind)),
            parsed,
        }
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        #[derive(Deserialize)]
        struct StoredId<'a> {
            #[serde(borrow)]
            event: Id<'a>,
        }
        #[derive(Deserialize)]
        struct Id<'a> {
            #[serde(borrow)]
            id: Cow<'a, str>,
        }
        let id = match serde_json::from_slice::<StoredId<'_>>(body) {
            Ok(stored) => stored.event.id.into_owned(),
            Err(_) => {
                let batch: Batch<'_> =
                    serde_json::from_slice(body).map_err(|_| invalid("not a GoCardless event"))?;
                let [only] = batch.events.as_slice() else {
                    return Err(invalid(
                        "a webhook of several events has no single event id",
                    ));
                };
                serde_json::from_str::<Id<'_>>(only.get())
                    .map_err(|_| invalid("an event needs a string id"))?
                    .id
                    .into_owned()
            }
        };
        check_event_id(&id)?;
        Ok(id)
    }

    /// A webhook of one event about the sample's payment; the gateway asks the API about it,
    /// so it answers only where `api_base_url` is an emulator that knows it.
    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let (resource_type, action, links) = match event_type {
            "payment.succeeded" => ("payments", "confirmed", json!({"payment": s.payment_id})),
            "payment.failed" => ("payments", "failed", json!({"payment": s.payment_id})),
            "refund.succeeded" => (
                "refunds",
                "created",
                json!({"refund": format!("RF{}", s.event_id)}),
            ),
            other => ("mandates", other, json!({})),
        };
        json!({"events": [{"id": s.event_id, "created_at": Utc::now().to_rfc3339(),
            "resource_type": resource_type, "action": action, "links": links,
            "details": {"origin": "api", "cause": "sample", "description": "send-test-event"},
            "metadata": {}}]})
        .to_string()
    }
}

fn parse(
    resource_type: &str,
    action: &str,
    top: &Object<'_>,
    event: &Object<'_>,
) -> Result<Parsed, Unusable> {
    let asked = asks(resource_type, action);
    if asked == Asks::Nothing {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    if top.member("unusable").is_some() {
        return Ok(Parsed::Rejected {
            reason: UNUSABLE_ANSWER,
            detail: format!(
                "GoCardless's answer could not be used: {}",
                top.string("unusable").unwrap_or_default()
            ),
        });
    }
    let (name, link) = match asked {
        Asks::Refund => ("refund", "refund"),
        _ => ("payment", "payment"),
    };
    if top.member(name).is_none() {
        let named = event
            .object_if_any("links")?
            .and_then(|links| links.string(link))
            .unwrap_or_default();
        return Ok(if top.is_null(name) {
            // Asked, and the API does not know it.
            Parsed::Rejected {
                reason: UNKNOWN_RESOURCE,
                detail: format!("GoCardless's API knows no {name} {named}"),
            }
        } else {
            // Never asked, for want of a usable link.
            Parsed::invalid(invalid(format!(
                "event.links.{link} must name the {name} (letters, digits, _ or -)"
            )))
        });
    }
    let resource = top.object(name)?;
    let currency = resource.currency("currency", false)?;
    let amount = number_text(&resource, "amount")?;
    // A chargeback, a late failure and a cancelled chargeback are keyed by the event that
    // reports them: a payment charged back, given back and charged back again is two
    // withdrawals, and GoCardless names no chargeback of its own.
    let event_id = event.id("id")?;
    let event = match (resource_type, action) {
        ("payments", "confirmed" | "paid_out") => PaymentEvent::Succeeded {
            payment_id: resource.id("id")?,
            order_id: order_id(&resource),
            amount,
            currency,
        },
        ("payments", "failed") => PaymentEvent::Failed {
            payment_id: resource.id("id")?,
            order_id: order_id(&resource),
        },
        ("payments", "charged_back" | "late_failure") => PaymentEvent::Dispute {
            dispute_id: event_id,
            payment_id: resource.id("id")?,
            change: DisputeChange::FundsWithdrawn {
                amount,
                fee_minor: 0,
                currency,
                fee_in_other_currency: false,
            },
        },
        // It names no chargeback: it gives back one of the payment's withdrawals, once.
        ("payments", _) => PaymentEvent::Dispute {
            dispute_id: event_id,
            payment_id: resource.id("id")?,
            change: DisputeChange::FundsReinstatedUnnamed { amount, currency },
        },
        ("refunds", "failed" | "funds_returned" | "bounced") => PaymentEvent::RefundReturned {
            payment_id: resource.id("payment")?,
            refund_id: resource.id("id")?,
            reported_minor: Some(amount.get()),
            unnamed: false,
        },
        _ => PaymentEvent::Refunded {
            payment_id: resource.id("payment")?,
            refund_id: Some(resource.id("id")?),
            refund: RefundAmount::Delta(amount),
            currency,
        },
    };
    Ok(Parsed::Event(event))
}

/// An amount the gateway stored as `"#<digits>"` (the API's integer as it was written).
fn number_text(resource: &Object<'_>, name: &str) -> Result<crate::money::AmountMinor, Unusable> {
    let path = resource.path_of(name);
    let text = resource.string(name).unwrap_or_default();
    let digits = text
        .strip_prefix('#')
        .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| invalid(format!("{path} must be a positive integer")))?;
    let trimmed = digits.trim_start_matches('0');
    if trimmed.len() > 16 {
        return Err(body::out_of_range(&path));
    }
    let value: i64 = trimmed.parse().unwrap_or(0);
    if value > crate::money::AmountMinor::MAX {
        return Err(body::out_of_range(&path));
    }
    crate::money::AmountMinor::parse(value)
        .ok_or_else(|| Unusable::Invalid(invalid(format!("{path} must be greater than 0"))))
}

/// The order reference: `metadata.order_id`, as the gateway stored it.
fn order_id(resource: &Object<'_>) -> Option<i64> {
    let text = resource.string("order_id")?;
    let text = text.strip_prefix('#').unwrap_or(&text);
    text.parse().ok().filter(|id| *id > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(event: &str, payment: Option<&str>) -> Vec<u8> {
        let item: &RawValue = serde_json::from_str(event).unwrap();
        let answer = match payment {
            Some(p) => Fetched::Found(p.as_bytes().to_vec()),
            None => Fetched::NotFound,
        };
        let view = payment_view("PM1", &answer, None).unwrap();
        serde_json::to_vec(&Stored {
            event: item,
            payment: Some(view),
            refund: None,
            unusable: None,
        })
        .unwrap()
    }

    const CONFIRMED: &str = r#"{"id":"EV1","created_at":"2026-12-03T00:00:00Z","resource_type":"payments","action":"confirmed","links":{"payment":"PM1"},"details":{}}"#;
    const PAYMENT: &str = r#"{"payments":{"id":"PM1","amount":2500,"currency":"GBP","status":"confirmed","metadata":{"order_id":"7"},"links":{}}}"#;

    #[test]
    fn a_confirmed_payment_captures_the_fetched_amount_for_its_order() {
        let body = stored(CONFIRMED, Some(PAYMENT));
        let reading = GocardlessFormat.read(&body);
        assert_eq!(reading.event_type.as_deref(), Some("payments.confirmed"));
        assert!(
            matches!(
                reading.parsed,
                Parsed::Event(PaymentEvent::Succeeded { ref payment_id, order_id: Some(7), amount, .. })
                    if payment_id == "PM1" && amount.get() == 2500
            ),
            "{:?}",
            reading.parsed
        );
        assert_eq!(GocardlessFormat.event_id(&body).unwrap(), "EV1");
    }

    #[test]
    fn a_payment_the_api_does_not_know_is_rejected_as_unknown() {
        let body = stored(CONFIRMED, None);
        assert!(matches!(
            GocardlessFormat.read(&body).parsed,
            Parsed::Rejected {
                reason: "unknown_resource",
                ..
            }
        ));
    }

    #[test]
    fn chargebacks_are_keyed_by_the_event_that_reports_them_and_cancellations_give_one_back() {
        for (action, expected) in [
            ("charged_back", "withdrawn PM1 EV1 2500+0 GBP"),
            ("late_failure", "withdrawn PM1 EV1 2500+0 GBP"),
            (
                "chargeback_cancelled",
                "reinstated-unnamed PM1 EV1 2500 GBP",
            ),
        ] {
            let event = CONFIRMED.replace("confirmed", action);
            let body = stored(&event, Some(PAYMENT));
            assert_eq!(
                body::dispute_summary(&GocardlessFormat.read(&body).parsed),
                expected
            );
        }
    }

    #[test]
    fn a_refund_that_failed_or_came_back_gives_the_refund_back() {
        let answer = Fetched::Found(
            br#"{"refunds":{"id":"RF1","amount":700,"currency":"GBP","links":{"payment":"PM1"}}}"#
                .to_vec(),
        );
        for action in ["failed", "bounced", "funds_returned"] {
            let event = format!(
                r#"{{"id":"EV9","resource_type":"refunds","action":"{action}","links":{{"refund":"RF1"}}}}"#
            );
            let item: &RawValue = serde_json::from_str(&event).unwrap();
            let body = serde_json::to_vec(&Stored {
                event: item,
                payment: None,
                refund: Some(refund_view("RF1", &answer).unwrap()),
                unusable: None,
            })
            .unwrap();
            assert_eq!(
                GocardlessFormat.read(&body).parsed,
                Parsed::Event(PaymentEvent::RefundReturned {
                    payment_id: "PM1".into(),
                    refund_id: "RF1".into(),
                    reported_minor: Some(700),
                    unnamed: false,
                }),
                "{action}"
            );
        }
    }

    #[test]
    fn other_events_are_ignored_without_asking() {
        assert_eq!(asks("mandates", "created"), Asks::Nothing);
        assert_eq!(asks("payments", "submitted"), Asks::Nothing);
        let item: &RawValue = serde_json::from_str(
            r#"{"id":"EV2","resource_type":"mandates","action":"created","links":{"mandate":"MD1"}}"#,
        )
        .unwrap();
        let body = serde_json::to_vec(&Stored {
            event: item,
            payment: None,
            refund: None,
            unusable: None,
        })
        .unwrap();
        assert_eq!(
            GocardlessFormat.read(&body).parsed,
            Parsed::Ignored("unsupported_event_type")
        );
    }

    #[test]
    fn a_stored_event_is_signed_again_as_a_webhook_of_that_event() {
        let scheme = GocardlessScheme {
            keys: Keys::utf8(["a-webhook-endpoint-secret"], 0),
            api: None,
            creditor: None,
        };
        let body = stored(CONFIRMED, Some(PAYMENT));
        let signed = scheme.sign("EV1", &body, 0).unwrap();
        let sent = signed.body.clone().unwrap();
        assert!(sent.starts_with(br#"{"events":[{"id":"EV1""#));
        assert!(scheme.check(&signed.headers, &sent).is_ok());
        let mut forged = sent.clone();
        forged[20] ^= 1;
        assert_eq!(
            scheme.check(&signed.headers, &forged),
            Err(SignatureError::NoMatch)
        );
    }
}
