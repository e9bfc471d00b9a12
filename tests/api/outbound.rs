//! Outgoing requests (issue 53): no client reads proxy settings from the environment, every
//! outgoing request goes through the one checked resolver and address policy, and an
//! exemption names an origin for the merchant it was written for. Through the real binary.

use serde_json::json;

use crate::endpoints::{KEY, call, create, merchant_token, ping, until_loaded};
use crate::support::gateway::GatewayProcess;
use crate::support::listener::CountingListener;
use crate::support::otlp::OtlpReceiver;
use crate::support::provider::FakeProvider;
use crate::support::proxy::LoggingProxy;
use crate::support::{
    ACME, MERCHANT, OTHER_MERCHANT, THIRD_MERCHANT, config_with, connect, fresh_database,
    refund_config, sign, until,
};

/// The key, plain http by API, quick polls and retries far apart (a refused attempt stays
/// failing, to be looked at).
fn outbound_config(extra: &str) -> String {
    format!(
        "[secrets]\nkey = \"{KEY}\"\n[notifications]\nallow_http = true\npoll_interval_ms = 100\n\
         retry_delays_ms = [60000]\nattempt_timeout_ms = 2000\n{extra}"
    )
}

/// The notification's (status, attempts, last_error) once an attempt has ended.
/// `token`'s endpoint at `url` is refused as it is made: 400 `address_not_allowed`, nothing
/// stored (the sender holds the same rule for what reaches the table otherwise: the endpoints
/// tests move a stored endpoint there in SQL).
async fn refused_at_creation(gateway: &GatewayProcess, token: &str, url: &str) {
    let (status, refused) = call(
        gateway,
        reqwest::Method::POST,
        token,
        "/v1/webhook-endpoints",
        Some(json!({"url": url})),
    )
    .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("address_not_allowed")),
        "{url}: {refused}"
    );
}

async fn attempted(db: &tokio_postgres::Client, id: i64) -> (String, i32, Option<String>) {
    let read = async || {
        let row = db
            .query_one(
                "SELECT status, attempts, last_error FROM merchant_notifications WHERE id = $1",
                &[&id],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    // A claim counts the attempt before it is made; its result is the status or the error.
    until(&format!("an attempt of notification {id}"), async || {
        let (status, _, error): (String, i32, Option<String>) = read().await;
        error.is_some() || status == "delivered"
    })
    .await;
    read().await
}

/// A capture of a new order of merchant 42 through `acme`; returns the order.
async fn paid_order(gateway: &GatewayProcess, db: &tokio_postgres::Client) -> i64 {
    let order: i64 = db
        .query_one(
            "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 1000, 'USD') RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let event_id = format!("evt_paid_{order}");
    let body = format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","data":{{"payment_id":"pay_{order}","order_id":{order},"amount_minor":1000,"currency":"USD"}}}}"#
    );
    let (headers, body) = sign::signed_now(ACME, &event_id, &body);
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_proxy_variables_set_no_outgoing_request_reaches_the_proxy_and_every_rule_holds() {
    let proxy = LoggingProxy::start().await;
    let internal = CountingListener::start("127.0.0.1").unwrap();
    let provider = FakeProvider::start().await;
    let otlp = OtlpReceiver::start().await;
    let database_url = fresh_database().await;
    let extra = format!(
        "{}\n[telemetry]\notlp_endpoint = \"{}\"\nexport_interval_ms = 20\n",
        outbound_config(""),
        otlp.endpoint
    );
    let config = config_with(&database_url, &refund_config(&provider.base_url, &extra));
    let proxy_env = [
        ("HTTPS_PROXY", proxy.url.as_str()),
        ("HTTP_PROXY", proxy.url.as_str()),
        ("ALL_PROXY", proxy.url.as_str()),
        ("https_proxy", proxy.url.as_str()),
        ("http_proxy", proxy.url.as_str()),
        ("all_proxy", proxy.url.as_str()),
        ("NO_PROXY", ""),
        ("no_proxy", ""),
    ];
    let gateway = GatewayProcess::spawn_on_with_env(&database_url, &config, &proxy_env).await;
    let db = connect(&database_url).await;

    // Two merchants' endpoints on a name that resolves to an internal service, over plain
    // http (HTTP_PROXY) and https (HTTPS_PROXY: a CONNECT).
    let mut pings = Vec::new();
    for (merchant, scheme) in [(MERCHANT, "http"), (OTHER_MERCHANT, "https")] {
        let token = merchant_token(&database_url, merchant);
        let url = format!("{scheme}://localhost:{}/hooks", internal.port);
        let created = create(&gateway, &token, &url).await;
        until_loaded(&gateway, &db).await;
        pings.push((
            url,
            ping(&gateway, &token, created["id"].as_str().unwrap()).await,
        ));
    }
    for (url, id) in &pings {
        let (status, _, error) = attempted(&db, *id).await;
        assert_eq!(
            (status.as_str(), error.as_deref()),
            ("pending", Some("address_not_allowed")),
            "{url} is refused, never sent"
        );
    }

    // A refund call to the provider's API (an address the operator named in api_base_url)
    // goes straight to it.
    let order = paid_order(&gateway, &db).await;
    let token = merchant_token(&database_url, MERCHANT);
    let refund = reqwest::Client::new()
        .post(format!("{}/v1/orders/{order}/refunds", gateway.address()))
        .bearer_auth(&token)
        .header("Idempotency-Key", "rf-proxy")
        .json(&json!({"amount_minor": 300, "reason": "requested_by_customer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refund.status(), 202, "{}", refund.text().await.unwrap());
    assert_eq!(
        provider.calls().len(),
        1,
        "the provider got the refund call"
    );

    // Traces reach the collector the operator named, straight.
    otlp.until("spans exported", |spans| !spans.is_empty())
        .await;

    assert_eq!(
        proxy.lines(),
        Vec::<String>::new(),
        "no request reached the proxy named by the environment"
    );
    assert_eq!(
        internal.accepted(),
        0,
        "nothing reached the internal service"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_endpoints_host_is_exempt_for_its_own_merchant_and_origin_only() {
    // Merchant 43's endpoint in the configuration file is on 127.0.0.2 (a loopback address
    // the operator named for it).
    let file_endpoint = CountingListener::start("127.0.0.2").unwrap();
    let other_port = CountingListener::start("127.0.0.2").unwrap();
    let database_url = fresh_database().await;
    let merchants = format!(
        "[[merchants]]\nid = {OTHER_MERCHANT}\nnotify_url = \"http://127.0.0.2:{}/file-hooks\"\n\
         notify_secret = \"{}\"\n",
        file_endpoint.port,
        crate::support::receiver::MERCHANT_WHSEC
    );
    let config = config_with(&database_url, &outbound_config(&merchants));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;

    // Another merchant naming that host, on another port: refused (merchant 42 may not use
    // merchant 43's exemption).
    let token = merchant_token(&database_url, MERCHANT);
    refused_at_creation(
        &gateway,
        &token,
        &format!("http://127.0.0.2:{}/hooks", other_port.port),
    )
    .await;
    // Another merchant naming the very origin of the file endpoint: refused too.
    let third = merchant_token(&database_url, THIRD_MERCHANT);
    refused_at_creation(
        &gateway,
        &third,
        &format!("http://127.0.0.2:{}/stolen", file_endpoint.port),
    )
    .await;

    // Merchant 43 itself, by API: another port of the host is not its origin.
    let own = merchant_token(&database_url, OTHER_MERCHANT);
    refused_at_creation(
        &gateway,
        &own,
        &format!("http://127.0.0.2:{}/hooks", other_port.port),
    )
    .await;
    assert_eq!(other_port.accepted(), 0, "nothing reached the other port");
    assert_eq!(file_endpoint.accepted(), 0);

    // Its own origin, any path: delivered.
    let created = create(
        &gateway,
        &own,
        &format!("http://127.0.0.2:{}/by-api", file_endpoint.port),
    )
    .await;
    let endpoint_id = created["id"].as_str().unwrap().to_owned();
    until_loaded(&gateway, &db).await;
    let id = ping(&gateway, &own, &endpoint_id).await;
    let (status, _, _) = attempted(&db, id).await;
    assert_eq!(status, "delivered");
    assert_eq!(file_endpoint.accepted(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_hosts_names_an_origin_for_one_merchant() {
    let allowed = CountingListener::start("127.0.0.2").unwrap();
    let elsewhere = CountingListener::start("127.0.0.2").unwrap();
    let database_url = fresh_database().await;
    let merchants = format!(
        "[[merchants]]\nid = {MERCHANT}\nallow_hosts = [\"http://127.0.0.2:{}\"]\n",
        allowed.port
    );
    let config = config_with(&database_url, &outbound_config(&merchants));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;

    let delivered = async |merchant: i64, port: u16| {
        let token = merchant_token(&database_url, merchant);
        let created = create(&gateway, &token, &format!("http://127.0.0.2:{port}/h")).await;
        until_loaded(&gateway, &db).await;
        let id = ping(&gateway, &token, created["id"].as_str().unwrap()).await;
        attempted(&db, id).await
    };
    let (status, _, _) = delivered(MERCHANT, allowed.port).await;
    assert_eq!(status, "delivered", "merchant 42's own exemption");
    // Another merchant's exemption is not this one's.
    let other = merchant_token(&database_url, OTHER_MERCHANT);
    refused_at_creation(
        &gateway,
        &other,
        &format!("http://127.0.0.2:{}/h", allowed.port),
    )
    .await;
    assert_eq!(allowed.accepted(), 1);

    // The same host on another port is another origin.
    let token = merchant_token(&database_url, MERCHANT);
    let (_, list) = call(
        &gateway,
        reqwest::Method::GET,
        &token,
        "/v1/webhook-endpoints",
        None,
    )
    .await;
    let id = list["endpoints"][0]["id"].as_str().unwrap().to_owned();
    let (status, refused) = call(
        &gateway,
        reqwest::Method::PATCH,
        &token,
        &format!("/v1/webhook-endpoints/{id}"),
        Some(json!({"url": format!("http://127.0.0.2:{}/h", elsewhere.port)})),
    )
    .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (400, Some("address_not_allowed"))
    );
    assert_eq!(elsewhere.accepted(), 0);

    // The old global form is refused with a reason (it exempted a host for every merchant).
    let old = config_with(
        &database_url,
        "[notifications]\nallow_hosts = [\"127.0.0.2\"]\n",
    );
    let output = crate::endpoints::cli(&database_url, Some(&old), &["check-config"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("[[merchants]]"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merchant_cannot_tell_an_internal_name_from_one_that_does_not_exist() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &outbound_config(""));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let mut seen = Vec::new();
    for (merchant, url) in [
        // A name that exists inside the network (it resolves to loopback) ...
        (MERCHANT, "https://localhost:9/hooks"),
        // ... and one that exists nowhere.
        (OTHER_MERCHANT, "https://no-such-host.invalid/hooks"),
    ] {
        let token = merchant_token(&database_url, merchant);
        let created = create(&gateway, &token, url).await;
        until_loaded(&gateway, &db).await;
        let id = ping(&gateway, &token, created["id"].as_str().unwrap()).await;
        attempted(&db, id).await;
        let (status, list) = call(
            &gateway,
            reqwest::Method::GET,
            &token,
            "/v1/notifications",
            None,
        )
        .await;
        assert_eq!(status, 200, "{list}");
        seen.push((url, list["notifications"][0]["last_error"].clone()));
    }
    assert_eq!(
        seen[0].1, seen[1].1,
        "the merchant sees the same error for both: {seen:?}"
    );
}
