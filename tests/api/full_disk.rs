//! A database whose disk fills up under a running gateway, on a cluster of the test's own: the
//! gateway's database lives in a tablespace on a small file system (a tmpfs of its own), WAL
//! and the server's own files stay on the big disk, so filling the small one makes PostgreSQL
//! refuse to extend a table (SQLSTATE 53100 `could not extend file ..: No space left on
//! device`) without crashing, as a full data volume does. A new capture then gets 503 with
//! `Retry-After` and leaves nothing behind, a redelivery of a stored event keeps its
//! byte-identical ack, `/readyz` says `degraded` and the metric counts; once space returns the
//! same capture is applied and `/readyz` is ready again, without a restart. Mounting needs
//! root: elsewhere the test says so and passes.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::support::cluster::{Cluster, is_root};
use crate::support::gateway::GatewayProcess;
use crate::support::simulator::Event;
use crate::support::{ACME, config_with, connect, insert_orders, metric_sample, sign};

/// A tmpfs of `size` mounted on a temp directory, owned by the `postgres` user; unmounted when
/// dropped (after the cluster that uses it stopped: declare it first).
struct SmallDisk {
    mount: PathBuf,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        let mount =
            std::env::temp_dir().join(format!("cg-small-disk-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&mount).unwrap();
        run(Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(&mount));
        let disk = Self { mount };
        std::fs::create_dir(disk.tablespace()).unwrap();
        run(Command::new("chown")
            .arg("postgres:postgres")
            .arg(disk.tablespace()));
        disk
    }

    /// The (empty, postgres-owned) directory a tablespace is created in.
    fn tablespace(&self) -> PathBuf {
        self.mount.join("pg")
    }

    fn filler(&self) -> PathBuf {
        self.mount.join("filler")
    }

    /// Writes a file until the file system has no byte left (ENOSPC); returns its size.
    fn fill(&self) -> u64 {
        let mut file = std::fs::File::create(self.filler()).unwrap();
        let mut written = 0u64;
        // Large chunks first, then a page at a time to take the last free pages too.
        for chunk in [1 << 20, 4096] {
            let bytes = vec![0x5a_u8; chunk];
            loop {
                match file.write(&bytes) {
                    Ok(0) => break,
                    Ok(n) => written += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    Err(e) => panic!("filling the small disk: {e}"),
                }
            }
        }
        written
    }

    fn free(&self) {
        std::fs::remove_file(self.filler()).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.mount)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        }
        let _ = std::fs::remove_dir(&self.mount);
    }
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One answer of the gateway: status, `Retry-After`, `Idempotent-Replayed` and the exact body.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    replayed: bool,
    body: String,
}

async fn deliver(client: &reqwest::Client, gateway: &GatewayProcess, event: &Event) -> Answer {
    let (headers, body) = sign::signed_now(ACME, &event.id, &event.body);
    let mut request = client
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Answer {
        status: response.status().as_u16(),
        retry_after: header("Retry-After"),
        replayed: header("Idempotent-Replayed").as_deref() == Some("true"),
        body: response.text().await.unwrap(),
    }
}

async fn get_json(client: &reqwest::Client, url: String) -> (u16, serde_json::Value) {
    let response = client.get(url).send().await.unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or_default(),
    )
}

/// What a stored capture leaves in the books: ledger transfers, callback records, raw bodies.
async fn books(db: &tokio_postgres::Client) -> (i64, i64, i64) {
    let row = db
        .query_one(
            "SELECT (SELECT count(*) FROM ledger_transfers), \
                    (SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'), \
                    (SELECT count(*) FROM callback_deliveries)",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// A capture of `order` whose body carries 64 KiB of incompressible text. PostgreSQL extends a
/// table only when none of its pages has room, so a small row could still fit into a page
/// allocated before the disk filled; this body's TOAST chunks cannot, whatever the pages hold.
fn large_capture(id: &str, order: (i64, i64)) -> Event {
    let padding: String = (0..2048)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect();
    let small = Event::payment(id, order.0, order.1);
    let body = format!(
        "{},\"padding\":\"{padding}\"}}",
        small.body.strip_suffix('}').unwrap()
    );
    Event { body, ..small }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_database_disk_gets_503_with_retry_after_keeps_replays_and_heals_without_a_restart()
{
    if !is_root() {
        eprintln!(
            "skipped: filling a database disk needs a file system of the test's own, and mounting one needs root"
        );
        return;
    }
    let disk = SmallDisk::mount("64m");
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let admin = connect(&cluster.url("postgres")).await;
    admin
        .batch_execute(&format!(
            "CREATE TABLESPACE small LOCATION '{}'",
            disk.tablespace().display()
        ))
        .await
        .unwrap();
    // Every table of the database (its catalogs too) on the small disk, WAL on the big one.
    admin
        .batch_execute("CREATE DATABASE gateway TABLESPACE small")
        .await
        .unwrap();
    let url = cluster.url("gateway");
    callback_gateway::db::run_migrations(&url).await.unwrap();
    let db = connect(&url).await;
    let orders = insert_orders(&db, 2).await;
    let gateway = GatewayProcess::spawn_on(&url, &config_with(&url, "")).await;
    let client = reqwest::Client::new();

    let stored = Event::payment("evt_before_the_disk_filled", orders[0].0, orders[0].1);
    let first = deliver(&client, &gateway, &stored).await;
    assert_eq!(
        first.status, 200,
        "the capture before the disk filled: {first:?}"
    );
    let before = books(&db).await;

    let filled = disk.fill();
    assert!(filled > 0, "the small disk had no free space to fill");
    let capture = large_capture("evt_while_the_disk_is_full", orders[1]);
    let started = Instant::now();
    let refused = deliver(&client, &gateway, &capture).await;
    let refused_in = started.elapsed();
    assert_eq!(refused.status, 503, "a capture on a full disk: {refused:?}");
    assert!(
        refused.retry_after.is_some(),
        "a 503 without Retry-After: {refused:?}"
    );
    let error: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(error["error"], "database_cannot_write", "{refused:?}");
    assert_eq!(
        books(&db).await,
        before,
        "(ledger transfers, callback records, raw bodies) changed for a capture answered 503"
    );
    let log = gateway.log();
    assert!(
        log.contains("No space left on device"),
        "the gateway's log should show PostgreSQL's 53100 (could not extend file): {log}"
    );

    let again = deliver(&client, &gateway, &stored).await;
    assert_eq!(
        (again.status, again.replayed, again.body.as_str()),
        (200, true, first.body.as_str()),
        "a redelivery of the event stored before the disk filled keeps its ack"
    );

    let (status, readyz) = get_json(&client, format!("{}/readyz", gateway.address())).await;
    assert_eq!(
        (status, &readyz["status"], &readyz["reason"]),
        (200, &"degraded".into(), &"disk_full".into()),
        "/readyz while the disk is full: {readyz}"
    );
    let metrics = client
        .get(format!("{}/metrics", gateway.address()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric_sample(
            &metrics,
            "gateway_database_write_failures_total",
            &[("reason", "disk_full")]
        ),
        Some(1.0),
        "one refused capture, counted once"
    );
    assert!(
        metric_sample(
            &metrics,
            "gateway_database_cannot_write_last_timestamp_seconds",
            &[]
        )
        .is_some_and(|t| t > 0.0),
        "the time of the newest failure is exported"
    );

    disk.free();
    let started = Instant::now();
    let applied = deliver(&client, &gateway, &capture).await;
    let healed_in = started.elapsed();
    assert_eq!(
        applied.status, 200,
        "the same capture once space returned: {applied:?}"
    );
    assert!(!applied.replayed, "nothing was stored for it before");
    let ack: serde_json::Value = serde_json::from_str(&applied.body).unwrap();
    assert_eq!(ack["outcome"], "applied", "{ack}");
    let after = books(&db).await;
    assert_eq!(
        after,
        (before.0 + 1, before.1 + 1, before.2 + 1),
        "the capture posted once once space returned"
    );
    let (status, readyz) = get_json(&client, format!("{}/readyz", gateway.address())).await;
    assert_eq!(
        (status, &readyz["status"]),
        (200, &"ready".into()),
        "/readyz once a write committed again: {readyz}"
    );
    eprintln!(
        "full disk: filled {filled} bytes; the refused capture answered in {refused_in:?}, the healed one in {healed_in:?}"
    );
}
