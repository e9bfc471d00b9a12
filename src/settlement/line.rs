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

impl Line {
    /// The payment a fee or conversion of the line is booked under: its payment, or for a line
    /// without one (a provider's own fee) its own reference.
    pub fn payment_or_reference(&self) -> String {
        self.payment_id
            .clone()
            .unwrap_or_else(|| self.reference.clone())
    }
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

/// The longest record a report or statement may have. The widest real lines (Adyen's 30-odd
/// columns) are under 1 KiB; a longer record is a wrong or damaged file, refused before it fills
/// memory (the csv crate grows its record to whatever it is given).
pub const MAX_RECORD_BYTES: usize = 64 * 1024;

/// A record longer than [`MAX_RECORD_BYTES`], from `line`.
#[derive(Debug, thiserror::Error)]
#[error("a record longer than {MAX_RECORD_BYTES} bytes")]
pub struct RecordTooLong {
    pub line: u64,
}

/// Where a byte is in CSV, as the csv crate parses it: a quote opens a quoted field only at
/// the field's start, and a doubled quote inside one is a quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Start,
    Unquoted,
    Quoted,
    QuoteInQuoted,
}

/// `inner`, failing with [`RecordTooLong`] as soon as one record (a line, or several inside
/// one quoted field) passes [`MAX_RECORD_BYTES`].
pub struct Bounded<R> {
    inner: R,
    field: Field,
    record_bytes: usize,
    /// Lines begun so far, and the line the current record began on.
    line: u64,
    record_line: u64,
}

impl<R> Bounded<R> {
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            field: Field::Start,
            record_bytes: 0,
            line: 1,
            record_line: 1,
        }
    }
}

impl<R: std::io::Read> std::io::Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        for &byte in &buf[..read] {
            if byte == b'\n' {
                self.line += 1;
            }
            let ends_record = matches!(byte, b'\n' | b'\r');
            self.field = match (self.field, byte) {
                (Field::Quoted, b'"') => Field::QuoteInQuoted,
                (Field::Quoted, _) => Field::Quoted,
                (Field::Start, b'"') | (Field::QuoteInQuoted, b'"') => Field::Quoted,
                (_, b',') => Field::Start,
                (_, _) if ends_record => {
                    self.record_bytes = 0;
                    self.record_line = self.line;
                    Field::Start
                }
                (_, _) => Field::Unquoted,
            };
            if self.field != Field::Start || !ends_record {
                self.record_bytes += 1;
            }
            if self.record_bytes > MAX_RECORD_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    RecordTooLong {
                        line: self.record_line,
                    },
                ));
            }
        }
        Ok(read)
    }
}

/// A CSV file's header row (line 1 of `path`).
pub fn header<R: std::io::Read>(
    path: &str,
    csv: &mut csv::Reader<R>,
) -> Result<csv::StringRecord, InputError> {
    csv.headers().cloned().map_err(|e| csv_error(path, &e))
}

/// A CSV error at its line, or a record too long at the line it began on.
fn csv_error(path: &str, error: &csv::Error) -> InputError {
    if let csv::ErrorKind::Io(io) = error.kind()
        && let Some(too_long) = io.get_ref().and_then(|e| e.downcast_ref::<RecordTooLong>())
    {
        return InputError::at(path, too_long.line, None, too_long.to_string());
    }
    let line = error.position().map_or(1, |p| p.line());
    InputError::at(path, line, None, error.to_string())
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
        Err(e) => Err(csv_error(path, &e)),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn read_all(text: &[u8]) -> Result<usize, u64> {
        let mut out = Vec::new();
        Bounded::new(text).read_to_end(&mut out).map_err(|e| {
            e.get_ref()
                .unwrap()
                .downcast_ref::<RecordTooLong>()
                .unwrap()
                .line
        })
    }

    #[test]
    fn a_record_past_the_bound_is_refused_at_the_line_it_began_on() {
        let long = "x".repeat(MAX_RECORD_BYTES + 1);
        assert_eq!(read_all(format!("a,b\n1,2\n3,{long}\n").as_bytes()), Err(3));
        // A quoted field across lines is one record.
        let lines = "y\n".repeat(MAX_RECORD_BYTES / 2 + 1);
        assert_eq!(read_all(format!("a,b\n1,\"{lines}\"\n").as_bytes()), Err(2));
        // A doubled quote inside a quoted field does not end it.
        assert_eq!(read_all(format!("a\n\"\"\"{lines}\"\n").as_bytes()), Err(2));
    }

    #[test]
    fn many_short_records_and_a_stray_quote_pass() {
        let row = "5\" screen,10.00,\"a \"\"quoted\"\" word\"\r\n";
        let text = row.repeat(MAX_RECORD_BYTES / row.len() * 3);
        assert_eq!(read_all(text.as_bytes()), Ok(text.len()));
        let exact = "z".repeat(MAX_RECORD_BYTES);
        assert!(read_all(format!("{exact}\n{exact}").as_bytes()).is_ok());
    }
}
