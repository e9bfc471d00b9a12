//! End to end with localstripe (the PyPI package `localstripe`, 1.15.10), a fake Stripe API
//! server: the payouts' webhooks are localstripe's own (its JSON, pretty-printed and sorted; its
//! `Stripe-Signature: t=..,v1=..` under the Stripe provider's secret), sent over HTTP to the
//! gateway's `/v1/callbacks/stripe` as Stripe would, one second after each payout is created.
//!
//! The capture is delivered as the other tests do: localstripe does emit
//! `payment_intent.succeeded` when a PaymentIntent is confirmed, but its PaymentIntent has no
//! `amount_received` (real Stripe's always has), which the gateway books from.
//!
//! localstripe has no balance transactions of a payout nor reports, so `settle` cannot be
//! driven by it (tests/api/settlement.rs feeds `settle` its reports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::settlement::{at, balances};
use crate::support::cluster::free_port;
use crate::support::{MERCHANT, STRIPE, STRIPE_SECRET, TestApp, answer, spawn_app_with};

/// Every wait of this test ends here: a webhook that never comes fails the test.
const DEADLINE: Duration = Duration::from_secs(30);
const INTERVAL: Duration = Duration::from_millis(50);
/// localstripe takes any `sk_` key.
const API_KEY: &str = "sk_test_callback_gateway";
const MISSING: &str = "the Python package localstripe is missing: python3 -m pip install localstripe (scripts/test installs it)";

/// Runs localstripe's own `start()` (its CLI: `--port`, `--from-scratch`) with its store kept in
/// memory only: it would pickle the store to /tmp/localstripe.pickle after every write, one
/// file every localstripe on the machine shares.
const LAUNCHER: &str = r#"
import sys
import localstripe.resources
localstripe.resources.Store.dump_to_disk = lambda self: None
from localstripe.server import start
sys.argv = ["localstripe", "--port", sys.argv[1], "--from-scratch"]
start()
"#;

/// A localstripe child process on a free local port; killed on drop.
struct LocalStripe {
    child: Child,
    base: String,
    dir: PathBuf,
    client: reqwest::Client,
}

impl LocalStripe {
    async fn start() -> Self {
        match Command::new("python3")
            .args(["-c", "import localstripe"])
            .output()
        {
            Ok(probe) if probe.status.success() => {}
            Ok(probe) => panic!("{MISSING}\n{}", String::from_utf8_lossy(&probe.stderr)),
            Err(e) => panic!("cannot run python3 ({e}); {MISSING}"),
        }
        let dir =
            std::env::temp_dir().join(format!("cg-localstripe-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = std::fs::File::create(dir.join("localstripe.log")).unwrap();
        let port = free_port();
        let child = Command::new("python3")
            .args(["-c", LAUNCHER, &port.to_string()])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start localstripe: {e}"));
        let mut stripe = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            dir,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
        };
        // Up once it serves its Stripe.js (the one page that needs no key).
        let started = Instant::now();
        loop {
            if let Some(status) = stripe.child.try_wait().unwrap() {
                panic!("localstripe exited ({status}):\n{}", stripe.log());
            }
            let page = stripe
                .client
                .get(format!("{}/js.stripe.com/v3/", stripe.base))
                .send()
                .await;
            if page.is_ok_and(|page| page.status().is_success()) {
                return stripe;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "localstripe did not answer on {} within {DEADLINE:?}:\n{}",
                stripe.base,
                stripe.log()
            );
            tokio::time::sleep(INTERVAL).await;
        }
    }

    /// What localstripe printed (its access log and each webhook's fate).
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("localstripe.log")).unwrap_or_default()
    }

    async fn json(&self, request: reqwest::RequestBuilder) -> Value {
        let response = request.bearer_auth(API_KEY).send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "localstripe answered {status}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// Registers a webhook endpoint for every event type (`POST /_config/webhooks/{id}`).
    async fn send_webhooks_to(&self, url: &str, secret: &str) {
        let response = self
            .client
            .post(format!("{}/_config/webhooks/gateway", self.base))
            .form(&[("url", url), ("secret", secret)])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", self.log());
    }

    /// Creates an EUR payout of `amount` minor units in `status` (`paid`, `failed`); returns
    /// its id. localstripe sends `payout.created` and `payout.<status>` a second later.
    async fn payout(&self, amount: i64, status: &str) -> String {
        let amount = amount.to_string();
        let payout = self
            .json(
                self.client
                    .post(format!("{}/v1/payouts", self.base))
                    .form(&[
                        ("amount", amount.as_str()),
                        ("currency", "eur"),
                        ("status", status),
                    ]),
            )
            .await;
        assert_eq!(payout["status"], status, "{payout}");
        payout["id"].as_str().unwrap().to_owned()
    }

    /// Every event localstripe made (each one it sends to every webhook), by id.
    async fn events(&self) -> BTreeMap<String, Value> {
        let list = self
            .json(
                self.client
                    .get(format!("{}/v1/events?limit=100", self.base)),
            )
            .await;
        assert_eq!(list["has_more"], false, "{list}");
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|event| (event["id"].as_str().unwrap().to_owned(), event.clone()))
            .collect()
    }

    /// The id of the `kind` event of payout `payout_id`.
    async fn event_of(&self, kind: &str, payout_id: &str) -> String {
        let events = self.events().await;
        let mut ids = events.iter().filter(|(_, event)| {
            event["type"] == kind && event["data"]["object"]["id"] == payout_id
        });
        let (id, _) = ids
            .next()
            .unwrap_or_else(|| panic!("localstripe made no {kind} of {payout_id}: {events:?}"));
        assert!(ids.next().is_none(), "two {kind} of {payout_id}");
        id.clone()
    }
}

impl Drop for LocalStripe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A capture of `amount` EUR of a new order, delivered signed as Stripe sends it; returns its
/// event id.
async fn capture(app: &TestApp, amount: i64) -> String {
    let order = app.create_order(MERCHANT, amount, "EUR").await;
    let event = format!("evt_pi_{order}");
    let paid = format!(
        r#"{{"id":"{event}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_{order}","object":"payment_intent","amount_received":{amount},"currency":"eur","metadata":{{"order_id":"{order}"}}}}}}}}"#
    );
    let (status, _, ack) = answer(app.deliver(STRIPE, &event, &paid).await).await;
    assert_eq!(status, 200, "{ack}");
    let ack: Value = serde_json::from_str(&ack).unwrap();
    assert_eq!(ack["outcome"], "applied", "{ack}");
    event
}

/// Polls the balances until `expected` holds; returns them.
async fn until_balances(
    app: &TestApp,
    stripe: &LocalStripe,
    expected: impl Fn(&BTreeMap<String, i64>) -> bool,
) -> BTreeMap<String, i64> {
    let started = Instant::now();
    loop {
        let books = balances(app).await;
        if expected(&books) {
            return books;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the balances after {DEADLINE:?}: {books:?}\nlocalstripe:\n{}",
            stripe.log()
        );
        tokio::time::sleep(INTERVAL).await;
    }
}

/// The gateway's record of Stripe event `id` (`GET /admin/events/stripe/{id}`), once it has it:
/// it is written in the transaction the delivery's answer waits for.
async fn stored(app: &TestApp, stripe: &LocalStripe, id: &str) -> Value {
    let started = Instant::now();
    loop {
        let (status, _, body) =
            answer(app.admin_get(&format!("/admin/events/{STRIPE}/{id}")).await).await;
        match status {
            200 => return serde_json::from_str(&body).unwrap(),
            404 => {}
            _ => panic!("GET /admin/events/{STRIPE}/{id}: {status} {body}"),
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the gateway has no {id} after {DEADLINE:?}\nlocalstripe:\n{}",
            stripe.log()
        );
        tokio::time::sleep(INTERVAL).await;
    }
}

/// The ids of every Stripe event the gateway keeps.
async fn stored_ids(app: &TestApp) -> BTreeSet<String> {
    let (status, _, body) = answer(
        app.admin_get(&format!("/admin/events?provider={STRIPE}&limit=200"))
            .await,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert!(page["next_cursor"].is_null(), "{page}");
    page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["event_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn localstripes_paid_payout_moves_clearing_to_the_bank_and_its_failed_one_books_nothing() {
    let stripe = LocalStripe::start().await;
    let app = spawn_app_with("").await;
    stripe
        .send_webhooks_to(&app.url(&format!("/v1/callbacks/{STRIPE}")), STRIPE_SECRET)
        .await;
    let capture_event = capture(&app, 10_000).await;

    // 60.00 paid out: the bank has it, 40.00 stays at Stripe.
    let paid = stripe.payout(6000, "paid").await;
    let books = until_balances(&app, &stripe, |books| {
        at(books, "bank:stripe:EUR/EUR") == 6000 && at(books, "psp_clearing:stripe/EUR") == 4000
    })
    .await;
    let paid_event = stripe.event_of("payout.paid", &paid).await;
    let event = stored(&app, &stripe, &paid_event).await;
    assert_eq!(
        (&event["outcome"], &event["reason"], &event["status"]),
        (&Value::from("applied"), &Value::Null, &Value::from(200)),
        "{event}"
    );
    assert!(event["transfer_id"].is_i64(), "{event}");

    // 10.00 created failed (no payout.paid before it): answered, and nothing booked.
    let failed = stripe.payout(1000, "failed").await;
    let failed_event = stripe.event_of("payout.failed", &failed).await;
    let event = stored(&app, &stripe, &failed_event).await;
    assert_eq!(
        (&event["outcome"], &event["reason"], &event["status"]),
        (&Value::from("applied"), &Value::Null, &Value::from(200)),
        "{event}"
    );
    assert!(event["transfer_id"].is_null(), "{event}");
    assert_eq!(balances(&app).await, books);
    assert_eq!(
        app.count("SELECT count(*) FROM ledger_transfers WHERE kind LIKE 'payout%'")
            .await,
        1
    );

    // The gateway keeps exactly localstripe's events, under localstripe's ids, each body as
    // localstripe made it; the payouts' `payout.created` are ignored.
    let sent = stripe.events().await;
    let mut kinds: Vec<&str> = sent.values().map(|e| e["type"].as_str().unwrap()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "payout.created",
            "payout.created",
            "payout.failed",
            "payout.paid"
        ]
    );
    for (id, body) in &sent {
        let event = stored(&app, &stripe, id).await;
        let raw: Value = serde_json::from_str(event["raw_body"].as_str().unwrap()).unwrap();
        assert_eq!(&raw, body, "{id}");
        if body["type"] == "payout.created" {
            assert_eq!(
                (&event["outcome"], &event["reason"]),
                (
                    &Value::from("ignored"),
                    &Value::from("unsupported_event_type")
                ),
                "{event}"
            );
        }
    }
    let mut expected: BTreeSet<String> = sent.into_keys().collect();
    expected.insert(capture_event);
    assert_eq!(stored_ids(&app).await, expected);
    assert_eq!(balances(&app).await, books);
}
