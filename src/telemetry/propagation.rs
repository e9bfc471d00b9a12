//! W3C trace context across the wire: an incoming request's `traceparent` becomes its span's
//! parent; outgoing calls (notification attempts, refund calls to a provider) carry the
//! current span's.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The context an incoming request's `traceparent` (and `tracestate`) names; `None` when it
/// names none or an invalid one.
pub fn extract(headers: &actix_web::http::header::HeaderMap) -> Option<Context> {
    let context = TraceContextPropagator::new().extract(&Incoming(headers));
    context.span().span_context().is_valid().then_some(context)
}

/// Adds `span`'s `traceparent` to an outgoing request's headers (nothing while tracing is off).
pub fn inject(span: &Span, headers: &mut reqwest::header::HeaderMap) {
    if !crate::trace_switch::tracing_on() {
        return;
    }
    TraceContextPropagator::new().inject_context(&span.context(), &mut Outgoing(headers));
}

struct Incoming<'a>(&'a actix_web::http::header::HeaderMap);

impl Extractor for Incoming<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}

struct Outgoing<'a>(&'a mut reqwest::header::HeaderMap);

impl Injector for Outgoing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            reqwest::header::HeaderName::from_bytes(key.as_bytes()),
            reqwest::header::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}
