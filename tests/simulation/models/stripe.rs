//! Stripe: each change is an event carrying the object as it is after the change
//! (`payment_intent.succeeded`, `payment_intent.payment_failed`, `charge.refunded` with the
//! charge's cumulative `amount_refunded`, `charge.dispute.funds_withdrawn` with the dispute's
//! balance transaction and its fee, `charge.dispute.funds_reinstated`, `charge.dispute.closed`).
//! A charge has at most one dispute. Stripe retries an unacknowledged event for up to three
//! days with exponential backoff. Payouts: `payout.paid` with the payout object, and
//! `payout.failed` when one that was paid fails ("Some payouts that fail might initially show
//! as paid, then change to failed"); the settlement report is the itemized payout
//! reconciliation report ([`Stripe::report`]).

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::{MERCHANT, STRIPE, STRIPE_SECRET};
use crate::truth::{Change, OpKind, Payment, Rules};

pub struct Stripe;

impl Model for Stripe {
    fn provider(&self) -> &'static str {
        STRIPE
    }

    fn rules(&self) -> Rules {
        Rules {
            chargeback_fees: true,
            ..Rules::default()
        }
    }

    fn currencies(&self) -> &'static [&'static str] {
        &["USD", "EUR", "JPY"]
    }

    fn ops(&self) -> &'static [OpKind] {
        &[
            OpKind::Capture,
            OpKind::Fail,
            OpKind::Refund,
            OpKind::Chargeback,
            OpKind::Reverse,
            OpKind::Lose,
            OpKind::Payout,
            OpKind::PayoutFail,
        ]
    }

    fn settlement_report(&self, payments: &[Payment]) -> Option<String> {
        Some(Stripe::report(payments))
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        format!(
            "\n[[providers]]\nname = \"{STRIPE}\"\nscheme = \"stripe\"\npayload = \"stripe\"\n\
             merchant_id = {MERCHANT}\nsecrets = [\"{STRIPE_SECRET}\"]\n"
        )
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("pi_{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let currency = p.currency.to_lowercase();
        let metadata = match p.order {
            Some(order) => json!({"order_id": order.to_string()}),
            None => json!({}),
        };
        let event = |suffix: &str, kind: &str, object: serde_json::Value| {
            let id = format!("evt_{}_{seq}{suffix}", p.id);
            Webhook {
                id: id.clone(),
                body: json!({"id": id, "object": "event", "api_version": "2024-06-20",
                             "type": kind, "data": {"object": object}})
                .to_string(),
                label: kind.to_owned(),
            }
        };
        let dispute = |c: usize, status: &str, with_fee: bool| {
            let cb = &p.chargebacks[c];
            let transactions = if with_fee {
                json!([{"id": format!("txn_{}", cb.id), "object": "balance_transaction",
                        "amount": -cb.amount, "currency": currency, "fee": cb.fee,
                        "net": -(cb.amount + cb.fee), "type": "adjustment"}])
            } else {
                json!([])
            };
            json!({"id": cb.id, "object": "dispute", "amount": cb.amount, "currency": currency,
                   "charge": format!("ch_{}", p.id), "payment_intent": p.id, "status": status,
                   "balance_transactions": transactions})
        };
        match *change {
            Change::Captured => vec![event(
                "",
                "payment_intent.succeeded",
                json!({"id": p.id, "object": "payment_intent", "amount": p.amount,
                       "amount_received": p.captured, "currency": currency,
                       "status": "succeeded", "metadata": metadata}),
            )],
            Change::Failed => vec![event(
                "",
                "payment_intent.payment_failed",
                json!({"id": p.id, "object": "payment_intent", "amount": p.amount,
                       "currency": currency, "status": "requires_payment_method",
                       "metadata": metadata}),
            )],
            Change::RefundMade(_) => vec![event(
                "",
                "charge.refunded",
                json!({"id": format!("ch_{}", p.id), "object": "charge", "payment_intent": p.id,
                       "amount": p.captured, "amount_captured": p.captured,
                       "amount_refunded": p.refunded(false), "currency": currency,
                       "refunded": p.refunded(false) == p.captured, "metadata": metadata}),
            )],
            Change::ChargedBack(c) => vec![
                event(
                    "a",
                    "charge.dispute.created",
                    dispute(c, "needs_response", false),
                ),
                event(
                    "b",
                    "charge.dispute.funds_withdrawn",
                    dispute(c, "needs_response", true),
                ),
            ],
            Change::Reversed(c) => vec![
                event(
                    "a",
                    "charge.dispute.funds_reinstated",
                    dispute(c, "won", false),
                ),
                event("b", "charge.dispute.closed", dispute(c, "won", false)),
            ],
            Change::Lost(c) => vec![event(
                "",
                "charge.dispute.closed",
                dispute(c, "lost", false),
            )],
            Change::PaidOut(n) | Change::PayoutFailed(n) => {
                let payout = &p.payouts[n];
                let (kind, status, failure) = if payout.failed {
                    ("payout.failed", "failed", json!("could_not_process"))
                } else {
                    ("payout.paid", "paid", serde_json::Value::Null)
                };
                vec![event(
                    "",
                    kind,
                    json!({"id": payout.id, "object": "payout", "amount": payout.amount,
                           "arrival_date": 1764892800, "automatic": true, "currency": currency,
                           "method": "standard", "status": status, "type": "bank_account",
                           "failure_code": failure}),
                )]
            }
            _ => Vec::new(),
        }
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, true)
    }

    fn schedule(&self) -> &'static [u64] {
        &[
            1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 720, 720, 720, 720, 720,
        ]
    }
}

impl Stripe {
    /// The itemized payout reconciliation report of `payments`' lines paid out by payouts
    /// that stand (with the `payment_intent_id` column asked for), amounts in major units; and
    /// the lines still in the balance, without a payout, as the balance change from activity
    /// report lists them (those that add up to nothing: no payout takes them).
    pub fn report(payments: &[Payment]) -> String {
        let mut out = String::from(
            "automatic_payout_id,balance_transaction_id,created_utc,currency,gross,fee,net,\
             reporting_category,source_id,payment_intent_id\n",
        );
        let now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S");
        for p in payments {
            let currency = p.currency.to_lowercase();
            for line in p.balance_lines() {
                let payout = p
                    .paid_out
                    .get(&line.key)
                    .map_or("", |n| p.payouts[*n].id.as_str());
                let major = |minor: i64| super::decimal_signed(minor, p.currency);
                out.push_str(&format!(
                    "{},txn_{}_{},{now},{currency},{},{},{},{},{}_{},{}\n",
                    payout,
                    p.id,
                    line.key,
                    major(line.gross),
                    major(line.fee),
                    major(line.net()),
                    line.category,
                    line.key,
                    p.id,
                    p.id
                ));
            }
        }
        out
    }
}
