//! One model per provider, one file each: what its payments can do ([`Rules`], the
//! operations it has), how it tells about each change (its webhooks, exactly as it sends them,
//! and for a provider that must be asked, what its API answers), how it retries, and what the
//! gateway's books must then hold ([`Expected`]). docs/simulation.md cites the provider's
//! documentation for each behaviour.

mod adyen;
mod braintree;
mod canonical;
mod checkout;
mod gocardless;
mod mercadopago;
mod mollie;
mod paddle;
mod paypal;
mod razorpay;
mod square;
mod stripe;

use crate::support::emulator::Emulator;
use crate::truth::{Change, OpKind, Payment, Rules};

/// One request the provider sends: the id its signer needs (Standard Webhooks' `webhook-id`,
/// Razorpay's header; the body's own for the others), the body before signing, and what it
/// says, for case files and messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: String,
    pub body: String,
    pub label: String,
}

/// A difference between the books and the provider's truth that the gateway cannot see from
/// what the provider sends, and holds in front of finance instead (`/admin/attention`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// Which part of the books misses it (`reinstated`, `fees`, ...).
    pub part: &'static str,
    pub amount: i64,
    /// What attention says about it (a dispute's note or state).
    pub reason: &'static str,
}

/// What the books must hold for one payment, in minor units.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expected {
    pub captured: i64,
    /// Refunds posted, less refunds the provider gave back (failed after they succeeded).
    pub refunded: i64,
    /// Every chargeback withdrawn, reversed ones included.
    pub withdrawn: i64,
    pub reinstated: i64,
    /// Chargeback fees, where the provider reports them.
    pub fees: Option<i64>,
    pub gaps: Vec<Gap>,
}

impl Expected {
    /// The books equal the truth: everything the provider moved, fees where it reports them.
    pub fn truth(p: &Payment, reports_fees: bool) -> Self {
        Self {
            captured: p.captured,
            refunded: p.refunded(false),
            withdrawn: p.withdrawn(),
            reinstated: p.reinstated(),
            fees: reports_fees.then(|| p.fees()),
            gaps: Vec::new(),
        }
    }

    /// The truth less what won disputes gave back, which the gateway cannot book from what
    /// the provider sends: each such dispute is in attention for a person, with `reason`.
    pub fn reinstatement_unreported(p: &Payment, reason: &'static str) -> Self {
        let reinstated = p.reinstated();
        let mut expected = Self {
            reinstated: 0,
            ..Self::truth(p, false)
        };
        if reinstated > 0 {
            expected.gaps.push(Gap {
                part: "reinstated",
                amount: reinstated,
                reason,
            });
        }
        expected
    }
}

pub trait Model: Send + Sync {
    /// The provider's configured name (and the key the signer uses in tests/support/sign.rs).
    fn provider(&self) -> &'static str;
    fn rules(&self) -> Rules {
        Rules::default()
    }
    /// The operations its payments have: a card payment's by default.
    fn ops(&self) -> &'static [OpKind] {
        &[
            OpKind::Capture,
            OpKind::Fail,
            OpKind::Refund,
            OpKind::Chargeback,
            OpKind::Reverse,
            OpKind::Lose,
        ]
    }
    fn currencies(&self) -> &'static [&'static str] {
        &["USD", "EUR", "JPY"]
    }
    /// The `[[providers]]` entry (the API emulator's, for one that must be asked).
    fn provider_toml(&self, api: Option<&Emulator>) -> String;
    fn asks_api(&self) -> bool {
        false
    }
    /// The provider's id of payment `index` of history `history`.
    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("pay{history}x{index}")
    }
    /// The webhooks it sends for `change` of `p` (its state after the change); `seq` is
    /// unique in the world, for event ids.
    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook>;
    /// What its API answers about `p` now (path, JSON), for one that must be asked.
    fn api(&self, _p: &Payment) -> Vec<(String, String)> {
        Vec::new()
    }
    fn expect(&self, p: &Payment) -> Expected;
    /// Minutes between its attempts of a delivery that is not acknowledged (its backoff);
    /// after the last it gives up.
    fn schedule(&self) -> &'static [u64];
    /// The event ids the gateway keys `webhook`'s events by, where they are known without
    /// asking the provider's API (the webhook's own id for most).
    fn event_ids(&self, webhook: &Webhook) -> Vec<String> {
        vec![webhook.id.clone()]
    }
    /// Its settlement report of `payments`' lines paid out so far, for a provider whose
    /// payments the simulator pays out (`OpKind::Payout`).
    fn settlement_report(&self, _payments: &[Payment]) -> Option<String> {
        None
    }
    /// Two webhooks it may send as one request (Adyen's items, GoCardless's events).
    fn merge(&self, _first: &Webhook, _second: &Webhook) -> Option<Webhook> {
        None
    }
}

/// A `[[providers]]` entry for the simulated merchant: `name`, its `scheme`, and `extra` lines
/// (its secrets).
pub fn provider_entry(name: &str, scheme: &str, extra: &str) -> String {
    format!(
        "\n[[providers]]\nname = \"{name}\"\nscheme = \"{scheme}\"\nmerchant_id = {}\n{extra}\n",
        crate::support::MERCHANT
    )
}

/// The event ids of `webhook` (see [`Model::event_ids`]).
pub fn keys(model: &dyn Model, webhook: &Webhook) -> Vec<String> {
    model.event_ids(webhook)
}

/// Every model, by provider name.
pub fn all() -> Vec<Box<dyn Model>> {
    vec![
        Box::new(stripe::Stripe),
        Box::new(adyen::Adyen),
        Box::new(paypal::Paypal),
        Box::new(square::Square),
        Box::new(razorpay::Razorpay),
        Box::new(checkout::Checkout),
        Box::new(paddle::Paddle),
        Box::new(mollie::Mollie),
        Box::new(gocardless::Gocardless),
        Box::new(mercadopago::Mercadopago),
        Box::new(braintree::Braintree),
        Box::new(canonical::Canonical::standard_webhooks()),
        Box::new(canonical::Canonical::plain_hmac()),
    ]
}

/// `minor` units of `currency` as a decimal string with the currency's exponent.
pub fn decimal(minor: i64, currency: &str) -> String {
    match exponent(currency) {
        0 => minor.to_string(),
        e => {
            let unit = 10i64.pow(e);
            format!(
                "{}.{:0width$}",
                minor / unit,
                minor % unit,
                width = e as usize
            )
        }
    }
}

/// Like [`decimal`], for an amount of either sign.
pub fn decimal_signed(minor: i64, currency: &str) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    format!("{sign}{}", decimal(minor.abs(), currency))
}

pub fn exponent(currency: &str) -> u32 {
    match currency {
        "JPY" | "KRW" | "CLP" => 0,
        "BHD" | "KWD" => 3,
        _ => 2,
    }
}
