//! The real `callback-gateway serve` binary as a child process: tests that kill it, restart
//! it, send it signals, or run several of it against one database.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::free_port;
use super::{config_with, fresh_database};

/// The real `callback-gateway serve` on a fixed port, its log in a temp directory.
pub struct GatewayProcess {
    pub child: Child,
    pub dir: PathBuf,
    pub port: u16,
    pub database_url: String,
    /// Variables set in the process's environment besides the usual ones.
    pub env: Vec<(String, String)>,
}

impl GatewayProcess {
    pub fn start(dir: &Path, port: u16, database_url: &str) -> Self {
        Self::start_with_env(dir, port, database_url, &[])
    }

    pub fn start_with_env(dir: &Path, port: u16, database_url: &str, env: &[(&str, &str)]) -> Self {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Self {
            child: spawn_gateway(dir, port, database_url, &env),
            dir: dir.to_owned(),
            port,
            database_url: database_url.to_owned(),
            env,
        }
    }

    /// As [`GatewayProcess::spawn_on`], with `env` set in the gateway's environment.
    pub async fn spawn_on_with_env(database_url: &str, config: &str, env: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("cg-proc-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gateway.toml"), config).unwrap();
        let mut gateway = Self::start_with_env(&dir, free_port(), database_url, env);
        gateway.wait_ready().await;
        gateway
    }

    /// Writes the config file and starts the gateway; returns once /readyz answers 200.
    /// Writes `config` (a whole file) and starts the gateway on `database_url` (which may name
    /// several hosts); returns once /readyz answers 200.
    pub async fn spawn_on(database_url: &str, config: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cg-proc-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gateway.toml"), config).unwrap();
        let mut gateway = Self::start(&dir, free_port(), database_url);
        gateway.wait_ready().await;
        gateway
    }

    pub async fn spawn(extra: &str) -> Self {
        let database_url = fresh_database().await;
        let dir = std::env::temp_dir().join(format!("cg-proc-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gateway.toml"), config_with(&database_url, extra)).unwrap();
        let mut gateway = Self::start(&dir, free_port(), &database_url);
        gateway.wait_ready().await;
        gateway
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("gateway.log")).unwrap_or_default()
    }

    /// The distinct causes of the errors and panics in the log, without timestamps.
    pub fn error_causes(&self) -> Vec<String> {
        let mut causes: Vec<String> = self
            .log()
            .lines()
            .filter(|line| line.contains("error.cause") || line.contains("panicked"))
            .map(|line| {
                let line = line
                    .split_once("error.cause")
                    .map_or(line, |(_, cause)| cause);
                line.chars().filter(|c| !c.is_control()).collect::<String>()
            })
            .collect();
        causes.sort();
        causes.dedup();
        causes
    }

    pub async fn wait_ready(&mut self) {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let url = format!("{}/readyz", self.address());
        let started = Instant::now();
        loop {
            if let Ok(response) = client.get(&url).send().await
                && response.status() == 200
            {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the gateway exited with {status} before it was ready:\n{}",
                    self.log()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the gateway was not ready within 60 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no shutdown code runs, open transactions die with their sockets.
    pub fn kill_9(&mut self) {
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            status.signal(),
            Some(9),
            "the gateway should have died of SIGKILL"
        );
    }

    /// Starts the same binary with the same config on the same port; waits until it is ready.
    pub async fn restart(&mut self) {
        self.child = spawn_gateway(&self.dir, self.port, &self.database_url, &self.env);
        self.wait_ready().await;
    }

    /// Polls until the process exits; fails the test after `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "the gateway did not exit within {limit:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The binary the tests run: this build's, or `GATEWAY_BIN` (another commit's build, to show
/// that a test of the binary fails there: docs/testing.md).
pub fn gateway_binary() -> std::ffi::OsString {
    std::env::var_os("GATEWAY_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_callback-gateway").into())
}

/// `callback-gateway --config DIR/gateway.toml serve`, logging to DIR/gateway.log.
fn spawn_gateway(dir: &Path, port: u16, database_url: &str, env: &[(String, String)]) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("gateway.log"))
        .unwrap();
    Command::new(gateway_binary())
        .arg("--config")
        .arg(dir.join("gateway.toml"))
        .arg("serve")
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", database_url)
        .env("GATEWAY_BIND", format!("127.0.0.1:{port}"))
        .env("RUST_LOG", "warn,actix_server=info")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
