//! Two database roles (issue 54): an owner runs the migrations (`[database] migrate_url`), the
//! gateway serves as a runtime role that owns nothing. Each refusal is tried as the runtime
//! role itself; the real binary migrates as the owner and serves as the runtime role; and
//! `check-config` and `serve` warn when the role on `url` owns tables or is a superuser.

use std::path::PathBuf;
use std::process::{Command, Output};

use tokio_postgres::error::SqlState;

use crate::support::gateway::GatewayProcess;
use crate::support::simulator::{Event, Simulator};
use crate::support::{
    config_with, connect, fresh_database, insert_orders, runtime_login_role, server_url, until,
    with_database, with_user,
};

/// The tables (and partitions) of the gateway's schema.
async fn tables(db: &tokio_postgres::Client) -> Vec<String> {
    db.query(
        "SELECT relname::TEXT FROM pg_class \
         WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p') ORDER BY 1",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[tokio::test]
async fn the_runtime_role_owns_nothing_and_may_not_alter_drop_or_truncate_any_table() {
    let url = fresh_database().await;
    let role = runtime_login_role(&url).await;
    let runtime = connect(&with_user(&url, &role)).await;

    let owned: i64 = runtime
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(owned, 0, "the runtime role owns nothing");
    let tables = tables(&runtime).await;
    assert!(tables.len() >= 20, "{tables:?}");
    for table in &tables {
        for statement in [
            format!("ALTER TABLE {table} ADD COLUMN tampered INT"),
            format!("ALTER TABLE {table} DISABLE TRIGGER ALL"),
            format!("DROP TABLE {table} CASCADE"),
            format!("TRUNCATE {table} CASCADE"),
        ] {
            let refused = runtime
                .batch_execute(&statement)
                .await
                .expect_err(&format!("the runtime role ran `{statement}`"));
            assert_eq!(
                refused.code(),
                Some(&SqlState::INSUFFICIENT_PRIVILEGE),
                "`{statement}` as the runtime role: {refused:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_runtime_role_may_only_append_to_and_read_the_audit_log() {
    let url = fresh_database().await;
    let role = runtime_login_role(&url).await;
    let runtime = connect(&with_user(&url, &role)).await;

    runtime
        .batch_execute(
            "INSERT INTO audit_log (actor, role, action, outcome) \
             VALUES ('alice', 'admin', 'operator.add', 'added')",
        )
        .await
        .expect("the runtime role appends to the audit log");
    let rows: i64 = runtime
        .query_one("SELECT count(*) FROM audit_log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1, "and reads it");
    for statement in [
        "UPDATE audit_log SET outcome = 'nothing happened'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
        "ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only",
        "DROP TRIGGER audit_log_append_only ON audit_log",
    ] {
        let refused = runtime
            .batch_execute(statement)
            .await
            .expect_err(&format!("the runtime role ran `{statement}`"));
        assert_eq!(
            refused.code(),
            Some(&SqlState::INSUFFICIENT_PRIVILEGE),
            "`{statement}` as the runtime role: {refused:?}"
        );
    }

    // What it may do to each table: rows everywhere (the gateway reads and writes them), the
    // audit log appended and read, the migrations' bookkeeping read.
    let granted = runtime
        .query(
            "SELECT c.relname::TEXT, string_agg(p, ',' ORDER BY p) \
             FROM pg_class c, unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p \
             WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') \
               AND has_table_privilege(c.oid, p) \
             GROUP BY 1 ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let granted: Vec<(String, String)> = granted.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(String, String)> = tables(&runtime)
        .await
        .into_iter()
        .map(|table| {
            let privileges = match table.as_str() {
                "audit_log" => "INSERT,SELECT",
                "audit_log_chain" | "__diesel_schema_migrations" => "SELECT",
                _ => "DELETE,INSERT,SELECT,UPDATE",
            };
            (table, privileges.to_owned())
        })
        .collect();
    assert_eq!(granted, expected, "the runtime role's privileges, by table");
}

/// Runs the real binary with `config` (written to a file) and `DATABASE_URL` = `url`.
fn command(args: &[&str], config: &str, url: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("cg-roles-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("gateway.toml");
    std::fs::write(&file, config).unwrap();
    let output = Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(&file)
        .args(args)
        .env_remove("GATEWAY_CONFIG")
        .env_remove("DATABASE_MIGRATE_URL")
        .env("DATABASE_URL", url)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A database owned by a login role of its own, as deploy/roles.sql sets one up; returns the
/// owner's URL of it.
async fn owned_database() -> String {
    let owner = format!("cg_own_{}", uuid::Uuid::new_v4().simple());
    let admin = connect(&with_database(&server_url(), "postgres")).await;
    admin
        .batch_execute(&format!("CREATE ROLE {owner} LOGIN"))
        .await
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {owner} OWNER {owner}"))
        .await
        .unwrap();
    with_user(&with_database(&server_url(), &owner), &owner)
}

#[tokio::test]
async fn serve_migrates_as_the_owner_and_serves_as_the_runtime_role() {
    let owner_url = owned_database().await;
    let runtime = runtime_login_role(&server_url()).await;
    let runtime_url = with_user(&owner_url, &runtime);
    // The history pass adds six months ahead: a schema change the runtime role may not make.
    let config = config_with(
        &runtime_url,
        &format!("[database]\nmigrate_url = \"{owner_url}\"\n[history]\nmonths_ahead = 6\n"),
    );
    let gateway = GatewayProcess::spawn_on(&runtime_url, &config).await;
    assert!(
        !gateway.log().contains("runtime role"),
        "no warning about the runtime role:\n{}",
        gateway.log()
    );
    let db = connect(&owner_url).await;
    let owner: String = db
        .query_one("SELECT current_user::TEXT", &[])
        .await
        .unwrap()
        .get(0);
    let not_the_owners: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tableowner <> $1",
            &[&owner],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(not_the_owners, 0, "the migrations ran as the owner");

    // A provider's callback, as the runtime role.
    let (order_id, amount) = insert_orders(&db, 1).await[0];
    let provider = Simulator::new(vec![gateway.address()]);
    let ack = provider
        .deliver(&Event::payment("evt_roles_1", order_id, amount), 0)
        .await
        .expect("the callback is acknowledged");
    assert_eq!(ack.status, 200, "{}", ack.body);
    assert!(ack.body.contains("applied"), "{}", ack.body);

    // An audited action from the command line, as the runtime role.
    let added = command(
        &["operator", "add", "--name", "alice", "--role", "admin"],
        &config,
        &runtime_url,
    );
    assert_eq!(added.status.code(), Some(0), "{}", text(&added.stderr));
    let audited: i64 = db
        .query_one(
            "SELECT count(*) FROM audit_log WHERE action = 'operator.add'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(audited, 1);

    // The history pass ran as the owner: it made the partitions six months ahead.
    until("the history pass to add six months ahead", async || {
        db.query_one(
            "SELECT to_regclass('callback_deliveries_' || \
                 to_char(now() AT TIME ZONE 'UTC' + interval '6 months', '\"y\"YYYY\"m\"MM')) IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0)
    })
    .await;

    let checked = command(&["check-config"], &config, &runtime_url);
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stderr));
    assert!(
        text(&checked.stdout).contains(&format!("{runtime} (owns no table, not a superuser)")),
        "{}",
        text(&checked.stdout)
    );
    assert!(
        !text(&checked.stderr).contains("WARNING"),
        "{}",
        text(&checked.stderr)
    );
}

#[tokio::test]
async fn check_config_and_serve_warn_when_the_runtime_role_owns_tables_or_is_a_superuser() {
    // One role for everything, as before two roles: it owns every table.
    let owner_url = owned_database().await;
    callback_gateway::db::run_migrations(&owner_url)
        .await
        .unwrap();
    let checked = command(&["check-config"], &config_with(&owner_url, ""), &owner_url);
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stderr));
    let warning = text(&checked.stderr);
    assert!(
        warning.contains("WARNING")
            && warning.contains("table(s)")
            && warning.contains("ALTER, DROP or TRUNCATE"),
        "check-config warns that the runtime role owns tables:\n{warning}"
    );

    // A superuser (what the tests' own server URL is).
    let superuser_url = fresh_database().await;
    let checked = command(
        &["check-config"],
        &config_with(&superuser_url, ""),
        &superuser_url,
    );
    assert_eq!(checked.status.code(), Some(0), "{}", text(&checked.stderr));
    assert!(
        text(&checked.stderr).contains("is a superuser"),
        "check-config warns that the runtime role is a superuser:\n{}",
        text(&checked.stderr)
    );
    let gateway = GatewayProcess::spawn_on(&superuser_url, &config_with(&superuser_url, "")).await;
    assert!(
        gateway.log().contains("is a superuser"),
        "serve's start-up log warns that the runtime role is a superuser:\n{}",
        gateway.log()
    );
}
