//! What became of every finished span, for `/metrics`: a leaf, so the metrics registry can
//! show it without depending on the exporter.

use std::sync::OnceLock;

use prometheus::{IntCounterVec, Opts};

/// `gateway_trace_spans_total{result}`: `exported`, `dropped_queue_full`, `dropped_export_failed`.
/// Process-wide, as the exporter is; every application's registry shows the same counter.
pub fn span_counter() -> &'static IntCounterVec {
    static COUNTER: OnceLock<IntCounterVec> = OnceLock::new();
    COUNTER.get_or_init(|| {
        IntCounterVec::new(
            Opts::new(
                "gateway_trace_spans_total",
                "Finished trace spans: exported, or dropped (queue full, export failed)",
            ),
            &["result"],
        )
        .unwrap_or_else(|e| unreachable!("{e}"))
    })
}

pub(super) fn count(result: &str, spans: usize) {
    span_counter()
        .with_label_values(&[result])
        .inc_by(u64::try_from(spans).unwrap_or(u64::MAX));
}
