//! A history: the payments, what happens to them at the provider, and how and when the
//! provider's webhooks reach the gateway, with the faults in between. Generated from a seed,
//! written as JSON (`tests/simulation/cases/`), and shrunk by removing steps while the
//! violation stays.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::models::Model;
use crate::truth::{Op, OpKind, Payment, Status};

/// One history, as a case file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Case {
    pub provider: String,
    /// The seed the history was generated from (a case shrunk from it no longer is its
    /// output, but says where it came from).
    pub seed: u64,
    /// What was violated, when the case was kept for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
    /// The commit the violation was found on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_on: Option<String>,
    pub payments: Vec<PaymentSpec>,
    pub steps: Vec<Step>,
}

/// A payment of the history and the merchant's order it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentSpec {
    pub amount: i64,
    pub currency: String,
    pub order: OrderSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderSpec {
    /// An order of the payment's amount and currency.
    Matching,
    /// An order of another amount (the capture is then held).
    OtherAmount,
    /// The payment names no order.
    None,
    /// The same order as the payment before it (one of the two captures is held).
    SameAsPrevious,
}

/// One step of the schedule; a step runs once the one before it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// Something happens at the provider (`id` is stable under shrinking); it sends its
    /// webhooks, which wait to be delivered.
    Op {
        id: u32,
        op: Op,
    },
    /// The provider sends these webhooks, all at once (the same one twice: a duplicate at
    /// once; several of one payment: concurrency on it). A delivery that is not acknowledged
    /// is retried with the provider's backoff, after the steps that follow.
    Deliver {
        webhooks: Vec<WebhookRef>,
    },
    Fault {
        fault: Fault,
    },
}

/// The `n`th webhook that operation `op` sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WebhookRef {
    pub op: u32,
    pub n: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum Fault {
    /// This history's idempotency records expire (days pass): later deliveries are first
    /// deliveries again as far as the records know.
    ExpireRecords,
    /// This history's event-log rows move `months` back (1 to 3: kept, not archived).
    AgeMonths { months: u8 },
    /// This history's event-log rows move 14 months back and `history archive` archives and
    /// drops their month.
    ArchiveAndDrop,
    /// Finance replays this history's lines of the archives written so far (`replay`).
    ReplayArchive,
    /// Finance exports the provider's events and replays this history's lines (`export`,
    /// `replay`).
    ExportAndReplay,
    /// An operator replays a stored event (`/admin/events/../replay`, as the console does).
    AdminReplay { webhook: WebhookRef },
    /// The gateway is killed with SIGKILL and started again.
    KillAndRestart,
    /// The database cuts every connection of the gateway.
    CutConnections,
    /// The provider's API answers 503 to the next `count` requests.
    ApiUnavailable { count: u8 },
}

/// The faults `--faults` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    Duplicates,
    Order,
    Concurrency,
    Retries,
    Expiry,
    Replays,
    Export,
    Archive,
    Kill,
    Cut,
}

impl FaultKind {
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Duplicates,
        FaultKind::Order,
        FaultKind::Concurrency,
        FaultKind::Retries,
        FaultKind::Expiry,
        FaultKind::Replays,
        FaultKind::Export,
        FaultKind::Archive,
        FaultKind::Kill,
        FaultKind::Cut,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Duplicates => "duplicates",
            FaultKind::Order => "order",
            FaultKind::Concurrency => "concurrency",
            FaultKind::Retries => "retries",
            FaultKind::Expiry => "expiry",
            FaultKind::Replays => "replays",
            FaultKind::Export => "export",
            FaultKind::Archive => "archive",
            FaultKind::Kill => "kill",
            FaultKind::Cut => "cut",
        }
    }

    pub fn parse(list: &str) -> Result<Vec<FaultKind>, String> {
        if list == "all" {
            return Ok(Self::ALL.to_vec());
        }
        if list == "none" {
            return Ok(Vec::new());
        }
        list.split(',')
            .map(|name| {
                Self::ALL
                    .into_iter()
                    .find(|f| f.name() == name.trim())
                    .ok_or_else(|| {
                        let names: Vec<_> = Self::ALL.iter().map(|f| f.name()).collect();
                        format!(
                            "unknown fault {name:?} (known: all, none, {})",
                            names.join(", ")
                        )
                    })
            })
            .collect()
    }
}

/// What the generator may use: the provider's model (its operations, currencies, and how
/// many webhooks each change sends, known by applying it to a truth of the generator's own),
/// the faults asked for, and the histories' size.
pub struct Palette<'a> {
    pub model: &'a dyn Model,
    pub faults: &'a [FaultKind],
    /// Larger histories: more payments and steps (a soak).
    pub size: usize,
}

/// A history from `seed`. Every operation's webhooks are delivered by a later step (the
/// runner delivers any it was never told to at the end, as a provider's first attempt that
/// comes late), in an order and with the duplicates and faults the seed picks.
pub fn generate(provider: &str, seed: u64, palette: &Palette<'_>) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let model = palette.model;
    let has = |f: FaultKind| palette.faults.contains(&f);
    let currencies = model.currencies();
    let payments: Vec<PaymentSpec> = (0..rng.random_range(1..=2 + palette.size))
        .map(|i| {
            let currency = currencies[rng.random_range(0..currencies.len())];
            let amount = match super::models::exponent(currency) {
                0 => rng.random_range(1..=500) * 100,
                _ => rng.random_range(100..=200_000),
            };
            let order = match rng.random_range(0..20) {
                0 => OrderSpec::OtherAmount,
                1 => OrderSpec::None,
                2 if i > 0 => OrderSpec::SameAsPrevious,
                _ => OrderSpec::Matching,
            };
            PaymentSpec {
                amount,
                currency: currency.to_owned(),
                order,
            }
        })
        .collect();
    // The generator's own truth: which operations can happen, and how many webhooks each
    // sends.
    let rules = model.rules();
    let mut truth: Vec<Payment> = payments
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let currency = currencies
                .iter()
                .find(|c| **c == spec.currency)
                .copied()
                .unwrap_or(currencies[0]);
            Payment::new(i, model.payment_id(0, i), Some(1), spec.amount, currency)
        })
        .collect();
    let mut steps = Vec::new();
    // Webhooks sent and not yet told to be delivered; delivered ones (for duplicates).
    let mut waiting: Vec<WebhookRef> = Vec::new();
    let mut sent: Vec<WebhookRef> = Vec::new();
    let mut op_id = 0u32;
    // The webhook last delivered again after its record expired.
    let mut late: Option<WebhookRef> = None;
    let ops_count = rng.random_range(4..=8 + 4 * palette.size) * payments.len();
    for _ in 0..ops_count {
        let payment = rng.random_range(0..payments.len());
        let Some((op, change)) = (0..20).find_map(|_| {
            let kind = if truth[payment].status == Status::Open {
                if rng.random_bool(0.85) || !model.ops().contains(&OpKind::Fail) {
                    OpKind::Capture
                } else {
                    OpKind::Fail
                }
            } else {
                model.ops()[rng.random_range(0..model.ops().len())]
            };
            let op = op_of(kind, payment, &truth[payment], &mut rng);
            let mut after = truth[payment].clone();
            let change = after.apply(&op, &rules)?;
            truth[payment] = after;
            Some((op, change))
        }) else {
            continue;
        };
        let sends = model.webhooks(&truth[payment], &change, 0).len();
        steps.push(Step::Op { id: op_id, op });
        for n in 0..sends {
            waiting.push(WebhookRef {
                op: op_id,
                n: n as u8,
            });
        }
        op_id += 1;
        // Deliver some of what waits, in any order when asked.
        while !waiting.is_empty() && rng.random_bool(0.6) {
            let pick = if has(FaultKind::Order) && rng.random_bool(0.3) {
                rng.random_range(0..waiting.len())
            } else {
                0
            };
            let webhook = waiting.remove(pick);
            let mut together = vec![webhook];
            if has(FaultKind::Duplicates) && rng.random_bool(0.15) {
                together.push(webhook);
            }
            if has(FaultKind::Concurrency) && !waiting.is_empty() && rng.random_bool(0.2) {
                together.push(waiting.remove(0));
            }
            sent.extend(together.iter().copied());
            steps.push(Step::Deliver { webhooks: together });
        }
        // Faults between deliveries.
        if has(FaultKind::Duplicates) && !sent.is_empty() && rng.random_bool(0.15) {
            let webhook = sent[rng.random_range(0..sent.len())];
            steps.push(Step::Deliver {
                webhooks: vec![webhook],
            });
        }
        if has(FaultKind::Expiry) && rng.random_bool(0.15) {
            steps.push(fault(Fault::ExpireRecords));
            if !sent.is_empty() && rng.random_bool(0.7) {
                // Days later, after the record expired: often the one sent again before (a
                // provider that keeps retrying one event), else any.
                let webhook = match late {
                    Some(again) if rng.random_bool(0.5) => again,
                    _ => sent[rng.random_range(0..sent.len())],
                };
                late = Some(webhook);
                steps.push(Step::Deliver {
                    webhooks: vec![webhook],
                });
            }
        }
        // A provider that keeps sending one event for days while the gateway's records of it
        // expire, its first delivery in an older month of the event log.
        if has(FaultKind::Expiry) && !sent.is_empty() && rng.random_bool(0.06) {
            let webhook = sent[rng.random_range(0..sent.len())];
            if has(FaultKind::Archive) && rng.random_bool(0.5) {
                steps.push(fault(Fault::AgeMonths { months: 1 }));
            }
            for _ in 0..2 {
                steps.push(fault(Fault::ExpireRecords));
                steps.push(Step::Deliver {
                    webhooks: vec![webhook],
                });
            }
        }
        if has(FaultKind::Archive) && rng.random_bool(0.12) {
            steps.push(fault(Fault::AgeMonths {
                months: rng.random_range(1..=3),
            }));
        }
        if has(FaultKind::Archive) && rng.random_bool(0.04) {
            steps.push(fault(Fault::ArchiveAndDrop));
            if rng.random_bool(0.5) {
                steps.push(fault(Fault::ReplayArchive));
            }
        }
        if has(FaultKind::Replays) && !sent.is_empty() && rng.random_bool(0.1) {
            let webhook = sent[rng.random_range(0..sent.len())];
            steps.push(fault(Fault::AdminReplay { webhook }));
        }
        if has(FaultKind::Export) && rng.random_bool(0.04) {
            steps.push(fault(Fault::ExportAndReplay));
        }
        if has(FaultKind::Kill) && rng.random_bool(0.02) {
            steps.push(fault(Fault::KillAndRestart));
        }
        if has(FaultKind::Cut) && rng.random_bool(0.03) {
            steps.push(fault(Fault::CutConnections));
        }
        if has(FaultKind::Retries) && model.asks_api() && rng.random_bool(0.06) {
            steps.push(fault(Fault::ApiUnavailable {
                count: rng.random_range(1..=3),
            }));
        }
    }
    // The rest are delivered, in any order.
    while !waiting.is_empty() {
        let pick = if has(FaultKind::Order) {
            rng.random_range(0..waiting.len())
        } else {
            0
        };
        let webhook = waiting.remove(pick);
        steps.push(Step::Deliver {
            webhooks: vec![webhook],
        });
    }
    Case {
        provider: provider.to_owned(),
        seed,
        violation: None,
        found_on: None,
        payments,
        steps,
    }
}

fn fault(fault: Fault) -> Step {
    Step::Fault { fault }
}

fn op_of(kind: OpKind, payment: usize, truth: &Payment, rng: &mut StdRng) -> Op {
    let percent = if rng.random_bool(0.3) {
        100
    } else {
        rng.random_range(1..=99)
    };
    // One of the payment's refunds or chargebacks (the newest, most of the time).
    let mut nth = |len: usize| {
        if len == 0 || rng.random_bool(0.7) {
            len.saturating_sub(1)
        } else {
            rng.random_range(0..len)
        }
    };
    let refund = nth(truth.refunds.len());
    let payout = nth(truth.payouts.len());
    let chargeback = nth(truth.chargebacks.len());
    match kind {
        OpKind::Capture => Op::Capture { payment, percent },
        OpKind::Fail => Op::Fail { payment },
        OpKind::Refund => Op::Refund { payment, percent },
        OpKind::RefundSettle => Op::RefundSettle { payment, refund },
        OpKind::RefundFail => Op::RefundFail { payment, refund },
        OpKind::RefundCancel => Op::RefundCancel { payment, refund },
        OpKind::Chargeback => Op::Chargeback {
            payment,
            percent,
            fee: [0, 1500, 2500][rng.random_range(0..3)],
        },
        OpKind::Reverse => Op::Reverse {
            payment,
            chargeback,
        },
        OpKind::Lose => Op::Lose {
            payment,
            chargeback,
        },
        OpKind::Mediation => Op::Mediation { payment },
        OpKind::MediationWon => Op::MediationWon { payment },
        OpKind::Payout => Op::Payout { payment },
        OpKind::PayoutFail => Op::PayoutFail { payment, payout },
    }
}

impl Case {
    /// Smaller cases than this one, most promising first: whole chunks of steps removed, then
    /// single steps, then payments.
    pub fn shrink_candidates(&self) -> Vec<Case> {
        let mut out = Vec::new();
        let n = self.steps.len();
        let mut chunk = n / 2;
        while chunk >= 1 {
            let mut start = 0;
            while start < n {
                let end = (start + chunk).min(n);
                let mut smaller = self.clone();
                smaller.steps.drain(start..end);
                smaller.drop_dangling();
                if smaller.steps != self.steps {
                    out.push(smaller);
                }
                start = end;
            }
            chunk /= 2;
        }
        // A delivery of several webhooks at once becomes one at a time.
        for (i, step) in self.steps.iter().enumerate() {
            if let Step::Deliver { webhooks } = step
                && webhooks.len() > 1
            {
                let mut smaller = self.clone();
                smaller.steps[i] = Step::Deliver {
                    webhooks: vec![webhooks[0]],
                };
                out.push(smaller);
            }
        }
        out
    }

    /// Removes deliveries and replays of webhooks whose operation is gone.
    fn drop_dangling(&mut self) {
        let ops: Vec<u32> = self
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Op { id, .. } => Some(*id),
                _ => None,
            })
            .collect();
        self.steps.retain_mut(|step| match step {
            Step::Deliver { webhooks } => {
                webhooks.retain(|w| ops.contains(&w.op));
                !webhooks.is_empty()
            }
            Step::Fault {
                fault: Fault::AdminReplay { webhook },
            } => ops.contains(&webhook.op),
            _ => true,
        });
    }

    pub fn faults(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Fault { .. }))
            .count()
    }
}
