//! Merchant endpoints by API (issue 39), through the real binary: an endpoint made by API
//! reaches every running gateway without a restart; a rotated secret signs beside the new one
//! for the overlap, checked with the official Python library; secrets are sealed at rest; the
//! sender never connects where the operator did not allow; bad input stores nothing.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::notifications::capture;
use crate::support::gateway::GatewayProcess;
use crate::support::receiver::{Delivery, Receiver};
use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, config_with, connect, fresh_database, sign, until,
};

/// `[secrets] key`: 32 bytes, base64 (a test value).
pub(crate) const KEY: &str = "dGVzdC1zZWNyZXRzLWtleS0zMi1ieXRlcy1sb25nISE=";
/// Another 32-byte key, for `secrets rekey`.
pub(crate) const OTHER_KEY: &str = "YW5vdGhlci10ZXN0LWtleS0zMi1ieXRlcy1sb25nISE=";

/// The settings these tests add: the key, plain http by API, quick polls, and retries far
/// apart (a refused attempt stays failing to be looked at); `grants` gives a merchant an origin
/// its endpoints may reach though its address is refused (`[[merchants]] allow_hosts`).
fn endpoints_config(key: Option<&str>, grants: &[(i64, &str)]) -> String {
    let key = key.map_or_else(String::new, |k| format!("[secrets]\nkey = \"{k}\"\n"));
    let merchants: String = grants
        .iter()
        .map(|(merchant, origin)| {
            format!("[[merchants]]\nid = {merchant}\nallow_hosts = [\"{origin}\"]\n")
        })
        .collect();
    format!(
        "{key}[notifications]\nallow_http = true\npoll_interval_ms = 100\n\
         retry_delays_ms = [60000]\nattempt_timeout_ms = 2000\n{merchants}"
    )
}

pub(crate) fn cli(
    database_url: &str,
    config: Option<&str>,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let dir = std::env::temp_dir().join(format!("cg-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut command = Command::new(crate::support::gateway::gateway_binary());
    if let Some(config) = config {
        std::fs::write(dir.join("gateway.toml"), config).unwrap();
        command.arg("--config").arg(dir.join("gateway.toml"));
    }
    command
        .args(args)
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", database_url);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    output
}

pub(crate) fn merchant_token(database_url: &str, merchant: i64) -> String {
    let output = cli(
        database_url,
        None,
        &["token", "issue", "--user-id", &merchant.to_string()],
        &[],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

pub(crate) async fn call(
    gateway: &GatewayProcess,
    method: reqwest::Method,
    token: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", gateway.address()))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn create(gateway: &GatewayProcess, token: &str, url: &str) -> Value {
    let (status, created) = call(
        gateway,
        reqwest::Method::POST,
        token,
        "/v1/webhook-endpoints",
        Some(json!({"url": url, "description": "orders"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created
}

pub(crate) async fn ping(gateway: &GatewayProcess, token: &str, id: &str) -> i64 {
    let (status, pinged) = call(
        gateway,
        reqwest::Method::POST,
        token,
        &format!("/v1/webhook-endpoints/{id}/test"),
        None,
    )
    .await;
    assert_eq!(status, 202, "{pinged}");
    pinged["notification_id"].as_i64().unwrap()
}

pub(crate) async fn metric(gateway: &GatewayProcess, line_start: &str) -> Option<f64> {
    let text = reqwest::get(format!("{}/metrics", gateway.address()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Waits until `gateway` holds the database's revision of the endpoints.
pub(crate) async fn until_loaded(gateway: &GatewayProcess, db: &tokio_postgres::Client) {
    let revision: i64 = db
        .query_one("SELECT revision FROM webhook_endpoint_revision", &[])
        .await
        .unwrap()
        .get(0);
    until("the gateway to load the endpoints' revision", async || {
        metric(gateway, "gateway_webhook_endpoints_revision ").await == Some(revision as f64)
    })
    .await;
}

/// The official Python `standardwebhooks` library's verdict on `delivery` under `secret`.
pub(crate) fn python_verifies(secret: &str, delivery: &Delivery) -> bool {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/standard_webhooks_verify.py"
    );
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = json!({
        "secret": secret,
        "id": delivery.webhook_id,
        "timestamp": delivery.timestamp,
        "signature": delivery.signature,
        "body": delivery.body,
    });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_ne!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.status.success()
}

pub(crate) async fn deliver_capture(
    gateway: &GatewayProcess,
    db: &tokio_postgres::Client,
    n: usize,
) {
    let order: i64 = db
        .query_one(
            "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 700, 'USD') RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let event_id = format!("evt_ep_{n}_{order}");
    let body = capture(&event_id, &format!("pay_{order}"), order, 700);
    let (headers, body) = sign::signed_now(ACME, &event_id, &body);
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_made_by_api_reaches_both_running_gateways_and_gets_their_captures() {
    let database_url = fresh_database().await;
    let receiver = Receiver::start("whsec_bm90LXRoZS1zZWNyZXQtb2YtdGhpcy1lbmRwb2ludA==").await;
    let config = config_with(
        &database_url,
        &endpoints_config(Some(KEY), &[(MERCHANT, &receiver.origin())]),
    );
    let a = GatewayProcess::spawn_on(&database_url, &config).await;
    let b = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);

    let created_at = Instant::now();
    let created = create(&a, &token, &receiver.url).await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    assert_eq!(created["status"], "enabled");
    assert!(created["id"].as_str().unwrap().starts_with("ep_"));
    until_loaded(&a, &db).await;
    until_loaded(&b, &db).await;
    let reached = created_at.elapsed();
    assert!(
        reached < Duration::from_secs(5),
        "the contract's bound: every gateway within 5 s, took {reached:?}"
    );

    // Captures through either gateway: each one's notification arrives, signed with the
    // endpoint's secret, and both gateways' senders send.
    for n in 0..10 {
        deliver_capture(&a, &db, n).await;
        deliver_capture(&b, &db, n + 100).await;
    }
    let hooks = receiver.until_hooks(20).await;
    for hook in &hooks {
        assert_eq!(hook.kind(), "order.paid");
        assert!(python_verifies(&secret, hook), "{hook:?}");
    }
    for gateway in [&a, &b] {
        let sent = metric(
            gateway,
            "gateway_notification_attempts_total{result=\"delivered\"}",
        )
        .await
        .unwrap_or(0.0);
        assert!(sent > 0.0, "each gateway's sender sent some ({sent})");
    }
    // Another merchant sees nothing of it and cannot touch it.
    let other = merchant_token(&database_url, 43);
    let id = created["id"].as_str().unwrap();
    let (_, list) = call(
        &a,
        reqwest::Method::GET,
        &other,
        "/v1/webhook-endpoints",
        None,
    )
    .await;
    assert_eq!(list["endpoints"], json!([]));
    for (method, path) in [
        (
            reqwest::Method::PATCH,
            format!("/v1/webhook-endpoints/{id}"),
        ),
        (
            reqwest::Method::DELETE,
            format!("/v1/webhook-endpoints/{id}"),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/webhook-endpoints/{id}/rotate-secret"),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/webhook-endpoints/{id}/test"),
        ),
    ] {
        let (status, body) = call(&a, method, &other, &path, Some(json!({}))).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (404, Some("endpoint_not_found")),
            "{path}"
        );
    }
    let (_, list) = call(
        &a,
        reqwest::Method::GET,
        &token,
        "/v1/webhook-endpoints",
        None,
    )
    .await;
    assert!(
        list["endpoints"][0].get("secret").is_none(),
        "a list never shows a secret"
    );
    let rows: i64 = db
        .query_one(
            "SELECT count(*) FROM audit_log WHERE action = 'webhook_endpoint.create' AND actor = 'merchant:42' AND role = 'merchant'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_signs_beside_the_new_one_for_the_overlap_and_then_stops() {
    let database_url = fresh_database().await;
    let receiver = Receiver::start("whsec_bm90LXRoZS1zZWNyZXQtb2YtdGhpcy1lbmRwb2ludA==").await;
    let config = config_with(
        &database_url,
        &endpoints_config(Some(KEY), &[(MERCHANT, &receiver.origin())]),
    );
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let created = create(&gateway, &token, &receiver.url).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let old = created["secret"].as_str().unwrap().to_owned();

    let (status, rotated) = call(
        &gateway,
        reqwest::Method::POST,
        &token,
        &format!("/v1/webhook-endpoints/{id}/rotate-secret"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert!(
        rotated["previous_secret_expires_at"].is_string(),
        "{rotated}"
    );
    until_loaded(&gateway, &db).await;
    ping(&gateway, &token, &id).await;
    let during = receiver.until_hooks(1).await.remove(0);
    assert_eq!(during.kind(), "ping");
    assert_eq!(during.json["data"]["endpoint_id"], id.as_str());
    assert_eq!(
        during.signature.split(' ').count(),
        2,
        "{}",
        during.signature
    );
    assert!(
        python_verifies(&new, &during),
        "the new secret verifies during the overlap"
    );
    assert!(python_verifies(&old, &during), "so does the old one");

    // The overlap ends (time passes: its end moved into the past, as 24 h later).
    db.batch_execute(
        "UPDATE webhook_endpoints SET previous_secret_until = now() - interval '1 second'; \
         UPDATE webhook_endpoint_revision SET revision = revision + 1",
    )
    .await
    .unwrap();
    until_loaded(&gateway, &db).await;
    ping(&gateway, &token, &id).await;
    let after = receiver.until_hooks(2).await.remove(1);
    assert_eq!(after.signature.split(' ').count(), 1);
    assert!(python_verifies(&new, &after));
    assert!(
        !python_verifies(&old, &after),
        "after the overlap only the new one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_dump_holds_no_usable_endpoint_secret() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let token = merchant_token(&database_url, MERCHANT);
    let created = create(&gateway, &token, "https://merchant.example/hooks").await;
    let id = created["id"].as_str().unwrap();
    let (_, rotated) = call(
        &gateway,
        reqwest::Method::POST,
        &token,
        &format!("/v1/webhook-endpoints/{id}/rotate-secret"),
        None,
    )
    .await;
    let dump = pg_dump(&database_url);
    assert!(dump.contains(id), "the dump holds the endpoint's row");
    for secret in [
        created["secret"].as_str().unwrap(),
        rotated["secret"].as_str().unwrap(),
    ] {
        let encoded = secret.trim_start_matches("whsec_");
        let key = STANDARD.decode(encoded).unwrap();
        for needle in [
            secret.to_owned(),
            encoded.to_owned(),
            hex::encode(&key),
            String::from_utf8_lossy(&key).into_owned(),
        ] {
            assert!(
                !dump.contains(&needle),
                "the dump holds a secret ({} chars)",
                needle.len()
            );
        }
        // bytea is dumped as hex: the secret's text in hex must not be there either.
        assert!(!dump.contains(&hex::encode(secret.as_bytes())));
    }
}

fn pg_dump(database_url: &str) -> String {
    let mut dirs: Vec<_> = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path().join("bin/pg_dump")))
        .filter(|p| p.exists())
        .collect();
    dirs.sort();
    let pg_dump = dirs.pop().expect("pg_dump is installed with PostgreSQL");
    let output = Command::new(pg_dump)
        .args(["--data-only", "--no-owner", database_url])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A listener that counts the connections made to it and answers none of them usefully.
struct Counting {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

impl Counting {
    fn start(address: &str) -> Option<Self> {
        let listener = TcpListener::bind((address, 0)).ok()?;
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
            }
        });
        Some(Self { port, accepted })
    }
}

/// An allowed host (127.0.0.2, named in allow_hosts) that answers every request with `302` to
/// `location`.
fn redirector(location: String) -> u16 {
    let listener = TcpListener::bind(("127.0.0.2", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 8192];
            let _ = stream.read(&mut buffer);
            let _ = stream.write_all(
                format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .as_bytes(),
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sender_never_connects_to_an_address_the_operator_did_not_allow() {
    let database_url = fresh_database().await;
    let v4 = Counting::start("127.0.0.1").unwrap();
    let v6 = Counting::start("::1");
    let v6_port = v6.as_ref().map_or(9, |c| c.port);
    let redirect_port = redirector(format!("http://127.0.0.1:{}/stolen", v4.port));
    let receiver = AllowedReceiver::start();
    // The redirector (merchant 1007) and the allowed receiver (merchant 2000) are origins the
    // operator named for those merchants.
    let redirect_origin = format!("http://127.0.0.2:{redirect_port}");
    let receiver_origin = receiver.url.trim_end_matches("/hooks").to_owned();
    let config = config_with(
        &database_url,
        &endpoints_config(
            Some(KEY),
            &[(1007, &redirect_origin), (2000, &receiver_origin)],
        ),
    );
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let table = [
        format!("http://127.0.0.1:{}/h", v4.port),
        format!("http://[::1]:{v6_port}/h"),
        "https://10.0.0.1/h".to_owned(),
        "https://169.254.169.254/latest/meta-data".to_owned(),
        "https://100.64.0.1/h".to_owned(),
        "https://[fd00::1]/h".to_owned(),
        format!("http://localhost:{}/h", v4.port),
        format!("http://127.0.0.2:{redirect_port}/h"),
    ];
    let mut notifications = Vec::new();
    for (i, url) in table.iter().enumerate() {
        let merchant = 1000 + i as i64;
        let token = merchant_token(&database_url, merchant);
        // The redirector's origin is granted to its merchant; a name is judged at the attempt.
        let redirector = merchant == 1007 || url.contains("localhost");
        let (status, refused) = call(
            &gateway,
            reqwest::Method::POST,
            &token,
            "/v1/webhook-endpoints",
            Some(json!({"url": url})),
        )
        .await;
        if redirector {
            // Made: where it points, or resolves, is refused at the attempt.
            assert_eq!(status, 201, "{refused}");
        } else {
            // Refused as it is made, whatever it would resolve to.
            assert_eq!(
                (status, refused["error"].as_str()),
                (400, Some("address_not_allowed")),
                "{url}"
            );
        }
        // The sender holds the same rules for what reached the table otherwise (stored before
        // the check, written by hand): the endpoint is made on a name and moved there in SQL.
        let created = if redirector {
            refused
        } else {
            let created = create(&gateway, &token, "https://merchant.example/h").await;
            db.execute(
                "UPDATE webhook_endpoints SET url = $1 WHERE id = $2",
                &[url, &created["id"].as_str().unwrap()],
            )
            .await
            .unwrap();
            db.execute(
                "UPDATE webhook_endpoint_revision SET revision = revision + 1",
                &[],
            )
            .await
            .unwrap();
            created
        };
        until_loaded(&gateway, &db).await;
        notifications.push((
            url.clone(),
            ping(&gateway, &token, created["id"].as_str().unwrap()).await,
        ));
    }
    for (url, id) in &notifications {
        until(&format!("the attempt at {url}"), async || {
            let row = db
                .query_one(
                    "SELECT attempts, last_error FROM merchant_notifications WHERE id = $1",
                    &[id],
                )
                .await
                .unwrap();
            row.get::<_, i32>(0) >= 1 && row.get::<_, Option<String>>(1).is_some()
        })
        .await;
        let error: Option<String> = db
            .query_one(
                "SELECT last_error FROM merchant_notifications WHERE id = $1",
                &[id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(error.as_deref(), Some("address_not_allowed"), "{url}");
    }
    assert_eq!(
        v4.accepted.load(Ordering::SeqCst),
        0,
        "nothing connected to 127.0.0.1"
    );
    if let Some(v6) = &v6 {
        assert_eq!(
            v6.accepted.load(Ordering::SeqCst),
            0,
            "nothing connected to ::1"
        );
    }
    // Each is listed in attention.
    let (status, attention) = call(
        &gateway,
        reqwest::Method::GET,
        ADMIN_TOKEN,
        "/admin/attention",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let listed: Vec<i64> = attention["refused_addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_i64().unwrap())
        .collect();
    for (url, id) in &notifications {
        assert!(listed.contains(id), "{url} is not in attention: {listed:?}");
    }

    // An allowed origin works: a receiver on 127.0.0.2 (named in merchant 2000's allow_hosts).
    let token = merchant_token(&database_url, 2000);
    let created = create(&gateway, &token, &receiver.url).await;
    until_loaded(&gateway, &db).await;
    let id = ping(&gateway, &token, created["id"].as_str().unwrap()).await;
    until("the allowed endpoint's delivery", async || {
        db.query_one(
            "SELECT status FROM merchant_notifications WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get::<_, String>(0)
            == "delivered"
    })
    .await;
    assert_eq!(receiver.accepted.load(Ordering::SeqCst), 1);
}

/// A receiver on 127.0.0.2 that answers 200 and counts.
struct AllowedReceiver {
    url: String,
    accepted: Arc<AtomicUsize>,
}

impl AllowedReceiver {
    fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.2", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = crate::support::listener::read_request(&mut stream);
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
            }
        });
        Self {
            url: format!("http://127.0.0.2:{port}/hooks"),
            accepted,
        }
    }
}

/// The peak resident set of process `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_answering_ten_mebibytes_is_cut_at_64_kib_and_the_sender_stays_small() {
    let database_url = fresh_database().await;
    // Answers 200 with a 10 MiB body, written in 64 KiB pieces; counts what it got to write
    // and whether any answer was written whole.
    let listener = TcpListener::bind(("127.0.0.2", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let origin = format!("http://127.0.0.2:{port}");
    let config = config_with(
        &database_url,
        &endpoints_config(Some(KEY), &[(MERCHANT, &origin)]),
    );
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let whole = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(AtomicUsize::new(0));
    let (w, a) = (whole.clone(), answered.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (w, a) = (w.clone(), a.clone());
            std::thread::spawn(move || {
                let mut stream = stream;
                let _ = crate::support::listener::read_request(&mut stream);
                a.fetch_add(1, Ordering::SeqCst);
                let size = 10 * 1024 * 1024;
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {size}\r\n\r\n");
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let piece = vec![b'x'; 64 * 1024];
                for _ in 0..(size / piece.len()) {
                    if stream.write_all(&piece).is_err() {
                        return;
                    }
                }
                w.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    let token = merchant_token(&database_url, MERCHANT);
    let created = create(&gateway, &token, &format!("http://127.0.0.2:{port}/hooks")).await;
    until_loaded(&gateway, &db).await;
    let before = peak_rss_kib(gateway.child.id());
    let id = created["id"].as_str().unwrap().to_owned();
    let mut pings = Vec::new();
    for _ in 0..16 {
        pings.push(ping(&gateway, &token, &id).await);
    }
    until("every ping delivered", async || {
        db.query_one(
            "SELECT count(*) FROM merchant_notifications WHERE kind = 'ping' AND status = 'delivered'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
            == 16
    })
    .await;
    assert_eq!(answered.load(Ordering::SeqCst), 16);
    assert_eq!(
        whole.load(Ordering::SeqCst),
        0,
        "no 10 MiB answer was read whole: the sender stopped reading and closed"
    );
    let grown = peak_rss_kib(gateway.child.id()).saturating_sub(before);
    assert!(
        grown < 32 * 1024,
        "sixteen 10 MiB answers grew the gateway's peak RSS by {grown} KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_endpoint_input_is_a_400_with_a_stable_code_and_stores_nothing() {
    let database_url = fresh_database().await;
    let mut config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    config = config.replace("allow_http = true", "allow_http = false");
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let long_url = format!("https://merchant.example/{}", "a".repeat(2048));
    for (body, code) in [
        (json!({"url": "not a url"}), "invalid_url"),
        (json!({"url": long_url}), "invalid_url"),
        (
            json!({"url": "http://merchant.example/hooks"}),
            "invalid_url",
        ),
        (
            json!({"url": "https://user:pw@merchant.example/hooks"}),
            "invalid_url",
        ),
        (
            json!({"url": "https://merchant.example/hooks", "description": "d".repeat(257)}),
            "invalid_description",
        ),
        (
            json!({"url": "https://merchant.example/hooks", "events": ["order.paid"]}),
            "invalid_request",
        ),
        (json!({"description": "no url"}), "invalid_request"),
        (
            json!({"url": "https://merchant.example/hooks", "filter_types": ["order.paid", "order.shipped"]}),
            "unknown_event_type",
        ),
        (
            json!({"url": "https://merchant.example/hooks", "filter_types": ["ping"]}),
            "unknown_event_type",
        ),
        (
            json!({"url": "https://merchant.example/hooks", "rate_limit_per_sec": 0}),
            "rate_out_of_range",
        ),
        (
            json!({"url": "https://merchant.example/hooks", "rate_limit_per_sec": 1001}),
            "rate_out_of_range",
        ),
        (
            json!({"url": "https://10.1.2.3/hooks"}),
            "address_not_allowed",
        ),
    ] {
        let (status, error) = call(
            &gateway,
            reqwest::Method::POST,
            &token,
            "/v1/webhook-endpoints",
            Some(body.clone()),
        )
        .await;
        assert_eq!(
            (status, error["error"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }
    let stored: i64 = db
        .query_one("SELECT (SELECT count(*) FROM webhook_endpoints) + (SELECT count(*) FROM audit_log WHERE action LIKE 'webhook_endpoint.%')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 0, "nothing stored, no audit row");
    // A change with bad input leaves the endpoint as it was.
    let created = create(&gateway, &token, "https://merchant.example/hooks").await;
    let id = created["id"].as_str().unwrap();
    let (status, error) = call(
        &gateway,
        reqwest::Method::PATCH,
        &token,
        &format!("/v1/webhook-endpoints/{id}"),
        Some(json!({"url": "ftp://x"})),
    )
    .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (400, Some("invalid_url"))
    );
    for change in [
        json!({"filter_types": ["order.paid", "nope"]}),
        json!({"rate_limit_per_sec": -5}),
        json!({"url": "https://[::1]/hooks"}),
    ] {
        let (status, error) = call(
            &gateway,
            reqwest::Method::PATCH,
            &token,
            &format!("/v1/webhook-endpoints/{id}"),
            Some(change.clone()),
        )
        .await;
        assert_eq!(status, 400, "{change}: {error}");
    }
    let url: String = db
        .query_one("SELECT url FROM webhook_endpoints", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(url, "https://merchant.example/hooks");
    // Disable and enable through PATCH; delete.
    let (status, disabled) = call(
        &gateway,
        reqwest::Method::PATCH,
        &token,
        &format!("/v1/webhook-endpoints/{id}"),
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!(
        (
            status,
            disabled["status"].as_str(),
            disabled["disabled_reason"].as_str()
        ),
        (200, Some("disabled"), Some("merchant"))
    );
    let (status, _) = call(
        &gateway,
        reqwest::Method::DELETE,
        &token,
        &format!("/v1/webhook-endpoints/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let actions: Vec<String> = db
        .query(
            "SELECT action FROM audit_log WHERE action LIKE 'webhook_endpoint.%' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        actions,
        [
            "webhook_endpoint.create",
            "webhook_endpoint.update",
            "webhook_endpoint.delete"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_key_endpoints_are_off_serve_refuses_and_rekey_reseals_every_secret() {
    let database_url = fresh_database().await;
    // No key: creating is 501, nothing stored.
    let gateway = GatewayProcess::spawn_on(
        &database_url,
        &config_with(&database_url, &endpoints_config(None, &[])),
    )
    .await;
    let token = merchant_token(&database_url, MERCHANT);
    let (status, error) = call(
        &gateway,
        reqwest::Method::POST,
        &token,
        "/v1/webhook-endpoints",
        Some(json!({"url": "https://merchant.example/"})),
    )
    .await;
    assert_eq!(
        (status, error["error"].as_str()),
        (501, Some("not_configured"))
    );
    drop(gateway);

    // With a key, an admin makes one for merchant 42.
    let with_key = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &with_key).await;
    let (status, created) = call(
        &gateway,
        reqwest::Method::POST,
        ADMIN_TOKEN,
        "/admin/merchants/42/webhook-endpoints",
        Some(json!({"url": "https://merchant.example/hooks"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    drop(gateway);

    // Now the key is required: check-config and serve say so (exit 2).
    let without = config_with(&database_url, &endpoints_config(None, &[]));
    let output = cli(&database_url, Some(&without), &["check-config"], &[]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stderr).contains("secrets.key is required"));
    let output = cli(
        &database_url,
        Some(&without),
        &["serve", "--no-migrate"],
        &[("GATEWAY_BIND", "127.0.0.1:0")],
    );
    assert_eq!(output.status.code(), Some(2));
    // A short key is refused by every command.
    let short = config_with(&database_url, &endpoints_config(Some("c2hvcnQ="), &[]));
    let output = cli(&database_url, Some(&short), &["check-config"], &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("secrets.key is 5 bytes"));

    // Rekey: a wrong old key changes nothing; the right one re-seals under the new key.
    let other = config_with(&database_url, &endpoints_config(Some(OTHER_KEY), &[]));
    let sealed = |db: tokio_postgres::Client| async move {
        db.query_one("SELECT secret_sealed FROM webhook_endpoints", &[])
            .await
            .unwrap()
            .get::<_, Vec<u8>>(0)
    };
    let before = sealed(connect(&database_url).await).await;
    let output = cli(
        &database_url,
        Some(&other),
        &["secrets", "rekey", "--old-key", "env:OLD"],
        &[("OLD", OTHER_KEY)],
    );
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("does not open the secret of endpoint"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        sealed(connect(&database_url).await).await,
        before,
        "nothing changed"
    );
    let output = cli(
        &database_url,
        Some(&other),
        &["secrets", "rekey", "--old-key", "env:OLD"],
        &[("OLD", KEY)],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_ne!(sealed(connect(&database_url).await).await, before);
    // The gateway under the new key opens it (loaded 1, unopened 0).
    let gateway = GatewayProcess::spawn_on(&database_url, &other).await;
    let db = connect(&database_url).await;
    until_loaded(&gateway, &db).await;
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"loaded\"}").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"unopened\"}").await,
        Some(0.0)
    );
    let rekeyed: i64 = db
        .query_one(
            "SELECT count(*) FROM audit_log WHERE action = 'secrets.rekey'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rekeyed, 1);
}

/// `POST /admin/merchants/{merchant}/endpoint/{action}` with the admin token.
async fn operator(gateway: &GatewayProcess, merchant: i64, action: &str) -> u16 {
    call(
        gateway,
        reqwest::Method::POST,
        ADMIN_TOKEN,
        &format!("/admin/merchants/{merchant}/endpoint/{action}"),
        None,
    )
    .await
    .0
}

/// An operator's disable is decided by the database, not by what this gateway has loaded: an
/// endpoint made a moment ago (through this gateway or another, loaded here up to a refresh
/// later) is disabled at once. Here its row is written without moving the endpoints' revision,
/// so this gateway never loads it: the moment before its reload, made to last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_disables_an_endpoint_this_gateway_has_not_loaded_yet() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    db.execute(
        "INSERT INTO webhook_endpoints (id, merchant_id, url, secret_sealed) \
         VALUES ('ep_0123456789abcdef01234567', $1, 'https://merchant.example/hooks', '\\x00')",
        &[&MERCHANT],
    )
    .await
    .unwrap();
    assert_eq!(operator(&gateway, MERCHANT, "disable").await, 200);
    let reason: Option<String> = db
        .query_one(
            "SELECT disabled_reason FROM notification_endpoints \
             WHERE merchant_id = $1 AND endpoint_id = 'ep_0123456789abcdef01234567'",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(reason.as_deref(), Some("operator"));
    assert_eq!(
        operator(&gateway, MERCHANT + 1000, "disable").await,
        404,
        "a merchant with no endpoint anywhere is still not found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_an_operator_disabled_stays_disabled_until_an_operator_enables_it() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let token = merchant_token(&database_url, MERCHANT);
    let created = create(&gateway, &token, "https://merchant.example/hooks").await;
    let id = created["id"].as_str().unwrap().to_owned();
    until_loaded(&gateway, &connect(&database_url).await).await;
    assert_eq!(operator(&gateway, MERCHANT, "disable").await, 200);

    let refused = |(status, body): (u16, Value)| {
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("endpoint_disabled_by_operator")),
            "{body}"
        );
    };
    // Enabling it again by PATCH, rotating its secret: refused.
    refused(
        call(
            &gateway,
            reqwest::Method::PATCH,
            &token,
            &format!("/v1/webhook-endpoints/{id}"),
            Some(json!({"disabled": false})),
        )
        .await,
    );
    refused(
        call(
            &gateway,
            reqwest::Method::POST,
            &token,
            &format!("/v1/webhook-endpoints/{id}/rotate-secret"),
            None,
        )
        .await,
    );
    let (status, list) = call(
        &gateway,
        reqwest::Method::GET,
        &token,
        "/v1/webhook-endpoints",
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            list["endpoints"][0]["status"].as_str(),
            list["endpoints"][0]["disabled_reason"].as_str()
        ),
        (Some("disabled"), Some("operator"))
    );
    // Deleting it is the merchant's own business; making a new one is not a way around it.
    let (status, _) = call(
        &gateway,
        reqwest::Method::DELETE,
        &token,
        &format!("/v1/webhook-endpoints/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    refused(
        call(
            &gateway,
            reqwest::Method::POST,
            &token,
            "/v1/webhook-endpoints",
            Some(json!({"url": "https://merchant.example/new-hooks"})),
        )
        .await,
    );
    // The operator lifts it; then the merchant makes its endpoint and changes it freely.
    assert_eq!(operator(&gateway, MERCHANT, "enable").await, 200);
    let created = create(&gateway, &token, "https://merchant.example/new-hooks").await;
    assert_eq!(created["status"], "enabled");
    let id = created["id"].as_str().unwrap();
    for disabled in [true, false] {
        let (status, body) = call(
            &gateway,
            reqwest::Method::PATCH,
            &token,
            &format!("/v1/webhook-endpoints/{id}"),
            Some(json!({"disabled": disabled})),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    // A merchant's own disable, then the operator's: the operator's reason holds.
    let (status, _) = call(
        &gateway,
        reqwest::Method::PATCH,
        &token,
        &format!("/v1/webhook-endpoints/{id}"),
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(operator(&gateway, MERCHANT, "disable").await, 200);
    refused(
        call(
            &gateway,
            reqwest::Method::PATCH,
            &token,
            &format!("/v1/webhook-endpoints/{id}"),
            Some(json!({"disabled": false})),
        )
        .await,
    );
}

/// The number of notifications of `kind` staged for `merchant`.
async fn staged(db: &tokio_postgres::Client, merchant: i64, kind: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM merchant_notifications WHERE merchant_id = $1 AND kind = $2",
        &[&merchant, &kind],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rekey_a_gateway_still_on_the_old_key_stages_every_notification() {
    let database_url = fresh_database().await;
    let old = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &old).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    create(&gateway, &token, "https://merchant.example/hooks").await;
    until_loaded(&gateway, &db).await;

    // The secrets are re-sealed under a new key; this gateway still holds the old one.
    let new = config_with(&database_url, &endpoints_config(Some(OTHER_KEY), &[]));
    let output = cli(
        &database_url,
        Some(&new),
        &["secrets", "rekey", "--old-key", "env:OLD"],
        &[("OLD", KEY)],
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    until_loaded(&gateway, &db).await;
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"unopened\"}").await,
        Some(1.0),
        "the gateway cannot open the secret and says so"
    );

    // A capture through it still stages the merchant's notification: it waits for a gateway
    // that can sign it.
    deliver_capture(&gateway, &db, 1).await;
    assert_eq!(
        staged(&db, MERCHANT, "order.paid").await,
        1,
        "the capture's notification is staged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_keys_open_secrets_sealed_under_an_earlier_key_and_new_seals_use_the_key() {
    let receiver = Receiver::start("whsec_bm90LXRoZS1zZWNyZXQtb2YtdGhpcy1lbmRwb2ludA==").await;
    let origin = receiver.origin();
    let database_url = fresh_database().await;
    let exempt = format!("[[merchants]]\nid = {MERCHANT}\nallow_hosts = [\"{origin}\"]\n");
    let old = config_with(
        &database_url,
        &format!("{}{exempt}", endpoints_config(Some(KEY), &[])),
    );
    let gateway = GatewayProcess::spawn_on(&database_url, &old).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let created = create(&gateway, &token, &receiver.url).await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    drop(gateway);

    // The new key, the old one kept as a previous key: the old seal opens.
    let rotated = config_with(
        &database_url,
        &format!(
            "[secrets]\nkey = \"{OTHER_KEY}\"\nprevious_keys = [\"env:OLD_SECRETS_KEY\"]\n{}{exempt}",
            endpoints_config(None, &[])
        ),
    );
    let gateway =
        GatewayProcess::spawn_on_with_env(&database_url, &rotated, &[("OLD_SECRETS_KEY", KEY)])
            .await;
    until_loaded(&gateway, &db).await;
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"unopened\"}").await,
        Some(0.0)
    );
    ping(&gateway, &token, &id).await;
    let delivered = receiver.until_hooks(1).await.remove(0);
    assert!(
        python_verifies(&secret, &delivered),
        "signed with the endpoint's secret"
    );

    // A rotation under this gateway seals with the new key: a gateway holding only the new
    // key opens it.
    let (status, _) = call(
        &gateway,
        reqwest::Method::POST,
        &token,
        &format!("/v1/webhook-endpoints/{id}/rotate-secret"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    db.batch_execute(
        "UPDATE webhook_endpoints SET previous_secret_sealed = NULL, previous_secret_until = NULL",
    )
    .await
    .unwrap();
    drop(gateway);
    let only_new = config_with(
        &database_url,
        &format!("{}{exempt}", endpoints_config(Some(OTHER_KEY), &[])),
    );
    let gateway = GatewayProcess::spawn_on(&database_url, &only_new).await;
    until_loaded(&gateway, &db).await;
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"loaded\"}").await,
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_answers_callbacks_only_after_its_first_load_of_the_endpoints() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    create(&gateway, &token, "https://merchant.example/hooks").await;
    drop(gateway);

    // A new gateway starts while its first read of the endpoints cannot finish.
    let holder = connect(&database_url).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE webhook_endpoint_revision IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!("cg-proc-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("gateway.toml"), &config).unwrap();
    let mut gateway =
        GatewayProcess::start(&dir, crate::support::cluster::free_port(), &database_url);
    let address = gateway.address();
    until(
        "the gateway's first read of the endpoints to wait",
        async || {
            db.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE '%webhook_endpoint_revision%'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
                >= 1
        },
    )
    .await;
    let healthy = async || {
        reqwest::get(format!("{address}/healthz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    };
    until("the gateway to serve /healthz", healthy).await;
    let ready = reqwest::get(format!("{address}/readyz")).await.unwrap();
    assert_eq!(
        ready.status(),
        503,
        "not ready before the endpoints are loaded"
    );
    let order: i64 = db
        .query_one(
            "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 700, 'USD') RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let body = capture("evt_before_load", "pay_before_load", order, 700);
    let (headers, body) = sign::signed_now(ACME, "evt_before_load", &body);
    let send = async || {
        let mut request = reqwest::Client::new()
            .post(format!("{address}/v1/callbacks/{ACME}"))
            .header("Content-Type", "application/json")
            .body(body.clone());
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        request.send().await.unwrap()
    };
    let early = send().await;
    assert_eq!(early.status(), 503, "a callback before the first load");
    assert!(early.headers().contains_key("retry-after"));
    assert_eq!(staged(&db, MERCHANT, "order.paid").await, 0);

    holder.batch_execute("COMMIT").await.unwrap();
    gateway.wait_ready().await;
    assert_eq!(send().await.status(), 200);
    assert_eq!(
        staged(&db, MERCHANT, "order.paid").await,
        1,
        "the provider's retry after the load stages the notification"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_secret_moved_to_another_merchant_does_not_open() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    create(&gateway, &token, "https://merchant.example/hooks").await;
    until_loaded(&gateway, &db).await;
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"loaded\"}").await,
        Some(1.0)
    );
    // Someone with write access to the database gives merchant 42's endpoint to merchant 43.
    db.batch_execute(
        "UPDATE webhook_endpoints SET merchant_id = 43; \
         UPDATE webhook_endpoint_revision SET revision = revision + 1",
    )
    .await
    .unwrap();
    until_loaded(&gateway, &db).await;
    assert_eq!(
        metric(&gateway, "gateway_webhook_endpoints{state=\"unopened\"}").await,
        Some(1.0),
        "the secret is bound to its merchant"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekey_takes_the_old_key_from_the_environment_or_stdin_never_the_command_line() {
    let database_url = fresh_database().await;
    let config = config_with(&database_url, &endpoints_config(Some(KEY), &[]));
    let gateway = GatewayProcess::spawn_on(&database_url, &config).await;
    let token = merchant_token(&database_url, MERCHANT);
    create(&gateway, &token, "https://merchant.example/hooks").await;
    drop(gateway);
    let other = config_with(&database_url, &endpoints_config(Some(OTHER_KEY), &[]));
    // The key itself on the command line (visible in `ps` and shell history): refused.
    let output = cli(
        &database_url,
        Some(&other),
        &["secrets", "rekey", "--old-key", KEY],
        &[],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("env:"), "{stderr}");
    assert!(!stderr.contains(KEY), "the refusal does not echo the key");
    // From stdin: `--old-key -`.
    let dir = std::env::temp_dir().join(format!("cg-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("gateway.toml"), &other).unwrap();
    let mut child = Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(dir.join("gateway.toml"))
        .args(["secrets", "rekey", "--old-key", "-"])
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", &database_url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{KEY}\n").as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
