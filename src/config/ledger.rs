//! `[ledger]`: the pace of the read caches.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, bounded};

/// The ledger's background work.
#[derive(Debug, Clone)]
pub struct LedgerSettings {
    /// How often the read caches move forward: balance checkpoints and the chart's per-minute
    /// counts (a read adds what came after them).
    pub checkpoint_interval: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLedger {
    checkpoint_interval_secs: Option<u64>,
}

pub(super) fn validate(raw: RawLedger) -> Result<LedgerSettings, ConfigError> {
    let checkpoint_interval_secs = bounded(
        "ledger.checkpoint_interval_secs",
        raw.checkpoint_interval_secs,
        1,
        1,
        86_400,
    )?;
    Ok(LedgerSettings {
        checkpoint_interval: Duration::from_secs(checkpoint_interval_secs),
    })
}
