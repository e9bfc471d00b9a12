//! Signs test deliveries the way each provider does, with the gateway's own schemes (whose
//! output is checked against published and independently computed vectors in unit tests).

use std::time::Duration;

use callback_gateway::config::{SchemeName, Secret};
use callback_gateway::signature::scheme_for;

use super::{ACME, ACME_SECRET, PLAIN, PLAIN_SECRET, STRIPE, STRIPE_SECRET, THIRD, THIRD_SECRET};

pub fn scheme_of(provider: &str) -> (SchemeName, &'static str) {
    match provider {
        ACME => (SchemeName::StandardWebhooks, ACME_SECRET),
        STRIPE => (SchemeName::Stripe, STRIPE_SECRET),
        PLAIN => (SchemeName::HmacSha256, PLAIN_SECRET),
        THIRD => (SchemeName::StandardWebhooks, THIRD_SECRET),
        other => panic!("no test secret for provider {other}"),
    }
}

/// Headers signing `body` with `secret` under `scheme` at `timestamp`.
pub fn sign_with(
    scheme: SchemeName,
    secret: &str,
    event_id: &str,
    body: &str,
    timestamp: i64,
) -> Vec<(String, String)> {
    scheme_for(scheme, &[Secret::new(secret)], Duration::from_secs(300)).sign(
        event_id,
        body.as_bytes(),
        timestamp,
    )
}

pub fn sign_at(
    provider: &str,
    event_id: &str,
    body: &str,
    timestamp: i64,
) -> Vec<(String, String)> {
    let (scheme, secret) = scheme_of(provider);
    sign_with(scheme, secret, event_id, body, timestamp)
}

pub fn sign_now(provider: &str, event_id: &str, body: &str) -> Vec<(String, String)> {
    sign_at(provider, event_id, body, chrono::Utc::now().timestamp())
}
