//! `[telemetry]`: where traces go (OTLP over HTTP) and how much the export may hold.

use std::time::Duration;

use serde::Deserialize;

use super::rules::{ConfigError, bounded, within};

/// Trace export. Off (`None` in [`super::Settings`]) when `otlp_endpoint` is not set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetrySettings {
    /// The collector's OTLP/HTTP traces URL: `otlp_endpoint` + `/v1/traces`.
    pub traces_url: String,
    /// `service.name` of every span.
    pub service_name: String,
    /// Finished spans waiting for export; a span past it is dropped and counted.
    pub queue_spans: usize,
    /// Spans in one export request.
    pub batch_spans: usize,
    /// How long a finished span may wait before its batch is sent.
    pub export_interval: Duration,
    /// One export request's bound, connect included; past it the batch is dropped and counted.
    pub export_timeout: Duration,
    /// The share of requests (trace roots) that are traced, per million.
    pub sample_per_million: u32,
    /// A caller's `traceparent` decides by its sampled flag alone (a mesh of the operator's
    /// own services). Off: its "sampled" is honoured only within `sample_ratio`, so a caller
    /// cannot make every one of its requests traced (and exported, and stored with the trace
    /// id it chose).
    pub trust_incoming_sampling: bool,
    /// The console's link to a trace: `{trace_id}` is replaced by the trace id.
    pub trace_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    otlp_endpoint: Option<String>,
    service_name: Option<String>,
    queue_spans: Option<u64>,
    batch_spans: Option<u64>,
    export_interval_ms: Option<u64>,
    export_timeout_ms: Option<u64>,
    trace_url: Option<String>,
    sample_ratio: Option<f64>,
    trust_incoming_sampling: Option<bool>,
}

pub(super) fn validate(raw: RawTelemetry) -> Result<Option<TelemetrySettings>, ConfigError> {
    let Some(endpoint) = raw.otlp_endpoint.filter(|e| !e.is_empty()) else {
        return Ok(None);
    };
    let parsed = reqwest::Url::parse(&endpoint)
        .map_err(|e| ConfigError(format!("telemetry.otlp_endpoint: not a URL: {e}")))?;
    // Collectors usually listen on plain HTTP inside the network (port 4318): http is allowed
    // anywhere here, unlike the URLs that carry payment data. Spans carry no secret.
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host().is_none()
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return Err(ConfigError(
            "telemetry.otlp_endpoint: must be an http:// or https:// URL without query, \
             e.g. http://127.0.0.1:4318"
                .into(),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ConfigError(
            "telemetry.otlp_endpoint: must not carry user:password@".into(),
        ));
    }
    // As OTEL_EXPORTER_OTLP_ENDPOINT: the base URL, the signal's path appended.
    let traces_url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
    let queue_spans = bounded("telemetry.queue_spans", raw.queue_spans, 8192, 1, 1_000_000)?;
    let batch_spans = bounded("telemetry.batch_spans", raw.batch_spans, 512, 1, 65_536)?;
    within("telemetry.batch_spans", batch_spans, 1, queue_spans)?;
    let interval_ms = bounded(
        "telemetry.export_interval_ms",
        raw.export_interval_ms,
        1000,
        10,
        60_000,
    )?;
    let timeout_ms = bounded(
        "telemetry.export_timeout_ms",
        raw.export_timeout_ms,
        5000,
        100,
        60_000,
    )?;
    let ratio = raw.sample_ratio.unwrap_or(1.0);
    if !(ratio > 0.0 && ratio <= 1.0) {
        return Err(ConfigError(format!(
            "telemetry.sample_ratio must be above 0 and at most 1 (got {ratio}); leave \
             otlp_endpoint out to trace nothing"
        )));
    }
    let service_name = raw
        .service_name
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "callback-gateway".to_owned());
    if let Some(url) = &raw.trace_url
        && !url.contains("{trace_id}")
    {
        return Err(ConfigError(
            "telemetry.trace_url: must contain {trace_id}, e.g. http://jaeger:16686/trace/{trace_id}"
                .into(),
        ));
    }
    Ok(Some(TelemetrySettings {
        traces_url,
        service_name,
        queue_spans: usize::try_from(queue_spans).unwrap_or(usize::MAX),
        batch_spans: usize::try_from(batch_spans).unwrap_or(usize::MAX),
        export_interval: Duration::from_millis(interval_ms),
        export_timeout: Duration::from_millis(timeout_ms),
        trace_url: raw.trace_url,
        // Rounded to a millionth; at least one, so a tiny ratio still traces something.
        sample_per_million: ((ratio * 1_000_000.0).round() as u32).max(1),
        trust_incoming_sampling: raw.trust_incoming_sampling.unwrap_or(false),
    }))
}
