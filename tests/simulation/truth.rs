//! What the provider holds: its payments and what happened to each (captures, refunds that
//! succeed, fail or are cancelled, chargebacks with fees, reversals, disputes won and lost).
//! The same for every provider; each provider's model (`models/`) says which of these
//! operations it has and how it tells about them. An operation that makes no sense in the
//! state the payment is in (a refund of an uncaptured payment) does nothing, so any list of
//! operations is a history, which is what shrinking needs.

use serde::{Deserialize, Serialize};

/// One thing that happens at the provider. Payments, refunds and chargebacks are named by
/// their index (the `n`th of the history, of the payment).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// The payment succeeds: `percent` of its amount is captured (100 unless the provider
    /// captures partially).
    Capture { payment: usize, percent: u8 },
    /// The payment fails (declined, expired, cancelled): nothing is captured.
    Fail { payment: usize },
    /// A refund of `percent` of what is still refundable. Providers whose refunds settle
    /// later create it pending.
    Refund { payment: usize, percent: u8 },
    /// A pending refund is paid out.
    RefundSettle { payment: usize, refund: usize },
    /// A refund fails: before it settled (nothing moved), or after (the money comes back).
    RefundFail { payment: usize, refund: usize },
    /// A pending refund is cancelled.
    RefundCancel { payment: usize, refund: usize },
    /// A chargeback takes `percent` of what refunds left, and a fee.
    Chargeback {
        payment: usize,
        percent: u8,
        fee: i64,
    },
    /// The chargeback is reversed: the merchant won, the money comes back.
    Reverse { payment: usize, chargeback: usize },
    /// The dispute closes lost: the money stays taken.
    Lose { payment: usize, chargeback: usize },
    /// A dispute opens without taking money yet (Mercado Pago's mediation).
    Mediation { payment: usize },
    /// The mediation ends in the merchant's favour: the payment returns to its status.
    MediationWon { payment: usize },
    /// The provider pays out what the payment's balance lines not paid out yet add up to
    /// (Stripe's automatic payout of the balance, one payment's share of it).
    Payout { payment: usize },
    /// A payout that was paid fails: its money and its lines go back to the balance.
    PayoutFail { payment: usize, payout: usize },
}

impl Op {
    pub fn payment(&self) -> usize {
        match *self {
            Op::Capture { payment, .. }
            | Op::Fail { payment }
            | Op::Refund { payment, .. }
            | Op::RefundSettle { payment, .. }
            | Op::RefundFail { payment, .. }
            | Op::RefundCancel { payment, .. }
            | Op::Chargeback { payment, .. }
            | Op::Reverse { payment, .. }
            | Op::Lose { payment, .. }
            | Op::Mediation { payment }
            | Op::MediationWon { payment }
            | Op::Payout { payment }
            | Op::PayoutFail { payment, .. } => payment,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Capture,
    Fail,
    Refund,
    RefundSettle,
    RefundFail,
    RefundCancel,
    Chargeback,
    Reverse,
    Lose,
    Mediation,
    MediationWon,
    Payout,
    PayoutFail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Open,
    Captured,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundState {
    /// Made, not settled yet (the provider may still cancel it or it may fail).
    Pending,
    Succeeded,
    /// Failed before it settled: nothing moved.
    Declined,
    /// Failed after it succeeded: the money came back to the merchant.
    Returned,
    Cancelled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisputeState {
    /// The money is taken; the dispute is open.
    Withdrawn,
    /// The merchant won: the money came back.
    Reinstated,
    /// Closed lost: the money stays taken.
    Lost,
}

#[derive(Debug, Clone)]
pub struct Refund {
    pub id: String,
    pub amount: i64,
    pub state: RefundState,
    /// The state was reported as succeeded at least once (a later failure takes money back).
    pub was_succeeded: bool,
}

#[derive(Debug, Clone)]
pub struct Chargeback {
    pub id: String,
    pub amount: i64,
    pub fee: i64,
    pub state: DisputeState,
    /// A chargeback made after an earlier one of the payment was reversed.
    pub after_reversal: bool,
}

/// A payout of a payment's balance lines.
#[derive(Debug, Clone)]
pub struct Payout {
    pub id: String,
    pub amount: i64,
    pub failed: bool,
}

/// One movement of a payment in the provider's balance, as its settlement report lists it
/// (Stripe's balance transaction): `category` is the report's `reporting_category`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceLine {
    /// Unique in the payment: `charge`, a refund's or a dispute's id (`_r` for its reversal).
    pub key: String,
    pub category: &'static str,
    pub gross: i64,
    pub fee: i64,
}

impl BalanceLine {
    pub fn net(&self) -> i64 {
        self.gross - self.fee
    }
}

/// One payment at the provider.
#[derive(Debug, Clone)]
pub struct Payment {
    pub index: usize,
    /// The provider's id of the payment.
    pub id: String,
    /// The merchant's order the payment names (its reference field), if any.
    pub order: Option<i64>,
    /// What the payment is for, and in which currency.
    pub amount: i64,
    pub currency: &'static str,
    pub status: Status,
    pub captured: i64,
    pub refunds: Vec<Refund>,
    pub chargebacks: Vec<Chargeback>,
    /// In mediation (Mercado Pago): disputed, no money taken yet.
    pub mediation: bool,
    /// Ids made so far for this payment's refunds and chargebacks.
    pub made: usize,
    pub payouts: Vec<Payout>,
    /// The balance lines paid out, by key, with the payout (an index) that paid them.
    pub paid_out: std::collections::BTreeMap<String, usize>,
}

/// What an operation changed, for the model to tell about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Captured,
    Failed,
    RefundMade(usize),
    RefundSettled(usize),
    RefundDeclined(usize),
    RefundReturned(usize),
    RefundCancelled(usize),
    ChargedBack(usize),
    Reversed(usize),
    Lost(usize),
    MediationOpened,
    MediationWon,
    PaidOut(usize),
    PayoutFailed(usize),
}

impl Payment {
    pub fn new(
        index: usize,
        id: String,
        order: Option<i64>,
        amount: i64,
        currency: &'static str,
    ) -> Self {
        Self {
            index,
            id,
            order,
            amount,
            currency,
            status: Status::Open,
            captured: 0,
            refunds: Vec::new(),
            chargebacks: Vec::new(),
            mediation: false,
            made: 0,
            payouts: Vec::new(),
            paid_out: std::collections::BTreeMap::new(),
        }
    }

    /// The provider's processing fee for a capture: 2.9 % and 30 minor units (none for a
    /// currency without minor units), as Stripe's standard card pricing.
    pub fn processing_fee(&self) -> i64 {
        let fixed = if self.currency == "JPY" { 0 } else { 30 };
        self.captured * 29 / 1000 + fixed
    }

    /// Every movement of the payment in the provider's balance so far.
    pub fn balance_lines(&self) -> Vec<BalanceLine> {
        let mut lines = Vec::new();
        if self.status == Status::Captured {
            lines.push(BalanceLine {
                key: "charge".into(),
                category: "charge",
                gross: self.captured,
                fee: self.processing_fee(),
            });
        }
        for refund in self
            .refunds
            .iter()
            .filter(|r| r.state == RefundState::Succeeded)
        {
            lines.push(BalanceLine {
                key: refund.id.clone(),
                category: "refund",
                gross: -refund.amount,
                fee: 0,
            });
        }
        for cb in &self.chargebacks {
            lines.push(BalanceLine {
                key: cb.id.clone(),
                category: "dispute",
                gross: -cb.amount,
                fee: cb.fee,
            });
            if cb.state == DisputeState::Reinstated {
                lines.push(BalanceLine {
                    key: format!("{}_r", cb.id),
                    category: "dispute_reversal",
                    gross: cb.amount,
                    fee: 0,
                });
            }
        }
        lines
    }

    /// The fees a settlement of its lines books: each capture's processing fee (a dispute's
    /// fee is in the books with its chargeback).
    pub fn processing_fees(&self) -> i64 {
        self.balance_lines()
            .iter()
            .filter(|l| l.category != "dispute")
            .map(|l| l.fee)
            .sum()
    }

    /// Refunds that moved money and still stand (pending ones count where `pending_counts`).
    pub fn refunded(&self, pending_counts: bool) -> i64 {
        self.refunds
            .iter()
            .filter(|r| {
                r.state == RefundState::Succeeded
                    || (pending_counts && r.state == RefundState::Pending)
            })
            .map(|r| r.amount)
            .sum()
    }

    /// Refunds made and not declined, cancelled or returned: what the provider still refunds.
    pub fn refunds_standing(&self) -> i64 {
        self.refunded(true)
    }

    /// Chargebacks whose money is taken now.
    pub fn charged_back(&self) -> i64 {
        self.chargebacks
            .iter()
            .filter(|c| c.state != DisputeState::Reinstated)
            .map(|c| c.amount)
            .sum()
    }

    /// Every chargeback ever withdrawn (reversed ones included).
    pub fn withdrawn(&self) -> i64 {
        self.chargebacks.iter().map(|c| c.amount).sum()
    }

    pub fn reinstated(&self) -> i64 {
        self.chargebacks
            .iter()
            .filter(|c| c.state == DisputeState::Reinstated)
            .map(|c| c.amount)
            .sum()
    }

    pub fn fees(&self) -> i64 {
        self.chargebacks.iter().map(|c| c.fee).sum()
    }

    /// What the provider would still refund.
    pub fn refundable(&self) -> i64 {
        self.captured - self.refunds_standing() - self.charged_back()
    }

    fn open_chargeback(&self) -> bool {
        self.chargebacks
            .iter()
            .any(|c| c.state == DisputeState::Withdrawn)
    }

    fn next_id(&mut self, prefix: &str) -> String {
        self.made += 1;
        format!("{prefix}{}x{}", self.id_stem(), self.made)
    }

    /// The payment id's letters and digits, for the ids of its refunds and chargebacks.
    fn id_stem(&self) -> String {
        self.id
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect()
    }

    /// Applies `op` (of this payment) as the provider would, if it can happen now.
    pub fn apply(&mut self, op: &Op, rules: &Rules) -> Option<Change> {
        match *op {
            Op::Capture { percent, .. } => {
                if self.status != Status::Open {
                    return None;
                }
                let percent = if rules.partial_captures {
                    i64::from(percent.clamp(1, 100))
                } else {
                    100
                };
                self.captured = (self.amount * percent / 100).max(1);
                self.status = Status::Captured;
                Some(Change::Captured)
            }
            Op::Fail { .. } => {
                if self.status != Status::Open {
                    return None;
                }
                self.status = Status::Failed;
                Some(Change::Failed)
            }
            Op::Refund { percent, .. } => {
                if self.status != Status::Captured
                    || self.mediation
                    || (!rules.refunds_after_chargeback && !self.chargebacks.is_empty())
                {
                    return None;
                }
                if rules
                    .max_refunds
                    .is_some_and(|max| self.refunds.len() >= max)
                {
                    return None;
                }
                let refundable = self.refundable();
                if refundable <= 0 {
                    return None;
                }
                let amount = (refundable * i64::from(percent.clamp(1, 100)) / 100).max(1);
                let id = self.next_id(rules.refund_prefix);
                let state = if rules.refunds_pending {
                    RefundState::Pending
                } else {
                    RefundState::Succeeded
                };
                self.refunds.push(Refund {
                    id,
                    amount,
                    state,
                    was_succeeded: state == RefundState::Succeeded,
                });
                Some(Change::RefundMade(self.refunds.len() - 1))
            }
            Op::RefundSettle { refund, .. } => {
                let r = self.refunds.get_mut(refund)?;
                if r.state != RefundState::Pending {
                    return None;
                }
                r.state = RefundState::Succeeded;
                r.was_succeeded = true;
                Some(Change::RefundSettled(refund))
            }
            Op::RefundFail { refund, .. } => {
                let r = self.refunds.get_mut(refund)?;
                match r.state {
                    RefundState::Pending => {
                        r.state = RefundState::Declined;
                        Some(Change::RefundDeclined(refund))
                    }
                    RefundState::Succeeded if rules.refunds_can_return => {
                        r.state = RefundState::Returned;
                        Some(Change::RefundReturned(refund))
                    }
                    _ => None,
                }
            }
            Op::RefundCancel { refund, .. } => {
                let r = self.refunds.get_mut(refund)?;
                if r.state != RefundState::Pending || !rules.refunds_cancel {
                    return None;
                }
                r.state = RefundState::Cancelled;
                Some(Change::RefundCancelled(refund))
            }
            Op::Chargeback { percent, fee, .. } => {
                if self.status != Status::Captured || self.open_chargeback() {
                    return None;
                }
                if self.chargebacks.len() >= rules.max_chargebacks {
                    return None;
                }
                let after_reversal = self
                    .chargebacks
                    .iter()
                    .any(|c| c.state == DisputeState::Reinstated);
                let left = self.captured - self.refunds_standing() - self.charged_back();
                let base = match rules.chargeback_size {
                    ChargebackSize::Part => left * i64::from(percent.clamp(1, 100)) / 100,
                    ChargebackSize::AfterRefunds => left,
                    ChargebackSize::Whole => self.captured,
                };
                if base <= 0 {
                    return None;
                }
                let id = self.next_id(rules.chargeback_prefix);
                self.chargebacks.push(Chargeback {
                    id,
                    amount: base,
                    fee: if rules.chargeback_fees { fee } else { 0 },
                    state: DisputeState::Withdrawn,
                    after_reversal,
                });
                self.mediation = false;
                Some(Change::ChargedBack(self.chargebacks.len() - 1))
            }
            Op::Reverse { chargeback, .. } => {
                let c = self.chargebacks.get_mut(chargeback)?;
                if c.state != DisputeState::Withdrawn
                    || (c.after_reversal && rules.second_chargeback_final)
                {
                    return None;
                }
                c.state = DisputeState::Reinstated;
                Some(Change::Reversed(chargeback))
            }
            Op::Lose { chargeback, .. } => {
                let c = self.chargebacks.get_mut(chargeback)?;
                if c.state != DisputeState::Withdrawn {
                    return None;
                }
                c.state = DisputeState::Lost;
                Some(Change::Lost(chargeback))
            }
            Op::Mediation { .. } => {
                if self.status != Status::Captured
                    || self.mediation
                    || !self.chargebacks.is_empty()
                    || self.refundable() <= 0
                {
                    return None;
                }
                self.mediation = true;
                Some(Change::MediationOpened)
            }
            Op::MediationWon { .. } => {
                if !self.mediation {
                    return None;
                }
                self.mediation = false;
                Some(Change::MediationWon)
            }
            Op::Payout { .. } => {
                let unpaid: Vec<BalanceLine> = self
                    .balance_lines()
                    .into_iter()
                    .filter(|l| !self.paid_out.contains_key(&l.key))
                    .collect();
                let amount: i64 = unpaid.iter().map(BalanceLine::net).sum();
                if amount == 0 {
                    return None;
                }
                let index = self.payouts.len();
                for line in unpaid {
                    self.paid_out.insert(line.key, index);
                }
                self.payouts.push(Payout {
                    id: format!("po_{}_{index}", self.id_stem()),
                    amount,
                    failed: false,
                });
                Some(Change::PaidOut(index))
            }
            Op::PayoutFail { payout, .. } => {
                let failed = self.payouts.get_mut(payout).filter(|p| !p.failed)?;
                failed.failed = true;
                self.paid_out.retain(|_, paid_by| *paid_by != payout);
                Some(Change::PayoutFailed(payout))
            }
        }
    }
}

/// How much of a payment a chargeback takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChargebackSize {
    /// A part (the cardholder disputes some of it) of what refunds left.
    Part,
    /// Everything refunds left (Mercado Pago).
    AfterRefunds,
    /// The whole payment, refunds notwithstanding (a Direct Debit indemnity claim).
    Whole,
}

/// What a provider's payments can do (from its documentation, docs/simulation.md).
#[derive(Debug, Clone)]
pub struct Rules {
    pub partial_captures: bool,
    /// Refunds are made pending and settle (or fail, or are cancelled) later.
    pub refunds_pending: bool,
    /// A pending refund can be cancelled.
    pub refunds_cancel: bool,
    /// A refund that succeeded can still fail and return its money.
    pub refunds_can_return: bool,
    pub max_refunds: Option<usize>,
    /// How many chargebacks a payment can have in its life (one at a time).
    pub max_chargebacks: usize,
    /// How much a chargeback takes.
    pub chargeback_size: ChargebackSize,
    /// The provider charges a chargeback fee it reports.
    pub chargeback_fees: bool,
    /// A chargeback after a reversal (Adyen's second chargeback) is not reversed again.
    pub second_chargeback_final: bool,
    /// A payment that was charged back can still be refunded.
    pub refunds_after_chargeback: bool,
    pub refund_prefix: &'static str,
    pub chargeback_prefix: &'static str,
}

impl Default for Rules {
    fn default() -> Self {
        Self {
            partial_captures: false,
            refunds_pending: false,
            refunds_cancel: false,
            refunds_can_return: false,
            max_refunds: None,
            max_chargebacks: 1,
            chargeback_size: ChargebackSize::Part,
            chargeback_fees: false,
            second_chargeback_final: false,
            refunds_after_chargeback: true,
            refund_prefix: "re_",
            chargeback_prefix: "dp_",
        }
    }
}
