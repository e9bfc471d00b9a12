//! History that never fills the disk: months past keep_days archived, verified, detached and
//! dropped through the real binary; a crash after each step; an archive directory that cannot
//! be written; `replay` reading an archive.

use std::io::Write;
use std::path::{Path, PathBuf};

use callback_gateway::history::archive::{self, Manifest};
use callback_gateway::lines::MAX_LINE_BYTES;
use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};

use crate::support::gateway::GatewayProcess;
use crate::support::{ACME, TestApp, audit_rows, config_with, insert_orders, spawn_app, until};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cg-history-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn history_config(app: &TestApp, archive_dir: &Path) -> String {
    config_with(
        &app.database_url,
        &format!(
            "[history]\nkeep_days = 120\narchive_dir = \"{}\"\n",
            archive_dir.display()
        ),
    )
}

async fn gateway(config: &str, database_url: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let dir = scratch();
    let file = dir.join("gateway.toml");
    std::fs::write(&file, config).unwrap();
    let output = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(&file)
        .args(args)
        .env("DATABASE_URL", database_url)
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn payment_body(event_id: &str, order_id: i64, amount: i64) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","data":{{"payment_id":"pay_{event_id}","order_id":{order_id},"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

/// A gateway whose log is aged (see [`aged_log`]), a scratch folder, its `archive` folder
/// and the history config that archives there.
async fn aged_app() -> (TestApp, PathBuf, PathBuf, String) {
    let app = spawn_app().await;
    aged_log(&app).await;
    let dir = scratch();
    let archive_dir = dir.join("archive");
    let config = history_config(&app, &archive_dir);
    (app, dir, archive_dir, config)
}

/// Three captures received "in January 2025" and one now, each acknowledged by the gateway.
/// The log is given the shape of a database partitioned since 2025: the (empty) legacy
/// partition's rows move into monthly partitions from January 2025 on, and the old events'
/// receipt time is set back.
async fn aged_log(app: &TestApp) {
    let orders = insert_orders(&app.db, 4).await;
    for (i, (order, amount)) in orders.iter().enumerate() {
        let id = if i < 3 {
            format!("old_{i}")
        } else {
            "new_0".to_owned()
        };
        let response = app
            .deliver(ACME, &id, &payment_body(&id, *order, *amount))
            .await;
        assert_eq!(response.status(), 200);
    }
    received_in_january_2025(app, "event_id LIKE 'old_%'").await;
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries_y2025m01")
            .await,
        3
    );
}

/// Gives the log the shape of a database partitioned since 2025 (the legacy partition's rows
/// move into monthly partitions from January 2025 on) and sets back the receipt of the events
/// that match `which` (an SQL condition) to January 2025.
async fn received_in_january_2025(app: &TestApp, which: &str) {
    app.db
        .batch_execute(&format!(
            "ALTER TABLE callback_deliveries DETACH PARTITION callback_deliveries_legacy; \
             SELECT callback_deliveries_add_month(m) FROM generate_series( \
                 timestamptz '2025-01-01', now() + interval '1 month', interval '1 month') m; \
             INSERT INTO callback_deliveries SELECT * FROM callback_deliveries_legacy; \
             DROP TABLE callback_deliveries_legacy; \
             UPDATE callback_deliveries SET received_at = timestamptz '2025-01-10' + id * interval '1 minute' \
             WHERE {which};"
        ))
        .await
        .unwrap();
}

async fn exists(app: &TestApp, table: &str) -> bool {
    app.db
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .unwrap()
        .get(0)
}

const JANUARY: &str = "callback_deliveries_y2025m01";

#[tokio::test]
async fn a_month_past_keep_days_is_archived_verified_and_dropped_and_replay_reads_its_archive() {
    let (app, dir, archive_dir, config) = aged_app().await;

    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(0), "{}\n{}", pass.stdout, pass.stderr);
    assert!(
        pass.stdout
            .contains(&format!("archived {JANUARY}.jsonl.gz (3 rows")),
        "{}",
        pass.stdout
    );
    assert!(!exists(&app, JANUARY).await, "the month is dropped");
    // The current month stays; the books are never dropped.
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries").await,
        1
    );
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 4);

    let archive = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
    let archive_text = archive.to_str().unwrap();
    let verify = gateway(
        &config,
        &app.database_url,
        &["history", "verify", archive_text],
        &[],
    )
    .await;
    assert_eq!(verify.code, Some(0), "{}", verify.stderr);
    assert!(verify.stdout.contains("3 event(s)"), "{}", verify.stdout);
    let list = gateway(&config, &app.database_url, &["history", "list"], &[]).await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    let line = list
        .stdout
        .lines()
        .find(|l| l.starts_with(&format!("{JANUARY}.jsonl.gz")))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert!(line.contains(" 3 rows"), "{line}");
    assert!(
        !list
            .stdout
            .lines()
            .any(|l| l.starts_with(&format!("{JANUARY} "))),
        "no partition of January left:\n{}",
        list.stdout
    );

    // Finance replays the archived month: every event is answered from its stored record.
    let replay = gateway(
        &config,
        &app.database_url,
        &["replay", archive_text, "--url", &app.address],
        &[],
    )
    .await;
    assert_eq!(replay.code, Some(0), "{}\n{}", replay.stdout, replay.stderr);
    let replayed = replay
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("replayed"))
        .map(|n| n.trim().to_owned());
    assert_eq!(replayed.as_deref(), Some("3"), "{}", replay.stdout);
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 4);

    // One byte changed in a copy: verify refuses it.
    let copy = dir.join("copy.jsonl.gz");
    let mut bytes = std::fs::read(&archive).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&copy, bytes).unwrap();
    std::fs::copy(
        archive_dir.join(format!("{JANUARY}.manifest.json")),
        dir.join("copy.manifest.json"),
    )
    .unwrap();
    let refused = gateway(
        &config,
        &app.database_url,
        &["history", "verify", copy.to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(refused.stderr.contains("SHA-256"), "{}", refused.stderr);

    let again = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        again.stdout.contains("nothing past keep_days"),
        "{}",
        again.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The audit rows of the dropped month `partition`: (actor, role, changes).
async fn drop_rows(app: &TestApp, partition: &str) -> Vec<(String, String, serde_json::Value)> {
    let target = format!("partition:{partition}");
    audit_rows(&app.db, "history.drop_partition")
        .await
        .into_iter()
        .filter(|(_, _, row_target, _, _)| row_target.as_deref() == Some(target.as_str()))
        .map(|(actor, role, _, _, changes)| (actor, role, changes))
        .collect()
}

#[tokio::test]
async fn history_archive_writes_one_audit_row_for_the_month_it_drops_naming_the_cli_user() {
    let (app, dir, archive_dir, config) = aged_app().await;

    let pass = gateway(
        &config,
        &app.database_url,
        &["history", "archive"],
        &[("USER", "ops-anna")],
    )
    .await;
    assert_eq!(pass.code, Some(0), "{}\n{}", pass.stdout, pass.stderr);
    assert!(!exists(&app, JANUARY).await, "the month is dropped");
    let rows = drop_rows(&app, JANUARY).await;
    assert_eq!(rows.len(), 1, "one row for the month dropped: {rows:?}");
    let (actor, role, changes) = &rows[0];
    assert_eq!((actor.as_str(), role.as_str()), ("cli:ops-anna", "admin"));
    // The log's empty months since 2025 are past keep_days too: one row for each month dropped.
    let dropped = pass
        .stdout
        .lines()
        .filter(|l| l.starts_with("archived "))
        .count() as i64;
    assert_eq!(
        app.count("SELECT count(*) FROM audit_log WHERE action = 'history.drop_partition'")
            .await,
        dropped,
        "{}",
        pass.stdout
    );
    let manifest: Manifest = serde_json::from_slice(
        &std::fs::read(archive_dir.join(format!("{JANUARY}.manifest.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(changes["partition"], JANUARY);
    assert_eq!(changes["file"], manifest.file.as_str());
    assert_eq!(changes["sha256"], manifest.sha256.as_str());
    assert_eq!(changes["rows"], 3);

    // A pass with nothing due drops nothing and writes nothing.
    let again = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert_eq!(drop_rows(&app, JANUARY).await.len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_pass_inside_serve_writes_its_audit_row_as_system_history() {
    let (app, dir, _, config) = aged_app().await;
    let _served = GatewayProcess::spawn_on(&app.database_url, &config).await;
    // serve runs a pass at start; wait for it to have dropped January.
    until("serve's pass to drop January", async || {
        !exists(&app, JANUARY).await
    })
    .await;
    assert!(!exists(&app, JANUARY).await, "serve's pass drops the month");
    let rows = drop_rows(&app, JANUARY).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0.as_str(), rows[0].1.as_str()),
        ("system:history", "system")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file whose first line decompresses to more than any line the gateway writes: a gzip bomb,
/// small on disk. `history verify` and `replay` refuse it naming the file and the line, having
/// held no more of it than one line's bound.
#[tokio::test]
async fn a_line_longer_than_any_the_gateway_writes_is_refused_by_verify_and_replay() {
    let dir = scratch();
    let bomb = dir.join(format!("{JANUARY}.jsonl.gz"));
    // gzip members concatenate into one stream: one member of 1 MiB of spaces, written until the
    // stream is one line longer than the bound.
    let mut member = GzEncoder::new(Vec::new(), Compression::default());
    member.write_all(&vec![b' '; 1 << 20]).unwrap();
    let member = member.finish().unwrap();
    let copies = MAX_LINE_BYTES / (1 << 20) + 1;
    let bytes = member.repeat(copies);
    assert!(copies << 20 > MAX_LINE_BYTES && bytes.len() < 1 << 20);
    std::fs::write(&bomb, &bytes).unwrap();
    // Its manifest matches it, so verify gets past the digest to the lines.
    let manifest = Manifest {
        partition: JANUARY.into(),
        from: None,
        to: None,
        rows: 1,
        file: format!("{JANUARY}.jsonl.gz"),
        bytes: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&bytes)),
        archived_at: chrono::Utc::now(),
        database: None,
        rows_digest: None,
    };
    std::fs::write(
        archive::manifest_path(&bomb),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    // Reading a file needs no database.
    let unused_url = "postgres://postgres@127.0.0.1:1/none";
    let config = config_with(unused_url, "");
    let too_long = format!(
        "{}: line 1 is longer than {MAX_LINE_BYTES} bytes",
        bomb.display()
    );

    let verify = gateway(
        &config,
        unused_url,
        &["history", "verify", bomb.to_str().unwrap()],
        &[],
    )
    .await;
    assert_eq!(verify.code, Some(1), "{}", verify.stdout);
    assert!(verify.stderr.contains(&too_long), "{}", verify.stderr);

    let replay = gateway(
        &config,
        unused_url,
        &[
            "replay",
            bomb.to_str().unwrap(),
            "--url",
            "http://127.0.0.1:1",
        ],
        &[],
    )
    .await;
    assert_eq!(replay.code, Some(1), "{}", replay.stdout);
    assert!(replay.stderr.contains(&too_long), "{}", replay.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_crash_after_each_step_loses_nothing_and_the_next_pass_finishes_the_month() {
    for step in ["written", "verified", "detached"] {
        let (app, dir, archive_dir, config) = aged_app().await;
        let crashed = gateway(
            &config,
            &app.database_url,
            &["history", "archive"],
            &[("CALLBACK_GATEWAY_HISTORY_CRASH_AFTER", step)],
        )
        .await;
        assert_ne!(crashed.code, Some(0), "{step}: the pass was cut short");
        assert!(
            crashed.stderr.contains("aborting after"),
            "{}",
            crashed.stderr
        );
        // Every row is still in the database, attached or (after the detach) in its own table.
        assert_eq!(
            app.count(&format!("SELECT count(*) FROM {JANUARY}")).await,
            3,
            "{step}"
        );
        let attached = app
            .count("SELECT count(*) FROM callback_deliveries WHERE event_id LIKE 'old_%'")
            .await;
        assert_eq!(attached, if step == "detached" { 0 } else { 3 }, "{step}");

        let resumed = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
        assert_eq!(resumed.code, Some(0), "{step}: {}", resumed.stderr);
        assert!(
            !exists(&app, JANUARY).await,
            "{step}: the next pass drops it"
        );
        assert_eq!(
            drop_rows(&app, JANUARY).await.len(),
            1,
            "{step}: the pass that drops the month writes its audit row"
        );
        let archive = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
        let verify = gateway(
            &config,
            &app.database_url,
            &["history", "verify", archive.to_str().unwrap()],
            &[],
        )
        .await;
        assert!(
            verify.code == Some(0) && verify.stdout.contains("3 event(s)"),
            "{step}: {}{}",
            verify.stdout,
            verify.stderr
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[tokio::test]
async fn an_archive_directory_that_cannot_be_written_keeps_the_month_and_serve_counts_the_failure()
{
    let app = spawn_app().await;
    aged_log(&app).await;
    let dir = scratch();
    // A directory under a regular file cannot be made, whoever runs the test (root included).
    let blocker = dir.join("not-a-directory");
    std::fs::write(&blocker, b"").unwrap();
    let config = history_config(&app, &blocker.join("archive"));

    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(1), "{}", pass.stdout);
    assert!(
        pass.stderr.contains("kept in the database"),
        "{}",
        pass.stderr
    );
    assert_eq!(
        app.count(&format!("SELECT count(*) FROM {JANUARY}")).await,
        3
    );

    // serve runs the same pass at start: it counts the failure for the alert, keeps the month,
    // and has made the months ahead.
    let config = config_with(
        &app.database_url,
        &format!(
            "[history]\nkeep_days = 120\nmonths_ahead = 6\narchive_dir = \"{}\"\n",
            blocker.join("archive").display()
        ),
    );
    let served = GatewayProcess::spawn_on(&app.database_url, &config).await;
    let client = reqwest::Client::new();
    let mut failures = 0.0;
    for _ in 0..200 {
        let text = client
            .get(format!("{}/metrics", served.address()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        failures = text
            .lines()
            .find_map(|l| l.strip_prefix("gateway_history_failures_total "))
            .map(|v| v.trim().parse::<f64>().unwrap())
            .unwrap_or(0.0);
        if failures >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(failures >= 1.0, "the failed pass is counted");
    assert_eq!(
        app.count(&format!("SELECT count(*) FROM {JANUARY}")).await,
        3
    );
    let ahead: bool = app
        .db
        .query_one(
            "SELECT to_regclass('callback_deliveries_' || \
                 to_char(now() AT TIME ZONE 'UTC' + interval '6 months', '\"y\"YYYY\"m\"MM')) IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ahead, "serve made the partition six months ahead");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finance's question after the months are archived: the provider moved money the ledger never
/// posted; did the gateway ever receive it? `reconcile --events ARCHIVE` answers from the
/// archive, with the stored outcome, and writes what it found as a replay file.
#[tokio::test]
async fn reconcile_reads_an_archive_to_say_which_missing_payments_were_received_and_how_they_ended()
{
    let app = spawn_app().await;
    let order = app
        .create_order(crate::support::MERCHANT, 5000, "USD")
        .await;
    let capture = format!(
        r#"{{"id":"e1","type":"payment.succeeded","data":{{"payment_id":"pay_1","order_id":{order},"amount_minor":5000,"currency":"USD"}}}}"#
    );
    let refund = r#"{"id":"e2","type":"refund.succeeded","data":{"payment_id":"pay_1","amount_minor":6000,"currency":"EUR"}}"#;
    assert_eq!(app.deliver(ACME, "e1", &capture).await.status(), 200);
    let refused: serde_json::Value = app.deliver(ACME, "e2", refund).await.json().await.unwrap();
    assert_eq!(refused["reason"], "currency_mismatch");
    received_in_january_2025(&app, "true").await;
    let dir = scratch();
    let archive_dir = dir.join("archive");
    let config = history_config(&app, &archive_dir);
    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(0), "{}", pass.stderr);
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries").await,
        0
    );

    let report = dir.join("report.jsonl");
    std::fs::write(
        &report,
        [
            r#"{"payment_id":"pay_1","kind":"payment","amount_minor":5000,"currency":"USD","at":"2025-01-10T00:00:00Z"}"#,
            r#"{"payment_id":"pay_1","kind":"refund","amount_minor":6000,"currency":"USD","at":"2025-01-11T00:00:00Z"}"#,
            r#"{"payment_id":"pay_9","kind":"payment","amount_minor":700,"currency":"USD","at":"2025-01-12T00:00:00Z"}"#,
        ]
        .join("\n"),
    )
    .unwrap();
    let archive = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
    let replay_file = dir.join("replay.jsonl");
    let run = gateway(
        &config,
        &app.database_url,
        &[
            "reconcile",
            "--provider",
            ACME,
            report.to_str().unwrap(),
            "--events",
            archive.to_str().unwrap(),
            "--emit-replay",
            replay_file.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(
        run.code,
        Some(1),
        "two items differ\n{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(run.stdout.contains("(1 of 2 received)"), "{}", run.stdout);
    let received = run
        .stdout
        .lines()
        .find(|l| l.starts_with("received      pay_1"))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(
        received.contains("e2 at 2025-01-10T") && received.contains(": rejected currency_mismatch"),
        "{received}"
    );
    assert!(
        run.stdout.lines().any(|l| l == "not received  pay_9"),
        "{}",
        run.stdout
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&replay_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["e1", "e2"], "pay_1's events, as a replay file");
    assert_eq!(lines[1]["body"], refund, "the raw body, byte for byte");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `history archive` by hand while a gateway's own pass runs: it waits for that pass (the
/// lock every gateway's pass takes) instead of detaching and dropping under it, which left
/// months half-detached ("already pending detach") and archives deleted mid-write when the
/// provider simulator ran both at once.
#[tokio::test]
async fn history_archive_waits_for_a_pass_that_holds_the_lock() {
    let (app, dir, archive_dir, config) = aged_app().await;
    let pass = crate::support::connect(&app.database_url).await;
    pass.execute(
        "SELECT pg_advisory_lock($1)",
        &[&callback_gateway::history::pass::HISTORY_LOCK_KEY],
    )
    .await
    .unwrap();
    let archive = {
        let (config, url) = (config.clone(), app.database_url.clone());
        tokio::spawn(async move { gateway(&config, &url, &["history", "archive"], &[]).await })
    };
    crate::support::until("the command waiting for the lock", async || {
        app.count(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
        )
        .await
            == 1
    })
    .await;
    assert!(
        exists(&app, JANUARY).await,
        "nothing is archived while the pass holds the lock"
    );
    pass.execute(
        "SELECT pg_advisory_unlock($1)",
        &[&callback_gateway::history::pass::HISTORY_LOCK_KEY],
    )
    .await
    .unwrap();
    let run = archive.await.unwrap();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(!exists(&app, JANUARY).await, "{}", run.stdout);
    assert!(archive_dir.join(format!("{JANUARY}.jsonl.gz")).exists());
    let _ = std::fs::remove_dir_all(dir);
}

/// The mode bits of `path` (permissions only).
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn an_archives_manifest_names_its_database_and_bounds_and_holds_a_digest_of_the_rows() {
    let (app, dir, archive_dir, config) = aged_app().await;
    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(0), "{}\n{}", pass.stdout, pass.stderr);
    let data = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
    let manifest_file = archive_dir.join(format!("{JANUARY}.manifest.json"));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest_file).unwrap()).unwrap();
    let identity = app
        .db
        .query_one(
            "SELECT system_identifier::text, current_database()::text FROM pg_control_system()",
            &[],
        )
        .await
        .unwrap();
    let (system_identifier, database): (String, String) = (identity.get(0), identity.get(1));
    assert_eq!(
        manifest["database"]["system_identifier"], system_identifier,
        "{manifest}"
    );
    assert_eq!(manifest["database"]["name"], database, "{manifest}");
    assert_eq!(manifest["from"], "2025-01-01T00:00:00Z", "{manifest}");
    assert_eq!(manifest["to"], "2025-02-01T00:00:00Z", "{manifest}");
    let digest = manifest["rows_digest"].as_str().unwrap_or_default();
    assert!(
        digest.len() == 64 && digest.chars().all(|c| c.is_ascii_hexdigit()),
        "a SHA-256 of the rows as read: {manifest}"
    );
    for file in [&data, &manifest_file] {
        assert_eq!(
            mode(file),
            0o600,
            "{} is readable by its owner only",
            file.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_archive_of_another_database_is_refused_and_never_overwritten() {
    // One deployment archives and drops its January.
    let (first, dir, archive_dir, config) = aged_app().await;
    let pass = gateway(&config, &first.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(0), "{}\n{}", pass.stdout, pass.stderr);
    let data = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
    let manifest_file = archive_dir.join(format!("{JANUARY}.manifest.json"));
    let kept = (
        std::fs::read(&data).unwrap(),
        std::fs::read(&manifest_file).unwrap(),
    );

    // A second deployment (another database) shares the folder: its January has as many rows.
    let second = spawn_app().await;
    aged_log(&second).await;
    let shared = history_config(&second, &archive_dir);
    let pass = gateway(&shared, &second.database_url, &["history", "archive"], &[]).await;
    assert_eq!(
        pass.code,
        Some(1),
        "the pass refuses the other database's archive: {}\n{}",
        pass.stdout,
        pass.stderr
    );
    assert!(pass.stderr.contains("another database"), "{}", pass.stderr);
    assert_eq!(
        second
            .count(&format!("SELECT count(*) FROM {JANUARY}"))
            .await,
        3,
        "the second deployment's month stays in its database"
    );
    assert_eq!(
        (
            std::fs::read(&data).unwrap(),
            std::fs::read(&manifest_file).unwrap()
        ),
        kept,
        "the only copy of the first deployment's month is untouched"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_self_consistent_archive_of_other_rows_with_the_right_count_is_refused() {
    let (app, dir, archive_dir, config) = aged_app().await;
    std::fs::create_dir_all(&archive_dir).unwrap();
    // Three made-up events, a whole gzip file, its SHA-256 and count in a manifest that even
    // names this database: everything a count and a checksum can check.
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    for i in 0..3 {
        let line = serde_json::json!({"provider": ACME, "id": format!("forged_{i}"),
            "body": "{}", "merchant_id": 42, "received_at": "2025-01-10T00:00:00Z",
            "event_type": null, "outcome": "applied", "reason": null, "ack_status": 200,
            "transfer_id": null, "trace_id": null, "delivery_id": i});
        encoder.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    encoder
        .write_all(b"{\"trailer\":{\"events\":3,\"skipped_non_utf8\":0}}\n")
        .unwrap();
    let bytes = encoder.finish().unwrap();
    let data = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
    std::fs::write(&data, &bytes).unwrap();
    let identity = app
        .db
        .query_one(
            "SELECT system_identifier::text, current_database()::text FROM pg_control_system()",
            &[],
        )
        .await
        .unwrap();
    let (system_identifier, database): (String, String) = (identity.get(0), identity.get(1));
    let manifest = serde_json::json!({
        "partition": JANUARY, "from": "2025-01-01T00:00:00Z", "to": "2025-02-01T00:00:00Z",
        "rows": 3, "file": format!("{JANUARY}.jsonl.gz"), "bytes": bytes.len(),
        "sha256": hex::encode(Sha256::digest(&bytes)), "archived_at": "2025-06-01T00:00:00Z",
        "database": {"system_identifier": system_identifier, "name": database},
        "rows_digest": hex::encode(Sha256::digest(b"not the rows")),
    });
    std::fs::write(
        archive_dir.join(format!("{JANUARY}.manifest.json")),
        manifest.to_string(),
    )
    .unwrap();

    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(1), "{}\n{}", pass.stdout, pass.stderr);
    assert_eq!(
        app.count(&format!("SELECT count(*) FROM {JANUARY}")).await,
        3,
        "the month is kept: its archive does not hold its rows"
    );
    assert_eq!(
        std::fs::read(&data).unwrap(),
        bytes,
        "and is not overwritten"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn archive_files_are_never_written_through_a_symbolic_link() {
    let (app, dir, archive_dir, config) = aged_app().await;
    std::fs::create_dir_all(&archive_dir).unwrap();
    let mut victims = Vec::new();
    for name in [
        format!("{JANUARY}.jsonl.gz.partial"),
        format!("{JANUARY}.manifest.json.partial"),
    ] {
        let victim = dir.join(format!("victim-of-{name}"));
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, archive_dir.join(&name)).unwrap();
        victims.push(victim);
    }
    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    for victim in &victims {
        assert_eq!(
            std::fs::read(victim).unwrap(),
            b"precious",
            "the target of {} is untouched",
            victim.display()
        );
    }
    assert_eq!(pass.code, Some(0), "{}\n{}", pass.stdout, pass.stderr);
    let data = archive_dir.join(format!("{JANUARY}.jsonl.gz"));
    assert!(!std::fs::symlink_metadata(&data).unwrap().is_symlink());
    assert_eq!(mode(&data), 0o600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_partition_whose_name_is_not_a_months_is_refused_before_any_path_is_built() {
    let (app, dir, _archive_dir, config) = aged_app().await;
    // Someone with DDL rights attaches a month under a name that walks out of the folder.
    app.db
        .batch_execute(
            "CREATE TABLE \"../escaped_y2024m12\" PARTITION OF callback_deliveries \
             FOR VALUES FROM ('2024-12-01') TO ('2025-01-01')",
        )
        .await
        .unwrap();
    let pass = gateway(&config, &app.database_url, &["history", "archive"], &[]).await;
    assert_eq!(pass.code, Some(1), "{}\n{}", pass.stdout, pass.stderr);
    assert!(
        pass.stderr.contains("not a partition name"),
        "{}",
        pass.stderr
    );
    let outside: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("escaped"))
        .collect();
    assert!(
        outside.is_empty(),
        "nothing written outside the folder: {outside:?}"
    );
    assert!(
        exists(&app, "\"../escaped_y2024m12\"").await,
        "the table is kept"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
