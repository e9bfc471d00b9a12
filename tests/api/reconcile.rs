//! Reconciliation through the real binary: the provider's report against what the gateway
//! posted, on a database of the test's own.

use std::path::{Path, PathBuf};

use crate::support::simulator::{Event, Simulator};
use crate::support::{ACME, MERCHANT, TestApp, base_config, insert_orders, spawn_app};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The count of one class: the sum of its rows in the summary table (one per currency).
    fn count(&self, class: &str) -> u64 {
        let rows: Vec<u64> = self
            .stdout
            .lines()
            .take_while(|line| !line.is_empty())
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                (parts.next() == Some(class)).then(|| parts.next()?.parse().ok())?
            })
            .collect();
        assert!(
            !rows.is_empty(),
            "no {class} row in:\n{}\n{}",
            self.stdout,
            self.stderr
        );
        rows.iter().sum()
    }

    fn explain(&self) -> String {
        format!("exit {:?}\n{}\n{}", self.code, self.stdout, self.stderr)
    }
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cg-reconcile-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn gateway(app: &TestApp, dir: &Path, args: &[&str]) -> Run {
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

async fn reconcile(app: &TestApp, dir: &Path, report: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["reconcile", "--provider", ACME, report.to_str().unwrap()];
    args.extend_from_slice(extra);
    gateway(app, dir, &args).await
}

/// One report line as the contract writes it.
fn movement(payment_id: &str, kind: &str, amount: i64, currency: &str, at: &str) -> String {
    serde_json::json!({
        "payment_id": payment_id,
        "kind": kind,
        "amount_minor": amount,
        "currency": currency,
        "at": at,
        "reference": format!("ref_{payment_id}"),
    })
    .to_string()
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339()
}

fn write_report(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join("provider.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// `n` payments of merchant 42 the provider makes, each for an order of its own.
async fn payments(app: &TestApp, n: i64) -> Vec<Event> {
    insert_orders(&app.db, n)
        .await
        .iter()
        .enumerate()
        .map(|(i, (order, amount))| Event::payment(&format!("evt_{i}"), *order, *amount))
        .collect()
}

/// The provider's truth about `events`: one payment line each.
fn truth(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            movement(
                &format!("pay_{}", e.id),
                "payment",
                e.amount_minor,
                "USD",
                &now(),
            )
        })
        .collect()
}

fn refund_body(event_id: &str, payment_id: &str, amount: i64) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"refund.succeeded","data":{{"payment_id":"{payment_id}","order_id":0,"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

/// A transfer written straight into the ledger (the gateway stamps `now()`; tests need other
/// times, and held postings this tree cannot make yet). `other` is the non-clearing account.
async fn insert_transfer(
    app: &TestApp,
    payment_id: &str,
    kind: &str,
    amount: i64,
    other: &str,
    created_at: &str,
) {
    let clearing = if kind == "payment" { amount } else { -amount };
    app.db
        .execute(
            "WITH t AS ( \
               INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, order_id, payment_id, created_at) \
               VALUES ($1, $2, 'evt_sql_' || $3 || '_' || $4, $4, 1, $3, $5::text::timestamptz) RETURNING id) \
             INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
             SELECT t.id, $1, e.account, 'USD', e.amount FROM t, \
               (VALUES ('psp_clearing:' || $2, $6::bigint), ($7, -$6::bigint)) AS e(account, amount)",
            &[&MERCHANT, &ACME, &payment_id, &kind, &created_at, &clearing, &other],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn the_providers_own_truth_reconciles_to_all_matched() {
    let app = spawn_app().await;
    let dir = scratch();
    let events = payments(&app, 20).await;
    let simulator = Simulator::new(vec![app.address.clone()]);
    simulator.deliver_all_twice(&events, 8).await;
    assert!(
        simulator.failures().is_empty(),
        "{:?}",
        simulator.failures()
    );
    // Two partial refunds of the first payment: one item, summed on both sides.
    let first = format!("pay_{}", events[0].id);
    for (id, amount) in [("evt_r1", 300), ("evt_r2", 200)] {
        let response = app
            .deliver(ACME, id, &refund_body(id, &first, amount))
            .await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    let mut lines = truth(&events);
    lines.push(movement(&first, "refund", 300, "USD", &now()));
    lines.push(movement(&first, "refund", 200, "usd", &now()));
    let report = write_report(&dir, &lines);
    let json = dir.join("out.json");

    let run = reconcile(&app, &dir, &report, &["--report", json.to_str().unwrap()]).await;

    assert_eq!(run.code, Some(0), "{}", run.explain());
    assert_eq!(run.count("matched"), 21, "{}", run.explain());
    for class in [
        "held",
        "missing_in_ledger",
        "missing_at_provider",
        "amount_mismatch",
    ] {
        assert_eq!(run.count(class), 0, "{class}: {}", run.explain());
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let items = json["items"].as_array().unwrap();
    assert_eq!(
        items.len(),
        21,
        "every item is in the JSON report, matched ones too"
    );
    let refund = items
        .iter()
        .find(|i| i["payment_id"] == first.as_str() && i["kind"] == "refund")
        .unwrap();
    assert_eq!(
        (
            refund["class"].as_str(),
            refund["report_amount_minor"].as_i64(),
            refund["ledger_transfers"].as_u64()
        ),
        (Some("matched"), Some(500), Some(2))
    );
    assert_eq!(json["clean"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_withheld_delivery_is_missing_in_ledger_until_finance_replays_it() {
    let app = spawn_app().await;
    let dir = scratch();
    let events = payments(&app, 10).await;
    let (delivered, withheld) = events.split_at(9);
    let simulator = Simulator::new(vec![app.address.clone()]);
    for event in delivered {
        simulator.deliver(event, 0).await.unwrap();
    }
    let report = write_report(&dir, &truth(&events));
    let ids = dir.join("missing.txt");
    let json = dir.join("out.json");
    let args = [
        "--emit-ids",
        ids.to_str().unwrap(),
        "--report",
        json.to_str().unwrap(),
    ];

    let run = reconcile(&app, &dir, &report, &args).await;

    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert_eq!(
        (run.count("matched"), run.count("missing_in_ledger")),
        (9, 1)
    );
    let missing = format!("pay_{}", withheld[0].id);
    assert!(
        run.stdout
            .contains(&format!("missing_in_ledger    {missing} payment")),
        "the item is printed: {}",
        run.stdout
    );
    assert_eq!(
        std::fs::read_to_string(&ids).unwrap(),
        format!("{missing}\n")
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let item = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["class"] == "missing_in_ledger")
        .unwrap();
    assert_eq!(
        (item["payment_id"].as_str(), item["kind"].as_str()),
        (Some(missing.as_str()), Some("payment"))
    );

    // Finance fetches that event from the provider and replays it; the ledger then agrees.
    let replay_file = dir.join("replay.jsonl");
    let line =
        serde_json::json!({"provider": ACME, "id": withheld[0].id, "body": withheld[0].body});
    std::fs::write(&replay_file, format!("{line}\n")).unwrap();
    let replay = gateway(
        &app,
        &dir,
        &[
            "replay",
            replay_file.to_str().unwrap(),
            "--url",
            &app.address,
        ],
    )
    .await;
    assert_eq!(replay.code, Some(0), "{}", replay.explain());

    let again = reconcile(&app, &dir, &report, &args).await;
    assert_eq!(again.code, Some(0), "{}", again.explain());
    assert_eq!(
        (again.count("matched"), again.count("missing_in_ledger")),
        (10, 0)
    );
    assert_eq!(std::fs::read_to_string(&ids).unwrap(), "");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_ledger_only_movement_and_edited_amounts_are_named_with_their_class() {
    let app = spawn_app().await;
    let dir = scratch();
    let events = payments(&app, 6).await;
    let simulator = Simulator::new(vec![app.address.clone()]);
    simulator.deliver_all_twice(&events, 4).await;
    let (reported, extra) = events.split_at(5);
    let mut lines = truth(reported);
    // The report says one cent more for evt_1, and another currency for evt_2.
    lines[1] = movement(
        "pay_evt_1",
        "payment",
        reported[1].amount_minor + 1,
        "USD",
        &now(),
    );
    lines[2] = movement(
        "pay_evt_2",
        "payment",
        reported[2].amount_minor,
        "EUR",
        &now(),
    );
    let report = write_report(&dir, &lines);
    let json = dir.join("out.json");

    let run = reconcile(&app, &dir, &report, &["--report", json.to_str().unwrap()]).await;

    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert_eq!(
        (
            run.count("matched"),
            run.count("amount_mismatch"),
            run.count("missing_at_provider")
        ),
        (3, 2, 1),
        "{}",
        run.explain()
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let class_of = |payment_id: &str| {
        json["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["payment_id"] == payment_id)
            .map(|i| i["class"].as_str().unwrap().to_owned())
    };
    assert_eq!(class_of("pay_evt_1").as_deref(), Some("amount_mismatch"));
    assert_eq!(class_of("pay_evt_2").as_deref(), Some("amount_mismatch"));
    assert_eq!(
        class_of(&format!("pay_{}", extra[0].id)).as_deref(),
        Some("missing_at_provider")
    );
    assert_eq!(class_of("pay_evt_0").as_deref(), Some("matched"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_held_payment_is_held_and_the_run_still_exits_0() {
    let app = spawn_app().await;
    let dir = scratch();
    let events = payments(&app, 3).await;
    let simulator = Simulator::new(vec![app.address.clone()]);
    simulator.deliver_all_twice(&events, 3).await;
    // A capture for an order this merchant does not have: the gateway holds it in unapplied
    // funds; then the provider refunds part of it.
    let held = [
        Event {
            provider: ACME,
            id: "evt_held".into(),
            body: r#"{"id":"evt_held","type":"payment.succeeded","data":{"payment_id":"pay_held","order_id":987654321,"amount_minor":1500,"currency":"USD"}}"#.into(),
            amount_minor: 1500,
        },
        Event {
            provider: ACME,
            id: "evt_held_refund".into(),
            body: r#"{"id":"evt_held_refund","type":"refund.succeeded","data":{"payment_id":"pay_held","amount_minor":400,"currency":"USD"}}"#.into(),
            amount_minor: 400,
        },
    ];
    for event in &held {
        let ack = simulator.deliver(event, 0).await.unwrap();
        let ack: serde_json::Value = serde_json::from_str(&ack.body).unwrap();
        assert!(
            matches!(ack["outcome"].as_str(), Some("held" | "applied")),
            "{ack}"
        );
    }
    let mut lines = truth(&events);
    lines.push(movement("pay_held", "payment", 1500, "USD", &now()));
    lines.push(movement("pay_held", "refund", 400, "USD", &now()));
    let report = write_report(&dir, &lines);
    let json = dir.join("out.json");

    let run = reconcile(&app, &dir, &report, &["--report", json.to_str().unwrap()]).await;

    assert_eq!(
        run.code,
        Some(0),
        "held is not a difference: {}",
        run.explain()
    );
    assert_eq!(
        (run.count("matched"), run.count("held")),
        (3, 2),
        "{}",
        run.explain()
    );
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let held: Vec<_> = json["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["class"] == "held")
        .map(|i| {
            (
                i["payment_id"].as_str().unwrap(),
                i["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(held, [("pay_held", "payment"), ("pay_held", "refund")]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_malformed_line_is_named_counted_and_skipped_and_an_unreadable_file_exits_2() {
    let app = spawn_app().await;
    let dir = scratch();
    let events = payments(&app, 2).await;
    let simulator = Simulator::new(vec![app.address.clone()]);
    simulator.deliver_all_twice(&events, 2).await;
    let mut lines = truth(&events);
    lines.insert(1, "{not json".to_owned());
    lines.push(movement("pay_x", "payout", 5, "USD", &now()));
    let report = write_report(&dir, &lines);
    let json = dir.join("out.json");

    let run = reconcile(&app, &dir, &report, &["--report", json.to_str().unwrap()]).await;

    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert!(
        run.stderr.contains("line 2:"),
        "line 2 is named: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("line 4:") && run.stderr.contains("payout"),
        "{}",
        run.stderr
    );
    assert!(run.stdout.contains("2 malformed"), "{}", run.stdout);
    assert_eq!(run.count("matched"), 2, "the good lines are still compared");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(json["malformed_count"], 2);
    assert_eq!(json["malformed"][0]["line"], 2);

    let missing = reconcile(&app, &dir, &dir.join("no-such-report.jsonl"), &[]).await;
    assert_eq!(missing.code, Some(2), "{}", missing.explain());
    assert!(
        missing.stderr.contains("no-such-report.jsonl"),
        "{}",
        missing.stderr
    );
    let directory = reconcile(&app, &dir, &dir, &[]).await;
    assert_eq!(
        directory.code,
        Some(2),
        "a directory is no report: {}",
        directory.explain()
    );

    let unknown = gateway(
        &app,
        &dir,
        &[
            "reconcile",
            "--provider",
            "nobody",
            report.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(unknown.code, Some(2), "{}", unknown.explain());
    let backwards = reconcile(
        &app,
        &dir,
        &report,
        &[
            "--since",
            "2026-01-02T00:00:00Z",
            "--until",
            "2026-01-01T00:00:00Z",
        ],
    )
    .await;
    assert_eq!(backwards.code, Some(2), "{}", backwards.explain());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_window_excludes_movements_outside_it_and_the_grace_margin_catches_late_deliveries() {
    let app = spawn_app().await;
    let dir = scratch();
    // The window is 10 January; the grace margin one hour on either side.
    insert_transfer(
        &app,
        "pay_in",
        "payment",
        1000,
        "merchant_payable",
        "2026-01-10T12:00:00Z",
    )
    .await;
    // Paid at 23:59:30, delivered after midnight: inside the grace margin, still matched.
    insert_transfer(
        &app,
        "pay_late",
        "payment",
        2000,
        "merchant_payable",
        "2026-01-11T00:20:00Z",
    )
    .await;
    // Posted days before: neither read nor judged, though the report mentions it.
    insert_transfer(
        &app,
        "pay_old",
        "payment",
        3000,
        "merchant_payable",
        "2026-01-05T12:00:00Z",
    )
    .await;
    // In the margin before the window with no report line: the previous window's business.
    insert_transfer(
        &app,
        "pay_edge",
        "payment",
        4000,
        "merchant_payable",
        "2026-01-09T23:30:00Z",
    )
    .await;
    // After the window and its margin: not read.
    insert_transfer(
        &app,
        "pay_next",
        "payment",
        5000,
        "merchant_payable",
        "2026-01-11T03:00:00Z",
    )
    .await;
    let report = write_report(
        &dir,
        &[
            movement("pay_in", "payment", 1000, "USD", "2026-01-10T12:00:00Z"),
            movement("pay_late", "payment", 2000, "USD", "2026-01-10T23:59:30Z"),
            movement("pay_old", "payment", 3000, "USD", "2026-01-05T12:00:00Z"),
        ],
    );
    let json = dir.join("out.json");
    let window = [
        "--since",
        "2026-01-10T00:00:00Z",
        "--until",
        "2026-01-11T00:00:00Z",
    ];
    let mut args = window.to_vec();
    args.extend(["--report", json.to_str().unwrap()]);

    let run = reconcile(&app, &dir, &report, &args).await;

    assert_eq!(run.code, Some(0), "{}", run.explain());
    assert_eq!(run.count("matched"), 2, "{}", run.explain());
    assert_eq!(run.count("missing_at_provider"), 0, "{}", run.explain());
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(
        (
            json["lines_outside_window"].as_u64(),
            json["ledger_transfers"].as_u64(),
            json["not_judged"].as_u64()
        ),
        (Some(1), Some(3), Some(1)),
        "pay_old's line is outside; pay_in, pay_late and pay_edge are read; pay_edge is not judged"
    );

    // Without the grace margin the late delivery is out of reach.
    let strict = reconcile(
        &app,
        &dir,
        &report,
        &[&window[..], &["--grace-secs", "0"]].concat(),
    )
    .await;
    assert_eq!(strict.code, Some(1), "{}", strict.explain());
    assert_eq!(strict.count("missing_in_ledger"), 1, "{}", strict.explain());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_ledger_pass_is_a_range_scan_of_the_reconcile_index() {
    let app = spawn_app().await;
    // 200 days of transfers for two merchants, so the planner has a real choice to make.
    app.db
        .batch_execute(
            "WITH t AS ( \
               INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, order_id, payment_id, created_at) \
               SELECT 42 + g % 2, 'acme', 'evt_' || g, 'payment', g, 'pay_' || g, \
                      timestamptz '2026-01-01' + g * interval '10 minutes' \
               FROM generate_series(1, 28800) g RETURNING id, merchant_id) \
             INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
             SELECT id, merchant_id, a.account, 'USD', a.amount FROM t, \
               (VALUES ('psp_clearing:acme', 100), ('merchant_payable', -100)) AS a(account, amount); \
             ANALYZE ledger_transfers; ANALYZE ledger_entries;",
        )
        .await
        .unwrap();
    let sql = callback_gateway::reconcile::ledger::LEDGER_WINDOW_SQL;
    app.db
        .batch_execute(&format!(
            "PREPARE window_pass (bigint, text, text, timestamptz, timestamptz) AS {sql}"
        ))
        .await
        .unwrap();
    let plan: Vec<String> = app
        .db
        .simple_query(
            "EXPLAIN EXECUTE window_pass (42, 'acme', 'psp_clearing:acme', \
             '2026-02-01T00:00:00Z', '2026-02-02T00:00:00Z')",
        )
        .await
        .unwrap()
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .collect();
    let plan = plan.join("\n");
    assert!(
        plan.contains("idx_ledger_transfers_reconcile"),
        "the window pass should use the reconcile index:\n{plan}"
    );
    assert!(!plan.contains("Seq Scan on ledger_transfers"), "{plan}");
}

fn dispute_body(event_id: &str, kind: &str, payment_id: &str, data: &str) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"dispute.{kind}","data":{{"dispute_id":"dp_{payment_id}","payment_id":"{payment_id}",{data}}}}}"#
    )
}

#[tokio::test]
async fn chargebacks_their_fees_and_reversals_match_and_a_withheld_chargeback_is_missing_in_ledger()
{
    let app = spawn_app().await;
    let dir = scratch();
    let events = payments(&app, 5).await;
    let simulator = Simulator::new(vec![app.address.clone()]);
    simulator.deliver_all_twice(&events, 4).await;
    assert!(
        simulator.failures().is_empty(),
        "{:?}",
        simulator.failures()
    );
    let pay = |i: usize| format!("pay_{}", events[i].id);
    let amount = |i: usize| events[i].amount_minor;
    let withdrawn = |i: usize, fee: i64| {
        format!(
            r#""amount_minor":{},"currency":"USD","fee_minor":{fee}"#,
            amount(i)
        )
    };
    // 0: withdrawn with a fee, reinstated (won); 1: withdrawn with a fee, lost; 2: withdrawn
    // without a fee; 3: withdrawn with a fee, the event withheld from the gateway.
    let delivered = [
        dispute_body("evt_d0w", "funds_withdrawn", &pay(0), &withdrawn(0, 1500)),
        dispute_body(
            "evt_d0r",
            "funds_reinstated",
            &pay(0),
            &format!(r#""amount_minor":{},"currency":"USD""#, amount(0)),
        ),
        dispute_body("evt_d0c", "closed", &pay(0), r#""status":"won""#),
        dispute_body("evt_d1w", "funds_withdrawn", &pay(1), &withdrawn(1, 1500)),
        dispute_body("evt_d1c", "closed", &pay(1), r#""status":"lost""#),
        dispute_body("evt_d2w", "funds_withdrawn", &pay(2), &withdrawn(2, 0)),
    ];
    for body in &delivered {
        let id = serde_json::from_str::<serde_json::Value>(body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let response = app.deliver(ACME, &id, body).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    let withheld = dispute_body("evt_d3w", "funds_withdrawn", &pay(3), &withdrawn(3, 1500));

    // The provider's report: the chargeback amounts exclude the fee, which is a line of its own.
    let mut lines = truth(&events);
    for i in 0..4 {
        lines.push(movement(&pay(i), "chargeback", amount(i), "USD", &now()));
    }
    for i in [0, 1, 3] {
        lines.push(movement(&pay(i), "dispute_fee", 1500, "USD", &now()));
    }
    lines.push(movement(
        &pay(0),
        "chargeback_reversal",
        amount(0),
        "USD",
        &now(),
    ));
    let report = write_report(&dir, &lines);
    let json = dir.join("out.json");
    let args = ["--report", json.to_str().unwrap()];

    let run = reconcile(&app, &dir, &report, &args).await;
    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert_eq!(
        (run.count("matched"), run.count("missing_in_ledger")),
        (5 + 3 + 2 + 1, 2),
        "{}",
        run.explain()
    );
    let json_report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let mut missing: Vec<(String, String)> = json_report["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["class"] == "missing_in_ledger")
        .map(|i| {
            (
                i["payment_id"].as_str().unwrap().to_owned(),
                i["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    missing.sort();
    assert_eq!(
        missing,
        [
            (pay(3), "chargeback".to_owned()),
            (pay(3), "dispute_fee".to_owned())
        ]
    );

    // Finance replays the withheld withdrawal; now every item matches.
    let response = app.deliver(ACME, "evt_d3w", &withheld).await;
    assert_eq!(response.status(), 200);
    let again = reconcile(&app, &dir, &report, &args).await;
    assert_eq!(again.code, Some(0), "{}", again.explain());
    assert_eq!(again.count("matched"), 5 + 4 + 3 + 1, "{}", again.explain());
    for class in [
        "held",
        "missing_in_ledger",
        "missing_at_provider",
        "amount_mismatch",
    ] {
        assert_eq!(again.count(class), 0, "{class}: {}", again.explain());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
