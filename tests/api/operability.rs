//! What on-call sees: /metrics after traffic, and JSON request logs that never carry a secret.

use std::process::Stdio;

use crate::support::sign::sign_now;
use crate::support::{
    ACME, ACME_SECRET, ADMIN_TOKEN, MERCHANT, PLAIN_SECRET, STRIPE_SECRET, base_config,
    metric_sample as sample, spawn_app,
};

#[tokio::test]
async fn metrics_count_requests_by_route_status_and_outcome() {
    let app = spawn_app().await;
    let token = app.token_for(MERCHANT).await;
    let order_body = r#"{"amount_minor":1999,"currency":"USD"}"#;
    app.post_order(&token, "k1", order_body).await;
    app.post_order(&token, "k1", order_body).await;
    let order = app.create_order(MERCHANT, 500, "USD").await;
    let event = format!(
        r#"{{"id":"e1","type":"payment.succeeded","data":{{"payment_id":"p1","order_id":{order},"amount_minor":500,"currency":"USD"}}}}"#
    );
    app.deliver(ACME, "m1", &event).await;
    app.deliver(ACME, "m1", &event).await;
    app.post_callback(ACME, &[], &event).await;

    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let metrics = response.text().await.unwrap();
    let requests = "gateway_http_requests_total";
    let expectations: [(&[(&str, &str)], f64); 5] = [
        (
            &[
                ("route", "/v1/orders"),
                ("status", "201"),
                ("outcome", "first"),
            ],
            2.0,
        ),
        (
            &[
                ("route", "/v1/orders"),
                ("status", "201"),
                ("outcome", "replayed"),
            ],
            1.0,
        ),
        (
            &[
                ("route", "/v1/callbacks/{provider}"),
                ("status", "200"),
                ("outcome", "applied"),
            ],
            1.0,
        ),
        (
            &[
                ("route", "/v1/callbacks/{provider}"),
                ("status", "200"),
                ("outcome", "replayed"),
            ],
            1.0,
        ),
        (
            &[
                ("route", "/v1/callbacks/{provider}"),
                ("status", "401"),
                ("outcome", "invalid_signature"),
            ],
            1.0,
        ),
    ];
    for (labels, expected) in expectations {
        assert_eq!(
            sample(&metrics, requests, labels),
            Some(expected),
            "{labels:?} in\n{metrics}"
        );
    }
    assert!(
        sample(
            &metrics,
            "gateway_http_request_duration_seconds_count",
            &[("route", "/v1/orders")]
        )
        .unwrap()
            >= 3.0
    );
    assert_eq!(
        sample(&metrics, "gateway_db_pool", &[("state", "max")]),
        Some(16.0)
    );
    assert!(sample(&metrics, "gateway_db_pool", &[("state", "open")]).unwrap() >= 1.0);
    assert_eq!(
        sample(
            &metrics,
            "gateway_provider_timestamp_skew_seconds_count",
            &[("provider", ACME)]
        ),
        Some(2.0),
        "the two verified deliveries"
    );
    assert!(metrics.contains("gateway_cleanup_deleted_total"));
}

#[tokio::test]
async fn json_logs_carry_request_fields_and_no_secret() {
    let app = spawn_app().await;
    let token = app.token_for(MERCHANT).await;
    let order = app.create_order(MERCHANT, 500, "USD").await;
    let event = format!(
        r#"{{"id":"e1","type":"payment.succeeded","data":{{"payment_id":"p1","order_id":{order},"amount_minor":500,"currency":"USD"}}}}"#
    );
    let signed = sign_now(ACME, "m-log", &event);
    let signature = signed
        .iter()
        .find(|(k, _)| k == "webhook-signature")
        .unwrap()
        .1
        .clone();

    // The real binary, at debug level, on the same database.
    let dir = std::env::temp_dir().join(format!("cg-logs-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("gateway.toml");
    std::fs::write(&config, base_config(&app.database_url)).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .args([
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--no-migrate",
        ])
        .env("DATABASE_URL", &app.database_url)
        .env("GATEWAY_BIND", format!("127.0.0.1:{port}"))
        .env("GATEWAY_LOG_FORMAT", "json")
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Read the log while the gateway runs: at debug level it fills a pipe's 64 KiB within
    // seconds, and a gateway blocked on writing its log answers nothing (the test then hung).
    let mut stderr = child.stderr.take().unwrap();
    let log = tokio::spawn(async move {
        let mut bytes = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut bytes)
            .await
            .unwrap();
        bytes
    });
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let ready = async {
        loop {
            if let Ok(r) = client.get(format!("{base}/readyz")).send().await
                && r.status() == 200
            {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), ready)
        .await
        .expect("the gateway never became ready");

    let mut request = client
        .post(format!("{base}/v1/callbacks/{ACME}"))
        .body(event.clone());
    for (k, v) in &signed {
        request = request.header(k, v);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    let orders = client
        .post(format!("{base}/v1/orders"))
        .bearer_auth(&token)
        .header("Idempotency-Key", "log-key")
        .body(r#"{"amount_minor":1,"currency":"USD"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(orders.status(), 201);
    let admin = client
        .get(format!("{base}/admin/merchants/{MERCHANT}/balances"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(admin.status(), 200);
    let refused = client
        .get(format!("{base}/admin/merchants/{MERCHANT}/balances"))
        .bearer_auth("wrong-admin-token-value")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let log = log.await.unwrap();
    let logs = String::from_utf8_lossy(&log);
    let _ = std::fs::remove_dir_all(&dir);

    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect();
    let callback = lines
        .iter()
        .find(|l| l["message"] == "request finished" && l["route"] == "/v1/callbacks/{provider}")
        .unwrap_or_else(|| panic!("no request line for the callback in:\n{logs}"));
    assert_eq!(callback["status"], 200);
    assert_eq!(callback["outcome"], "applied");
    assert!(callback["latency_ms"].as_f64().is_some());
    assert_eq!(callback["span"]["provider"], ACME, "{callback}");
    assert_eq!(callback["span"]["event_id"], "m-log", "{callback}");
    assert!(callback["span"]["request_id"].is_string(), "{callback}");

    for secret in [
        token.as_str(),
        ADMIN_TOKEN,
        "wrong-admin-token-value",
        ACME_SECRET,
        STRIPE_SECRET,
        PLAIN_SECRET,
        signature.as_str(),
    ] {
        assert!(!logs.contains(secret), "a secret reached the log: {secret}");
    }
}

#[tokio::test]
async fn the_openapi_document_covers_every_endpoint_and_error_code() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/openapi.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let doc: serde_json::Value = response.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for (path, method) in [
        ("/v1/orders", "post"),
        ("/v1/orders/{id}", "get"),
        ("/v1/callbacks/{provider}", "post"),
        ("/admin/idempotency/{user_id}/{op}/{key}", "get"),
        ("/admin/merchants/{merchant_id}/balances", "get"),
        ("/admin/notifications", "get"),
        ("/admin/notifications/{id}/redeliver", "post"),
        (
            "/admin/merchants/{merchant_id}/notifications/redeliver",
            "post",
        ),
        ("/admin/merchants/{merchant_id}/endpoint/enable", "post"),
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} is not documented"
        );
    }
    let text = doc.to_string();
    for code in [
        "unauthorized",
        "missing_idempotency_key",
        "invalid_idempotency_key",
        "payload_too_large",
        "idempotency_key_in_flight",
        "key_reused_with_different_body",
        "invalid_amount",
        "unknown_currency",
        "unknown_provider",
        "invalid_signature",
        "invalid_payload",
        "out_of_order",
        "unavailable",
        "Idempotency-Key",
        "Stripe-Signature",
        "webhook-signature",
    ] {
        assert!(text.contains(code), "{code} is not in the OpenAPI document");
    }
}
