//! Square: each event carries the object as it is after the change (`payment.updated` with
//! the payment `COMPLETED` or `FAILED`; `refund.created` and `refund.updated` with the refund,
//! `PENDING` then `COMPLETED`, or `FAILED`/`REJECTED` when the funds could not be secured;
//! `dispute.created` and `dispute.state.updated` with the dispute's state). Square charges no
//! chargeback fee. It retries an unacknowledged notification for up to 24 hours (older pages
//! say 72).

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{SQUARE, SQUARE_KEY, SQUARE_URL};
use crate::truth::{Change, OpKind, Payment, Rules};

pub struct Square;

impl Model for Square {
    fn provider(&self) -> &'static str {
        SQUARE
    }

    fn rules(&self) -> Rules {
        Rules {
            refunds_pending: true,
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

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        super::provider_entry(
            SQUARE,
            "square",
            &format!("secrets = [\"{SQUARE_KEY}\"]\nnotification_url = \"{SQUARE_URL}\""),
        )
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("SQ{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let money = |amount: i64| json!({"amount": amount, "currency": p.currency});
        let event =
            |suffix: &str, kind: &str, data_type: &str, id: &str, object: serde_json::Value| {
                let event_id = format!("sq{seq}{suffix}-{}", p.id);
                Webhook {
                    id: event_id.clone(),
                    body: json!({"merchant_id": "MLGW", "type": kind, "event_id": event_id,
                             "created_at": "2026-12-01T10:00:00Z",
                             "data": {"type": data_type, "id": id, "object": object}})
                    .to_string(),
                    label: kind.to_owned(),
                }
            };
        let payment = |status: &str| {
            json!({"payment": {"id": p.id, "status": status,
                "reference_id": p.order.map(|o| o.to_string()), "source_type": "CARD",
                "amount_money": money(p.amount), "total_money": money(p.captured.max(p.amount))}})
        };
        let refund = |r: usize, status: &str| {
            let refund = &p.refunds[r];
            json!({"refund": {"id": refund.id, "payment_id": p.id, "status": status,
                              "amount_money": money(refund.amount)}})
        };
        let dispute = |k: usize, state: &str| {
            let cb = &p.chargebacks[k];
            json!({"dispute": {"id": cb.id, "amount_money": money(cb.amount), "reason": "NOT_RECEIVED",
                "state": state, "disputed_payment": {"payment_id": p.id}, "card_brand": "VISA",
                "version": seq}})
        };
        match *change {
            Change::Captured => vec![event(
                "",
                "payment.updated",
                "payment",
                &p.id,
                payment("COMPLETED"),
            )],
            Change::Failed => vec![event(
                "",
                "payment.updated",
                "payment",
                &p.id,
                payment("FAILED"),
            )],
            Change::RefundMade(r) => vec![event(
                "",
                "refund.created",
                "refund",
                &p.refunds[r].id,
                refund(r, "PENDING"),
            )],
            Change::RefundSettled(r) => vec![event(
                "",
                "refund.updated",
                "refund",
                &p.refunds[r].id,
                refund(r, "COMPLETED"),
            )],
            Change::RefundDeclined(r) => vec![event(
                "",
                "refund.updated",
                "refund",
                &p.refunds[r].id,
                refund(
                    r,
                    if seq.is_multiple_of(2) {
                        "FAILED"
                    } else {
                        "REJECTED"
                    },
                ),
            )],
            Change::ChargedBack(k) => vec![event(
                "",
                "dispute.created",
                "dispute",
                &p.chargebacks[k].id,
                dispute(k, "EVIDENCE_REQUIRED"),
            )],
            Change::Reversed(k) => vec![event(
                "",
                "dispute.state.updated",
                "dispute",
                &p.chargebacks[k].id,
                dispute(k, "WON"),
            )],
            Change::Lost(k) => vec![event(
                "",
                "dispute.state.updated",
                "dispute",
                &p.chargebacks[k].id,
                dispute(k, "LOST"),
            )],
            _ => Vec::new(),
        }
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, false)
    }

    fn schedule(&self) -> &'static [u64] {
        &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    }
}
