//! The configured providers as the routes see them: each one's settings with its connector
//! and format behind the two traits of [`super::connector`], looked up by name. Which
//! connector a scheme names is the scheme list's ([`super::configure`]); a route never needs
//! to know the provider files.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use super::connector::{
    Answer, Connector, Event, Events, Format, Naming, Sample, Signed, Unsignable, Verification,
    Verified,
};
use crate::config::providers::ProviderSettings;
use crate::idempotency::record::{Fingerprint, IdempotentRequest, Operation, Scope};
use crate::payments::event::{Parsed, PayloadError, Reading, check_event_id};
use crate::payments::reader::{AskedEvent, EventReader};
use crate::signature::scheme::HeaderSource;

/// One configured provider: its settings, its connector and its format.
pub struct Provider {
    settings: ProviderSettings,
    connector: Box<dyn Connector>,
    format: &'static dyn Format,
}

impl Provider {
    /// `settings` with the connector and the format its scheme names ([`super::configure`]).
    pub fn new(
        settings: ProviderSettings,
        connector: Box<dyn Connector>,
        format: &'static dyn Format,
    ) -> Self {
        Self {
            settings,
            connector,
            format,
        }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn merchant_id(&self) -> i64 {
        self.settings.merchant_id
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    pub fn connector(&self) -> &dyn Connector {
        self.connector.as_ref()
    }

    pub fn format(&self) -> &'static dyn Format {
        self.format
    }

    /// The signature check of a delivery (and, for a fetch-verified scheme, the provider API's
    /// answer); `query` is the request's query string, without `?`.
    pub fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        query: &'a str,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.connector.verify_request(headers, query, body, now)
    }

    /// The events of a verified delivery, each with its id. Without a usable id a delivery
    /// cannot be keyed, so nothing is recorded (a 400).
    pub fn events<'b>(
        &self,
        verified: Verified,
        body: &'b [u8],
    ) -> Result<Events<'b>, PayloadError> {
        let id = match verified.naming {
            Naming::Body => self.format.event_id(body)?,
            Naming::Header(id) => {
                check_event_id(&id)?;
                id
            }
            Naming::MissingHeader(header) => {
                return Err(PayloadError::new(format!(
                    "the {header} header names the event; without it the event cannot be keyed"
                )));
            }
            Naming::Unusable(detail) => return Err(PayloadError::new(detail)),
            Naming::Fetched(fetched) => {
                let mut events = fetched
                    .into_iter()
                    .map(|event| {
                        check_event_id(&event.event_id)?;
                        Ok(Event {
                            id: event.event_id,
                            body: Cow::Owned(event.body),
                        })
                    })
                    .collect::<Result<Vec<_>, PayloadError>>()?;
                return match events.len() {
                    0 => Err(PayloadError::new("the delivery names no event")),
                    1 => Ok(Events::One(events.remove(0))),
                    _ => Ok(Events::Items(events)),
                };
            }
            Naming::Items(items) => {
                let events = items
                    .into_iter()
                    .map(|item| {
                        check_event_id(&item.event_id)?;
                        let body = body.get(item.span).ok_or_else(|| {
                            PayloadError::new("an item lies outside the body".to_owned())
                        })?;
                        Ok(Event {
                            id: item.event_id,
                            body: Cow::Borrowed(body),
                        })
                    })
                    .collect::<Result<Vec<_>, PayloadError>>()?;
                return Ok(Events::Items(events));
            }
        };
        Ok(Events::One(Event {
            id,
            body: Cow::Borrowed(body),
        }))
    }

    /// The event's body read once in this provider's payload format, with its type.
    pub fn read_event(&self, body: &[u8]) -> Reading {
        self.format.read(body)
    }

    /// The event's body read in this provider's payload format.
    pub fn parse_event(&self, body: &[u8]) -> Parsed {
        self.read_event(body).parsed
    }

    pub fn answer(&self) -> Answer {
        self.connector.answer()
    }

    /// Whether its deliveries are signed (all but Mollie's).
    pub fn signed(&self) -> bool {
        self.connector.signed()
    }

    /// Signs `body` as the provider would, with the first secret at `timestamp`.
    pub fn sign(&self, event_id: &str, body: &[u8], timestamp: i64) -> Result<Signed, Unsignable> {
        self.connector.sign(event_id, body, timestamp)
    }

    /// The event id of a stored or replayed body, for providers whose body names it; for one
    /// that names it in a header the caller must know it (an error says which header).
    pub fn event_id_of(&self, body: &[u8]) -> Result<String, PayloadError> {
        if let Some(header) = self.connector.event_id_header() {
            return Err(PayloadError::new(format!(
                "the {header} header names this provider's events, not the body"
            )));
        }
        self.format.event_id(body)
    }

    /// A sample body of the gateway's `event_type` in this provider's format.
    pub fn sample_body(&self, event_type: &str, sample: &Sample) -> String {
        self.format.sample(event_type, sample)
    }

    /// The idempotency request of one event: scope (merchant, `payment.callback`,
    /// `{provider}:{event id}`), the fingerprint of the event's body, and this provider's
    /// record lifetime. An event of a provider that must be asked is what the gateway wrote
    /// from the API's answer, named by that state: its fingerprint is of its id, so a
    /// redelivery after a field the gateway stores but does not key by changed (the
    /// merchant edited the payment's metadata) is a redelivery, never a 422.
    pub fn idempotent_request(
        &self,
        event_id: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> IdempotentRequest {
        IdempotentRequest {
            scope: Scope {
                user_id: self.settings.merchant_id,
                op: Operation::PaymentCallback,
                key: format!("{}:{event_id}", self.settings.name),
            },
            fingerprint: if self.settings.asks_api() {
                Fingerprint::of(event_id.as_bytes())
            } else {
                Fingerprint::of(body)
            },
            expires_at: now + self.settings.ttl,
        }
    }
}

impl EventReader for Provider {
    fn merchant_id(&self) -> i64 {
        Provider::merchant_id(self)
    }

    fn name(&self) -> &str {
        Provider::name(self)
    }

    fn idempotent_request(
        &self,
        event_id: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> IdempotentRequest {
        Provider::idempotent_request(self, event_id, body, now)
    }

    fn read_event(&self, body: &[u8]) -> Reading {
        Provider::read_event(self, body)
    }

    fn ask_again<'a>(
        &'a self,
        event_id: &'a str,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Option<BoxFuture<'a, Result<Vec<AskedEvent>, String>>> {
        if !self.settings.asks_api() {
            return None;
        }
        Some(Box::pin(async move {
            // The webhook the provider would send again for this event, signed as it signs
            // (Mollie's `id=`, a GoCardless webhook of the one event, a Mercado Pago
            // notification), verified as any delivery is: the API answers what holds now.
            let signed = self
                .sign(event_id, body, now.timestamp())
                .map_err(|e| e.to_string())?;
            let webhook = signed.body_or(body).to_vec();
            let query = signed.query.clone().unwrap_or_default();
            let verified = self
                .verify(&signed.headers, &query, &webhook, now)
                .outcome()
                .await
                .map_err(|rejection| rejection.to_string())?;
            let events = match self.events(verified, &webhook).map_err(|e| e.0)? {
                Events::One(event) => vec![event],
                Events::Items(events) => events,
            };
            Ok(events
                .into_iter()
                .map(|event| (event.id, event.body.into_owned()))
                .collect())
        }))
    }
}

/// Providers by name (the URL segment of `/v1/callbacks/{provider}`).
#[derive(Clone, Default)]
pub struct Providers(Arc<HashMap<String, Arc<Provider>>>);

impl Providers {
    pub fn new(providers: impl IntoIterator<Item = Provider>) -> Self {
        Self(Arc::new(
            providers
                .into_iter()
                .map(|p| (p.settings.name.clone(), Arc::new(p)))
                .collect(),
        ))
    }

    pub fn get(&self, name: &str) -> Option<Arc<Provider>> {
        self.0.get(name).cloned()
    }

    /// The payment id a body of `provider` names, if it is a payment event.
    pub fn payment_id_of(&self, provider: &str, body: &[u8]) -> Option<String> {
        match self.get(provider)?.parse_event(body) {
            Parsed::Event(event) => Some(event.payment_id().to_owned()),
            Parsed::Snapshot(snapshot) => Some(snapshot.payment_id.clone()),
            Parsed::Payout(_) | Parsed::Ignored(_) | Parsed::Rejected { .. } => None,
        }
    }

    /// The merchants the configured providers post for, ascending, each once.
    pub fn merchant_ids(&self) -> Vec<i64> {
        let mut ids: Vec<i64> = self.0.values().map(|p| p.merchant_id()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}
