//! One pass of retention, as `serve` runs it every `[history] interval_secs` and
//! `history archive` runs it once: partitions made ahead, then each month past `keep_days`
//! archived, read back, detached and dropped. Every step can be cut short by a crash and the
//! next pass takes the month up where it stands: a detached table or an interrupted detach is
//! finished, this database's manifest whose archive never landed is written again, and nothing
//! is dropped without an archive read back against the table's own count and against the
//! digest of the rows the database computes just before the drop. An archive already there
//! that is another database's, another partition's, or does not hold this month's rows is
//! never overwritten: the month stays and the pass fails, for a person to look.

use std::path::Path;
use std::time::{Duration, Instant};

use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;

use super::archive::{self, ArchiveError, DatabaseIdentity, Manifest, PartitionName};
use super::idle_cpu;
use super::partitions::{self, Partition};
use crate::access::audit::{self, Action, Entry};
use crate::config::HistorySettings;

/// Fault injection for the crash tests (docs/history.md): the process aborts right after the
/// named step (`written`, `verified` or `detached`) of the first month it archives.
pub const CRASH_AFTER_ENV: &str = "CALLBACK_GATEWAY_HISTORY_CRASH_AFTER";

/// Arbitrary but fixed: the advisory lock that elects one gateway to run retention.
pub const HISTORY_LOCK_KEY: i64 = 0x6367_775f_6873_7479; // "cgw_hsty"

/// What one pass did.
#[derive(Debug, Default)]
pub struct PassReport {
    /// Partitions made ahead.
    pub added: Vec<String>,
    /// Months archived and dropped, with their manifests.
    pub dropped: Vec<Dropped>,
    /// Why nothing is archived: retention is off.
    pub retention_off: bool,
}

/// One month archived and dropped, and how long each part took.
#[derive(Debug)]
pub struct Dropped {
    pub manifest: Manifest,
    /// Counting the table's rows, writing the archive (unless a whole one was there) and
    /// reading it back.
    pub archive: Duration,
    /// Detaching and dropping: what replaces a row-by-row delete.
    pub detach_and_drop: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error("database: {0}")]
    Database(#[from] diesel::result::Error),
    /// The month stays in the database.
    #[error("{partition} not archived, kept in the database: {source}")]
    Archive {
        partition: String,
        source: ArchiveError,
    },
    #[error("{partition} kept: its archive holds {archived} row(s), the table {table}")]
    Mismatch {
        partition: String,
        archived: u64,
        table: i64,
    },
    #[error(
        "{partition} kept: the database's digest of its rows is {database}, its archive's manifest says {archived}"
    )]
    DigestMismatch {
        partition: String,
        database: String,
        archived: String,
    },
}

/// One pass on `conn`; each month dropped writes an audit row naming `actor`.
pub async fn run(
    conn: &mut AsyncPgConnection,
    settings: &HistorySettings,
    actor: &audit::Context,
) -> Result<PassReport, PassError> {
    let mut report = PassReport {
        added: partitions::add_ahead(conn, settings.months_ahead).await?,
        ..Default::default()
    };
    let Some(dir) = &settings.archive_dir else {
        report.retention_off = true;
        return Ok(report);
    };
    let all = partitions::list(conn).await?;
    let database = archive::identity(conn).await?;
    let now = chrono::Utc::now();
    // Leftovers of a cut pass first, then what is due, oldest first.
    let mut work: Vec<&Partition> = all
        .iter()
        .filter(|p| !p.attached || p.detach_pending)
        .collect();
    work.extend(
        partitions::due(&all, now, settings.keep_days)
            .into_iter()
            .filter(|p| !p.detach_pending),
    );
    let crash_after = std::env::var(CRASH_AFTER_ENV).ok();
    for partition in work {
        // The name is checked before any path is built from it.
        let name = PartitionName::parse(&partition.name).map_err(|source| PassError::Archive {
            partition: partition.name.clone(),
            source,
        })?;
        let started = Instant::now();
        let manifest = archive_one(conn, dir, partition, &database, crash_after.as_deref()).await?;
        let archive = started.elapsed();
        let started = Instant::now();
        if partition.attached {
            partitions::detach(conn, partition).await?;
            crash_point(crash_after.as_deref(), "detached", &partition.name);
        }
        // The DETACH .. CONCURRENTLY above cannot run in a transaction, but the DROP can: the
        // audit row commits with it, so no month is gone without its row. A pass cut between
        // the two leaves a detached table, which the next pass drops, writing the row then.
        // Inside it, with the table locked, the database's own digest of the rows must be the
        // one the archive holds.
        let entry = dropped_entry(partition, &manifest);
        let expected = manifest.rows_digest.clone().unwrap_or_default();
        let dropped = conn
            .transaction(async |conn| {
                partitions::lock(conn, &partition.name).await?;
                let digest = archive::database_digest(conn, &name).await?;
                if digest != expected {
                    return Ok(Err(digest));
                }
                partitions::drop_detached(conn, &partition.name).await?;
                audit::record(conn, actor, entry).await?;
                Ok::<_, diesel::result::Error>(Ok(()))
            })
            .await?;
        if let Err(digest) = dropped {
            // Back into the log while a person looks: the month's reads go on as before.
            if let Err(error) = partitions::attach(conn, partition).await {
                tracing::error!(partition = %partition.name, %error, "history: the month stays detached, not dropped");
            }
            return Err(PassError::DigestMismatch {
                partition: partition.name.clone(),
                database: digest,
                archived: expected,
            });
        }
        let detach_and_drop = started.elapsed();
        tracing::info!(
            partition = %partition.name,
            rows = manifest.rows,
            file = %manifest.file,
            archive_ms = archive.as_millis() as u64,
            detach_and_drop_ms = detach_and_drop.as_millis() as u64,
            "history: month archived and dropped"
        );
        report.dropped.push(Dropped {
            manifest,
            archive,
            detach_and_drop,
        });
    }
    Ok(report)
}

/// The audit row of a dropped month: where its rows went, and how to check them.
fn dropped_entry(partition: &Partition, manifest: &Manifest) -> Entry {
    Entry::new(
        Action::HistoryDropPartition,
        Some(format!("partition:{}", partition.name)),
        "dropped",
    )
    .with_changes(json!({
        "partition": partition.name,
        "from": manifest.from,
        "to": manifest.to,
        "file": manifest.file,
        "sha256": manifest.sha256,
        "rows": manifest.rows,
        "bytes": manifest.bytes,
    }))
}

/// The verified archive of `partition`: the one on disk, if it is this database's and this
/// partition's, reads back whole and counts the table's rows; a new one, read back, if none is
/// there (or only this database's manifest, whose archive never landed). Anything else is
/// refused and left as it is.
async fn archive_one(
    conn: &mut AsyncPgConnection,
    dir: &Path,
    partition: &Partition,
    database: &DatabaseIdentity,
    crash_after: Option<&str>,
) -> Result<Manifest, PassError> {
    let failed = |source| PassError::Archive {
        partition: partition.name.clone(),
        source,
    };
    let name = PartitionName::parse(&partition.name).map_err(failed)?;
    let rows = partitions::count_rows(conn, &partition.name).await?;
    let data = archive::data_path(dir, &name);
    let manifest_file = archive::manifest_path(&data);
    let not_ours = |path: &Path, why: String| {
        failed(ArchiveError::NotOurs {
            path: path.display().to_string(),
            why,
        })
    };
    let verify = |data: std::path::PathBuf| async move {
        idle_cpu::run(move || archive::verify(&data))
            .await
            .map_err(|source| ArchiveError::Write {
                path: String::new(),
                source,
            })?
            .map_err(ArchiveError::from)
    };
    let write = async |conn: &mut AsyncPgConnection, replace_manifest: bool| {
        archive::write(conn, dir, partition, database, replace_manifest)
            .await
            .map_err(failed)?;
        crash_point(crash_after, "written", &partition.name);
        verify(data.clone()).await.map_err(failed)
    };
    let manifest = if !archive::occupied(&manifest_file) {
        if archive::occupied(&data) {
            return Err(not_ours(
                &data,
                "an archive without its manifest (this gateway writes the manifest first)".into(),
            ));
        }
        write(conn, false).await?
    } else {
        let found = archive::read_manifest(&manifest_file)
            .map_err(|e| not_ours(&manifest_file, e.to_string()))?;
        match &found.database {
            Some(theirs) if theirs == database => {}
            Some(theirs) => {
                return Err(not_ours(
                    &manifest_file,
                    format!("an archive of another database, {theirs}, not {database}"),
                ));
            }
            None => {
                return Err(not_ours(
                    &manifest_file,
                    "an archive that does not name its database".into(),
                ));
            }
        }
        let bounds_differ =
            partition.attached && (found.from, found.to) != (partition.from, partition.to);
        if found.partition != partition.name || bounds_differ {
            return Err(not_ours(
                &manifest_file,
                format!(
                    "an archive of another partition ({} from {:?} to {:?})",
                    found.partition, found.from, found.to
                ),
            ));
        }
        if archive::occupied(&data) {
            verify(data.clone()).await.map_err(failed)?
        } else {
            // This database's manifest, its archive never put in place: a pass cut between
            // the two. Nothing of anyone's is lost by writing both again.
            write(conn, true).await?
        }
    };
    if manifest.rows != rows as u64 {
        return Err(PassError::Mismatch {
            partition: partition.name.clone(),
            archived: manifest.rows,
            table: rows,
        });
    }
    crash_point(crash_after, "verified", &partition.name);
    Ok(manifest)
}

fn crash_point(crash_after: Option<&str>, step: &str, partition: &str) {
    if crash_after == Some(step) {
        eprintln!("history: {CRASH_AFTER_ENV}={step}: aborting after {step} of {partition}");
        std::process::abort();
    }
}

/// The pass inside `serve`: at start (so the month ahead exists before traffic needs it),
/// then every interval, by whichever gateway holds the lock.
pub async fn run_periodically(
    database_url: String,
    settings: HistorySettings,
    metrics: crate::metrics::Metrics,
) {
    let mut ticker = tokio::time::interval(settings.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let mut conn = match crate::db::connect_holding_lock(&database_url, HISTORY_LOCK_KEY).await
        {
            Ok(Some(conn)) => conn,
            Ok(None) => {
                tracing::debug!("another gateway holds the history lock");
                continue;
            }
            Err(error) => {
                tracing::warn!(error = %error, "history pass could not connect; will retry");
                continue;
            }
        };
        match run(&mut conn, &settings, &audit::Context::system("history")).await {
            Ok(report) => {
                metrics.record_history_pass(
                    report.dropped.len() as u64,
                    report.dropped.iter().map(|m| m.manifest.rows).sum(),
                );
                if !report.added.is_empty() {
                    tracing::info!(added = ?report.added, "history: partitions made ahead");
                }
            }
            Err(error) => {
                metrics.record_history_failure();
                tracing::error!(error = %error, "history pass failed; the months stay in the database");
            }
        }
    }
}
