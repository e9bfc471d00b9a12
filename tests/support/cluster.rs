//! A throwaway PostgreSQL cluster owned by one test, for tests that stop, restart or crash the
//! server (never the shared one other tests run on). As root, `initdb` and `pg_ctl` run as the
//! `postgres` user in a fresh temp directory that user owns; the cluster listens on 127.0.0.1
//! only, on a free port, with its socket in its own directory. Dropping it stops the server
//! (`-m immediate`) and removes the directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN_DIR: &str = "/usr/lib/postgresql/15/bin";

pub struct Cluster {
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    /// Runs `initdb` and starts the server; blocks until it accepts connections.
    pub fn start() -> Self {
        let cluster = Self::init();
        cluster.pg_ctl(&["start"]);
        cluster
    }

    /// Runs `initdb` only: settings can be added ([`Cluster::append_settings`]) before
    /// [`Cluster::start_again`] starts it.
    pub fn init() -> Self {
        let dir =
            std::env::temp_dir().join(format!("cg-cluster-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let cluster = Self {
            port: free_port(),
            dir,
        };
        if is_root() {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&cluster.dir)
                .output()
                .unwrap();
            assert!(
                chown.status.success(),
                "chown of the cluster directory failed: {}",
                text(&chown)
            );
        }
        let data = cluster.data_dir();
        let initdb = cluster.run(
            "initdb",
            &[
                "-D",
                path_str(&data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
            ],
        );
        assert!(initdb.status.success(), "initdb failed: {}", text(&initdb));
        cluster
    }

    /// Appends `settings` to the server's postgresql.conf (read at the next start).
    pub fn append_settings(&self, settings: &str) {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data_dir().join("postgresql.conf"))
            .unwrap();
        writeln!(file, "\n{settings}").unwrap();
    }

    /// The cluster's own directory (its data, socket and log live in it), owned by the
    /// server's user.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `program` (a path, or a name on PATH) as the server's user, from the cluster's
    /// directory; its output, whatever its exit status.
    pub fn run_as_server_user(&self, program: &str, args: &[&str]) -> Output {
        let mut command = if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.args(args).current_dir(&self.dir).output().unwrap()
    }

    /// Runs a psql script file as the superuser on database `name`, with `-v` variables.
    pub fn psql_file(&self, name: &str, file: &Path, variables: &[(&str, &str)]) {
        let mut command = Command::new(Path::new(BIN_DIR).join("psql"));
        command
            .arg(self.url(name))
            .args(["-X", "-q", "-f"])
            .arg(file);
        for (key, value) in variables {
            command.arg("-v").arg(format!("{key}={value}"));
        }
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "psql -f {} failed: {}",
            file.display(),
            text(&output)
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name` on this cluster.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Creates database `name` and applies the gateway's migrations to it; returns its URL.
    pub async fn migrated_database(&self, name: &str) -> String {
        let admin = super::connect(&self.url("postgres")).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = self.url(name);
        callback_gateway::db::run_migrations(&url).await.unwrap();
        url
    }

    /// `pg_ctl restart -m immediate`: every backend dies at once (a crash, as far as clients can
    /// tell) and the server runs crash recovery before it accepts connections again.
    pub fn restart_immediate(&self) {
        self.pg_ctl(&["restart", "-m", "immediate"]);
    }

    /// Sets `synchronous_standby_names` (ALTER SYSTEM, reload); returns once a new session
    /// sees it. A name no standby has (`'ghost'`) makes every commit wait, forever, the way a
    /// stalled synchronous standby does; `''` lets them finish.
    pub async fn set_synchronous_standby_names(&self, value: &str) {
        self.set_system("synchronous_standby_names", value).await;
    }

    /// `ALTER SYSTEM SET name = 'value'` and a reload; returns once a new session sees it.
    /// Sessions that did not set `name` themselves take it at the reload too.
    pub async fn set_system(&self, name: &str, value: &str) {
        let admin = super::connect(&self.url("postgres")).await;
        // Two messages: a multi-statement string is one implicit transaction, which ALTER
        // SYSTEM refuses.
        admin
            .batch_execute(&format!("ALTER SYSTEM SET {name} = '{value}'"))
            .await
            .unwrap();
        admin
            .batch_execute("SELECT pg_reload_conf()")
            .await
            .unwrap();
        let started = std::time::Instant::now();
        loop {
            let probe = super::connect(&self.url("postgres")).await;
            let now: String = probe
                .query_one(&format!("SHOW {name}"), &[])
                .await
                .unwrap()
                .get(0);
            if now == value {
                return;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "the server did not take {name} = '{value}'"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Turns TLS on: `cert_pem` (the server's certificate, then its chain) and `key_pem` as
    /// the server's files (the key readable by the server's user only, as PostgreSQL insists),
    /// `ssl = on`, and a reload; returns once a new session sees it.
    pub async fn enable_tls(&self, cert_pem: &str, key_pem: &str) {
        let cert = self.data_dir().join("server.crt");
        let key = self.data_dir().join("server.key");
        std::fs::write(&cert, cert_pem).unwrap();
        std::fs::write(&key, key_pem).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        if is_root() {
            let chown = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&cert)
                .arg(&key)
                .output()
                .unwrap();
            assert!(chown.status.success(), "chown: {}", text(&chown));
        }
        self.set_system("ssl", "on").await;
    }

    /// Stops the server (`-m fast`: open sessions are terminated, nothing waits for clients).
    pub fn stop(&self) {
        self.pg_ctl(&["stop", "-m", "fast"]);
    }

    /// Starts a stopped server again; blocks until it accepts connections.
    pub fn start_again(&self) {
        self.pg_ctl(&["start"]);
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn pg_ctl(&self, action: &[&str]) {
        let options = format!(
            "-c port={} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off -c max_connections=100",
            self.port,
            path_str(&self.dir)
        );
        let data = self.data_dir();
        let log = self.dir.join("server.log");
        let mut args = vec![
            "-D",
            path_str(&data),
            "-l",
            path_str(&log),
            "-w",
            "-t",
            "60",
        ];
        if action[0] != "stop" {
            args.extend(["-o", options.as_str()]);
        }
        args.extend_from_slice(action);
        let output = self.run("pg_ctl", &args);
        assert!(
            output.status.success(),
            "pg_ctl {action:?} failed: {}\nserver log:\n{}",
            text(&output),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    fn run(&self, program: &str, args: &[&str]) -> Output {
        let program = Path::new(BIN_DIR).join(program);
        let mut command = if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.args(args).current_dir(&self.dir).output().unwrap()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        let _ = self.run(
            "pg_ctl",
            &["-D", path_str(&data), "stop", "-m", "immediate", "-w"],
        );
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A port nothing listens on right now (bind port 0, read it, let it go).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether the tests run as root (they may mount file systems and act as `postgres`).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}
