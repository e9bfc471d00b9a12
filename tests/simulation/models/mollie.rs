//! Mollie: a webhook is the form `id=tr_...` and nothing else; what happened is what its API
//! answers when the gateway asks (`GET /v2/payments/{id}`, with the refunds and chargebacks
//! embedded). Mollie calls the webhook when a payment's status changes and when a refund or a
//! chargeback is made or changes; the API then answers the payment as it is at that moment,
//! which may be newer than the change the webhook was sent for. Refunds are made queued or
//! pending and may be cancelled while they are, or fail after processing (the money comes
//! back); `amountRefunded` counts the refunds that stand. Chargebacks are listed with
//! `reversedAt` once reversed, and a payment can be charged back again after a reversal.
//! Mollie's documentation does not say whether `amountChargedBack` drops on a reversal, so
//! half the payments keep the gross total and half the net (the worst case either way). Its
//! chargeback fee is settled with the payouts, not in the payment. Mollie retries a webhook
//! that is not answered 2xx up to 10 times over 26 hours.

use serde_json::json;

use super::{Expected, Model, Webhook, decimal};
use crate::support::MOLLIE;
use crate::support::emulator::Emulator;
use crate::truth::{Change, DisputeState, OpKind, Payment, RefundState, Rules, Status};

pub struct Mollie;

impl Model for Mollie {
    fn provider(&self) -> &'static str {
        MOLLIE
    }

    fn rules(&self) -> Rules {
        Rules {
            refunds_pending: true,
            refunds_cancel: true,
            refunds_can_return: true,
            max_chargebacks: 3,
            chargeback_prefix: "chb_",
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
            OpKind::RefundCancel,
            OpKind::Chargeback,
            OpKind::Reverse,
        ]
    }

    fn currencies(&self) -> &'static [&'static str] {
        &["EUR", "USD", "JPY"]
    }

    fn asks_api(&self) -> bool {
        true
    }

    fn provider_toml(&self, api: Option<&Emulator>) -> String {
        api.map(|api| api.provider_toml(MOLLIE, "mollie", ""))
            .unwrap_or_default()
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("tr_{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, _seq: u64) -> Vec<Webhook> {
        let label = match change {
            Change::Captured => "paid",
            Change::Failed => "failed",
            Change::RefundMade(_) => "refund made",
            Change::RefundSettled(_) => "refund refunded",
            Change::RefundDeclined(_) | Change::RefundReturned(_) => "refund failed",
            Change::RefundCancelled(_) => "refund canceled",
            Change::ChargedBack(_) => "chargeback",
            Change::Reversed(_) => "chargeback reversed",
            _ => return Vec::new(),
        };
        vec![Webhook {
            id: p.id.clone(),
            body: format!("id={}", p.id),
            label: label.to_owned(),
        }]
    }

    fn api(&self, p: &Payment) -> Vec<(String, String)> {
        let c = p.currency;
        let money = |minor: i64| json!({"value": decimal(minor, c), "currency": c});
        let status = match p.status {
            Status::Open => "open",
            Status::Captured => "paid",
            // Mollie's three ways a payment ends without money.
            Status::Failed => ["failed", "canceled", "expired"][p.index % 3],
        };
        let mut payment = json!({"resource": "payment", "id": p.id, "mode": "test",
            "createdAt": "2026-12-01T10:00:00+00:00", "status": status,
            "amount": money(p.amount), "description": "Simulated order", "method": "creditcard",
            "metadata": p.order.map(|o| json!({"order_id": o.to_string()})),
            "profileId": "pfl_simulated",
            "_links": {"self": {"href": format!("https://api.mollie.com/v2/payments/{}", p.id)}}});
        if p.status == Status::Captured {
            let refunded = p.refunds_standing();
            payment["amountRefunded"] = money(refunded);
            payment["amountRemaining"] = money(p.captured - refunded);
            if !p.chargebacks.is_empty() {
                // Gross for even payments, net of reversals for odd ones.
                let charged_back = if p.index.is_multiple_of(2) {
                    p.withdrawn()
                } else {
                    p.charged_back()
                };
                payment["amountChargedBack"] = money(charged_back);
            }
            let mut embedded = serde_json::Map::new();
            if !p.refunds.is_empty() {
                let refunds: Vec<_> = p
                    .refunds
                    .iter()
                    .map(|r| {
                        let status = match r.state {
                            RefundState::Pending => "pending",
                            RefundState::Succeeded => "refunded",
                            RefundState::Declined | RefundState::Returned => "failed",
                            RefundState::Cancelled => "canceled",
                        };
                        json!({"resource": "refund", "id": r.id, "amount": money(r.amount),
                               "status": status, "paymentId": p.id,
                               "createdAt": "2026-12-02T10:00:00+00:00"})
                    })
                    .collect();
                embedded.insert("refunds".into(), json!(refunds));
            }
            if !p.chargebacks.is_empty() {
                let chargebacks: Vec<_> = p
                    .chargebacks
                    .iter()
                    .map(|cb| {
                        let reversed = (cb.state == DisputeState::Reinstated)
                            .then_some("2026-12-20T10:00:00+00:00");
                        json!({"resource": "chargeback", "id": cb.id, "amount": money(cb.amount),
                               "settlementAmount": money(-cb.amount), "paymentId": p.id,
                               "createdAt": "2026-12-10T10:00:00+00:00", "reversedAt": reversed})
                    })
                    .collect();
                embedded.insert("chargebacks".into(), json!(chargebacks));
            }
            if !embedded.is_empty() {
                payment["_embedded"] = serde_json::Value::Object(embedded);
            }
        }
        vec![(format!("/v2/payments/{}", p.id), payment.to_string())]
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected {
            // What Mollie counts in amountRefunded (pending refunds included).
            refunded: p.refunds_standing(),
            ..Expected::truth(p, false)
        }
    }

    fn schedule(&self) -> &'static [u64] {
        &[1, 2, 4, 8, 16, 32, 64, 128, 1305]
    }
}
