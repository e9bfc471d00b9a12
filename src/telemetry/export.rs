//! Exporting finished spans without ever holding up an answer. A span ends on the thread that
//! served the request; [`Handoff`] puts it in a bounded queue and returns (a full queue drops
//! the span and counts it). One thread of its own takes the spans out in batches and posts
//! each batch to the collector (OTLP/HTTP, protobuf) with a bounded request; a batch the
//! collector does not take in time is dropped and counted too. So a slow, stalled or absent
//! collector costs a request nothing but its spans.
//!
//! The queue is a vector behind a mutex that the export thread empties whole, woken once per
//! full batch or at the export interval. A channel would wake the export thread for every span
//! (a futex call on each side), about six times a request.

use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

use super::counter::count;
use crate::config::telemetry::TelemetrySettings;

/// The most of a collector's answer that is read (it says "accepted" or why not).
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where finished spans go once [`start`] ran.
static QUEUE: OnceLock<Queue> = OnceLock::new();

/// Finished spans waiting for the export thread.
struct Queue {
    spans: Mutex<Vec<SpanData>>,
    /// Signalled when the queue holds a full batch.
    batch_ready: Condvar,
    capacity: usize,
    batch: usize,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Vec<SpanData>> {
        // A panic while holding the lock leaves at worst a vector of whole spans.
        self.spans.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The tracer provider's one processor: hands each finished span to the export queue.
#[derive(Debug)]
pub struct Handoff;

impl SpanProcessor for Handoff {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let Some(queue) = QUEUE.get() else {
            return;
        };
        let mut spans = queue.lock();
        if spans.len() >= queue.capacity {
            drop(spans);
            count("dropped_queue_full", 1);
            return;
        }
        spans.push(span);
        let batch_ready = spans.len() == queue.batch;
        drop(spans);
        if batch_ready {
            queue.batch_ready.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Why tracing could not start (a setting the exporter refuses, or no thread for it).
#[derive(Debug, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TraceStartError(String);

/// The running export; the process exports until it exits.
#[derive(Debug)]
pub struct Exporting {
    /// The collector's traces URL, for the startup line.
    pub traces_url: String,
}

pub(super) fn start(settings: &TelemetrySettings) -> Result<Exporting, TraceStartError> {
    // Through the one builder of outgoing clients (crate::outbound): no proxy from the
    // environment, no redirect followed (spans go where the operator said), and the collector's
    // origin granted to this exporter alone, as the operator named it (a collector is an
    // internal service by design, often on loopback or a private address).
    let traces_url = reqwest::Url::parse(&settings.traces_url)
        .map_err(|e| TraceStartError(format!("the traces URL: {e}")))?;
    let origin = crate::outbound::Origin::of(&traces_url)
        .ok_or_else(|| TraceStartError("the traces URL has no host".into()))?;
    let timeout = settings.export_timeout;
    let outbound = crate::outbound::Outbound::new([((), origin)], false, |builder| {
        builder.timeout(timeout).connect_timeout(timeout)
    })
    .map_err(|e| TraceStartError(format!("the export client: {e}")))?;
    let client = outbound
        .client(&(), &traces_url)
        .map_err(|e| TraceStartError(format!("the export client: {e}")))?
        .clone();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Collector(client))
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.traces_url.clone())
        .with_timeout(settings.export_timeout)
        .build()
        .map_err(|e| TraceStartError(format!("the OTLP exporter: {e}")))?;
    exporter.set_resource(
        &Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build(),
    );
    // The export thread's own runtime, for the exporter's HTTP client.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TraceStartError(format!("the export runtime: {e}")))?;
    let queue = Queue {
        spans: Mutex::new(Vec::with_capacity(settings.batch_spans)),
        batch_ready: Condvar::new(),
        capacity: settings.queue_spans,
        batch: settings.batch_spans,
    };
    if QUEUE.set(queue).is_err() {
        return Err(TraceStartError("tracing was started twice".into()));
    }
    let batch = Batching {
        max: settings.batch_spans,
        interval: settings.export_interval,
        timeout: settings.export_timeout,
        traces_url: settings.traces_url.clone(),
    };
    std::thread::Builder::new()
        .name("trace-export".into())
        .spawn(move || {
            if let Some(queue) = QUEUE.get() {
                batch.run(&runtime, &exporter, queue);
            }
        })
        .map_err(|e| TraceStartError(format!("the export thread: {e}")))?;
    Ok(Exporting {
        traces_url: settings.traces_url.clone(),
    })
}

/// Says at startup whether the collector can be reached at all: a warning when it cannot, as
/// the gateway serves either way.
pub async fn probe(traces_url: String) {
    let Ok(url) = reqwest::Url::parse(&traces_url) else {
        return;
    };
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return;
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let connect = tokio::net::TcpStream::connect((host, port));
    match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            tracing::warn!(%traces_url, %error, "the trace collector cannot be reached; serving without it, spans are dropped and counted until it answers");
        }
        Err(_) => {
            tracing::warn!(%traces_url, "the trace collector did not accept a connection within 2 s; serving without it");
        }
    }
}

struct Batching {
    max: usize,
    interval: Duration,
    timeout: Duration,
    traces_url: String,
}

impl Batching {
    /// Sends what the queue holds when it holds a full batch, or every `interval`; more than a
    /// batch (after a slow export) goes out as several requests.
    fn run(
        self,
        runtime: &tokio::runtime::Runtime,
        exporter: &opentelemetry_otlp::SpanExporter,
        queue: &Queue,
    ) {
        let mut failing = false;
        loop {
            // The replacement is allocated before the lock is taken, so a request thread
            // never waits for an allocation of the export thread's.
            let mut taken = Vec::with_capacity(self.max);
            {
                let spans = queue.lock();
                let (mut spans, _) = queue
                    .batch_ready
                    .wait_timeout_while(spans, self.interval, |spans| spans.len() < self.max)
                    .unwrap_or_else(PoisonError::into_inner);
                std::mem::swap(&mut *spans, &mut taken);
            }
            while !taken.is_empty() {
                let rest = taken.split_off(taken.len().min(self.max));
                failing = self.export(runtime, exporter, taken, failing);
                taken = rest;
            }
        }
    }

    /// One export request; answers whether the collector is failing now (a warning is written
    /// when that changes, not per batch).
    fn export(
        &self,
        runtime: &tokio::runtime::Runtime,
        exporter: &opentelemetry_otlp::SpanExporter,
        batch: Vec<SpanData>,
        failing: bool,
    ) -> bool {
        let spans = batch.len();
        let result = runtime
            .block_on(async { tokio::time::timeout(self.timeout, exporter.export(batch)).await });
        let error = match result {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_) => Some(format!("no answer within {} ms", self.timeout.as_millis())),
        };
        match error {
            None => {
                count("exported", spans);
                if failing {
                    tracing::info!(traces_url = %self.traces_url, "trace export works again");
                }
                false
            }
            Some(error) => {
                count("dropped_export_failed", spans);
                if !failing {
                    tracing::warn!(traces_url = %self.traces_url, %error, spans, "trace export failed; spans are dropped until the collector answers");
                }
                true
            }
        }
    }
}

/// The exporter's HTTP client: the gateway's own reqwest (one HTTP and TLS stack), reading at
/// most [`MAX_ANSWER_BYTES`] of an answer.
#[derive(Debug)]
struct Collector(reqwest::Client);

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for Collector {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let (parts, body) = request.into_parts();
        let mut response = self
            .0
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut answer = http::Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            *headers = response.headers().clone();
        }
        let mut read = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            let room = MAX_ANSWER_BYTES.saturating_sub(read.len());
            read.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if read.len() >= MAX_ANSWER_BYTES {
                break;
            }
        }
        Ok(answer.body(Bytes::from(read))?)
    }
}
