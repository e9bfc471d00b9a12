//! Signs test deliveries the way each provider does, with the gateway's own connectors (whose
//! output is checked against the providers' published vectors and independently computed ones
//! in unit tests).

use callback_gateway::config::{ProcessEnv, SchemeName, Settings};
use callback_gateway::providers::{self, Provider};

use callback_gateway::providers::connector::JSON;

use super::{
    ACME, ACME_SECRET, ADYEN, ADYEN_KEY, BRAINTREE, BRAINTREE_PRIVATE, BRAINTREE_PUBLIC, CHECKOUT,
    CHECKOUT_KEY, GOCARDLESS, GOCARDLESS_SECRET, MERCADOPAGO, MERCADOPAGO_SECRET, MOLLIE, PADDLE,
    PADDLE_SECRET, PAYPAL, PLAIN, PLAIN_SECRET, RAZORPAY, RAZORPAY_SECRET, SQUARE, SQUARE_KEY,
    SQUARE_URL, STRIPE, STRIPE_SECRET, THIRD, THIRD_SECRET,
};

/// The scheme and first secret of a test provider.
pub fn scheme_of(provider: &str) -> (SchemeName, &'static str) {
    match provider {
        ACME => (SchemeName::StandardWebhooks, ACME_SECRET),
        STRIPE => (SchemeName::Stripe, STRIPE_SECRET),
        PLAIN => (SchemeName::HmacSha256, PLAIN_SECRET),
        THIRD => (SchemeName::StandardWebhooks, THIRD_SECRET),
        ADYEN => (SchemeName::Adyen, ADYEN_KEY),
        SQUARE => (SchemeName::Square, SQUARE_KEY),
        RAZORPAY => (SchemeName::Razorpay, RAZORPAY_SECRET),
        CHECKOUT => (SchemeName::Checkout, CHECKOUT_KEY),
        PADDLE => (SchemeName::Paddle, PADDLE_SECRET),
        // Mollie signs nothing: its webhook is the payment id alone.
        MOLLIE => (SchemeName::Mollie, ""),
        GOCARDLESS => (SchemeName::Gocardless, GOCARDLESS_SECRET),
        MERCADOPAGO => (SchemeName::Mercadopago, MERCADOPAGO_SECRET),
        BRAINTREE => (SchemeName::Braintree, BRAINTREE_PRIVATE),
        other => panic!("no test secret for provider {other}"),
    }
}

/// A provider of `scheme` keyed with `secrets` (Square's signs the test notification URL,
/// Braintree's names the test public key; an empty secret is none, as Mollie has).
pub fn provider_with(scheme: SchemeName, secrets: &[&str]) -> Provider {
    let secrets: Vec<String> = secrets
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| format!("{s:?}"))
        .collect();
    let extra = match scheme {
        SchemeName::Square => format!("notification_url = {SQUARE_URL:?}\n"),
        SchemeName::Braintree => format!("public_key = {BRAINTREE_PUBLIC:?}\n"),
        // Signing never asks the API; the configuration wants its key all the same.
        _ if scheme.fetches() => "api_key = \"signing-only\"\n".to_owned(),
        _ => String::new(),
    };
    let text = format!(
        "[[providers]]\nname = \"signer\"\nscheme = \"{}\"\nmerchant_id = 1\nsecrets = [{}]\n{extra}",
        scheme.as_str(),
        secrets.join(", ")
    );
    let settings = Settings::from_toml(&text, &ProcessEnv)
        .unwrap_or_else(|e| panic!("test provider of {scheme:?}: {e}"));
    providers::configure(settings.providers[0].clone())
}

/// The headers, and the body to send, that sign `body` as `event_id` with `secret` under
/// `scheme` at `timestamp` (the body changes only where the signature travels in it: Adyen).
pub fn signed_with(
    scheme: SchemeName,
    secret: &str,
    event_id: &str,
    body: &str,
    timestamp: i64,
) -> (Vec<(String, String)>, String) {
    let signed = provider_with(scheme, &[secret])
        .sign(event_id, body.as_bytes(), timestamp)
        .unwrap_or_else(|e| panic!("cannot sign for {scheme:?}: {e}"));
    let sent = String::from_utf8(signed.body_or(body.as_bytes()).to_vec()).unwrap();
    (signed.headers, sent)
}

/// Headers signing `body` with `secret` under `scheme` at `timestamp`.
pub fn sign_with(
    scheme: SchemeName,
    secret: &str,
    event_id: &str,
    body: &str,
    timestamp: i64,
) -> Vec<(String, String)> {
    signed_with(scheme, secret, event_id, body, timestamp).0
}

/// What `provider`'s first configured secret signs at `timestamp`: headers and the body to send.
/// PayPal's deliveries are signed as PayPal signs them, with the test certificate host's key.
pub fn signed_at(
    provider: &str,
    event_id: &str,
    body: &str,
    timestamp: i64,
) -> (Vec<(String, String)>, String) {
    if provider == PAYPAL {
        let at = chrono::DateTime::from_timestamp(timestamp, 0).unwrap();
        let host = super::paypal_host::host();
        let headers =
            super::paypal_host::headers(super::paypal::SIGNING_KEY_PEM, &host.cert_url(), body, at);
        return (headers, body.to_owned());
    }
    let (scheme, secret) = scheme_of(provider);
    signed_with(scheme, secret, event_id, body, timestamp)
}

pub fn sign_at(
    provider: &str,
    event_id: &str,
    body: &str,
    timestamp: i64,
) -> Vec<(String, String)> {
    signed_at(provider, event_id, body, timestamp).0
}

pub fn sign_now(provider: &str, event_id: &str, body: &str) -> Vec<(String, String)> {
    sign_at(provider, event_id, body, chrono::Utc::now().timestamp())
}

pub fn signed_now(provider: &str, event_id: &str, body: &str) -> (Vec<(String, String)>, String) {
    signed_at(provider, event_id, body, chrono::Utc::now().timestamp())
}

/// One delivery as its provider sends it: headers, body, the query string of the callback URL
/// (Mercado Pago signs its `data.id`) and the body's media type (Mollie's and Braintree's are
/// forms).
#[derive(Debug, Clone)]
pub struct Delivery {
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub query: Option<String>,
    pub content_type: &'static str,
}

impl Delivery {
    /// The path and query to post `provider`'s delivery to.
    pub fn path(&self, provider: &str) -> String {
        match &self.query {
            Some(query) => format!("/v1/callbacks/{provider}?{query}"),
            None => format!("/v1/callbacks/{provider}"),
        }
    }
}

/// `provider`'s delivery of `body` as `event_id`, signed now.
pub fn delivery_now(provider: &str, event_id: &str, body: &str) -> Delivery {
    let timestamp = chrono::Utc::now().timestamp();
    if provider == PAYPAL {
        let (headers, body) = signed_at(provider, event_id, body, timestamp);
        return Delivery {
            headers,
            body,
            query: None,
            content_type: JSON,
        };
    }
    let (scheme, secret) = scheme_of(provider);
    let signed = provider_with(scheme, &[secret])
        .sign(event_id, body.as_bytes(), timestamp)
        .unwrap_or_else(|e| panic!("cannot sign for {scheme:?}: {e}"));
    Delivery {
        body: String::from_utf8(signed.body_or(body.as_bytes()).to_vec()).unwrap(),
        headers: signed.headers,
        query: signed.query,
        content_type: signed.content_type,
    }
}
