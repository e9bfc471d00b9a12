//! Which requests are traced: head sampling, decided once per trace at its first span. A trace
//! root (a span with no span around it: a request, a notification attempt) is sampled at
//! `[telemetry] sample_ratio`. An incoming `traceparent` that says "not sampled" is obeyed; one
//! that says "sampled" is honoured within the ratio only (the same draw as a request without
//! one), unless `trust_incoming_sampling` lets the caller decide: otherwise any caller could
//! have every one of its requests traced, exported and stored with a trace id of its choosing.
//! Every span inside a sampled root follows it, and inside an unsampled one no trace span is
//! even created. So a request that is not traced costs what it costs with tracing off.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::registry::LookupSpan;

use crate::trace_switch::tracing_on;

/// The share of trace roots that are sampled, per million.
static PER_MILLION: AtomicU32 = AtomicU32::new(1_000_000);

/// Whether a caller's "sampled" is obeyed as it stands (`trust_incoming_sampling`).
static TRUST_CALLERS: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// The decision a caller's `traceparent` made for the next root created on this thread.
    static PARENT_SAYS: Cell<Option<bool>> = const { Cell::new(None) };
}

pub(super) fn set_ratio(per_million: u32, trust_callers: bool) {
    PER_MILLION.store(per_million.min(1_000_000), Ordering::Relaxed);
    TRUST_CALLERS.store(trust_callers, Ordering::Relaxed);
}

/// What a caller's sampled flag decides: all of it when callers are trusted; otherwise a "no"
/// (none of the caller's business is traced against its will), while a "yes" leaves the
/// decision to the ratio's draw.
pub(super) fn callers_say(sampled: bool) -> Option<bool> {
    if sampled && !TRUST_CALLERS.load(Ordering::Relaxed) {
        None
    } else {
        Some(sampled)
    }
}

/// Runs `create` (which creates a trace root) with the sampling decision of the caller's
/// `traceparent`, when there is one.
pub(super) fn as_parent_says<T>(sampled: Option<bool>, create: impl FnOnce() -> T) -> T {
    PARENT_SAYS.with(|says| says.set(sampled));
    let created = create();
    PARENT_SAYS.with(|says| says.set(None));
    created
}

/// The trace layer's filter: spans at info and above, warnings (span events), only in sampled
/// traces and only while tracing is on.
pub(super) struct Sampled;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Filter<S> for Sampled {
    fn enabled(&self, metadata: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        if !tracing_on() {
            return false;
        }
        // In a sampled trace: the nearest span around it is one of this layer's.
        let in_sampled_trace = cx.lookup_current().is_some();
        if metadata.is_event() {
            return in_sampled_trace && *metadata.level() <= Level::WARN;
        }
        if *metadata.level() > Level::INFO {
            return false;
        }
        if in_sampled_trace {
            return true;
        }
        if cx.current_span().id().is_some() {
            // Inside a span this layer left out: an unsampled trace.
            return false;
        }
        PARENT_SAYS.with(Cell::get).unwrap_or_else(|| {
            let per_million = PER_MILLION.load(Ordering::Relaxed);
            per_million >= 1_000_000 || rand::random_range(0..1_000_000) < per_million
        })
    }

    fn callsite_enabled(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Call sites this layer never takes are said so once: a debug line in a dependency
        // then costs nothing here per call. The interest is asked again when tracing turns on
        // (telemetry::start rebuilds it).
        let level = *metadata.level();
        let never = !tracing_on()
            || (metadata.is_event() && level > Level::WARN)
            || (metadata.is_span() && level > Level::INFO);
        if never {
            tracing::subscriber::Interest::never()
        } else {
            // The rest is asked per span: the decision depends on the trace.
            tracing::subscriber::Interest::sometimes()
        }
    }
}
