//! A real OTLP/HTTP trace receiver on 127.0.0.1, started by the test: it takes what an
//! exporter posts to `/v1/traces` (protobuf), decodes it with the protocol's own message
//! definitions (the `opentelemetry-proto` crate) and keeps every span. It can also stall:
//! accept the requests and never answer them, as a collector that hangs does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpResponse, HttpServer, web};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tokio::sync::Notify;

/// One received span, its ids as lower-case hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a trace's root.
    pub parent_span_id: String,
    /// (trace id, span id) of each linked span.
    pub links: Vec<(String, String)>,
    pub attributes: HashMap<String, String>,
    pub service_name: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

#[derive(Default)]
struct Shared {
    spans: Mutex<Vec<ReceivedSpan>>,
    requests: Mutex<usize>,
    stalled: Mutex<bool>,
    arrived: Notify,
}

pub struct OtlpReceiver {
    /// The URL to configure as `otlp_endpoint`.
    pub endpoint: String,
    shared: Arc<Shared>,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

impl OtlpReceiver {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let state = shared.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::from(state.clone()))
                .app_data(web::PayloadConfig::new(64 * 1024 * 1024))
                .route("/v1/traces", web::post().to(receive))
        })
        .workers(1)
        .disable_signals()
        .bind(("127.0.0.1", 0))
        .unwrap();
        let port = server.addrs()[0].port();
        let server = server.run();
        let handle = server.handle();
        tokio::spawn(server);
        Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            shared,
            handle,
        }
    }

    /// From now on, requests are read and then never answered.
    pub fn stall(&self) {
        *self.shared.stalled.lock().unwrap() = true;
    }

    /// Export requests received so far (stalled ones included).
    pub fn requests(&self) -> usize {
        *self.shared.requests.lock().unwrap()
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.shared.spans.lock().unwrap().clone()
    }

    /// Waits until `condition` holds for the spans received (woken by each arrival); fails
    /// the test after 30 s.
    pub async fn until(
        &self,
        what: &str,
        condition: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let waiting = async {
            loop {
                let arrived = self.shared.arrived.notified();
                let spans = self.spans();
                if condition(&spans) {
                    return spans;
                }
                arrived.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "still waiting for {what} after 30 s; spans: {:#?}",
                    self.spans()
                )
            })
    }
}

async fn receive(shared: web::Data<Shared>, body: web::Bytes) -> HttpResponse {
    *shared.requests.lock().unwrap() += 1;
    if *shared.stalled.lock().unwrap() {
        // A hung collector: the connection stays open and no answer ever comes.
        std::future::pending::<()>().await;
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body.as_ref()) else {
        return HttpResponse::BadRequest().finish();
    };
    let mut received = Vec::new();
    for resource_spans in request.resource_spans {
        let service_name = resource_spans
            .resource
            .iter()
            .flat_map(|r| r.attributes.iter())
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    name: span.name,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                        .collect(),
                    service_name: service_name.clone(),
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                });
            }
        }
    }
    shared.spans.lock().unwrap().extend(received);
    shared.arrived.notify_waiters();
    HttpResponse::Ok()
        .content_type("application/x-protobuf")
        .finish()
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
