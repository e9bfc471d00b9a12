//! Finance replay and export, through the real binary against a real gateway.

use std::path::PathBuf;

use crate::support::{ACME, TestApp, base_config, insert_orders, spawn_app};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cg-replay-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn gateway(app: &TestApp, dir: &std::path::Path, args: &[&str]) -> Run {
    let config = dir.join("gateway.toml");
    std::fs::write(&config, base_config(&app.database_url)).unwrap();
    let output = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(&config)
        .args(args)
        .env("DATABASE_URL", &app.database_url)
        .output()
        .await
        .unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn replay(
    app: &TestApp,
    dir: &std::path::Path,
    file: &std::path::Path,
    extra: &[&str],
) -> Run {
    let file = file.to_str().unwrap().to_owned();
    let mut args = vec![
        "replay",
        &file,
        "--url",
        &app.address,
        "--max-backoff-ms",
        "20",
    ];
    args.extend_from_slice(extra);
    gateway(app, dir, &args).await
}

/// The count of one class in the summary table.
fn count(run: &Run, class: &str) -> usize {
    run.stdout
        .lines()
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            (parts.next() == Some(class)).then(|| parts.next().unwrap().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {class} row in:\n{}\n{}", run.stdout, run.stderr))
}

fn payment_body(event_id: &str, order_id: i64, amount: i64) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","data":{{"payment_id":"pay_{event_id}","order_id":{order_id},"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

fn replay_line(provider: &str, id: &str, body: &str) -> String {
    serde_json::json!({ "provider": provider, "id": id, "body": body }).to_string()
}

#[tokio::test]
async fn replaying_300_events_of_which_100_arrived_live_applies_200_and_replays_100() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 300).await;
    let mut lines = Vec::new();
    for (i, (order, amount)) in orders.iter().enumerate() {
        let id = format!("evt_{i}");
        let body = payment_body(&id, *order, *amount);
        if i < 100 {
            assert_eq!(app.deliver(ACME, &id, &body).await.status(), 200);
        }
        lines.push(replay_line(ACME, &id, &body));
    }
    let file = dir.join("events.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let report = dir.join("report.json");

    let first = replay(
        &app,
        &dir,
        &file,
        &["--concurrency", "8", "--report", report.to_str().unwrap()],
    )
    .await;
    assert_eq!(first.code, Some(0), "{}\n{}", first.stdout, first.stderr);
    assert_eq!(
        (count(&first, "applied"), count(&first, "replayed")),
        (200, 100)
    );
    assert_eq!((count(&first, "conflict"), count(&first, "failed")), (0, 0));
    let volume: i64 = orders.iter().map(|(_, amount)| amount).sum();
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers").await,
        300
    );
    assert_eq!(
        app.count("SELECT sum(amount_minor)::bigint FROM ledger_entries WHERE account = 'psp_clearing:acme'").await,
        volume
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        (report["applied"].as_u64(), report["replayed"].as_u64()),
        (Some(200), Some(100))
    );

    let second = replay(&app, &dir, &file, &["--concurrency", "8"]).await;
    assert_eq!(second.code, Some(0));
    assert_eq!(
        (count(&second, "applied"), count(&second, "replayed")),
        (0, 300)
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers").await,
        300,
        "a second replay changes nothing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn export_then_replay_round_trips() {
    let app = spawn_app().await;
    let dir = scratch();
    for (i, (order, amount)) in insert_orders(&app.db, 20).await.iter().enumerate() {
        let id = format!("evt_{i}");
        app.deliver(ACME, &id, &payment_body(&id, *order, *amount))
            .await;
    }
    let export = gateway(&app, &dir, &["export", "--provider", ACME]).await;
    assert_eq!(export.code, Some(0), "{}", export.stderr);
    let lines: Vec<&str> = export.stdout.lines().collect();
    assert_eq!(lines.len(), 20);
    let first: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(
        (first["provider"].as_str(), first["id"].as_str()),
        (Some(ACME), Some("evt_0")),
        "oldest first"
    );

    let file = dir.join("export.jsonl");
    std::fs::write(&file, &export.stdout).unwrap();
    let run = replay(&app, &dir, &file, &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        count(&run, "replayed"),
        20,
        "every exported event is recognised as already processed"
    );
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 20);

    let future = gateway(
        &app,
        &dir,
        &[
            "export",
            "--provider",
            ACME,
            "--since",
            "2999-01-01T00:00:00Z",
        ],
    )
    .await;
    assert_eq!((future.code, future.stdout.as_str()), (Some(0), ""));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_tampered_body_is_a_conflict_and_a_malformed_line_a_failure_and_the_exit_is_non_zero() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 2).await;
    let body = payment_body("evt_a", orders[0].0, orders[0].1);
    app.deliver(ACME, "evt_a", &body).await;
    let tampered = body.replace("pay_evt_a", "pay_evt_x");
    let file = dir.join("events.jsonl");
    let lines = [
        replay_line(ACME, "evt_a", &tampered),
        "{not json".to_owned(),
        replay_line(
            ACME,
            "evt_b",
            &payment_body("evt_b", orders[1].0, orders[1].1),
        ),
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let report = dir.join("report.json");
    let run = replay(&app, &dir, &file, &["--report", report.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(1));
    assert_eq!(
        (
            count(&run, "conflict"),
            count(&run, "failed"),
            count(&run, "applied")
        ),
        (1, 1, 1)
    );
    assert!(
        run.stderr.contains("line 2"),
        "the malformed line is named: {}",
        run.stderr
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let events = report["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(
        (events[0]["line"].as_u64(), events[0]["class"].as_str()),
        (Some(1), Some("conflict"))
    );
    assert_eq!(
        (events[1]["line"].as_u64(), events[1]["class"].as_str()),
        (Some(2), Some("failed"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_gateway_answering_503_for_a_while_is_retried_until_it_succeeds() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 1).await;
    // The first three attempts to post a transfer fail (a sequence is not rolled back), so the
    // gateway answers 503 three times and stores nothing, then recovers.
    app.db
        .batch_execute(
            "CREATE SEQUENCE failures; \
             CREATE FUNCTION fail_three_times() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN IF nextval('failures') <= 3 THEN RAISE EXCEPTION 'database hiccup'; END IF; RETURN NEW; END $$; \
             CREATE TRIGGER hiccup BEFORE INSERT ON ledger_transfers FOR EACH ROW EXECUTE FUNCTION fail_three_times();",
        )
        .await
        .unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(
        &file,
        replay_line(
            ACME,
            "evt_r",
            &payment_body("evt_r", orders[0].0, orders[0].1),
        ),
    )
    .unwrap();
    let report = dir.join("report.json");
    let run = replay(
        &app,
        &dir,
        &file,
        &["--retries", "5", "--report", report.to_str().unwrap()],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert_eq!(count(&run, "applied"), 1);
    let attempts: i64 = app
        .db
        .query_one("SELECT last_value FROM failures", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(attempts, 4, "three 503s, then the fourth attempt applied");
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn too_few_retries_against_a_failing_gateway_end_as_failed() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 1).await;
    app.db
        .batch_execute(
            "CREATE FUNCTION always_fail() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'down'; END $$; \
             CREATE TRIGGER down BEFORE INSERT ON ledger_transfers FOR EACH ROW EXECUTE FUNCTION always_fail();",
        )
        .await
        .unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(
        &file,
        replay_line(
            ACME,
            "evt_f",
            &payment_body("evt_f", orders[0].0, orders[0].1),
        ),
    )
    .unwrap();
    let run = replay(&app, &dir, &file, &["--retries", "2"]).await;
    assert_eq!(run.code, Some(1));
    assert_eq!(count(&run, "failed"), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_dry_run_signs_and_prints_but_sends_nothing() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 1).await;
    let file = dir.join("events.jsonl");
    std::fs::write(
        &file,
        replay_line(
            ACME,
            "evt_d",
            &payment_body("evt_d", orders[0].0, orders[0].1),
        ),
    )
    .unwrap();
    let run = replay(&app, &dir, &file, &["--dry-run"]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("line 1: POST") && run.stdout.contains("evt_d"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("webhook-signature"));
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_standard_webhooks_line_without_its_id_is_failed_and_never_sent() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 1).await;
    // The refund was delivered under webhook-id msg_77; its body names another id. Signing it
    // under the body's id would make the gateway post it a second time.
    let capture = payment_body("evt_c", orders[0].0, orders[0].1);
    app.deliver(ACME, "msg_c", &capture).await;
    let refund = r#"{"id":"evt_r","type":"refund.succeeded","data":{"payment_id":"pay_evt_c","amount_minor":100,"currency":"USD"}}"#;
    app.deliver(ACME, "msg_77", refund).await;
    let file = dir.join("events.jsonl");
    let without_id = serde_json::json!({ "provider": ACME, "body": refund }).to_string();
    std::fs::write(&file, without_id).unwrap();
    let run = replay(&app, &dir, &file, &[]).await;
    assert_eq!(run.code, Some(1));
    assert_eq!(count(&run, "failed"), 1);
    assert!(run.stderr.contains("line 1"), "{}", run.stderr);
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        1,
        "the refund posted once"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn first_ignored_and_held_events_are_counted_apart_from_applied() {
    let app = spawn_app().await;
    let dir = scratch();
    let orders = insert_orders(&app.db, 1).await;
    let file = dir.join("events.jsonl");
    let lines = [
        replay_line(ACME, "e1", &payment_body("e1", orders[0].0, orders[0].1)),
        replay_line(ACME, "e2", &payment_body("e2", 999_999, 500)),
        replay_line(
            ACME,
            "e3",
            r#"{"id":"e3","type":"customer.created","data":{}}"#,
        ),
    ];
    std::fs::write(&file, lines.join("\n")).unwrap();
    let run = replay(&app, &dir, &file, &[]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        (
            count(&run, "applied"),
            count(&run, "held"),
            count(&run, "ignored")
        ),
        (1, 1, 1)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A console or admin download ends with its trailer; replay checks the count and skips it,
/// so the download replays as it is. A file whose lines disagree with its trailer is refused
/// before anything is sent.
#[tokio::test]
async fn an_http_export_with_its_trailer_replays_and_a_count_mismatch_is_refused() {
    let app = spawn_app().await;
    let dir = scratch();
    for (i, (order, amount)) in insert_orders(&app.db, 5).await.iter().enumerate() {
        let id = format!("evt_{i}");
        app.deliver(ACME, &id, &payment_body(&id, *order, *amount))
            .await;
    }
    let download = app
        .admin_get("/admin/events.jsonl?provider=acme")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        download
            .trim_end()
            .ends_with(r#"{"trailer":{"events":5,"skipped_non_utf8":0}}"#),
        "{download}"
    );
    let file = dir.join("download.jsonl");
    std::fs::write(&file, &download).unwrap();
    let run = replay(&app, &dir, &file, &[]).await;
    assert_eq!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert_eq!(count(&run, "replayed"), 5, "the trailer is not an event");
    assert_eq!(count(&run, "failed"), 0);

    // One event line lost: the trailer still says 5.
    let cut: Vec<&str> = download.lines().skip(1).collect();
    let file = dir.join("cut.jsonl");
    std::fs::write(&file, cut.join("\n")).unwrap();
    let deliveries = app.count("SELECT count(*) FROM callback_deliveries").await;
    let run = replay(&app, &dir, &file, &[]).await;
    assert_ne!(run.code, Some(0), "{}{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("trailer") && run.stderr.contains('5') && run.stderr.contains('4'),
        "says what differs: {}",
        run.stderr
    );
    assert_eq!(
        app.count("SELECT count(*) FROM callback_deliveries").await,
        deliveries
    );
    assert!(
        run.stdout.is_empty(),
        "nothing was sent, so no summary: {}",
        run.stdout
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--url` may carry `user:password@` for a proxy's basic auth; the password never reaches the
/// output, neither in a dry run's lines nor in a failed attempt's error.
#[tokio::test]
async fn replay_never_prints_the_password_in_its_url() {
    let app = spawn_app().await;
    let dir = scratch();
    let file = dir.join("events.jsonl");
    std::fs::write(
        &file,
        replay_line(ACME, "evt_u", &payment_body("evt_u", 1, 100)),
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let closed = format!(
        "http://ops:url-pw-1@127.0.0.1:{}",
        crate::support::cluster::free_port()
    );
    for args in [
        vec!["replay", path, "--url", &closed, "--dry-run"],
        vec!["replay", path, "--url", &closed, "--retries", "0"],
    ] {
        let run = gateway(&app, &dir, &args).await;
        assert!(
            !run.stdout.contains("url-pw-1") && !run.stderr.contains("url-pw-1"),
            "{args:?}: the URL's password reached the output:\n{}{}",
            run.stdout,
            run.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The binary with every provider of issue 24 configured.
async fn every_provider_gateway(app: &TestApp, dir: &std::path::Path, args: &[&str]) -> Run {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        crate::support::config_with(&app.database_url, &crate::support::all_providers("")),
    )
    .unwrap();
    let output = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(&config)
        .args(args)
        .env("DATABASE_URL", &app.database_url)
        .output()
        .await
        .unwrap();
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Finance replay signs with each provider's own scheme: exported events of every provider
/// come back `replayed` (an Adyen item's bytes kept, with the signature it carries), events
/// the gateway never saw are `applied` (an unsigned Adyen item is signed into a notification),
/// and a PayPal line is `failed` and never sent: the gateway cannot sign for PayPal, whose
/// stored events are replayed by the admin action instead.
#[tokio::test]
async fn every_provider_replays_exported_events_and_new_ones_and_paypal_is_refused() {
    use crate::support::payloads::{Kind, payload};
    use crate::support::{ADYEN, CHECKOUT, MERCHANT, PADDLE, PAYPAL, RAZORPAY, SQUARE};
    let app = crate::support::spawn_app_with(&crate::support::all_providers("")).await;
    let dir = scratch();
    let providers = [ADYEN, SQUARE, RAZORPAY, CHECKOUT, PADDLE, PAYPAL];
    let mut new_lines = Vec::new();
    for provider in providers {
        let live = app.create_order(MERCHANT, 1500, "USD").await;
        let event = payload(
            provider,
            "live",
            &format!("pay_{provider}_live"),
            &Kind::Capture {
                order: Some(live),
                amount: 1500,
                currency: "USD",
            },
        );
        let (status, _, text) =
            crate::support::answer(app.deliver(provider, &event.event_id, &event.body).await).await;
        assert_eq!(status, 200, "{provider}: {text}");
        if provider != PAYPAL {
            let fresh = app.create_order(MERCHANT, 1700, "USD").await;
            let event = payload(
                provider,
                "new",
                &format!("pay_{provider}_new"),
                &Kind::Capture {
                    order: Some(fresh),
                    amount: 1700,
                    currency: "USD",
                },
            );
            new_lines.push(replay_line(provider, &event.event_id, &event.body));
        }
    }
    let mut exported = String::new();
    for provider in providers {
        let run = every_provider_gateway(&app, &dir, &["export", "--provider", provider]).await;
        assert_eq!(run.code, Some(0), "{provider}: {}", run.stderr);
        assert_eq!(run.stdout.lines().count(), 1, "{provider}: {}", run.stdout);
        exported.push_str(&run.stdout);
    }
    let file = dir.join("events.jsonl");
    std::fs::write(&file, format!("{exported}{}\n", new_lines.join("\n"))).unwrap();
    let url = app.address.clone();
    let run = every_provider_gateway(
        &app,
        &dir,
        &[
            "replay",
            file.to_str().unwrap(),
            "--url",
            &url,
            "--max-backoff-ms",
            "20",
        ],
    )
    .await;
    assert_eq!(
        run.code,
        Some(1),
        "PayPal's line failed: {}{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(count(&run, "replayed"), 5, "{}{}", run.stdout, run.stderr);
    assert_eq!(count(&run, "applied"), 5, "{}{}", run.stdout, run.stderr);
    assert_eq!(count(&run, "failed"), 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("/replay"),
        "points at the admin replay: {}",
        run.stderr
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers").await,
        11,
        "6 live, 5 new, none twice"
    );
}
