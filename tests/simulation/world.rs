//! One simulated world: a database of its own, the real `callback-gateway serve` binary as a
//! child process (so it can be killed with SIGKILL and started again), the provider's API
//! emulator when the provider must be asked, and the product's own commands (`cleanup`,
//! `history archive`, `export`, `replay`) run as an operator would run them. Time moves by SQL
//! and configuration, never by sleeping: an idempotency record "expires" by having its expiry
//! set into the past and the cleaner run; a delivery "months ago" by moving its event-log row
//! into that month's partition.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::models::Model;
use crate::support::cluster::free_port;
use crate::support::emulator::Emulator;
use crate::support::{self, ADMIN_TOKEN, MERCHANT};

/// The binary a world runs: the one this build made, or another one (`--gateway`), such as a
/// build of an older commit the simulator is to find bugs in.
#[derive(Debug, Clone)]
pub struct Binary {
    pub path: PathBuf,
    /// Another binary migrates an empty database itself (its migrations may differ from
    /// this checkout's); this build's own starts from the migrated template.
    pub foreign: bool,
}

impl Binary {
    pub fn this_build() -> Self {
        Self {
            path: PathBuf::from(env!("CARGO_BIN_EXE_callback-gateway")),
            foreign: false,
        }
    }
}

pub struct World {
    pub dir: PathBuf,
    pub database_url: String,
    pub db: tokio_postgres::Client,
    pub client: reqwest::Client,
    pub api: Option<Arc<Emulator>>,
    /// The merchant's API token (orders are created as the merchant would).
    pub token: String,
    /// The merchant's notification endpoints made by API (this build only): each id with its
    /// filter (empty: every type). Notifications are staged for each in the transactions of
    /// the history's changes; the oracle checks each got exactly its types.
    pub endpoints: Vec<(String, Vec<String>)>,
    pub port: u16,
    binary: Binary,
    gateway: Mutex<Child>,
    /// Serialises what acts on the whole world: restarting the gateway, archiving and
    /// dropping months, and moving rows into past months.
    pub exclusive: Mutex<()>,
    /// When connections were last cut.
    last_cut: std::sync::Mutex<Option<Instant>>,
    /// How many times the gateway was started, and the newest start seen ready: a gateway
    /// answers callbacks 503 `unavailable` (the same answer as a database outage) from its
    /// start until its first read of the merchants' endpoints.
    starts: AtomicUsize,
    ready_start: AtomicUsize,
}

impl Drop for World {
    fn drop(&mut self) {
        if let Ok(mut child) = self.gateway.try_lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::env::var_os("SIMULATE_KEEP_WORLD").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl World {
    /// A new world for `model`'s provider, its gateway ready to serve.
    pub async fn start(model: &dyn Model, binary: &Binary) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("cg-sim-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("archive"))?;
        let database_url = if binary.foreign {
            support::empty_database().await
        } else {
            support::fresh_database().await
        };
        let api = if model.asks_api() {
            Some(Arc::new(Emulator::start().await))
        } else {
            None
        };
        let port = free_port();
        // A simulated provider that signs nothing (Mollie) posts every delivery from this one
        // address, past the default limit per address: this build's limit is raised out of the
        // way (a foreign binary of an older version knows no [limits]).
        // This build's merchant has notification endpoints made by API ([`ENDPOINTS`]), on an
        // origin granted to it where nothing listens: every change stages its notifications in
        // its transaction, and the sender's attempts fail and are retried.
        let limits = if binary.foreign {
            String::new()
        } else {
            format!(
                "\n[limits]\nunsigned_deliveries_per_minute = 1000000\n\
                 [secrets]\nkey = \"{SECRETS_KEY}\"\n[notifications]\nallow_http = true\n\
                 [[merchants]]\nid = {MERCHANT}\nallow_hosts = [\"{ENDPOINT_ORIGIN}\"]\n"
            )
        };
        let provider = format!("{}{limits}", model.provider_toml(api.as_deref()));
        // Serve's own pass only makes months ahead; months are archived and dropped by the
        // operator's `history archive` alone, which the runner serialises with the SQL that
        // moves rows into past months. A pass in serve (at every restart) would race that SQL,
        // which no production delivery does (rows arrive in the current month only), and
        // would strand a month between its archive and its drop for the wrong reason.
        std::fs::write(
            dir.join("gateway.toml"),
            gateway_config(&database_url, port, &dir, &provider, false),
        )?;
        std::fs::write(
            dir.join(ARCHIVING_CONFIG),
            gateway_config(&database_url, port, &dir, &provider, true),
        )?;
        let child = spawn(&binary.path, &dir, &database_url)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .no_proxy()
            .build()?;
        let db = support::connect(&database_url).await;
        let mut world = Self {
            dir,
            database_url,
            db,
            client,
            api,
            token: String::new(),
            endpoints: Vec::new(),
            port,
            binary: binary.clone(),
            gateway: Mutex::new(child),
            exclusive: Mutex::new(()),
            last_cut: std::sync::Mutex::new(None),
            starts: AtomicUsize::new(1),
            ready_start: AtomicUsize::new(0),
        };
        world.wait_ready().await?;
        world.token = world.command(&["token", "issue", "--user-id", &MERCHANT.to_string()])?;
        if !binary.foreign {
            world.make_endpoints().await?;
        }
        world.partition_by_month().await?;
        Ok(world)
    }

    /// The merchant's endpoints of [`ENDPOINTS`], made by API; returns once the gateway holds
    /// them all (before it, a change would be staged for some and not the others).
    async fn make_endpoints(&mut self) -> anyhow::Result<()> {
        for (n, filter) in ENDPOINTS.iter().enumerate() {
            let response = self
                .client
                .post(self.url("/v1/webhook-endpoints"))
                .bearer_auth(&self.token)
                .json(&serde_json::json!({
                    "url": format!("{ENDPOINT_ORIGIN}/hooks/{n}"),
                    "filter_types": filter,
                }))
                .send()
                .await?;
            let status = response.status();
            let body: serde_json::Value = response.json().await?;
            anyhow::ensure!(status == 201, "making endpoint {n}: {status} {body}");
            let id = body["id"].as_str().unwrap_or_default().to_owned();
            self.endpoints
                .push((id, filter.iter().map(|t| (*t).to_owned()).collect()));
        }
        let revision: i64 = self
            .db
            .query_one("SELECT revision FROM webhook_endpoint_revision", &[])
            .await?
            .get(0);
        let started = Instant::now();
        let line = format!("gateway_webhook_endpoints_revision {revision}");
        loop {
            let metrics = self
                .client
                .get(self.url("/metrics"))
                .send()
                .await?
                .text()
                .await?;
            if metrics.lines().any(|l| l == line) {
                return Ok(());
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "the gateway did not load the endpoints' revision {revision}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("gateway.log")).unwrap_or_default()
    }

    /// Waits for `/readyz`; a gateway that exited (a migration cut short by a lost
    /// connection exits 1) is started again, as its supervisor (systemd) would.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut restarts = 0;
        loop {
            let start = self.starts.load(Ordering::SeqCst);
            if let Ok(response) = self.client.get(self.url("/readyz")).send().await
                && response.status() == 200
            {
                self.ready_start.fetch_max(start, Ordering::SeqCst);
                return Ok(());
            }
            {
                let mut child = self.gateway.lock().await;
                if let Some(status) = child.try_wait()? {
                    restarts += 1;
                    if restarts > 5 {
                        anyhow::bail!(
                            "the gateway exited with {status} five times:\n{}",
                            tail(&self.log())
                        );
                    }
                    self.starts.fetch_add(1, Ordering::SeqCst);
                    *child = spawn(&self.binary.path, &self.dir, &self.database_url)?;
                }
            }
            if started.elapsed() > Duration::from_secs(90) {
                anyhow::bail!("the gateway was not ready in 90 s:\n{}", tail(&self.log()));
            }
            // Polling an observable condition (readiness), not a timed synchronisation.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs `callback-gateway --config <world> ARGS` to completion; its stdout, trimmed.
    pub fn command(&self, args: &[&str]) -> anyhow::Result<String> {
        let config = if args.first() == Some(&"history") {
            ARCHIVING_CONFIG
        } else {
            "gateway.toml"
        };
        let output = Command::new(&self.binary.path)
            .arg("--config")
            .arg(self.dir.join(config))
            .args(args)
            .env_remove("GATEWAY_CONFIG")
            .env("DATABASE_URL", &self.database_url)
            .env("RUST_LOG", "error")
            .env_remove("HTTPS_PROXY")
            .env_remove("HTTP_PROXY")
            .env_remove("ALL_PROXY")
            .stdin(Stdio::null())
            .output()?;
        if !output.status.success() {
            anyhow::bail!(
                "callback-gateway {} exited with {}: {}{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr),
                String::from_utf8_lossy(&output.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Like [`Self::command`], off the runtime's threads, run again (up to five times) when
    /// it fails, as an operator would after a lost connection: only a command that keeps
    /// failing is an error.
    pub async fn command_async(self: &Arc<Self>, args: Vec<String>) -> anyhow::Result<String> {
        self.command_async_tries(args, 5).await
    }

    /// Like [`Self::command_async`], with `tries` runs for a failure other than a lost
    /// connection: 1 for a command whose first answer is what is checked (`settle`'s exit 1
    /// is its finding, and a second run would book nothing and exit 0).
    pub async fn command_async_tries(
        self: &Arc<Self>,
        args: Vec<String>,
        tries: usize,
    ) -> anyhow::Result<String> {
        // An operator runs a command cut by a lost connection again; the cuts of the other
        // histories come at any moment, so a long command (an archive reads and hashes every
        // row of a month) may need several runs. Any other failure gets five.
        let mut last = None;
        let mut other_failures = 0;
        for _ in 0..30 {
            let world = self.clone();
            let args = args.clone();
            let result = tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                world.command(&args)
            })
            .await?;
            match result {
                Ok(out) => return Ok(out),
                Err(error) => {
                    if !connection_lost(&error.to_string()) {
                        other_failures += 1;
                    }
                    last = Some(error);
                    if other_failures == tries {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no attempt")))
    }

    /// SIGKILL: no shutdown code runs; open transactions die with their sockets. Then the
    /// same binary starts again on the same port and database.
    pub async fn kill_and_restart(&self) -> anyhow::Result<()> {
        {
            let mut child = self.gateway.lock().await;
            child.kill()?;
            child.wait()?;
            self.starts.fetch_add(1, Ordering::SeqCst);
            *child = spawn(&self.binary.path, &self.dir, &self.database_url)?;
        }
        self.wait_ready().await
    }

    /// How many outages of the world's own making so far: the provider's API answering a
    /// scripted status (one history's `retries` fault, which any history's next fetch meets).
    pub fn api_outages(&self) -> usize {
        self.api.as_ref().map_or(0, |api| api.scripted_given())
    }

    /// The gateway's starts so far, and whether the newest one is not yet seen ready.
    pub fn start_state(&self) -> (usize, bool) {
        let starts = self.starts.load(Ordering::SeqCst);
        (starts, self.ready_start.load(Ordering::SeqCst) < starts)
    }

    /// Whether the gateway was starting at `before` (a [`Self::start_state`]) or has started
    /// since, or is starting now: its 503s then are the start's.
    pub fn started_since(&self, before: (usize, bool)) -> bool {
        let now = self.start_state();
        before.1 || now.1 || now.0 != before.0
    }

    /// Whether connections were cut within `CUT_AFTERMATH` before `at`, or since.
    pub fn cut_since(&self, at: Instant) -> bool {
        self.last_cut
            .lock()
            .expect("not poisoned")
            .is_some_and(|cut| cut + CUT_AFTERMATH >= at)
    }

    /// Starts the gateway again if it exited (a start cut short by a lost connection).
    pub async fn ensure_running(&self) -> anyhow::Result<()> {
        let exited = self.gateway.lock().await.try_wait()?.is_some();
        if exited {
            self.wait_ready().await?;
        }
        Ok(())
    }

    /// Every connection the gateway holds to the database is cut by the server.
    pub async fn cut_connections(&self) -> anyhow::Result<()> {
        *self.last_cut.lock().expect("not poisoned") = Some(Instant::now());
        self.db
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid()",
                &[],
            )
            .await?;
        Ok(())
    }

    /// The event log as a database partitioned for years has it: one partition a month from
    /// two years back to the months ahead, so a delivery can be moved into an older month.
    async fn partition_by_month(&self) -> anyhow::Result<()> {
        // The legacy partition (everything before the first month the log was partitioned
        // in) overlaps those months: its rows (none in a new world) move into them.
        self.db
            .batch_execute(
                "ALTER TABLE callback_deliveries DETACH PARTITION callback_deliveries_legacy; \
                 SELECT callback_deliveries_add_month(m) FROM generate_series( \
                     date_trunc('month', now()) - interval '24 months', \
                     now() + interval '1 month', interval '1 month') m; \
                 INSERT INTO callback_deliveries SELECT * FROM callback_deliveries_legacy; \
                 DROP TABLE callback_deliveries_legacy;",
            )
            .await?;
        Ok(())
    }

    /// The merchant's order of `amount_minor` `currency`, made through the API.
    pub async fn create_order(&self, amount_minor: i64, currency: &str) -> anyhow::Result<i64> {
        let body = format!(r#"{{"amount_minor":{amount_minor},"currency":"{currency}"}}"#);
        for _ in 0..200 {
            let response = self
                .client
                .post(self.url("/v1/orders"))
                .bearer_auth(&self.token)
                .header("Idempotency-Key", uuid::Uuid::new_v4().to_string())
                .header("Content-Type", "application/json")
                .body(body.clone())
                .send()
                .await;
            // The gateway may be restarting (another history killed it): try again.
            let Ok(response) = response else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            if response.status() == 201 {
                let order: serde_json::Value = response.json().await?;
                return order["id"]
                    .as_i64()
                    .ok_or_else(|| anyhow::anyhow!("an order without an id"));
            }
            if response.status().is_server_error() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            anyhow::bail!("creating an order: {}", response.text().await?);
        }
        anyhow::bail!("the gateway made no order in 200 tries")
    }

    /// `POST /admin/events/{provider}/{event_id}/replay` as a finance operator would.
    pub async fn admin_replay(
        &self,
        provider: &str,
        event_id: &str,
    ) -> anyhow::Result<(u16, String)> {
        let path = format!(
            "/admin/events/{}/{}/replay",
            encode(provider),
            encode(event_id)
        );
        let response = self
            .client
            .post(self.url(&path))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    pub fn archive_dir(&self) -> PathBuf {
        self.dir.join("archive")
    }
}

/// `name` as one URL path segment.
fn encode(name: &str) -> String {
    url::form_urlencoded::byte_serialize(name.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// Whether a command's error says its database connection was cut (the `cut` fault).
fn connection_lost(error: &str) -> bool {
    [
        "terminating connection",
        "connection closed",
        "server closed the connection",
        // A cut that lands while a command connects (`settle`, tried once otherwise).
        "Connection reset by peer",
    ]
    .iter()
    .any(|cut| error.contains(cut))
}

/// The last lines of a log, for an error message.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// How long after a cut a 503 is taken for the cut's: the gateway's pooled connections die
/// with it and each fails the one request that takes it next, as soon as it is taken.
const CUT_AFTERMATH: Duration = Duration::from_secs(1);

/// `[secrets] key` of this build's worlds (32 bytes, base64; a test value).
const SECRETS_KEY: &str = "c2ltdWxhdG9yLXNlY3JldHMta2V5LTMyLWJ5dGVzISE=";
/// Where the merchant's endpoints are: granted to it, and nothing listens (the discard port).
const ENDPOINT_ORIGIN: &str = "http://127.0.0.1:9";
/// The filters of the merchant's endpoints: two filtered, one for every type.
const ENDPOINTS: [&[&str]; 3] = [
    &["order.paid"],
    &[
        "order.refunded",
        "order.partially_refunded",
        "order.disputed",
        "order.charged_back",
    ],
    &[],
];

/// The configuration `history` commands run with: serve's, with an archive folder.
const ARCHIVING_CONFIG: &str = "archiving.toml";

fn gateway_config(
    database_url: &str,
    port: u16,
    dir: &Path,
    provider: &str,
    archiving: bool,
) -> String {
    let archive_dir = if archiving {
        format!("archive_dir = {:?}\n", dir.join("archive"))
    } else {
        String::new()
    };
    format!(
        r#"
[server]
bind = "127.0.0.1:{port}"
workers = 2
acquire_timeout_ms = 3000

[database]
url = "{database_url}"
pool_size = 8
api_pool_size = 2

[admin]
token = "{ADMIN_TOKEN}"

[idempotency]
# The simulator expires records itself (SQL, then `cleanup`): the cleaner in serve waits.
cleanup_interval_secs = 86400

[history]
{archive_dir}keep_days = 120
interval_secs = 86400
{provider}"#
    )
}

fn spawn(binary: &Path, dir: &Path, database_url: &str) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("gateway.log"))?;
    Ok(Command::new(binary)
        .arg("--config")
        .arg(dir.join("gateway.toml"))
        .arg("serve")
        .env_remove("GATEWAY_CONFIG")
        .env_remove("HTTPS_PROXY")
        .env_remove("HTTP_PROXY")
        .env_remove("ALL_PROXY")
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?)
}
