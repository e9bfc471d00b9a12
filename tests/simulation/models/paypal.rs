//! PayPal: each event carries its resource as it is (`PAYMENT.CAPTURE.COMPLETED`,
//! `PAYMENT.CAPTURE.DENIED`, `PAYMENT.CAPTURE.REFUNDED` with the refund, which names its
//! capture by its `up` link, `PAYMENT.CAPTURE.REVERSED` when PayPal takes a chargeback's money
//! back, shaped like a refund), signed with PayPal's certificate (SHA256withRSA over the
//! transmission id, time, webhook id and the body's CRC-32). Disputes are told by
//! `CUSTOMER.DISPUTE.*`, which move no money the gateway can book; PayPal documents no event
//! that gives a won chargeback's money back, so the gateway holds the reversal in attention.
//! PayPal retries up to 25 times over 3 days.

use serde_json::json;

use super::{Expected, Model, Webhook, decimal};
use crate::support::{MERCHANT, PAYPAL, paypal_host};
use crate::truth::{Change, Payment};

pub struct Paypal;

impl Model for Paypal {
    fn provider(&self) -> &'static str {
        PAYPAL
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        paypal_host::host().provider_toml(PAYPAL, MERCHANT)
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("CAP{history}X{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let c = p.currency;
        let money = |amount: i64| json!({"currency_code": c, "value": decimal(amount, c)});
        let event = |suffix: &str, kind: &str, resource_type: &str, resource: serde_json::Value| {
            let id = format!("WH-{seq}{suffix}-{}", p.id);
            Webhook {
                id: id.clone(),
                body: json!({"id": id, "event_version": "1.0",
                             "create_time": "2026-12-01T10:00:00Z", "resource_type": resource_type,
                             "resource_version": "2.0", "event_type": kind, "summary": kind,
                             "resource": resource})
                .to_string(),
                label: kind.to_owned(),
            }
        };
        let up = |id: &str, kind: &str| {
            json!([{"href": format!("https://api.paypal.com/v2/payments/{kind}/{id}"), "rel": "self", "method": "GET"},
                   {"href": format!("https://api.paypal.com/v2/payments/captures/{}", p.id), "rel": "up", "method": "GET"}])
        };
        let dispute = |k: usize, status: &str, outcome: &str| {
            let cb = &p.chargebacks[k];
            json!({"dispute_id": format!("PP-D-{}", cb.id), "status": status,
                   "dispute_amount": money(cb.amount),
                   "disputed_transactions": [{"seller_transaction_id": p.id}],
                   "dispute_outcome": {"outcome_code": outcome}})
        };
        let mut capture = json!({"id": p.id, "status": "COMPLETED", "final_capture": true,
                                 "amount": money(p.captured.max(1))});
        if let Some(order) = p.order {
            capture["custom_id"] = json!(order.to_string());
        }
        match *change {
            Change::Captured => vec![event("", "PAYMENT.CAPTURE.COMPLETED", "capture", capture)],
            Change::Failed => {
                capture["status"] = json!("DECLINED");
                capture["amount"] = money(p.amount);
                vec![event("", "PAYMENT.CAPTURE.DENIED", "capture", capture)]
            }
            Change::RefundMade(r) => {
                let refund = &p.refunds[r];
                vec![event(
                    "",
                    "PAYMENT.CAPTURE.REFUNDED",
                    "refund",
                    json!({"id": refund.id, "status": "COMPLETED", "amount": money(refund.amount),
                           "links": up(&refund.id, "refunds")}),
                )]
            }
            Change::ChargedBack(k) => {
                let cb = &p.chargebacks[k];
                vec![
                    event(
                        "a",
                        "CUSTOMER.DISPUTE.CREATED",
                        "dispute",
                        dispute(k, "OPEN", "NONE"),
                    ),
                    event(
                        "b",
                        "PAYMENT.CAPTURE.REVERSED",
                        "refund",
                        json!({"id": cb.id, "status": "COMPLETED", "amount": money(cb.amount),
                               "note_to_payer": "Payment reversed", "links": up(&cb.id, "refunds")}),
                    ),
                ]
            }
            Change::Reversed(k) => vec![event(
                "",
                "CUSTOMER.DISPUTE.RESOLVED",
                "dispute",
                dispute(k, "RESOLVED", "RESOLVED_SELLER_FAVOUR"),
            )],
            Change::Lost(k) => vec![event(
                "",
                "CUSTOMER.DISPUTE.RESOLVED",
                "dispute",
                dispute(k, "RESOLVED", "RESOLVED_BUYER_FAVOUR"),
            )],
            _ => Vec::new(),
        }
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::reinstatement_unreported(p, "open")
    }

    fn schedule(&self) -> &'static [u64] {
        &[
            1, 2, 4, 8, 15, 30, 60, 120, 180, 180, 180, 180, 180, 180, 180, 180, 180, 180, 180,
            180, 180, 180, 180, 180,
        ]
    }
}
