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

/// `request` carrying the current span's `traceparent` (unchanged while tracing is off).
pub fn carry_current(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    if !crate::trace_switch::tracing_on() {
        return request;
    }
    let mut headers = reqwest::header::HeaderMap::new();
    TraceContextPropagator::new()
        .inject_context(&Span::current().context(), &mut Outgoing(&mut headers));
    request.headers(headers)
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
