//! Adyen: a notification is `{"live":..,"notificationItems":[..]}`, one item per event, and
//! Adyen may batch several in one request; each item is signed on its own (HMAC over eight of
//! its fields). An item carries the event, not the payment's state: `AUTHORISATION` (with
//! immediate capture, the default, the money captured), `REFUND` (its own amount, its own
//! `pspReference`), `REFUND_FAILED` and `REFUNDED_REVERSED` (a refund that did not reach the
//! cardholder: the money is back), `CHARGEBACK`, `CHARGEBACK_REVERSED`, and
//! `SECOND_CHARGEBACK` after a reversal, all of one dispute sharing its `pspReference`. No
//! chargeback fee is in the item (it comes with the settlement). Adyen retries three times
//! (9, 18, 27 s), then from a queue after 2, 5, 10, 15, 30 min, 1, 2, 4, 8 h, for 30 days.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{ADYEN, ADYEN_KEY};
use crate::truth::{Change, OpKind, Payment, RefundState, Rules};

pub struct Adyen;

impl Adyen {
    #[allow(clippy::too_many_arguments)]
    fn item(
        &self,
        psp: &str,
        original: Option<&str>,
        reference: &str,
        amount: i64,
        currency: &str,
        code: &str,
        success: bool,
    ) -> (serde_json::Value, String) {
        let mut item = json!({"pspReference": psp, "merchantAccountCode": "GatewayTest",
            "merchantReference": reference, "amount": {"value": amount, "currency": currency},
            "eventCode": code, "success": if success { "true" } else { "false" },
            "eventDate": "2026-12-01T10:00:00+01:00"});
        if let Some(original) = original {
            item["originalReference"] = json!(original);
        }
        let key = format!("{psp}:{code}:{success}");
        (json!({"NotificationRequestItem": item}), key)
    }
}

impl Model for Adyen {
    fn provider(&self) -> &'static str {
        ADYEN
    }

    fn rules(&self) -> Rules {
        Rules {
            refunds_can_return: true,
            max_chargebacks: 2,
            second_chargeback_final: true,
            ..Rules::default()
        }
    }

    fn ops(&self) -> &'static [OpKind] {
        &[
            OpKind::Capture,
            OpKind::Fail,
            OpKind::Refund,
            OpKind::RefundFail,
            OpKind::Chargeback,
            OpKind::Reverse,
            OpKind::Lose,
        ]
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        super::provider_entry(ADYEN, "adyen", &format!("secrets = [\"{ADYEN_KEY}\"]"))
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("PSP{history}X{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let reference = p.order.map_or_else(String::new, |o| o.to_string());
        let c = p.currency;
        let (item, key) = match *change {
            Change::Captured => self.item(
                &p.id,
                None,
                &reference,
                p.captured,
                c,
                "AUTHORISATION",
                true,
            ),
            Change::Failed => {
                self.item(&p.id, None, &reference, p.amount, c, "AUTHORISATION", false)
            }
            Change::RefundMade(r) => {
                let refund = &p.refunds[r];
                self.item(
                    &refund.id,
                    Some(&p.id),
                    &reference,
                    refund.amount,
                    c,
                    "REFUND",
                    true,
                )
            }
            Change::RefundReturned(r) => {
                let refund = &p.refunds[r];
                // Adyen's two ways of saying the refund did not reach the cardholder.
                let code = if seq.is_multiple_of(2) {
                    "REFUND_FAILED"
                } else {
                    "REFUNDED_REVERSED"
                };
                debug_assert_eq!(refund.state, RefundState::Returned);
                self.item(
                    &refund.id,
                    Some(&p.id),
                    &reference,
                    refund.amount,
                    c,
                    code,
                    true,
                )
            }
            Change::ChargedBack(k) => {
                let cb = &p.chargebacks[k];
                // After a reversal, the same dispute goes on to its second chargeback.
                match p.chargebacks[..k].last() {
                    Some(first) if cb.after_reversal => self.item(
                        &first.id,
                        Some(&p.id),
                        &reference,
                        cb.amount,
                        c,
                        "SECOND_CHARGEBACK",
                        true,
                    ),
                    _ => self.item(
                        &cb.id,
                        Some(&p.id),
                        &reference,
                        cb.amount,
                        c,
                        "CHARGEBACK",
                        true,
                    ),
                }
            }
            Change::Reversed(k) => {
                let cb = &p.chargebacks[k];
                self.item(
                    &cb.id,
                    Some(&p.id),
                    &reference,
                    cb.amount,
                    c,
                    "CHARGEBACK_REVERSED",
                    true,
                )
            }
            Change::Lost(k) => {
                let cb = &p.chargebacks[k];
                let (psp, code) = match p.chargebacks[..k].last() {
                    Some(first) if cb.after_reversal => (first.id.clone(), "PREARBITRATION_LOST"),
                    _ => (cb.id.clone(), "NOTIFICATION_OF_FRAUD"),
                };
                self.item(&psp, Some(&p.id), &reference, cb.amount, c, code, true)
            }
            _ => return Vec::new(),
        };
        vec![Webhook {
            id: key.clone(),
            body: json!({"live": "false", "notificationItems": [item]}).to_string(),
            label: key,
        }]
    }

    fn event_ids(&self, webhook: &Webhook) -> Vec<String> {
        webhook.label.split(" + ").map(str::to_owned).collect()
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, false)
    }

    fn schedule(&self) -> &'static [u64] {
        &[
            0, 0, 0, 2, 5, 10, 15, 30, 60, 120, 240, 480, 480, 480, 480, 480, 480,
        ]
    }

    fn merge(&self, first: &Webhook, second: &Webhook) -> Option<Webhook> {
        let mut a: serde_json::Value = serde_json::from_str(&first.body).ok()?;
        let b: serde_json::Value = serde_json::from_str(&second.body).ok()?;
        a["notificationItems"]
            .as_array_mut()?
            .extend(b["notificationItems"].as_array()?.iter().cloned());
        Some(Webhook {
            id: first.id.clone(),
            body: a.to_string(),
            label: format!("{} + {}", first.label, second.label),
        })
    }
}
