//! TLS to PostgreSQL (issue 37, finding 3): libpq's `sslmode` and `sslrootcert` in the database
//! URLs, for the pools, the replica and the CLI commands, against a cluster of the test's own
//! with `ssl = on` and a certificate from a CA made here (its name `localhost`), and a second
//! cluster without TLS.

use std::process::Command;

use callback_gateway::db;
use callback_gateway::db::one_row::CommittedResult;
use diesel::QueryableByName;
use diesel::sql_types::{Bool, Text};

use crate::support::cluster::Cluster;
use crate::support::gateway::GatewayProcess;
use crate::support::paypal::TestCa;
use crate::support::{ADMIN_TOKEN, base_config, connect};

/// The cluster with TLS, and the CA file a client trusts it with.
struct TlsCluster {
    cluster: Cluster,
    ca_file: std::path::PathBuf,
    /// A CA that did not sign the server's certificate.
    stranger_file: std::path::PathBuf,
}

impl TlsCluster {
    async fn start() -> Self {
        let ca = TestCa::root("Database Test CA");
        let (cert, key) = ca.server_identity_pem(&["localhost"]);
        let cluster = Cluster::start();
        cluster.enable_tls(&cert, &key).await;
        let dir = std::env::temp_dir().join(format!("cg-dbtls-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let stranger_file = dir.join("stranger.pem");
        std::fs::write(&stranger_file, TestCa::root("Somebody Else").pem()).unwrap();
        Self {
            cluster,
            ca_file,
            stranger_file,
        }
    }

    /// Database `db` on `host` (`localhost` is the certificate's name; `127.0.0.1` is not).
    fn url(&self, host: &str, db: &str, query: &str) -> String {
        format!(
            "postgres://postgres@{host}:{}/{db}?{query}",
            self.cluster.port()
        )
    }

    fn verify_full(&self, host: &str, db: &str) -> String {
        self.url(
            host,
            db,
            &format!("sslmode=verify-full&sslrootcert={}", self.ca_file.display()),
        )
    }
}

#[derive(QueryableByName)]
struct Session {
    #[diesel(sql_type = Bool)]
    ssl: bool,
    #[diesel(sql_type = Text)]
    version: String,
}

/// Whether this connection's own session is encrypted, as the server sees it, and its protocol.
async fn session_of(url: &str) -> Result<(bool, String), String> {
    let mut conn = db::connect(url).await.map_err(|e| format!("{e:#}"))?;
    let session: Session = diesel::sql_query(
        "SELECT ssl, coalesce(version, '') AS version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
    )
    .committed_result(&mut conn)
    .await
    .map_err(|e| e.to_string())?;
    Ok((session.ssl, session.version))
}

/// `callback-gateway migrate` against `url`: exit code and stderr.
fn migrate(url: &str) -> (Option<i32>, String) {
    let dir = std::env::temp_dir();
    let output = Command::new(crate::support::gateway::gateway_binary())
        .arg("migrate")
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", url)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sslmode_connects_as_libpqs_does_and_refuses_what_it_must() {
    let tls = TlsCluster::start().await;
    let plain = Cluster::start();
    let ca = tls.ca_file.display();

    // verify-full with the certificate's name: encrypted, through the real binary too.
    assert_eq!(
        session_of(&tls.verify_full("localhost", "postgres")).await,
        Ok((true, "TLSv1.3".to_owned()))
    );
    let (code, stderr) = migrate(&tls.verify_full("localhost", "postgres"));
    assert_eq!(code, Some(0), "migrate over verify-full: {stderr}");

    // A name the certificate does not carry: refused, saying why.
    let refused = session_of(&tls.verify_full("127.0.0.1", "postgres"))
        .await
        .unwrap_err();
    assert!(
        refused.contains("sslmode=verify-full") && refused.contains("not valid for name"),
        "{refused}"
    );
    let (code, stderr) = migrate(&tls.verify_full("127.0.0.1", "postgres"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("not valid for name"), "{stderr}");

    // verify-ca checks the chain only: another name is fine, another CA is not.
    assert_eq!(
        session_of(&tls.url(
            "127.0.0.1",
            "postgres",
            &format!("sslmode=verify-ca&sslrootcert={ca}")
        ))
        .await
        .map(|(ssl, _)| ssl),
        Ok(true)
    );
    let stranger = session_of(&tls.url(
        "localhost",
        "postgres",
        &format!(
            "sslmode=verify-ca&sslrootcert={}",
            tls.stranger_file.display()
        ),
    ))
    .await
    .unwrap_err();
    assert!(stranger.contains("UnknownIssuer"), "{stranger}");

    // require and prefer encrypt without checking the certificate (libpq's meaning).
    for mode in ["require", "prefer"] {
        assert_eq!(
            session_of(&tls.url("127.0.0.1", "postgres", &format!("sslmode={mode}")))
                .await
                .map(|(ssl, _)| ssl),
            Ok(true),
            "{mode}"
        );
    }
    // Without sslmode the default is prefer: a server that offers TLS gets TLS.
    assert_eq!(
        session_of(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            tls.cluster.port()
        ))
        .await
        .map(|(ssl, _)| ssl),
        Ok(true)
    );
    assert_eq!(
        session_of(&tls.url("127.0.0.1", "postgres", "sslmode=disable"))
            .await
            .map(|(ssl, _)| ssl),
        Ok(false)
    );

    // A server without TLS: require fails clearly; prefer falls back to plain text.
    let plain_url = |mode: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode={mode}",
            plain.port()
        )
    };
    let refused = session_of(&plain_url("require")).await.unwrap_err();
    assert!(
        refused.contains("sslmode=require") && refused.contains("server does not support TLS"),
        "{refused}"
    );
    let (code, stderr) = migrate(&plain_url("require"));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("server does not support TLS"), "{stderr}");
    assert_eq!(
        session_of(&plain_url("prefer")).await.map(|(ssl, _)| ssl),
        Ok(false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_its_replica_reads_and_the_cli_commands_all_connect_over_verify_full() {
    let tls = TlsCluster::start().await;
    let admin = connect(&tls.cluster.url("postgres")).await;
    admin.batch_execute("CREATE DATABASE gw").await.unwrap();
    let url = tls.verify_full("localhost", "gw");
    let config = format!(
        "{}\n",
        base_config(&url).replace(
            "pool_size = 16",
            &format!("pool_size = 16\nreplica_url = \"{url}\"")
        )
    );
    // serve migrates, then its pools, its background passes and its replica pool connect.
    let gateway = GatewayProcess::spawn_on(&url, &config).await;
    let export = Command::new(crate::support::gateway::gateway_binary())
        .args(["--config"])
        .arg(gateway.dir.join("gateway.toml"))
        .args(["export", "--provider", "acme"])
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", &url)
        .output()
        .unwrap();
    assert!(
        export.status.success(),
        "export over the replica URL: {}",
        String::from_utf8_lossy(&export.stderr)
    );
    // The event log API reads from the replica pool.
    let events = reqwest::Client::new()
        .get(format!("{}/admin/events", gateway.address()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    // Every session the gateway holds on the server now is encrypted.
    let sessions = admin
        .query(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.datname = 'gw' AND a.application_name LIKE 'callback-gateway%'",
            &[],
        )
        .await
        .unwrap();
    assert!(!sessions.is_empty(), "the gateway holds no session");
    for row in &sessions {
        let (name, ssl): (String, bool) = (row.get(0), row.get(1));
        assert!(ssl, "{name} is not encrypted");
    }
}

#[test]
fn check_config_refuses_a_verify_mode_without_a_readable_root_and_names_the_field() {
    let dir = std::env::temp_dir().join(format!("cg-dbtls-cfg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    for (query, says) in [
        ("sslmode=verify-full", "needs sslrootcert"),
        (
            "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "sslrootcert /nonexistent/ca.pem",
        ),
        ("sslmode=allow", "sslmode=allow is not supported"),
    ] {
        let url = format!("postgres://gateway:db-secret-pw@127.0.0.1:1/gateway?{query}");
        std::fs::write(dir.join("gateway.toml"), base_config(&url)).unwrap();
        let output = Command::new(crate::support::gateway::gateway_binary())
            .args(["--config", "gateway.toml", "check-config"])
            .env_remove("GATEWAY_CONFIG")
            .env_remove("DATABASE_URL")
            .current_dir(&dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{query}: {stderr}");
        assert!(
            stderr.contains("database.url") && stderr.contains(says),
            "{query}: {stderr}"
        );
        assert!(!stderr.contains("db-secret-pw"), "{stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
