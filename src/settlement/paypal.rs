//! PayPal's settlement report (STL, CSV): rows typed by their first field (`RH` report header,
//! `FH` file header, `SH` section header, `CH` the section body's column names, `SB` one
//! transaction, then footers and counts). `SB` columns are read by the names the section's `CH`
//! gives (spaces normalised: older files write "Transaction  Debit or Credit"). Amounts are
//! unsigned, "with no currency symbol, decimal separator, or other punctuation", their direction
//! in the `DR`/`CR` column beside them, in hundredths of the currency (the specification's
//! example writes ¥100,00 and $100.00 both as 10000): converted to ISO minor units here. The
//! transaction event code says what moved (docs/settlement.md).

use std::io::Read;

use chrono::{DateTime, Utc};

use super::line::{self, InputError, Line, LineKind};
use crate::money::{self, AmountMinor, Currency};

const REQUIRED: [&str; 9] = [
    "Transaction ID",
    "PayPal Reference ID",
    "Transaction Event Code",
    "Transaction Completion Date",
    "Transaction Debit or Credit",
    "Gross Transaction Amount",
    "Gross Transaction Currency",
    "Fee Debit or Credit",
    "Fee Amount",
];

/// Whether the file is PayPal's settlement report: its first row is the report header.
pub fn recognises(header: &csv::StringRecord) -> bool {
    header.get(0) == Some("RH")
}

pub struct Reader<R: Read> {
    path: String,
    records: csv::StringRecordsIntoIter<R>,
    /// Where each required column is in an `SB` row, from the section's `CH` row.
    at: Option<[usize; 9]>,
}

impl<R: Read> Reader<R> {
    pub fn new(path: &str, csv: csv::Reader<R>) -> Self {
        Self {
            path: path.to_owned(),
            records: csv.into_records(),
            at: None,
        }
    }

    fn columns(&self, number: u64, record: &csv::StringRecord) -> Result<[usize; 9], InputError> {
        line::columns(
            &self.path,
            number,
            record,
            REQUIRED,
            |h, name| h.split_whitespace().eq(name.split_whitespace()),
            "PayPal's settlement report has it in its CH row",
        )
    }

    fn line(
        &self,
        number: u64,
        at: [usize; 9],
        record: &csv::StringRecord,
    ) -> Result<Line, InputError> {
        let field = |index: usize| record.get(index).unwrap_or("").trim();
        let error = |column: &str, message: String| {
            InputError::at(&self.path, number, Some(column), message)
        };
        let [
            id,
            reference,
            code,
            completed,
            direction,
            gross,
            currency,
            fee_direction,
            fee,
        ] = at.map(field);
        let currency = Currency::parse(currency).ok_or_else(|| {
            error(
                "Gross Transaction Currency",
                format!("{currency:?} is not an ISO 4217 code"),
            )
        })?;
        let amount = |column: &str, text: &str, direction_column: &str, direction: &str| {
            let minor = from_hundredths(text, currency).map_err(|m| error(column, m))?;
            match direction {
                "CR" => Ok(minor),
                "DR" => Ok(-minor),
                other => Err(error(
                    direction_column,
                    format!("{other:?} is neither CR nor DR"),
                )),
            }
        };
        let gross = amount(
            "Gross Transaction Amount",
            gross,
            "Transaction Debit or Credit",
            direction,
        )?;
        // No fee: the columns are empty. A fee taken is a debit: positive as a cost.
        let fee = if fee.is_empty() {
            0
        } else {
            -amount("Fee Amount", fee, "Fee Debit or Credit", fee_direction)?
        };
        if id.is_empty() {
            return Err(error("Transaction ID", "empty".into()));
        }
        let optional = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        let group = code.get(..3).unwrap_or("");
        let (kind, payment_id) = match (code, group) {
            (_, "T00") => (LineKind::Payment, optional(id)),
            ("T1107", _) => (LineKind::Refund, optional(reference)),
            ("T1106" | "T1201", _) => (
                LineKind::Chargeback {
                    fee_in_books: false,
                },
                optional(reference),
            ),
            ("T1202", _) => (LineKind::ChargebackReversal, optional(reference)),
            (_, "T01") => (LineKind::Fee, optional(reference)),
            ("T0400" | "T0401", _) => (LineKind::Payout, None),
            // Holds and their releases move nothing out of the balance.
            (_, "T15") | ("T1105" | "T1110" | "T1111", _) => (LineKind::Carried, None),
            (other, _) => (LineKind::Other(other.to_owned()), None),
        };
        let completed = DateTime::parse_from_str(completed, "%Y/%m/%d %H:%M:%S %z")
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| {
                error(
                    "Transaction Completion Date",
                    format!("{completed:?} is not a time such as \"2024/08/20 00:01:17 -0700\""),
                )
            })?;
        Ok(Line {
            number,
            reference: format!("paypal:{id}"),
            // A withdrawal to the bank is its own payout; PayPal's other lines name none.
            payout_id: (kind == LineKind::Payout).then(|| id.to_owned()),
            kind,
            payment_id,
            object_id: optional(id),
            currency,
            gross_minor: gross,
            fee_minor: fee,
            net_minor: gross - fee,
            net_currency: currency,
            at: vec![completed],
        })
    }
}

/// An unsigned amount in hundredths of `currency` as its ISO 4217 minor units: the same for two
/// decimals, divided for none (exactly, or it is an error), multiplied for three.
fn from_hundredths(text: &str, currency: Currency) -> Result<i64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{text:?} is not an unsigned amount in hundredths"));
    }
    let hundredths = text
        .parse::<i64>()
        .ok()
        .filter(|h| *h <= AmountMinor::MAX)
        .ok_or_else(|| format!("{text:?} is above {} minor units", AmountMinor::MAX))?;
    let exponent = money::exponent(currency)
        .ok_or_else(|| format!("{currency} has no minor unit in ISO 4217"))?;
    let minor = match exponent {
        2 => Some(hundredths),
        e if e > 2 => hundredths.checked_mul(10i64.pow(e - 2)),
        e => {
            let divisor = 10i64.pow(2 - e);
            (hundredths % divisor == 0).then_some(hundredths / divisor)
        }
    };
    minor.filter(|m| *m <= AmountMinor::MAX).ok_or_else(|| {
        format!("{text:?} hundredths is not a whole amount of {currency} (ISO 4217: {exponent} decimals)")
    })
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Line, InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (number, record) = match line::numbered(&self.path, self.records.next()?) {
                Ok(numbered) => numbered,
                Err(e) => return Some(Err(e)),
            };
            match record.get(0) {
                Some("CH") => match self.columns(number, &record) {
                    Ok(at) => self.at = Some(at),
                    Err(e) => return Some(Err(e)),
                },
                Some("SB") => {
                    let Some(at) = self.at else {
                        return Some(Err(InputError::at(
                            &self.path,
                            number,
                            None,
                            "an SB row before its section's CH row".into(),
                        )));
                    };
                    return Some(self.line(number, at, &record));
                }
                _ => {}
            }
        }
    }
}
