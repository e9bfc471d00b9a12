//! Whether this process exports traces, and the target of the spans that exist for traces
//! only. A leaf below every module that adds a trace span (the database layer among them),
//! apart from [`crate::telemetry`], which turns it on.

use std::sync::atomic::{AtomicBool, Ordering};

/// The target of the spans that exist for traces only (verification, the key claim, the
/// write, the commit, the answer...): logs never show them.
pub const TRACE: &str = "gateway::trace";

static TRACING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports traces.
pub fn tracing_on() -> bool {
    TRACING.load(Ordering::Relaxed)
}

/// Turns tracing on, once its exporter runs ([`crate::telemetry::start`]).
pub(crate) fn turn_on() {
    TRACING.store(true, Ordering::Relaxed);
}
