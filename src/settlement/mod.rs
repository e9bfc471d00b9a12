//! `settle`: a provider's settlement report against the books. Each report line is matched to
//! the ledger by the payment it moved (its capture, refunds, chargebacks and their
//! reinstatements, summed per payment as `reconcile` does), the fees the ledger does not hold
//! yet are booked (`psp_fees:<provider>`, once per report line whatever the runs), each payout
//! is checked against the sum of its lines and against the payout the books hold, and with
//! `--bank` each bank line against a payout (docs/settlement.md).
//!
//! The report is read twice, a line at a time: first to check every line (a file with one bad
//! line books nothing) and sum the items, then to book the fees in batches. What stays in
//! memory is one entry per payment and payout of the report.

pub mod adyen;
pub mod bank;
pub mod ledger;
pub mod line;
pub mod paypal;
pub mod record;
pub mod state;
pub mod stripe;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Seek, SeekFrom, Write};
use std::path::PathBuf;

use chrono::{DateTime, TimeDelta, Utc};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};

use self::bank::BankLine;
use self::ledger::{Conversion, Fee};
pub use self::line::{InputError, Line, LineKind};
pub use self::state::{ItemKind, Judged, State};
use crate::access::audit;
use crate::config::providers::{PayloadFormat, ProviderSettings};
use crate::money::Currency;

#[derive(Debug, Clone, clap::Args)]
pub struct SettleArgs {
    /// The provider the report comes from (a `[[providers]]` name; its merchant_id is used).
    #[arg(long)]
    pub provider: String,
    /// The provider's settlement report, CSV: Stripe's itemized payout reconciliation report
    /// (with the payment_intent_id column), Adyen's settlement details report or PayPal's
    /// settlement report (STL).
    #[arg(value_name = "REPORT")]
    pub report: PathBuf,
    /// A bank statement, CSV with the header date,amount,currency,reference: each line is matched
    /// to a payout of the report.
    #[arg(long, value_name = "STATEMENT")]
    pub bank: Option<PathBuf>,
    /// Payouts the books hold from this time (RFC 3339) that the report lacks are
    /// missing_in_report.
    #[arg(long)]
    pub since: Option<DateTime<Utc>>,
    /// With --since: the end of that period (exclusive).
    #[arg(long, requires = "since")]
    pub until: Option<DateTime<Utc>>,
    /// How far before and after the report's dates the books are read, so a payment whose
    /// webhook came late still matches.
    #[arg(long, default_value_t = 7 * 86_400)]
    pub grace_secs: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    /// The caller's input (exit 2).
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    Usage(String),
    /// The system's (exit 1).
    #[error(transparent)]
    Runtime(#[from] anyhow::Error),
}

/// One side of an item: the sum in one currency. Sixteen bytes, as a million-line report holds
/// three a payment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Side {
    amount_minor: i64,
    count: u32,
    /// `None`: a code the gateway does not know (from the books): it can only mismatch.
    currency: Option<Currency>,
    /// A second currency, or a sum past 64 bits (each amount is at most 10^15 minor units, so
    /// only thousands of the largest): it can only mismatch.
    unsummable: bool,
}

impl Side {
    fn add(&mut self, currency: Option<Currency>, amount_minor: i64) {
        if self.count == 0 {
            self.currency = currency;
        } else if self.currency != currency || currency.is_none() {
            self.unsummable = true;
        }
        match self.amount_minor.checked_add(amount_minor) {
            Some(sum) => self.amount_minor = sum,
            None => self.unsummable = true,
        }
        self.count = self.count.saturating_add(1);
    }
}

/// What the report and the books are compared on: an item's kind and its id.
type Key = (ItemKind, Box<str>);

/// A report's items. Ordered, so a run's differences come out in the same order every time,
/// and without a hash table's free slots and its doubling: a million-line report peaks at
/// 256 MiB rather than 376 MiB with a `HashMap`, at the same speed (`scripts/bench --settle`).
type Items = BTreeMap<Key, Item>;

#[derive(Debug, Clone, Default)]
struct Item {
    report: Option<Side>,
    ledger: Option<Side>,
    /// A payout's own amount as the report states it.
    stated: Option<Side>,
    first_line: u64,
    /// Fees of its lines that this run booked.
    fees_booked: u32,
    /// The payout its first line was paid out in (an index into the run's payout ids).
    payout: Option<u32>,
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Settlement {
    pub provider: String,
    pub merchant_id: i64,
    pub lines: u64,
    pub fees_booked: u64,
    pub fees_seen: u64,
    /// Lines settled in another currency than they were paid in whose conversion this run
    /// booked (`fx:<provider>`).
    pub conversions_booked: u64,
    /// How many items are in each state, in the order of [`State::ALL`].
    pub counts: [u64; State::ALL.len()],
    /// The first [`PRINT_LIMIT`] items that differ, by state, kind and id.
    pub differing: Vec<Judged>,
}

impl Settlement {
    pub fn count(&self, state: State) -> u64 {
        self.counts[state as usize]
    }

    pub fn differences(&self) -> u64 {
        State::ALL
            .iter()
            .filter(|s| !s.agrees())
            .map(|s| self.count(*s))
            .sum()
    }

    /// The summary table, then each item that differs.
    pub fn write_summary(&self, out: &mut dyn Write) -> std::io::Result<()> {
        writeln!(
            out,
            "settle {} (merchant {}): {} report lines, {} fees of which {} booked now, {} \
             conversions booked now",
            self.provider,
            self.merchant_id,
            self.lines,
            self.fees_seen,
            self.fees_booked,
            self.conversions_booked
        )?;
        writeln!(out, "{:<20} {:>9}", "state", "count")?;
        for state in State::ALL {
            writeln!(out, "{:<20} {:>9}", state.as_str(), self.count(state))?;
        }
        if !self.differing.is_empty() {
            writeln!(out, "\ndifferences:")?;
        }
        for item in &self.differing {
            let side =
                |s: Option<i128>| s.map_or("-".to_owned(), |a| format!("{a} {}", item.currency));
            writeln!(
                out,
                "{:<20} {} {}  report {} (line {})  ledger {}",
                item.state.as_str(),
                item.kind.as_str(),
                item.id,
                side(item.report_minor),
                item.line,
                side(item.ledger_minor)
            )?;
        }
        let more = self
            .differences()
            .saturating_sub(self.differing.len() as u64);
        if more > 0 {
            writeln!(out, "... and {more} more")?;
        }
        Ok(())
    }
}

/// Differences printed; the summary table counts them all.
const PRINT_LIMIT: usize = 1000;

/// Without a terminal, a line on stderr every this many report lines.
const PROGRESS_EVERY: u64 = 100_000;

/// A progress bar on stderr when it is a terminal: the lines so far, or of `total`.
fn progress(total: Option<u64>, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
    let template = match total {
        Some(_) => format!("{{bar:40}} {{pos}}/{{len}} {what} {{per_sec}} eta {{eta}}"),
        None => format!("{{spinner}} {{pos}} {what} {{per_sec}}"),
    };
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

fn tick(bar: &ProgressBar, lines: u64, what: &str) {
    bar.inc(1);
    if bar.is_hidden() && lines.is_multiple_of(PROGRESS_EVERY) {
        eprintln!("settle: {lines} {what}");
    }
}

/// Fees are booked this many report lines a statement.
const FEE_BATCH: usize = 1000;

/// Settles `args.report` against the books of `merchant_id`.
pub async fn run(
    database_url: &str,
    provider: &ProviderSettings,
    args: &SettleArgs,
    actor: &audit::Context,
) -> Result<Settlement, SettleError> {
    let merchant_id = provider.merchant_id;
    let payload = provider.payload;
    if report_name(payload).is_none() {
        return Err(SettleError::Usage(format!(
            "--provider {}: settle reads Stripe's, Adyen's and PayPal's settlement reports; this provider's \
             payload is {}",
            args.provider,
            payload.as_str()
        )));
    }
    let path = args.report.display().to_string();
    // First pass: every line is read and checked before anything is booked.
    let mut items = Items::new();
    let mut payouts = PayoutIds::default();
    let mut first: Option<DateTime<Utc>> = None;
    let mut last: Option<DateTime<Utc>> = None;
    let mut lines = 0u64;
    let mut fees_seen = 0u64;
    let bar = progress(None, "report lines checked");
    // One open file for both passes, and its digest checked before the second: a report
    // replaced or rewritten between them books nothing.
    let report = File::open(&path).map_err(|e| unreadable(&path, &e))?;
    let digest = digest_of(&path, &report)?;
    for line in open(&path, &report, payload)? {
        let line = line?;
        lines += 1;
        tick(&bar, lines, "report lines checked");
        for at in &line.at {
            first = Some(first.map_or(*at, |f| f.min(*at)));
            last = Some(last.map_or(*at, |l| l.max(*at)));
        }
        fees_seen += u64::from(fee_of(&line).is_some());
        let payout = line.payout_id.as_deref().map(|id| payouts.index(id));
        for (kind, id, amount, currency) in items_of(&line) {
            let item = items.entry((kind, id.into())).or_insert_with(|| Item {
                first_line: line.number,
                payout,
                ..Item::default()
            });
            item.report
                .get_or_insert_with(Side::default)
                .add(Some(currency), amount);
        }
        if let (LineKind::Payout, Some(payout)) = (&line.kind, &line.payout_id) {
            let item = items
                .entry((ItemKind::Payout, payout.as_str().into()))
                .or_insert_with(|| Item {
                    first_line: line.number,
                    ..Item::default()
                });
            item.stated
                .get_or_insert_with(Side::default)
                .add(Some(line.net_currency), -line.net_minor);
        }
    }
    bar.finish_and_clear();
    let statement = match &args.bank {
        Some(bank) => {
            let bank_path = bank.display().to_string();
            let file = File::open(bank).map_err(|e| unreadable(&bank_path, &e))?;
            Some(bank::read(&bank_path, BufReader::new(file))?)
        }
        None => None,
    };

    let mut conn = crate::db::connect(database_url).await?;
    // The books around the report's dates, and the period asked for.
    let grace = TimeDelta::seconds(i64::from(args.grace_secs));
    let mut from = first.map(|f| f - grace);
    let mut to = last.map(|l| l + grace);
    if let Some(since) = args.since {
        from = Some(from.map_or(since, |f| f.min(since)));
        let until = args.until.unwrap_or(DateTime::<Utc>::MAX_UTC);
        to = Some(to.map_or(until, |t| t.max(until)));
    }
    if let (Some(from), Some(to)) = (from, to) {
        ledger::for_each_transfer(&mut conn, merchant_id, &args.provider, from, to, |booked| {
            let key: Key = (booked.kind, booked.id.into());
            let expected_payout = booked.kind == ItemKind::Payout
                && args.since.is_some_and(|s| booked.created_at >= s)
                && args.until.is_none_or(|u| booked.created_at < u);
            let item = match items.get_mut(&key) {
                Some(item) => item,
                None if expected_payout => items.entry(key).or_default(),
                None => return,
            };
            item.ledger
                .get_or_insert_with(Side::default)
                .add(Currency::parse(&booked.currency), booked.amount_minor);
        })
        .await?;
    }

    // Second pass: the fees and conversions, each once whatever the runs.
    let mut booked = Booked::default();
    let mut batch = Batch::default();
    let bar = progress(Some(lines), "report lines booked");
    let mut booked_lines = 0u64;
    if digest_of(&path, &report)? != digest {
        return Err(SettleError::Usage(format!(
            "{path} changed while it was being settled: nothing was booked; settle it again"
        )));
    }
    for line in open(&path, &report, payload)? {
        let line = line?;
        booked_lines += 1;
        tick(&bar, booked_lines, "report lines booked");
        let (fee, conversion) = (fee_of(&line), conversion_of(&line));
        if fee.is_some() || conversion.is_some() {
            let owner = items_of(&line)
                .into_iter()
                .next()
                .map(|(k, id, _, _)| (k, id.into_boxed_str()));
            if let Some(fee) = fee {
                batch.fees.push(fee);
                batch.fee_owners.push(owner.clone());
            }
            if let Some(conversion) = conversion {
                batch.conversions.push(conversion);
                batch.conversion_owners.push(owner);
            }
        }
        if batch.fees.len() + batch.conversions.len() >= FEE_BATCH {
            booked += book(
                &mut conn,
                merchant_id,
                &args.provider,
                &mut batch,
                &mut items,
            )
            .await?;
        }
    }
    booked += book(
        &mut conn,
        merchant_id,
        &args.provider,
        &mut batch,
        &mut items,
    )
    .await?;
    let (fees_booked, conversions_booked) = (booked.fees, booked.conversions);
    bar.finish_and_clear();

    let judged = judge(&items);
    let bank = statement.map_or_else(Vec::new, |statement| match_bank(&items, &statement));
    let records = payout_records(&judged, &bank, &payouts, &path);
    let mut counts = [0u64; State::ALL.len()];
    for state in judged
        .iter()
        .map(|j| j.0)
        .chain(bank.iter().map(|j| j.state))
    {
        counts[state as usize] += 1;
    }
    // Only the differences printed are made whole: the rest stay references into the items.
    let mut differing: Vec<_> = judged.into_iter().filter(|j| !j.0.agrees()).collect();
    differing.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    differing.truncate(PRINT_LIMIT);
    let mut differing: Vec<Judged> = differing
        .into_iter()
        .map(|(state, (kind, id), item)| item.judged(state, *kind, id))
        .chain(bank.into_iter().filter(|j| !j.state.agrees()))
        .collect();
    differing.sort_by(|a, b| (a.state, a.kind, &a.id).cmp(&(b.state, b.kind, &b.id)));
    differing.truncate(PRINT_LIMIT);
    let settlement = Settlement {
        provider: args.provider.clone(),
        merchant_id,
        lines,
        fees_booked,
        fees_seen,
        conversions_booked,
        counts,
        differing,
    };
    // The fees committed batch by batch above, each once under its reference; the run's audit
    // row commits with the payouts' rows. A run cut before here booked some fees and wrote no
    // row: the next run books the rest and writes it.
    let entry = settlement.audit_entry(args, &path, &digest);
    record::replace(
        &mut conn,
        merchant_id,
        &args.provider,
        &records,
        (actor, entry),
    )
    .await
    .map_err(anyhow::Error::from)?;
    Ok(settlement)
}

impl Settlement {
    /// The audit row of a run: the files it read and what it booked and found.
    fn audit_entry(&self, args: &SettleArgs, path: &str, digest: &[u8; 32]) -> audit::Entry {
        let states: serde_json::Map<String, serde_json::Value> = State::ALL
            .iter()
            .map(|s| (s.as_str().to_owned(), self.count(*s).into()))
            .collect();
        audit::Entry::new(
            audit::Action::SettlementRun,
            Some(format!("provider:{}", self.provider)),
            if self.differences() == 0 {
                "settled"
            } else {
                "differs"
            },
        )
        .with_changes(serde_json::json!({
            "report_file": path,
            "report_sha256": hex::encode(digest),
            "bank_file": args.bank.as_ref().map(|b| b.display().to_string()),
            "lines": self.lines,
            "fees_booked": self.fees_booked,
            "conversions_booked": self.conversions_booked,
            "states": states,
        }))
    }
}

/// The report's lines, one at a time.
type Lines = Box<dyn Iterator<Item = Result<Line, InputError>>>;

/// The report's lines, in its format, recognised by its header: the provider's payload's.
fn open(path: &str, report: &File, payload: PayloadFormat) -> Result<Lines, SettleError> {
    let mut file = report.try_clone().map_err(|e| unreadable(path, &e))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| unreadable(path, &e))?;
    let mut csv = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(line::Bounded::new(BufReader::new(file)));
    let header = line::header(path, &mut csv)?;
    let format = if stripe::recognises(&header) {
        PayloadFormat::Stripe
    } else if adyen::recognises(&header) {
        PayloadFormat::Adyen
    } else if paypal::recognises(&header) {
        PayloadFormat::Paypal
    } else {
        return Err(InputError::at(
            path,
            1,
            None,
            "unknown format: not a settlement report the gateway reads (Stripe's itemized payout \
             reconciliation report, Adyen's settlement details report, PayPal's settlement \
             report)"
                .into(),
        )
        .into());
    };
    if format != payload {
        return Err(InputError::at(
            path,
            1,
            None,
            format!(
                "{}, but the provider's payload is {}",
                report_name(format).unwrap_or_default(),
                payload.as_str()
            ),
        )
        .into());
    }
    Ok(match format {
        PayloadFormat::Adyen => Box::new(adyen::Reader::new(path, csv)?),
        PayloadFormat::Paypal => Box::new(paypal::Reader::new(path, csv)),
        _ => Box::new(stripe::Reader::new(path, csv)?),
    })
}

/// The report a payload format's provider sends, when `settle` reads it.
fn report_name(format: PayloadFormat) -> Option<&'static str> {
    match format {
        PayloadFormat::Stripe => Some("Stripe's itemized payout reconciliation report"),
        PayloadFormat::Adyen => Some("Adyen's settlement details report"),
        PayloadFormat::Paypal => Some("PayPal's settlement report"),
        _ => None,
    }
}

/// The SHA-256 of the report's bytes, read from its start.
fn digest_of(path: &str, report: &File) -> Result<[u8; 32], SettleError> {
    let mut file = report.try_clone().map_err(|e| unreadable(path, &e))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| unreadable(path, &e))?;
    let mut hasher = Sha256::new();
    let mut reader = BufReader::with_capacity(1 << 16, file);
    loop {
        let chunk = reader.fill_buf().map_err(|e| unreadable(path, &e))?;
        if chunk.is_empty() {
            break;
        }
        hasher.update(chunk);
        let read = chunk.len();
        reader.consume(read);
    }
    Ok(hasher.finalize().into())
}

fn unreadable(path: &str, error: &std::io::Error) -> SettleError {
    SettleError::Usage(format!("cannot read {path}: {error}"))
}

/// The items a line adds to, with its amount in the report's sense (money out positive for a
/// refund or chargeback) and that amount's currency.
fn items_of(line: &Line) -> Vec<(ItemKind, String, i64, Currency)> {
    let mut out = Vec::with_capacity(2);
    let id = line
        .payment_id
        .clone()
        .or_else(|| line.object_id.clone())
        .unwrap_or_else(|| line.reference.clone());
    let gross = line.currency;
    match &line.kind {
        LineKind::Payment => out.push((ItemKind::Payment, id, line.gross_minor, gross)),
        LineKind::Refund | LineKind::RefundFailure => {
            out.push((ItemKind::Refund, id, -line.gross_minor, gross));
        }
        // The books hold a chargeback with its fee when the webhooks carry it: the report's
        // net is both.
        LineKind::Chargeback { fee_in_books: true } => {
            out.push((ItemKind::Chargeback, id, -line.net_minor, line.net_currency));
        }
        LineKind::Chargeback {
            fee_in_books: false,
        } => {
            out.push((ItemKind::Chargeback, id, -line.gross_minor, gross));
        }
        LineKind::ChargebackReversal => {
            out.push((ItemKind::ChargebackReversal, id, line.gross_minor, gross));
        }
        LineKind::Fee | LineKind::Payout | LineKind::Carried | LineKind::Left => {}
        LineKind::Other(_) => out.push((
            ItemKind::Unbooked,
            line.reference.clone(),
            line.net_minor,
            line.net_currency,
        )),
    }
    if let (Some(payout), false) = (&line.payout_id, line.kind == LineKind::Payout) {
        out.push((
            ItemKind::Payout,
            payout.clone(),
            line.net_minor,
            line.net_currency,
        ));
    }
    out
}

/// The fee a line books: a payment's, refund's, reinstatement's or (when the webhooks do not
/// carry it) a chargeback's fee, or the provider's own fee line. A chargeback's fee the webhooks
/// carried is in the books (`dispute_fees`), so it is compared, not booked; a fee given back
/// with a reinstatement (Stripe's `dispute_reversal`, a negative fee) is booked back out of
/// `psp_fees`, so clearing holds what the provider holds.
fn fee_of(line: &Line) -> Option<Fee> {
    let fee_minor = match line.kind {
        LineKind::Payment
        | LineKind::Refund
        | LineKind::RefundFailure
        | LineKind::ChargebackReversal
        | LineKind::Chargeback {
            fee_in_books: false,
        } => line.fee_minor,
        LineKind::Fee => -line.net_minor,
        _ => 0,
    };
    (fee_minor != 0).then(|| Fee {
        reference: line.reference.clone(),
        payment_id: line.payment_or_reference(),
        currency: line.net_currency.code(),
        fee_minor,
    })
}

/// The conversion a line books: one settled in another currency than it was paid in moves its
/// gross out of clearing in the first and what it became before the provider's costs (net plus
/// fee) back in the second, through `fx:<provider>`.
fn conversion_of(line: &Line) -> Option<Conversion> {
    let paid = matches!(
        line.kind,
        LineKind::Payment
            | LineKind::Refund
            | LineKind::RefundFailure
            | LineKind::Chargeback { .. }
            | LineKind::ChargebackReversal
    );
    (paid && line.currency != line.net_currency && line.gross_minor != 0).then(|| Conversion {
        reference: line.reference.clone(),
        payment_id: line.payment_or_reference(),
        from_currency: line.currency.code(),
        from_minor: line.gross_minor,
        to_currency: line.net_currency.code(),
        to_minor: line.net_minor.saturating_add(line.fee_minor),
    })
}

/// What one batch of report lines books, and beside each (same index) the item it belongs to.
#[derive(Default)]
struct Batch {
    fees: Vec<Fee>,
    fee_owners: Vec<Option<Key>>,
    conversions: Vec<Conversion>,
    conversion_owners: Vec<Option<Key>>,
}

/// How many fees and conversions were booked now.
#[derive(Debug, Default, Clone, Copy)]
struct Booked {
    fees: u64,
    conversions: u64,
}

impl std::ops::AddAssign for Booked {
    fn add_assign(&mut self, other: Self) {
        self.fees += other.fees;
        self.conversions += other.conversions;
    }
}

async fn book(
    conn: &mut diesel_async::AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    batch: &mut Batch,
    items: &mut Items,
) -> Result<Booked, SettleError> {
    let fees_booked: HashSet<String> = ledger::book_fees(conn, merchant_id, provider, &batch.fees)
        .await
        .map_err(anyhow::Error::from)?
        .into_iter()
        .collect();
    let converted: HashSet<String> =
        ledger::book_conversions(conn, merchant_id, provider, &batch.conversions)
            .await
            .map_err(anyhow::Error::from)?
            .into_iter()
            .collect();
    let fee_owners = batch.fees.iter().zip(&batch.fee_owners);
    let owners = fee_owners
        .filter(|(fee, _)| fees_booked.contains(&fee.reference))
        .map(|(_, owner)| owner)
        .chain(
            batch
                .conversions
                .iter()
                .zip(&batch.conversion_owners)
                .filter(|(c, _)| converted.contains(&c.reference))
                .map(|(_, owner)| owner),
        );
    for owner in owners {
        if let Some(item) = owner.as_ref().and_then(|key| items.get_mut(key)) {
            item.fees_booked = item.fees_booked.saturating_add(1);
        }
    }
    batch.fees.clear();
    batch.fee_owners.clear();
    batch.conversions.clear();
    batch.conversion_owners.clear();
    Ok(Booked {
        fees: fees_booked.len() as u64,
        conversions: converted.len() as u64,
    })
}

/// Each item's state, by reference.
fn judge(items: &Items) -> Vec<(State, &Key, &Item)> {
    items
        .iter()
        .map(|(key, item)| (state_of(key.0, item), key, item))
        .collect()
}

fn state_of(kind: ItemKind, item: &Item) -> State {
    if kind == ItemKind::Unbooked {
        return State::MissingInLedger;
    }
    let stated_differs = match (&item.report, &item.stated) {
        (Some(r), Some(s)) => {
            r.unsummable
                || s.unsummable
                || r.amount_minor != s.amount_minor
                || r.currency != s.currency
        }
        _ => false,
    };
    match (item.reported(), &item.ledger) {
        _ if stated_differs => State::PayoutUnbalanced,
        // A payout the report states and its lines add up to, which no webhook books
        // (Adyen's): it is what the provider paid, to be found in the bank.
        (Some(_), None) if item.stated.is_some() => State::Matched,
        (Some(_), None) => State::MissingInLedger,
        (None, _) => State::MissingInReport,
        (Some(r), Some(l)) if r.unsummable || l.unsummable || r.currency != l.currency => {
            State::AmountMismatch
        }
        (Some(r), Some(l)) if r.amount_minor != l.amount_minor => {
            if kind == ItemKind::Payout {
                State::PayoutUnbalanced
            } else {
                State::AmountMismatch
            }
        }
        _ if item.fees_booked > 0 => State::FeeBooked,
        _ => State::Matched,
    }
}

impl Item {
    /// The report's side: its lines' sum, or for a payout that only states itself (PayPal's
    /// withdrawal names no lines) its own amount.
    fn reported(&self) -> Option<&Side> {
        self.report.as_ref().or(self.stated.as_ref())
    }

    fn judged(&self, state: State, kind: ItemKind, id: &str) -> Judged {
        Judged {
            state,
            kind,
            id: id.to_owned(),
            report_minor: self.reported().map(|s| i128::from(s.amount_minor)),
            ledger_minor: self.ledger.as_ref().map(|s| i128::from(s.amount_minor)),
            currency: self
                .reported()
                .or(self.ledger.as_ref())
                .and_then(|s| s.currency)
                .map_or("", Currency::code)
                .to_owned(),
            line: self.first_line,
        }
    }
}

/// The run's payout ids, each once, so an item names its payout in four bytes.
#[derive(Default)]
struct PayoutIds {
    ids: Vec<String>,
    index: HashMap<String, u32>,
}

impl PayoutIds {
    fn index(&mut self, id: &str) -> u32 {
        if let Some(index) = self.index.get(id) {
            return *index;
        }
        let index = u32::try_from(self.ids.len()).unwrap_or(u32::MAX);
        self.ids.push(id.to_owned());
        self.index.insert(id.to_owned(), index);
        index
    }
}

/// How many of a payout's differing items its row names.
const DIFFERENCES_KEPT: usize = 20;

/// Each payout of the report (and each the books expected) as its row will hold it.
fn payout_records(
    judged: &[(State, &Key, &Item)],
    bank: &[Judged],
    payouts: &PayoutIds,
    report_file: &str,
) -> Vec<record::PayoutRecord> {
    let mut differing: HashMap<u32, (u64, Vec<Judged>)> = HashMap::new();
    for (state, (kind, id), item) in judged {
        if state.agrees() || *kind == ItemKind::Payout {
            continue;
        }
        if let Some(payout) = item.payout {
            let (count, named) = differing.entry(payout).or_default();
            *count += 1;
            if named.len() < DIFFERENCES_KEPT {
                named.push(item.judged(*state, *kind, id));
            }
        }
    }
    judged
        .iter()
        .filter(|(_, (kind, _), _)| *kind == ItemKind::Payout)
        .map(|(state, (_, id), item)| {
            let (differing_items, differences) = payouts
                .index
                .get(&**id)
                .and_then(|index| differing.remove(index))
                .unwrap_or_default();
            let bank_state = bank
                .iter()
                .find(|b| *b.id == **id || b.id == format!("bank:{id}"))
                .map(|b| b.state);
            let judged = item.judged(*state, ItemKind::Payout, id);
            record::PayoutRecord {
                payout_id: id.to_string(),
                state: *state,
                currency: judged.currency,
                report_minor: judged.report_minor.unwrap_or_default(),
                stated_minor: item.stated.as_ref().map(|s| i128::from(s.amount_minor)),
                ledger_minor: judged.ledger_minor,
                lines: item.report.as_ref().map_or(0, |r| u64::from(r.count)),
                differing_items,
                differences,
                bank: bank_state,
                report_file: report_file.to_owned(),
            }
        })
        .collect()
}

/// Whether a bank reference names `payout_id` as a whole word, in any case ("STRIPE PAYOUT po_1"
/// names `po_1` but not `po_12`; "ADYEN BATCH 238" names `batch 238` but not `batch 2380`).
fn names(reference: &str, payout_id: &str) -> bool {
    let reference = reference.to_lowercase();
    let payout_id = payout_id.to_lowercase();
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    reference.match_indices(&payout_id).any(|(at, _)| {
        !word(reference[..at].chars().next_back())
            && !word(reference[at + payout_id.len()..].chars().next())
    })
}

/// Each bank line against the report's payouts: by the payout id in its reference, else by
/// amount and currency when exactly one payout not matched yet has them.
fn match_bank(items: &Items, statement: &[BankLine]) -> Vec<Judged> {
    let mut payouts: BTreeMap<&str, (i128, &str)> = items
        .iter()
        .filter(|((kind, _), _)| *kind == ItemKind::Payout)
        .filter_map(|((_, id), item)| {
            item.reported().map(|r| {
                (
                    &**id,
                    // A sum of two currencies, or past 64 bits, names no currency: no bank
                    // line matches it by amount, and one that names it is a mismatch.
                    (
                        i128::from(r.amount_minor),
                        r.currency
                            .filter(|_| !r.unsummable)
                            .map_or("", Currency::code),
                    ),
                )
            })
        })
        .collect();
    let mut judged = Vec::new();
    for line in statement {
        let amount = i128::from(line.amount_minor);
        let by_reference = payouts
            .keys()
            .find(|id| names(&line.reference, id))
            .copied();
        let by_amount = || {
            let mut same = payouts
                .iter()
                .filter(|(_, (a, c))| *a == amount && *c == line.currency.code())
                .map(|(id, _)| *id);
            match (same.next(), same.next()) {
                (Some(id), None) => Some(id),
                _ => None,
            }
        };
        let found = by_reference.or_else(by_amount);
        let (state, id) = match found {
            Some(id) => {
                let (expected, currency) = payouts.remove(id).unwrap_or_default();
                let state = if expected == amount && currency == line.currency.code() {
                    State::Matched
                } else {
                    State::AmountMismatch
                };
                (state, id.to_owned())
            }
            None => (State::BankUnmatched, line.reference.clone()),
        };
        judged.push(Judged {
            state,
            kind: ItemKind::Payout,
            id: format!("bank:{id}"),
            report_minor: Some(amount),
            ledger_minor: None,
            currency: line.currency.code().to_owned(),
            line: line.number,
        });
    }
    for (id, (amount, currency)) in payouts {
        judged.push(Judged {
            state: State::PayoutNotInBank,
            kind: ItemKind::Payout,
            id: id.to_owned(),
            report_minor: Some(amount),
            ledger_minor: None,
            currency: currency.to_owned(),
            line: items
                .get(&(ItemKind::Payout, id.into()))
                .map_or(0, |i| i.first_line),
        });
    }
    judged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sum_past_64_bits_can_only_mismatch() {
        let eur = Currency::parse("EUR");
        let mut side = Side::default();
        for _ in 0..10_000 {
            side.add(eur, crate::money::AmountMinor::MAX);
        }
        assert!(side.unsummable, "10^19 minor units do not fit in an i64");
        let mut small = Side::default();
        small.add(eur, 5);
        small.add(eur, -2);
        assert_eq!(
            (small.amount_minor, small.count, small.unsummable),
            (3, 2, false)
        );
    }

    fn side(currency: &str, amounts: &[i64]) -> Option<Side> {
        let mut side = Side::default();
        for amount in amounts {
            side.add(Currency::parse(currency), *amount);
        }
        Some(side)
    }

    #[test]
    fn a_payout_of_two_currencies_is_unbalanced_whatever_it_states() {
        // 100.00 EUR and 50.00 USD add up to 15000 "EUR", the amount the payout states.
        let item = Item {
            report: side("EUR", &[10_000]).map(|mut s| {
                s.add(Currency::parse("USD"), 5_000);
                s
            }),
            stated: side("EUR", &[15_000]),
            ..Item::default()
        };
        assert_eq!(state_of(ItemKind::Payout, &item), State::PayoutUnbalanced);
        let lone = Item {
            report: side("EUR", &[10_000, 5_000]),
            stated: side("EUR", &[15_000]),
            ..Item::default()
        };
        assert_eq!(state_of(ItemKind::Payout, &lone), State::Matched);
    }

    #[test]
    fn a_reinstatement_books_its_costs() {
        let eur = Currency::parse("EUR").unwrap();
        let line = Line {
            number: 2,
            reference: "adyen:238:ChargebackReversed:PSP1:CB1".into(),
            payout_id: Some("batch 238".into()),
            kind: LineKind::ChargebackReversal,
            payment_id: Some("PSP1".into()),
            object_id: Some("CB1".into()),
            currency: eur,
            gross_minor: 10_000,
            fee_minor: 50,
            net_minor: 9_950,
            net_currency: eur,
            at: Vec::new(),
        };
        assert_eq!(fee_of(&line).map(|f| f.fee_minor), Some(50));
    }

    #[test]
    fn a_bank_reference_names_a_payout_only_as_a_whole_word() {
        assert!(names("STRIPE PAYOUT po_1", "po_1"));
        assert!(names("ADYEN BATCH 238, TestCompany", "batch 238"));
        assert!(!names("STRIPE PAYOUT po_12", "po_1"));
        assert!(!names("ADYEN batch 2380", "batch 238"));
        assert!(!names("xpo_1", "po_1"));
    }
}
