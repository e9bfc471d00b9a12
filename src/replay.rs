//! The finance replay client: re-signs provider events with the provider's first secret and a
//! fresh timestamp, posts them to a gateway, and classifies every answer.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::export::Trailer;
use crate::idempotency::REPLAYED_HEADER;
use crate::lines::BoundedLines;
use crate::providers::{self, Provider, Providers, Signed};
use crate::secret::shown_url;

#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// JSONL file: one {"provider": .., "body": "<raw body>", "id": ..} per line (an
    /// export, or a `history` archive, gzip-compressed).
    pub file: PathBuf,
    /// The gateway's base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    pub url: String,
    /// Events in flight at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=512))]
    pub concurrency: u32,
    /// Further attempts for an event that got a retryable answer (409, 429, 5xx, no answer).
    #[arg(long, default_value_t = 5)]
    pub retries: u32,
    /// Longest wait between two attempts, whatever Retry-After says.
    #[arg(long, default_value_t = 30_000)]
    pub max_backoff_ms: u64,
    /// Parse and sign every event and print what would be sent; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write counts and one entry per event that was not applied or replayed.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

/// How one event ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// Processed for the first time.
    Applied,
    /// Already processed: the gateway replayed its stored ack.
    Replayed,
    /// 422: the gateway holds another body under this event id.
    Conflict,
    /// Processed for the first time, acknowledged `ignored` (nothing to post).
    Ignored,
    /// Processed for the first time, the money held in unapplied funds.
    Held,
    /// Processed for the first time, acknowledged `rejected` (a business rule).
    Rejected,
    /// Anything else, after the retries.
    Failed,
}

impl Class {
    const ALL: [Class; 7] = [
        Class::Applied,
        Class::Ignored,
        Class::Held,
        Class::Replayed,
        Class::Conflict,
        Class::Rejected,
        Class::Failed,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Class::Applied => "applied",
            Class::Ignored => "ignored",
            Class::Held => "held",
            Class::Replayed => "replayed",
            Class::Conflict => "conflict",
            Class::Rejected => "rejected",
            Class::Failed => "failed",
        }
    }
}

/// The result of one line of the file.
#[derive(Debug, Clone, Serialize)]
pub struct EventResult {
    pub line: usize,
    pub provider: Option<String>,
    pub event_id: Option<String>,
    pub class: Class,
    pub status: Option<u16>,
    pub attempts: u32,
    pub detail: Option<String>,
}

/// Counts per class and the events that were not clean.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub applied: usize,
    pub ignored: usize,
    pub held: usize,
    pub replayed: usize,
    pub conflict: usize,
    pub rejected: usize,
    pub failed: usize,
    pub elapsed_secs: f64,
    pub events: Vec<EventResult>,
}

impl Summary {
    fn add(&mut self, result: EventResult) {
        *self.count_mut(result.class) += 1;
        if !matches!(result.class, Class::Applied | Class::Replayed) {
            self.events.push(result);
        }
    }

    fn count_mut(&mut self, class: Class) -> &mut usize {
        match class {
            Class::Applied => &mut self.applied,
            Class::Ignored => &mut self.ignored,
            Class::Held => &mut self.held,
            Class::Replayed => &mut self.replayed,
            Class::Conflict => &mut self.conflict,
            Class::Rejected => &mut self.rejected,
            Class::Failed => &mut self.failed,
        }
    }

    pub fn count(&self, class: Class) -> usize {
        match class {
            Class::Applied => self.applied,
            Class::Ignored => self.ignored,
            Class::Held => self.held,
            Class::Replayed => self.replayed,
            Class::Conflict => self.conflict,
            Class::Rejected => self.rejected,
            Class::Failed => self.failed,
        }
    }

    pub fn total(&self) -> usize {
        Class::ALL.iter().map(|c| self.count(*c)).sum()
    }

    /// Success means nothing conflicted and nothing failed.
    pub fn is_clean(&self) -> bool {
        self.conflict == 0 && self.failed == 0
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let total = self.total();
        let rate = if self.elapsed_secs > 0.0 {
            total as f64 / self.elapsed_secs
        } else {
            0.0
        };
        let mut out = format!(
            "{total} events in {:.2}s ({rate:.1} events/s)\n",
            self.elapsed_secs
        );
        out.push_str("outcome     count\n");
        for class in Class::ALL {
            out.push_str(&format!(
                "{:<10} {:>6}\n",
                class.as_str(),
                self.count(class)
            ));
        }
        out
    }
}

#[derive(Debug, Deserialize)]
struct Line {
    provider: String,
    body: String,
    #[serde(default)]
    id: Option<String>,
}

/// An event ready to send: its provider and the id it is signed under.
struct Prepared {
    line: usize,
    provider: Arc<Provider>,
    event_id: String,
    body: String,
}

fn malformed(line: usize, detail: String) -> EventResult {
    EventResult {
        line,
        provider: None,
        event_id: None,
        class: Class::Failed,
        status: None,
        attempts: 0,
        detail: Some(detail),
    }
}

fn prepare(providers: &Providers, line: usize, text: &str) -> Result<Prepared, EventResult> {
    let parsed: Line = serde_json::from_str(text)
        .map_err(|e| malformed(line, format!("line {line} is not a replay event: {e}")))?;
    let provider = providers.get(&parsed.provider).ok_or_else(|| {
        malformed(
            line,
            format!(
                "line {line}: provider {:?} is not in the configuration",
                parsed.provider
            ),
        )
    })?;
    let event_id = match (parsed.id, provider.connector().event_id_header()) {
        (Some(id), _) => id,
        // The event id of a Standard Webhooks or Razorpay delivery is a header, which the body
        // need not repeat: signing it under another id would post the event a second time.
        (None, Some(header)) => {
            return Err(malformed(
                line,
                format!(
                    "line {line}: a {} event needs its \"id\" (the original {header}); not sent",
                    provider.settings().scheme.as_str()
                ),
            ));
        }
        // The others take the id from the body; the gateway judges a missing one.
        (None, None) => provider
            .event_id_of(parsed.body.as_bytes())
            .unwrap_or_default(),
    };
    // A provider the gateway cannot sign for (PayPal), or an Adyen item whose signature no
    // configured key makes: nothing is sent.
    if let Err(error) = provider.sign(&event_id, parsed.body.as_bytes(), 0) {
        return Err(malformed(line, format!("line {line}: {error}; not sent")));
    }
    Ok(Prepared {
        line,
        provider,
        event_id,
        body: parsed.body,
    })
}

/// What an answer means for the replay.
#[derive(Debug, PartialEq)]
enum Verdict {
    Done(Class, Option<String>),
    Retry(Option<Duration>),
}

fn classify(status: u16, replayed: bool, retry_after: Option<Duration>, body: &[u8]) -> Verdict {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        json.as_ref()
            .and_then(|j| j.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    match status {
        // Replayed first: the gateway processed the event before, so this run changed nothing,
        // whatever the first outcome was (a rejected one was counted when it was new).
        200..=299 if replayed => Verdict::Done(Class::Replayed, None),
        200..=299 => match field("outcome").as_deref() {
            Some("rejected") => Verdict::Done(Class::Rejected, field("reason")),
            Some("ignored") => Verdict::Done(Class::Ignored, field("reason")),
            Some("held") => Verdict::Done(Class::Held, field("reason")),
            _ => Verdict::Done(Class::Applied, None),
        },
        422 => Verdict::Done(Class::Conflict, field("error")),
        // In flight, out of order, rate limited or transient: the gateway asks to come back.
        409 | 429 | 500..=599 => Verdict::Retry(retry_after),
        _ => Verdict::Done(
            Class::Failed,
            Some(format!("{status} {}", field("error").unwrap_or_default())),
        ),
    }
}

/// `event` signed at `timestamp` (`prepare` checked that it can be).
fn sign(event: &Prepared, timestamp: i64) -> Signed {
    event
        .provider
        .sign(&event.event_id, event.body.as_bytes(), timestamp)
        .unwrap_or_else(|_| Signed::headers(Vec::new()))
}

fn backoff(attempt: u32, retry_after: Option<Duration>, max: Duration) -> Duration {
    let exponential = Duration::from_millis(200u64.saturating_mul(1u64 << attempt.min(16)));
    retry_after.unwrap_or(exponential).min(max)
}

async fn deliver(
    client: &reqwest::Client,
    base_url: &str,
    event: &Prepared,
    args: &ReplayArgs,
) -> EventResult {
    let max_backoff = Duration::from_millis(args.max_backoff_ms);
    let mut last = (None, String::new());
    for attempt in 0..=args.retries {
        // Signed afresh for every attempt, so a long backoff never outlives the tolerance.
        let timestamp = chrono::Utc::now().timestamp();
        let signed = sign(event, timestamp);
        let url = format!("{base_url}{}", signed.path(event.provider.name()));
        let mut request = client
            .post(&url)
            .header("Content-Type", signed.content_type)
            .body(signed.body_or(event.body.as_bytes()).to_vec());
        for (name, value) in signed.headers {
            request = request.header(name, value);
        }
        let retry_after = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                let replayed = response
                    .headers()
                    .get(REPLAYED_HEADER)
                    .is_some_and(|v| v == "true");
                let retry_after = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(Duration::from_secs);
                let body = response.bytes().await.unwrap_or_default();
                match classify(status, replayed, retry_after, &body) {
                    Verdict::Done(class, detail) => {
                        return EventResult {
                            line: event.line,
                            provider: Some(event.provider.name().to_owned()),
                            event_id: Some(event.event_id.clone()),
                            class,
                            status: Some(status),
                            attempts: attempt + 1,
                            detail,
                        };
                    }
                    Verdict::Retry(retry_after) => {
                        last = (
                            Some(status),
                            String::from_utf8_lossy(&body).chars().take(200).collect(),
                        );
                        retry_after
                    }
                }
            }
            Err(error) => {
                last = (None, format!("no answer: {error}"));
                None
            }
        };
        if attempt < args.retries {
            tokio::time::sleep(backoff(attempt, retry_after, max_backoff)).await;
        }
    }
    EventResult {
        line: event.line,
        provider: Some(event.provider.name().to_owned()),
        event_id: Some(event.event_id.clone()),
        class: Class::Failed,
        status: last.0,
        attempts: args.retries + 1,
        detail: Some(last.1),
    }
}

/// The event lines of the file, numbered. An HTTP export ends with a trailer line
/// (`{"trailer":{"events":N,..}}`, see [`Trailer`]); each trailer must count exactly the event
/// lines since the previous one (downloads may be concatenated), else the file lost or gained
/// lines and nothing of it is sent. Files without a trailer (`export`, hand-made) are read as
/// they are. A `history` archive (`.jsonl.gz`, export lines with more columns) reads the same.
fn read_lines(path: &Path) -> anyhow::Result<Vec<(usize, String)>> {
    // An archive of `history` is gzip-compressed; an export is not.
    let file = crate::history::archive::open_maybe_gzip(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let mut file = BoundedLines::new(file);
    let mut lines = Vec::new();
    let mut since_trailer = 0u64;
    while let Some((number, line)) = file
        .next_line()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
    {
        if line.trim().is_empty() {
            continue;
        }
        match Trailer::parse(line) {
            Some(trailer) => {
                if trailer.events != since_trailer {
                    anyhow::bail!(
                        "{}: the trailer on line {number} counts {} event(s) but {since_trailer} event line(s) precede it: \
                         the file is cut or was edited; nothing was sent",
                        path.display(),
                        trailer.events
                    );
                }
                if trailer.skipped_non_utf8 > 0 {
                    eprintln!(
                        "note: the export before line {number} left out {} event(s) whose body is not UTF-8",
                        trailer.skipped_non_utf8
                    );
                }
                since_trailer = 0;
            }
            None => {
                since_trailer += 1;
                lines.push((number, line.to_owned()));
            }
        }
    }
    Ok(lines)
}

fn progress_bar(total: usize) -> ProgressBar {
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {pos}/{len} events {per_sec} eta {eta}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    }
}

/// Replays every event of the file; returns the summary (the caller prints and exits).
pub async fn run(settings: &Settings, args: &ReplayArgs) -> anyhow::Result<Summary> {
    let base_url = args.url.trim_end_matches('/').to_owned();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        anyhow::bail!("--url must be an http:// or https:// URL");
    }
    let providers = providers::configure_all(&settings.providers);
    let lines = read_lines(&args.file)?;
    let started = Instant::now();
    let mut summary = Summary::default();
    let mut prepared = Vec::with_capacity(lines.len());
    for (line, text) in &lines {
        match prepare(&providers, *line, text) {
            Ok(event) => prepared.push(event),
            Err(result) => {
                eprintln!("{}", result.detail.as_deref().unwrap_or_default());
                summary.add(result);
            }
        }
    }

    if args.dry_run {
        for event in &prepared {
            let signed = sign(event, chrono::Utc::now().timestamp());
            let mut names: Vec<&str> = signed
                .headers
                .iter()
                .map(|(name, _)| name.as_str())
                .collect();
            if signed.body.is_some() {
                names.push("in the body");
            }
            let url = format!("{base_url}/v1/callbacks/{}", event.provider.name());
            println!(
                "line {}: POST {} event {} ({} bytes, signed: {})",
                event.line,
                shown_url(&url),
                event.event_id,
                event.body.len(),
                names.join(", ")
            );
        }
        summary.elapsed_secs = started.elapsed().as_secs_f64();
        return Ok(summary);
    }

    // Straight to the gateway --url names: no client of the gateway reads a proxy from the
    // environment (an HTTPS_PROXY meant for something else would carry signed events).
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(args.concurrency as usize)
        .build()?;
    let bar = progress_bar(prepared.len());
    let terminal = std::io::stderr().is_terminal();
    let mut results = futures_util::stream::iter(prepared.iter())
        .map(|event| deliver(&client, &base_url, event, args))
        .buffer_unordered(args.concurrency as usize);
    let mut done = 0usize;
    while let Some(result) = results.next().await {
        done += 1;
        bar.inc(1);
        if !matches!(result.class, Class::Applied | Class::Replayed) {
            let message = format!(
                "line {}: {} {} ({})",
                result.line,
                result.class.as_str(),
                result.event_id.as_deref().unwrap_or("-"),
                result.detail.as_deref().unwrap_or("")
            );
            bar.suspend(|| eprintln!("{message}"));
        }
        if !terminal && (done.is_multiple_of(100) || done == prepared.len()) {
            eprintln!("replay: {done}/{} events sent", prepared.len());
        }
        summary.add(result);
    }
    bar.finish_and_clear();
    summary.events.sort_by_key(|e| e.line);
    summary.elapsed_secs = started.elapsed().as_secs_f64();
    if let Some(path) = &args.report {
        let file = std::fs::File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        serde_json::to_writer_pretty(file, &summary)?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_ack_is_applied_and_a_replayed_one_is_replayed() {
        let ack = br#"{"outcome": "applied", "received": true}"#;
        assert_eq!(
            classify(200, false, None, ack),
            Verdict::Done(Class::Applied, None)
        );
        assert_eq!(
            classify(200, true, None, ack),
            Verdict::Done(Class::Replayed, None)
        );
    }

    #[test]
    fn a_rejected_ack_is_rejected_with_its_reason() {
        let ack = br#"{"outcome": "rejected", "reason": "amount_mismatch"}"#;
        assert_eq!(
            classify(200, false, None, ack),
            Verdict::Done(Class::Rejected, Some("amount_mismatch".into()))
        );
    }

    #[test]
    fn a_replayed_rejected_ack_is_replayed_not_rejected() {
        // The contract's replay classes: `Idempotent-Replayed: true` means the gateway had
        // processed the event before, whatever that first outcome was.
        let ack = br#"{"outcome": "rejected", "reason": "amount_mismatch"}"#;
        assert_eq!(
            classify(200, true, None, ack),
            Verdict::Done(Class::Replayed, None)
        );
    }

    #[test]
    fn first_ignored_and_held_acks_are_counted_apart_from_applied() {
        assert_eq!(
            classify(
                200,
                false,
                None,
                br#"{"outcome":"ignored","reason":"unsupported_event_type"}"#
            ),
            Verdict::Done(Class::Ignored, Some("unsupported_event_type".into()))
        );
        assert_eq!(
            classify(
                200,
                false,
                None,
                br#"{"outcome":"held","reason":"unknown_order"}"#
            ),
            Verdict::Done(Class::Held, Some("unknown_order".into()))
        );
        assert_eq!(
            classify(200, true, None, br#"{"outcome":"held"}"#),
            Verdict::Done(Class::Replayed, None)
        );
    }

    #[test]
    fn a_422_is_a_conflict() {
        let body = br#"{"error":"key_reused_with_different_body"}"#;
        assert!(matches!(
            classify(422, false, None, body),
            Verdict::Done(Class::Conflict, _)
        ));
    }

    #[test]
    fn busy_and_transient_answers_are_retried_honouring_retry_after() {
        let wait = Some(Duration::from_secs(2));
        for status in [409, 429, 500, 503] {
            assert_eq!(classify(status, false, wait, b"{}"), Verdict::Retry(wait));
        }
    }

    #[test]
    fn other_client_errors_fail_at_once() {
        let body = br#"{"error":"invalid_signature"}"#;
        assert_eq!(
            classify(401, false, None, body),
            Verdict::Done(Class::Failed, Some("401 invalid_signature".into()))
        );
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let max = Duration::from_secs(5);
        assert_eq!(backoff(0, None, max), Duration::from_millis(200));
        assert_eq!(backoff(3, None, max), Duration::from_millis(1600));
        assert_eq!(backoff(10, None, max), max);
        assert_eq!(backoff(0, Some(Duration::from_secs(60)), max), max);
    }
}
