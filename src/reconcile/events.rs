//! `reconcile --events FILE`: what the event log knew of the payments the ledger misses. The
//! log's old months live in archives (docs/history.md) and exports; a payment the provider
//! moved money for but the ledger never posted was either never received (ask the provider to
//! resend it) or received and not posted (its stored outcome says why: a rejection, a refund
//! larger than the capture). The files are streamed; only the events of the payments asked
//! about are kept.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::export::Trailer;
use crate::lines::BoundedLines;
use crate::providers::Providers;

/// One event line of an export or an archive; the archive's columns are optional.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Received {
    pub provider: String,
    pub id: String,
    pub body: String,
    #[serde(default, skip_serializing)]
    pub received_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(default, skip_serializing)]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing)]
    pub reason: Option<String>,
}

impl Received {
    /// `evt_1 at 2025-01-10T00:01:00Z: rejected refund_exceeds_captured` (what the file says).
    pub fn describe(&self) -> String {
        let mut text = self.id.clone();
        if let Some(at) = self.received_at {
            text.push_str(&format!(
                " at {}",
                at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
        if let Some(outcome) = &self.outcome {
            text.push_str(&format!(": {outcome}"));
            if let Some(reason) = &self.reason {
                text.push_str(&format!(" {reason}"));
            }
        }
        text
    }
}

/// The events of `provider` in `files` whose body names one of `payment_ids`, by payment id in
/// file order.
pub fn find(
    files: &[PathBuf],
    provider: &str,
    providers: &Providers,
    payment_ids: &HashSet<String>,
) -> anyhow::Result<BTreeMap<String, Vec<Received>>> {
    let mut found: BTreeMap<String, Vec<Received>> = BTreeMap::new();
    for path in files {
        let reader = crate::history::archive::open_maybe_gzip(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let mut reader = BoundedLines::new(reader);
        while let Some((number, line)) = reader
            .next_line()
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?
        {
            if line.trim().is_empty() || Trailer::parse(line).is_some() {
                continue;
            }
            // A body kept as base64 (not UTF-8) names no payment of a supported provider.
            let Ok(event) = serde_json::from_str::<Received>(line) else {
                eprintln!("{}: line {number} is not an event; skipped", path.display());
                continue;
            };
            if event.provider != provider {
                continue;
            }
            if let Some(payment_id) = providers.payment_id_of(provider, event.body.as_bytes())
                && payment_ids.contains(&payment_id)
            {
                found.entry(payment_id).or_default().push(event);
            }
        }
    }
    Ok(found)
}

/// The found events as a replay file (`replay FILE --url ..`): re-delivering an event the
/// gateway still knows answers its stored ack; one it forgot is judged again.
pub fn write_replay(
    found: &BTreeMap<String, Vec<Received>>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    for event in found.values().flatten() {
        serde_json::to_writer(&mut *out, event)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
