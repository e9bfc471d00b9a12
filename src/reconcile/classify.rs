//! The comparison itself, free of I/O: what each side says about one (payment id, kind), and
//! the class that follows.

use serde::Serialize;

use crate::money::Currency;

/// A money movement's kind, as the report and `ledger_transfers.kind` both name it; a
/// chargeback's fee is its own kind, `dispute_fee` (the chargeback's amount excludes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Payment,
    Refund,
    Chargeback,
    ChargebackReversal,
    DisputeFee,
    /// A refund the provider gave back (it failed, was cancelled, or came back).
    RefundReversal,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Payment,
        Kind::Refund,
        Kind::Chargeback,
        Kind::ChargebackReversal,
        Kind::DisputeFee,
        Kind::RefundReversal,
    ];

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Payment => "payment",
            Kind::Refund => "refund",
            Kind::Chargeback => "chargeback",
            Kind::ChargebackReversal => "chargeback_reversal",
            Kind::DisputeFee => "dispute_fee",
            Kind::RefundReversal => "refund_reversal",
        }
    }

    /// Position in a per-kind array.
    pub fn index(self) -> usize {
        match self {
            Kind::Payment => 0,
            Kind::Refund => 1,
            Kind::Chargeback => 2,
            Kind::ChargebackReversal => 3,
            Kind::DisputeFee => 4,
            Kind::RefundReversal => 5,
        }
    }
}

/// How one item compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Both sides agree on amount and currency.
    Matched,
    /// Both sides agree, and the ledger holds the money in the merchant's unapplied funds.
    Held,
    /// The provider moved money the gateway never posted: an event to fetch and replay.
    MissingInLedger,
    /// Posted here, absent from the provider's report.
    MissingAtProvider,
    /// Both sides know the item but disagree on the amount or the currency.
    AmountMismatch,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::Matched,
        Class::Held,
        Class::MissingInLedger,
        Class::MissingAtProvider,
        Class::AmountMismatch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Matched => "matched",
            Class::Held => "held",
            Class::MissingInLedger => "missing_in_ledger",
            Class::MissingAtProvider => "missing_at_provider",
            Class::AmountMismatch => "amount_mismatch",
        }
    }

    /// Matched and held items need nothing from finance.
    pub fn is_agreement(self) -> bool {
        matches!(self, Class::Matched | Class::Held)
    }
}

/// The currency of everything summed on one side: one code, or several or an unknown one
/// (either can only mismatch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Currencies {
    One(Currency),
    Mixed,
}

impl Currencies {
    fn with(self, other: Currencies) -> Self {
        match (self, other) {
            (Currencies::One(a), Currencies::One(b)) if a == b => self,
            _ => Currencies::Mixed,
        }
    }

    /// The code, or `MIXED` when the side summed several.
    pub fn code(self) -> &'static str {
        match self {
            Currencies::One(code) => code.code(),
            Currencies::Mixed => "MIXED",
        }
    }
}

/// What one side says about an item: a sum of positive amounts in one currency (or several).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Side {
    /// Saturates rather than wraps: a sum beyond i64 is a mismatch either way.
    pub amount_minor: i64,
    pub currencies: Currencies,
    /// Report lines or ledger transfers summed.
    pub count: u32,
    /// Whether any of them lies inside the window itself rather than only in its grace margin.
    pub in_window: bool,
}

impl Side {
    pub fn new(amount_minor: i64, currencies: Currencies, in_window: bool) -> Self {
        Self {
            amount_minor,
            currencies,
            count: 1,
            in_window,
        }
    }

    pub fn add(&mut self, amount_minor: i64, currencies: Currencies, in_window: bool) {
        self.amount_minor = self.amount_minor.saturating_add(amount_minor);
        self.currencies = self.currencies.with(currencies);
        self.count = self.count.saturating_add(1);
        self.in_window |= in_window;
    }
}

/// The ledger's side: the sum, plus how many of its transfers went to unapplied funds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LedgerSide {
    pub sum: Side,
    pub held_transfers: u32,
}

/// Both sides of one (payment id, kind); at least one is present.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Item {
    pub report: Option<Side>,
    pub ledger: Option<LedgerSide>,
    /// The first report line that named this item, so finance can find it in the file.
    pub first_line: Option<u64>,
}

impl Item {
    /// Judged only when one side saw it inside the window; an item seen only in the grace
    /// margin belongs to the neighbouring window's reconciliation.
    pub fn is_in_window(&self) -> bool {
        self.report.is_some_and(|s| s.in_window) || self.ledger.is_some_and(|l| l.sum.in_window)
    }

    pub fn class(&self) -> Class {
        classify(self.report.as_ref(), self.ledger.as_ref())
    }

    /// The provider moved more than the ledger holds, in the same currency: nothing posted
    /// (`missing_in_ledger`), or less than the report (`amount_mismatch` short of it, e.g. a
    /// second partial refund a restore lost while the first is in the books). Events the
    /// gateway was sent can make up either by replay; a ledger above the report cannot be.
    pub fn ledger_is_short(&self) -> bool {
        match (self.report, self.ledger) {
            (Some(_), None) => true,
            (Some(report), Some(ledger)) => {
                matches!(
                    (report.currencies, ledger.sum.currencies),
                    (Currencies::One(a), Currencies::One(b)) if a == b
                ) && report.amount_minor > ledger.sum.amount_minor
            }
            _ => false,
        }
    }

    /// The currency an item is counted under in the summary: the provider's when it is one.
    pub fn currency(&self) -> &'static str {
        match (self.report, self.ledger) {
            (
                Some(Side {
                    currencies: Currencies::One(code),
                    ..
                }),
                _,
            ) => code.code(),
            (None, Some(ledger)) => ledger.sum.currencies.code(),
            _ => Currencies::Mixed.code(),
        }
    }
}

/// The rule: amounts and currencies must agree exactly; an agreeing item is `held` when any of
/// its ledger transfers went to unapplied funds instead of the merchant's payable.
pub fn classify(report: Option<&Side>, ledger: Option<&LedgerSide>) -> Class {
    match (report, ledger) {
        (None, None) | (None, Some(_)) => Class::MissingAtProvider,
        (Some(_), None) => Class::MissingInLedger,
        (Some(report), Some(ledger)) => {
            let same_currency = matches!(
                (report.currencies, ledger.sum.currencies),
                (Currencies::One(a), Currencies::One(b)) if a == b
            );
            if !same_currency || report.amount_minor != ledger.sum.amount_minor {
                Class::AmountMismatch
            } else if ledger.held_transfers > 0 {
                Class::Held
            } else {
                Class::Matched
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn currency(code: &str) -> Currency {
        Currency::parse(code).unwrap_or_else(|| unreachable!("{code} is a currency"))
    }

    fn side(amount: i64, code: &str) -> Side {
        Side::new(amount, Currencies::One(currency(code)), true)
    }

    fn ledger(amount: i64, code: &str, held_transfers: u32) -> LedgerSide {
        LedgerSide {
            sum: side(amount, code),
            held_transfers,
        }
    }

    #[test]
    fn the_ledger_is_short_when_nothing_or_less_was_posted_in_the_reports_currency() {
        let item = |report: Option<Side>, ledger: Option<LedgerSide>| Item {
            report,
            ledger,
            first_line: None,
        };
        assert!(item(Some(side(500, "USD")), None).ledger_is_short());
        assert!(item(Some(side(500, "USD")), Some(ledger(300, "USD", 0))).ledger_is_short());
        assert!(!item(Some(side(300, "USD")), Some(ledger(500, "USD", 0))).ledger_is_short());
        assert!(!item(Some(side(500, "USD")), Some(ledger(300, "EUR", 0))).ledger_is_short());
        assert!(!item(Some(side(500, "USD")), Some(ledger(500, "USD", 0))).ledger_is_short());
        assert!(!item(None, Some(ledger(500, "USD", 0))).ledger_is_short());
    }

    #[test]
    fn equal_sums_in_one_currency_are_matched() {
        assert_eq!(
            classify(Some(&side(4620, "EUR")), Some(&ledger(4620, "EUR", 0))),
            Class::Matched
        );
    }

    #[test]
    fn equal_sums_posted_to_unapplied_funds_are_held() {
        assert_eq!(
            classify(Some(&side(4620, "EUR")), Some(&ledger(4620, "EUR", 1))),
            Class::Held
        );
    }

    #[test]
    fn a_held_transfer_with_another_amount_is_still_a_mismatch() {
        assert_eq!(
            classify(Some(&side(4620, "EUR")), Some(&ledger(4600, "EUR", 1))),
            Class::AmountMismatch
        );
    }

    #[test]
    fn only_the_provider_knowing_it_is_missing_in_ledger() {
        assert_eq!(
            classify(Some(&side(100, "USD")), None),
            Class::MissingInLedger
        );
    }

    #[test]
    fn only_the_ledger_knowing_it_is_missing_at_provider() {
        assert_eq!(
            classify(None, Some(&ledger(100, "USD", 0))),
            Class::MissingAtProvider
        );
    }

    #[test]
    fn another_amount_is_a_mismatch() {
        assert_eq!(
            classify(Some(&side(101, "USD")), Some(&ledger(100, "USD", 0))),
            Class::AmountMismatch
        );
    }

    #[test]
    fn the_same_amount_in_another_currency_is_a_mismatch() {
        assert_eq!(
            classify(Some(&side(100, "EUR")), Some(&ledger(100, "USD", 0))),
            Class::AmountMismatch
        );
    }

    #[test]
    fn a_side_summing_two_currencies_never_matches() {
        let mut report = side(50, "USD");
        report.add(50, Currencies::One(currency("EUR")), true);
        assert_eq!(report.currencies, Currencies::Mixed);
        assert_eq!(
            classify(Some(&report), Some(&ledger(100, "USD", 0))),
            Class::AmountMismatch
        );
    }

    #[test]
    fn partial_refunds_are_summed_before_comparing() {
        let mut report = side(300, "USD");
        report.add(200, Currencies::One(currency("USD")), true);
        assert_eq!((report.amount_minor, report.count), (500, 2));
        assert_eq!(
            classify(Some(&report), Some(&ledger(500, "USD", 0))),
            Class::Matched
        );
    }

    #[test]
    fn an_item_seen_only_in_the_grace_margin_is_not_judged() {
        let mut item = Item {
            report: None,
            ledger: Some(LedgerSide {
                sum: Side::new(100, Currencies::One(currency("USD")), false),
                held_transfers: 0,
            }),
            first_line: None,
        };
        assert!(!item.is_in_window());
        item.report = Some(side(100, "USD"));
        assert!(item.is_in_window());
    }

    #[test]
    fn a_sum_beyond_i64_saturates_instead_of_wrapping() {
        let mut report = side(i64::MAX, "USD");
        report.add(1, Currencies::One(currency("USD")), true);
        assert_eq!(report.amount_minor, i64::MAX);
    }
}
