//! Issue 41: the providers that must be asked (Mollie, GoCardless, Mercado Pago) and Braintree,
//! end to end through the real binary, with each provider's API emulated on a local HTTPS
//! server (a CA of the test's own) that counts its requests: a capture applies once and its
//! redelivery is the same bytes; a refund and a chargeback post; a forged delivery moves
//! nothing and asks nothing where a signature exists (for Mollie, an id the API does not know
//! is a stored rejection); the API answering 503 and then 200 makes the first delivery a 503
//! and the retry apply; the fetch holds no database connection.

use std::time::Duration;

use base64::Engine;
use ring::hmac;

use crate::support::emulator::{Emulator, Scripted};
use crate::support::gateway::GatewayProcess;
use crate::support::{ACME, MERCHANT, connect, metric_sample, sign};

use crate::support::{
    BRAINTREE, BRAINTREE_PRIVATE, BRAINTREE_PUBLIC, GOCARDLESS, GOCARDLESS_SECRET, MERCADOPAGO,
    MERCADOPAGO_SECRET, MOLLIE,
};

/// The four providers of issue 41, asking `emulator`, plus acme; `database` settings merged.
pub fn asked_config(emulator: &Emulator, database: &str) -> String {
    format!(
        r#"
[server]
workers = 1
{database}

[[providers]]
name = "{ACME}"
scheme = "standard-webhooks"
payload = "canonical"
merchant_id = {MERCHANT}
secrets = ["{secret}"]
{asked}"#,
        secret = crate::support::ACME_SECRET,
        asked = emulator.asked_providers_toml(),
    )
}

pub struct Asked {
    pub gateway: GatewayProcess,
    pub emulator: Emulator,
    pub db: tokio_postgres::Client,
    client: reqwest::Client,
}

/// An answer as the provider sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<String>,
    pub body: String,
    /// The event's stored ack, where the provider is answered a fixed body that says nothing
    /// (Mollie): what finance and the event log see of it.
    pub ack: Option<String>,
}

impl Answer {
    /// The ack: the body, or for a provider answered a fixed body the stored ack.
    pub fn json(&self) -> serde_json::Value {
        let ack = self.ack.as_deref().unwrap_or(&self.body);
        serde_json::from_str(ack).unwrap_or_else(|e| panic!("{e}: {ack}"))
    }
}

impl Asked {
    pub async fn start() -> Self {
        Self::start_with("").await
    }

    pub async fn start_with(database: &str) -> Self {
        let emulator = Emulator::start().await;
        let gateway = GatewayProcess::spawn(&asked_config(&emulator, database)).await;
        let db = connect(&gateway.database_url).await;
        Self {
            gateway,
            emulator,
            db,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    pub async fn order(&self, amount_minor: i64, currency: &str) -> i64 {
        self.db
            .query_one(
                "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, $2, $3) RETURNING id",
                &[&MERCHANT, &amount_minor, &currency],
            )
            .await
            .unwrap()
            .get(0)
    }

    pub async fn count(&self, sql: &str) -> i64 {
        self.db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
    }

    /// The sum of the provider's clearing account (what the provider holds for the merchant).
    pub async fn clearing(&self, provider: &str) -> i64 {
        self.count(&format!(
            "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries WHERE account = 'psp_clearing:{provider}'"
        ))
        .await
    }

    pub async fn transfers(&self, provider: &str, kind: &str) -> i64 {
        self.count(&format!(
            "SELECT count(*) FROM ledger_transfers WHERE provider = '{provider}' AND kind = '{kind}'"
        ))
        .await
    }

    pub async fn post(
        &self,
        provider: &str,
        query: &str,
        headers: &[(String, String)],
        content_type: &str,
        body: &[u8],
    ) -> Answer {
        let mut url = format!("{}/v1/callbacks/{provider}", self.gateway.address());
        if !query.is_empty() {
            url = format!("{url}?{query}");
        }
        let mut request = self
            .client
            .post(url)
            .header("Content-Type", content_type)
            .body(body.to_vec());
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        let replayed = header("Idempotent-Replayed").as_deref() == Some("true");
        let retry_after = header("Retry-After");
        Answer {
            status,
            replayed,
            retry_after,
            body: response.text().await.unwrap(),
            ack: None,
        }
    }

    /// A Mollie webhook for payment `id`. Mollie is answered `{"received":true}` whatever
    /// happened (the caller is not told the payment's state); the answer carries the stored
    /// ack of the newest event of that payment as `ack`, read from the idempotency record.
    pub async fn mollie(&self, id: &str) -> Answer {
        let mut answer = self
            .post(
                MOLLIE,
                "",
                &[],
                "application/x-www-form-urlencoded",
                format!("id={id}").as_bytes(),
            )
            .await;
        if answer.status == 200 {
            assert_eq!(
                answer.body, r#"{"received":true}"#,
                "Mollie's answer says nothing"
            );
            answer.ack = self
                .db
                .query_opt(
                    "SELECT response_body::text FROM idempotency_keys \
                     WHERE op = 'payment.callback' AND idem_key LIKE 'mollie:' || $1 || ':%' \
                     ORDER BY created_at DESC, id DESC LIMIT 1",
                    &[&id],
                )
                .await
                .unwrap()
                .map(|row| row.get(0));
        }
        answer
    }

    pub async fn gocardless(&self, events: &[serde_json::Value], secret: &str) -> Answer {
        let body = serde_json::json!({ "events": events }).to_string();
        let signature = hex::encode(hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
            body.as_bytes(),
        ));
        let headers = vec![("Webhook-Signature".to_owned(), signature)];
        self.post(
            GOCARDLESS,
            "",
            &headers,
            "application/json",
            body.as_bytes(),
        )
        .await
    }

    /// A notification about payment `id`, signed as Mercado Pago documents (the manifest of
    /// the query's id, the request id and ts) with `secret`.
    pub async fn mercadopago(&self, id: &str, request_id: &str, secret: &str) -> Answer {
        let ts = chrono::Utc::now().timestamp_millis().to_string();
        let manifest = format!("id:{};request-id:{request_id};ts:{ts};", id.to_lowercase());
        let v1 = hex::encode(hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()),
            manifest.as_bytes(),
        ));
        let body = serde_json::json!({"action": "payment.updated", "api_version": "v1",
            "data": {"id": id}, "date_created": chrono::Utc::now().to_rfc3339(),
            "id": request_id.len(), "live_mode": false, "type": "payment", "user_id": "1"})
        .to_string();
        let headers = vec![
            ("x-signature".to_owned(), format!("ts={ts},v1={v1}")),
            ("x-request-id".to_owned(), request_id.to_owned()),
        ];
        self.post(
            MERCADOPAGO,
            &format!("data.id={id}&type=payment"),
            &headers,
            "application/json",
            body.as_bytes(),
        )
        .await
    }

    pub async fn braintree(&self, form: &[u8]) -> Answer {
        self.post(
            BRAINTREE,
            "",
            &[],
            "application/x-www-form-urlencoded",
            form,
        )
        .await
    }

    /// The gateway's `/metrics` sample `name` with `labels`.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let text = self
            .client
            .get(format!("{}/metrics", self.gateway.address()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric_sample(&text, name, labels)
    }
}

/// Mollie's payment `id` as its API answers it.
pub fn mollie_payment(
    id: &str,
    status: &str,
    amount: &str,
    refunded: &str,
    charged_back: &str,
    order: i64,
) -> String {
    serde_json::json!({"resource": "payment", "id": id, "mode": "test",
        "createdAt": "2026-12-03T10:00:00+00:00", "status": status,
        "amount": {"value": amount, "currency": "EUR"},
        "amountRefunded": {"value": refunded, "currency": "EUR"},
        "amountRemaining": {"value": amount, "currency": "EUR"},
        "amountChargedBack": {"value": charged_back, "currency": "EUR"},
        "description": "Order", "method": "ideal", "metadata": {"order_id": order.to_string()},
        "_links": {"self": {"href": format!("https://api.mollie.com/v2/payments/{id}")}}})
    .to_string()
}

/// GoCardless's payment as its API answers it (in its envelope).
pub fn gocardless_payment(id: &str, amount: i64, order: i64) -> String {
    serde_json::json!({"payments": {"id": id, "created_at": "2026-12-03T10:00:00.000Z",
        "charge_date": "2026-12-05", "amount": amount, "description": null, "currency": "GBP",
        "status": "confirmed", "reference": null, "metadata": {"order_id": order.to_string()},
        "amount_refunded": 0, "links": {"mandate": "MD1", "creditor": "CR1"}}})
    .to_string()
}

pub fn gocardless_event(
    id: &str,
    resource_type: &str,
    action: &str,
    links: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"id": id, "created_at": "2026-12-03T10:00:00.000Z",
        "resource_type": resource_type, "action": action, "links": links,
        "details": {"origin": "gocardless", "cause": action, "description": "test"}, "metadata": {}})
}

/// Mercado Pago's payment as its API answers it.
pub fn mercadopago_payment(
    id: &str,
    status: &str,
    amount: &str,
    refunded: &str,
    order: i64,
) -> String {
    format!(
        r#"{{"id":{id},"date_created":"2026-12-03T10:00:00.000-04:00","status":"{status}","status_detail":"accredited","currency_id":"BRL","transaction_amount":{amount},"transaction_amount_refunded":{refunded},"external_reference":"{order}","payment_method_id":"visa"}}"#
    )
}

/// A Braintree notification of `kind` about `subject` (XML), signed as the SDKs' testing
/// helper signs (base64 in 76-character lines, HMAC-SHA1 keyed with the SHA-1 of the private
/// key), built here on its own from the SDK's description, not with the gateway's code.
pub fn braintree_form(kind: &str, timestamp: &str, subject: &str) -> Vec<u8> {
    let xml = format!(
        "\n<notification>\n  <timestamp type=\"datetime\">{timestamp}</timestamp>\n  <kind>{kind}</kind>\n  <subject>{subject}</subject>\n</notification>\n"
    );
    let flat = base64::engine::general_purpose::STANDARD.encode(xml.as_bytes());
    let mut payload = String::new();
    for chunk in flat.as_bytes().chunks(76) {
        payload.push_str(std::str::from_utf8(chunk).unwrap());
        payload.push('\n');
    }
    let digest = ring::digest::digest(
        &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
        BRAINTREE_PRIVATE.as_bytes(),
    );
    let key = hmac::Key::new(hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, digest.as_ref());
    let signature = format!(
        "{BRAINTREE_PUBLIC}|{}",
        hex::encode(hmac::sign(&key, payload.as_bytes()))
    );
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("bt_signature", &signature)
        .append_pair("bt_payload", &payload)
        .finish()
        .into_bytes()
}

pub fn braintree_sale(id: &str, amount: &str, order: i64) -> String {
    format!(
        "<transaction><id>{id}</id><status>settled</status><type>sale</type><currency-iso-code>EUR</currency-iso-code><amount>{amount}</amount><order-id>{order}</order-id></transaction>"
    )
}

// ---------------------------------------------------------------------------------------
// Mollie
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mollie_a_capture_applies_once_and_its_redelivery_is_the_same_bytes() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_cap1",
        &mollie_payment("tr_cap1", "paid", "25.00", "0.00", "0.00", order),
    );
    let first = t.mollie("tr_cap1").await;
    assert_eq!(first.status, 200, "{first:?}");
    let ack = first.json();
    assert_eq!(ack["event_id"], "tr_cap1:paid:0.00:0.00");
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert!(!first.replayed);
    let again = t.mollie("tr_cap1").await;
    assert_eq!((again.status, again.replayed), (200, true));
    assert_eq!(again.body, first.body, "a redelivery is the same bytes");
    assert_eq!(t.transfers(MOLLIE, "payment").await, 1);
    assert_eq!(t.clearing(MOLLIE).await, 2500);
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM orders WHERE id = {order} AND status = 'paid'"
        ))
        .await,
        1
    );
    // Each delivery asked the API (the webhook itself says nothing).
    assert_eq!(t.emulator.requests("/v2/payments/tr_cap1"), 2);
    assert_eq!(
        t.emulator.bad_keys(),
        0,
        "the api_key went with every fetch"
    );
}

#[tokio::test]
async fn mollie_a_refund_and_a_chargeback_post_by_the_difference() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    let path = "/v2/payments/tr_ref1";
    t.emulator.put(
        path,
        &mollie_payment("tr_ref1", "paid", "25.00", "0.00", "0.00", order),
    );
    assert_eq!(t.mollie("tr_ref1").await.json()["outcome"], "applied");
    t.emulator.put(
        path,
        &mollie_payment("tr_ref1", "paid", "25.00", "10.00", "0.00", order),
    );
    let refund = t.mollie("tr_ref1").await;
    assert_eq!(refund.json()["outcome"], "applied", "{refund:?}");
    assert_eq!(refund.json()["event_id"], "tr_ref1:paid:10.00:0.00");
    assert_eq!(t.transfers(MOLLIE, "refund").await, 1);
    assert_eq!(t.clearing(MOLLIE).await, 1500);
    t.emulator.put(
        path,
        &mollie_payment("tr_ref1", "paid", "25.00", "10.00", "5.00", order),
    );
    let chargeback = t.mollie("tr_ref1").await;
    assert_eq!(chargeback.json()["outcome"], "applied", "{chargeback:?}");
    assert_eq!(t.transfers(MOLLIE, "chargeback").await, 1);
    assert_eq!(t.clearing(MOLLIE).await, 1000);
    // The same state again moves nothing.
    let again = t.mollie("tr_ref1").await;
    assert!(again.replayed);
    assert_eq!(t.count("SELECT count(*) FROM ledger_transfers").await, 3);
}

/// Mollie's payment with its chargebacks embedded: each `(amount, reversed)`.
fn mollie_with_chargebacks(
    id: &str,
    charged_back: &str,
    chargebacks: &[(&str, bool)],
    order: i64,
) -> String {
    let mut payment: serde_json::Value = serde_json::from_str(&mollie_payment(
        id,
        "paid",
        "25.00",
        "0.00",
        charged_back,
        order,
    ))
    .unwrap();
    let list: Vec<serde_json::Value> = chargebacks
        .iter()
        .enumerate()
        .map(|(i, (amount, reversed))| {
            serde_json::json!({"resource": "chargeback", "id": format!("chb_{i}"),
                "amount": {"value": amount, "currency": "EUR"},
                "createdAt": "2026-12-03T11:00:00+00:00", "paymentId": id,
                "reversedAt": if *reversed { serde_json::json!("2026-12-04T11:00:00+00:00") } else { serde_json::Value::Null }})
        })
        .collect();
    payment["_embedded"] = serde_json::json!({"chargebacks": list});
    payment.to_string()
}

#[tokio::test]
async fn mollie_a_reversed_chargeback_gives_the_money_back_even_when_the_amounts_repeat() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    let path = "/v2/payments/tr_rev1";
    t.emulator.put(
        path,
        &mollie_with_chargebacks("tr_rev1", "0.00", &[], order),
    );
    assert_eq!(t.mollie("tr_rev1").await.json()["outcome"], "applied");
    t.emulator.put(
        path,
        &mollie_with_chargebacks("tr_rev1", "5.00", &[("5.00", false)], order),
    );
    let chargeback = t.mollie("tr_rev1").await;
    let event_id = chargeback.json()["event_id"].as_str().unwrap().to_owned();
    assert!(
        event_id.starts_with("tr_rev1:paid:0.00:5.00:"),
        "the totals, then a digest of the chargebacks: {event_id}"
    );
    assert_eq!(t.clearing(MOLLIE).await, 2000);
    // The bank gave the 5.00 back: Mollie's total is back where the first webhook saw it.
    t.emulator.put(
        path,
        &mollie_with_chargebacks("tr_rev1", "0.00", &[("5.00", true)], order),
    );
    let reversal = t.mollie("tr_rev1").await;
    assert!(
        !reversal.replayed,
        "a new event, not the first one's replay: {reversal:?}"
    );
    assert!(
        reversal.json()["event_id"]
            .as_str()
            .unwrap()
            .starts_with("tr_rev1:paid:0.00:0.00:"),
        "{reversal:?}"
    );
    assert_eq!(reversal.json()["outcome"], "applied", "{reversal:?}");
    assert_eq!(t.clearing(MOLLIE).await, 2500, "the money came back");
    // Mollie may keep the gross total after a reversal: the chargeback is matched by its id,
    // so nothing moves again.
    t.emulator.put(
        path,
        &mollie_with_chargebacks("tr_rev1", "5.00", &[("5.00", true)], order),
    );
    let again = t.mollie("tr_rev1").await;
    assert_eq!(again.json()["reason"], "already_applied", "{again:?}");
    assert_eq!(t.clearing(MOLLIE).await, 2500);
    assert_eq!(t.emulator.requests(path), 4);
}

#[tokio::test]
async fn mollie_an_id_the_api_does_not_know_is_a_stored_rejection_that_moves_nothing() {
    let t = Asked::start().await;
    let forged = t.mollie("tr_forged1").await;
    assert_eq!(forged.status, 200, "{forged:?}");
    let ack = forged.json();
    assert_eq!(ack["outcome"], "rejected");
    assert_eq!(ack["reason"], "unknown_resource");
    assert_eq!(ack["event_id"], "tr_forged1:unknown_resource");
    assert_eq!(t.count("SELECT count(*) FROM ledger_transfers").await, 0);
    assert_eq!(t.count("SELECT count(*) FROM payments").await, 0);
    let again = t.mollie("tr_forged1").await;
    assert_eq!((again.replayed, again.body), (true, forged.body));
    // What is not a payment id is never asked about, nor stored.
    let junk = t.mollie("..%2Fadmin").await;
    assert_eq!(junk.status, 400, "{junk:?}");
    assert_eq!(
        t.emulator.all_requests(),
        2,
        "only the forged id was asked about, twice"
    );
}

#[tokio::test]
async fn mollie_the_api_answering_503_then_200_makes_the_first_delivery_503_and_the_retry_apply() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_retry1",
        &mollie_payment("tr_retry1", "paid", "25.00", "0.00", "0.00", order),
    );
    t.emulator.script(&[Scripted::Status(503)]);
    let first = t.mollie("tr_retry1").await;
    assert_eq!(first.status, 503, "{first:?}");
    assert!(first.retry_after.is_some(), "503 says when to retry");
    assert_eq!(
        t.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
    let retry = t.mollie("tr_retry1").await;
    assert_eq!(retry.json()["outcome"], "applied", "{retry:?}");
    assert_eq!(t.transfers(MOLLIE, "payment").await, 1);
}

#[tokio::test]
async fn mollie_a_refused_api_key_is_a_503_and_an_alert_never_a_stored_rejection() {
    let t = Asked::start().await;
    t.emulator
        .script(&[Scripted::Status(401), Scripted::Status(403)]);
    for _ in 0..2 {
        let answer = t.mollie("tr_key1").await;
        assert_eq!(answer.status, 503, "{answer:?}");
        assert!(answer.retry_after.is_some());
    }
    assert_eq!(
        t.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
    assert_eq!(
        t.metric(
            "gateway_provider_fetches_total",
            &[("provider", MOLLIE), ("result", "key_refused")]
        )
        .await,
        Some(2.0)
    );
    assert!(
        t.gateway.log().contains("refused the configured api_key"),
        "the refusal is logged for operators"
    );
}

#[tokio::test]
async fn mollie_the_same_id_posted_five_times_at_once_makes_one_transfer() {
    let t = Asked::start().await;
    let order = t.order(2500, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_five1",
        &mollie_payment("tr_five1", "paid", "25.00", "0.00", "0.00", order),
    );
    let answers = futures_util::future::join_all((0..5).map(|_| t.mollie("tr_five1"))).await;
    for answer in &answers {
        // A duplicate may wait for the first one's commit, or be told to come back (409).
        assert!(matches!(answer.status, 200 | 409), "{answer:?}");
    }
    let first = answers
        .iter()
        .find(|a| a.status == 200)
        .unwrap()
        .body
        .clone();
    // Delivered until acknowledged, as Mollie retries: every ack is the same bytes.
    for answer in answers.iter().filter(|a| a.status == 409) {
        assert!(answer.retry_after.is_some());
        assert_eq!(t.mollie("tr_five1").await.body, first);
    }
    assert_eq!(t.transfers(MOLLIE, "payment").await, 1);
    assert_eq!(t.clearing(MOLLIE).await, 2500);
}

#[tokio::test]
async fn mollie_a_payment_refunded_twice_between_two_webhooks_posts_both_refunds_once() {
    let t = Asked::start().await;
    let order = t.order(5000, "EUR").await;
    let path = "/v2/payments/tr_two1";
    t.emulator.put(
        path,
        &mollie_payment("tr_two1", "paid", "50.00", "0.00", "0.00", order),
    );
    assert_eq!(t.mollie("tr_two1").await.json()["outcome"], "applied");
    // Two refunds at Mollie (10.00, then 15.00) before either webhook arrives.
    t.emulator.put(
        path,
        &mollie_payment("tr_two1", "paid", "50.00", "10.00", "0.00", order),
    );
    t.emulator.put(
        path,
        &mollie_payment("tr_two1", "paid", "50.00", "25.00", "0.00", order),
    );
    let first = t.mollie("tr_two1").await;
    let second = t.mollie("tr_two1").await;
    assert_eq!(first.json()["outcome"], "applied", "{first:?}");
    assert_eq!((second.replayed, &second.body), (true, &first.body));
    assert_eq!(
        t.count("SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries WHERE account = 'merchant_payable'").await,
        -5000 + 2500,
        "both refunds, once"
    );
    assert_eq!(t.clearing(MOLLIE).await, 2500);
    assert_eq!(
        t.count(&format!(
            "SELECT count(*) FROM orders WHERE id = {order} AND status = 'partially_refunded'"
        ))
        .await,
        1
    );
}

#[tokio::test]
async fn mollie_a_state_first_seen_refunded_posts_the_capture_and_the_refund_in_one_event() {
    let t = Asked::start().await;
    let order = t.order(5000, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_late1",
        &mollie_payment("tr_late1", "paid", "50.00", "20.00", "0.00", order),
    );
    let answer = t.mollie("tr_late1").await;
    let ack = answer.json();
    assert_eq!(ack["outcome"], "applied", "{ack}");
    assert_eq!(
        ack["transfer_ids"].as_array().map(Vec::len),
        Some(2),
        "{ack}"
    );
    assert_eq!(t.clearing(MOLLIE).await, 3000);
}

#[tokio::test]
async fn a_fetch_holds_no_database_connection() {
    // One worker with one callback connection: a fetch that held it would keep every other
    // callback waiting for it.
    let t = Asked::start_with("[database]\npool_size = 1\n").await;
    let order = t.order(2500, "EUR").await;
    t.emulator.put(
        "/v2/payments/tr_slow1",
        &mollie_payment("tr_slow1", "paid", "25.00", "0.00", "0.00", order),
    );
    t.emulator.script(&[Scripted::Hold]);
    let held = t.mollie("tr_slow1");
    let other = async {
        t.emulator.until_held().await;
        // The Mollie fetch is stalled at its API now; a signed acme capture needs the
        // database, and gets it.
        let other_order = t.order(1999, "USD").await;
        let body = format!(
            r#"{{"id":"evt_while_held","type":"payment.succeeded","data":{{"payment_id":"pay_held","order_id":{other_order},"amount_minor":1999,"currency":"USD"}}}}"#
        );
        let (headers, body) = sign::signed_now(ACME, "evt_while_held", &body);
        let answer = t
            .post(ACME, "", &headers, "application/json", body.as_bytes())
            .await;
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer.json()["outcome"], "applied");
        assert_eq!(
            t.count("SELECT count(*) FROM ledger_transfers WHERE provider = 'mollie'")
                .await,
            0,
            "the Mollie delivery is still waiting for its API"
        );
        t.emulator.let_go();
    };
    let (held, ()) = tokio::join!(held, other);
    assert_eq!(held.json()["outcome"], "applied", "{held:?}");
}

// ---------------------------------------------------------------------------------------
// GoCardless
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn gocardless_a_capture_applies_once_and_its_redelivery_is_the_same_bytes() {
    let t = Asked::start().await;
    let order = t.order(2500, "GBP").await;
    t.emulator
        .put("/payments/PM001", &gocardless_payment("PM001", 2500, order));
    let events = [gocardless_event(
        "EV001",
        "payments",
        "confirmed",
        serde_json::json!({"payment": "PM001"}),
    )];
    let first = t.gocardless(&events, GOCARDLESS_SECRET).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["outcome"], "applied");
    assert_eq!(first.json()["event_id"], "EV001");
    let again = t.gocardless(&events, GOCARDLESS_SECRET).await;
    assert_eq!((again.replayed, &again.body), (true, &first.body));
    // paid_out of the same payment later: captured once.
    let paid_out = [gocardless_event(
        "EV002",
        "payments",
        "paid_out",
        serde_json::json!({"payment": "PM001"}),
    )];
    assert_eq!(
        t.gocardless(&paid_out, GOCARDLESS_SECRET).await.json()["reason"],
        "payment_already_captured"
    );
    assert_eq!(t.transfers(GOCARDLESS, "payment").await, 1);
    assert_eq!(t.clearing(GOCARDLESS).await, 2500);
}

#[tokio::test]
async fn gocardless_a_batch_refund_and_chargeback_post_each_event_on_its_own() {
    let t = Asked::start().await;
    let order = t.order(2500, "GBP").await;
    t.emulator
        .put("/payments/PM002", &gocardless_payment("PM002", 2500, order));
    t.emulator.put(
        "/refunds/RF002",
        r#"{"refunds":{"id":"RF002","amount":1000,"currency":"GBP","links":{"payment":"PM002","mandate":"MD1"}}}"#,
    );
    let batch = [
        gocardless_event(
            "EV010",
            "payments",
            "confirmed",
            serde_json::json!({"payment": "PM002"}),
        ),
        gocardless_event(
            "EV011",
            "refunds",
            "created",
            serde_json::json!({"refund": "RF002"}),
        ),
        gocardless_event(
            "EV012",
            "mandates",
            "created",
            serde_json::json!({"mandate": "MD1"}),
        ),
    ];
    let answer = t.gocardless(&batch, GOCARDLESS_SECRET).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (200, r#"{"received":true}"#),
        "{answer:?}"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM callback_deliveries WHERE provider = 'gocardless'")
            .await,
        3
    );
    assert_eq!(t.transfers(GOCARDLESS, "refund").await, 1);
    assert_eq!(t.emulator.requests("/refunds/RF002"), 1);
    let chargeback = [gocardless_event(
        "EV013",
        "payments",
        "charged_back",
        serde_json::json!({"payment": "PM002"}),
    )];
    assert_eq!(
        t.gocardless(&chargeback, GOCARDLESS_SECRET).await.json()["outcome"],
        "applied"
    );
    assert_eq!(t.transfers(GOCARDLESS, "chargeback").await, 1);
    assert_eq!(t.clearing(GOCARDLESS).await, 2500 - 1000 - 2500);
}

#[tokio::test]
async fn gocardless_a_forged_signature_moves_nothing_and_asks_nothing() {
    let t = Asked::start().await;
    let events = [gocardless_event(
        "EV020",
        "payments",
        "confirmed",
        serde_json::json!({"payment": "PM020"}),
    )];
    let forged = t.gocardless(&events, "not-the-endpoint-secret").await;
    assert_eq!(forged.status, 401, "{forged:?}");
    assert_eq!(
        t.emulator.all_requests(),
        0,
        "no fetch for a request that failed its signature"
    );
    assert_eq!(
        t.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
}

#[tokio::test]
async fn gocardless_the_api_answering_503_then_200_makes_the_first_delivery_503_and_the_retry_apply()
 {
    let t = Asked::start().await;
    let order = t.order(2500, "GBP").await;
    t.emulator
        .put("/payments/PM030", &gocardless_payment("PM030", 2500, order));
    t.emulator.script(&[Scripted::Status(503)]);
    let events = [gocardless_event(
        "EV030",
        "payments",
        "confirmed",
        serde_json::json!({"payment": "PM030"}),
    )];
    let first = t.gocardless(&events, GOCARDLESS_SECRET).await;
    assert_eq!(first.status, 503, "{first:?}");
    assert_eq!(
        t.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
    assert_eq!(
        t.gocardless(&events, GOCARDLESS_SECRET).await.json()["outcome"],
        "applied"
    );
}

// ---------------------------------------------------------------------------------------
// Mercado Pago
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn mercadopago_a_capture_applies_once_and_another_notification_of_it_is_the_same_bytes() {
    let t = Asked::start().await;
    let order = t.order(10050, "BRL").await;
    t.emulator.put(
        "/v1/payments/1001",
        &mercadopago_payment("1001", "approved", "100.5", "0", order),
    );
    let first = t.mercadopago("1001", "req-a", MERCADOPAGO_SECRET).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.json()["event_id"], "1001:approved");
    assert_eq!(first.json()["outcome"], "applied");
    // Mercado Pago's payment.created and payment.updated: another request, the same state.
    let again = t.mercadopago("1001", "req-b", MERCADOPAGO_SECRET).await;
    assert_eq!((again.replayed, &again.body), (true, &first.body));
    assert_eq!(t.clearing(MERCADOPAGO).await, 10050);
}

#[tokio::test]
async fn mercadopago_a_refund_and_a_chargeback_post() {
    let t = Asked::start().await;
    let order = t.order(10000, "BRL").await;
    let path = "/v1/payments/1002";
    t.emulator.put(
        path,
        &mercadopago_payment("1002", "approved", "100", "0", order),
    );
    assert_eq!(
        t.mercadopago("1002", "r1", MERCADOPAGO_SECRET).await.json()["outcome"],
        "applied"
    );
    t.emulator.put(
        path,
        &mercadopago_payment("1002", "approved", "100", "30.5", order),
    );
    let partial = t.mercadopago("1002", "r2", MERCADOPAGO_SECRET).await;
    assert_eq!(
        partial.json()["event_id"],
        "1002:approved:30.5",
        "{partial:?}"
    );
    assert_eq!(t.transfers(MERCADOPAGO, "refund").await, 1);
    t.emulator.put(
        path,
        &mercadopago_payment("1002", "charged_back", "100", "30.5", order),
    );
    assert_eq!(
        t.mercadopago("1002", "r3", MERCADOPAGO_SECRET).await.json()["outcome"],
        "applied"
    );
    assert_eq!(t.transfers(MERCADOPAGO, "chargeback").await, 1);
    assert_eq!(
        t.clearing(MERCADOPAGO).await,
        0,
        "what refunds left was charged back"
    );
}

#[tokio::test]
async fn mercadopago_a_forged_signature_moves_nothing_and_asks_nothing() {
    let t = Asked::start().await;
    let forged = t
        .mercadopago("1003", "req-x", "not-the-signature-secret")
        .await;
    assert_eq!(forged.status, 401, "{forged:?}");
    assert_eq!(t.emulator.all_requests(), 0);
    assert_eq!(
        t.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
}

#[tokio::test]
async fn mercadopago_the_api_answering_503_then_200_makes_the_first_delivery_503_and_the_retry_apply()
 {
    let t = Asked::start().await;
    let order = t.order(10000, "BRL").await;
    t.emulator.put(
        "/v1/payments/1004",
        &mercadopago_payment("1004", "approved", "100", "0", order),
    );
    t.emulator.script(&[Scripted::Status(503)]);
    let first = t.mercadopago("1004", "req-1", MERCADOPAGO_SECRET).await;
    assert_eq!(first.status, 503, "{first:?}");
    let retry = t.mercadopago("1004", "req-2", MERCADOPAGO_SECRET).await;
    assert_eq!(retry.json()["outcome"], "applied", "{retry:?}");
}

// ---------------------------------------------------------------------------------------
// Braintree
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn braintree_a_capture_applies_once_and_its_redelivery_is_the_same_bytes() {
    let t = Asked::start().await;
    let order = t.order(4620, "EUR").await;
    let form = braintree_form(
        "transaction_settled",
        "2026-12-03T10:00:00Z",
        &braintree_sale("bt_sale1", "46.20", order),
    );
    let first = t.braintree(&form).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(
        first.json()["event_id"],
        "transaction_settled:bt_sale1:2026-12-03T10:00:00Z"
    );
    assert_eq!(first.json()["outcome"], "applied");
    let again = t.braintree(&form).await;
    assert_eq!((again.replayed, &again.body), (true, &first.body));
    assert_eq!(t.clearing(BRAINTREE).await, 4620);
}

#[tokio::test]
async fn braintree_a_refund_and_a_chargeback_post() {
    let t = Asked::start().await;
    let order = t.order(4620, "EUR").await;
    let sale = braintree_form(
        "transaction_settled",
        "2026-12-03T10:00:00Z",
        &braintree_sale("bt_sale2", "46.20", order),
    );
    assert_eq!(t.braintree(&sale).await.json()["outcome"], "applied");
    let credit = braintree_form(
        "transaction_settled",
        "2026-12-03T11:00:00Z",
        "<transaction><id>bt_credit2</id><type>credit</type><currency-iso-code>EUR</currency-iso-code><amount>10.00</amount><refunded-transaction-id>bt_sale2</refunded-transaction-id></transaction>",
    );
    assert_eq!(t.braintree(&credit).await.json()["outcome"], "applied");
    let dispute = braintree_form(
        "dispute_opened",
        "2026-12-03T12:00:00Z",
        "<dispute><id>bt_dp2</id><kind>chargeback</kind><amount-disputed>20.00</amount-disputed><currency-iso-code>EUR</currency-iso-code><transaction><id>bt_sale2</id><amount>46.20</amount></transaction></dispute>",
    );
    assert_eq!(t.braintree(&dispute).await.json()["outcome"], "applied");
    assert_eq!(t.transfers(BRAINTREE, "refund").await, 1);
    assert_eq!(t.transfers(BRAINTREE, "chargeback").await, 1);
    assert_eq!(t.clearing(BRAINTREE).await, 4620 - 1000 - 2000);
}

#[tokio::test]
async fn braintree_its_sdks_own_sample_notification_verifies_and_one_byte_changed_does_not() {
    let t = Asked::start().await;
    let vectors: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/braintree.json"
        ))
        .unwrap(),
    )
    .unwrap();
    // Source: braintree 4.48.0 (PyPI), WebhookTestingGateway.sample_notification (see the file).
    let vector = &vectors["vectors"][0];
    let form = |signature: &str, payload: &str| {
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("bt_signature", signature)
            .append_pair("bt_payload", payload)
            .finish()
            .into_bytes()
    };
    let signature = vector["bt_signature"].as_str().unwrap();
    let payload = vector["bt_payload"].as_str().unwrap();
    let answer = t.braintree(&form(signature, payload)).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    // The SDK's sample names no order: the captured money is held, never lost.
    assert_eq!(answer.json()["outcome"], "held", "{answer:?}");
    let mut changed = payload.as_bytes().to_vec();
    changed[5] = if changed[5] == b'A' { b'B' } else { b'A' };
    let forged = t
        .braintree(&form(signature, std::str::from_utf8(&changed).unwrap()))
        .await;
    assert_eq!(forged.status, 401, "{forged:?}");
    assert_eq!(t.count("SELECT count(*) FROM callback_deliveries").await, 1);
}

#[tokio::test]
async fn braintree_a_forged_signature_moves_nothing() {
    let t = Asked::start().await;
    let order = t.order(4620, "EUR").await;
    let form = braintree_form(
        "transaction_settled",
        "2026-12-03T10:00:00Z",
        &braintree_sale("bt_sale3", "46.20", order),
    );
    let text = String::from_utf8(form).unwrap();
    let forged = text.replace(BRAINTREE_PUBLIC, "someone_elses_public_key");
    assert_eq!(t.braintree(forged.as_bytes()).await.status, 401);
    assert_eq!(
        t.count("SELECT count(*) FROM idempotency_keys WHERE op = 'payment.callback'")
            .await,
        0
    );
}
