//! Stripe's itemized payout reconciliation report (`payout_reconciliation.itemized.5`), CSV
//! with a header: one balance transaction a line, each with the automatic payout that paid it
//! out. Columns are read by name, so their order and any extra columns do not matter; amounts
//! (`gross`, `fee`, `net`) are in major units, `currency` lowercase (docs/settlement.md).

use std::io::Read;

use super::line::{self, InputError, Line, LineKind, timestamp};
use crate::money::{self, Currency};

/// The columns the gateway reads. `payment_intent_id` is not among Stripe's default columns:
/// the report is run with it (`columns` of the Reports API, or the Dashboard's column picker).
const REQUIRED: [&str; 9] = [
    "balance_transaction_id",
    "created_utc",
    "currency",
    "gross",
    "fee",
    "net",
    "reporting_category",
    "source_id",
    "payment_intent_id",
];
const PAYOUT: &str = "automatic_payout_id";
const PAYOUT_AT: &str = "automatic_payout_effective_at_utc";

/// Whether a header is Stripe's: it names its balance transactions and reporting categories.
pub fn recognises(header: &csv::StringRecord) -> bool {
    let names: Vec<&str> = header.iter().collect();
    names.contains(&"balance_transaction_id") && names.contains(&"reporting_category")
}

/// The report's lines, read one at a time.
pub struct Reader<R: Read> {
    path: String,
    records: csv::StringRecordsIntoIter<R>,
    at: [usize; 9],
    payout: Option<usize>,
    payout_at: Option<usize>,
}

impl<R: Read> Reader<R> {
    pub fn new(path: &str, mut csv: csv::Reader<R>) -> Result<Self, InputError> {
        let header = line::header(path, &mut csv)?;
        let find = |name: &str| header.iter().position(|h| h == name);
        let at = line::columns(
            path,
            1,
            &header,
            REQUIRED,
            |h, name| h == name,
            "Stripe's itemized payout reconciliation report needs it (run the report with this \
             column)",
        )?;
        Ok(Self {
            path: path.to_owned(),
            records: csv.into_records(),
            at,
            payout: find(PAYOUT),
            payout_at: find(PAYOUT_AT),
        })
    }

    fn line(&self, number: u64, record: &csv::StringRecord) -> Result<Line, InputError> {
        let field = |index: usize| record.get(index).unwrap_or("").trim();
        let error = |column: &str, message: String| {
            InputError::at(&self.path, number, Some(column), message)
        };
        let [
            reference,
            created,
            currency,
            gross,
            fee,
            net,
            category,
            source,
            payment_intent,
        ] = self.at.map(field);
        let currency = Currency::parse_any_case(currency)
            .ok_or_else(|| error("currency", format!("{currency:?} is not an ISO 4217 code")))?;
        let amount = |column: &str, text: &str| {
            money::minor_units(text, currency).map_err(|message| error(column, message))
        };
        let (gross, fee, net) = (
            amount("gross", gross)?,
            amount("fee", fee)?,
            amount("net", net)?,
        );
        if gross.checked_sub(fee) != Some(net) {
            return Err(error(
                "net",
                format!("net {net} is not gross {gross} minus fee {fee} (minor units)"),
            ));
        }
        if reference.is_empty() {
            return Err(error("balance_transaction_id", "empty".into()));
        }
        let optional = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        let kind = match category {
            "charge" | "payment" => LineKind::Payment,
            "refund" => LineKind::Refund,
            "refund_failure" => LineKind::RefundFailure,
            "dispute" => LineKind::Chargeback { fee_in_books: true },
            // The payout's own line: `payout.paid` books the payout, and the payout's lines are
            // compared with that; taking the report's word for it would match a payout the
            // books never saw.
            "payout" => LineKind::Left,
            "dispute_reversal" => LineKind::ChargebackReversal,
            // Stripe's own fees, and the tax on them.
            "fee" | "tax" => LineKind::Fee,
            other => LineKind::Other(other.to_owned()),
        };
        let mut at = vec![timestamp(created).map_err(|m| error("created_utc", m))?];
        if let Some(text) = self.payout_at.map(field).filter(|t| !t.is_empty()) {
            at.push(timestamp(text).map_err(|m| error(PAYOUT_AT, m))?);
        }
        Ok(Line {
            number,
            reference: reference.to_owned(),
            // The payout's own line is not part of the payout's sum.
            payout_id: self
                .payout
                .map(field)
                .and_then(optional)
                .filter(|_| kind != LineKind::Left),
            kind,
            payment_id: optional(payment_intent),
            object_id: optional(source),
            currency,
            gross_minor: gross,
            fee_minor: fee,
            net_minor: net,
            net_currency: currency,
            at,
        })
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Line, InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        let record = self.records.next()?;
        Some(
            line::numbered(&self.path, record)
                .and_then(|(number, record)| self.line(number, &record)),
        )
    }
}
