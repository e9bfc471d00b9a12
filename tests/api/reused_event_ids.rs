//! Issue 23: an event id used again after its idempotency record expired. A true late
//! redelivery (the same body) posts nothing; another body under the same id is a new event the
//! provider reports, so its money is held and listed for finance, never dropped.

use crate::support::{ACME, MERCHANT, TestApp, answer, spawn_app};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn canonical_capture(payment_id: &str, order_id: i64, amount: i64) -> String {
    format!(
        r#"{{"type":"payment.succeeded","data":{{"payment_id":"{payment_id}","order_id":{order_id},"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

fn canonical_refund(payment_id: &str, amount: i64) -> String {
    format!(
        r#"{{"type":"refund.succeeded","data":{{"payment_id":"{payment_id}","amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

/// (status, outcome, reason) of a delivery, with its ack.
async fn outcome_of(app: &TestApp, provider: &str, id: &str, body: &str) -> (u16, String, String) {
    let (status, _, ack) = answer(app.deliver(provider, id, body).await).await;
    assert!(status < 500, "{provider} {body:?} answered {status}: {ack}");
    if status != 200 {
        return (status, json(&ack)["error"].as_str().unwrap().into(), ack);
    }
    let ack = json(&ack);
    let text = |key: &str| ack[key].as_str().unwrap_or("-").to_owned();
    (status, text("outcome"), text("reason"))
}

/// The idempotency records of every callback expire, and the cleaner deletes them.
async fn expire_callback_records(app: &TestApp) {
    app.db
        .batch_execute(
            "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' \
             WHERE op = 'payment.callback'",
        )
        .await
        .unwrap();
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        &app.database_url,
    )
    .await
    .unwrap();
    callback_gateway::idempotency::cleanup::run_pass(&mut conn, 5000)
        .await
        .unwrap();
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
}

async fn balance(app: &TestApp, account: &str) -> i64 {
    app.count(&format!(
        "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries \
         WHERE merchant_id = {MERCHANT} AND account = '{account}'"
    ))
    .await
}

/// The reasons `/admin/attention` lists under `list` (held or rejected).
async fn attention(app: &TestApp, list: &str) -> Vec<String> {
    let response = app.admin_get("/admin/attention").await;
    assert_eq!(response.status(), 200);
    let attention: serde_json::Value = response.json().await.unwrap();
    attention[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["reason"].as_str().unwrap_or("-").to_owned())
        .collect()
}

#[tokio::test]
async fn a_capture_reusing_an_expired_event_id_is_held_and_listed_never_dropped() {
    let app = spawn_app().await;
    let first_order = app.create_order(MERCHANT, 1999, "USD").await;
    let second_order = app.create_order(MERCHANT, 1999, "USD").await;
    let original = canonical_capture("pay_1", first_order, 1999);
    let reused = canonical_capture("pay_2", second_order, 1999);
    assert_eq!(
        outcome_of(&app, ACME, "evt_1", &original).await,
        (200, "applied".into(), "-".into())
    );
    expire_callback_records(&app).await;

    // The same event id, another payment: its money is held, not dropped.
    let (status, replayed, first) = answer(app.deliver(ACME, "evt_1", &reused).await).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let ack = json(&first);
    assert_eq!(
        (ack["outcome"].as_str(), ack["reason"].as_str()),
        (Some("held"), Some("event_id_reused")),
        "{first}"
    );
    assert!(ack["transfer_id"].is_i64(), "{first}");
    assert_eq!(balance(&app, "unapplied_funds").await, -1999);
    assert_eq!(balance(&app, "merchant_payable").await, -1999);
    assert_eq!(balance(&app, "psp_clearing:acme").await, 3998);
    assert_eq!(app.order_status(second_order).await, "pending_payment");
    assert_eq!(attention(&app, "held").await, ["event_id_reused"]);
    // Its redelivery is its stored answer.
    let (status, replayed, again) = answer(app.deliver(ACME, "evt_1", &reused).await).await;
    assert_eq!((status, replayed, again), (200, true, first));

    // Each body again after every record expired: neither posts a second time.
    for body in [&reused, &original] {
        expire_callback_records(&app).await;
        let (status, outcome, _) = outcome_of(&app, ACME, "evt_1", body).await;
        assert_eq!((status, outcome.as_str()), (200, "ignored"), "{body}");
    }
    assert_eq!(app.count("SELECT count(*) FROM ledger_transfers").await, 2);
    assert_eq!(balance(&app, "unapplied_funds").await, -1999);
    assert_eq!(balance(&app, "psp_clearing:acme").await, 3998);
    assert_eq!(attention(&app, "held").await, ["event_id_reused"]);
}

#[tokio::test]
async fn a_refund_reusing_an_expired_event_id_is_rejected_and_listed_and_a_true_redelivery_is_not()
{
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 1999, "USD").await;
    outcome_of(
        &app,
        ACME,
        "evt_p",
        &canonical_capture("pay_1", order, 1999),
    )
    .await;
    let original = canonical_refund("pay_1", 500);
    assert_eq!(
        outcome_of(&app, ACME, "evt_r", &original).await,
        (200, "applied".into(), "-".into())
    );
    expire_callback_records(&app).await;

    assert_eq!(
        outcome_of(&app, ACME, "evt_r", &canonical_refund("pay_1", 700)).await,
        (200, "rejected".into(), "event_id_reused".into())
    );
    assert_eq!(attention(&app, "rejected").await, ["event_id_reused"]);
    expire_callback_records(&app).await;
    // The original refund, late: it was posted, and stays posted once.
    assert_eq!(
        outcome_of(&app, ACME, "evt_r", &original).await,
        (200, "ignored".into(), "already_applied".into())
    );
    assert_eq!(
        app.count("SELECT refunded_minor FROM payments WHERE payment_id = 'pay_1'")
            .await,
        500
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        1
    );
    assert_eq!(app.order_status(order).await, "partially_refunded");
}
