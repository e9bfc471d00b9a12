//! Failed console sign-ins are audit rows too, but a flood of them must not fill the disk: a
//! process writes a row for at most [`ROWS_PER_WINDOW`] failures a minute, and one row with the
//! count of the rest when that minute ends. A successful sign-in always gets its row.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed sign-ins written one row each per window and process.
pub const ROWS_PER_WINDOW: u32 = 20;
/// The window the limit counts in.
pub const WINDOW: Duration = Duration::from_secs(60);

/// What to do with one failed sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Write its row.
    Row,
    /// Count it; the first one counted in a window also schedules the summary row, due after
    /// the given wait.
    Counted { schedule_summary: Option<Duration> },
}

/// The failed sign-ins of this process (shared by its workers).
#[derive(Debug)]
pub struct FailedSignIns {
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    rows: u32,
    /// Failures counted and not yet written as a summary.
    counted: u64,
    summary_scheduled: bool,
}

impl Default for FailedSignIns {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl FailedSignIns {
    pub fn new(now: Instant) -> Self {
        Self {
            window: Mutex::new(Window {
                started: now,
                rows: 0,
                counted: 0,
                summary_scheduled: false,
            }),
        }
    }

    /// One more failed sign-in at `now`.
    pub fn admit(&self, now: Instant) -> Admit {
        let mut window = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if now.duration_since(window.started) >= WINDOW {
            window.started = now;
            window.rows = 0;
        }
        if window.rows < ROWS_PER_WINDOW {
            window.rows += 1;
            return Admit::Row;
        }
        window.counted += 1;
        let schedule_summary = (!window.summary_scheduled).then(|| {
            window.summary_scheduled = true;
            WINDOW.saturating_sub(now.duration_since(window.started))
        });
        Admit::Counted { schedule_summary }
    }

    /// The failures counted since the last summary, for the summary row (and a new one may be
    /// scheduled from now on).
    pub fn take_counted(&self) -> u64 {
        let mut window = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        window.summary_scheduled = false;
        std::mem::take(&mut window.counted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_gets_a_row_each_up_to_the_limit_then_one_summary_a_window() {
        let start = Instant::now();
        let failed = FailedSignIns::new(start);
        for _ in 0..ROWS_PER_WINDOW {
            assert_eq!(failed.admit(start), Admit::Row);
        }
        let later = start + Duration::from_secs(10);
        assert_eq!(
            failed.admit(later),
            Admit::Counted {
                schedule_summary: Some(Duration::from_secs(50))
            }
        );
        for _ in 0..999 {
            assert_eq!(
                failed.admit(later),
                Admit::Counted {
                    schedule_summary: None
                }
            );
        }
        assert_eq!(failed.take_counted(), 1000);
        assert_eq!(failed.take_counted(), 0);
    }

    #[test]
    fn a_new_window_writes_rows_again() {
        let start = Instant::now();
        let failed = FailedSignIns::new(start);
        for _ in 0..=ROWS_PER_WINDOW {
            failed.admit(start);
        }
        assert_eq!(failed.admit(start + WINDOW), Admit::Row);
    }
}
