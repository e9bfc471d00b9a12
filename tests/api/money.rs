//! Every verified event ends in a stored answer, and every cent a provider reports moving is
//! in the ledger: applied, or held in unapplied funds. Bodies are modelled on real Stripe
//! events (string metadata, `payment_intent: null` on legacy charges, nested objects,
//! `previous_attributes`, non-ASCII text), written for these tests.

use crate::support::{ACME, MERCHANT, STRIPE, TestApp, answer, spawn_app};

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Delivers and returns (status, outcome, reason) of the ack, after checking a redelivery
/// gets the byte-identical answer.
async fn deliver(
    app: &TestApp,
    provider: &str,
    event_id: &str,
    body: &str,
) -> (u16, String, String) {
    let (status, _, first) = answer(app.deliver(provider, event_id, body).await).await;
    let (again, replayed, second) = answer(app.deliver(provider, event_id, body).await).await;
    assert_eq!((again, replayed, &second), (status, true, &first), "{body}");
    let ack = json(&first);
    let text = |key: &str| ack[key].as_str().unwrap_or("-").to_owned();
    (status, text("outcome"), text("reason"))
}

fn stripe_event(id: &str, kind: &str, object: &str) -> String {
    format!(
        r#"{{
  "id": "{id}",
  "object": "event",
  "api_version": "2025-04-30.basil",
  "created": 1748000000,
  "data": {{
    "object": {object},
    "previous_attributes": {{ "metadata": {{ "order_id": null }} }}
  }},
  "livemode": false,
  "pending_webhooks": 1,
  "request": {{ "id": null, "idempotency_key": "c1f2e3d4-aaaa-bbbb-cccc-0123456789ab" }},
  "type": "{kind}"
}}"#
    )
}

fn payment_intent(id: &str, amount: i64, order: &str) -> String {
    format!(
        r#"{{ "id": "{id}", "object": "payment_intent", "amount": {amount}, "amount_received": {amount},
   "currency": "usd", "description": "1 × Käsekuchen für Zoë", "metadata": {{ "order_id": "{order}", "cart": "ä" }},
   "status": "succeeded", "last_payment_error": null,
   "payment_method_options": {{ "card": {{ "request_three_d_secure": "automatic" }} }} }}"#
    )
}

fn charge(id: &str, intent: &str, refunded: i64) -> String {
    format!(
        r#"{{ "id": "{id}", "object": "charge", "amount": 5000, "amount_refunded": {refunded},
   "currency": "usd", "payment_intent": {intent}, "refunded": true, "metadata": {{ "order_id": "1" }},
   "billing_details": {{ "address": {{ "city": null }} }} }}"#
    )
}

#[tokio::test]
async fn every_real_stripe_shape_gets_a_2xx_the_handled_ones_move_the_books() {
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 5000, "USD").await;
    let cases = [
        (
            stripe_event(
                "evt_cc",
                "customer.created",
                r#"{ "id": "cus_1", "object": "customer", "name": "Zoë", "metadata": {} }"#,
            ),
            "ignored",
            "unsupported_event_type",
        ),
        (
            stripe_event(
                "evt_cu",
                "customer.updated",
                r#"{ "id": "cus_1", "object": "customer", "email": null }"#,
            ),
            "ignored",
            "unsupported_event_type",
        ),
        (
            stripe_event(
                "evt_chs",
                "charge.succeeded",
                &charge("ch_1", r#""pi_1""#, 0),
            ),
            "ignored",
            "unsupported_event_type",
        ),
        (
            stripe_event("evt_chf", "charge.failed", &charge("ch_2", r#""pi_2""#, 0)),
            "ignored",
            "unsupported_event_type",
        ),
        (
            stripe_event(
                "evt_cru",
                "charge.refund.updated",
                r#"{ "id": "re_1", "object": "refund", "metadata": { "order_id": "6735" } }"#,
            ),
            "ignored",
            "unsupported_event_type",
        ),
        (
            stripe_event(
                "evt_inv",
                "invoice.created",
                r#"{ "id": "in_1", "lines": { "data": [ { "description": "1 × myproduct (at $15.00 / month)" } ] } }"#,
            ),
            "ignored",
            "unsupported_event_type",
        ),
        (
            stripe_event(
                "evt_pi",
                "payment_intent.succeeded",
                &payment_intent("pi_1", 5000, &order.to_string()),
            ),
            "applied",
            "-",
        ),
        (
            stripe_event(
                "evt_legacy",
                "charge.refunded",
                &charge("ch_3", "null", 100),
            ),
            "ignored",
            "no_payment_intent",
        ),
        (
            stripe_event(
                "evt_ref",
                "charge.refunded",
                &charge("ch_1", r#""pi_1""#, 1200),
            ),
            "applied",
            "-",
        ),
        (
            stripe_event(
                "evt_pf",
                "payment_intent.payment_failed",
                r#"{ "id": "pi_9", "object": "payment_intent", "amount_received": 0, "currency": "usd", "metadata": {}, "last_payment_error": { "message": "Your card was declined. See `https://stripe.com/docs`." } }"#,
            ),
            "rejected",
            "unknown_order",
        ),
        (
            stripe_event(
                "evt_orphan",
                "payment_intent.succeeded",
                &payment_intent("pi_8", 700, "not-a-number"),
            ),
            "held",
            "unknown_order",
        ),
    ];
    for (body, outcome, reason) in cases {
        let (status, got_outcome, got_reason) = deliver(&app, STRIPE, "", &body).await;
        assert_eq!(
            (status, got_outcome.as_str(), got_reason.as_str()),
            (200, outcome, reason),
            "{body}"
        );
    }
    assert_eq!(app.order_status(order).await, "partially_refunded");
    let balances = app
        .admin_get(&format!("/admin/merchants/{MERCHANT}/balances"))
        .await
        .text()
        .await
        .unwrap();
    let balances = json(&balances);
    let of = |account: &str| {
        balances["balances"]
            .as_array()
            .unwrap()
            .iter()
            .find(|b| b["account"] == account)
            .map(|b| b["balance_minor"].as_i64().unwrap())
    };
    assert_eq!(of("psp_clearing:stripe"), Some(5000 - 1200 + 700));
    assert_eq!(of("merchant_payable"), Some(-(5000 - 1200)));
    assert_eq!(of("unapplied_funds"), Some(-700));
}

fn canonical_refund(id: &str, payment: &str, amount: &str, refund_id: Option<&str>) -> String {
    let refund_id = refund_id
        .map(|r| format!(r#","refund_id":"{r}""#))
        .unwrap_or_default();
    format!(
        r#"{{"id":"{id}","type":"refund.succeeded","data":{{"payment_id":"{payment}","amount_minor":{amount},"currency":"USD"{refund_id}}}}}"#
    )
}

fn canonical_capture(id: &str, payment: &str, order: i64, amount: i64) -> String {
    format!(
        r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"{payment}","order_id":{order},"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

#[tokio::test]
async fn a_refund_of_a_held_payment_applies_against_unapplied_funds_and_changes_no_order() {
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 5000, "USD").await;
    let held = deliver(
        &app,
        ACME,
        "e1",
        &canonical_capture("e1", "pay_h", order, 4000),
    )
    .await;
    assert_eq!(held, (200, "held".into(), "amount_mismatch".into()));
    let refund = deliver(
        &app,
        ACME,
        "e2",
        &canonical_refund("e2", "pay_h", "1500", None),
    )
    .await;
    assert_eq!(
        refund,
        (200, "applied".into(), "-".into()),
        "a held payment's refund is not out of order"
    );
    assert_eq!(app.order_status(order).await, "pending_payment");
    assert_eq!(
        app.count("SELECT (-sum(amount_minor))::bigint FROM ledger_entries WHERE account = 'unapplied_funds'").await,
        4000 - 1500
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_entries WHERE account = 'merchant_payable'")
            .await,
        0
    );
    // The customer can still pay the order itself.
    let paid = deliver(
        &app,
        ACME,
        "e3",
        &canonical_capture("e3", "pay_ok", order, 5000),
    )
    .await;
    assert_eq!(paid, (200, "applied".into(), "-".into()));
}

#[tokio::test]
async fn a_huge_refund_after_a_small_one_is_a_stored_rejection_not_a_poison_503() {
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 5000, "USD").await;
    deliver(
        &app,
        ACME,
        "e1",
        &canonical_capture("e1", "pay_1", order, 5000),
    )
    .await;
    deliver(
        &app,
        ACME,
        "e2",
        &canonical_refund("e2", "pay_1", "100", None),
    )
    .await;
    let huge = deliver(
        &app,
        ACME,
        "e3",
        &canonical_refund("e3", "pay_1", "9223372036854775807", None),
    )
    .await;
    assert_eq!(huge, (200, "rejected".into(), "amount_out_of_range".into()));
    let too_much = deliver(
        &app,
        ACME,
        "e4",
        &canonical_refund("e4", "pay_1", "4901", None),
    )
    .await;
    assert_eq!(
        too_much,
        (200, "rejected".into(), "refund_exceeds_captured".into())
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_refund_id_posts_once_whatever_event_carries_it() {
    let app = spawn_app().await;
    let order = app.create_order(MERCHANT, 5000, "USD").await;
    deliver(
        &app,
        ACME,
        "e1",
        &canonical_capture("e1", "pay_1", order, 5000),
    )
    .await;
    let first = deliver(
        &app,
        ACME,
        "e2",
        &canonical_refund("e2", "pay_1", "500", Some("re_1")),
    )
    .await;
    assert_eq!(first, (200, "applied".into(), "-".into()));
    let again = deliver(
        &app,
        ACME,
        "e3",
        &canonical_refund("e3", "pay_1", "500", Some("re_1")),
    )
    .await;
    assert_eq!(again, (200, "ignored".into(), "already_applied".into()));
    let other = deliver(
        &app,
        ACME,
        "e4",
        &canonical_refund("e4", "pay_1", "500", Some("re_2")),
    )
    .await;
    assert_eq!(other, (200, "applied".into(), "-".into()));
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        2
    );
    assert_eq!(
        app.count("SELECT refunded_minor FROM payments WHERE payment_id = 'pay_1'")
            .await,
        1000
    );
}

#[tokio::test]
async fn balances_stay_exact_beyond_64_bits() {
    let app = spawn_app().await;
    // Postings no provider sends in practice, written directly: two of 2^63 - 2 each.
    let big = i64::MAX - 1;
    app.db
        .execute(
            &format!(
                "WITH t AS (INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, payment_id) \
                 SELECT {MERCHANT}, 'acme', 'big_' || g, 'payment', 'p' || g FROM generate_series(1, 2) g RETURNING id) \
                 INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
                 SELECT id, {MERCHANT}, a.account, 'USD', a.amount FROM t, \
                 (VALUES ('psp_clearing:acme', {big}::bigint), ('merchant_payable', -{big}::bigint)) a(account, amount)"
            ),
            &[],
        )
        .await
        .unwrap();
    let response = app
        .admin_get(&format!("/admin/merchants/{MERCHANT}/balances"))
        .await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let exact = (i128::from(big) * 2).to_string();
    assert!(
        body.contains(&format!(r#""balance_minor":{exact}"#)),
        "{body}"
    );
    assert!(
        body.contains(&format!(r#""balance_minor":-{exact}"#)),
        "{body}"
    );
}
