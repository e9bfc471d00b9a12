//! Test harness: every test gets the real application on port 0 and a fresh database of its
//! own, cloned from a migrated template (tens of milliseconds instead of a migration run).

#![allow(dead_code)]

pub mod backup;
pub mod batch;
pub mod cluster;
pub mod emulator;
pub mod gateway;
pub mod ha;
pub mod listener;
pub mod otlp;
pub mod payloads;
pub mod paypal;
pub mod paypal_host;
pub mod provider;
pub mod proxy;
pub mod receiver;
pub mod sign;
pub mod simulator;

use std::sync::Arc;
use std::time::Duration;

use callback_gateway::config::{ProcessEnv, Settings};
use callback_gateway::db;
use callback_gateway::startup::Application;
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

pub const ADMIN_TOKEN: &str = "test-admin-token";
/// Standard Webhooks provider (canonical payload) for merchant 42, with a rotated-in second secret.
pub const ACME: &str = "acme";
pub const ACME_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
pub const ACME_OLD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Stripe provider (stripe payload) for merchant 42.
pub const STRIPE: &str = "stripe";
pub const STRIPE_SECRET: &str = "whsec_stripe_test_secret";
/// Plain HMAC provider (canonical payload) for merchant 43.
pub const PLAIN: &str = "plain";
pub const PLAIN_SECRET: &str = "plain-hmac-secret";
pub const MERCHANT: i64 = 42;
pub const OTHER_MERCHANT: i64 = 43;
/// Standard Webhooks provider (canonical payload) of a third merchant.
pub const THIRD: &str = "third";
pub const THIRD_SECRET: &str = "whsec_dGhpcmQtbWVyY2hhbnQtdGVzdC1zZWNyZXQ=";
pub const THIRD_MERCHANT: i64 = 44;
/// The six providers of issue 24 (`all_providers`), for merchant 42 unless said otherwise.
pub const ADYEN: &str = "adyen";
/// Adyen HMAC keys are 64 hex characters (this one is ours, not a published one).
pub const ADYEN_KEY: &str = "1F2E3D4C5B6A79880796A5B4C3D2E1F00112233445566778899AABBCCDDEEFF0";
pub const SQUARE: &str = "square";
pub const SQUARE_KEY: &str = "square-signature-key-for-tests";
/// Square signs its notification URL exactly as registered.
pub const SQUARE_URL: &str = "https://gateway.test/v1/callbacks/square";
pub const RAZORPAY: &str = "razorpay";
pub const RAZORPAY_SECRET: &str = "razorpay-webhook-secret-tests";
pub const CHECKOUT: &str = "checkout";
pub const CHECKOUT_KEY: &str = "checkout-signature-key-tests";
pub const PADDLE: &str = "paddle";
pub const PADDLE_SECRET: &str = "pdl_ntfset_01test_secret_for_tests";
pub const PAYPAL: &str = "paypal";
/// Issue 41's providers (merchant 42): three that ask their API (an [`emulator::Emulator`] in
/// the tests) and Braintree.
pub const MOLLIE: &str = "mollie";
pub const GOCARDLESS: &str = "gocardless";
pub const GOCARDLESS_SECRET: &str = "gocardless-webhook-endpoint-secret";
pub const MERCADOPAGO: &str = "mercadopago";
pub const MERCADOPAGO_SECRET: &str = "mercadopago-signature-secret";
pub const BRAINTREE: &str = "braintree";
/// The keys of the Braintree SDK's own sample notifications in tests/vectors/braintree.json.
pub const BRAINTREE_PUBLIC: &str = "gateway_test_public_key";
pub const BRAINTREE_PRIVATE: &str = "gateway-test-private-key-0001";

/// The configuration every test app starts from; tests may append to or replace parts.
pub fn base_config(database_url: &str) -> String {
    format!(
        r#"
[server]
bind = "127.0.0.1:0"
workers = 2
acquire_timeout_ms = 3000

[database]
url = "{database_url}"
pool_size = 16

[admin]
token = "{ADMIN_TOKEN}"
{providers}"#,
        providers = base_providers()
    )
}

/// The four providers every test app has: acme and stripe of merchant 42, plain of 43, third
/// of 44.
fn base_providers() -> String {
    format!(
        r#"
[[providers]]
name = "{ACME}"
scheme = "standard-webhooks"
payload = "canonical"
merchant_id = {MERCHANT}
secrets = ["{ACME_OLD_SECRET}", "{ACME_SECRET}"]

[[providers]]
name = "{STRIPE}"
scheme = "stripe"
payload = "stripe"
merchant_id = {MERCHANT}
secrets = ["{STRIPE_SECRET}"]

[[providers]]
name = "{PLAIN}"
scheme = "hmac-sha256"
payload = "canonical"
merchant_id = {OTHER_MERCHANT}
secrets = ["{PLAIN_SECRET}"]

[[providers]]
name = "{THIRD}"
scheme = "standard-webhooks"
payload = "canonical"
merchant_id = {THIRD_MERCHANT}
secrets = ["{THIRD_SECRET}"]
"#
    )
}

/// The base providers and the six of issue 24 (merchant 42; PayPal's certificates from the test
/// binary's own certificate host), for `spawn_app_with` (the providers array is replaced as a
/// whole); `extra` is appended.
pub fn all_providers(extra: &str) -> String {
    format!(
        r#"
{base}

[[providers]]
name = "{ADYEN}"
scheme = "adyen"
merchant_id = {MERCHANT}
secrets = ["{ADYEN_KEY}"]

[[providers]]
name = "{SQUARE}"
scheme = "square"
merchant_id = {MERCHANT}
secrets = ["{SQUARE_KEY}"]
notification_url = "{SQUARE_URL}"

[[providers]]
name = "{RAZORPAY}"
scheme = "razorpay"
merchant_id = {MERCHANT}
secrets = ["{RAZORPAY_SECRET}"]

[[providers]]
name = "{CHECKOUT}"
scheme = "checkout"
merchant_id = {MERCHANT}
secrets = ["{CHECKOUT_KEY}"]

[[providers]]
name = "{PADDLE}"
scheme = "paddle"
merchant_id = {MERCHANT}
secrets = ["{PADDLE_SECRET}"]
{paypal}
{extra}"#,
        base = base_providers(),
        paypal = paypal_host::host().provider_toml(PAYPAL, MERCHANT)
    )
}

/// The base providers with the refund API of `acme` (canonical) and `stripe` at `api_base_url`,
/// plus `extra` TOML sections, for `spawn_app_with` / `config_with` (the providers array is
/// replaced as a whole).
pub fn refund_config(api_base_url: &str, extra: &str) -> String {
    let key = provider::PROVIDER_API_KEY;
    format!(
        r#"{extra}
[[providers]]
name = "{ACME}"
scheme = "standard-webhooks"
payload = "canonical"
merchant_id = {MERCHANT}
secrets = ["{ACME_OLD_SECRET}", "{ACME_SECRET}"]
api_base_url = "{api_base_url}"
api_key = "{key}"

[[providers]]
name = "{STRIPE}"
scheme = "stripe"
payload = "stripe"
merchant_id = {MERCHANT}
secrets = ["{STRIPE_SECRET}"]
api_base_url = "{api_base_url}"
api_key = "{key}"

[[providers]]
name = "{PLAIN}"
scheme = "hmac-sha256"
payload = "canonical"
merchant_id = {OTHER_MERCHANT}
secrets = ["{PLAIN_SECRET}"]
"#
    )
}

/// The server the tests run against: `DATABASE_URL` (set by scripts/test).
pub fn server_url() -> String {
    std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run the tests through scripts/test, or point it at a PostgreSQL server")
}

/// `url` with its database name replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// `url` with its user replaced by `user` (no password: the test clusters trust 127.0.0.1).
pub fn with_user(url: &str, user: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{}{user}@{host}", &url[..scheme_end])
}

/// The runtime login role the in-process apps serve as: one per server (a test's own cluster
/// has its own roles), a member of `callback_gateway_runtime`, which every migrated database
/// grants its rows to.
async fn test_runtime_role(database_url: &str) -> String {
    let name = "cg_test_runtime";
    let admin = connect(database_url).await;
    let exists = async || {
        admin
            .query_opt("SELECT 1 FROM pg_roles WHERE rolname = $1", &[&name])
            .await
            .unwrap()
            .is_some()
    };
    if !exists().await {
        // Parallel tests may create it at once: one wins, the others find it made.
        let _ = admin
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN IN ROLE callback_gateway_runtime"
            ))
            .await;
        assert!(
            exists().await,
            "cannot create the tests' runtime role {name}"
        );
    }
    name.to_owned()
}

/// A login role of the gateway's runtime group (`callback_gateway_runtime`, migration 000060)
/// on the server of `url` (a superuser's), named for one test: roles belong to the cluster, shared by every
/// test's database. Returns its name.
pub async fn runtime_login_role(url: &str) -> String {
    let name = format!("cg_rt_{}", uuid::Uuid::new_v4().simple());
    connect(url)
        .await
        .batch_execute(&format!(
            "CREATE ROLE {name} LOGIN IN ROLE callback_gateway_runtime"
        ))
        .await
        .unwrap_or_else(|e| panic!("cannot create a runtime login role: {e}"));
    name
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database: {e}"));
    tokio::spawn(connection);
    client
}

static TEMPLATE: OnceCell<String> = OnceCell::const_new();

/// The migrated template database, named after the migrations' content so a changed
/// migration gets a fresh template. Built once per server, even by parallel test processes.
async fn template() -> String {
    TEMPLATE
        .get_or_init(|| async {
            let name = format!("cg_template_{}", migrations_digest());
            let admin = connect(&with_database(&server_url(), "postgres")).await;
            admin
                .execute("SELECT pg_advisory_lock(7412001)", &[])
                .await
                .unwrap();
            let exists = admin
                .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
                .await
                .unwrap()
                .is_some();
            if !exists {
                let building = format!("{name}_building");
                admin
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {building}"))
                    .await
                    .unwrap();
                admin
                    .batch_execute(&format!("CREATE DATABASE {building}"))
                    .await
                    .unwrap();
                db::run_migrations(&with_database(&server_url(), &building))
                    .await
                    .unwrap();
                admin
                    .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {name}"))
                    .await
                    .unwrap();
            }
            admin
                .execute("SELECT pg_advisory_unlock(7412001)", &[])
                .await
                .unwrap();
            name
        })
        .await
        .clone()
}

fn migrations_digest() -> String {
    use sha2::{Digest, Sha256};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let mut files: Vec<_> = walk(&dir);
    files.sort();
    let mut hasher = Sha256::new();
    for file in files {
        hasher.update(file.to_string_lossy().as_bytes());
        hasher.update(std::fs::read(&file).unwrap());
    }
    hex::encode(&hasher.finalize()[..6])
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A fresh, migrated database of its own; returns its URL.
pub async fn fresh_database() -> String {
    let template = template().await;
    let name = format!("cg_test_{}", uuid::Uuid::new_v4().simple());
    let admin = connect(&with_database(&server_url(), "postgres")).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
        .await
        .unwrap();
    with_database(&server_url(), &name)
}

/// An empty database (no migrations), for migration tests.
pub async fn empty_database() -> String {
    let name = format!("cg_test_{}", uuid::Uuid::new_v4().simple());
    let admin = connect(&with_database(&server_url(), "postgres")).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    with_database(&server_url(), &name)
}

pub struct TestApp {
    pub address: String,
    pub database_url: String,
    pub client: reqwest::Client,
    /// A direct connection to the app's database, for looking at what was written.
    pub db: tokio_postgres::Client,
    /// The settings it runs with (for running a background pass by hand).
    pub settings: Settings,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        // Sends the stop command now; the workers and their pool go away with it.
        drop(self.handle.stop(false));
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with("").await
}

/// Spawns the app with `extra` TOML appended to (and overriding keys of) the base config.
pub async fn spawn_app_with(extra: &str) -> TestApp {
    let database_url = fresh_database().await;
    spawn_app_on(
        &database_url,
        &merge_config(&base_config(&database_url), extra),
    )
    .await
}

/// Spawns the app on an existing database with the given full configuration text.
pub async fn spawn_app_on(database_url: &str, config: &str) -> TestApp {
    // `TEST_LOG=warn cargo test ..` shows the in-process gateways' log (the cause chain of a
    // 5xx is logged, never answered).
    if let Ok(levels) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(levels))
            .with_writer(std::io::stderr)
            .try_init();
    }
    // The process env may carry DATABASE_URL for the server; the test's own database wins.
    // The app serves as the runtime role, as in production (it owns nothing); the test's own
    // connection (`db`) and the schema's owner (migrate_url) stay the server's superuser.
    struct TestEnv {
        runtime: String,
        owner: String,
    }
    impl callback_gateway::config::Environment for TestEnv {
        fn var(&self, name: &str) -> Option<String> {
            match name {
                "DATABASE_URL" => Some(self.runtime.clone()),
                "DATABASE_MIGRATE_URL" => Some(self.owner.clone()),
                "GATEWAY_BIND" => None,
                other => callback_gateway::config::Environment::var(&ProcessEnv, other),
            }
        }
    }
    let env = TestEnv {
        runtime: with_user(database_url, &test_runtime_role(database_url).await),
        owner: database_url.to_owned(),
    };
    let settings = Settings::from_toml(config, &env).unwrap();
    let app = Application::build(settings.clone()).await.unwrap();
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    let notifying = app.notifying();
    tokio::spawn(app.run_until_stopped());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let db = connect(database_url).await;
    // The app answers callbacks once it has read the merchants' endpoints (503 before); on a
    // database without migrations (the readiness tests) there is nothing to read.
    let migrated: bool = db
        .query_one(
            "SELECT to_regclass('webhook_endpoint_revision') IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if migrated {
        tokio::time::timeout(Duration::from_secs(60), notifying.until_loaded())
            .await
            .expect("the app read its merchants' endpoints within 60 s");
    }
    TestApp {
        address,
        database_url: database_url.to_owned(),
        client,
        db,
        settings,
        handle,
    }
}

/// Replaces whole `[section]` tables of `base` that `extra` redefines; appends the rest.
fn merge_config(base: &str, extra: &str) -> String {
    let base: toml::Table = base.parse().unwrap();
    let extra: toml::Table = extra.parse().unwrap();
    let mut merged = base;
    for (key, value) in extra {
        match (merged.get_mut(&key), value) {
            (Some(toml::Value::Table(existing)), toml::Value::Table(new)) => {
                existing.extend(new);
            }
            (_, value) => {
                merged.insert(key, value);
            }
        }
    }
    toml::to_string(&merged).unwrap()
}

impl TestApp {
    /// Stops the server as SIGTERM does: no new connections, requests in flight finish (up to
    /// actix's shutdown timeout); resolves once the workers have stopped.
    pub async fn stop_gracefully(&self) {
        self.handle.stop(true).await;
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
    }

    /// PostgreSQL's plan for `sql` (EXPLAIN, one line a row).
    pub async fn explain(&self, sql: &str) -> String {
        let plan: Vec<String> = self
            .db
            .query(&format!("EXPLAIN {sql}"), &[])
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        plan.join("\n")
    }

    /// The gateway's `/metrics` page.
    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The unlabelled sample `name` on `/metrics`; panics when the gateway does not export it.
    pub async fn metric(&self, name: &str) -> f64 {
        metric_sample(&self.metrics().await, name, &[])
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }

    /// The `status` column of order `id`, as the database holds it.
    pub async fn order_status(&self, id: i64) -> String {
        self.db
            .query_one("SELECT status FROM orders WHERE id = $1", &[&id])
            .await
            .unwrap()
            .get(0)
    }

    /// Mints an API token for `user_id` through the same code as `token issue`.
    pub async fn token_for(&self, user_id: i64) -> String {
        use diesel_async::AsyncConnection;
        let mut conn = diesel_async::AsyncPgConnection::establish(&self.database_url)
            .await
            .unwrap();
        callback_gateway::auth::issue_token(&mut conn, user_id)
            .await
            .unwrap()
    }

    pub async fn post_order(&self, token: &str, key: &str, body: &str) -> reqwest::Response {
        self.client
            .post(self.url("/v1/orders"))
            .bearer_auth(token)
            .header("Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap()
    }

    /// Creates a pending order for `merchant_id` and returns its id.
    pub async fn create_order(&self, merchant_id: i64, amount_minor: i64, currency: &str) -> i64 {
        let token = self.token_for(merchant_id).await;
        let body = format!(r#"{{"amount_minor":{amount_minor},"currency":"{currency}"}}"#);
        let response = self
            .post_order(&token, &uuid::Uuid::new_v4().to_string(), &body)
            .await;
        assert_eq!(response.status(), 201, "creating a test order failed");
        let order: serde_json::Value = response.json().await.unwrap();
        order["id"].as_i64().unwrap()
    }

    /// Posts a callback signed now by `provider`'s first configured secret (for Adyen the
    /// signatures go into the body's items).
    pub async fn deliver(&self, provider: &str, event_id: &str, body: &str) -> reqwest::Response {
        let (headers, body) = sign::signed_now(provider, event_id, body);
        self.post_callback(provider, &headers, &body).await
    }

    pub async fn post_callback(
        &self,
        provider: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> reqwest::Response {
        let mut request = self
            .client
            .post(self.url(&format!("/v1/callbacks/{provider}")))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send().await.unwrap()
    }

    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
    }
}

/// A response's status, its `Idempotent-Replayed` header and its exact body bytes.
pub async fn answer(response: reqwest::Response) -> (u16, bool, String) {
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("Idempotent-Replayed")
        .is_some_and(|v| v == "true");
    (status, replayed, response.text().await.unwrap())
}

pub fn shared<T>(value: T) -> Arc<T> {
    Arc::new(value)
}

/// The base configuration for `database_url` with `extra` TOML merged in (as `spawn_app_with`
/// does), for tests that start several gateways on one database or run the real binary.
pub fn config_with(database_url: &str, extra: &str) -> String {
    merge_config(&base_config(database_url), extra)
}

/// Inserts `n` pending USD orders of merchant 42 with distinct amounts; returns (id, amount).
pub async fn insert_orders(db: &tokio_postgres::Client, n: i64) -> Vec<(i64, i64)> {
    db.query(
        "INSERT INTO orders (user_id, amount_minor, currency) \
         SELECT $1, 1000 + g, 'USD' FROM generate_series(1, $2::bigint) g \
         RETURNING id, amount_minor",
        &[&MERCHANT, &n],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect()
}

/// The value of the sample of `name` whose labels include every `labels` pair.
pub fn metric_sample(metrics: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(rest) => rest.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        labels
            .iter()
            .all(|(k, v)| {
                label_text
                    .split(',')
                    .any(|pair| pair == format!("{k}=\"{v}\""))
            })
            .then(|| value.trim().parse().ok())?
    })
}

/// Another request in flight: it holds `(user_id, op, key)` in an open transaction on a
/// connection of its own, which the caller commits or rolls back.
pub async fn hold_key(
    app: &TestApp,
    user_id: i64,
    op: &str,
    key: &str,
    request_hash: &str,
) -> tokio_postgres::Client {
    let holder = connect(&app.database_url).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT acquired FROM idempotency_acquire($1, $2, $3, $4, now() + interval '1 hour')",
            &[&user_id, &op, &key, &request_hash],
        )
        .await
        .unwrap();
    holder
}

/// Returns once `n` backends of this test's database wait for a lock (the server's own view,
/// no timing involved; other tests' databases on the same server do not count).
pub async fn until_lock_waiters(app: &TestApp, n: i64) {
    until_lock_waiters_on(app, n, "%").await;
}

/// Returns once `n` backends of this test's database wait for a lock while running a statement
/// whose text is `LIKE query_pattern`.
pub async fn until_lock_waiters_on(app: &TestApp, n: i64, query_pattern: &str) {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' AND query LIKE '{query_pattern}'"
    );
    until("a backend waiting for a lock", async || {
        app.count(&sql).await >= n
    })
    .await;
}

/// Polls `condition` until it holds; a scenario that never gets there fails instead of hanging.
pub async fn until(what: &str, condition: impl AsyncFn() -> bool) {
    let polling = async {
        while !condition().await {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), polling)
        .await
        .unwrap_or_else(|_| panic!("still waiting for {what} after 60 s"));
}

/// The sequential scans of `plan` (plain EXPLAIN, with costs) that read anything: a partition
/// of the event log with no page yet (a month ahead) is planned as a sequential scan costing
/// nothing, which reads nothing.
pub fn sequential_scans_of_data(plan: &str) -> Vec<&str> {
    plan.lines()
        .filter(|line| line.contains("Seq Scan"))
        .filter(|line| {
            let total = line
                .split("cost=")
                .nth(1)
                .and_then(|c| c.split("..").nth(1))
                .and_then(|c| c.split_whitespace().next())
                .and_then(|c| c.parse::<f64>().ok());
            // No cost shown (COSTS OFF): counted, so the check never passes by not seeing.
            total.is_none_or(|total| total >= 1.0)
        })
        .collect()
}

/// The audit rows of `action`: (actor, role, target, outcome, changes).
pub async fn audit_rows(
    db: &tokio_postgres::Client,
    action: &str,
) -> Vec<(String, String, Option<String>, String, serde_json::Value)> {
    db.query(
        "SELECT actor, role, target, outcome, changes::text FROM audit_log WHERE action = $1 ORDER BY id",
        &[&action],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| {
        let changes: String = r.get(4);
        (
            r.get(0),
            r.get(1),
            r.get(2),
            r.get(3),
            serde_json::from_str(&changes).unwrap(),
        )
    })
    .collect()
}

/// Signs in to the console at `base` as a browser does: it reads the sign-in form first (its
/// cookie and the `csrf` field it carries), then posts `token` with them. A client without
/// redirects sees the 303 (signed in) or the 401 page.
pub async fn console_sign_in(
    client: &reqwest::Client,
    base: &str,
    token: Option<&str>,
) -> reqwest::Response {
    let form = client
        .get(format!("{base}/console/login"))
        .send()
        .await
        .unwrap();
    let cookies: Vec<String> = form
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next().map(str::to_owned))
        .collect();
    let page = form.text().await.unwrap();
    let csrf = page
        .split("name=\"csrf\"")
        .nth(1)
        .and_then(|rest| rest.split("value=\"").nth(1))
        .and_then(|rest| rest.split('"').next())
        .map(str::to_owned);
    let mut fields: Vec<(&str, String)> = Vec::new();
    if let Some(token) = token {
        fields.push(("token", token.to_owned()));
    }
    if let Some(csrf) = csrf {
        fields.push(("csrf", csrf));
    }
    let mut request = client.post(format!("{base}/console/login")).form(&fields);
    if !cookies.is_empty() {
        request = request.header("Cookie", cookies.join("; "));
    }
    request.send().await.unwrap()
}
