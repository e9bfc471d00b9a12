//! `reconcile`: compares what a provider says it moved (a JSONL report) with the ledger, per
//! (payment id, kind), and says which payments differ and what finance does next.
//!
//! The report is read line by line and never held as lines; what stays in memory is one
//! entry per distinct (payment id, kind) of the report and of the ledger window (measured in
//! docs/reconciliation.md: about 190 bytes per item, 220 with `--report`).

pub mod classify;
pub mod events;
pub mod ledger;
pub mod report;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use classify::{Class, Currencies, Item, Kind, LedgerSide, Side};

#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileArgs {
    /// The provider the report comes from (a `[[providers]]` name; its merchant_id is used).
    #[arg(long)]
    pub provider: String,
    /// JSONL, one movement a line: {"payment_id","kind":"payment"|"refund"|"chargeback"|"chargeback_reversal"|"dispute_fee"|"refund_reversal","amount_minor","currency","at","reference"}.
    #[arg(value_name = "REPORT")]
    pub file: PathBuf,
    /// Only movements at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<DateTime<Utc>>,
    /// Only movements before this time (RFC 3339).
    #[arg(long)]
    pub until: Option<DateTime<Utc>>,
    /// How far the ledger side reaches beyond the window, so late deliveries still match.
    #[arg(long, default_value_t = 3600)]
    pub grace_secs: u32,
    /// Write every item with its class as JSON.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// Write the payment ids of `missing_in_ledger` items, one a line.
    #[arg(long, value_name = "FILE")]
    pub emit_ids: Option<PathBuf>,
    /// Event-log archives or exports (`history` archives, `export` output; repeatable) to look
    /// the `missing_in_ledger` payments up in: received (with the stored outcome) or not.
    #[arg(long, value_name = "FILE")]
    pub events: Vec<PathBuf>,
    /// With --events: write the events found for `missing_in_ledger` payments as a replay file.
    #[arg(long, value_name = "FILE", requires = "events")]
    pub emit_replay: Option<PathBuf>,
}

/// Why a reconciliation could not run: the caller's mistake (exit 2) or the system's (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] anyhow::Error),
}

/// Progress lines every this many report lines or ledger transfers when stderr is no terminal.
const PROGRESS_EVERY: u64 = 100_000;
/// Non-matched items printed on stdout; the JSON report always has them all.
const PRINT_LIMIT: usize = 1000;
/// Malformed lines kept for the JSON report; all are counted and named on stderr.
const MALFORMED_KEPT: usize = 1000;

/// The window as both sides apply it: the report's `at` in `[since, until)`, the ledger's
/// `created_at` in the same range widened by the grace margin.
#[derive(Debug, Clone, Copy)]
struct Window {
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    grace: TimeDelta,
}

impl Window {
    fn contains(&self, at: DateTime<Utc>) -> bool {
        self.since.is_none_or(|s| at >= s) && self.until.is_none_or(|u| at < u)
    }

    fn contains_with_grace(&self, at: DateTime<Utc>) -> bool {
        self.since.is_none_or(|s| at >= s - self.grace)
            && self.until.is_none_or(|u| at < u + self.grace)
    }

    /// The ledger query's bounds; an open end becomes a date no ledger row precedes or follows.
    fn ledger_bounds(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        let far_future = DateTime::<Utc>::from_timestamp(253_402_300_799, 0).unwrap_or_default();
        (
            self.since
                .map_or(DateTime::<Utc>::UNIX_EPOCH, |s| s - self.grace),
            self.until.map_or(far_future, |u| u + self.grace),
        )
    }
}

/// Both sides, per kind, keyed by payment id (so a line's borrowed id can look it up).
#[derive(Default)]
struct Items([HashMap<Box<str>, Item>; Kind::ALL.len()]);

impl Items {
    fn entry(&mut self, payment_id: &str, kind: Kind) -> &mut Item {
        let map = &mut self.0[kind.index()];
        // Looked up by &str first: an owned key is allocated only for a new payment id.
        if !map.contains_key(payment_id) {
            map.insert(payment_id.into(), Item::default());
        }
        map.get_mut(payment_id)
            .unwrap_or_else(|| unreachable!("inserted just above"))
    }

    fn len(&self) -> usize {
        self.0.iter().map(HashMap::len).sum()
    }

    /// Judged items that pass `keep`, by payment id then kind. References only: sorting a
    /// million of them costs 32 MB, not a second copy of the items.
    fn sorted(&self, keep: impl Fn(&Item) -> bool) -> Vec<(&str, Kind, &Item)> {
        let mut out: Vec<(&str, Kind, &Item)> = Kind::ALL
            .into_iter()
            .flat_map(|kind| {
                self.0[kind.index()]
                    .iter()
                    .map(move |(id, item)| (&**id, kind, item))
            })
            .filter(|(_, _, item)| item.is_in_window() && keep(item))
            .collect();
        out.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        out
    }
}

/// A malformed line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Malformed {
    pub line: u64,
    pub error: String,
}

/// Count and amounts of one class in one currency.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Totals {
    pub count: u64,
    pub report_amount_minor: i64,
    pub ledger_amount_minor: i64,
}

/// The outcome of a run: counts, every judged item, and what was skipped.
pub struct Reconciliation {
    pub provider: String,
    pub merchant_id: i64,
    window: Window,
    pub lines_read: u64,
    pub lines_outside_window: u64,
    pub malformed_count: u64,
    pub malformed: Vec<Malformed>,
    pub ledger_transfers: u64,
    /// Items seen only in the grace margin: the neighbouring window's business.
    pub not_judged: u64,
    pub elapsed: Duration,
    /// Both sides of every item, judged or not (see `Item::is_in_window`).
    items: Items,
    pub totals: BTreeMap<(Class, &'static str), Totals>,
}

impl Reconciliation {
    pub fn count(&self, class: Class) -> u64 {
        self.totals
            .iter()
            .filter(|((c, _), _)| *c == class)
            .map(|(_, t)| t.count)
            .sum()
    }

    /// Items that are neither matched nor held.
    pub fn differences(&self) -> u64 {
        Class::ALL
            .iter()
            .filter(|c| !c.is_agreement())
            .map(|c| self.count(*c))
            .sum()
    }

    /// Exit 0 only when every item agrees and every line could be read.
    pub fn is_clean(&self) -> bool {
        self.differences() == 0 && self.malformed_count == 0
    }

    /// The summary table, then the items that differ.
    pub fn write_summary(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let secs = self.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            self.lines_read as f64 / secs
        } else {
            0.0
        };
        let bound = |t: Option<DateTime<Utc>>| {
            t.map_or("-".to_owned(), |t| {
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            })
        };
        writeln!(
            out,
            "reconcile {} (merchant {}), window {} .. {}, grace {} s",
            self.provider,
            self.merchant_id,
            bound(self.window.since),
            bound(self.window.until),
            self.window.grace.num_seconds()
        )?;
        writeln!(
            out,
            "{} report lines in {secs:.2}s ({rate:.0} lines/s): {} malformed, {} outside the window; {} ledger transfers; {} items only in the grace margin",
            self.lines_read,
            self.malformed_count,
            self.lines_outside_window,
            self.ledger_transfers,
            self.not_judged
        )?;
        writeln!(
            out,
            "{:<20} {:>9}  {:<8} {:>16} {:>16}",
            "class", "count", "currency", "report_minor", "ledger_minor"
        )?;
        for class in Class::ALL {
            let mut any = false;
            for ((_, currency), totals) in self.totals.iter().filter(|((c, _), _)| *c == class) {
                any = true;
                writeln!(
                    out,
                    "{:<20} {:>9}  {:<8} {:>16} {:>16}",
                    class.as_str(),
                    totals.count,
                    currency,
                    totals.report_amount_minor,
                    totals.ledger_amount_minor
                )?;
            }
            if !any {
                writeln!(out, "{:<20} {:>9}", class.as_str(), 0)?;
            }
        }
        let differing = self.items.sorted(|i| !i.class().is_agreement());
        if !differing.is_empty() {
            writeln!(out, "\ndifferences:")?;
        }
        let total = differing.len();
        for (printed, (payment_id, kind, item)) in differing.into_iter().enumerate() {
            if printed == PRINT_LIMIT {
                writeln!(
                    out,
                    "... and {} more; --report FILE lists every item",
                    total - PRINT_LIMIT
                )?;
                break;
            }
            let report = item.report.map_or("-".to_owned(), |s| {
                format!(
                    "{} {} (line {})",
                    s.amount_minor,
                    s.currencies.code(),
                    item.first_line.unwrap_or_default()
                )
            });
            let ledger = item.ledger.map_or("-".to_owned(), |l| {
                format!(
                    "{} {} ({} transfer{})",
                    l.sum.amount_minor,
                    l.sum.currencies.code(),
                    l.sum.count,
                    if l.sum.count == 1 { "" } else { "s" }
                )
            });
            writeln!(
                out,
                "{:<20} {payment_id} {}  report {report}  ledger {ledger}",
                item.class().as_str(),
                kind.as_str()
            )?;
        }
        Ok(())
    }

    /// Every judged item with its class, as one JSON object with one item a line (so a large
    /// report can be grepped), streamed to `out`.
    pub fn write_json(&self, out: &mut dyn Write) -> anyhow::Result<()> {
        let counts: BTreeMap<&str, u64> = Class::ALL
            .iter()
            .map(|c| (c.as_str(), self.count(*c)))
            .collect();
        let summary: Vec<SummaryRow<'_>> = self
            .totals
            .iter()
            .map(|((class, currency), totals)| SummaryRow {
                class: *class,
                currency,
                totals,
            })
            .collect();
        let json = JsonReport {
            provider: &self.provider,
            merchant_id: self.merchant_id,
            since: self.window.since,
            until: self.window.until,
            grace_secs: self.window.grace.num_seconds(),
            lines_read: self.lines_read,
            lines_outside_window: self.lines_outside_window,
            malformed_count: self.malformed_count,
            malformed: &self.malformed,
            ledger_transfers: self.ledger_transfers,
            not_judged: self.not_judged,
            clean: self.is_clean(),
            counts,
            summary,
        };
        let mut head = serde_json::to_string(&json)?;
        // The object stays open for the items: drop its closing brace.
        head.pop();
        out.write_all(head.as_bytes())?;
        out.write_all(b",\"items\":[")?;
        for (index, (payment_id, kind, item)) in self.items.sorted(|_| true).into_iter().enumerate()
        {
            out.write_all(if index == 0 { b"\n" } else { b",\n" })?;
            serde_json::to_writer(&mut *out, &JsonItem::new(payment_id, kind, item))?;
        }
        out.write_all(b"\n]}\n")?;
        out.flush()?;
        Ok(())
    }

    /// The payment ids of the items the ledger is short of: `missing_in_ledger`, and
    /// `amount_mismatch` items below the report in its currency (what a replay of the
    /// provider's events can make up).
    pub fn short_ids(&self) -> std::collections::HashSet<String> {
        self.items
            .sorted(|i| i.ledger_is_short())
            .into_iter()
            .map(|(payment_id, _, _)| payment_id.to_owned())
            .collect()
    }

    /// The payment ids of `missing_in_ledger` items, one a line, each once.
    pub fn write_missing_ids(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let mut last: Option<&str> = None;
        for (payment_id, _, _) in self.items.sorted(|i| i.class() == Class::MissingInLedger) {
            if last != Some(payment_id) {
                writeln!(out, "{payment_id}")?;
                last = Some(payment_id);
            }
        }
        out.flush()
    }
}

#[derive(Serialize)]
struct SummaryRow<'a> {
    class: Class,
    currency: &'a str,
    #[serde(flatten)]
    totals: &'a Totals,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    provider: &'a str,
    merchant_id: i64,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    grace_secs: i64,
    lines_read: u64,
    lines_outside_window: u64,
    malformed_count: u64,
    malformed: &'a [Malformed],
    ledger_transfers: u64,
    not_judged: u64,
    clean: bool,
    counts: BTreeMap<&'a str, u64>,
    summary: Vec<SummaryRow<'a>>,
}

#[derive(Serialize)]
struct JsonItem<'a> {
    payment_id: &'a str,
    kind: Kind,
    class: Class,
    currency: &'a str,
    report_amount_minor: Option<i64>,
    report_currency: Option<&'a str>,
    report_lines: u32,
    first_line: Option<u64>,
    ledger_amount_minor: Option<i64>,
    ledger_currency: Option<&'a str>,
    ledger_transfers: u32,
    held_transfers: u32,
}

impl<'a> JsonItem<'a> {
    fn new(payment_id: &'a str, kind: Kind, item: &Item) -> Self {
        Self {
            payment_id,
            kind,
            class: item.class(),
            currency: item.currency(),
            report_amount_minor: item.report.map(|s| s.amount_minor),
            report_currency: item.report.map(|s| s.currencies.code()),
            report_lines: item.report.map_or(0, |s| s.count),
            first_line: item.first_line,
            ledger_amount_minor: item.ledger.map(|l| l.sum.amount_minor),
            ledger_currency: item.ledger.map(|l| l.sum.currencies.code()),
            ledger_transfers: item.ledger.map_or(0, |l| l.sum.count),
            held_transfers: item.ledger.map_or(0, |l| l.held_transfers),
        }
    }
}

fn report_progress(size: u64) -> ProgressBar {
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(Some(size), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{bar:40} {bytes}/{total_bytes} of the report {bytes_per_sec} eta {eta}",
        ) {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    }
}

fn ledger_progress() -> ProgressBar {
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} {pos} ledger transfers {per_sec}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    }
}

struct ReportCounts {
    lines: u64,
    outside_window: u64,
    malformed_count: u64,
    malformed: Vec<Malformed>,
}

/// Streams the report into `items`: one reused buffer, one map entry per new (payment, kind).
fn read_report(
    path: &Path,
    window: &Window,
    items: &mut Items,
) -> Result<ReportCounts, ReconcileError> {
    let unreadable = |source| ReconcileError::Unreadable {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let size = file.metadata().map_err(unreadable)?.len();
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let bar = report_progress(size);
    let terminal = std::io::stderr().is_terminal();
    let mut counts = ReportCounts {
        lines: 0,
        outside_window: 0,
        malformed_count: 0,
        malformed: Vec::new(),
    };
    let mut buffer = Vec::with_capacity(512);
    loop {
        buffer.clear();
        let read = reader.read_until(b'\n', &mut buffer).map_err(unreadable)?;
        if read == 0 {
            break;
        }
        counts.lines += 1;
        bar.inc(read as u64);
        if !terminal && counts.lines.is_multiple_of(PROGRESS_EVERY) {
            eprintln!("reconcile: {} report lines read", counts.lines);
        }
        let line = buffer.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match report::parse_line(line) {
            Ok(movement) => {
                if !window.contains_with_grace(movement.at) {
                    counts.outside_window += 1;
                    continue;
                }
                let in_window = window.contains(movement.at);
                let amount = movement.amount_minor.get();
                let currency = Currencies::One(movement.currency);
                let item = items.entry(&movement.payment_id, movement.kind);
                match &mut item.report {
                    Some(side) => side.add(amount, currency, in_window),
                    None => {
                        item.report = Some(Side::new(amount, currency, in_window));
                        item.first_line = Some(counts.lines);
                    }
                }
            }
            Err(error) => {
                let message = format!("line {}: {error}", counts.lines);
                bar.suspend(|| eprintln!("{message}"));
                counts.malformed_count += 1;
                if counts.malformed.len() < MALFORMED_KEPT {
                    counts.malformed.push(Malformed {
                        line: counts.lines,
                        error,
                    });
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(counts)
}

async fn read_ledger(
    database_url: &str,
    merchant_id: i64,
    provider: &str,
    window: &Window,
    items: &mut Items,
) -> anyhow::Result<u64> {
    let mut conn = crate::db::connect_reader(database_url).await?;
    let (from, to) = window.ledger_bounds();
    let bar = ledger_progress();
    let terminal = std::io::stderr().is_terminal();
    let mut seen = 0u64;
    let read = ledger::for_each_transfer(&mut conn, merchant_id, provider, from, to, |t| {
        seen += 1;
        bar.inc(1);
        if !terminal && seen.is_multiple_of(PROGRESS_EVERY) {
            eprintln!("reconcile: {seen} ledger transfers read");
        }
        let in_window = window.contains(t.created_at);
        let item = items.entry(&t.payment_id, t.kind);
        let held = u32::from(t.held);
        let currency = t.currency.map_or(Currencies::Mixed, Currencies::One);
        match &mut item.ledger {
            Some(ledger) => {
                ledger.sum.add(t.amount_minor, currency, in_window);
                ledger.held_transfers += held;
            }
            None => {
                item.ledger = Some(LedgerSide {
                    sum: Side::new(t.amount_minor, currency, in_window),
                    held_transfers: held,
                });
            }
        }
    })
    .await?;
    bar.finish_and_clear();
    Ok(read)
}

/// Reads the report, then the ledger window, and classifies every item. Writes `--report` and
/// `--emit-ids` when asked; the caller prints the summary and chooses the exit code.
pub async fn run(
    database_url: &str,
    merchant_id: i64,
    args: &ReconcileArgs,
) -> Result<Reconciliation, ReconcileError> {
    if let (Some(since), Some(until)) = (args.since, args.until)
        && since >= until
    {
        return Err(ReconcileError::Usage(
            "--since must be before --until".into(),
        ));
    }
    let window = Window {
        since: args.since,
        until: args.until,
        grace: TimeDelta::seconds(i64::from(args.grace_secs)),
    };
    let started = Instant::now();
    let mut items = Items::default();
    let counts = read_report(&args.file, &window, &mut items)?;
    tracing::debug!(items = items.len(), "report read");
    let ledger_transfers = read_ledger(
        database_url,
        merchant_id,
        &args.provider,
        &window,
        &mut items,
    )
    .await?;

    let mut not_judged = 0u64;
    let mut totals: BTreeMap<(Class, &'static str), Totals> = BTreeMap::new();
    for item in items.0.iter().flat_map(HashMap::values) {
        if !item.is_in_window() {
            not_judged += 1;
            continue;
        }
        let entry = totals.entry((item.class(), item.currency())).or_default();
        entry.count += 1;
        entry.report_amount_minor = entry
            .report_amount_minor
            .saturating_add(item.report.map_or(0, |s| s.amount_minor));
        entry.ledger_amount_minor = entry
            .ledger_amount_minor
            .saturating_add(item.ledger.map_or(0, |l| l.sum.amount_minor));
    }

    let reconciliation = Reconciliation {
        provider: args.provider.clone(),
        merchant_id,
        window,
        lines_read: counts.lines,
        lines_outside_window: counts.outside_window,
        malformed_count: counts.malformed_count,
        malformed: counts.malformed,
        ledger_transfers,
        not_judged,
        elapsed: started.elapsed(),
        items,
        totals,
    };
    if let Some(path) = &args.report {
        let file = std::fs::File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        reconciliation.write_json(&mut std::io::BufWriter::new(file))?;
    }
    if let Some(path) = &args.emit_ids {
        let file = std::fs::File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        reconciliation
            .write_missing_ids(&mut std::io::BufWriter::new(file))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(reconciliation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn day() -> Window {
        Window {
            since: Some(at("2026-01-10T00:00:00Z")),
            until: Some(at("2026-01-11T00:00:00Z")),
            grace: TimeDelta::seconds(3600),
        }
    }

    #[test]
    fn the_window_includes_its_start_and_excludes_its_end() {
        let window = day();
        assert!(window.contains(at("2026-01-10T00:00:00Z")));
        assert!(!window.contains(at("2026-01-11T00:00:00Z")));
    }

    #[test]
    fn the_grace_margin_widens_both_ends() {
        let window = day();
        assert!(window.contains_with_grace(at("2026-01-09T23:00:00Z")));
        assert!(!window.contains_with_grace(at("2026-01-09T22:59:59Z")));
        assert!(window.contains_with_grace(at("2026-01-11T00:59:59Z")));
        assert!(!window.contains_with_grace(at("2026-01-11T01:00:00Z")));
        assert_eq!(
            window.ledger_bounds(),
            (at("2026-01-09T23:00:00Z"), at("2026-01-11T01:00:00Z"))
        );
    }

    #[test]
    fn an_open_window_reads_the_whole_ledger() {
        let window = Window {
            since: None,
            until: None,
            grace: TimeDelta::seconds(3600),
        };
        assert!(window.contains(at("1999-01-01T00:00:00Z")));
        let (from, to) = window.ledger_bounds();
        assert_eq!(from, DateTime::<Utc>::UNIX_EPOCH);
        assert_eq!(to, at("9999-12-31T23:59:59Z"));
    }
}
