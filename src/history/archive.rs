//! One archived partition on disk: `{partition}.jsonl.gz`, the export format's lines
//! (`provider`, `id`, `body`, which `replay` reads as they are) with the row's other columns,
//! oldest first, ending in the export trailer; and `{partition}.manifest.json` with the
//! partition's name and bounds, the database it came from (`system_identifier` and name), the
//! row count, the SHA-256 of the compressed file and a digest of the rows as they were read
//! ([`RowsDigest`], which the database computes the same way). A month is dropped only after
//! its file has been read back against its manifest, the table's own count and the database's
//! digest of its rows.
//!
//! Files are created `0600`, never through a symbolic link (a new file each time, `O_EXCL` and
//! `O_NOFOLLOW`), and put in place without replacing anything: an archive already there is
//! never overwritten. A partition's name is checked ([`PartitionName`]) before any path is
//! built from it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bytea, Int4, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::idle_cpu;
use super::partitions::{Partition, quoted};
use crate::db::one_row::CommittedResult;
use crate::export::Trailer;
use crate::lines::{BoundedLines, LineError};

/// Rows read from the database at a time: memory stays bounded whatever the month holds.
const BATCH_ROWS: i64 = 2_000;

/// What the manifest says of its archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub partition: String,
    /// The partition's bounds (none below for the legacy table).
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub rows: u64,
    /// The archive file's name, beside the manifest.
    pub file: String,
    pub bytes: u64,
    /// Hex SHA-256 of the compressed file as it lies on disk (`sha256sum` gives the same).
    pub sha256: String,
    pub archived_at: DateTime<Utc>,
    /// The database the rows came from. Absent in archives written before it was recorded:
    /// such an archive is never taken for this database's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseIdentity>,
    /// Hex [`RowsDigest`] of the rows as they were read (empty for a month without rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows_digest: Option<String>,
}

/// Which database an archive's rows came from: the cluster's `system_identifier` (fixed at
/// `initdb`, kept by physical replicas and restores of a base backup) and the database's name
/// in it. Two deployments sharing a folder never take each other's archives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseIdentity {
    pub system_identifier: String,
    pub name: String,
}

impl std::fmt::Display for DatabaseIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (system {})", self.name, self.system_identifier)
    }
}

/// The identity of the database `conn` is connected to.
pub async fn identity(conn: &mut AsyncPgConnection) -> diesel::QueryResult<DatabaseIdentity> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        system_identifier: String,
        #[diesel(sql_type = Text)]
        name: String,
    }
    let row: Row = diesel::sql_query(
        "SELECT system_identifier::text AS system_identifier, current_database()::text AS name \
         FROM pg_control_system()",
    )
    .committed_result(conn)
    .await?;
    Ok(DatabaseIdentity {
        system_identifier: row.system_identifier,
        name: row.name,
    })
}

/// A partition's name as it may reach a file path: `callback_deliveries_legacy` or
/// `callback_deliveries_yYYYYmMM`. A table attached under any other name (quoted identifiers
/// may hold `/` and `..`) is refused before a path is built from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionName<'a>(&'a str);

impl<'a> PartitionName<'a> {
    pub fn parse(name: &'a str) -> Result<Self, ArchiveError> {
        let month = name
            .strip_prefix("callback_deliveries_y")
            .and_then(|rest| rest.split_once('m'))
            .is_some_and(|(year, month)| {
                year.len() == 4
                    && year.bytes().all(|b| b.is_ascii_digit())
                    && month.len() == 2
                    && month.parse::<u8>().is_ok_and(|m| (1..=12).contains(&m))
            });
        if month || name == "callback_deliveries_legacy" {
            Ok(Self(name))
        } else {
            Err(ArchiveError::NotAPartitionName(name.to_owned()))
        }
    }

    pub fn as_str(&self) -> &'a str {
        self.0
    }
}

/// The digest of a month's rows, in id order: a chain `state = sha256(state || row digest)`
/// from the empty string, each row's digest over its fields in the binary form of migration
/// 000062's `callback_deliveries_row_digest`, which the database uses for its own digest of
/// the month (`callback_deliveries_digest`).
#[derive(Default)]
pub struct RowsDigest {
    state: Vec<u8>,
}

impl RowsDigest {
    fn field(hasher: &mut Sha256, bytes: Option<&[u8]>) {
        match bytes {
            Some(bytes) => {
                hasher.update((bytes.len() as i32).to_be_bytes());
                hasher.update(bytes);
            }
            None => hasher.update((-1i32).to_be_bytes()),
        }
    }

    /// One more row, as an archive line holds it (its body's bytes, decoded if base64).
    pub fn push(&mut self, line: &ArchiveLine, body: &[u8]) {
        let mut row = Sha256::new();
        row.update(line.delivery_id.to_be_bytes());
        row.update(line.merchant_id.to_be_bytes());
        Self::field(&mut row, Some(line.provider.as_bytes()));
        Self::field(&mut row, Some(line.id.as_bytes()));
        Self::field(&mut row, Some(body));
        row.update(line.received_at.timestamp_micros().to_be_bytes());
        Self::field(&mut row, line.event_type.as_deref().map(str::as_bytes));
        Self::field(&mut row, line.outcome.as_deref().map(str::as_bytes));
        Self::field(&mut row, line.reason.as_deref().map(str::as_bytes));
        match line.ack_status {
            Some(status) => {
                row.update([1u8]);
                row.update(status.to_be_bytes());
            }
            None => row.update([0u8]),
        }
        match line.transfer_id {
            Some(id) => {
                row.update([1u8]);
                row.update(id.to_be_bytes());
            }
            None => row.update([0u8]),
        }
        Self::field(&mut row, line.trace_id.as_deref().map(str::as_bytes));
        let mut chain = Sha256::new();
        chain.update(&self.state);
        chain.update(row.finalize());
        self.state = chain.finalize().to_vec();
    }

    pub fn hex(&self) -> String {
        hex::encode(&self.state)
    }
}

/// The database's own digest of `table`'s rows ([`RowsDigest`]), read in id order.
pub async fn database_digest(
    conn: &mut AsyncPgConnection,
    table: &PartitionName<'_>,
) -> diesel::QueryResult<String> {
    #[derive(QueryableByName)]
    struct Digest {
        #[diesel(sql_type = Bytea)]
        digest: Vec<u8>,
    }
    let digest: Digest = diesel::sql_query(format!(
        "SELECT callback_deliveries_digest(callback_deliveries_row_digest(id, merchant_id, \
                provider, event_id, body, received_at, event_type, outcome, reason, ack_status, \
                transfer_id, trace_id) ORDER BY id) AS digest FROM {}",
        quoted(table.as_str())
    ))
    .committed_result(conn)
    .await?;
    Ok(hex::encode(digest.digest))
}

/// One line of an archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveLine {
    pub provider: String,
    pub id: String,
    /// The raw verified body when it is UTF-8 (as `export` writes it) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// ... else its bytes in base64, so no body is ever left out of an archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    pub merchant_id: i64,
    pub received_at: DateTime<Utc>,
    pub event_type: Option<String>,
    pub outcome: Option<String>,
    pub reason: Option<String>,
    pub ack_status: Option<i32>,
    pub transfer_id: Option<i64>,
    pub trace_id: Option<String>,
    /// The row's id in the log, for the order of rows received in the same microsecond.
    pub delivery_id: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0:?} is not a partition name of the event log: no path is built from it")]
    NotAPartitionName(String),
    /// An archive of this partition's name is there and is not this database's (or not this
    /// partition's): it is left as it is, and the month stays in the database.
    #[error(
        "{path}: {why}; it is left untouched and the month stays in the database (move it aside, or give this database an archive_dir of its own)"
    )]
    NotOurs { path: String, why: String },
    #[error("archive directory {dir}: {source}")]
    Directory { dir: String, source: std::io::Error },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("reading {table}: {source}")]
    Database {
        table: String,
        source: diesel::result::Error,
    },
    #[error("{0}")]
    Verify(#[from] VerifyError),
}

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {path}: {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: the manifest is not readable JSON: {detail}")]
    Manifest { path: String, detail: String },
    #[error("{path}: SHA-256 is {actual}, the manifest says {expected}")]
    Digest {
        path: String,
        actual: String,
        expected: String,
    },
    #[error("{path}: line {line} is not an archived event: {detail}")]
    Line {
        path: String,
        line: usize,
        detail: String,
    },
    /// A line past the bound of any line the gateway writes (a damaged file, or a gzip bomb).
    #[error("{path}: {source}")]
    LineTooLong { path: String, source: LineError },
    #[error("{path}: holds {actual} event(s), {what} says {expected}")]
    Count {
        path: String,
        actual: u64,
        expected: u64,
        what: &'static str,
    },
    #[error("{path}: no trailer line: the file is cut")]
    NoTrailer { path: String },
    #[error(
        "{path}: its rows' digest is {actual}, the manifest says {expected}: the file holds other rows than its manifest describes"
    )]
    RowsDigest {
        path: String,
        actual: String,
        expected: String,
    },
}

/// `{dir}/{partition}.jsonl.gz`
pub fn data_path(dir: &Path, partition: &PartitionName<'_>) -> PathBuf {
    dir.join(format!("{}.jsonl.gz", partition.as_str()))
}

/// A new file at `path`, `0600`: never an existing one, never through a symbolic link (a
/// leftover of a cut write at `path` is removed first; removing a link removes the link).
fn create_new(path: &Path) -> std::io::Result<File> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// `path` opened for reading, not through a symbolic link.
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Whether anything (a file, a link, a directory) lies at `path`.
pub fn occupied(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Puts `partial` in place at `path` without replacing anything there (`link` refuses an
/// existing name), then removes the temporary name.
fn put_in_place(partial: &Path, path: &Path) -> std::io::Result<()> {
    std::fs::hard_link(partial, path)?;
    std::fs::remove_file(partial)
}

/// The manifest at `path`, read without following a link.
pub fn read_manifest(path: &Path) -> Result<Manifest, VerifyError> {
    let mut text = Vec::new();
    open_no_follow(path)
        .and_then(|mut f| f.read_to_end(&mut text))
        .map_err(|source| VerifyError::Unreadable {
            path: path.display().to_string(),
            source,
        })?;
    serde_json::from_slice(&text).map_err(|e| VerifyError::Manifest {
        path: path.display().to_string(),
        detail: e.to_string(),
    })
}

/// The manifest beside an archive file: `X.jsonl.gz` -> `X.manifest.json`.
pub fn manifest_path(data: &Path) -> PathBuf {
    let name = data
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".jsonl.gz").unwrap_or(&name);
    data.with_file_name(format!("{stem}.manifest.json"))
}

#[derive(QueryableByName)]
struct Row {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = BigInt)]
    merchant_id: i64,
    #[diesel(sql_type = Text)]
    provider: String,
    #[diesel(sql_type = Text)]
    event_id: String,
    #[diesel(sql_type = Bytea)]
    body: Vec<u8>,
    #[diesel(sql_type = Timestamptz)]
    received_at: DateTime<Utc>,
    #[diesel(sql_type = Nullable<Text>)]
    event_type: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    outcome: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    reason: Option<String>,
    #[diesel(sql_type = Nullable<Int4>)]
    ack_status: Option<i32>,
    #[diesel(sql_type = Nullable<BigInt>)]
    transfer_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    trace_id: Option<String>,
}

impl From<Row> for ArchiveLine {
    fn from(row: Row) -> Self {
        let (body, body_base64) = match String::from_utf8(row.body) {
            Ok(text) => (Some(text), None),
            Err(e) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes())),
            ),
        };
        ArchiveLine {
            provider: row.provider,
            id: row.event_id,
            body,
            body_base64,
            merchant_id: row.merchant_id,
            received_at: row.received_at,
            event_type: row.event_type,
            outcome: row.outcome,
            reason: row.reason,
            ack_status: row.ack_status,
            transfer_id: row.transfer_id,
            trace_id: row.trace_id,
            delivery_id: row.id,
        }
    }
}

/// A writer that hashes and counts what passes through it (the compressed bytes).
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

type Encoder = GzEncoder<Hashing<BufWriter<File>>>;

/// Writes `partition`'s rows to its archive and manifest in `dir`, each file written under a
/// temporary name (a new `0600` file, never through a link), synced, then put in place without
/// replacing anything: the manifest first, then the archive, so a crash leaves either nothing,
/// or this database's manifest without its archive (which the next pass writes again), or both
/// whole. `replace_manifest`: a manifest of this database's for this partition is there
/// without its archive (a pass cut between the two), and is replaced. Returns the manifest.
pub async fn write(
    conn: &mut AsyncPgConnection,
    dir: &Path,
    partition: &Partition,
    database: &DatabaseIdentity,
    replace_manifest: bool,
) -> Result<Manifest, ArchiveError> {
    let name = PartitionName::parse(&partition.name)?;
    let directory = |source| ArchiveError::Directory {
        dir: dir.display().to_string(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(directory)?;
    let data = data_path(dir, &name);
    let partial = data.with_extension("gz.partial");
    let write_error = |source| ArchiveError::Write {
        path: partial.display().to_string(),
        source,
    };
    let file = create_new(&partial).map_err(write_error)?;
    let mut encoder: Encoder = GzEncoder::new(
        Hashing {
            inner: BufWriter::new(file),
            hasher: Sha256::new(),
            bytes: 0,
        },
        // Level 6: an archive is kept for years. At 200,000 events level 1 wrote in half the
        // time (15 s against 31 s) a file 1.8 times larger (998 B an event against 544).
        Compression::default(),
    );
    // Walked by the partition's primary key: the simplest cursor, one column. Ids follow the
    // order of receipt (one sequence), so the archive still reads oldest first. (A walk on
    // (received_at, id) measured the same: the archive's time is the compressor's.)
    let sql = format!(
        "SELECT id, merchant_id, provider, event_id, body, received_at, event_type, outcome, \
                reason, ack_status, transfer_id, trace_id \
         FROM {} WHERE id > $1 ORDER BY id LIMIT {BATCH_ROWS}",
        quoted(&partition.name)
    );
    let mut after = i64::MIN;
    let mut rows = 0u64;
    let mut digest = RowsDigest::default();
    loop {
        let batch: Vec<Row> = diesel::sql_query(&sql)
            .bind::<BigInt, _>(after)
            .load(conn)
            .await
            .map_err(|source| ArchiveError::Database {
                table: partition.name.clone(),
                source,
            })?;
        let Some(last) = batch.last() else { break };
        after = last.id;
        rows += batch.len() as u64;
        let full = batch.len() as i64 == BATCH_ROWS;
        // Compression and file writes off the async workers, on idle CPU.
        (encoder, digest) = idle_cpu::run(move || -> std::io::Result<(Encoder, RowsDigest)> {
            // Each line whole into a buffer, then one write: serde's many small writes straight
            // into the compressor ran at 8 MB/s.
            let mut line = Vec::with_capacity(8 * 1024);
            let mut digest = digest;
            for row in batch {
                line.clear();
                let body = row.body.clone();
                let archived = ArchiveLine::from(row);
                digest.push(&archived, &body);
                serde_json::to_writer(&mut line, &archived)?;
                line.push(b'\n');
                encoder.write_all(&line)?;
            }
            Ok((encoder, digest))
        })
        .await
        .map_err(write_error)?
        .map_err(write_error)?;
        if !full {
            break;
        }
    }
    let trailer = Trailer {
        events: rows,
        skipped_non_utf8: 0,
    };
    let (sha256, bytes) = idle_cpu::run(move || -> std::io::Result<(String, u64)> {
        encoder.write_all(&trailer.to_line())?;
        let mut hashing = encoder.finish()?;
        hashing.flush()?;
        let file = hashing.inner.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok((hex::encode(hashing.hasher.finalize()), hashing.bytes))
    })
    .await
    .map_err(write_error)?
    .map_err(write_error)?;
    let manifest = Manifest {
        partition: partition.name.clone(),
        from: partition.from,
        to: partition.to,
        rows,
        file: data
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        bytes,
        sha256,
        archived_at: Utc::now(),
        database: Some(database.clone()),
        rows_digest: Some(digest.hex()),
    };
    let manifest_file = manifest_path(&data);
    let manifest_partial = manifest_file.with_extension("json.partial");
    let manifest_error = |source| ArchiveError::Write {
        path: manifest_partial.display().to_string(),
        source,
    };
    let mut text = serde_json::to_vec_pretty(&manifest).map_err(|e| manifest_error(e.into()))?;
    text.push(b'\n');
    let mut file = create_new(&manifest_partial).map_err(manifest_error)?;
    file.write_all(&text).map_err(manifest_error)?;
    file.sync_all().map_err(manifest_error)?;
    let in_place = |source| ArchiveError::Write {
        path: manifest_file.display().to_string(),
        source,
    };
    if replace_manifest {
        // This database's own manifest, whose archive never landed: renaming over it replaces
        // the name (a link there is replaced, never followed).
        std::fs::rename(&manifest_partial, &manifest_file).map_err(in_place)?;
    } else {
        put_in_place(&manifest_partial, &manifest_file).map_err(in_place)?;
    }
    put_in_place(&partial, &data).map_err(|source| ArchiveError::Write {
        path: data.display().to_string(),
        source,
    })?;
    // The new names are durable once the directory is.
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(directory)?;
    Ok(manifest)
}

/// A reader that hashes what passes through it (the compressed bytes, on their way to the
/// decompressor): the archive is read once, for its digest and its lines together.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Reads an archive back against its manifest: the file's SHA-256, every line an archived
/// event, and the trailer's and the manifest's counts equal to the lines read. Returns the
/// manifest.
pub fn verify(data: &Path) -> Result<Manifest, VerifyError> {
    let shown = data.display().to_string();
    let manifest = read_manifest(&manifest_path(data))?;
    let unreadable = |source| VerifyError::Unreadable {
        path: shown.clone(),
        source,
    };
    let file = open_no_follow(data).map_err(unreadable)?;
    let mut lines = BoundedLines::new(BufReader::new(MultiGzDecoder::new(HashingReader {
        inner: file,
        hasher: Sha256::new(),
    })));
    let read = read_events(&mut lines, &shown);
    // The digest covers the whole file: what the lines left unread (after an error, or bytes
    // past the last gzip member) is hashed too. A file that differs from the one written is
    // reported as such before whatever its lines say, as when the digest was read first.
    let mut hashing = lines.into_inner().into_inner().into_inner();
    std::io::copy(&mut hashing, &mut std::io::sink()).map_err(unreadable)?;
    let actual = hex::encode(hashing.hasher.finalize());
    if actual != manifest.sha256 {
        return Err(VerifyError::Digest {
            path: shown,
            actual,
            expected: manifest.sha256,
        });
    }
    let (events, trailer, digest) = read?;
    let trailer = trailer.ok_or_else(|| VerifyError::NoTrailer {
        path: shown.clone(),
    })?;
    if let Some(expected) = &manifest.rows_digest
        && digest.hex() != *expected
    {
        return Err(VerifyError::RowsDigest {
            path: shown,
            actual: digest.hex(),
            expected: expected.clone(),
        });
    }
    for (expected, what) in [
        (trailer.events, "its trailer"),
        (manifest.rows, "its manifest"),
    ] {
        if expected != events {
            return Err(VerifyError::Count {
                path: shown,
                actual: events,
                expected,
                what,
            });
        }
    }
    Ok(manifest)
}

/// The archived events of `lines` (checked one by one, never held), its trailer, if any, and
/// the digest of the rows they hold.
fn read_events(
    lines: &mut BoundedLines<impl BufRead>,
    shown: &str,
) -> Result<(u64, Option<Trailer>, RowsDigest), VerifyError> {
    let mut events = 0u64;
    let mut trailer = None;
    let mut digest = RowsDigest::default();
    loop {
        let (number, line) = match lines.next_line() {
            Ok(Some(line)) => line,
            Ok(None) => return Ok((events, trailer, digest)),
            Err(LineError::Read(source)) => {
                return Err(VerifyError::Unreadable {
                    path: shown.to_owned(),
                    source,
                });
            }
            Err(source @ LineError::TooLong { .. }) => {
                return Err(VerifyError::LineTooLong {
                    path: shown.to_owned(),
                    source,
                });
            }
        };
        let bad_line = |detail: String| VerifyError::Line {
            path: shown.to_owned(),
            line: number,
            detail,
        };
        if trailer.is_some() {
            return Err(bad_line("a line after the trailer".into()));
        }
        if let Some(found) = Trailer::parse(line) {
            trailer = Some(found);
            continue;
        }
        let event: ArchiveLine = serde_json::from_str(line).map_err(|e| bad_line(e.to_string()))?;
        let body = match (&event.body, &event.body_base64) {
            (Some(text), None) => text.as_bytes().to_vec(),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| bad_line(format!("body_base64: {e}")))?,
            _ => return Err(bad_line("neither body nor body_base64 (or both)".into())),
        };
        digest.push(&event, &body);
        events += 1;
    }
}

/// Opens a file that may be gzip-compressed (an archive) or plain (an export), by its first
/// bytes, for `replay` and the readers of archives.
pub fn open_maybe_gzip(path: &Path) -> std::io::Result<Box<dyn BufRead + Send>> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 2];
    let gzip = file.read(&mut magic)? == 2 && magic == [0x1f, 0x8b];
    let file = File::open(path)?;
    Ok(if gzip {
        Box::new(BufReader::new(MultiGzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A whole archive of one event, and its manifest.
    fn archive_of_one_event() -> (Vec<u8>, Manifest) {
        let line = ArchiveLine {
            provider: "acme".into(),
            id: "evt_1".into(),
            body: Some(r#"{"id":"evt_1"}"#.into()),
            body_base64: None,
            merchant_id: 42,
            received_at: Utc::now(),
            event_type: None,
            outcome: Some("applied".into()),
            reason: None,
            ack_status: Some(200),
            transfer_id: None,
            trace_id: None,
            delivery_id: 1,
        };
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        let mut text = serde_json::to_vec(&line).unwrap();
        text.push(b'\n');
        encoder.write_all(&text).unwrap();
        let trailer = Trailer {
            events: 1,
            skipped_non_utf8: 0,
        };
        encoder.write_all(&trailer.to_line()).unwrap();
        let bytes = encoder.finish().unwrap();
        let manifest = Manifest {
            partition: "callback_deliveries_y2025m01".into(),
            from: None,
            to: None,
            rows: 1,
            file: "callback_deliveries_y2025m01.jsonl.gz".into(),
            bytes: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(&bytes)),
            archived_at: Utc::now(),
            database: None,
            rows_digest: None,
        };
        (bytes, manifest)
    }

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("cg-archive-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_manifest(data: &Path, manifest: &Manifest) {
        std::fs::write(manifest_path(data), serde_json::to_vec(manifest).unwrap()).unwrap();
    }

    #[test]
    fn an_archive_is_verified_in_one_read_of_its_file() {
        let (bytes, manifest) = archive_of_one_event();
        let dir = scratch();
        let data = dir.join(&manifest.file);
        write_manifest(&data, &manifest);
        // A pipe can be read once: a verify that opened the file a second time would wait for a
        // writer that never comes.
        let made = std::process::Command::new("mkfifo")
            .arg(&data)
            .status()
            .unwrap();
        assert!(made.success());
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || std::fs::write(data, bytes).unwrap())
        };
        let (done, verified) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(verify(&data).map(|m| m.rows).map_err(|e| e.to_string()));
        });
        let verified = verified
            .recv_timeout(Duration::from_secs(60))
            .expect("verify read the pipe once and ended");
        assert_eq!(verified, Ok(1));
        writer.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_rows_digest_is_the_one_the_database_computes() {
        // The row and its digest as PostgreSQL computes it (migration 000062's function):
        // SELECT encode(callback_deliveries_row_digest(1, 42, 'acme', 'evt_1', '\x7b7d',
        //   '2025-01-10 00:01:00.123456+00', NULL, 'applied', NULL, 200, NULL, NULL), 'hex');
        // the month's digest of that one row chains it once: sha256('' || row digest).
        let line = ArchiveLine {
            provider: "acme".into(),
            id: "evt_1".into(),
            body: Some("{}".into()),
            body_base64: None,
            merchant_id: 42,
            received_at: "2025-01-10T00:01:00.123456Z".parse().unwrap(),
            event_type: None,
            outcome: Some("applied".into()),
            reason: None,
            ack_status: Some(200),
            transfer_id: None,
            trace_id: None,
            delivery_id: 1,
        };
        let mut digest = RowsDigest::default();
        assert_eq!(digest.hex(), "", "no rows: the empty chain");
        digest.push(&line, b"{}");
        let mut expected = Sha256::new();
        expected.update(
            hex::decode("08df3c20f4809e5a3738292ffcf07f088f288a56d12eba0e6031a9991165cf16")
                .unwrap(),
        );
        assert_eq!(digest.hex(), hex::encode(expected.finalize()));
    }

    #[test]
    fn only_the_event_logs_own_names_become_paths() {
        for name in ["callback_deliveries_y2025m01", "callback_deliveries_legacy"] {
            assert!(PartitionName::parse(name).is_ok(), "{name}");
        }
        for name in [
            "../escaped_y2024m12",
            "callback_deliveries_y2025m13",
            "callback_deliveries_y2025m1",
            "callback_deliveries_y2025m01/../../x",
            "callback_deliveries_y20a5m01",
            "other",
        ] {
            assert!(PartitionName::parse(name).is_err(), "{name}");
        }
    }

    #[test]
    fn bytes_after_the_last_gzip_member_fail_the_digest() {
        let (mut bytes, manifest) = archive_of_one_event();
        let dir = scratch();
        let data = dir.join(&manifest.file);
        write_manifest(&data, &manifest);
        std::fs::write(&data, &bytes).unwrap();
        assert!(verify(&data).is_ok());
        bytes.extend_from_slice(b"\0\0\0\0");
        std::fs::write(&data, &bytes).unwrap();
        let error = verify(&data).unwrap_err().to_string();
        assert!(error.contains("SHA-256 is"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
