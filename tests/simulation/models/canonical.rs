//! The canonical payload (`docs/callbacks.md`), sent by a Standard Webhooks sender (`acme`) or
//! a plain HMAC sender (`plain`): the merchant's own platform, or any sender that keeps the
//! gateway's format. It tells each change as one event carrying the change itself: a capture,
//! a failure, each refund (with its id, or without one as older senders do), each chargeback
//! with its fee, its reinstatement and its close. Standard Webhooks' retry schedule is Svix's
//! (immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: 8 attempts); a plain HMAC
//! sender documents none, so the same is assumed.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{ACME, ACME_SECRET, MERCHANT, PLAIN, PLAIN_SECRET};
use crate::truth::{Change, DisputeState, Payment, Rules};

pub struct Canonical {
    provider: &'static str,
    scheme: &'static str,
    secret: &'static str,
}

impl Canonical {
    pub fn standard_webhooks() -> Self {
        Self {
            provider: ACME,
            scheme: "standard-webhooks",
            secret: ACME_SECRET,
        }
    }

    pub fn plain_hmac() -> Self {
        Self {
            provider: PLAIN,
            scheme: "hmac-sha256",
            secret: PLAIN_SECRET,
        }
    }
}

/// Whether payment `p`'s refunds carry their refund id: every other payment's do, so both
/// kinds of sender are in every run.
fn names_refunds(p: &Payment) -> bool {
    p.index.is_multiple_of(2)
}

impl Model for Canonical {
    fn provider(&self) -> &'static str {
        self.provider
    }

    fn rules(&self) -> Rules {
        Rules {
            max_chargebacks: 2,
            chargeback_fees: true,
            ..Rules::default()
        }
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        format!(
            "\n[[providers]]\nname = \"{}\"\nscheme = \"{}\"\npayload = \"canonical\"\n\
             merchant_id = {MERCHANT}\nsecrets = [\"{}\"]\n",
            self.provider, self.scheme, self.secret
        )
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let id = format!("evt_{}_{seq}", p.id);
        let (kind, data) = match *change {
            Change::Captured => (
                "payment.succeeded",
                json!({"payment_id": p.id, "order_id": p.order, "amount_minor": p.captured,
                       "currency": p.currency}),
            ),
            Change::Failed => (
                "payment.failed",
                json!({"payment_id": p.id, "order_id": p.order}),
            ),
            Change::RefundMade(r) => {
                let refund = &p.refunds[r];
                let mut data = json!({"payment_id": p.id, "amount_minor": refund.amount,
                                      "currency": p.currency});
                if names_refunds(p) {
                    data["refund_id"] = json!(refund.id);
                }
                ("refund.succeeded", data)
            }
            Change::ChargedBack(c) => {
                let cb = &p.chargebacks[c];
                (
                    "dispute.funds_withdrawn",
                    json!({"dispute_id": cb.id, "payment_id": p.id, "amount_minor": cb.amount,
                           "currency": p.currency, "fee_minor": cb.fee}),
                )
            }
            Change::Reversed(c) => {
                let cb = &p.chargebacks[c];
                (
                    "dispute.funds_reinstated",
                    json!({"dispute_id": cb.id, "payment_id": p.id, "amount_minor": cb.amount,
                           "currency": p.currency}),
                )
            }
            Change::Lost(c) => (
                "dispute.closed",
                json!({"dispute_id": p.chargebacks[c].id, "payment_id": p.id, "status": "lost"}),
            ),
            _ => return Vec::new(),
        };
        let mut webhooks = vec![Webhook {
            id: id.clone(),
            body: json!({"id": id, "type": kind, "data": data}).to_string(),
            label: kind.to_owned(),
        }];
        // A won dispute is closed after its money came back.
        if let Change::Reversed(c) = *change
            && p.chargebacks[c].state == DisputeState::Reinstated
        {
            let id = format!("evt_{}_{seq}c", p.id);
            webhooks.push(Webhook {
                id: id.clone(),
                body: json!({"id": id, "type": "dispute.closed", "data": {
                    "dispute_id": p.chargebacks[c].id, "payment_id": p.id, "status": "won"}})
                .to_string(),
                label: "dispute.closed".into(),
            });
        }
        webhooks
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, true)
    }

    fn schedule(&self) -> &'static [u64] {
        &[0, 5, 30, 120, 300, 600, 600]
    }
}
