//! The restore drill of docs/backup.md, as a test (issue 54). The gateway serves on a cluster
//! whose WAL pgBackRest archives (deploy/pgbackrest/), with its two roles (deploy/roles.sql).
//! Events before a full backup, between it and an incremental one, and after both; then a bad
//! operation (every stored ack deleted) and more events the gateway acknowledges. The cluster
//! is restored to the moment before the bad operation and the gateway started again: every
//! event acknowledged before that moment is in the books and a redelivery of it gets the
//! byte-identical ack. The events acknowledged after it come back through the project's own
//! recovery path, `reconcile --events --emit-replay` against the provider's report and
//! `replay`, after `after-restore` moved every id sequence past what the lost timeline handed
//! out; then the books equal the provider's, and no id is handed out twice.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use crate::support::backup::Backed;
use crate::support::gateway::GatewayProcess;
use crate::support::simulator::{Ack, Event, Simulator};
use crate::support::{ACME, config_with, connect, insert_orders, with_user};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// `callback-gateway ARGS` with `config` written to DIR/gateway.toml.
fn command(dir: &Path, args: &[&str]) -> Output {
    Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(dir.join("gateway.toml"))
        .args(args)
        .env_remove("GATEWAY_CONFIG")
        .env_remove("DATABASE_URL")
        .env_remove("DATABASE_MIGRATE_URL")
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A `refund.succeeded` of `amount_minor` USD of the payment `payment_of` paid.
fn refund(id: &str, payment_of: &Event, amount_minor: i64) -> Event {
    Event {
        provider: ACME,
        id: id.to_owned(),
        body: format!(
            r#"{{"id":"{id}","type":"refund.succeeded","data":{{"payment_id":"pay_{}","refund_id":"re_{id}","amount_minor":{amount_minor},"currency":"USD"}}}}"#,
            payment_of.id
        ),
        amount_minor,
    }
}

/// What the provider knows of each event it sent: its report line (payment id, kind, amount)
/// and the event itself.
struct Sent {
    event: Event,
    payment_id: String,
    kind: &'static str,
    at: String,
}

async fn send(provider: &Simulator, sent: &mut Vec<Sent>, event: Event) -> Ack {
    let (payment_id, kind) = {
        let body: serde_json::Value = serde_json::from_str(&event.body).unwrap();
        let kind = if body["type"] == "refund.succeeded" {
            "refund"
        } else {
            "payment"
        };
        (
            body["data"]["payment_id"].as_str().unwrap().to_owned(),
            kind,
        )
    };
    let ack = provider
        .deliver(&event, 0)
        .await
        .unwrap_or_else(|| panic!("{} was not acknowledged", event.id));
    assert_eq!(ack.status, 200, "{}: {}", event.id, ack.body);
    assert!(
        ack.body.contains("\"applied\""),
        "{}: {}",
        event.id,
        ack.body
    );
    sent.push(Sent {
        event,
        payment_id,
        kind,
        at: chrono::Utc::now().to_rfc3339(),
    });
    ack
}

/// Every sequence of the gateway's schema and its last value.
async fn sequences(db: &tokio_postgres::Client) -> HashMap<String, i64> {
    db.query(
        "SELECT sequencename::TEXT, coalesce(last_value, 0) FROM pg_sequences WHERE schemaname = 'public'",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[tokio::test]
async fn a_point_in_time_restore_keeps_every_acknowledged_event_and_reconcile_and_replay_bring_back_the_rest()
 {
    let backed = Backed::start();
    let cluster = &backed.cluster;
    cluster.psql_file(
        "postgres",
        &Path::new(REPO).join("deploy/roles.sql"),
        &[
            ("owner", "gateway_owner"),
            ("runtime", "gateway"),
            ("database", "gateway"),
        ],
    );
    let superuser_url = cluster.url("gateway");
    let owner_url = with_user(&superuser_url, "gateway_owner");
    let runtime_url = with_user(&superuser_url, "gateway");
    let config = config_with(
        &runtime_url,
        &format!("[database]\nmigrate_url = \"{owner_url}\"\n"),
    );
    let mut gateway = GatewayProcess::spawn_on(&runtime_url, &config).await;
    let dir = gateway.dir.clone();
    let db = connect(&superuser_url).await;
    let orders = insert_orders(&db, 60).await;
    let capture = |n: usize| Event::payment(&format!("c{n}"), orders[n].0, orders[n].1);
    let provider = Simulator::new(vec![gateway.address()]);
    let mut sent = Vec::new();
    let mut acks: Vec<(Event, Ack)> = Vec::new();

    // Before the full backup, between it and the incremental one, after both.
    for n in 0..5 {
        let ack = send(&provider, &mut sent, capture(n)).await;
        acks.push((capture(n), ack));
    }
    let first_refund = refund("r0a", &capture(0), 300);
    let ack = send(&provider, &mut sent, first_refund.clone()).await;
    acks.push((first_refund, ack));
    backed.backup("full");
    for n in 5..10 {
        let ack = send(&provider, &mut sent, capture(n)).await;
        acks.push((capture(n), ack));
    }
    let refund_b = refund("r5", &capture(5), capture(5).amount_minor);
    let ack = send(&provider, &mut sent, refund_b.clone()).await;
    acks.push((refund_b, ack));
    backed.backup("incr");
    for n in 10..15 {
        let ack = send(&provider, &mut sent, capture(n)).await;
        acks.push((capture(n), ack));
    }
    let kinds: Vec<String> = backed.backups().into_iter().map(|(kind, _)| kind).collect();
    assert_eq!(kinds, ["full", "incr"], "the repository's backups");

    // The moment to restore to, then the bad operation: every stored ack deleted (a cleanup
    // without its WHERE), as the schema's owner.
    let target: String = db
        .query_one("SELECT clock_timestamp()::TEXT", &[])
        .await
        .unwrap()
        .get(0);
    connect(&owner_url)
        .await
        .batch_execute("DELETE FROM idempotency_keys")
        .await
        .unwrap();
    // After it, acknowledged: more captures than a sequence logs ahead (32) so the lost
    // timeline hands out ids the restored one would hand out again, a second partial refund
    // of a payment refunded before (its refunds then sum to less than the provider's) and
    // the first refund of a payment captured before.
    let mut after = Vec::new();
    for n in 15..55 {
        send(&provider, &mut sent, capture(n)).await;
        after.push(capture(n).id);
    }
    for event in [
        refund("r0b", &capture(0), 200),
        refund("r10", &capture(10), 500),
    ] {
        after.push(event.id.clone());
        send(&provider, &mut sent, event).await;
    }
    let handed_out = sequences(&db).await;
    backed.archive_now();
    drop(db);

    // The restore: the gateway stopped, the cluster restored to the target, ids fenced off,
    // the gateway started again.
    gateway.kill_9();
    backed.restore_to(&target).await;
    let fenced = command(&dir, &["after-restore"]);
    assert_eq!(fenced.status.code(), Some(0), "{}", text(&fenced));
    let db = connect(&superuser_url).await;
    // No id the lost timeline handed out (in acks, to merchants, in notifications) is handed
    // out again: each sequence resumes above what it had reached.
    let resumed = sequences(&db).await;
    for (sequence, before) in &handed_out {
        let now = resumed.get(sequence).copied().unwrap_or_default();
        assert!(
            now >= *before,
            "{sequence} handed out up to {before} before the restore; it resumes after {now}"
        );
    }
    gateway.restart().await;

    // Everything acknowledged before the target is in the books, and answers as it did.
    for (event, ack) in &acks {
        let again = provider.deliver(event, 0).await.unwrap();
        assert_eq!(
            (again.status, again.replayed, &again.body),
            (ack.status, true, &ack.body),
            "{} redelivered after the restore",
            event.id
        );
    }
    let lost: i64 = db
        .query_one(
            "SELECT count(*) FROM ledger_transfers WHERE event_id = ANY($1)",
            &[&after],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(lost, 0, "the events after the target were lost with it");

    // The provider's report and its events; reconcile finds what the books miss and writes
    // it as a replay file, replay delivers it.
    let report: String = sent
        .iter()
        .map(|s| {
            format!(
                "{{\"payment_id\":\"{}\",\"kind\":\"{}\",\"amount_minor\":{},\"currency\":\"USD\",\"at\":\"{}\"}}\n",
                s.payment_id, s.kind, s.event.amount_minor, s.at
            )
        })
        .collect();
    std::fs::write(dir.join("report.jsonl"), report).unwrap();
    let events: String = sent
        .iter()
        .map(|s| {
            serde_json::json!({"provider": ACME, "id": s.event.id, "body": s.event.body})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(dir.join("events.jsonl"), events).unwrap();
    let report_path = dir.join("report.jsonl");
    let events_path = dir.join("events.jsonl");
    let replay_path = dir.join("replay.jsonl");
    let reconcile = command(
        &dir,
        &[
            "reconcile",
            "--provider",
            ACME,
            report_path.to_str().unwrap(),
            "--events",
            events_path.to_str().unwrap(),
            "--emit-replay",
            replay_path.to_str().unwrap(),
        ],
    );
    assert_eq!(
        reconcile.status.code(),
        Some(1),
        "the books miss the events after the target:\n{}",
        text(&reconcile)
    );
    let replay = command(
        &dir,
        &[
            "replay",
            replay_path.to_str().unwrap(),
            "--url",
            &gateway.address(),
        ],
    );
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay));
    let reconcile = command(
        &dir,
        &[
            "reconcile",
            "--provider",
            ACME,
            report_path.to_str().unwrap(),
        ],
    );
    assert_eq!(
        reconcile.status.code(),
        Some(0),
        "after the replay the books equal the provider's report:\n{}",
        text(&reconcile)
    );

    let verified = command(&dir, &["audit", "verify"]);
    assert_eq!(verified.status.code(), Some(0), "{}", text(&verified));
}
