//! Paddle Billing: each event carries the entity as it is (`transaction.completed` with
//! `details.totals.grand_total`, `transaction.payment_failed`; refunds and chargebacks are
//! adjustments, `adjustment.created` and `adjustment.updated`). Most live refunds are created
//! `pending_approval` and later `approved` or `rejected`. A chargeback is an `approved`
//! adjustment of action `chargeback` whose `payout_totals.chargeback_fee` is the fee; its
//! reversal is a new adjustment of action `chargeback_reverse` (naming only the transaction),
//! and the chargeback's own status becomes `reversed`; the transaction can be charged back
//! again. Amounts are strings of minor units. Paddle retries up to 60 times over 3 days.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{PADDLE, PADDLE_SECRET};
use crate::truth::{Change, OpKind, Payment, Rules};

pub struct Paddle;

impl Model for Paddle {
    fn provider(&self) -> &'static str {
        PADDLE
    }

    fn rules(&self) -> Rules {
        Rules {
            refunds_pending: true,
            chargeback_fees: true,
            max_chargebacks: 2,
            refund_prefix: "adj_r",
            chargeback_prefix: "adj_c",
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
        ]
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        super::provider_entry(
            PADDLE,
            "paddle",
            &format!("secrets = [\"{PADDLE_SECRET}\"]"),
        )
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("txn_{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let c = p.currency;
        let event = |suffix: &str, kind: &str, data: serde_json::Value| {
            let id = format!("evt_{seq}{suffix}{}", p.id.replace('_', ""));
            Webhook {
                id: id.clone(),
                body: json!({"event_id": id, "event_type": kind,
                             "occurred_at": "2026-12-01T10:00:00Z",
                             "notification_id": format!("ntf_{seq}{suffix}"), "data": data})
                .to_string(),
                label: kind.to_owned(),
            }
        };
        let refund = |r: usize, status: &str| {
            let refund = &p.refunds[r];
            json!({"id": refund.id, "action": "refund", "type": "partial",
                   "transaction_id": p.id, "status": status, "currency_code": c,
                   "reason": "requested", "totals": {"subtotal": refund.amount.to_string(),
                   "tax": "0", "total": refund.amount.to_string(), "currency_code": c}})
        };
        let chargeback = |k: usize, status: &str| {
            let cb = &p.chargebacks[k];
            json!({"id": cb.id, "action": "chargeback", "type": "full", "transaction_id": p.id,
                   "status": status, "currency_code": c, "reason": "fraudulent",
                   "totals": {"subtotal": cb.amount.to_string(), "tax": "0",
                              "total": cb.amount.to_string(), "currency_code": c},
                   "payout_totals": {"subtotal": cb.amount.to_string(), "tax": "0",
                       "total": cb.amount.to_string(), "fee": "0",
                       "chargeback_fee": {"amount": cb.fee.to_string(), "original": null},
                       "earnings": format!("-{}", cb.amount + cb.fee), "currency_code": c}})
        };
        match *change {
            Change::Captured => vec![event(
                "",
                "transaction.completed",
                json!({"id": p.id, "status": "completed", "currency_code": c,
                       "custom_data": p.order.map(|o| json!({"order_id": o.to_string()})),
                       "details": {"totals": {"subtotal": p.captured.to_string(), "tax": "0",
                           "total": p.captured.to_string(),
                           "grand_total": p.captured.to_string()}}}),
            )],
            Change::Failed => vec![event(
                "",
                "transaction.payment_failed",
                json!({"id": p.id, "status": "past_due", "currency_code": c,
                       "custom_data": p.order.map(|o| json!({"order_id": o.to_string()}))}),
            )],
            Change::RefundMade(r) => vec![event(
                "",
                "adjustment.created",
                refund(r, "pending_approval"),
            )],
            Change::RefundSettled(r) => {
                vec![event("", "adjustment.updated", refund(r, "approved"))]
            }
            Change::RefundDeclined(r) => {
                vec![event("", "adjustment.updated", refund(r, "rejected"))]
            }
            Change::ChargedBack(k) => {
                vec![event("", "adjustment.created", chargeback(k, "approved"))]
            }
            Change::Reversed(k) => {
                let cb = &p.chargebacks[k];
                vec![
                    event(
                        "a",
                        "adjustment.created",
                        json!({"id": format!("{}v", cb.id), "action": "chargeback_reverse",
                               "type": "full", "transaction_id": p.id, "status": "approved",
                               "currency_code": c, "reason": "chargeback won",
                               "totals": {"subtotal": cb.amount.to_string(), "tax": "0",
                                          "total": cb.amount.to_string(), "currency_code": c}}),
                    ),
                    event("b", "adjustment.updated", chargeback(k, "reversed")),
                ]
            }
            _ => Vec::new(),
        }
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, true)
    }

    fn schedule(&self) -> &'static [u64] {
        &[
            1, 1, 2, 2, 4, 4, 8, 8, 15, 15, 30, 30, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60,
            60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60,
            60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60, 60,
        ]
    }
}
