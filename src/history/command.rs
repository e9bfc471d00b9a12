//! `callback-gateway history list | archive | verify FILE`.

use std::io::Write;

use crate::access;
use crate::command::CommandError;
use crate::config::Settings;
use crate::db;

use super::{archive, partitions, pass};

#[derive(Debug, clap::Subcommand)]
pub enum HistoryCommand {
    /// Partitions (bounds, estimated rows, bytes) and the archives in `[history] archive_dir`.
    List,
    /// One pass now, as `serve` runs it: partitions made ahead, months past keep_days archived,
    /// verified and dropped; prints what it archived and dropped.
    Archive,
    /// Read an archive back against its manifest; exit 0 if whole, 1 if not.
    Verify {
        /// The archive (`callback_deliveries_yYYYYmMM.jsonl.gz`).
        file: std::path::PathBuf,
    },
}

pub async fn run(settings: &Settings, command: HistoryCommand) -> Result<(), CommandError> {
    match command {
        HistoryCommand::Verify { file } => {
            let manifest = archive::verify(&file).map_err(|e| CommandError::Runtime(e.into()))?;
            println!(
                "{}: whole: {} event(s) of {}, sha256 {}",
                file.display(),
                manifest.rows,
                manifest.partition,
                manifest.sha256
            );
            Ok(())
        }
        HistoryCommand::List => list(settings).await,
        HistoryCommand::Archive => {
            // The lock of serve's own pass: two passes at once would detach and drop under
            // each other. As the schema's owner (migrate_url): the pass changes partitions.
            let mut conn = db::connect_waiting_for_lock(
                settings.migrate_database_url()?,
                pass::HISTORY_LOCK_KEY,
            )
            .await?;
            let report = pass::run(&mut conn, &settings.history, &access::command_line())
                .await
                .map_err(|e| CommandError::Runtime(e.into()))?;
            let mut out = std::io::stdout().lock();
            for name in &report.added {
                let _ = writeln!(out, "added {name}");
            }
            for month in &report.dropped {
                let manifest = &month.manifest;
                let _ = writeln!(
                    out,
                    "archived {} ({} rows, {} bytes, sha256 {}) and dropped it (archive and read-back {} ms, detach and drop {} ms)",
                    manifest.file,
                    manifest.rows,
                    manifest.bytes,
                    manifest.sha256,
                    month.archive.as_millis(),
                    month.detach_and_drop.as_millis()
                );
            }
            if report.retention_off {
                let _ = writeln!(
                    out,
                    "retention is off ([history] archive_dir is not set): nothing archived or dropped"
                );
            } else if report.dropped.is_empty() {
                let _ = writeln!(
                    out,
                    "nothing past keep_days ({} days)",
                    settings.history.keep_days
                );
            }
            Ok(())
        }
    }
}

async fn list(settings: &Settings) -> Result<(), CommandError> {
    let mut conn = db::connect(settings.read_database_url()?).await?;
    let all = partitions::list(&mut conn)
        .await
        .map_err(|e| CommandError::Runtime(e.into()))?;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{:<30} {:<25} {:<25} {:>12} {:>14}  state",
        "partition", "from", "to", "rows (est.)", "bytes"
    );
    let instant = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
            .unwrap_or_else(|| "-".into())
    };
    for p in &all {
        let state = match (p.attached, p.detach_pending) {
            (true, false) => "attached",
            (true, true) => "detach pending",
            (false, _) => "detached, not dropped",
        };
        let _ = writeln!(
            out,
            "{:<30} {:<25} {:<25} {:>12} {:>14}  {state}",
            p.name,
            instant(p.from),
            instant(p.to),
            p.rows_estimate,
            p.bytes
        );
    }
    let Some(dir) = &settings.history.archive_dir else {
        let _ = writeln!(out, "\narchives: none ([history] archive_dir is not set)");
        return Ok(());
    };
    let _ = writeln!(out, "\narchives in {}:", dir.display());
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(".manifest.json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for path in names {
        match std::fs::read(&path)
            .ok()
            .and_then(|text| serde_json::from_slice::<archive::Manifest>(&text).ok())
        {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "{:<40} {:>12} rows {:>14} bytes  sha256 {}",
                    m.file, m.rows, m.bytes, m.sha256
                );
            }
            None => {
                let _ = writeln!(out, "{}: unreadable manifest", path.display());
            }
        }
    }
    Ok(())
}
