//! Razorpay: each event carries its entities as they are (`payment.captured`,
//! `payment.failed`, `refund.processed`, `payment.dispute.*` with the dispute and its
//! `amount_deducted`); the event id is the `x-razorpay-event-id` header. Accounts that deduct a
//! dispute's money at its onset see `amount_deducted` from `payment.dispute.created` on (the
//! account kind modelled here). A dispute the merchant wins is credited back by Razorpay, but
//! no event says so: the gateway cannot book it and holds the dispute in attention
//! (`won_not_reinstated`). No fee is in the dispute. Razorpay retries with exponential
//! backoff for 24 hours from the event's creation.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{RAZORPAY, RAZORPAY_SECRET};
use crate::truth::{Change, Payment};

pub struct Razorpay;

impl Model for Razorpay {
    fn provider(&self) -> &'static str {
        RAZORPAY
    }

    fn currencies(&self) -> &'static [&'static str] {
        &["INR", "USD"]
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        super::provider_entry(
            RAZORPAY,
            "razorpay",
            &format!("secrets = [\"{RAZORPAY_SECRET}\"]"),
        )
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("pay_{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let notes = match p.order {
            Some(order) => json!({"order_id": order.to_string()}),
            None => json!([]),
        };
        let event = |kind: &str, payload: serde_json::Value| {
            let id = format!("evt_{seq}{}", p.id.replace('_', ""));
            Webhook {
                id,
                body: json!({"entity": "event", "account_id": "acc_GW", "event": kind,
                             "contains": payload.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()),
                             "payload": payload, "created_at": 1_764_583_200})
                .to_string(),
                label: kind.to_owned(),
            }
        };
        let payment = |status: &str| {
            json!({"entity": {"id": p.id, "entity": "payment", "amount": p.amount,
                   "currency": p.currency, "status": status, "captured": status == "captured",
                   "notes": notes}})
        };
        let dispute = |k: usize, status: &str| {
            let cb = &p.chargebacks[k];
            json!({"payment": payment("captured"), "dispute": {"entity": {"id": cb.id,
                "entity": "dispute", "payment_id": p.id, "amount": cb.amount,
                "currency": p.currency, "amount_deducted": cb.amount, "reason_code": "chargeback",
                "status": status, "phase": "chargeback"}}})
        };
        match *change {
            Change::Captured => vec![event(
                "payment.captured",
                json!({"payment": payment("captured")}),
            )],
            Change::Failed => {
                let mut hooks = vec![event(
                    "payment.failed",
                    json!({"payment": payment("failed")}),
                )];
                // Every other failed payment is authorised late by the bank; nobody captures
                // it, so Razorpay refunds it by itself and sends the refund webhook with the
                // payment's `captured` false. No money of it is in anyone's books.
                if seq % 2 == 1 {
                    let mut auto_refund = event(
                        "refund.processed",
                        json!({"refund": {"entity": {"id": format!("rfnd_auto{seq}"),
                            "entity": "refund", "amount": p.amount, "currency": p.currency,
                            "payment_id": p.id, "status": "processed"}},
                            "payment": payment("refunded")}),
                    );
                    auto_refund.id.push('a');
                    hooks.push(auto_refund);
                }
                hooks
            }
            Change::RefundMade(r) => {
                let refund = &p.refunds[r];
                vec![event(
                    "refund.processed",
                    json!({"refund": {"entity": {"id": refund.id, "entity": "refund",
                        "amount": refund.amount, "currency": p.currency, "payment_id": p.id,
                        "status": "processed"}}, "payment": payment("captured")}),
                )]
            }
            Change::ChargedBack(k) => vec![event("payment.dispute.created", dispute(k, "open"))],
            Change::Reversed(k) => vec![event("payment.dispute.won", dispute(k, "won"))],
            Change::Lost(k) => vec![event("payment.dispute.lost", dispute(k, "lost"))],
            _ => Vec::new(),
        }
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::reinstatement_unreported(p, "won_not_reinstated")
    }

    fn schedule(&self) -> &'static [u64] {
        &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 432]
    }
}
