//! Settlement (issue 55): Stripe's payouts in the books. `payout.paid` moves the money from
//! `psp_clearing:stripe` to `bank:stripe:<currency>`, `payout.failed` moves it back when the
//! payout was booked, and each posts once in any order and under any concurrency.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::{MERCHANT, STRIPE, TestApp, answer, spawn_app_with};

fn payout(event: &str, kind: &str, payout_id: &str, amount: i64) -> String {
    let status = kind.trim_start_matches("payout.");
    format!(
        r#"{{"id":"{event}","object":"event","type":"{kind}","data":{{"object":{{"id":"{payout_id}","object":"payout","amount":{amount},"arrival_date":1764892800,"automatic":true,"currency":"eur","method":"standard","status":"{status}","type":"bank_account"}}}}}}"#
    )
}

async fn capture(app: &TestApp, amount: i64) {
    let order = app.create_order(MERCHANT, amount, "EUR").await;
    let paid = format!(
        r#"{{"id":"evt_pi_{order}","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_{order}","amount_received":{amount},"currency":"eur","metadata":{{"order_id":"{order}"}}}}}}}}"#
    );
    let (status, _, ack) =
        answer(app.deliver(STRIPE, &format!("evt_pi_{order}"), &paid).await).await;
    assert_eq!(status, 200, "{ack}");
}

/// The merchant's balances as `GET /admin/merchants/{id}/balances` answers them.
pub async fn balances(app: &TestApp) -> BTreeMap<String, i64> {
    let (status, _, body) = answer(
        app.admin_get(&format!("/admin/merchants/{MERCHANT}/balances"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    json["balances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                format!(
                    "{}/{}",
                    b["account"].as_str().unwrap(),
                    b["currency"].as_str().unwrap()
                ),
                b["balance_minor"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// An account's balance; 0 when the answer does not list it.
pub fn at(books: &BTreeMap<String, i64>, account: &str) -> i64 {
    books.get(account).copied().unwrap_or(0)
}

async fn deliver(app: &TestApp, event: &str, body: &str) -> Value {
    let (status, _, ack) = answer(app.deliver(STRIPE, event, body).await).await;
    assert_eq!(status, 200, "{event}: {ack}");
    serde_json::from_str(&ack).unwrap()
}

fn outcome(ack: &Value) -> (&str, Option<&str>) {
    (ack["outcome"].as_str().unwrap(), ack["reason"].as_str())
}

#[tokio::test]
async fn a_paid_payout_moves_clearing_to_the_bank_once_and_its_failure_moves_it_back() {
    let app = spawn_app_with("").await;
    capture(&app, 9000).await;
    capture(&app, 1000).await;

    let paid = payout("evt_po_paid", "payout.paid", "po_1", 9000);
    let ack = deliver(&app, "evt_po_paid", &paid).await;
    assert_eq!(outcome(&ack), ("applied", None), "{ack}");
    assert!(ack["transfer_id"].is_i64(), "{ack}");
    let books = balances(&app).await;
    assert_eq!(at(&books, "psp_clearing:stripe/EUR"), 1000, "{books:?}");
    assert_eq!(at(&books, "bank:stripe:EUR/EUR"), 9000, "{books:?}");

    // Stripe redelivers: the same answer, byte for byte, and nothing moves.
    let (first, _, first_ack) = answer(app.deliver(STRIPE, "evt_po_paid", &paid).await).await;
    let (_, replayed, again) = answer(app.deliver(STRIPE, "evt_po_paid", &paid).await).await;
    assert_eq!((first, replayed), (200, true));
    assert_eq!(first_ack, again);
    assert_eq!(balances(&app).await, books);

    // The bank sent it back: the money is in the Stripe balance again, exactly what was paid
    // out, whatever the failure's own body says.
    let failed = payout("evt_po_failed", "payout.failed", "po_1", 9001);
    let ack = deliver(&app, "evt_po_failed", &failed).await;
    assert_eq!(outcome(&ack), ("applied", None), "{ack}");
    let books = balances(&app).await;
    assert_eq!(at(&books, "psp_clearing:stripe/EUR"), 10000, "{books:?}");
    assert_eq!(at(&books, "bank:stripe:EUR/EUR"), 0, "{books:?}");

    // A second failure notice under another event id changes nothing.
    let again = payout("evt_po_failed_2", "payout.failed", "po_1", 9000);
    let ack = deliver(&app, "evt_po_failed_2", &again).await;
    assert_eq!(outcome(&ack), ("ignored", Some("already_applied")), "{ack}");
    assert_eq!(balances(&app).await, books);
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind LIKE 'payout%'")
            .await,
        2
    );
}

#[tokio::test]
async fn a_failure_that_arrives_before_its_payment_books_neither() {
    let app = spawn_app_with("").await;
    capture(&app, 5000).await;
    let failed = payout("evt_f", "payout.failed", "po_2", 5000);
    let ack = deliver(&app, "evt_f", &failed).await;
    assert_eq!(outcome(&ack), ("applied", None), "{ack}");
    assert!(ack["transfer_id"].is_null(), "{ack}");
    let paid = payout("evt_p", "payout.paid", "po_2", 5000);
    let ack = deliver(&app, "evt_p", &paid).await;
    assert_eq!(outcome(&ack), ("ignored", Some("payout_failed")), "{ack}");
    let books = balances(&app).await;
    assert_eq!(at(&books, "psp_clearing:stripe/EUR"), 5000, "{books:?}");
    assert!(!books.keys().any(|k| k.starts_with("bank:")), "{books:?}");
}

#[tokio::test]
async fn a_negative_payout_debits_the_bank_into_the_stripe_balance() {
    let app = spawn_app_with("").await;
    let paid = payout("evt_neg", "payout.paid", "po_neg", -700);
    let ack = deliver(&app, "evt_neg", &paid).await;
    assert_eq!(outcome(&ack), ("applied", None), "{ack}");
    let books = balances(&app).await;
    assert_eq!(at(&books, "bank:stripe:EUR/EUR"), -700, "{books:?}");
    assert_eq!(at(&books, "psp_clearing:stripe/EUR"), 700, "{books:?}");
}

#[tokio::test]
async fn a_payouts_paid_and_failed_events_at_once_leave_nothing_in_the_bank() {
    let app = spawn_app_with("").await;
    capture(&app, 80_000).await;
    let mut sent = Vec::new();
    for n in 0..20 {
        let payout_id = format!("po_race_{n}");
        let paid = payout(&format!("evt_rp_{n}"), "payout.paid", &payout_id, 4000);
        let failed = payout(&format!("evt_rf_{n}"), "payout.failed", &payout_id, 4000);
        sent.push((format!("evt_rp_{n}"), paid));
        sent.push((format!("evt_rf_{n}"), failed));
    }
    let answers = futures_util::future::join_all(
        sent.iter()
            .map(|(event, body)| async { answer(app.deliver(STRIPE, event, body).await).await }),
    )
    .await;
    for ((event, _), (status, _, ack)) in sent.iter().zip(&answers) {
        assert_eq!(*status, 200, "{ack}");
        // A failure is applied whether it came first (the payout is then never booked) or
        // second (it gives the payout back).
        if event.starts_with("evt_rf_") {
            let ack: Value = serde_json::from_str(ack).unwrap();
            assert_eq!(outcome(&ack), ("applied", None), "{ack}");
        }
    }
    // Whichever came first, each payout failed in the end: nothing is in the bank and every
    // cent is back at Stripe; no payout posted twice.
    let books = balances(&app).await;
    assert_eq!(at(&books, "bank:stripe:EUR/EUR"), 0, "{books:?}");
    assert_eq!(at(&books, "psp_clearing:stripe/EUR"), 80_000, "{books:?}");
    assert_eq!(
        app.count(
            "SELECT count(*) FROM (SELECT payment_id, kind FROM ledger_transfers \
             WHERE kind LIKE 'payout%' GROUP BY 1, 2 HAVING count(*) > 1) twice"
        )
        .await,
        0
    );
}

// ---------------------------------------------------------------------------------------
// `settle`: Stripe's itemized payout reconciliation report, and a bank statement
// ---------------------------------------------------------------------------------------

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The count of one state in the summary table.
    fn count(&self, state: &str) -> u64 {
        self.stdout
            .lines()
            .find_map(|line| {
                let mut parts = line.split_whitespace();
                (parts.next() == Some(state)).then(|| parts.next()?.parse().ok())?
            })
            .unwrap_or_else(|| panic!("no {state} row in:\n{}", self.explain()))
    }

    fn explain(&self) -> String {
        format!("exit {:?}\n{}\n{}", self.code, self.stdout, self.stderr)
    }
}

fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cg-settle-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn settle(app: &TestApp, dir: &std::path::Path, args: &[&str]) -> Run {
    let config = dir.join("gateway.toml");
    std::fs::write(&config, crate::support::base_config(&app.database_url)).unwrap();
    let output = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(&config)
        .arg("settle")
        .args(["--provider", STRIPE])
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

/// Stripe's columns as the report names them, in Stripe's order, with payment_intent_id asked
/// for (it is not a default column) and the optional UTC payout date.
const HEADER: &str = "automatic_payout_id,automatic_payout_effective_at,balance_transaction_id,created_utc,created,available_on_utc,available_on,currency,gross,fee,net,reporting_category,source_id,description,automatic_payout_effective_at_utc,payment_intent_id";

/// One report line: amounts in major units, as Stripe writes them.
fn line(
    payout: &str,
    txn: &str,
    category: &str,
    amounts: [&str; 3],
    source: &str,
    pi: &str,
) -> String {
    let [gross, fee, net] = amounts;
    let now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string();
    format!(
        "{payout},{now},{txn},{now},{now},{now},{now},eur,{gross},{fee},{net},{category},{source},,{now},{pi}"
    )
}

fn write(dir: &std::path::Path, name: &str, lines: &[String]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

/// A capture of `amount` under payment intent `pi`, delivered as Stripe sends it.
async fn capture_as(app: &TestApp, pi: &str, amount: i64) {
    let order = app.create_order(MERCHANT, amount, "EUR").await;
    let paid = format!(
        r#"{{"id":"evt_{pi}","type":"payment_intent.succeeded","data":{{"object":{{"id":"{pi}","amount_received":{amount},"currency":"eur","metadata":{{"order_id":"{order}"}}}}}}}}"#
    );
    deliver(app, &format!("evt_{pi}"), &paid).await;
}

async fn psp_fees(app: &TestApp) -> i64 {
    at(&balances(app).await, "psp_fees:stripe/EUR")
}

#[tokio::test]
async fn a_report_that_agrees_matches_books_its_fees_once_and_exits_0() {
    let app = spawn_app_with("").await;
    capture_as(&app, "pi_a", 10000).await;
    capture_as(&app, "pi_b", 5000).await;
    let refund = r#"{"id":"evt_rb","type":"charge.refunded","data":{"object":{"id":"ch_b","payment_intent":"pi_b","amount_refunded":2000,"currency":"eur"}}}"#;
    deliver(&app, "evt_rb", refund).await;
    deliver(
        &app,
        "evt_po1",
        &payout("evt_po1", "payout.paid", "po_1", 12505),
    )
    .await;
    let dir = scratch();
    let report = write(
        &dir,
        "report.csv",
        &[
            HEADER.into(),
            line(
                "po_1",
                "txn_a",
                "charge",
                ["100.00", "3.20", "96.80"],
                "ch_a",
                "pi_a",
            ),
            line(
                "po_1",
                "txn_b",
                "charge",
                ["50.00", "1.75", "48.25"],
                "ch_b",
                "pi_b",
            ),
            line(
                "po_1",
                "txn_rb",
                "refund",
                ["-20.00", "0.00", "-20.00"],
                "re_b",
                "pi_b",
            ),
        ],
    );
    let run = settle(&app, &dir, &[report.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(0), "{}", run.explain());
    // pi_a and pi_b with a fee each (booked now), pi_b's refund and the payout matched.
    assert_eq!(run.count("fee_booked"), 2, "{}", run.explain());
    assert_eq!(run.count("matched"), 2, "{}", run.explain());
    assert_eq!(psp_fees(&app).await, 495);
    let books = balances(&app).await;
    // 15000 captured, 2000 refunded, 495 in fees, 12505 paid out: nothing left at Stripe.
    assert_eq!(at(&books, "psp_clearing:stripe/EUR"), 0, "{books:?}");

    // Settled again: the fees are in the books, nothing is booked twice.
    let again = settle(&app, &dir, &[report.to_str().unwrap()]).await;
    assert_eq!(again.code, Some(0), "{}", again.explain());
    assert_eq!(again.count("matched"), 4, "{}", again.explain());
    assert_eq!(again.count("fee_booked"), 0, "{}", again.explain());
    assert_eq!(psp_fees(&app).await, 495);

    // Each run is on record: who settled which file, what it booked and what it found.
    let runs = settlement_runs(&app).await;
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        std::fs::read(&report).unwrap(),
    ));
    let seen: Vec<_> = runs
        .iter()
        .map(|r| {
            (
                r["target"].as_str().unwrap(),
                r["outcome"].as_str().unwrap(),
                r["changes"]["fees_booked"].as_u64().unwrap(),
                r["changes"]["lines"].as_u64().unwrap(),
                r["changes"]["states"]["matched"].as_u64().unwrap(),
                r["changes"]["report_sha256"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("provider:stripe", "settled", 0, 3, 4, digest.as_str()),
            ("provider:stripe", "settled", 2, 3, 2, digest.as_str()),
        ],
        "newest first: {runs:?}"
    );
    assert!(
        runs.iter()
            .all(|r| r["actor"].as_str().unwrap().starts_with("cli:")),
        "{runs:?}"
    );
}

/// The audit rows of `settle`'s runs, newest first, as `GET /admin/audit` lists them.
async fn settlement_runs(app: &TestApp) -> Vec<Value> {
    let (status, _, body) = answer(app.admin_get("/admin/audit?action=settlement.run").await).await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    page["entries"].as_array().unwrap().clone()
}

#[tokio::test]
async fn each_difference_is_named_with_its_state_and_the_run_exits_1() {
    let app = spawn_app_with("").await;
    capture_as(&app, "pi_a", 10000).await;
    capture_as(&app, "pi_c", 3000).await;
    deliver(
        &app,
        "evt_po1",
        &payout("evt_po1", "payout.paid", "po_1", 9680),
    )
    .await;
    // Stripe paid 2900 where its own lines say 3000.
    deliver(
        &app,
        "evt_po2",
        &payout("evt_po2", "payout.paid", "po_2", 2900),
    )
    .await;
    // A payout the books hold that this report lacks.
    deliver(
        &app,
        "evt_po9",
        &payout("evt_po9", "payout.paid", "po_9", 1),
    )
    .await;
    let dir = scratch();
    let report = write(
        &dir,
        "report.csv",
        &[
            HEADER.into(),
            line(
                "po_1",
                "txn_a",
                "charge",
                ["100.00", "3.20", "96.80"],
                "ch_a",
                "pi_a",
            ),
            // The books captured 3000 of pi_c; the report says 3100.
            line(
                "po_2",
                "txn_c",
                "charge",
                ["31.00", "1.00", "30.00"],
                "ch_c",
                "pi_c",
            ),
            // A payment the books never saw, in a payout they never saw.
            line(
                "po_3",
                "txn_d",
                "charge",
                ["40.00", "1.00", "39.00"],
                "ch_d",
                "pi_d",
            ),
            // Stripe's own line for that payout: the report's word is not the books'.
            line(
                "po_3",
                "txn_po3",
                "payout",
                ["-39.00", "0.00", "-39.00"],
                "po_3",
                "",
            ),
        ],
    );
    let bank = write(
        &dir,
        "bank.csv",
        &[
            "date,amount,currency,reference".into(),
            "2026-12-04,96.80,EUR,STRIPE PAYOUT po_1".into(),
            "2026-12-04,39.00,EUR,STRIPE TRANSFER".into(),
            "2026-12-04,7.77,EUR,UNKNOWN".into(),
        ],
    );
    let since = (chrono::Utc::now() - chrono::TimeDelta::hours(1)).to_rfc3339();
    let run = settle(
        &app,
        &dir,
        &[
            report.to_str().unwrap(),
            "--bank",
            bank.to_str().unwrap(),
            "--since",
            &since,
        ],
    )
    .await;
    assert_eq!(run.code, Some(1), "{}", run.explain());
    let named = |state: &str, id: &str| {
        run.stdout
            .lines()
            .any(|l| l.starts_with(state) && l.split_whitespace().any(|w| w == id))
    };
    assert!(named("amount_mismatch", "pi_c"), "{}", run.explain());
    assert!(named("payout_unbalanced", "po_2"), "{}", run.explain());
    assert!(named("missing_in_ledger", "pi_d"), "{}", run.explain());
    assert!(named("missing_in_ledger", "po_3"), "{}", run.explain());
    assert!(named("missing_in_report", "po_9"), "{}", run.explain());
    assert!(named("payout_not_in_bank", "po_2"), "{}", run.explain());
    assert!(named("bank_unmatched", "bank:UNKNOWN"), "{}", run.explain());
    // po_1 by its id in the reference, po_3 by its amount: both in the bank.
    assert_eq!(run.count("bank_unmatched"), 1, "{}", run.explain());
    let runs = settlement_runs(&app).await;
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["outcome"], "differs", "{runs:?}");
    assert_eq!(
        runs[0]["changes"]["states"]["bank_unmatched"], 1,
        "{runs:?}"
    );
    assert!(
        runs[0]["changes"]["bank_file"]
            .as_str()
            .unwrap()
            .ends_with("bank.csv"),
        "{runs:?}"
    );
    assert_eq!(run.count("payout_not_in_bank"), 1, "{}", run.explain());
    // The fees are Stripe's whatever else differs: booked.
    assert_eq!(psp_fees(&app).await, 520);

    // Finance reads each payout as this run found it.
    let (status, _, body) = answer(app.admin_get("/admin/settlements?provider=stripe").await).await;
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let payout = |id: &str| {
        listed["payouts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["payout_id"] == id)
            .unwrap_or_else(|| panic!("{id} not in {listed}"))
            .clone()
    };
    let po_1 = payout("po_1");
    assert_eq!(
        (
            po_1["state"].as_str(),
            po_1["bank"].as_str(),
            po_1["report_minor"].as_str()
        ),
        (Some("matched"), Some("matched"), Some("9680")),
        "{po_1}"
    );
    let po_2 = payout("po_2");
    assert_eq!(
        (
            po_2["state"].as_str(),
            po_2["ledger_minor"].as_str(),
            po_2["bank"].as_str()
        ),
        (
            Some("payout_unbalanced"),
            Some("2900"),
            Some("payout_not_in_bank")
        ),
        "{po_2}"
    );
    // Its line that differs is named with it.
    assert_eq!(po_2["differing_items"], 1, "{po_2}");
    assert_eq!(po_2["differences"][0]["id"], "pi_c", "{po_2}");
    assert_eq!(po_2["differences"][0]["state"], "amount_mismatch", "{po_2}");
    assert_eq!(payout("po_9")["state"], "missing_in_report");
    let (status, _, body) = answer(
        app.admin_get("/admin/settlements?state=payout_unbalanced")
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let only: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(only["payouts"].as_array().map(Vec::len), Some(1), "{only}");
    let (status, _, body) = answer(app.admin_get("/admin/settlements?state=lost").await).await;
    assert_eq!(status, 400, "{body}");

    // And on the console.
    let client = crate::console::no_redirects();
    let cookie = crate::console::session_cookie(&app, &client).await;
    let page = client
        .get(app.url("/console/settlements"))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    for text in [
        "po_2",
        "payout_unbalanced",
        "pi_c",
        "amount_mismatch",
        "payout_not_in_bank",
    ] {
        assert!(html.contains(text), "{text} not on the page");
    }
}

#[tokio::test]
async fn a_bad_report_names_its_file_line_and_column_and_books_nothing() {
    let app = spawn_app_with("").await;
    capture_as(&app, "pi_a", 10000).await;
    let dir = scratch();
    let good = line(
        "po_1",
        "txn_a",
        "charge",
        ["100.00", "3.20", "96.80"],
        "ch_a",
        "pi_a",
    );
    // A description of 100 KB: a damaged file, refused before it fills memory.
    let long = line(
        "po_1",
        "txn_c",
        "charge",
        ["1.00", "0.00", "1.00"],
        &"x".repeat(100_000),
        "pi_c",
    );
    for (name, lines, expected) in [
        (
            "long.csv",
            vec![HEADER.to_owned(), good.clone(), long],
            "long.csv:3: a record longer than 65536 bytes",
        ),
        (
            "amount.csv",
            vec![
                HEADER.to_owned(),
                good.clone(),
                line(
                    "po_1",
                    "txn_b",
                    "charge",
                    ["\"12,50\"", "0.00", "12.50"],
                    "ch_b",
                    "pi_b",
                ),
            ],
            "amount.csv:3: column gross:",
        ),
        (
            "decimals.csv",
            vec![
                HEADER.to_owned(),
                good.clone(),
                line(
                    "po_1",
                    "txn_b",
                    "charge",
                    ["12.505", "0.00", "12.505"],
                    "ch_b",
                    "pi_b",
                ),
            ],
            "decimals.csv:3: column gross:",
        ),
        (
            "column.csv",
            vec![
                HEADER.replace(",payment_intent_id", ""),
                good.rsplit_once(',').unwrap().0.to_owned(),
            ],
            "column.csv:1: column payment_intent_id: missing",
        ),
        (
            "adyen.csv",
            vec!["Company Account,Merchant Account,Psp Reference,Merchant Reference,Type".into()],
            "adyen.csv:1: Adyen's settlement details report, but the provider's payload is stripe",
        ),
        (
            "unknown.csv",
            vec!["a,b,c".into(), "1,2,3".into()],
            "unknown.csv:1: unknown format",
        ),
    ] {
        let path = write(&dir, name, &lines);
        let run = settle(&app, &dir, &[path.to_str().unwrap()]).await;
        assert_eq!(run.code, Some(2), "{name}: {}", run.explain());
        assert!(run.stderr.contains(expected), "{name}: {}", run.explain());
        assert_eq!(psp_fees(&app).await, 0, "{name}: a fee was booked");
    }
    assert_eq!(
        settlement_runs(&app).await,
        Vec::<Value>::new(),
        "a refused file is no run"
    );
}

// ---------------------------------------------------------------------------------------
// `settle`: Adyen's settlement details report
// ---------------------------------------------------------------------------------------

/// Adyen's classic column layout (its sample `settlement_detail_report_batch_238.csv`), with
/// `Batch Number`.
const ADYEN_HEADER: &str = "Company Account,Merchant Account,Psp Reference,Merchant Reference,Payment Method,Creation Date,TimeZone,Type,Modification Reference,Gross Currency,Gross Debit (GC),Gross Credit (GC),Exchange Rate,Net Currency,Net Debit (NC),Net Credit (NC),Commission (NC),Markup (NC),Scheme Fees (NC),Interchange (NC),Payment Method Variant,Modification Merchant Reference,Batch Number";

/// One line: `gross` and `net` as (debit, credit), the four costs, in major units.
fn adyen_line(
    psp: &str,
    kind: &str,
    modification: &str,
    gross: (&str, &str),
    net: (&str, &str),
    costs: [&str; 4],
) -> String {
    let now = chrono::Utc::now().format("%Y-%m-%d %H:%M:%S");
    let gross_currency = if gross == ("", "") { "" } else { "EUR" };
    let [commission, markup, scheme, interchange] = costs;
    format!(
        "TestCompany,TestMerchant,{psp},order-1,visa,{now},CET,{kind},{modification},{gross_currency},{},{},1,EUR,{},{},{commission},{markup},{scheme},{interchange},visa,,238",
        gross.0, gross.1, net.0, net.1
    )
}

/// Adyen's capture of `amount` (payment PSP1, for a new order) and its refund PSPR1 of
/// `refunded`, delivered as Adyen sends them.
async fn adyen_capture_and_refund(
    app: &TestApp,
    amount: i64,
    refunded: i64,
    currency: &'static str,
) {
    use crate::support::ADYEN;
    use crate::support::payloads::{Kind, payload};
    let order = app.create_order(MERCHANT, amount, currency).await;
    let refund = Kind::Refund {
        amount: refunded,
        currency,
        refund_id: "PSPR1".into(),
    };
    let capture = Kind::Capture {
        order: Some(order),
        amount,
        currency,
    };
    for event in [
        payload(ADYEN, "c", "PSP1", &capture),
        payload(ADYEN, "r", "PSP1", &refund),
    ] {
        let (status, _, ack) = answer(app.deliver(ADYEN, &event.event_id, &event.body).await).await;
        assert_eq!(status, 200, "{ack}");
    }
}

async fn settle_as(app: &TestApp, dir: &std::path::Path, provider: &str, args: &[&str]) -> Run {
    let config = dir.join("gateway.toml");
    std::fs::write(
        &config,
        crate::support::config_with(&app.database_url, &crate::support::all_providers("")),
    )
    .unwrap();
    let output = tokio::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("--config")
        .arg(&config)
        .arg("settle")
        .args(["--provider", provider])
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

#[tokio::test]
async fn an_adyen_batch_matches_its_payments_books_its_costs_and_checks_its_payout() {
    use crate::support::ADYEN;
    let app = spawn_app_with(&crate::support::all_providers("")).await;
    adyen_capture_and_refund(&app, 3145, 1000, "EUR").await;
    let dir = scratch();
    let lines = |payout: &str| {
        vec![
            ADYEN_HEADER.to_owned(),
            adyen_line(
                "PSP1",
                "Settled",
                "PSP1",
                ("", "31.45"),
                ("", "31.15"),
                ["", "0.05", "0.09", "0.16"],
            ),
            adyen_line(
                "PSP1",
                "Refunded",
                "PSPR1",
                ("10.00", ""),
                ("10.00", ""),
                ["", "", "", ""],
            ),
            adyen_line(
                "",
                "Fee",
                "Transaction Fees December 04 2026",
                ("", ""),
                ("1.00", ""),
                ["", "", "", ""],
            ),
            adyen_line(
                "",
                "MerchantPayout",
                "\"TX1 batch 238, TestCompany\"",
                ("", ""),
                (payout, ""),
                ["", "", "", ""],
            ),
        ]
    };
    // 31.15 - 10.00 - 1.00: the batch pays 20.15 out.
    let report = write(
        &dir,
        "settlement_detail_report_batch_238.csv",
        &lines("20.15"),
    );
    let bank = write(
        &dir,
        "bank.csv",
        &[
            "date,amount,currency,reference".into(),
            "2026-12-04,20.15,EUR,ADYEN batch 238".into(),
        ],
    );
    let run = settle_as(
        &app,
        &dir,
        ADYEN,
        &[report.to_str().unwrap(), "--bank", bank.to_str().unwrap()],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.explain());
    // The capture (its 0.30 of costs booked), the refund, the payout, its bank line.
    assert_eq!(run.count("fee_booked"), 1, "{}", run.explain());
    assert_eq!(run.count("matched"), 3, "{}", run.explain());
    let books = balances(&app).await;
    assert_eq!(at(&books, "psp_fees:adyen/EUR"), 130, "{books:?}");

    // The batch states a payout its lines do not add up to.
    let wrong = write(&dir, "wrong.csv", &lines("21.15"));
    let run = settle_as(&app, &dir, ADYEN, &[wrong.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert_eq!(run.count("payout_unbalanced"), 1, "{}", run.explain());
    assert_eq!(run.count("fee_booked"), 0, "{}", run.explain());
    assert_eq!(at(&balances(&app).await, "psp_fees:adyen/EUR"), 130);

    // A Stripe report given for Adyen books nothing.
    let stripe = write(&dir, "stripe.csv", &[HEADER.to_owned()]);
    let run = settle_as(&app, &dir, ADYEN, &[stripe.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(2), "{}", run.explain());
    assert!(
        run.stderr.contains(
            "Stripe's itemized payout reconciliation report, but the provider's payload is adyen"
        ),
        "{}",
        run.explain()
    );
}

#[tokio::test]
async fn an_adyen_line_settled_in_another_currency_books_its_conversion_once() {
    use crate::support::ADYEN;
    use crate::support::payloads::{Kind, payload};
    let app = spawn_app_with(&crate::support::all_providers("")).await;
    adyen_capture_and_refund(&app, 10000, 2000, "USD").await;
    // Paid in USD, settled in EUR: 100.00 USD became 92.00 EUR, less 0.50 of commission;
    // the refund of 20.00 USD cost 18.40 EUR. The batch pays 91.50 - 18.40 = 73.10 out.
    let in_usd = |line: String| line.replacen(",EUR,", ",USD,", 1);
    let dir = scratch();
    let report = write(
        &dir,
        "settlement_detail_report_batch_238.csv",
        &[
            ADYEN_HEADER.to_owned(),
            in_usd(adyen_line(
                "PSP1",
                "Settled",
                "PSP1",
                ("", "100.00"),
                ("", "91.50"),
                ["0.50", "", "", ""],
            )),
            in_usd(adyen_line(
                "PSP1",
                "Refunded",
                "PSPR1",
                ("20.00", ""),
                ("18.40", ""),
                ["", "", "", ""],
            )),
            adyen_line(
                "",
                "MerchantPayout",
                "\"TX1 batch 238, TestCompany\"",
                ("", ""),
                ("73.10", ""),
                ["", "", "", ""],
            ),
        ],
    );
    let run = settle_as(&app, &dir, ADYEN, &[report.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(0), "{}", run.explain());
    assert!(
        run.stdout.contains("2 conversions booked now"),
        "{}",
        run.explain()
    );
    let books = balances(&app).await;
    // Nothing left in USD at Adyen; in EUR, what the batch pays out.
    assert_eq!(at(&books, "psp_clearing:adyen/USD"), 0, "{books:?}");
    assert_eq!(at(&books, "psp_clearing:adyen/EUR"), 7310, "{books:?}");
    // What Adyen converted: 80.00 USD into 73.60 EUR.
    assert_eq!(at(&books, "fx:adyen/USD"), 8000, "{books:?}");
    assert_eq!(at(&books, "fx:adyen/EUR"), -7360, "{books:?}");
    assert_eq!(at(&books, "psp_fees:adyen/EUR"), 50, "{books:?}");

    // Settled again: nothing is booked twice.
    let again = settle_as(&app, &dir, ADYEN, &[report.to_str().unwrap()]).await;
    assert_eq!(again.code, Some(0), "{}", again.explain());
    assert!(
        again.stdout.contains("0 conversions booked now"),
        "{}",
        again.explain()
    );
    assert_eq!(balances(&app).await, books);

    // 1 JPY became 0.00 EUR: the yen go to fx:adyen and nothing comes back (no zero entry).
    let order = app.create_order(MERCHANT, 1, "JPY").await;
    let tiny = payload(
        ADYEN,
        "c2",
        "PSP2",
        &Kind::Capture {
            order: Some(order),
            amount: 1,
            currency: "JPY",
        },
    );
    let (status, _, ack) = answer(app.deliver(ADYEN, &tiny.event_id, &tiny.body).await).await;
    assert_eq!(status, 200, "{ack}");
    let report = write(
        &dir,
        "settlement_detail_report_batch_239.csv",
        &[
            ADYEN_HEADER.to_owned(),
            adyen_line(
                "PSP2",
                "Settled",
                "PSP2",
                ("", "1"),
                ("", "0.00"),
                ["", "", "", ""],
            )
            .replacen(",EUR,", ",JPY,", 1)
            .replace(",238", ",239"),
            adyen_line(
                "",
                "MerchantPayout",
                "\"TX2 batch 239, TestCompany\"",
                ("", ""),
                ("0.00", ""),
                ["", "", "", ""],
            )
            .replace(",238", ",239"),
        ],
    );
    let run = settle_as(&app, &dir, ADYEN, &[report.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(0), "{}", run.explain());
    let books = balances(&app).await;
    assert_eq!(at(&books, "psp_clearing:adyen/JPY"), 0, "{books:?}");
    assert_eq!(at(&books, "fx:adyen/JPY"), 1, "{books:?}");
    assert_eq!(at(&books, "psp_clearing:adyen/EUR"), 7310, "{books:?}");
}

// ---------------------------------------------------------------------------------------
// `settle`: PayPal's settlement report (STL)
// ---------------------------------------------------------------------------------------

/// An `SB` row: amounts in hundredths, unsigned, each with its direction.
fn stl_row(
    id: &str,
    reference: &str,
    code: &str,
    gross: (&str, &str),
    fee: (&str, &str),
) -> String {
    format!(
        r#""SB","{id}","","{reference}","{}","{code}","2026/12/04 10:00:00 -0800","2026/12/04 10:00:05 -0800","{}","{}","USD","{}","{}","USD","","""#,
        if reference.is_empty() { "" } else { "TXN" },
        gross.0,
        gross.1,
        fee.0,
        fee.1
    )
}

#[tokio::test]
async fn a_paypal_settlement_report_matches_its_payments_books_its_fees_and_finds_its_withdrawal_in_the_bank()
 {
    use crate::support::PAYPAL;
    use crate::support::payloads::{Kind, payload};
    let app = spawn_app_with(&crate::support::all_providers("")).await;
    let order = app.create_order(MERCHANT, 1000, "USD").await;
    for event in [
        payload(
            PAYPAL,
            "c",
            "CAP1",
            &Kind::Capture {
                order: Some(order),
                amount: 1000,
                currency: "USD",
            },
        ),
        payload(
            PAYPAL,
            "r",
            "CAP1",
            &Kind::Refund {
                amount: 250,
                currency: "USD",
                refund_id: "RF1".into(),
            },
        ),
    ] {
        let (status, _, ack) =
            answer(app.deliver(PAYPAL, &event.event_id, &event.body).await).await;
        assert_eq!(status, 200, "{ack}");
    }
    let dir = scratch();
    let report = write(
        &dir,
        "STL-20261204.01.009.CSV",
        &[
            r#""RH",2026/12/05 01:00:00 -0800,"A","MERCHANT1",009"#.into(),
            r#""FH",01"#.into(),
            r#""SH",2026/12/04 00:00:00 -0800,2026/12/04 23:59:59 -0800,"MERCHANT1","""#.into(),
            // Older files write "Transaction  Debit or Credit" with two spaces.
            r#""CH","Transaction ID","Invoice ID","PayPal Reference ID","PayPal Reference ID Type","Transaction Event Code","Transaction Initiation Date","Transaction Completion Date","Transaction  Debit or Credit","Gross Transaction Amount","Gross Transaction Currency","Fee Debit or Credit","Fee Amount","Fee Currency","Custom Field","Consumer ID""#.into(),
            stl_row("CAP1", "", "T0006", ("CR", "1000"), ("DR", "59")),
            stl_row("RF1", "CAP1", "T1107", ("DR", "250"), ("CR", "7")),
            // 1000 - 59 - 250 + 7 = 698 withdrawn to the bank.
            stl_row("WD1", "", "T0400", ("DR", "698"), ("", "")),
            r#""SF","USD","CR",1000,"DR",948,"DR",52"#.into(),
            r#""SC",3"#.into(),
            r#""RF","USD","CR",1000,"DR",948,"DR",52"#.into(),
            r#""RC",3"#.into(),
            r#""FF",3"#.into(),
        ],
    );
    let bank = write(
        &dir,
        "bank.csv",
        &[
            "date,amount,currency,reference".into(),
            "2026-12-05,6.98,USD,PAYPAL WD1".into(),
        ],
    );
    let run = settle_as(
        &app,
        &dir,
        PAYPAL,
        &[report.to_str().unwrap(), "--bank", bank.to_str().unwrap()],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.explain());
    // The capture's 0.59 and the refund's 0.07 given back: booked, on two items.
    assert_eq!(run.count("fee_booked"), 2, "{}", run.explain());
    // The withdrawal and its bank line.
    assert_eq!(run.count("matched"), 2, "{}", run.explain());
    assert_eq!(at(&balances(&app).await, "psp_fees:paypal/USD"), 52);

    // A refund the books never saw is named, and nothing is booked twice.
    let unknown = write(
        &dir,
        "STL-20261204.02.009.CSV",
        &[
            r#""RH",2026/12/05 01:00:00 -0800,"A","MERCHANT1",009"#.into(),
            r#""CH","Transaction ID","Invoice ID","PayPal Reference ID","PayPal Reference ID Type","Transaction Event Code","Transaction Initiation Date","Transaction Completion Date","Transaction Debit or Credit","Gross Transaction Amount","Gross Transaction Currency","Fee Debit or Credit","Fee Amount","Fee Currency","Custom Field","Consumer ID""#.into(),
            stl_row("CAP1", "", "T0006", ("CR", "1000"), ("DR", "59")),
            stl_row("RF2", "CAP9", "T1107", ("DR", "100"), ("", "")),
        ],
    );
    let run = settle_as(&app, &dir, PAYPAL, &[unknown.to_str().unwrap()]).await;
    assert_eq!(run.code, Some(1), "{}", run.explain());
    assert_eq!(run.count("missing_in_ledger"), 1, "{}", run.explain());
    assert_eq!(run.count("fee_booked"), 0, "{}", run.explain());
    assert_eq!(at(&balances(&app).await, "psp_fees:paypal/USD"), 52);
}
