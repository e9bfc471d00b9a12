//! Logs and traces. Logs go to stderr: `RUST_LOG` sets levels; `GATEWAY_LOG_FORMAT=json` gives
//! one JSON object per line. Request spans come from tracing-actix-web, with a request id and
//! the gateway's own fields (provider, event id, outcome, user id) recorded by the handlers.
//!
//! Traces (docs/operations.md): with `[telemetry] otlp_endpoint` set, `serve` calls [`start`]
//! and every request's span tree becomes one OpenTelemetry trace, exported by [`export`]. The
//! spans that exist for the trace alone have the target [`TRACE`]: logs never show them, and
//! while tracing is off they are not even created, so a gateway without a collector pays
//! nothing for them.

pub mod counter;
pub mod export;
mod open_close;
pub mod propagation;
pub mod sampling;

use std::sync::OnceLock;

use actix_web::Error;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing::Span;
use tracing_actix_web::{DefaultRootSpanBuilder, RootSpanBuilder};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::prelude::*;

use crate::trace_switch::{self, TRACE, tracing_on};
use export::{Exporting, TraceStartError};

/// The provider behind the subscriber's OpenTelemetry layer: built at [`init`], before the
/// configuration is read, and handed its exporter by [`start`].
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Installs the global subscriber (logs, and the trace layer that stays silent until
/// [`start`]); a second call is a no-op.
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info"))
        .add_directive(
            format!("{TRACE}=off")
                .parse()
                .unwrap_or_else(|e| unreachable!("a fixed directive: {e}")),
        );
    let json = std::env::var("GATEWAY_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let logs = if json {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    };
    let provider = PROVIDER.get_or_init(|| {
        SdkTracerProvider::builder()
            .with_span_processor(export::Handoff)
            // Which traces are kept is decided before their spans exist (sampling::Sampled);
            // every span that reaches the SDK is recorded.
            .with_sampler(Sampler::AlwaysOn)
            .build()
    });
    let traces = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("callback-gateway"))
        // Fewer attributes per span: the span's own fields are what an operator reads, and each
        // of these costs every span (a clock read on every enter and exit for the busy/idle
        // times).
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Entering a span would also make its context OpenTelemetry's current one, on every
        // poll of an instrumented future; nothing here reads that (outgoing calls take the
        // tracing span's context, propagation::carry_current).
        .with_context_activation(false)
        .with_filter(sampling::Sampled);
    let _ = tracing_subscriber::registry()
        .with(open_close::OpenClose(traces))
        .with(logs)
        .try_init();
}

/// Starts exporting traces to `settings`' collector; an unreachable collector is not an error
/// here (exports fail later, counted and warned of).
pub fn start(
    settings: &crate::config::telemetry::TelemetrySettings,
) -> Result<Exporting, TraceStartError> {
    let exporting = export::start(settings)?;
    sampling::set_ratio(
        settings.sample_per_million,
        settings.trust_incoming_sampling,
    );
    // Every call site's interest is asked again, now that the trace layer wants spans.
    trace_switch::turn_on();
    tracing::callsite::rebuild_interest_cache();
    Ok(exporting)
}

/// The trace id of `span`'s trace, as 32 hex digits; `None` while tracing is off.
pub fn trace_id(span: &Span) -> Option<String> {
    if !tracing_on() {
        return None;
    }
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// The path of a portal link; the rest of it is the one-time token.
const PORTAL_LINK: &str = "/portal/open/";

/// The request span of a portal link: tracing-actix-web's fields, but its target without the
/// token, which every log line of the request and its trace would carry (whoever reads them
/// could open the merchant's portal before the merchant does).
fn link_span(request: &ServiceRequest) -> Span {
    use actix_web::HttpMessage;
    use tracing::field::Empty;
    let request_id = request
        .extensions()
        .get::<tracing_actix_web::RequestId>()
        .map(ToString::to_string)
        .unwrap_or_default();
    let method = request.method().as_str().to_owned();
    tracing::info_span!(
        "HTTP request",
        http.method = %method,
        http.route = "/portal/open/{token}",
        http.target = "/portal/open/(token hidden)",
        http.status_code = Empty,
        otel.name = %format!("{method} /portal/open/{{token}}"),
        otel.kind = "server",
        otel.status_code = Empty,
        trace_id = Empty,
        request_id = %request_id,
        exception.message = Empty,
        exception.details = Empty,
        provider = Empty,
        event_id = Empty,
        user_id = Empty,
    )
}

/// The request span: tracing-actix-web's fields plus the gateway's; with tracing on, it
/// continues the trace of an incoming `traceparent`.
pub struct GatewayRootSpan;

impl RootSpanBuilder for GatewayRootSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        let parent = if tracing_on() {
            propagation::extract(request.headers())
        } else {
            None
        };
        // A caller's traceparent decides whether this request is traced as far as it may
        // (sampling::callers_say).
        let sampled = parent
            .as_ref()
            .and_then(|parent| sampling::callers_say(parent.span().span_context().is_sampled()));
        let span = sampling::as_parent_says(sampled, || {
            if request.path().starts_with(PORTAL_LINK) {
                return link_span(request);
            }
            tracing_actix_web::root_span!(
                request,
                provider = tracing::field::Empty,
                event_id = tracing::field::Empty,
                user_id = tracing::field::Empty,
            )
        });
        if let Some(parent) = parent
            && !span.is_disabled()
        {
            // Before anything asks for the span's context: after that its parent is fixed.
            let _ = span.set_parent(parent);
        }
        span
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        // The "request finished" line itself comes from routes::observe, which knows the
        // latency and the idempotency outcome.
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}
