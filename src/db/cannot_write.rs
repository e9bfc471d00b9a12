//! Errors that say the database cannot write at all now, whatever the request: its disk is full
//! (SQLSTATE 53100, or a disk quota), its file system turned read-only, or its storage fails
//! (58030). Such a statement rolled back, reads still work, and a retry helps once an operator
//! frees space, so callers answer 503 and store nothing. [`WriteHealth`] remembers the newest
//! of them against the newest committed write, for `/readyz`.
//!
//! diesel does not carry the SQLSTATE (diesel-async keeps only the server's texts), so the
//! kind is read from the operating system's error text that PostgreSQL appends to a failed
//! file operation (`could not extend file "..": No space left on device`) and from its hint
//! for a short write (`Check free disk space.`): the untranslated texts, which a server
//! writes with `lc_messages` `C` or `en_*`. A node that refuses writes by configuration
//! (25006, a standby or a fenced primary) is not one of these: the pool discards that
//! connection and reconnects (`super::watch`).

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::time::Duration;

use diesel::result::{DatabaseErrorKind, Error};

/// Why the database cannot write; the `reason` label of the metric and of `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannotWrite {
    /// ENOSPC or EDQUOT: SQLSTATE 53100 `disk_full`.
    DiskFull,
    /// EROFS: the file system under the data (or a tablespace) was remounted read-only.
    ReadOnlyFileSystem,
    /// EIO: SQLSTATE 58030 `io_error`.
    IoError,
}

/// The operating system's texts (as `strerror` writes them) and what each one means.
const TEXTS: [(&str, CannotWrite); 4] = [
    ("No space left on device", CannotWrite::DiskFull),
    ("Disk quota exceeded", CannotWrite::DiskFull),
    ("Read-only file system", CannotWrite::ReadOnlyFileSystem),
    ("Input/output error", CannotWrite::IoError),
];
/// PostgreSQL's hint on a write that stopped short (53100 without an errno text).
const DISK_SPACE_HINT: &str = "Check free disk space";

impl CannotWrite {
    /// Every reason, in the order the metric lists them.
    pub const ALL: [CannotWrite; 3] = [
        CannotWrite::DiskFull,
        CannotWrite::ReadOnlyFileSystem,
        CannotWrite::IoError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CannotWrite::DiskFull => "disk_full",
            CannotWrite::ReadOnlyFileSystem => "read_only_file_system",
            CannotWrite::IoError => "io_error",
        }
    }

    /// Whether `error` says the database cannot write now, and why.
    pub fn of(error: &Error) -> Option<Self> {
        let Error::DatabaseError(DatabaseErrorKind::Unknown, info) = error else {
            return None;
        };
        let message = info.message();
        TEXTS
            .iter()
            .find(|(text, _)| message.contains(text))
            .map(|(_, reason)| *reason)
            .or_else(|| {
                info.hint()
                    .is_some_and(|hint| hint.contains(DISK_SPACE_HINT))
                    .then_some(CannotWrite::DiskFull)
            })
    }

    fn index(self) -> u8 {
        match self {
            CannotWrite::DiskFull => 1,
            CannotWrite::ReadOnlyFileSystem => 2,
            CannotWrite::IoError => 3,
        }
    }

    fn from_index(index: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.index() == index)
    }
}

/// The newest cannot-write failure and the newest committed write this process saw: two
/// atomic stores per answer, no query. `/readyz` is degraded while the failure is the newer
/// one and recent; the first write that commits afterwards ends it, no restart needed.
#[derive(Debug, Default)]
pub struct WriteHealth {
    /// Milliseconds since the Unix epoch (0: never).
    failed_at_ms: AtomicI64,
    reason: AtomicU8,
    committed_at_ms: AtomicI64,
}

/// A cannot-write failure that still counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Degraded {
    pub reason: CannotWrite,
    /// How long ago it happened.
    pub ago: Duration,
}

impl WriteHealth {
    /// A write failed because the database cannot write.
    pub fn failed(&self, reason: CannotWrite) {
        self.reason.store(reason.index(), Ordering::Relaxed);
        self.failed_at_ms.fetch_max(now_ms(), Ordering::AcqRel);
    }

    /// A write committed.
    pub fn committed(&self) {
        self.committed_at_ms.fetch_max(now_ms(), Ordering::AcqRel);
    }

    /// The newest failure when no write committed since and it is at most `window` old.
    pub fn degraded(&self, window: Duration) -> Option<Degraded> {
        self.degraded_at(now_ms(), window)
    }

    fn degraded_at(&self, now_ms: i64, window: Duration) -> Option<Degraded> {
        let failed = self.failed_at_ms.load(Ordering::Acquire);
        let committed = self.committed_at_ms.load(Ordering::Acquire);
        let ago = Duration::from_millis(u64::try_from(now_ms - failed).unwrap_or(0));
        if failed == 0 || committed >= failed || ago > window {
            return None;
        }
        Some(Degraded {
            reason: CannotWrite::from_index(self.reason.load(Ordering::Relaxed))?,
            ago,
        })
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Info {
        message: &'static str,
        hint: Option<&'static str>,
    }

    impl diesel::result::DatabaseErrorInformation for Info {
        fn message(&self) -> &str {
            self.message
        }
        fn details(&self) -> Option<&str> {
            None
        }
        fn hint(&self) -> Option<&str> {
            self.hint
        }
        fn table_name(&self) -> Option<&str> {
            None
        }
        fn column_name(&self) -> Option<&str> {
            None
        }
        fn constraint_name(&self) -> Option<&str> {
            None
        }
        fn statement_position(&self) -> Option<i32> {
            None
        }
    }

    fn server_error(message: &'static str, hint: Option<&'static str>) -> Error {
        Error::DatabaseError(DatabaseErrorKind::Unknown, Box::new(Info { message, hint }))
    }

    #[test]
    fn a_relation_that_cannot_be_extended_for_lack_of_space_is_disk_full() {
        let error = server_error(
            "could not extend file \"pg_tblspc/16384/PG_15_202209061/16385/16420\": No space left on device",
            Some("Check free disk space."),
        );
        assert_eq!(CannotWrite::of(&error), Some(CannotWrite::DiskFull));
    }

    #[test]
    fn a_short_write_with_the_disk_space_hint_is_disk_full() {
        let error = server_error(
            "could not extend file \"base/16384/16420\": wrote only 4096 of 8192 bytes at block 7",
            Some("Check free disk space."),
        );
        assert_eq!(CannotWrite::of(&error), Some(CannotWrite::DiskFull));
    }

    #[test]
    fn a_read_only_file_system_and_an_io_error_are_named_apart() {
        let read_only = server_error(
            "could not extend file \"base/16384/16420\": Read-only file system",
            None,
        );
        let io = server_error(
            "could not write block 7 in file \"base/16384/16420\": Input/output error",
            None,
        );
        assert_eq!(
            CannotWrite::of(&read_only),
            Some(CannotWrite::ReadOnlyFileSystem)
        );
        assert_eq!(CannotWrite::of(&io), Some(CannotWrite::IoError));
    }

    #[test]
    fn a_constraint_violation_or_a_read_only_node_is_not_a_storage_failure() {
        assert_eq!(
            CannotWrite::of(&Error::DatabaseError(
                DatabaseErrorKind::ReadOnlyTransaction,
                Box::new(Info {
                    message: "cannot execute INSERT in a read-only transaction",
                    hint: None,
                }),
            )),
            None
        );
        assert_eq!(
            CannotWrite::of(&server_error("division by zero", None)),
            None
        );
        assert_eq!(CannotWrite::of(&Error::NotFound), None);
    }

    #[test]
    fn a_recent_failure_degrades_until_a_write_commits() {
        let health = WriteHealth::default();
        let window = Duration::from_secs(60);
        assert_eq!(health.degraded(window), None);
        health.failed(CannotWrite::DiskFull);
        assert_eq!(
            health.degraded(window).map(|d| d.reason),
            Some(CannotWrite::DiskFull)
        );
        health.committed();
        assert_eq!(health.degraded(window), None);
    }

    #[test]
    fn a_failure_older_than_the_window_no_longer_degrades() {
        let health = WriteHealth::default();
        health.failed(CannotWrite::IoError);
        let later = now_ms() + 61_000;
        assert_eq!(health.degraded_at(later, Duration::from_secs(60)), None);
    }
}
