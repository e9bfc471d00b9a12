//! A Patroni cluster owned by one test: `scripts/ha-cluster` (the one definition of the
//! cluster, the same operators run by hand) in a temp directory of its own, on free ports.
//! Dropping it stops every process of the cluster (SIGKILL for whatever does not stop) and
//! removes the directory, also when the test panicked.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ha-cluster");

pub struct HaCluster {
    dir: PathBuf,
}

impl HaCluster {
    /// Starts etcd and two Patroni nodes (synchronous and strict unless `synchronous` is
    /// false); returns once node2 is the synchronous standby (or streams, asynchronously).
    pub fn start(synchronous: bool) -> Self {
        Self::start_with(if synchronous { &[] } else { &["--async"] })
    }

    /// `scripts/ha-cluster start OPTIONS` (`--async`, `--backup`).
    pub fn start_with(options: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("cg-ha-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let cluster = Self { dir };
        let mut args = vec!["start"];
        args.extend_from_slice(options);
        cluster.run(&args);
        cluster
    }

    /// Deletes node `name`'s data directory (the node must be stopped): a lost disk.
    pub fn remove_data(&self, name: &str) {
        std::fs::remove_dir_all(self.dir.join(name).join("data")).unwrap();
    }

    /// Node `name`'s Patroni log (pgBackRest's restore of a replica prints there).
    pub fn patroni_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name).join("patroni.log")).unwrap_or_default()
    }

    /// Runs `scripts/ha-cluster ARGS --dir DIR`; its stdout, trimmed. Fails the test with the
    /// script's output when it fails.
    pub fn run(&self, args: &[&str]) -> String {
        let output = Command::new(SCRIPT)
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .env_remove("HA_DIR")
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "scripts/ha-cluster {args:?} failed:\n{}{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// The gateway's multi-host URL (read-write).
    pub fn url(&self) -> String {
        self.run(&["url"])
    }

    /// The name of the node holding the leader key now.
    pub fn primary(&self) -> String {
        self.run(&["primary"])
    }

    /// The other node's name.
    pub fn other(name: &str) -> &'static str {
        if name == "node1" { "node2" } else { "node1" }
    }

    /// A single-host URL of node `name`'s `gateway` database.
    pub fn node_url(&self, name: &str) -> String {
        let port = self.env(&format!("{}_PG", name.to_uppercase()));
        format!("postgres://postgres@127.0.0.1:{port}/gateway")
    }

    fn env(&self, key: &str) -> String {
        env_of(&self.dir, key)
    }

    /// Polls Patroni's REST API until `path` answers 200 on node `name` (`/primary`, `/sync`);
    /// returns how long that took.
    pub async fn wait_for(&self, name: &str, path: &str, limit: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let (dir, name_owned, path_owned) =
                (self.dir.clone(), name.to_owned(), path.to_owned());
            let status =
                tokio::task::spawn_blocking(move || api_status(&dir, &name_owned, &path_owned))
                    .await
                    .unwrap();
            if status == 200 {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < limit,
                "{name} did not answer 200 on {path} within {limit:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The pid of node `name`'s walreceiver (a child of its postmaster).
    pub fn walreceiver_pid(&self, name: &str) -> Option<u32> {
        let postmaster =
            std::fs::read_to_string(self.dir.join(name).join("data/postmaster.pid")).ok()?;
        let postmaster: u32 = postmaster.lines().next()?.trim().parse().ok()?;
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let ppid: u32 = stat
                    .rsplit(')')
                    .next()?
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
                (ppid == postmaster && cmdline.contains("walreceiver")).then_some(pid)
            })
    }

    /// The end of every log of the cluster, for failure messages.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for log in ["node1/patroni.log", "node2/patroni.log"] {
            let text = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            out.push_str(&format!("--- {log} (last lines)\n"));
            for line in tail.iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

fn env_of(dir: &std::path::Path, key: &str) -> String {
    let text = std::fs::read_to_string(dir.join("cluster.env")).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} missing from cluster.env"))
        .to_owned()
}

fn api_status(dir: &std::path::Path, name: &str, path: &str) -> u16 {
    let port = env_of(dir, &format!("{}_API", name.to_uppercase()));
    Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
        ])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).parse().ok())
        .unwrap_or(0)
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        let _ = Command::new(SCRIPT)
            .args(["stop", "--dir"])
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
