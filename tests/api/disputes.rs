//! Disputes and chargebacks: money a provider takes back, and gives back, is in the books. Each
//! story runs against the real binary (`callback-gateway serve`) on a database of its own and
//! checks the merchant's balances, as `GET /admin/merchants/42/balances` answers them, after
//! every step.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::refunds::{json, post_refund, refund_body};
use crate::support::gateway::GatewayProcess;
use crate::support::payloads::{self, Kind, Payload};
use crate::support::provider::FakeProvider;
use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, STRIPE, TestApp, all_providers, answer, connect, refund_config,
    sign, spawn_app_with, until_lock_waiters_on,
};

/// A real gateway process and a connection to its database.
struct Gateway {
    process: GatewayProcess,
    client: reqwest::Client,
    db: tokio_postgres::Client,
}

impl Gateway {
    async fn start() -> Self {
        Self::with_config("").await
    }

    async fn with_config(extra: &str) -> Self {
        let process = GatewayProcess::spawn(extra).await;
        let db = connect(&process.database_url).await;
        Self {
            process,
            client: reqwest::Client::new(),
            db,
        }
    }

    /// Posts `body` as `provider` signs it now; the status, replay flag and body.
    async fn deliver(&self, provider: &str, event_id: &str, body: &str) -> (u16, bool, String) {
        let mut request = self
            .client
            .post(format!(
                "{}/v1/callbacks/{provider}",
                self.process.address()
            ))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        for (name, value) in sign::sign_now(provider, event_id, body) {
            request = request.header(name, value);
        }
        answer(request.send().await.unwrap()).await
    }

    /// Delivers and expects a 200 ack; returns it.
    async fn ack(&self, provider: &str, event_id: &str, body: &str) -> Value {
        let (status, _, ack) = self.deliver(provider, event_id, body).await;
        assert_eq!(status, 200, "{event_id}: {ack}");
        json(&ack)
    }

    /// A pending order of merchant 42 for `amount` USD, paid through acme by payment
    /// `pay_{order}`; returns the order id.
    async fn paid_order(&self, amount: i64) -> i64 {
        let order = self.order(amount).await;
        let ack = self
            .ack(
                ACME,
                &format!("evt_pay_{order}"),
                &capture(order, order, amount),
            )
            .await;
        assert_eq!(ack["outcome"], "applied", "{ack}");
        order
    }

    async fn order(&self, amount: i64) -> i64 {
        self.db
            .query_one(
                "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, $2, 'USD') RETURNING id",
                &[&MERCHANT, &amount],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Merchant 42's non-zero balances in USD, from the gateway's own balances endpoint; and
    /// the check that they sum to zero.
    async fn books(&self) -> BTreeMap<String, i64> {
        let body: Value = self
            .client
            .get(format!(
                "{}/admin/merchants/{MERCHANT}/balances",
                self.process.address()
            ))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let books: BTreeMap<String, i64> = body["balances"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["currency"] == "USD" && b["balance_minor"] != 0)
            .map(|b| {
                (
                    b["account"].as_str().unwrap().to_owned(),
                    b["balance_minor"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            books.values().sum::<i64>(),
            0,
            "the books balance: {books:?}"
        );
        books
    }

    async fn attention(&self) -> Value {
        self.client
            .get(format!("{}/admin/attention", self.process.address()))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// (payment status, order status, disputed_minor) of order `order`'s payment `pay_{order}`.
    async fn statuses(&self, order: i64) -> (String, String, i64) {
        let row = self
            .db
            .query_one(
                "SELECT p.status, o.status, p.disputed_minor FROM payments p, orders o \
                 WHERE p.payment_id = $1 AND o.id = $2",
                &[&format!("pay_{order}"), &order],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }

    async fn count(&self, sql: &str) -> i64 {
        self.db.query_one(sql, &[]).await.unwrap().get(0)
    }
}

fn books(entries: &[(&str, i64)]) -> BTreeMap<String, i64> {
    entries
        .iter()
        .filter(|(_, amount)| *amount != 0)
        .map(|(account, amount)| ((*account).to_owned(), *amount))
        .collect()
}

fn capture(payment: i64, order: i64, amount: i64) -> String {
    format!(
        r#"{{"id":"evt_pay_{order}","type":"payment.succeeded","data":{{"payment_id":"pay_{payment}","order_id":{order},"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

fn withdrawn(event: &str, dispute: &str, order: i64, amount: i64, fee: i64) -> String {
    format!(
        r#"{{"id":"{event}","type":"dispute.funds_withdrawn","data":{{"dispute_id":"{dispute}","payment_id":"pay_{order}","amount_minor":{amount},"currency":"USD","fee_minor":{fee}}}}}"#
    )
}

fn reinstated(event: &str, dispute: &str, order: i64, amount: i64) -> String {
    format!(
        r#"{{"id":"{event}","type":"dispute.funds_reinstated","data":{{"dispute_id":"{dispute}","payment_id":"pay_{order}","amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

fn closed(event: &str, dispute: &str, order: i64, status: &str) -> String {
    format!(
        r#"{{"id":"{event}","type":"dispute.closed","data":{{"dispute_id":"{dispute}","payment_id":"pay_{order}","status":"{status}"}}}}"#
    )
}

const CLEARING: &str = "psp_clearing:acme";

// ---------------------------------------------------------------------------------------
// The stories, through the real binary
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_with_a_fee_takes_the_amount_from_the_merchant_and_the_fee_into_dispute_fees()
{
    let gateway = Gateway::start().await;
    let order = gateway.paid_order(5000).await;
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, 5000), ("merchant_payable", -5000)])
    );

    let body = withdrawn("evt_dw_1", "dp_1", order, 5000, 1500);
    let (status, replayed, first) = gateway.deliver(ACME, "evt_dw_1", &body).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    let ack = json(&first);
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert!(ack["transfer_id"].as_i64().is_some(), "{ack}");
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, -1500), ("dispute_fees", 1500)]),
        "clearing -(amount + fee), merchant_payable +amount, dispute_fees +fee"
    );
    assert_eq!(
        gateway.statuses(order).await,
        ("disputed".into(), "disputed".into(), 5000)
    );
    let transfer = gateway
        .db
        .query_one(
            "SELECT kind, dispute_id, (SELECT count(*) FROM ledger_entries e WHERE e.transfer_id = t.id) \
             FROM ledger_transfers t WHERE event_id = 'evt_dw_1'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        (
            transfer.get::<_, String>(0),
            transfer.get::<_, Option<String>>(1),
            transfer.get::<_, i64>(2)
        ),
        ("chargeback".into(), Some("dp_1".into()), 3)
    );

    // A redelivery is the stored ack, byte for byte, and moves nothing.
    let (status, replayed, again) = gateway.deliver(ACME, "evt_dw_1", &body).await;
    assert_eq!(
        (status, replayed, again.as_str()),
        (200, true, first.as_str())
    );
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, -1500), ("dispute_fees", 1500)])
    );
    // An open dispute is in front of finance.
    let attention = gateway.attention().await;
    let disputes = attention["disputes"].as_array().unwrap();
    assert_eq!(disputes.len(), 1, "{attention}");
    assert_eq!(
        (&disputes[0]["dispute_id"], &disputes[0]["reason"]),
        (&Value::from("dp_1"), &Value::from("open"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_then_its_reinstatement_gives_the_amount_back_and_the_order_is_paid_again() {
    let gateway = Gateway::start().await;
    let order = gateway.paid_order(5000).await;
    gateway
        .ack(
            ACME,
            "evt_dw",
            &withdrawn("evt_dw", "dp_1", order, 5000, 1500),
        )
        .await;
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, -1500), ("dispute_fees", 1500)])
    );

    let ack = gateway
        .ack(ACME, "evt_dr", &reinstated("evt_dr", "dp_1", order, 5000))
        .await;
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        gateway.books().await,
        books(&[
            (CLEARING, 3500),
            ("merchant_payable", -5000),
            ("dispute_fees", 1500)
        ]),
        "the amount is back; the fee stays paid"
    );
    assert_eq!(
        gateway.statuses(order).await,
        ("succeeded".into(), "paid".into(), 0)
    );
    assert_eq!(
        gateway
            .count("SELECT count(*) FROM ledger_transfers WHERE kind = 'chargeback_reversal'")
            .await,
        1
    );

    let ack = gateway
        .ack(ACME, "evt_dc", &closed("evt_dc", "dp_1", order, "won"))
        .await;
    assert_eq!(
        (&ack["outcome"], ack.get("transfer_id")),
        (&Value::from("applied"), None)
    );
    assert_eq!(
        gateway.books().await,
        books(&[
            (CLEARING, 3500),
            ("merchant_payable", -5000),
            ("dispute_fees", 1500)
        ]),
        "a close moves no money"
    );
    assert_eq!(
        gateway.statuses(order).await,
        ("succeeded".into(), "paid".into(), 0)
    );
    let attention = gateway.attention().await;
    assert_eq!(
        attention["disputes"],
        Value::Array(vec![]),
        "a dispute won and reinstated needs nothing: {attention}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_then_a_close_lost_charges_the_order_back_and_a_merchant_refund_is_refused_without_calling_the_provider()
 {
    let provider = FakeProvider::start().await;
    let gateway = Gateway::with_config(&refund_config(&provider.base_url, "")).await;
    let order = gateway.paid_order(5000).await;
    gateway
        .ack(
            ACME,
            "evt_dw",
            &withdrawn("evt_dw", "dp_1", order, 5000, 1500),
        )
        .await;
    let ack = gateway
        .ack(ACME, "evt_dc", &closed("evt_dc", "dp_1", order, "lost"))
        .await;
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        gateway.statuses(order).await,
        ("charged_back".into(), "charged_back".into(), 5000)
    );
    let after_close = books(&[(CLEARING, -1500), ("dispute_fees", 1500)]);
    assert_eq!(gateway.books().await, after_close);
    let attention = gateway.attention().await;
    assert_eq!(
        attention["disputes"],
        Value::Array(vec![]),
        "a lost dispute is over: {attention}"
    );

    // The bank paid the customer back: a refund would pay them twice.
    let mut conn = <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
        &gateway.process.database_url,
    )
    .await
    .unwrap();
    let token = callback_gateway::auth::issue_token(&mut conn, MERCHANT)
        .await
        .unwrap();
    let (status, _, body) = answer(
        post_refund(
            &gateway.client,
            &gateway.process.address(),
            &token,
            order,
            "refund-after-chargeback",
            &refund_body(500),
        )
        .await,
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(json(&body)["error"], "amount_exceeds_refundable", "{body}");
    assert_eq!(provider.calls().len(), 0, "the provider was never called");
    assert_eq!(
        gateway.count("SELECT count(*) FROM refund_requests").await,
        0,
        "nothing reserved"
    );
    assert_eq!(gateway.books().await, after_close);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_withdrawal_event_for_the_same_dispute_is_ignored_and_posts_nothing() {
    let gateway = Gateway::start().await;
    let order = gateway.paid_order(5000).await;
    gateway
        .ack(
            ACME,
            "evt_dw_a",
            &withdrawn("evt_dw_a", "dp_1", order, 5000, 1500),
        )
        .await;
    let after_first = books(&[(CLEARING, -1500), ("dispute_fees", 1500)]);
    assert_eq!(gateway.books().await, after_first);

    // The same withdrawal reported again under another event id (as providers do).
    let ack = gateway
        .ack(
            ACME,
            "evt_dw_b",
            &withdrawn("evt_dw_b", "dp_1", order, 5000, 1500),
        )
        .await;
    assert_eq!(
        (&ack["outcome"], &ack["reason"]),
        (&Value::from("ignored"), &Value::from("already_applied")),
        "{ack}"
    );
    assert_eq!(gateway.books().await, after_first, "no second transfer");
    assert_eq!(
        gateway
            .count("SELECT count(*) FROM ledger_transfers WHERE dispute_id = 'dp_1'")
            .await,
        1
    );
    assert_eq!(
        gateway.statuses(order).await,
        ("disputed".into(), "disputed".into(), 5000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reinstatement_before_its_withdrawal_is_409_then_applies_once_the_withdrawal_arrives() {
    let gateway = Gateway::start().await;
    let order = gateway.paid_order(5000).await;
    let back = reinstated("evt_dr", "dp_1", order, 5000);
    let (status, _, body) = gateway.deliver(ACME, "evt_dr", &back).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(json(&body)["error"], "out_of_order");
    assert_eq!(
        gateway
            .count("SELECT count(*) FROM idempotency_keys WHERE idem_key = 'acme:evt_dr'")
            .await,
        0,
        "nothing stored: the provider's retry runs as the first time"
    );
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, 5000), ("merchant_payable", -5000)])
    );

    gateway
        .ack(
            ACME,
            "evt_dw",
            &withdrawn("evt_dw", "dp_1", order, 5000, 1500),
        )
        .await;
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, -1500), ("dispute_fees", 1500)])
    );
    // The provider's retry of the reinstatement now applies.
    let ack = gateway.ack(ACME, "evt_dr", &back).await;
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        gateway.books().await,
        books(&[
            (CLEARING, 3500),
            ("merchant_payable", -5000),
            ("dispute_fees", 1500)
        ])
    );
    assert_eq!(
        gateway.statuses(order).await,
        ("succeeded".into(), "paid".into(), 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_on_a_held_payment_comes_out_of_unapplied_funds_and_moves_no_order() {
    let gateway = Gateway::start().await;
    // Paid 4999 for an order of 5000: held, in unapplied funds.
    let order = gateway.order(5000).await;
    let ack = gateway
        .ack(
            ACME,
            &format!("evt_pay_{order}"),
            &capture(order, order, 4999),
        )
        .await;
    assert_eq!(
        (&ack["outcome"], &ack["reason"]),
        (&Value::from("held"), &Value::from("amount_mismatch"))
    );
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, 4999), ("unapplied_funds", -4999)])
    );

    let ack = gateway
        .ack(
            ACME,
            "evt_dw",
            &withdrawn("evt_dw", "dp_1", order, 4999, 1500),
        )
        .await;
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, -1500), ("dispute_fees", 1500)]),
        "the held money went back, and the fee came out of clearing"
    );
    let entries: Vec<String> = gateway
        .db
        .query(
            "SELECT e.account || ' ' || e.amount_minor FROM ledger_entries e \
             JOIN ledger_transfers t ON t.id = e.transfer_id WHERE t.event_id = 'evt_dw' ORDER BY e.id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        entries,
        [
            "unapplied_funds 4999",
            "psp_clearing:acme -6499",
            "dispute_fees 1500"
        ]
    );
    assert_eq!(
        gateway.statuses(order).await,
        ("held".into(), "pending_payment".into(), 4999),
        "a held payment stays held; its order was never paid by it"
    );
    let ack = gateway
        .ack(ACME, "evt_dc", &closed("evt_dc", "dp_1", order, "lost"))
        .await;
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        gateway.statuses(order).await,
        ("held".into(), "pending_payment".into(), 4999)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_larger_than_what_remains_is_posted_and_listed_in_attention() {
    let gateway = Gateway::start().await;
    let order = gateway.paid_order(5000).await;
    let ack = gateway
        .ack(
            ACME,
            "evt_ref",
            &format!(
                r#"{{"id":"evt_ref","type":"refund.succeeded","data":{{"payment_id":"pay_{order}","refund_id":"re_1","amount_minor":3000,"currency":"USD"}}}}"#
            ),
        )
        .await;
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        gateway.books().await,
        books(&[(CLEARING, 2000), ("merchant_payable", -2000)])
    );

    // The provider withdraws the whole payment though 3000 were refunded already.
    let ack = gateway
        .ack(
            ACME,
            "evt_dw",
            &withdrawn("evt_dw", "dp_1", order, 5000, 1500),
        )
        .await;
    assert_eq!(
        (&ack["outcome"], &ack["reason"]),
        (
            &Value::from("applied"),
            &Value::from("withdrawal_exceeds_remaining")
        ),
        "{ack}"
    );
    assert_eq!(
        gateway.books().await,
        books(&[
            (CLEARING, -4500),
            ("merchant_payable", 3000),
            ("dispute_fees", 1500)
        ]),
        "posted as the provider moved it: the merchant owes the gateway 3000"
    );
    let attention = gateway.attention().await;
    let disputes = attention["disputes"].as_array().unwrap();
    assert_eq!(disputes.len(), 1, "{attention}");
    assert_eq!(disputes[0]["reason"], "exceeds_remaining", "{attention}");
    assert_eq!(disputes[0]["withdrawn_minor"], 5000, "{attention}");
    // Still in front of finance once the dispute is lost.
    gateway
        .ack(ACME, "evt_dc", &closed("evt_dc", "dp_1", order, "lost"))
        .await;
    let attention = gateway.attention().await;
    assert_eq!(
        attention["disputes"][0]["reason"], "exceeds_remaining",
        "{attention}"
    );
    assert_eq!(attention["disputes"][0]["outcome"], "lost", "{attention}");
}

// ---------------------------------------------------------------------------------------
// Stripe's dispute events, and every verified event ending in a stored answer
// ---------------------------------------------------------------------------------------

fn stripe_dispute(event: &str, kind: &str, status: &str, fee: i64) -> String {
    format!(
        r#"{{"id":"{event}","object":"event","type":"{kind}","data":{{"object":{{"id":"du_1","object":"dispute","amount":2500,"currency":"usd","charge":"ch_1","payment_intent":"pi_1","reason":"fraudulent","status":"{status}","is_charge_refundable":false,"balance_transactions":[{{"id":"txn_1","object":"balance_transaction","amount":-2500,"currency":"usd","fee":{fee},"net":-{net},"reporting_category":"dispute","type":"adjustment"}}]}}}}}}"#,
        net = 2500 + fee
    )
}

#[tokio::test]
async fn stripe_dispute_events_withdraw_with_their_fee_and_close() {
    let app = spawn_app_with("").await;
    let order = app.create_order(MERCHANT, 2500, "USD").await;
    let paid = format!(
        r#"{{"id":"evt_pi","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_1","amount_received":2500,"currency":"usd","metadata":{{"order_id":"{order}"}}}}}}}}"#
    );
    let (status, _, ack) = answer(app.deliver(STRIPE, "evt_pi", &paid).await).await;
    assert_eq!(status, 200, "{ack}");

    let body = stripe_dispute(
        "evt_w",
        "charge.dispute.funds_withdrawn",
        "needs_response",
        1500,
    );
    let (status, _, ack) = answer(app.deliver(STRIPE, "evt_w", &body).await).await;
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );
    let clearing = app
        .count(
            "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries \
             WHERE account = 'psp_clearing:stripe'",
        )
        .await;
    assert_eq!(
        clearing, -1500,
        "2500 captured, 2500 and a 1500 fee taken back"
    );
    assert_eq!(
        app.count(
            "SELECT sum(amount_minor)::bigint FROM ledger_entries WHERE account = 'dispute_fees'"
        )
        .await,
        1500
    );
    let lost = stripe_dispute("evt_c", "charge.dispute.closed", "lost", 1500);
    let (_, _, ack) = answer(app.deliver(STRIPE, "evt_c", &lost).await).await;
    assert_eq!(json(&ack)["outcome"], "applied", "{ack}");
    assert_eq!(app.order_status(order).await, "charged_back");
    let inquiry = stripe_dispute("evt_i", "charge.dispute.closed", "warning_closed", 0);
    let (_, _, ack) = answer(app.deliver(STRIPE, "evt_i", &inquiry).await).await;
    assert_eq!(json(&ack)["reason"], "inquiry_closed", "{ack}");
}

#[tokio::test]
async fn every_verified_dispute_event_ends_in_a_stored_answer_or_a_409_that_can_help() {
    let app = spawn_app_with("").await;
    let order = app.create_order(MERCHANT, 5000, "USD").await;
    let (status, _, _) = answer(
        app.deliver(ACME, "evt_pay", &capture(order, order, 5000))
            .await,
    )
    .await;
    assert_eq!(status, 200);
    let eur = format!(
        r#"{{"id":"e1","type":"dispute.funds_withdrawn","data":{{"dispute_id":"dp_eur","payment_id":"pay_{order}","amount_minor":5000,"currency":"EUR"}}}}"#
    );
    let huge = format!(
        r#"{{"id":"e2","type":"dispute.funds_withdrawn","data":{{"dispute_id":"dp_huge","payment_id":"pay_{order}","amount_minor":99999999999999999999,"currency":"USD"}}}}"#
    );
    let huge_fee = format!(
        r#"{{"id":"e3","type":"dispute.funds_withdrawn","data":{{"dispute_id":"dp_fee","payment_id":"pay_{order}","amount_minor":10,"currency":"USD","fee_minor":1000000000000001}}}}"#
    );
    let no_id = format!(
        r#"{{"id":"e4","type":"dispute.funds_withdrawn","data":{{"payment_id":"pay_{order}","amount_minor":10,"currency":"USD"}}}}"#
    );
    for (event, body, reason) in [
        ("e1", eur.as_str(), "currency_mismatch"),
        ("e2", huge.as_str(), "amount_out_of_range"),
        ("e3", huge_fee.as_str(), "amount_out_of_range"),
        ("e4", no_id.as_str(), "invalid_payload"),
    ] {
        let (status, _, ack) = answer(app.deliver(ACME, event, body).await).await;
        assert_eq!(status, 200, "{event}: {ack}");
        let ack = json(&ack);
        assert_eq!(
            (ack["outcome"].as_str(), ack["reason"].as_str()),
            (Some("rejected"), Some(reason)),
            "{event}: {ack}"
        );
        let (again, replayed, _) = answer(app.deliver(ACME, event, body).await).await;
        assert_eq!(
            (again, replayed),
            (200, true),
            "{event} is stored and replayed"
        );
    }
    // A dispute of a payment the gateway never captured waits for it, as a refund does.
    let unknown = withdrawn("e5", "dp_x", 999_999, 100, 0);
    let response = app.deliver(ACME, "e5", &unknown).await;
    assert_eq!(
        response
            .headers()
            .get("Retry-After")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("30".to_owned())
    );
    let (status, _, body) = answer(response).await;
    assert_eq!(
        (status, json(&body)["error"].as_str()),
        (409, Some("out_of_order"))
    );
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind <> 'payment'")
            .await,
        0,
        "none of these moved money"
    );
    // A close before any funds event is recorded; the withdrawal after it charges back at once.
    let close = closed("e6", "dp_late", order, "lost");
    let (_, _, ack) = answer(app.deliver(ACME, "e6", &close).await).await;
    assert_eq!(json(&ack)["outcome"], "applied", "{ack}");
    assert_eq!(app.order_status(order).await, "paid");
    let late = withdrawn("e7", "dp_late", order, 5000, 0);
    let (_, _, ack) = answer(app.deliver(ACME, "e7", &late).await).await;
    assert_eq!(json(&ack)["outcome"], "applied", "{ack}");
    assert_eq!(app.order_status(order).await, "charged_back");
}

#[tokio::test]
async fn the_database_refuses_a_second_chargeback_or_reversal_of_one_dispute() {
    let app = spawn_app_with("").await;
    let insert = |event: &str, kind: &str| {
        format!(
            "INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, payment_id, dispute_id) \
             VALUES (42, 'acme', '{event}', '{kind}', 'pay_1', 'dp_1')"
        )
    };
    app.db
        .batch_execute(&insert("evt_1", "chargeback"))
        .await
        .unwrap();
    app.db
        .batch_execute(&insert("evt_2", "chargeback_reversal"))
        .await
        .unwrap();
    for (event, kind) in [("evt_3", "chargeback"), ("evt_4", "chargeback_reversal")] {
        let error = app
            .db
            .batch_execute(&insert(event, kind))
            .await
            .unwrap_err();
        assert_eq!(
            error.as_db_error().map(|e| e.constraint()),
            Some(Some("uq_ledger_transfers_dispute")),
            "{kind}: {error}"
        );
    }
    // Another merchant's or provider's dispute of the same id is its own.
    app.db
        .batch_execute(
            "INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, payment_id, dispute_id) \
             VALUES (43, 'plain', 'evt_5', 'chargeback', 'pay_1', 'dp_1')",
        )
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------------------
// A refund webhook, a merchant refund and a withdrawal of one payment at once
// ---------------------------------------------------------------------------------------

/// The general path's lock on an order: `SELECT .. FROM orders .. FOR UPDATE`.
const ORDER_LOCK_QUERY: &str = "%FROM \"orders\"%FOR UPDATE%";

async fn refund_app(provider: &FakeProvider) -> (TestApp, String) {
    let app = spawn_app_with(&refund_config(&provider.base_url, "")).await;
    let token = app.token_for(MERCHANT).await;
    (app, token)
}

async fn pay(app: &TestApp, amount: i64) -> i64 {
    let order = app.create_order(MERCHANT, amount, "USD").await;
    let (status, _, ack) = answer(
        app.deliver(
            ACME,
            &format!("evt_pay_{order}"),
            &capture(order, order, amount),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{ack}");
    order
}

/// The entries' sum of `account` for merchant 42.
async fn balance(app: &TestApp, account: &str) -> i64 {
    app.db
        .query_one(
            "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries \
             WHERE merchant_id = 42 AND account = $1",
            &[&account],
        )
        .await
        .unwrap()
        .get(0)
}

/// Which of two deliveries of one payment gets the order's row first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum First {
    Refund,
    Withdrawal,
}

/// Holds `order`'s row while `first` and then `second` queue behind it (each sent only once
/// the one before waits for the lock, so PostgreSQL grants them in that order), then lets go.
async fn queued<A, B>(app: &TestApp, order: i64, first: A, second: B) -> (A::Output, B::Output)
where
    A: std::future::Future + Send + 'static,
    B: std::future::Future + Send + 'static,
    A::Output: Send + 'static,
    B::Output: Send + 'static,
{
    let side = connect(&app.database_url).await;
    side.batch_execute(&format!(
        "BEGIN; SELECT * FROM orders WHERE id = {order} FOR UPDATE"
    ))
    .await
    .unwrap();
    let first = tokio::spawn(first);
    until_lock_waiters_on(app, 1, ORDER_LOCK_QUERY).await;
    let second = tokio::spawn(second);
    until_lock_waiters_on(app, 2, ORDER_LOCK_QUERY).await;
    side.batch_execute("COMMIT").await.unwrap();
    (first.await.unwrap(), second.await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_webhook_and_a_withdrawal_arriving_together_are_decided_one_after_the_other() {
    for first in [First::Refund, First::Withdrawal] {
        let provider = FakeProvider::start().await;
        let (app, token) = refund_app(&provider).await;
        let app = std::sync::Arc::new(app);
        let order = pay(&app, 5000).await;
        // The merchant refunds 3000; the provider accepts (its webhook comes below).
        let (status, _, body) = answer(
            post_refund(
                &app.client,
                &app.address,
                &token,
                order,
                "rf-1",
                &refund_body(3000),
            )
            .await,
        )
        .await;
        assert_eq!(status, 202, "{body}");
        let refund_id = json(&body)["provider_refund_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let send = |event: &'static str, body: String| {
            let app = app.clone();
            async move { answer(app.deliver(ACME, event, &body).await).await }
        };
        let refund = send(
            "evt_ref",
            format!(
                r#"{{"id":"evt_ref","type":"refund.succeeded","data":{{"payment_id":"pay_{order}","refund_id":"{refund_id}","amount_minor":3000,"currency":"USD"}}}}"#
            ),
        );
        let withdrawal = send("evt_dw", withdrawn("evt_dw", "dp_1", order, 5000, 0));
        let (refund, withdrawal) = match first {
            First::Refund => queued(&app, order, refund, withdrawal).await,
            First::Withdrawal => {
                let (w, r) = queued(&app, order, withdrawal, refund).await;
                (r, w)
            }
        };
        assert_eq!(
            (refund.0, withdrawal.0),
            (200, 200),
            "{first:?}: {refund:?} {withdrawal:?}"
        );
        let (refund, withdrawal) = (json(&refund.2), json(&withdrawal.2));
        // Both are posted, in either order (the provider moved both): the same books, the same
        // statuses. The one that came second says they took more than was captured, and the
        // dispute is in front of finance either way.
        assert_eq!(withdrawal["outcome"], "applied", "{first:?}: {withdrawal}");
        assert_eq!(refund["outcome"], "applied", "{first:?}: {refund}");
        match first {
            First::Refund => {
                assert!(refund.get("reason").is_none(), "{refund}");
                assert_eq!(
                    withdrawal["reason"], "withdrawal_exceeds_remaining",
                    "{withdrawal}"
                );
            }
            First::Withdrawal => {
                assert!(withdrawal.get("reason").is_none(), "{withdrawal}");
                assert_eq!(refund["reason"], "refund_exceeds_remaining", "{refund}");
            }
        }
        assert_eq!(
            balance(&app, "psp_clearing:acme").await,
            5000 - 3000 - 5000,
            "{first:?}"
        );
        assert_eq!(app.order_status(order).await, "disputed", "{first:?}");
        assert_eq!(
            app.count(
                "SELECT count(*) FROM payment_disputes \
                 WHERE dispute_id = 'dp_1' AND note = 'exceeds_remaining'"
            )
            .await,
            1,
            "{first:?}"
        );
        // The merchant's refund request is settled by its posted webhook.
        assert_eq!(
            app.count("SELECT count(*) FROM refund_requests WHERE status = 'succeeded'")
                .await,
            1,
            "{first:?}"
        );
        assert_eq!(
            balance(&app, "psp_clearing:acme").await + balance(&app, "merchant_payable").await,
            0,
            "{first:?}"
        );
        assert_eq!(
            app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'chargeback'")
                .await,
            1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merchant_refund_and_a_withdrawal_at_once_never_refund_what_the_dispute_took() {
    for first in [First::Refund, First::Withdrawal] {
        let provider = FakeProvider::start().await;
        let (app, token) = refund_app(&provider).await;
        let app = std::sync::Arc::new(app);
        let order = pay(&app, 5000).await;
        let refund = {
            let (app, token) = (app.clone(), token.clone());
            async move {
                let response = post_refund(
                    &app.client,
                    &app.address,
                    &token,
                    order,
                    "rf-race",
                    &refund_body(5000),
                )
                .await;
                answer(response).await
            }
        };
        let withdrawal = {
            let app = app.clone();
            async move {
                answer(
                    app.deliver(ACME, "evt_dw", &withdrawn("evt_dw", "dp_1", order, 5000, 0))
                        .await,
                )
                .await
            }
        };
        let (refund, withdrawal) = match first {
            First::Refund => queued(&app, order, refund, withdrawal).await,
            First::Withdrawal => {
                let (w, r) = queued(&app, order, withdrawal, refund).await;
                (r, w)
            }
        };
        assert_eq!(withdrawal.0, 200, "{withdrawal:?}");
        assert_eq!(json(&withdrawal.2)["outcome"], "applied", "{withdrawal:?}");
        match first {
            // The refund reserved first: the provider was asked once (it will refuse a
            // disputed charge, or its webhook will find nothing refundable and be rejected
            // for finance to see).
            First::Refund => {
                assert_eq!(refund.0, 202, "{refund:?}");
                assert_eq!(provider.calls().len(), 1);
            }
            // The withdrawal first: refused before any provider call.
            First::Withdrawal => {
                assert_eq!(refund.0, 422, "{refund:?}");
                assert_eq!(json(&refund.2)["error"], "amount_exceeds_refundable");
                assert_eq!(provider.calls().len(), 0);
            }
        }
    }
}

#[tokio::test]
async fn the_writer_refuses_a_refund_planned_before_a_withdrawal_committed() {
    let app = spawn_app_with("").await;
    let order = pay(&app, 5000).await;
    let (status, _, ack) = answer(
        app.deliver(ACME, "evt_dw", &withdrawn("evt_dw", "dp_1", order, 5000, 0))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{ack}");
    // A refund of 1000 planned against the payment as it was before the withdrawal: the status
    // and the dispute amount it read are both stale, or only the dispute amount is.
    let stale_refund = |status_from: &str, disputed_from: i64| {
        format!(
            "SELECT result::text FROM payment_apply(42, 'acme', 'evt_stale', 'pay_{order}', {order}, \
             NULL, NULL, 'partially_refunded', 1000, 'USD', 0, 1000, 'refund', NULL, \
             'merchant_payable', 1000, 'psp_clearing:acme', -1000, '{status_from}', {disputed_from}, \
             {disputed_from}, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)"
        )
    };
    for (status_from, disputed_from) in [("succeeded", 0), ("disputed", 0)] {
        let result: String = app
            .db
            .query_one(&stale_refund(status_from, disputed_from), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(result, "state_changed", "{status_from} {disputed_from}");
    }
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind = 'refund'")
            .await,
        0
    );
    let (payment_status, refunded): (String, i64) = {
        let row = app
            .db
            .query_one(
                "SELECT status, refunded_minor FROM payments WHERE payment_id = $1",
                &[&format!("pay_{order}")],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((payment_status.as_str(), refunded), ("disputed", 0));
}

/// A dispute whose payment's capture commits while the dispute is being read: the payment was
/// not there (so its order was neither locked nor read) when the dispute looked up the
/// payment's order, and is captured when the dispute's locked read of the payment returns. The
/// order must follow the payment all the same. The capture is played by this test's own
/// transaction (a held payment with no order becomes the order's captured payment), committed
/// only once the dispute waits for the payment's lock. Found by the provider simulation, where
/// 1 run in about 20 under load left a payment disputed and its order paid.
#[tokio::test]
async fn a_dispute_read_as_its_capture_commits_moves_the_order_with_the_payment() {
    let app = spawn_app_with("").await;
    let order: i64 = app
        .db
        .query_one(
            "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 5000, 'USD') RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let held = format!(
        r#"{{"id":"evt_held_{order}","type":"payment.succeeded","data":{{"payment_id":"pay_{order}","amount_minor":5000,"currency":"USD"}}}}"#
    );
    let (status, _, ack) =
        answer(app.deliver(ACME, &format!("evt_held_{order}"), &held).await).await;
    assert_eq!(status, 200, "{ack}");

    let capture = connect(&app.database_url).await;
    capture.batch_execute("BEGIN").await.unwrap();
    capture
        .execute(
            "UPDATE payments SET status = 'succeeded', order_id = $1 WHERE payment_id = $2",
            &[&order, &format!("pay_{order}")],
        )
        .await
        .unwrap();
    capture
        .execute("UPDATE orders SET status = 'paid' WHERE id = $1", &[&order])
        .await
        .unwrap();

    let dispute = {
        let app_address = app.address.clone();
        let body = withdrawn("evt_dw_race", "dp_race", order, 2000, 0);
        tokio::spawn(async move {
            let (headers, body) = sign::signed_now(ACME, "evt_dw_race", &body);
            let mut request = reqwest::Client::new()
                .post(format!("{app_address}/v1/callbacks/{ACME}"))
                .header("Content-Type", "application/json")
                .body(body);
            for (name, value) in headers {
                request = request.header(name, value);
            }
            answer(request.send().await.unwrap()).await
        })
    };
    until_lock_waiters_on(&app, 1, "%FROM \"payments\"%").await;
    capture.batch_execute("COMMIT").await.unwrap();

    let (status, _, ack) = dispute.await.unwrap();
    assert_eq!(
        (status, json(&ack)["outcome"].as_str()),
        (200, Some("applied")),
        "{ack}"
    );
    let payment_status: String = app
        .db
        .query_one(
            "SELECT status FROM payments WHERE payment_id = $1",
            &[&format!("pay_{order}")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(payment_status, "disputed");
    assert_eq!(
        app.order_status(order).await,
        "disputed",
        "the order follows its payment"
    );
}

/// `/admin/attention`'s disputes are read newest first from the partial index at 200,000
/// disputes, most of them closed: never a scan of every dispute.
#[tokio::test]
async fn the_attention_list_of_disputes_reads_its_partial_index_at_200k_disputes() {
    let app = spawn_app_with("").await;
    app.db
        .batch_execute(
            "INSERT INTO payment_disputes (merchant_id, provider, dispute_id, payment_id, order_id, \
                                           funds, outcome, currency, withdrawn_minor, updated_at, reinstated_minor) \
             SELECT 42, 'acme', 'dp_' || g, 'pay_' || g, g, \
                    CASE WHEN g % 1000 = 0 THEN 'withdrawn' ELSE 'reinstated' END, \
                    CASE WHEN g % 1000 = 0 THEN 'open' ELSE 'won' END, 'USD', 1000, \
                    now() - g * interval '1 second', \
                    CASE WHEN g % 1000 = 0 THEN 0 ELSE 1000 END \
             FROM generate_series(1, 200000) g; \
             ANALYZE payment_disputes;",
        )
        .await
        .unwrap();
    let sql = callback_gateway::payments::dispute::ATTENTION_SQL.replace("$1", "100");
    let plan = app.explain(&sql).await;
    println!("{plan}");
    assert!(
        plan.contains("idx_payment_disputes_attention_v2")
            && !plan.contains("Seq Scan on payment_disputes"),
        "{plan}"
    );
    let attention: Value = app
        .admin_get("/admin/attention")
        .await
        .json()
        .await
        .unwrap();
    let disputes = attention["disputes"].as_array().unwrap();
    assert_eq!(disputes.len(), 100, "the newest 100 of the 200 open ones");
    assert!(
        disputes.iter().all(|d| d["reason"] == "open"),
        "closed, reinstated disputes are not listed"
    );
    assert_eq!(disputes[0]["dispute_id"], "dp_1000", "newest first");
    // A dispute event's read (the dispute it names, or its payment's): index lookups only.
    let read = app
        .explain(
            "SELECT * FROM payment_disputes WHERE merchant_id = 42 AND provider = 'acme' \
             AND (dispute_id = 'dp_777' OR payment_id = 'pay_123456') ORDER BY id",
        )
        .await;
    assert!(
        read.contains("uq_payment_disputes")
            && read.contains("idx_payment_disputes_payment")
            && !read.contains("Seq Scan"),
        "{read}"
    );
}

// ---------------------------------------------------------------------------------------
// The new providers' dispute events, through the real binary
// ---------------------------------------------------------------------------------------

impl Gateway {
    /// Posts `event` signed as `provider` signs it now (Adyen's signature inside the body,
    /// PayPal's from the test certificate host); the status, replay flag, body, and what was
    /// sent.
    async fn deliver_event(
        &self,
        provider: &str,
        event: &Payload,
    ) -> (u16, bool, String, Vec<(String, String)>, String) {
        let (headers, body) = sign::signed_now(provider, &event.event_id, &event.body);
        let (status, replayed, text) = self.post_signed(provider, &headers, &body).await;
        (status, replayed, text, headers, body)
    }

    async fn post_signed(
        &self,
        provider: &str,
        headers: &[(String, String)],
        body: &str,
    ) -> (u16, bool, String) {
        let mut request = self
            .client
            .post(format!(
                "{}/v1/callbacks/{provider}",
                self.process.address()
            ))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        answer(request.send().await.unwrap()).await
    }

    /// The ack stored for `provider`'s event (for Adyen the item's own, behind `[accepted]`).
    async fn stored_ack(&self, provider: &str, event_id: &str) -> Value {
        let record: Value = self
            .client
            .get(format!(
                "{}/admin/idempotency/{MERCHANT}/payment.callback/{provider}:{event_id}",
                self.process.address()
            ))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        record["response_body"].clone()
    }

    /// Delivers `event` and expects it stored with `outcome`; returns its stored ack.
    async fn expect(&self, provider: &str, event: &Payload, outcome: &str) -> Value {
        let (status, _, text, _, _) = self.deliver_event(provider, event).await;
        assert_eq!(status, 200, "{provider} {}: {text}", event.event_id);
        let ack = self.stored_ack(provider, &event.event_id).await;
        assert_eq!(ack["outcome"], outcome, "{provider}: {ack}");
        ack
    }

    /// (payment status, order status, disputed_minor) of `payment` and `order`.
    async fn statuses_of(&self, payment: &str, order: i64) -> (String, String, i64) {
        let row = self
            .db
            .query_one(
                "SELECT p.status, o.status, p.disputed_minor FROM payments p, orders o \
                 WHERE p.payment_id = $1 AND o.id = $2",
                &[&payment, &order],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    }
}

/// A signed withdrawal of `provider` posts one chargeback with the books checked, its
/// redelivery is the stored answer byte for byte and moves nothing, and (where the provider has
/// one) its reinstatement posts one chargeback_reversal that gives the amount back.
async fn a_providers_chargeback_posts_once_and_its_reinstatement_gives_it_back(provider: &str) {
    let gateway = Gateway::with_config(&all_providers("")).await;
    let clearing = format!("psp_clearing:{provider}");
    let clearing = clearing.as_str();
    let order = gateway.order(5000).await;
    let payment = format!("pay{order}");
    let dispute = format!("dsp{order}");
    let capture = payloads::payload(
        provider,
        "cap",
        &payment,
        &Kind::Capture {
            order: Some(order),
            amount: 5000,
            currency: "USD",
        },
    );
    gateway.expect(provider, &capture, "applied").await;
    assert_eq!(
        gateway.books().await,
        books(&[(clearing, 5000), ("merchant_payable", -5000)])
    );

    let fee = if payloads::books_dispute_fees(provider) {
        1500
    } else {
        0
    };
    let withdrawal = payloads::payload(
        provider,
        "cb",
        &payment,
        &Kind::Withdrawal {
            dispute_id: dispute.clone(),
            amount: 5000,
            fee,
            currency: "USD",
        },
    );
    let (status, replayed, first, headers, body) =
        gateway.deliver_event(provider, &withdrawal).await;
    assert_eq!((status, replayed), (200, false), "{provider}: {first}");
    let ack = gateway.stored_ack(provider, &withdrawal.event_id).await;
    assert_eq!(ack["outcome"], "applied", "{provider}: {ack}");
    assert_eq!(
        gateway.books().await,
        books(&[(clearing, -fee), ("dispute_fees", fee)]),
        "{provider}: clearing -(amount + fee), merchant_payable +amount, dispute_fees +fee"
    );
    assert_eq!(
        gateway.statuses_of(&payment, order).await,
        ("disputed".into(), "disputed".into(), 5000),
        "{provider}"
    );
    let chargebacks = format!(
        "SELECT count(*) FROM ledger_transfers WHERE kind = 'chargeback' AND provider = '{provider}' AND dispute_id = '{dispute}'"
    );
    assert_eq!(gateway.count(&chargebacks).await, 1, "{provider}");

    // The provider's redelivery: the same bytes, replayed, and nothing moves.
    let (status, replayed, again) = gateway.post_signed(provider, &headers, &body).await;
    assert_eq!(
        (status, replayed, again.as_str()),
        (200, true, first.as_str()),
        "{provider}: a redelivery is the stored answer"
    );
    assert_eq!(gateway.count(&chargebacks).await, 1, "{provider}");
    assert_eq!(
        gateway.books().await,
        books(&[(clearing, -fee), ("dispute_fees", fee)]),
        "{provider}"
    );
    let attention = gateway.attention().await;
    assert_eq!(
        attention["disputes"][0]["dispute_id"], dispute,
        "{provider}: the open dispute is in attention: {attention}"
    );

    if !payloads::reinstates(provider) {
        return;
    }
    let reinstatement = payloads::payload(
        provider,
        "cbr",
        &payment,
        &Kind::Reinstatement {
            dispute_id: dispute.clone(),
            amount: 5000,
            currency: "USD",
        },
    );
    gateway.expect(provider, &reinstatement, "applied").await;
    assert_eq!(
        gateway
            .count(&format!(
                "SELECT count(*) FROM ledger_transfers WHERE kind = 'chargeback_reversal' AND provider = '{provider}' AND dispute_id = '{dispute}'"
            ))
            .await,
        1,
        "{provider}"
    );
    assert_eq!(
        gateway.books().await,
        books(&[
            (clearing, 5000 - fee),
            ("merchant_payable", -5000),
            ("dispute_fees", fee)
        ]),
        "{provider}: the amount is back, the fee stays paid"
    );
    assert_eq!(
        gateway.statuses_of(&payment, order).await,
        ("succeeded".into(), "paid".into(), 0),
        "{provider}"
    );
}

macro_rules! every_new_provider {
    ($($module:ident => $provider:expr),* $(,)?) => {$(
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_chargeback_posts_once_its_redelivery_replays_and_its_reinstatement_gives_it_back() {
                super::a_providers_chargeback_posts_once_and_its_reinstatement_gives_it_back($provider).await;
            }
        }
    )*};
}

every_new_provider! {
    adyen => crate::support::ADYEN,
    square => crate::support::SQUARE,
    razorpay => crate::support::RAZORPAY,
    checkout => crate::support::CHECKOUT,
    paddle => crate::support::PADDLE,
    paypal => crate::support::PAYPAL,
}
