//! A test-owned cluster backed up by pgBackRest as `deploy/pgbackrest/` configures a
//! production one: the same `pgbackrest.conf` with only its paths and port replaced by this
//! cluster's, and the same archiving settings in `postgresql.conf`. The repository lives in the
//! cluster's own directory, so dropping the cluster removes it too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::Cluster;

const DEPLOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/pgbackrest");

pub struct Backed {
    pub cluster: Cluster,
    conf: PathBuf,
    pub stanza: String,
}

/// `text` (an ini file) with `key=value` lines of `replaced` set to their new values; every
/// key must be in it, so a renamed setting in deploy/ fails here rather than go untested.
fn replace_settings(text: &str, replaced: &[(&str, String)]) -> String {
    let mut seen = Vec::new();
    let out: Vec<String> = text
        .lines()
        .map(|line| match line.split_once('=') {
            Some((key, _)) if !line.starts_with('#') => {
                match replaced.iter().find(|(k, _)| *k == key.trim()) {
                    Some((k, value)) => {
                        seen.push(*k);
                        format!("{k}={value}")
                    }
                    None => line.to_owned(),
                }
            }
            _ => line.to_owned(),
        })
        .collect();
    for (key, _) in replaced {
        assert!(
            seen.contains(key),
            "deploy/pgbackrest/pgbackrest.conf has no {key}"
        );
    }
    out.join("\n") + "\n"
}

impl Backed {
    /// A new cluster with WAL archiving to a new pgBackRest repository (stanza created and
    /// checked: a WAL segment went all the way to the repository).
    pub fn start() -> Self {
        let cluster = Cluster::init();
        let dir = cluster.dir().to_owned();
        let deployed = std::fs::read_to_string(Path::new(DEPLOY).join("pgbackrest.conf")).unwrap();
        let stanza = deployed
            .lines()
            .filter_map(|l| l.strip_prefix('[')?.strip_suffix(']'))
            .find(|section| *section != "global")
            .expect("a stanza section in deploy/pgbackrest/pgbackrest.conf")
            .to_owned();
        let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
        let conf_text = replace_settings(
            &deployed,
            &[
                ("repo1-path", path("repo")),
                ("log-path", path("log")),
                ("lock-path", path("lock")),
                ("pg1-path", path("data")),
                ("pg1-port", cluster.port().to_string()),
                ("pg1-socket-path", path("")),
            ],
        );
        let conf = dir.join("pgbackrest.conf");
        std::fs::write(&conf, conf_text).unwrap();
        for sub in ["repo", "log", "lock"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        if super::cluster::is_root() {
            let chown = std::process::Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .output()
                .unwrap();
            assert!(chown.status.success());
        }
        // The archiving settings as deployed, pgBackRest pointed at this cluster's file.
        let settings = std::fs::read_to_string(Path::new(DEPLOY).join("postgresql.conf"))
            .unwrap()
            .replace(
                "'pgbackrest ",
                &format!("'pgbackrest --config={} ", conf.display()),
            );
        assert!(settings.contains("archive_command"), "{settings}");
        cluster.append_settings(&settings);
        cluster.start_again();
        let backed = Self {
            cluster,
            conf,
            stanza,
        };
        backed.pgbackrest(&["stanza-create"]);
        backed.pgbackrest(&["check"]);
        backed
    }

    /// Runs `pgbackrest --config=.. --stanza=.. ARGS` as the server's user; its output. Fails
    /// the test when it fails.
    pub fn pgbackrest(&self, args: &[&str]) -> String {
        let config = format!("--config={}", self.conf.display());
        let stanza = format!("--stanza={}", self.stanza);
        let mut all = vec![config.as_str(), stanza.as_str()];
        all.extend_from_slice(args);
        let output = self.cluster.run_as_server_user("pgbackrest", &all);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success(),
            "pgbackrest {args:?} failed:\n{text}"
        );
        text
    }

    /// A backup: `full`, `diff` or `incr`. Returns how long it took.
    pub fn backup(&self, kind: &str) -> Duration {
        let started = Instant::now();
        self.pgbackrest(&[&format!("--type={kind}"), "backup"]);
        started.elapsed()
    }

    /// The WAL written so far, in the repository: `pgbackrest check` switches to a new segment
    /// and waits until the old one is archived (what an operator runs before stopping a
    /// server to restore it, so the last writes are there to replay).
    pub fn archive_now(&self) {
        self.pgbackrest(&["check"]);
    }

    /// The backups in the repository, as `pgbackrest info --output=json` lists them: (type,
    /// label) of each.
    pub fn backups(&self) -> Vec<(String, String)> {
        let info: serde_json::Value =
            serde_json::from_str(&self.pgbackrest(&["info", "--output=json"])).unwrap();
        info[0]["backup"]
            .as_array()
            .map(|backups| {
                backups
                    .iter()
                    .map(|b| {
                        (
                            b["type"].as_str().unwrap_or_default().to_owned(),
                            b["label"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The point-in-time restore of docs/backup.md: the server stopped, its data directory
    /// restored in place (`--delta`: only files that differ are copied) from the newest backup
    /// before `target`, WAL replayed from the archive up to `target` (a PostgreSQL timestamp),
    /// then promoted. Returns once the server takes writes again; how long the restore
    /// command took, and the recovery after it.
    pub async fn restore_to(&self, target: &str) -> (Duration, Duration) {
        self.cluster.stop();
        let started = Instant::now();
        self.pgbackrest(&[
            "--delta",
            "--type=time",
            &format!("--target={target}"),
            "--target-action=promote",
            "restore",
        ]);
        let restore = started.elapsed();
        let started = Instant::now();
        self.cluster.start_again();
        self.until_promoted().await;
        (restore, started.elapsed())
    }

    /// Polls until the server has left recovery.
    pub async fn until_promoted(&self) {
        let url = self.cluster.url("postgres");
        super::until("the restored server to leave recovery", async || {
            let client = super::connect(&url).await;
            !client
                .query_one("SELECT pg_is_in_recovery()", &[])
                .await
                .unwrap()
                .get::<_, bool>(0)
        })
        .await;
    }
}
