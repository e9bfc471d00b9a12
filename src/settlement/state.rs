//! What a settlement compares and what it finds: the items' kinds, the contract's states, and an
//! item as it is reported.

/// What the report and the books are compared on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ItemKind {
    Payment,
    Refund,
    Chargeback,
    ChargebackReversal,
    Payout,
    /// A line of a category the books do not hold.
    Unbooked,
}

impl ItemKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Payment => "payment",
            ItemKind::Refund => "refund",
            ItemKind::Chargeback => "chargeback",
            ItemKind::ChargebackReversal => "chargeback_reversal",
            ItemKind::Payout => "payout",
            ItemKind::Unbooked => "unbooked",
        }
    }
}

/// The states of the contract. `matched` and `fee_booked` agree; every other one differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Matched,
    FeeBooked,
    MissingInLedger,
    MissingInReport,
    AmountMismatch,
    PayoutUnbalanced,
    PayoutNotInBank,
    BankUnmatched,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Matched,
        State::FeeBooked,
        State::MissingInLedger,
        State::MissingInReport,
        State::AmountMismatch,
        State::PayoutUnbalanced,
        State::PayoutNotInBank,
        State::BankUnmatched,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Matched => "matched",
            State::FeeBooked => "fee_booked",
            State::MissingInLedger => "missing_in_ledger",
            State::MissingInReport => "missing_in_report",
            State::AmountMismatch => "amount_mismatch",
            State::PayoutUnbalanced => "payout_unbalanced",
            State::PayoutNotInBank => "payout_not_in_bank",
            State::BankUnmatched => "bank_unmatched",
        }
    }

    pub fn agrees(self) -> bool {
        matches!(self, State::Matched | State::FeeBooked)
    }
}

/// One judged item of the outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub state: State,
    pub kind: ItemKind,
    pub id: String,
    pub report_minor: Option<i128>,
    pub ledger_minor: Option<i128>,
    pub currency: String,
    pub line: u64,
}
