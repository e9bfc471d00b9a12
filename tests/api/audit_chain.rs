//! Tamper evidence of the audit log (issue 54): each row carries `prev_hash` and `row_hash`,
//! `callback-gateway audit verify` walks the chain (exit 0 whole, 1 naming the first broken
//! row) after a superuser disabled the append-only triggers and deleted, changed or moved a
//! row; concurrent writers still give one chain; `serve` checks the newest rows at start and
//! says so in `gateway_audit_chain_broken`.

use std::process::{Command, Output};

use crate::support::gateway::GatewayProcess;
use crate::support::{config_with, connect, fresh_database, runtime_login_role, with_user};

/// `callback-gateway audit verify` on the database at `url`.
fn audit_verify(url: &str) -> Output {
    let dir = std::env::temp_dir().join(format!("cg-audit-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = Command::new(crate::support::gateway::gateway_binary())
        .args(["audit", "verify"])
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", url)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Rows as the gateway's own role writes them (the trigger chains them), `n` of them.
async fn write_rows(runtime: &tokio_postgres::Client, n: i64) {
    runtime
        .execute(
            "INSERT INTO audit_log (actor, role, action, target, outcome, changes) \
             SELECT 'alice', 'admin', 'endpoint.disable', 'merchant:' || g, 'disabled', \
                    jsonb_build_object('reason', 'test ' || g, 'n', g) \
             FROM generate_series(1, $1::bigint) g",
            &[&n],
        )
        .await
        .unwrap();
}

/// A migrated database with `n` chained audit rows; its superuser URL and the runtime role's.
async fn audited_database(n: i64) -> (String, String) {
    let url = fresh_database().await;
    let runtime_url = with_user(&url, &runtime_login_role(&url).await);
    write_rows(&connect(&runtime_url).await, n).await;
    (url, runtime_url)
}

/// What a superuser can do that the gateway's role cannot: the append-only triggers off,
/// `statement`, the triggers on again.
async fn tamper(url: &str, statement: &str) {
    connect(url)
        .await
        .batch_execute(&format!(
            "BEGIN; ALTER TABLE audit_log DISABLE TRIGGER USER; {statement}; \
             ALTER TABLE audit_log ENABLE TRIGGER USER; COMMIT"
        ))
        .await
        .unwrap();
}

fn assert_broken_at(output: &Output, expected: &str) {
    assert_eq!(
        output.status.code(),
        Some(1),
        "audit verify exits 1 on a broken chain:\n{}{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert!(
        text(&output.stdout).contains(expected),
        "audit verify names the first broken row ({expected}):\n{}",
        text(&output.stdout)
    );
}

#[tokio::test]
async fn audit_verify_passes_a_whole_chain_and_names_the_row_after_a_deleted_one() {
    let (url, runtime_url) = audited_database(10).await;
    let whole = audit_verify(&runtime_url);
    assert_eq!(
        whole.status.code(),
        Some(0),
        "{}{}",
        text(&whole.stdout),
        text(&whole.stderr)
    );
    assert!(
        text(&whole.stdout).contains("audit log whole: 10 row(s)"),
        "{}",
        text(&whole.stdout)
    );
    let ids: Vec<i64> = connect(&url)
        .await
        .query("SELECT id FROM audit_log ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();

    tamper(
        &url,
        &format!("DELETE FROM audit_log WHERE id = {}", ids[4]),
    )
    .await;
    assert_broken_at(
        &audit_verify(&runtime_url),
        &format!(
            "row {}: its prev_hash is not the row_hash of row {} before it",
            ids[5], ids[3]
        ),
    );
}

#[tokio::test]
async fn audit_verify_names_a_changed_row() {
    let (url, runtime_url) = audited_database(10).await;
    let third: i64 = connect(&url)
        .await
        .query_one("SELECT id FROM audit_log ORDER BY id OFFSET 2 LIMIT 1", &[])
        .await
        .unwrap()
        .get(0);
    tamper(
        &url,
        &format!("UPDATE audit_log SET outcome = 'enabled' WHERE id = {third}"),
    )
    .await;
    assert_broken_at(
        &audit_verify(&runtime_url),
        &format!("row {third}: its fields do not give its row_hash"),
    );
}

#[tokio::test]
async fn audit_verify_names_rows_moved_out_of_order_and_the_newest_rows_deleted() {
    let (url, runtime_url) = audited_database(6).await;
    let ids: Vec<i64> = connect(&url)
        .await
        .query("SELECT id FROM audit_log ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Rows 2 and 3 swap places, hashes and all.
    let (a, b) = (ids[1], ids[2]);
    tamper(
        &url,
        &format!(
            "UPDATE audit_log SET id = -1 WHERE id = {a}; UPDATE audit_log SET id = {a} WHERE id = {b}; \
             UPDATE audit_log SET id = {b} WHERE id = -1"
        ),
    )
    .await;
    assert_broken_at(&audit_verify(&runtime_url), &format!("row {a}: "));

    let (url, runtime_url) = audited_database(6).await;
    let newest: i64 = connect(&url)
        .await
        .query_one("SELECT max(id) FROM audit_log", &[])
        .await
        .unwrap()
        .get(0);
    tamper(&url, &format!("DELETE FROM audit_log WHERE id = {newest}")).await;
    assert_broken_at(
        &audit_verify(&runtime_url),
        &format!(
            "the chain's head names row {newest}, but the newest row is {}",
            newest - 1
        ),
    );
}

/// The database's hash (migration 000061) and the verifier's own (src/access/chain.rs) agree
/// on rows with NULLs, empty texts, non-ASCII text and nested JSON.
#[tokio::test]
async fn the_database_and_the_verifier_hash_the_same_bytes() {
    let url = fresh_database().await;
    let runtime_url = with_user(&url, &runtime_login_role(&url).await);
    connect(&runtime_url)
        .await
        .batch_execute(
            "INSERT INTO audit_log (actor, role, action, target, request_id, outcome, changes) VALUES \
             ('zoë', 'admin', 'event.replay', NULL, '', 'replayed', '{\"b\": [1, 2.50, {\"é\": null}], \"a\": \"x\\ny\"}'), \
             ('cli:root', 'admin', 'operator.add', 'operator:bob', 'req-1', 'added', '{}')",
        )
        .await
        .unwrap();
    let whole = audit_verify(&runtime_url);
    assert_eq!(
        whole.status.code(),
        Some(0),
        "{}{}",
        text(&whole.stdout),
        text(&whole.stderr)
    );
}

#[tokio::test]
async fn concurrent_writers_give_one_chain() {
    let url = fresh_database().await;
    let runtime_url = with_user(&url, &runtime_login_role(&url).await);
    let mut writers = Vec::new();
    for writer in 0..12 {
        let runtime_url = runtime_url.clone();
        writers.push(tokio::spawn(async move {
            let conn = connect(&runtime_url).await;
            for n in 0..20 {
                // Some in transactions of several rows, some that roll back.
                let rollback = n % 7 == 3;
                conn.batch_execute(&format!(
                    "BEGIN; \
                     INSERT INTO audit_log (actor, role, action, outcome) VALUES ('w{writer}', 'admin', 'endpoint.test', 'staged'); \
                     INSERT INTO audit_log (actor, role, action, outcome) VALUES ('w{writer}', 'admin', 'endpoint.test', '{n}'); \
                     {}",
                    if rollback { "ROLLBACK" } else { "COMMIT" }
                ))
                .await
                .unwrap();
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let db = connect(&url).await;
    let (rows, distinct_prev): (i64, i64) = {
        let row = db
            .query_one(
                "SELECT count(*), count(DISTINCT prev_hash) FROM audit_log",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(rows, 12 * 17 * 2, "every committed row is kept");
    assert_eq!(
        distinct_prev, rows,
        "no two rows follow the same row: one chain, no fork"
    );
    let whole = audit_verify(&runtime_url);
    assert_eq!(
        whole.status.code(),
        Some(0),
        "{}{}",
        text(&whole.stdout),
        text(&whole.stderr)
    );
}

#[tokio::test]
async fn serve_checks_the_newest_rows_at_start_and_exports_what_it_found() {
    let (url, _) = audited_database(5).await;
    let config = config_with(&url, "");
    let gateway = GatewayProcess::spawn_on(&url, &config).await;
    let metrics = reqwest::get(format!("{}/metrics", gateway.address()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "gateway_audit_chain_broken 0"),
        "a whole chain:\n{metrics}"
    );
    drop(gateway);

    let changed: i64 = connect(&url)
        .await
        .query_one("SELECT max(id) - 1 FROM audit_log", &[])
        .await
        .unwrap()
        .get(0);
    tamper(
        &url,
        &format!("UPDATE audit_log SET actor = 'mallory' WHERE id = {changed}"),
    )
    .await;
    let gateway = GatewayProcess::spawn_on(&url, &config).await;
    let metrics = reqwest::get(format!("{}/metrics", gateway.address()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "gateway_audit_chain_broken 1"),
        "serve found the changed row:\n{metrics}"
    );
    assert!(
        gateway.log().contains(&format!(
            "row {changed}: its fields do not give its row_hash"
        )),
        "serve's log names the row:\n{}",
        gateway.log()
    );
}
