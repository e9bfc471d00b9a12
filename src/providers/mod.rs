//! The configured payment providers, one file each, as a connector is in hyperswitch: how the
//! provider signs and names its events (its [`Connector`]: verify, name, sign, ack) and what
//! its bodies mean (its [`Format`]: the body mapped onto the gateway's payment events, and a
//! sample for `send-test-event`). [`body`] holds the reading rules every format shares. The
//! write path reads only `PaymentEvent`s and never learns a provider's name.
//!
//! This file is the scheme list ([`connector_for`], [`format_for`], [`configure`]); the routes
//! see configured providers through [`registry`] only. Adding a provider touches its file, the
//! scheme list (and `SchemeName`/`PayloadFormat` in the configuration), the docs and the tests.

pub mod adyen;
pub mod body;
pub mod braintree;
pub mod canonical;
pub mod checkout;
pub mod connector;
pub mod fetch;
pub mod gocardless;
pub mod hmac_sha256;
pub mod mercadopago;
pub mod mollie;
pub mod paddle;
pub mod paypal;
pub mod razorpay;
pub mod registry;
pub mod square;
pub mod standard_webhooks;
pub mod stripe;
#[cfg(test)]
mod vectors;

use prometheus::IntCounterVec;

use crate::config::providers::{PayloadFormat, ProviderSettings, SchemeName};

pub use connector::{
    Answer, Connector, Event, Events, Format, NamedItem, Naming, Rejection, Sample, Signed,
    Unsignable, Verification, Verified,
};
pub use registry::{Provider, Providers};

/// A configured provider: `settings` with the connector and the format its scheme names.
pub fn configure(settings: ProviderSettings) -> Provider {
    configure_observed(settings, None)
}

/// [`configure`], with `fetches` counting a fetch-verified provider's API answers.
fn configure_observed(settings: ProviderSettings, fetches: Option<&IntCounterVec>) -> Provider {
    let connector = connector_for(&settings, fetches);
    let format = format_for(settings.payload);
    Provider::new(settings, connector, format)
}

/// Every configured provider, by name.
pub fn configure_all(settings: &[ProviderSettings]) -> Providers {
    Providers::new(settings.iter().cloned().map(configure))
}

/// [`configure_all`] for the server: fetch-verified providers count their API answers in
/// `fetches` (`gateway_provider_fetches_total`).
pub fn configure_all_observed(settings: &[ProviderSettings], fetches: &IntCounterVec) -> Providers {
    Providers::new(
        settings
            .iter()
            .cloned()
            .map(|s| configure_observed(s, Some(fetches))),
    )
}

/// The scheme list: the connector of `settings.scheme`, keyed with its settings.
pub fn connector_for(
    settings: &ProviderSettings,
    fetches: Option<&IntCounterVec>,
) -> Box<dyn Connector> {
    let tolerance_secs = i64::try_from(settings.tolerance.as_secs()).unwrap_or(i64::MAX);
    let secrets = &settings.secrets;
    match settings.scheme {
        SchemeName::StandardWebhooks => Box::new(standard_webhooks::StandardWebhooks::new(
            secrets,
            tolerance_secs,
        )),
        SchemeName::Stripe => Box::new(stripe::StripeScheme::new(secrets, tolerance_secs)),
        SchemeName::HmacSha256 => {
            Box::new(hmac_sha256::HmacSha256Scheme::new(secrets, tolerance_secs))
        }
        SchemeName::Adyen => Box::new(adyen::AdyenScheme::new(secrets)),
        SchemeName::Square => Box::new(square::SquareScheme::new(
            secrets,
            settings.notification_url.as_deref().unwrap_or_default(),
        )),
        SchemeName::Razorpay => Box::new(razorpay::RazorpayScheme::new(secrets)),
        SchemeName::Checkout => Box::new(checkout::CheckoutScheme::new(secrets)),
        SchemeName::Paddle => Box::new(paddle::PaddleScheme::new(secrets, tolerance_secs)),
        SchemeName::Paypal => Box::new(paypal::PaypalScheme::new(settings, fetches)),
        SchemeName::Mollie => Box::new(mollie::MollieScheme::new(settings, fetches)),
        SchemeName::Gocardless => Box::new(gocardless::GocardlessScheme::new(settings, fetches)),
        SchemeName::Braintree => Box::new(braintree::BraintreeScheme::new(settings)),
        SchemeName::Mercadopago => Box::new(mercadopago::MercadopagoScheme::new(settings, fetches)),
    }
}

/// The payload formats.
pub fn format_for(format: PayloadFormat) -> &'static dyn Format {
    match format {
        PayloadFormat::Canonical => &canonical::Canonical,
        PayloadFormat::Stripe => &stripe::StripeFormat,
        PayloadFormat::Adyen => &adyen::AdyenFormat,
        PayloadFormat::Square => &square::SquareFormat,
        PayloadFormat::Razorpay => &razorpay::RazorpayFormat,
        PayloadFormat::Checkout => &checkout::CheckoutFormat,
        PayloadFormat::Paddle => &paddle::PaddleFormat,
        PayloadFormat::Paypal => &paypal::PaypalFormat,
        PayloadFormat::Mollie => &mollie::MollieFormat,
        PayloadFormat::Gocardless => &gocardless::GocardlessFormat,
        PayloadFormat::Braintree => &braintree::BraintreeFormat,
        PayloadFormat::Mercadopago => &mercadopago::MercadopagoFormat,
    }
}
