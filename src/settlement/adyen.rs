//! Adyen's Settlement details report (one batch a file, `settlement_detail_report_batch_<N>.csv`),
//! CSV with a header: one booking a line. Columns are read by name ("can contain additional
//! data or columns" and may be reordered, Adyen's report documentation). Amounts are unsigned
//! major-unit decimals whose direction is the column that holds them (`Gross Debit (GC)` /
//! `Gross Credit (GC)`, `Net Debit (NC)` / `Net Credit (NC)`); the fees are `Commission`,
//! `Markup`, `Scheme Fees` and `Interchange`, in the net currency. `Psp Reference` is the
//! payment's (the gateway's payment id for Adyen), and the `MerchantPayout` line's net debit is
//! the batch's payout: the sum of the other lines' net (docs/settlement.md).

use std::io::Read;

use super::line::{self, InputError, Line, LineKind, timestamp};
use crate::money::{self, Currency};

const REQUIRED: [&str; 11] = [
    "Psp Reference",
    "Creation Date",
    "Type",
    "Modification Reference",
    "Gross Currency",
    "Gross Debit (GC)",
    "Gross Credit (GC)",
    "Net Currency",
    "Net Debit (NC)",
    "Net Credit (NC)",
    "Batch Number",
];

/// Adyen's cost columns: absent ones count 0 (an APM's line has only `Commission`).
const COSTS: [&str; 4] = [
    "Commission (NC)",
    "Markup (NC)",
    "Scheme Fees (NC)",
    "Interchange (NC)",
];

/// Whether a header is Adyen's settlement details report.
pub fn recognises(header: &csv::StringRecord) -> bool {
    let names: Vec<&str> = header.iter().collect();
    names.contains(&"Psp Reference") && names.contains(&"Type")
}

pub struct Reader<R: Read> {
    path: String,
    records: csv::StringRecordsIntoIter<R>,
    at: [usize; 11],
    costs: Vec<(usize, &'static str)>,
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
            "Adyen's settlement details report has it",
        )?;
        Ok(Self {
            path: path.to_owned(),
            records: csv.into_records(),
            at,
            costs: COSTS
                .iter()
                .filter_map(|name| find(name).map(|index| (index, *name)))
                .collect(),
        })
    }

    fn line(&self, number: u64, record: &csv::StringRecord) -> Result<Line, InputError> {
        let field = |index: usize| record.get(index).unwrap_or("").trim();
        let error = |column: &str, message: String| {
            InputError::at(&self.path, number, Some(column), message)
        };
        let [
            psp_reference,
            created,
            kind,
            modification,
            gross_currency,
            gross_debit,
            gross_credit,
            net_currency,
            net_debit,
            net_credit,
            batch,
        ] = self.at.map(field);
        let currency = |column: &str, code: &str| {
            Currency::parse(code)
                .ok_or_else(|| error(column, format!("{code:?} is not an ISO 4217 code")))
        };
        let net_currency = currency("Net Currency", net_currency)?;
        // Money in is a credit, money out a debit; one of the two holds the amount.
        let signed = |currency: Currency, debit: (&str, &str), credit: (&str, &str)| {
            let amount = |(column, text): (&str, &str)| {
                if text.is_empty() {
                    Ok(0)
                } else {
                    money::minor_units(text, currency).map_err(|m| error(column, m))
                }
            };
            Ok::<i64, InputError>(amount(credit)? - amount(debit)?)
        };
        let net = signed(
            net_currency,
            ("Net Debit (NC)", net_debit),
            ("Net Credit (NC)", net_credit),
        )?;
        // Lines of the batch itself (fees, the payout, balance transfers) have no gross.
        let (currency, gross) = if gross_currency.is_empty() {
            (net_currency, net)
        } else {
            let gross_currency = currency("Gross Currency", gross_currency)?;
            let gross = signed(
                gross_currency,
                ("Gross Debit (GC)", gross_debit),
                ("Gross Credit (GC)", gross_credit),
            )?;
            (gross_currency, gross)
        };
        // In one currency the fee is what the gross lost on its way to the net, whatever
        // columns name it (real files add `DCC Markup (NC)`, `Payment Fees (NC)`); converted, it
        // is the cost columns, in the net currency (the conversion itself is not booked).
        let mut fee = 0i64;
        if currency == net_currency {
            fee = gross - net;
        } else {
            for &(index, column) in &self.costs {
                let text = field(index);
                if !text.is_empty() {
                    fee += money::minor_units(text, net_currency).map_err(|m| error(column, m))?;
                }
            }
        }
        let kind = match kind {
            "Settled" | "SettledBulk" => LineKind::Payment,
            "Refunded" | "RefundedBulk" => LineKind::Refund,
            "RefundedReversed" => LineKind::RefundFailure,
            "Chargeback" | "SecondChargeback" => LineKind::Chargeback {
                fee_in_books: false,
            },
            "ChargebackReversed" => LineKind::ChargebackReversal,
            "Fee" | "PaymentCost" => LineKind::Fee,
            "MerchantPayout" => LineKind::Payout,
            "Balancetransfer" => LineKind::Carried,
            other => LineKind::Other(other.to_owned()),
        };
        if batch.is_empty() {
            return Err(error("Batch Number", "empty".into()));
        }
        let optional = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        // The line's own id: its modification's reference, or for the batch's own lines (a
        // label such as "Transaction Fees January 05 2021") the label within its batch.
        let reference = format!(
            "adyen:{batch}:{kind_name}:{psp_reference}:{modification}",
            kind_name = field(self.at[2])
        );
        Ok(Line {
            number,
            reference,
            payout_id: Some(format!("batch {batch}")),
            kind,
            payment_id: optional(psp_reference),
            object_id: optional(modification),
            currency,
            gross_minor: gross,
            fee_minor: fee,
            net_minor: net,
            net_currency,
            at: vec![timestamp(created).map_err(|m| error("Creation Date", m))?],
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
