//! Logs to stderr: `RUST_LOG` sets levels; `GATEWAY_LOG_FORMAT=json` gives one JSON object
//! per line. Request spans come from tracing-actix-web, with a request id and the gateway's
//! own fields (provider, event id, outcome, user id) recorded by the handlers.

use actix_web::Error;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use tracing::Span;
use tracing_actix_web::{DefaultRootSpanBuilder, RootSpanBuilder};
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call is a no-op.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("GATEWAY_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init()
    } else {
        builder.try_init()
    };
}

/// The request span: tracing-actix-web's fields plus the gateway's.
pub struct GatewayRootSpan;

impl RootSpanBuilder for GatewayRootSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        tracing_actix_web::root_span!(
            request,
            provider = tracing::field::Empty,
            event_id = tracing::field::Empty,
            user_id = tracing::field::Empty,
        )
    }

    fn on_request_end<B: MessageBody>(span: Span, outcome: &Result<ServiceResponse<B>, Error>) {
        // The "request finished" line itself comes from routes::observe, which knows the
        // latency and the idempotency outcome.
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}
