//! `[history]`: how long the event log's raw bodies stay in the database, and where months
//! past that go (docs/history.md).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, bounded};

/// The longest dispute window a provider documents (Visa's 120 days): a body younger than this
/// may still be asked for as evidence, so no month is archived sooner.
pub const MIN_KEEP_DAYS: u64 = 120;

/// Retention of `callback_deliveries`.
#[derive(Debug, Clone)]
pub struct HistorySettings {
    /// A month whose last instant is older than this is archived, then dropped.
    pub keep_days: u64,
    /// Where archives go. Without it nothing is archived or dropped: the log only grows.
    pub archive_dir: Option<PathBuf>,
    /// How often `serve` adds partitions ahead and archives what is due.
    pub interval: Duration,
    /// Monthly partitions kept made ahead of the current month.
    pub months_ahead: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHistory {
    keep_days: Option<u64>,
    archive_dir: Option<PathBuf>,
    interval_secs: Option<u64>,
    months_ahead: Option<u64>,
}

pub(super) fn validate(raw: RawHistory) -> Result<HistorySettings, ConfigError> {
    let keep_days = bounded(
        "history.keep_days",
        raw.keep_days,
        400,
        MIN_KEEP_DAYS,
        36_500,
    )?;
    let interval_secs = bounded("history.interval_secs", raw.interval_secs, 3600, 1, 86_400)?;
    let months_ahead = bounded("history.months_ahead", raw.months_ahead, 3, 1, 24)?;
    if let Some(dir) = &raw.archive_dir
        && dir.as_os_str().is_empty()
    {
        return Err(ConfigError(
            "history.archive_dir is empty (leave it out to keep every month)".into(),
        ));
    }
    Ok(HistorySettings {
        keep_days,
        archive_dir: raw.archive_dir,
        interval: Duration::from_secs(interval_secs),
        months_ahead: months_ahead as u32,
    })
}
