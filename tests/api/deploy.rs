//! Production deployment, with the real binary: native HTTPS with a certificate made for the
//! test, `check-config` on the demo file and on each broken example of the contract, and
//! `--version`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::cluster::free_port;
use crate::support::simulator::Event;
use crate::support::{ACME, answer, config_with, connect, fresh_database, insert_orders, sign};

const GATEWAY: &str = env!("CARGO_BIN_EXE_callback-gateway");

/// A directory of its own for one test's files, removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("cg-deploy-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A self-signed certificate for 127.0.0.1 and localhost: (certificate PEM, private key PEM).
fn self_signed() -> (String, String) {
    let names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(names).unwrap();
    (cert.pem(), signing_key.serialize_pem())
}

/// TOML for `[server]` naming the two PEM files.
fn tls_section(cert: &Path, key: &Path) -> String {
    format!(
        "[server]\ntls_cert = {:?}\ntls_key = {:?}\n",
        cert.display().to_string(),
        key.display().to_string()
    )
}

/// Runs the binary with `args` in `dir`, with no configuration from the test's environment
/// except the variables in `env`.
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(GATEWAY);
    command
        .args(args)
        .current_dir(dir)
        .env_remove("GATEWAY_CONFIG")
        .env_remove("GATEWAY_BIND")
        .env_remove("DATABASE_URL")
        .env_remove("GATEWAY_ADMIN_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

// ---------------------------------------------------------------------------------------
// Native HTTPS
// ---------------------------------------------------------------------------------------

/// `callback-gateway serve` with TLS on a fixed port; killed when dropped.
struct TlsGateway {
    child: Child,
    log: PathBuf,
    port: u16,
}

impl TlsGateway {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for TlsGateway {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// An HTTPS client that trusts only `cert_pem`: no built-in or system roots.
fn client_trusting(cert_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .https_only(true)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn deliver_over(client: &reqwest::Client, base: &str, event: &Event) -> (u16, bool, String) {
    let mut request = client
        .post(format!("{base}/v1/callbacks/{ACME}"))
        .header("Content-Type", "application/json")
        .body(event.body.clone());
    for (name, value) in sign::sign_now(ACME, &event.id, &event.body) {
        request = request.header(name, value);
    }
    answer(request.send().await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_callbacks_over_https_are_acknowledged_and_plain_http_to_the_tls_port_fails_cleanly()
{
    let dir = TempDir::new();
    let database_url = fresh_database().await;
    let (cert, key) = self_signed();
    let (cert_path, key_path) = (dir.write("cert.pem", &cert), dir.write("key.pem", &key));
    let client = client_trusting(&cert);
    let config = dir.write(
        "gateway.toml",
        &config_with(&database_url, &tls_section(&cert_path, &key_path)),
    );
    let gateway = spawn_serve(&dir, &config, &database_url, &client).await;

    let db = connect(&database_url).await;
    let orders = insert_orders(&db, 2).await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    let events: Vec<Event> = orders
        .iter()
        .map(|&(id, amount)| Event::payment(&format!("evt_tls_{run}_{id}"), id, amount))
        .collect();

    // Both names the certificate carries; the second delivery of the first event is a replay.
    let by_name = format!("https://localhost:{}", gateway.port);
    let by_ip = format!("https://127.0.0.1:{}", gateway.port);
    let (status, replayed, ack) = deliver_over(&client, &by_name, &events[0]).await;
    assert_eq!(
        (status, replayed),
        (200, false),
        "first delivery over HTTPS: {ack}"
    );
    let ack: serde_json::Value = serde_json::from_str(&ack).unwrap();
    assert_eq!(ack["outcome"], "applied", "{ack}");
    let (status, replayed, _) = deliver_over(&client, &by_ip, &events[0]).await;
    assert_eq!((status, replayed), (200, true), "redelivery over HTTPS");

    // Plain HTTP to the TLS port: the client gets an error, promptly, not an answer or a hang.
    let plain = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let refused = plain
        .get(format!("http://127.0.0.1:{}/healthz", gateway.port))
        .send()
        .await;
    match refused {
        Ok(response) => panic!(
            "plain HTTP to the TLS port got an answer: {}",
            response.status()
        ),
        Err(error) => assert!(
            !error.is_timeout(),
            "plain HTTP to the TLS port hung instead of failing: {error}"
        ),
    }

    // The server keeps serving HTTPS afterwards.
    let (status, replayed, ack) = deliver_over(&client, &by_ip, &events[1]).await;
    assert_eq!(
        (status, replayed),
        (200, false),
        "a callback over HTTPS after the plain-HTTP attempt: {ack}\n{}",
        gateway.log()
    );
    let transfers: i64 = db
        .query_one("SELECT count(*) FROM ledger_transfers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(transfers, 2, "one transfer per event, none for the replay");
    assert!(
        gateway.log().contains(r#""tls":true"#),
        "the listening line should say TLS is on:\n{}",
        gateway.log()
    );

    // The expiry cleaner's first pass and the refund recoverer run at startup; their liveness
    // gauges say when.
    let metrics_url = format!("{by_name}/metrics");
    let started = Instant::now();
    loop {
        let metrics = client
            .get(&metrics_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let last_run = crate::support::metric_sample(
            &metrics,
            "gateway_cleanup_last_run_timestamp_seconds",
            &[],
        );
        // The refund recoverer in `serve` sets its gauge when it starts and after each pass.
        let recoverer_run = crate::support::metric_sample(
            &metrics,
            "gateway_refund_recoverer_last_run_timestamp_seconds",
            &[],
        );
        if last_run.is_some_and(|t| t > 1.0e9) && recoverer_run.is_some_and(|t| t > 1.0e9) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the cleaner's ({last_run:?}) or the refund recoverer's ({recoverer_run:?}) liveness gauge was not set\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Serving TLS itself, the gateway tells browsers to stay on HTTPS (HSTS) on every answer, and
/// the console's session cookie is `Secure`.
#[tokio::test]
async fn an_https_gateway_sends_hsts_and_a_secure_console_cookie() {
    let dir = TempDir::new();
    let (cert, key) = self_signed();
    let (cert_path, key_path) = (dir.write("cert.pem", &cert), dir.write("key.pem", &key));
    let app = crate::support::spawn_app_with(&tls_section(&cert_path, &key_path)).await;
    let base = app.address.replace("http://127.0.0.1", "https://localhost");
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert.as_bytes()).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    for path in ["/healthz", "/console/login", "/v1/callbacks/nope"] {
        let response = client.get(format!("{base}{path}")).send().await.unwrap();
        let hsts = response
            .headers()
            .get("strict-transport-security")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(
            hsts.as_deref().is_some_and(|v| v.starts_with("max-age=")),
            "{path}: {hsts:?}"
        );
    }
    let login =
        crate::support::console_sign_in(&client, &base, Some(crate::support::ADMIN_TOKEN)).await;
    assert_eq!(login.status(), 303);
    let cookie = login.headers()["set-cookie"].to_str().unwrap();
    assert!(cookie.split(';').any(|a| a.trim() == "Secure"), "{cookie}");
}

async fn spawn_serve(
    dir: &TempDir,
    config: &Path,
    database_url: &str,
    client: &reqwest::Client,
) -> TlsGateway {
    let port = free_port();
    let log = dir.0.join("gateway.log");
    let child = Command::new(GATEWAY)
        .arg("--config")
        .arg(config)
        .arg("serve")
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", database_url)
        .env("GATEWAY_BIND", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "info")
        .env("GATEWAY_LOG_FORMAT", "json")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut gateway = TlsGateway { child, log, port };
    let url = format!("https://localhost:{port}/readyz");
    let started = Instant::now();
    loop {
        if let Ok(response) = client.get(&url).send().await
            && response.status() == 200
        {
            return gateway;
        }
        if let Some(status) = gateway.child.try_wait().unwrap() {
            panic!(
                "the TLS gateway exited with {status} before it was ready:\n{}",
                gateway.log()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the TLS gateway did not answer /readyz over HTTPS within 60 s:\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------
// check-config and --version
// ---------------------------------------------------------------------------------------

const HMAC_SECRET: &str = "hmac-secret-of-the-deploy-tests";
/// Nothing listens there: check-config must not need the database.
const UNREACHABLE_DB: &str = "postgres://gateway@127.0.0.1:1/gateway";

/// A good configuration that the broken examples below each spoil in one place.
fn valid_config() -> String {
    format!(
        r#"[database]
url = "{UNREACHABLE_DB}"

[[providers]]
name = "acme"
scheme = "hmac-sha256"
payload = "canonical"
merchant_id = 42
secrets = ["{HMAC_SECRET}"]
retry_window_hours = 72
ttl_hours = 168
"#
    )
}

fn replaced(from: &str, to: &str) -> String {
    let config = valid_config();
    assert!(config.contains(from), "the base config lacks {from:?}");
    config.replace(from, to)
}

/// `check-config` (or another command) on `config`, written as DIR/gateway.toml.
fn check_config_of(dir: &TempDir, command: &str, config: &str, env: &[(&str, &str)]) -> Output {
    dir.write("gateway.toml", config);
    run(&dir.0, &["--config", "gateway.toml", command], env)
}

#[test]
fn check_config_on_the_demo_config_prints_a_summary_without_a_secret() {
    let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/gateway.example.toml");
    let admin_token = "demo-admin-token-for-check-config";
    let dir = TempDir::new();
    let output = run(
        &dir.0,
        &["--config", demo, "check-config"],
        &[("GATEWAY_ADMIN_TOKEN", admin_token)],
    );
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    for expected in [
        "bind          127.0.0.1:8080",
        "tls           off",
        "pool size     16",
        "admin token   set",
        "providers     7",
        "acme scheme=standard-webhooks payload=canonical merchant_id=42 secrets=1",
        "stripe scheme=stripe payload=stripe merchant_id=42 secrets=1",
        "adyen scheme=adyen payload=adyen merchant_id=42 secrets=1 tolerance=300s retry_window=720h ttl=768h",
        "square scheme=square payload=square merchant_id=42 secrets=1",
        "notification_url=http://127.0.0.1:8080/v1/callbacks/square",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // Every secret the file holds, read from the file itself so a new one is covered too.
    let file: toml::Table = std::fs::read_to_string(demo).unwrap().parse().unwrap();
    let mut secrets = vec![admin_token.to_owned()];
    for provider in file["providers"].as_array().unwrap() {
        for secret in provider["secrets"].as_array().unwrap() {
            secrets.push(secret.as_str().unwrap().to_owned());
        }
    }
    assert!(
        secrets.len() >= 3,
        "the demo file should hold secrets: {secrets:?}"
    );
    for secret in &secrets {
        assert!(
            !stdout.contains(secret.as_str()) && !stderr.contains(secret.as_str()),
            "a secret reached the output:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn check_config_resolves_env_secrets_and_shows_neither_them_nor_the_database_password() {
    let dir = TempDir::new();
    let env_secret = "env-secret-for-check-config";
    let config = replaced(
        &format!("secrets = [\"{HMAC_SECRET}\"]"),
        "secrets = [\"env:CG_DEPLOY_TEST_SECRET\", \"env:CG_DEPLOY_TEST_OLD_SECRET\"]",
    )
    .replace(
        UNREACHABLE_DB,
        "postgres://gateway:db-password-123@127.0.0.1:1/gateway",
    );
    let output = check_config_of(
        &dir,
        "check-config",
        &config,
        &[
            ("CG_DEPLOY_TEST_SECRET", env_secret),
            (
                "CG_DEPLOY_TEST_OLD_SECRET",
                "old-env-secret-for-check-config",
            ),
        ],
    );
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stdout.contains("acme scheme=hmac-sha256 payload=canonical merchant_id=42 secrets=2"),
        "{stdout}"
    );
    assert!(
        stdout.contains("host=127.0.0.1 port=1 user=gateway dbname=gateway password=set"),
        "{stdout}"
    );
    for secret in [
        env_secret,
        "old-env-secret-for-check-config",
        "db-password-123",
    ] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} reached the output:\n{stdout}\n{stderr}"
        );
    }
}

/// Passwords the driver accepts unencoded (it reads the credentials up to the first `@`), and
/// one in the query: none of their characters may reach the summary. The summary shows what
/// the driver itself makes of the URL.
#[test]
fn check_config_shows_the_database_as_the_driver_reads_it_and_never_its_password() {
    let dir = TempDir::new();
    let cases = [
        (
            "postgres://gateway:sl/ash-pw/x1@127.0.0.1:1/gateway",
            "sl/ash-pw",
            "host=127.0.0.1 port=1 user=gateway dbname=gateway password=set sslmode=prefer",
        ),
        (
            "postgres://gateway:zqx?est-pw@127.0.0.1:1/gateway",
            "zqx",
            "host=127.0.0.1 port=1 user=gateway dbname=gateway password=set sslmode=prefer",
        ),
        (
            "postgres://127.0.0.1:1/gateway?user=gateway&password=qu3ry-pw",
            "qu3ry-pw",
            "host=127.0.0.1 port=1 user=gateway dbname=gateway password=set sslmode=prefer",
        ),
        (
            "postgresql://gateway@db1:5432,db2:5433/gateway?target_session_attrs=read-write",
            "no password here",
            "host=db1,db2 port=5432,5433 user=gateway dbname=gateway password=none target_session_attrs=read-write sslmode=prefer",
        ),
    ];
    for (url, password, expected) in cases {
        let output = check_config_of(&dir, "check-config", &replaced(UNREACHABLE_DB, url), &[]);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert_eq!(output.status.code(), Some(0), "{url}: {stderr}");
        assert!(
            !stdout.contains(password) && !stderr.contains(password),
            "{url}: the password (or a part of it) reached the output:\n{stdout}{stderr}"
        );
        let database = stdout
            .lines()
            .find(|l| l.starts_with("database "))
            .unwrap_or_else(|| panic!("no database line in:\n{stdout}"));
        assert_eq!(
            database.trim_start_matches("database").trim(),
            expected,
            "{url}"
        );
    }
}

/// A refund API URL with user:pass@ would carry a password into every log line that names the
/// URL (reqwest's errors do): refused, and the refusal does not repeat it.
#[test]
fn check_config_refuses_userinfo_in_a_provider_api_base_url_without_repeating_it() {
    let dir = TempDir::new();
    for url in [
        "https://refund-user:refund-pw-1@api.example.com",
        "https://refund-user@api.example.com",
        "http://refund-user:refund-pw-1@127.0.0.1:9",
    ] {
        let config = format!(
            "{}api_base_url = \"{url}\"\napi_key = \"sk_test_key\"\n",
            valid_config()
        );
        let output = check_config_of(&dir, "check-config", &config, &[]);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert_eq!(output.status.code(), Some(2), "{url}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{url}: {stdout}");
        assert!(
            stderr.contains("providers[0].api_base_url"),
            "{url}: names the field: {stderr}"
        );
        assert!(
            !stderr.contains("refund-pw-1") && !stderr.contains("refund-user"),
            "{url}: the userinfo reached the message: {stderr}"
        );
    }
}

#[test]
fn check_config_says_tls_is_on_when_both_files_are_good() {
    let dir = TempDir::new();
    let (cert, key) = self_signed();
    let (cert, key) = (dir.write("cert.pem", &cert), dir.write("key.pem", &key));
    let config = format!("{}{}", tls_section(&cert, &key), valid_config());
    let output = check_config_of(&dir, "check-config", &config, &[]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert!(stdout.contains("tls           on (HTTPS"), "{stdout}");
    assert!(
        stdout.contains("console       session cookie Secure (the gateway serves TLS)"),
        "{stdout}"
    );
}

/// Each broken example of the contract: exit 2, nothing on stdout, one line naming the field.
#[test]
fn check_config_refuses_each_broken_example_with_exit_2_naming_the_field() {
    let dir = TempDir::new();
    let (cert_a, key_a) = self_signed();
    let (_, key_b) = self_signed();
    let cert = dir.write("cert.pem", &cert_a);
    let key = dir.write("key.pem", &key_a);
    let other_key = dir.write("other-key.pem", &key_b);
    let not_pem = dir.write("not-pem.pem", "this is not a certificate\n");
    let missing = dir.0.join("missing.pem");
    let with_tls =
        |cert: &Path, key: &Path| format!("{}{}", tls_section(cert, key), valid_config());
    let second_acme = format!(
        "\n[[providers]]\nname = \"acme\"\nscheme = \"stripe\"\nmerchant_id = 42\nsecrets = [\"{HMAC_SECRET}\"]\n"
    );

    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown scheme",
            replaced("scheme = \"hmac-sha256\"", "scheme = \"md5\""),
            "providers[0].scheme",
        ),
        (
            "duplicate provider name",
            format!("{}{second_acme}", valid_config()),
            "providers[1].name",
        ),
        (
            "ttl not above the retry window",
            replaced("ttl_hours = 168", "ttl_hours = 72"),
            "providers[0].ttl_hours",
        ),
        (
            "unset env: secret",
            replaced(HMAC_SECRET, "env:CG_DEPLOY_TEST_NOT_SET"),
            "providers[0].secrets[0]",
        ),
        (
            "unreadable standard-webhooks secret",
            replaced("scheme = \"hmac-sha256\"", "scheme = \"standard-webhooks\"")
                .replace(HMAC_SECRET, "whsec_!!not base64!!"),
            "providers[0].secrets[0]",
        ),
        (
            "unset env: admin token",
            format!(
                "[admin]\ntoken = \"env:CG_DEPLOY_TEST_NOT_SET\"\n{}",
                valid_config()
            ),
            "admin.token",
        ),
        (
            "mismatched certificate and key",
            with_tls(&cert, &other_key),
            "server.tls_key",
        ),
        (
            "unreadable certificate",
            with_tls(&missing, &key),
            "server.tls_cert",
        ),
        (
            "certificate file that is not PEM",
            with_tls(&not_pem, &key),
            "server.tls_cert",
        ),
        (
            "unreadable key",
            with_tls(&cert, &missing),
            "server.tls_key",
        ),
        (
            "key file that is not PEM",
            with_tls(&cert, &not_pem),
            "server.tls_key",
        ),
        (
            "certificate without a key",
            format!("[server]\ntls_cert = \"cert.pem\"\n{}", valid_config()),
            "server.tls_key",
        ),
        (
            "key without a certificate",
            format!("[server]\ntls_key = \"key.pem\"\n{}", valid_config()),
            "server.tls_cert",
        ),
        (
            "no database url",
            replaced(&format!("url = \"{UNREACHABLE_DB}\""), ""),
            "database.url",
        ),
    ];
    for (case, config, field) in cases {
        let output = check_config_of(&dir, "check-config", &config, &[]);
        let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
        assert_eq!(
            output.status.code(),
            Some(2),
            "{case}: check-config should exit 2\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert!(
            stdout.is_empty(),
            "{case}: nothing belongs on stdout: {stdout}"
        );
        assert_eq!(
            stderr.lines().count(),
            1,
            "{case}: the reason should be one line: {stderr}"
        );
        assert!(
            stderr.starts_with("error: ") && stderr.contains(field),
            "{case}: the message should name {field}: {stderr}"
        );
        assert!(
            !stderr.contains("PRIVATE KEY") && !stderr.contains(HMAC_SECRET),
            "{case}: key material or a secret reached the message: {stderr}"
        );
    }
}

#[test]
fn serve_refuses_a_mismatched_key_as_check_config_does_before_touching_the_database() {
    let dir = TempDir::new();
    let (cert, _) = self_signed();
    let (_, other_key) = self_signed();
    let (cert, key) = (
        dir.write("cert.pem", &cert),
        dir.write("key.pem", &other_key),
    );
    let config = format!("{}{}", tls_section(&cert, &key), valid_config());
    let checked = check_config_of(&dir, "check-config", &config, &[]);
    // The database is unreachable: had serve tried to migrate first, it would exit 1.
    let served = check_config_of(&dir, "serve", &config, &[]);
    assert_eq!(
        (checked.status.code(), served.status.code()),
        (Some(2), Some(2)),
        "check-config: {}\nserve: {}",
        text(&checked.stderr),
        text(&served.stderr)
    );
    assert_eq!(
        text(&served.stderr),
        text(&checked.stderr),
        "serve and check-config should refuse with the same line"
    );
    assert!(text(&served.stderr).contains("server.tls_key"));
}

#[test]
fn version_prints_the_package_version() {
    let dir = TempDir::new();
    let output = run(&dir.0, &["--version"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        format!("callback-gateway {}\n", env!("CARGO_PKG_VERSION"))
    );
}

// ---------------------------------------------------------------------------------------
// deploy/alerts.yml reads series the gateway really exports
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn every_metric_the_alert_rules_read_is_exported_by_the_gateway() {
    let rules =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/alerts.yml")).unwrap();
    // A fetch-verified provider (never asked here) exports its fetch series from startup.
    let mollie = "\n[[providers]]\nname = \"mollie\"\nscheme = \"mollie\"\nmerchant_id = 42\napi_key = \"test_key\"\napi_base_url = \"https://localhost:9\"\n";
    let app = crate::support::spawn_app_with(&crate::support::all_providers(mollie)).await;
    // One verified callback creates the labelled series (requests by route, provider skew).
    let (order_id, amount) = insert_orders(&app.db, 1).await[0];
    let event = Event::payment("evt_alert_names", order_id, amount);
    let (status, _, ack) = answer(app.deliver(ACME, &event.id, &event.body).await).await;
    assert_eq!(status, 200, "{ack}");
    let metrics = app.metrics().await;

    let mut names: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("gateway_"))
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(
        names.len() >= 6,
        "the rules should read the gateway's metrics: {names:?}"
    );
    for name in names {
        let exported = metrics.lines().any(|line| {
            line.starts_with(&format!("{name}{{")) || line.starts_with(&format!("{name} "))
        });
        assert!(
            exported,
            "deploy/alerts.yml reads {name}, which /metrics does not export:\n{metrics}"
        );
    }
    for series in [
        r#"route="/v1/callbacks/{provider}""#,
        r#"provider="acme",le="-60""#,
        r#"provider="acme",le="60""#,
        r#"state="waiting""#,
        r#"state="timed_out_total""#,
        r#"provider="mollie",result="key_refused""#,
    ] {
        assert!(
            metrics.contains(series),
            "the alert rules match {series}, which /metrics does not show:\n{metrics}"
        );
    }
}
