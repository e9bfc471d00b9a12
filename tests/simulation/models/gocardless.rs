//! GoCardless: a webhook is `{"events":[..]}`, signed; it may batch several events, each its
//! own event with its own id, naming its resource by link only (`links.payment`,
//! `links.refund`): amounts are in the API (`GET /payments/{id}`, `GET /refunds/{id}`). A
//! payment is `confirmed` then `paid_out` (two events), or `failed`; it can be `charged_back`
//! (the whole amount, an indemnity claim), the chargeback `chargeback_cancelled` (money back),
//! and charged back again. A refund is `created`, then `paid` and `refund_settled`, or it
//! `failed`; a paid refund can come back (`funds_returned`). No fee is in the payment.
//! GoCardless retries a webhook that is not answered 2xx with exponential backoff, 10 times.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::emulator::Emulator;
use crate::support::{GOCARDLESS, GOCARDLESS_SECRET};
use crate::truth::{Change, ChargebackSize, OpKind, Payment, RefundState, Rules, Status};

pub struct Gocardless;

impl Gocardless {
    fn event(
        &self,
        p: &Payment,
        seq: u64,
        n: u32,
        resource_type: &str,
        action: &str,
        links: serde_json::Value,
    ) -> serde_json::Value {
        let _ = p;
        json!({"id": format!("EV{seq}N{n}"), "created_at": "2026-12-01T10:00:00.000Z",
               "resource_type": resource_type, "action": action, "links": links,
               "details": {"origin": "gocardless", "cause": action, "description": "simulated"},
               "metadata": {}})
    }
}

impl Model for Gocardless {
    fn provider(&self) -> &'static str {
        GOCARDLESS
    }

    fn rules(&self) -> Rules {
        Rules {
            refunds_pending: true,
            refunds_can_return: true,
            max_chargebacks: 3,
            chargeback_size: ChargebackSize::Whole,
            refund_prefix: "RF",
            chargeback_prefix: "CB",
            ..Rules::default()
        }
    }

    fn ops(&self) -> &'static [OpKind] {
        &[
            OpKind::Capture,
            OpKind::Fail,
            OpKind::Refund,
            OpKind::RefundSettle,
            OpKind::RefundFail,
            OpKind::Chargeback,
            OpKind::Reverse,
            OpKind::Lose,
        ]
    }

    fn currencies(&self) -> &'static [&'static str] {
        &["GBP", "EUR"]
    }

    fn asks_api(&self) -> bool {
        true
    }

    fn provider_toml(&self, api: Option<&Emulator>) -> String {
        api.map(|api| {
            api.provider_toml(
                GOCARDLESS,
                "gocardless",
                &format!("secrets = [\"{GOCARDLESS_SECRET}\"]"),
            )
        })
        .unwrap_or_default()
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("PM{history}X{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let on_payment = json!({"payment": p.id});
        let on_refund = |r: usize| json!({"refund": p.refunds[r].id, "mandate": "MD1"});
        let events: Vec<(&str, &str, serde_json::Value)> = match *change {
            Change::Captured => vec![
                ("payments", "confirmed", on_payment.clone()),
                ("payments", "paid_out", on_payment),
            ],
            Change::Failed => vec![("payments", "failed", on_payment)],
            Change::RefundMade(r) => vec![("refunds", "created", on_refund(r))],
            Change::RefundSettled(r) => vec![
                ("refunds", "paid", on_refund(r)),
                ("refunds", "refund_settled", on_refund(r)),
            ],
            Change::RefundDeclined(r) => vec![("refunds", "failed", on_refund(r))],
            Change::RefundReturned(r) => vec![("refunds", "funds_returned", on_refund(r))],
            Change::ChargedBack(_) => vec![("payments", "charged_back", on_payment)],
            Change::Reversed(_) => vec![("payments", "chargeback_cancelled", on_payment)],
            Change::Lost(_) => vec![("payments", "chargeback_settled", on_payment)],
            _ => Vec::new(),
        };
        events
            .into_iter()
            .enumerate()
            .map(|(n, (resource_type, action, links))| {
                let event = self.event(p, seq, n as u32, resource_type, action, links);
                Webhook {
                    id: event["id"].as_str().unwrap_or_default().to_owned(),
                    body: json!({"events": [event]}).to_string(),
                    label: format!("{resource_type}.{action}"),
                }
            })
            .collect()
    }

    fn api(&self, p: &Payment) -> Vec<(String, String)> {
        let status = match p.status {
            Status::Open => "pending_submission",
            Status::Failed => "failed",
            Status::Captured if p.charged_back() > 0 => "charged_back",
            Status::Captured => "paid_out",
        };
        let amount = if p.status == Status::Captured {
            p.captured
        } else {
            p.amount
        };
        let metadata = match p.order {
            Some(order) => json!({"order_id": order.to_string()}),
            None => json!({}),
        };
        let mut resources = vec![(
            format!("/payments/{}", p.id),
            json!({"payments": {"id": p.id, "created_at": "2026-12-01T09:00:00.000Z",
                "charge_date": "2026-12-03", "amount": amount, "currency": p.currency,
                "status": status, "amount_refunded": p.refunded(false), "metadata": metadata,
                "links": {"mandate": "MD1", "creditor": "CR1"}}})
            .to_string(),
        )];
        for refund in &p.refunds {
            let status = match refund.state {
                RefundState::Pending => "pending_submission",
                RefundState::Succeeded => "paid",
                RefundState::Declined | RefundState::Cancelled => "failed",
                RefundState::Returned => "funds_returned",
            };
            resources.push((
                format!("/refunds/{}", refund.id),
                json!({"refunds": {"id": refund.id, "created_at": "2026-12-02T10:00:00.000Z",
                    "amount": refund.amount, "currency": p.currency, "status": status,
                    "metadata": {}, "links": {"payment": p.id, "mandate": "MD1"}}})
                .to_string(),
            ));
        }
        resources
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected {
            // A refund is booked when it is created (GoCardless has taken it from the next
            // payout); one that fails or comes back gives it back.
            refunded: p.refunds_standing(),
            ..Expected::truth(p, false)
        }
    }

    fn schedule(&self) -> &'static [u64] {
        &[1, 2, 10, 30, 60, 120, 240, 480]
    }

    fn merge(&self, first: &Webhook, second: &Webhook) -> Option<Webhook> {
        let mut a: serde_json::Value = serde_json::from_str(&first.body).ok()?;
        let b: serde_json::Value = serde_json::from_str(&second.body).ok()?;
        a["events"]
            .as_array_mut()?
            .extend(b["events"].as_array()?.iter().cloned());
        Some(Webhook {
            id: first.id.clone(),
            body: a.to_string(),
            label: format!("{} + {}", first.label, second.label),
        })
    }
}
