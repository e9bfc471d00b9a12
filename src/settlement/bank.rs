//! A bank statement (`--bank`): CSV with the header `date,amount,currency,reference`, one
//! credit (or debit) a line, the amount in major units, signed.

use std::io::Read;

use super::line::{self, InputError};
use crate::money::{self, Currency};

/// One line of the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BankLine {
    pub number: u64,
    pub date: String,
    pub amount_minor: i64,
    pub currency: Currency,
    pub reference: String,
}

const COLUMNS: [&str; 4] = ["date", "amount", "currency", "reference"];

/// Every line of the statement at `path` (a statement is a month of a few dozen payouts, so it
/// is held), or the first that cannot be read.
pub fn read(path: &str, source: impl Read) -> Result<Vec<BankLine>, InputError> {
    let mut csv = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(line::Bounded::new(source));
    let header = line::header(path, &mut csv)?;
    let at = line::columns(
        path,
        1,
        &header,
        COLUMNS,
        |h, name| h.eq_ignore_ascii_case(name),
        "a bank statement has the columns date, amount, currency, reference",
    )?;
    let mut lines = Vec::new();
    for record in csv.records() {
        let (number, record) = line::numbered(path, record)?;
        let [date, amount, currency, reference] = at.map(|i| record.get(i).unwrap_or(""));
        let error =
            |column: &str, message: String| InputError::at(path, number, Some(column), message);
        let currency = Currency::parse_any_case(currency)
            .ok_or_else(|| error("currency", format!("{currency:?} is not an ISO 4217 code")))?;
        let amount_minor =
            money::minor_units(amount, currency).map_err(|message| error("amount", message))?;
        lines.push(BankLine {
            number,
            date: date.to_owned(),
            amount_minor,
            currency,
            reference: reference.to_owned(),
        });
    }
    Ok(lines)
}
