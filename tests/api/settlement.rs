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
async fn balances(app: &TestApp) -> BTreeMap<String, i64> {
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
fn at(books: &BTreeMap<String, i64>, account: &str) -> i64 {
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
