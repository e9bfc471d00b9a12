//! Checkout.com: each event carries the action it reports (`payment_captured`,
//! `payment_declined`, `payment_refunded` with the refund's `action_id`, the dispute events
//! with the dispute). Disputes debit the disputed amount at `dispute_evidence_required`
//! (or `dispute_received`) and credit it back at `dispute_won`, or at `dispute_canceled`
//! ("canceled by the issuing bank and your account is credited back the disputed amount");
//! `dispute_lost` closes it. No fee is in the events. Checkout.com resends an unacknowledged
//! webhook after 5, 10, 15, 30 min, 1, 4, 12 and 12 hours, then cancels it.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{CHECKOUT, CHECKOUT_KEY};
use crate::truth::{Change, Payment};

pub struct Checkout;

impl Model for Checkout {
    fn provider(&self) -> &'static str {
        CHECKOUT
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        super::provider_entry(
            CHECKOUT,
            "checkout",
            &format!("secrets = [\"{CHECKOUT_KEY}\"]"),
        )
    }

    /// CLP beside the usual three: Checkout.com counts it in hundredths, ISO 4217 in pesos.
    fn currencies(&self) -> &'static [&'static str] {
        &["USD", "EUR", "JPY", "CLP"]
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("pay_{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let event = |kind: &str, data: serde_json::Value| {
            let id = format!("evt_{seq}{}", p.id.replace('_', ""));
            Webhook {
                id: id.clone(),
                body: json!({"id": id, "type": kind, "version": "1.0.33",
                             "created_on": "2026-12-01T10:00:00Z", "data": data})
                .to_string(),
                label: kind.to_owned(),
            }
        };
        let reference = p.order.map(|o| o.to_string());
        let dispute = |k: usize| {
            let cb = &p.chargebacks[k];
            json!({"id": cb.id, "category": "fraudulent", "amount": units(cb.amount, p.currency),
                   "currency": p.currency, "reason_code": "10.4", "payment_id": p.id})
        };
        match *change {
            Change::Captured => vec![event(
                "payment_captured",
                json!({"id": p.id, "action_id": format!("act_{seq}"), "reference": reference,
                       "amount": units(p.captured, p.currency), "currency": p.currency,
                       "response_code": "10000"}),
            )],
            Change::Failed => vec![event(
                "payment_declined",
                json!({"id": p.id, "reference": reference, "amount": units(p.amount, p.currency),
                       "currency": p.currency, "response_code": "20005"}),
            )],
            Change::RefundMade(r) => {
                let refund = &p.refunds[r];
                vec![event(
                    "payment_refunded",
                    json!({"id": p.id, "action_id": refund.id, "reference": reference,
                           "amount": units(refund.amount, p.currency), "currency": p.currency,
                           "response_code": "10000"}),
                )]
            }
            Change::ChargedBack(k) => vec![event(
                if seq.is_multiple_of(2) {
                    "dispute_evidence_required"
                } else {
                    "dispute_received"
                },
                dispute(k),
            )],
            // Both give the money back, per Checkout.com's event descriptions.
            Change::Reversed(k) => vec![event(
                if seq.is_multiple_of(2) {
                    "dispute_won"
                } else {
                    "dispute_canceled"
                },
                dispute(k),
            )],
            Change::Lost(k) => vec![event("dispute_lost", dispute(k))],
            _ => Vec::new(),
        }
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, false)
    }

    fn schedule(&self) -> &'static [u64] {
        &[5, 10, 15, 30, 60, 240, 720, 720]
    }
}

/// `minor` ISO 4217 minor units of `currency` in Checkout.com's own ("Format the amount value"):
/// hundredths for CLP, which ISO 4217 counts in whole pesos; the same for the model's others.
fn units(minor: i64, currency: &str) -> i64 {
    if currency == "CLP" {
        minor * 100
    } else {
        minor
    }
}
