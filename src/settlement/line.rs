//! A line of a provider's settlement report as every format reads it, and why a file cannot be
//! settled.

use chrono::{DateTime, Utc};

use crate::money::Currency;

/// A report or statement that cannot be settled: which file, line and column, and why. Nothing
/// is booked from it.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {}{message}", column.as_ref().map(|c| format!("column {c}: ")).unwrap_or_default())]
pub struct InputError {
    pub path: String,
    pub line: u64,
    pub column: Option<String>,
    pub message: String,
}

impl InputError {
    pub fn at(path: &str, line: u64, column: Option<&str>, message: String) -> Self {
        Self {
            path: path.to_owned(),
            line,
            column: column.map(str::to_owned),
            message,
        }
    }
}

/// One line of a provider's report, in minor units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub number: u64,
    /// The provider's id of the line (Stripe's balance transaction): a fee is booked once per
    /// reference.
    pub reference: String,
    pub payout_id: Option<String>,
    pub kind: LineKind,
    pub payment_id: Option<String>,
    /// The object the line moved (a charge, refund or dispute id), named when the line has no
    /// payment.
    pub object_id: Option<String>,
    /// The currency of `gross_minor`, the amount the books hold for the payment.
    pub currency: Currency,
    pub gross_minor: i64,
    /// The provider's fees for the line, in `net_currency` (Adyen's cost columns are in the
    /// net currency; Stripe's are in the line's one currency).
    pub fee_minor: i64,
    /// What the line adds to its payout, in `net_currency`.
    pub net_minor: i64,
    pub net_currency: Currency,
    /// The line's times (its creation, its payout's date): the books are read around them.
    pub at: Vec<DateTime<Utc>>,
}

/// What a report line moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineKind {
    Payment,
    Refund,
    /// A refund that failed: its money is back.
    RefundFailure,
    /// `fee_in_books`: the provider's webhooks carry the chargeback's fee, so the books hold
    /// it (`dispute_fees`) and it is compared; otherwise it is booked like any fee.
    Chargeback {
        fee_in_books: bool,
    },
    ChargebackReversal,
    /// The payout itself (Adyen's `MerchantPayout`, Stripe's `payout` line): the amount it
    /// states, `-net`, is checked against the sum of its other lines.
    Payout,
    /// Balance carried from one payout to another (Adyen's `Balancetransfer`): part of the
    /// payout's sum, no money in or out of the provider.
    Carried,
    /// A line the comparison leaves out: Stripe's line for the payout itself, whose amount is
    /// the sum of the payout's other lines and is booked by `payout.paid`, not by the report.
    Left,
    /// The provider's own fee (no payment): booked, nothing to match.
    Fee,
    /// A category the books do not hold (an adjustment, a transfer...).
    Other(String),
}

/// A report's time: `2024-03-01 12:00:00` (Stripe's UTC columns, Adyen's creation date in its
/// own time zone: a day's error is within the grace), or RFC 3339.
pub fn timestamp(text: &str) -> Result<DateTime<Utc>, String> {
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .map(|t| t.and_utc())
        .or_else(|_| DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc)))
        .map_err(|_| format!("{text:?} is not a time such as \"2024-03-01 12:00:00\""))
}

/// A CSV file's header row (line 1 of `path`).
pub fn header<R: std::io::Read>(
    path: &str,
    csv: &mut csv::Reader<R>,
) -> Result<csv::StringRecord, InputError> {
    csv.headers()
        .cloned()
        .map_err(|e| InputError::at(path, 1, None, e.to_string()))
}

/// Where each of `names` is in `header` (line `line` of `path`), `same` comparing a header's
/// name with one of `names`; the first missing one is an error saying `why` it is needed.
pub fn columns<const N: usize>(
    path: &str,
    line: u64,
    header: &csv::StringRecord,
    names: [&'static str; N],
    same: impl Fn(&str, &str) -> bool,
    why: &str,
) -> Result<[usize; N], InputError> {
    let mut at = [0; N];
    for (slot, name) in at.iter_mut().zip(names) {
        *slot = header
            .iter()
            .position(|h| same(h, name))
            .ok_or_else(|| InputError::at(path, line, Some(name), format!("missing: {why}")))?;
    }
    Ok(at)
}

/// A record of `path` with its line number, or the CSV error at its line.
pub fn numbered(
    path: &str,
    record: csv::Result<csv::StringRecord>,
) -> Result<(u64, csv::StringRecord), InputError> {
    match record {
        Ok(record) => Ok((record.position().map_or(0, |p| p.line()), record)),
        Err(e) => {
            let line = e.position().map_or(0, |p| p.line());
            Err(InputError::at(path, line, None, e.to_string()))
        }
    }
}
