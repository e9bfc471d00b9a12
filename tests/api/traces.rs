//! Traces (issue 42): the real binary exports its spans over OTLP/HTTP to a real receiver
//! started by the test, which decodes them with the protocol's own message definitions.

use std::collections::HashSet;
use std::sync::Arc;

use crate::notifications::notify_config;
use crate::support::cluster::free_port;
use crate::support::gateway::GatewayProcess;
use crate::support::otlp::{OtlpReceiver, ReceivedSpan};
use crate::support::provider::FakeProvider;
use crate::support::receiver::{MERCHANT_WHSEC, Receiver};
use crate::support::simulator::Event;
use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, connect, insert_orders, metric_sample, refund_config, sign, until,
};

fn traced(endpoint: &str, extra: &str) -> String {
    format!(
        r#"
[telemetry]
otlp_endpoint = "{endpoint}"
export_interval_ms = 20
{extra}
"#
    )
}

async fn deliver(
    gateway: &GatewayProcess,
    event: &Event,
    traceparent: Option<&str>,
) -> (u16, String) {
    let (headers, body) = sign::signed_now(event.provider, &event.id, &event.body);
    let mut request = reqwest::Client::new()
        .post(format!(
            "{}/v1/callbacks/{}",
            gateway.address(),
            event.provider
        ))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    if let Some(traceparent) = traceparent {
        request = request.header("traceparent", traceparent);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn admin_json(gateway: &GatewayProcess, path: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("{}{path}", gateway.address()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn metrics(gateway: &GatewayProcess) -> String {
    reqwest::get(format!("{}/metrics", gateway.address()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The request span of the callback for `event_id`: the root of its trace.
fn request_span<'a>(spans: &'a [ReceivedSpan], event_id: &str) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| {
        s.attributes.get("event_id").map(String::as_str) == Some(event_id)
            && s.name.starts_with("POST /v1/callbacks/")
    })
}

/// The span named `name` below `ancestor` in its trace (through the spans between, such as the
/// idempotent `execute`).
fn child<'a>(spans: &'a [ReceivedSpan], ancestor: &ReceivedSpan, name: &str) -> &'a ReceivedSpan {
    let descends = |span: &ReceivedSpan| {
        let mut parent = span.parent_span_id.clone();
        while !parent.is_empty() {
            if parent == ancestor.span_id {
                return true;
            }
            parent = spans
                .iter()
                .find(|s| s.span_id == parent && s.trace_id == span.trace_id)
                .map(|s| s.parent_span_id.clone())
                .unwrap_or_default();
        }
        false
    };
    spans
        .iter()
        .find(|s| s.name == name && s.trace_id == ancestor.trace_id && descends(s))
        .unwrap_or_else(|| {
            panic!(
                "no {name:?} span under {:?}; spans: {spans:#?}",
                ancestor.name
            )
        })
}

#[tokio::test]
async fn a_capture_is_one_trace_from_the_request_to_the_commit_and_the_event_log_keeps_its_id() {
    let receiver = OtlpReceiver::start().await;
    let viewer = "trace_url = \"https://traces.example/trace/{trace_id}\"\n";
    let gateway = GatewayProcess::spawn(&traced(&receiver.endpoint, viewer)).await;
    let db = connect(&gateway.database_url).await;
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let event = Event::payment("evt_traced_capture", order_id, amount);
    let (status, _) = deliver(&gateway, &event, None).await;
    assert_eq!(status, 200);

    let spans = receiver
        .until("the capture's spans", |spans| {
            request_span(spans, &event.id).is_some()
                && spans.iter().any(|s| s.name == "capture_statement")
        })
        .await;
    let root = request_span(&spans, &event.id).unwrap();
    assert_eq!(
        root.parent_span_id, "",
        "the request span is the trace's root"
    );
    assert_eq!(root.service_name, "callback-gateway");
    let verify = child(&spans, root, "verify");
    let write = child(&spans, root, "write");
    let answer = child(&spans, root, "answer");
    // The capture went out alone: its statement (claim, write and commit in one) is the
    // write's child, and the two are linked.
    let statement = child(&spans, write, "capture_statement");
    assert_eq!(statement.attributes["items"], "1");
    assert!(
        write
            .links
            .contains(&(statement.trace_id.clone(), statement.span_id.clone()))
    );
    for span in [verify, write, answer, statement] {
        assert_eq!(
            span.trace_id, root.trace_id,
            "{} is in the request's trace",
            span.name
        );
    }
    assert!(
        verify.end_unix_nano <= write.start_unix_nano,
        "verified before written"
    );
    assert!(
        statement.end_unix_nano <= answer.start_unix_nano,
        "committed before answered"
    );
    assert!(answer.end_unix_nano <= root.end_unix_nano);

    // The event log keeps the trace id; the event's page shows it.
    let detail = admin_json(&gateway, &format!("/admin/events/{ACME}/{}", event.id)).await;
    assert_eq!(detail["trace_id"], root.trace_id.as_str(), "{detail}");
    let page = console_page(&gateway, &format!("/console/events/{ACME}/{}", event.id)).await;
    let link = format!(
        r#"<a id="trace-id" href="https://traces.example/trace/{0}">{0}</a>"#,
        root.trace_id
    );
    assert!(page.contains(&link), "{page}");
}

/// A console page, signed in with the admin token.
async fn console_page(gateway: &GatewayProcess, path: &str) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let signed_in =
        crate::support::console_sign_in(&client, &gateway.address(), Some(ADMIN_TOKEN)).await;
    let cookie = signed_in.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    client
        .get(format!("{}{path}", gateway.address()))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_event_on_the_general_path_shows_its_key_claim_write_and_commit() {
    let receiver = OtlpReceiver::start().await;
    let gateway = GatewayProcess::spawn(&traced(&receiver.endpoint, "")).await;
    // A type the gateway does not act on: stored as ignored, through the transaction.
    let event = Event {
        provider: ACME,
        id: "evt_traced_ignored".into(),
        body: r#"{"id":"evt_traced_ignored","type":"customer.created","data":{}}"#.into(),
        amount_minor: 0,
    };
    let (status, body) = deliver(&gateway, &event, None).await;
    assert_eq!(status, 200, "{body}");
    let spans = receiver
        .until("the event's spans", |spans| {
            request_span(spans, &event.id).is_some_and(|root| {
                spans
                    .iter()
                    .any(|s| s.name == "commit" && s.trace_id == root.trace_id)
            })
        })
        .await;
    let root = request_span(&spans, &event.id).unwrap();
    let claim = child(&spans, root, "key_claim");
    let write = child(&spans, root, "write");
    let commit = child(&spans, root, "commit");
    child(&spans, root, "verify");
    child(&spans, root, "answer");
    assert!(claim.end_unix_nano <= write.start_unix_nano);
    assert!(write.end_unix_nano <= commit.start_unix_nano);
}

#[tokio::test]
async fn a_traceparent_sent_in_is_continued() {
    let receiver = OtlpReceiver::start().await;
    let gateway = GatewayProcess::spawn(&traced(&receiver.endpoint, "")).await;
    let db = connect(&gateway.database_url).await;
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let event = Event::payment("evt_traced_parent", order_id, amount);
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let (status, _) = deliver(
        &gateway,
        &event,
        Some(&format!("00-{trace_id}-{parent}-01")),
    )
    .await;
    assert_eq!(status, 200);
    let spans = receiver
        .until("the request span", |spans| {
            request_span(spans, &event.id).is_some()
        })
        .await;
    let root = request_span(&spans, &event.id).unwrap();
    assert_eq!(root.trace_id, trace_id);
    assert_eq!(root.parent_span_id, parent);
    let detail = admin_json(&gateway, &format!("/admin/events/{ACME}/{}", event.id)).await;
    assert_eq!(detail["trace_id"], trace_id);
}

#[tokio::test]
async fn captures_that_share_a_statement_all_link_to_its_one_span() {
    let receiver = OtlpReceiver::start().await;
    // One worker with one capture statement at a time: captures queue behind a blocked one.
    let extra = traced(
        &receiver.endpoint,
        "[server]\nworkers = 1\nacquire_timeout_ms = 10000\n\n[database]\ncapture_batches_per_worker = 1\n",
    );
    let gateway = Arc::new(GatewayProcess::spawn(&extra).await);
    let db = connect(&gateway.database_url).await;
    let orders = insert_orders(&db, 9).await;
    let events: Vec<Event> = orders
        .iter()
        .enumerate()
        .map(|(i, (id, amount))| Event::payment(&format!("evt_batched_{i}"), *id, *amount))
        .collect();

    // The first capture's statement waits for an order row the test holds.
    let holder = connect(&gateway.database_url).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM orders WHERE id = $1 FOR UPDATE",
            &[&orders[0].0],
        )
        .await
        .unwrap();
    let send = |event: Event| {
        let gateway = gateway.clone();
        tokio::spawn(async move { deliver(&gateway, &event, None).await })
    };
    let first = send(events[0].clone());
    until("the first capture to wait for the lock", async || {
        let waiting: i64 = db
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        waiting >= 1
    })
    .await;
    let queued: Vec<_> = events[1..].iter().cloned().map(send).collect();
    until("eight captures to queue", async || {
        metric_sample(
            &metrics(&gateway).await,
            "gateway_capture_queue_length",
            &[],
        )
        .is_some_and(|n| n >= 8.0)
    })
    .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(first.await.unwrap().0, 200);
    for delivery in queued {
        assert_eq!(delivery.await.unwrap().0, 200);
    }

    let spans = receiver
        .until("the eight requests' spans and their statement", |spans| {
            spans.iter().any(|s| {
                s.name == "capture_statement"
                    && s.attributes.get("items").map(String::as_str) == Some("8")
            }) && events[1..]
                .iter()
                .all(|e| request_span(spans, &e.id).is_some())
        })
        .await;
    let statement = spans
        .iter()
        .find(|s| s.name == "capture_statement" && s.attributes["items"] == "8")
        .unwrap();
    let mut linked_back = HashSet::new();
    for event in &events[1..] {
        let root = request_span(&spans, &event.id).unwrap();
        let write = child(&spans, root, "write");
        assert!(
            write
                .links
                .contains(&(statement.trace_id.clone(), statement.span_id.clone())),
            "{}'s write links to the shared statement: {write:#?}",
            event.id
        );
        linked_back.insert((write.trace_id.clone(), write.span_id.clone()));
    }
    // The statement links to each of the eight, and is in the first one's trace.
    assert_eq!(
        statement.links.iter().cloned().collect::<HashSet<_>>(),
        linked_back
    );
    assert!(linked_back.contains(&(statement.trace_id.clone(), statement.parent_span_id.clone())));
}

#[tokio::test]
async fn a_stalled_collector_costs_callbacks_nothing_and_its_dropped_spans_are_counted() {
    let receiver = OtlpReceiver::start().await;
    receiver.stall();
    let extra = traced(
        &receiver.endpoint,
        "queue_spans = 16\nbatch_spans = 4\nexport_timeout_ms = 60000\n",
    );
    let gateway = GatewayProcess::spawn(&extra).await;
    let db = connect(&gateway.database_url).await;
    for (i, (order_id, amount)) in insert_orders(&db, 40).await.into_iter().enumerate() {
        let event = Event::payment(&format!("evt_stalled_{i}"), order_id, amount);
        let (status, body) = deliver(&gateway, &event, None).await;
        assert_eq!(status, 200, "{body}");
    }
    // The export thread is stuck in a request the collector never answers...
    assert!(receiver.requests() >= 1);
    // ...and the spans that found the queue full were dropped and counted.
    let text = metrics(&gateway).await;
    let dropped = metric_sample(
        &text,
        "gateway_trace_spans_total",
        &[("result", "dropped_queue_full")],
    )
    .unwrap_or(0.0);
    assert!(dropped > 0.0, "{text}");
}

#[tokio::test]
async fn an_unreachable_collector_at_start_is_a_warning_and_callbacks_are_answered() {
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let gateway = GatewayProcess::spawn(&traced(&endpoint, "export_timeout_ms = 200\n")).await;
    let db = connect(&gateway.database_url).await;
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let (status, _) = deliver(
        &gateway,
        &Event::payment("evt_no_collector", order_id, amount),
        None,
    )
    .await;
    assert_eq!(status, 200);
    until("the warning", async || {
        gateway
            .log()
            .contains("the trace collector cannot be reached")
    })
    .await;
    until("the failed export to be counted", async || {
        metric_sample(
            &metrics(&gateway).await,
            "gateway_trace_spans_total",
            &[("result", "dropped_export_failed")],
        )
        .is_some_and(|n| n > 0.0)
    })
    .await;
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_traced_and_the_event_log_has_no_trace_id() {
    let gateway = GatewayProcess::spawn("").await;
    let db = connect(&gateway.database_url).await;
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let event = Event::payment("evt_untraced", order_id, amount);
    let (status, _) = deliver(
        &gateway,
        &event,
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    )
    .await;
    assert_eq!(status, 200);
    let detail = admin_json(&gateway, &format!("/admin/events/{ACME}/{}", event.id)).await;
    assert!(detail["trace_id"].is_null(), "{detail}");
    assert!(
        !metrics(&gateway)
            .await
            .contains("gateway_trace_spans_total{")
    );
}

#[tokio::test]
async fn each_notification_attempt_is_a_trace_and_the_endpoint_gets_its_traceparent() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = Receiver::start(MERCHANT_WHSEC).await;
    let config = format!(
        "{}\n{}",
        traced(&receiver.endpoint, ""),
        notify_config(&endpoint.url, "")
    );
    let gateway = GatewayProcess::spawn(&config).await;
    let db = connect(&gateway.database_url).await;
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let (status, _) = deliver(
        &gateway,
        &Event::payment("evt_notified", order_id, amount),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let delivery = endpoint.until_delivered(1).await.remove(0);
    let traceparent = delivery.traceparent.clone().expect("a traceparent header");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    let (trace_id, span_id) = (parts[1].to_owned(), parts[2].to_owned());
    let spans = receiver
        .until("the attempt's span", |spans| {
            spans.iter().any(|s| s.span_id == span_id)
        })
        .await;
    let attempt = spans.iter().find(|s| s.span_id == span_id).unwrap();
    assert_eq!(attempt.name, "notification_attempt");
    assert_eq!(attempt.trace_id, trace_id);
    assert_eq!(
        attempt.attributes["notification_id"],
        delivery.webhook_id.trim_start_matches("ntf_")
    );
}

#[tokio::test]
async fn a_refund_call_to_the_provider_carries_the_refund_requests_trace() {
    let receiver = OtlpReceiver::start().await;
    let provider = FakeProvider::start().await;
    let config = refund_config(&provider.base_url, &traced(&receiver.endpoint, ""));
    let gateway = GatewayProcess::spawn(&config).await;
    let db = connect(&gateway.database_url).await;
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let (status, _) = deliver(
        &gateway,
        &Event::payment("evt_refunded", order_id, amount),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let token = {
        use diesel_async::AsyncConnection;
        let mut conn = diesel_async::AsyncPgConnection::establish(&gateway.database_url)
            .await
            .unwrap();
        callback_gateway::auth::issue_token(&mut conn, MERCHANT)
            .await
            .unwrap()
    };
    let response = reqwest::Client::new()
        .post(format!(
            "{}/v1/orders/{order_id}/refunds",
            gateway.address()
        ))
        .bearer_auth(&token)
        .header("Idempotency-Key", "rf-traced")
        .header("Content-Type", "application/json")
        .body(format!(
            r#"{{"amount_minor":{amount},"reason":"requested_by_customer"}}"#
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{}", response.text().await.unwrap());
    let call = provider.calls().remove(0);
    let traceparent = call.traceparent.expect("the provider call's traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    let (trace_id, span_id) = (parts[1].to_owned(), parts[2].to_owned());
    let spans = receiver
        .until("the refund request's trace", |spans| {
            spans.iter().any(|s| s.span_id == span_id)
                && spans
                    .iter()
                    .any(|s| s.trace_id == trace_id && s.parent_span_id.is_empty())
        })
        .await;
    let root = spans
        .iter()
        .find(|s| s.trace_id == trace_id && s.parent_span_id.is_empty())
        .unwrap();
    assert_eq!(root.name, "POST /v1/orders/{id}/refunds");
    let call_span = child(&spans, root, "refund");
    assert_eq!(
        call_span.span_id, span_id,
        "the call's traceparent names its span"
    );
}

#[tokio::test]
async fn a_sampled_out_request_is_not_traced_and_a_trusted_callers_sampled_flag_decides() {
    let receiver = OtlpReceiver::start().await;
    // One request in a million is sampled on its own: in practice none of these. The callers
    // are trusted to decide (a mesh of the operator's own services).
    let gateway = GatewayProcess::spawn(&traced(
        &receiver.endpoint,
        "sample_ratio = 0.000001\ntrust_incoming_sampling = true\n",
    ))
    .await;
    let db = connect(&gateway.database_url).await;
    let orders = insert_orders(&db, 3).await;
    let unsampled = Event::payment("evt_unsampled", orders[0].0, orders[0].1);
    let refused = Event::payment("evt_caller_says_no", orders[1].0, orders[1].1);
    let wanted = Event::payment("evt_caller_says_yes", orders[2].0, orders[2].1);
    assert_eq!(deliver(&gateway, &unsampled, None).await.0, 200);
    let no = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    assert_eq!(deliver(&gateway, &refused, Some(no)).await.0, 200);
    let yes = "00-0af7651916cd43dd8448eb211c80319d-b7ad6b7169203332-01";
    assert_eq!(deliver(&gateway, &wanted, Some(yes)).await.0, 200);

    // The caller's sampled trace is exported whole, and after it nothing else came.
    let spans = receiver
        .until("the sampled request's trace", |spans| {
            request_span(spans, &wanted.id).is_some()
                && spans.iter().any(|s| s.name == "capture_statement")
        })
        .await;
    let root = request_span(&spans, &wanted.id).unwrap();
    assert_eq!(root.trace_id, "0af7651916cd43dd8448eb211c80319d");
    child(&spans, root, "write");
    assert!(
        spans
            .iter()
            .all(|s| s.trace_id == root.trace_id || s.name == "GET /readyz"),
        "only the sampled request is traced: {spans:#?}"
    );
    for (event, expected) in [
        (&unsampled, serde_json::Value::Null),
        (&refused, serde_json::Value::Null),
        (&wanted, serde_json::json!(root.trace_id)),
    ] {
        let detail = admin_json(&gateway, &format!("/admin/events/{ACME}/{}", event.id)).await;
        assert_eq!(detail["trace_id"], expected, "{}", event.id);
    }
}

#[tokio::test]
async fn an_untrusted_callers_sampled_flag_is_honoured_only_within_the_sample_ratio() {
    let receiver = OtlpReceiver::start().await;
    let gateway =
        GatewayProcess::spawn(&traced(&receiver.endpoint, "sample_ratio = 0.000001\n")).await;
    let db = connect(&gateway.database_url).await;
    let orders = insert_orders(&db, 2).await;
    let forced = Event::payment("evt_caller_forces", orders[0].0, orders[0].1);
    let chosen = "0af7651916cd43dd8448eb211c80319e";
    let sampled = format!("00-{chosen}-b7ad6b7169203333-01");
    assert_eq!(deliver(&gateway, &forced, Some(&sampled)).await.0, 200);
    let detail = admin_json(&gateway, &format!("/admin/events/{ACME}/{}", forced.id)).await;
    assert_eq!(
        detail["trace_id"],
        serde_json::Value::Null,
        "a caller's sampled flag does not force a trace, nor choose the stored trace id"
    );
    // A caller that says "not sampled" is still obeyed.
    let declined = Event::payment("evt_caller_declines", orders[1].0, orders[1].1);
    let no = "00-0af7651916cd43dd8448eb211c80319f-b7ad6b7169203334-00";
    assert_eq!(deliver(&gateway, &declined, Some(no)).await.0, 200);
    let detail = admin_json(&gateway, &format!("/admin/events/{ACME}/{}", declined.id)).await;
    assert_eq!(detail["trace_id"], serde_json::Value::Null);
}
