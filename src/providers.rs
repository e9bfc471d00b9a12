//! The configured payment providers, each with its signature scheme ready to verify.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::{PayloadFormat, ProviderSettings};
use crate::idempotency::record::{Fingerprint, IdempotentRequest, Operation, Scope};
use crate::payments::event::{Parsed, PayloadError, Reading, check_event_id, event_id_from_body};
use crate::signature::scheme::{SignatureScheme, Verified};
use crate::signature::scheme_for;

pub struct Provider {
    settings: ProviderSettings,
    scheme: Box<dyn SignatureScheme>,
}

impl Provider {
    pub fn new(settings: ProviderSettings) -> Self {
        let scheme = scheme_for(settings.scheme, &settings.secrets, settings.tolerance);
        Self { settings, scheme }
    }

    pub fn name(&self) -> &str {
        &self.settings.name
    }

    pub fn merchant_id(&self) -> i64 {
        self.settings.merchant_id
    }

    /// The delivery's body read in this provider's payload format.
    pub fn parse_event(&self, body: &[u8]) -> Parsed {
        self.read_event(body).parsed
    }

    /// The delivery's body read once in this provider's payload format, with its type.
    pub fn read_event(&self, body: &[u8]) -> Reading {
        Reading::from_body(self.settings.payload, body)
    }

    pub fn scheme(&self) -> &dyn SignatureScheme {
        self.scheme.as_ref()
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// The provider's event id: the `webhook-id` header for Standard Webhooks, else the
    /// body's `id`. Without one the delivery cannot be keyed, so nothing is recorded.
    pub fn event_id(&self, verified: &Verified, body: &[u8]) -> Result<String, PayloadError> {
        match &verified.header_event_id {
            Some(id) => {
                check_event_id(id)?;
                Ok(id.clone())
            }
            None => event_id_from_body(body),
        }
    }

    /// The idempotency request of one delivery: scope (merchant, `payment.callback`,
    /// `{provider}:{event id}`), the body's fingerprint, and this provider's record lifetime.
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
            fingerprint: Fingerprint::of(body),
            expires_at: now + self.settings.ttl,
        }
    }
}

// The dispatch on the configured format lives here, beside the configuration, so the event
// parser itself never reads configuration.
impl Reading {
    /// `body` read in `format`.
    pub fn from_body(format: PayloadFormat, body: &[u8]) -> Self {
        match format {
            PayloadFormat::Canonical => Reading::canonical(body),
            PayloadFormat::Stripe => Reading::stripe(body),
        }
    }
}

impl Parsed {
    /// `body` read in `format`.
    pub fn from_body(format: PayloadFormat, body: &[u8]) -> Self {
        Reading::from_body(format, body).parsed
    }
}

/// Providers by name (the URL segment of `/v1/callbacks/{provider}`).
#[derive(Clone, Default)]
pub struct Providers(Arc<HashMap<String, Arc<Provider>>>);

impl Providers {
    pub fn from_settings(settings: &[ProviderSettings]) -> Self {
        Self(Arc::new(
            settings
                .iter()
                .map(|s| (s.name.clone(), Arc::new(Provider::new(s.clone()))))
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
            Parsed::Ignored(_) | Parsed::Rejected { .. } => None,
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
