//! Several endpoints per merchant (issue 56), through the real binary and real receivers on
//! 127.0.0.1: each endpoint receives exactly the event types its filter names, each type in its
//! order's order; a rate-limited endpoint gets a burst at its rate and loses none; an operator's
//! disable holds for one endpoint and not the others; the eleventh endpoint is refused and
//! nothing is half-written.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::endpoints::{KEY, call, merchant_token, python_verifies, until_loaded};
use crate::notifications::{capture, refund};
use crate::support::gateway::GatewayProcess;
use crate::support::receiver::{Delivery, Receiver};
use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, OTHER_MERCHANT, config_with, connect, fresh_database, sign, until,
};

/// The key, plain http by API, quick polls, and merchant 42 allowed each receiver's origin.
fn config(database_url: &str, origins: &[String], more: &str) -> String {
    let origins: Vec<String> = origins.iter().map(|o| format!("\"{o}\"")).collect();
    config_with(
        database_url,
        &format!(
            "[secrets]\nkey = \"{KEY}\"\n[notifications]\nallow_http = true\npoll_interval_ms = 100\n\
             retry_delays_ms = [300, 600]\nattempt_timeout_ms = 2000\n{more}\n\
             [[merchants]]\nid = {MERCHANT}\nallow_hosts = [{}]\n",
            origins.join(", ")
        ),
    )
}

/// Merchant 42's new endpoint at `url` with `fields` added; its answer (with its secret).
async fn endpoint(gateway: &GatewayProcess, token: &str, url: &str, fields: Value) -> Value {
    let mut body = json!({"url": url});
    for (name, value) in fields.as_object().unwrap() {
        body[name] = value.clone();
    }
    let (status, created) = call(
        gateway,
        reqwest::Method::POST,
        token,
        "/v1/webhook-endpoints",
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    created
}

/// A new order of merchant 42 for `amount` (USD); its id.
async fn order(db: &tokio_postgres::Client, amount: i64) -> i64 {
    db.query_one(
        "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, $2, 'USD') RETURNING id",
        &[&MERCHANT, &amount],
    )
    .await
    .unwrap()
    .get(0)
}

/// Delivers `body` signed as ACME's event `event`; the gateway must answer 200.
async fn deliver(gateway: &GatewayProcess, event: &str, body: &str) -> Value {
    let (headers, body) = sign::signed_now(ACME, event, body);
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let ack: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{ack}");
    ack
}

/// The types of `deliveries`, each with its order, in arrival order.
fn types(deliveries: &[Delivery]) -> Vec<(String, i64)> {
    deliveries
        .iter()
        .map(|d| {
            (
                d.kind().to_owned(),
                d.json["data"]["order_id"].as_i64().unwrap_or(0),
            )
        })
        .collect()
}

/// How many rows were staged for each endpoint id.
async fn staged_per_endpoint(db: &tokio_postgres::Client) -> BTreeMap<String, i64> {
    db.query(
        "SELECT endpoint_id, count(*) FROM merchant_notifications GROUP BY endpoint_id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|row| (row.get(0), row.get(1)))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_filtered_endpoints_and_one_unfiltered_each_receive_exactly_their_types_in_order() {
    let database_url = fresh_database().await;
    let paid = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let refunds = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let all = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let origins = [paid.origin(), refunds.origin(), all.origin()];
    let gateway =
        GatewayProcess::spawn_on(&database_url, &config(&database_url, &origins, "")).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let paid_ep = endpoint(
        &gateway,
        &token,
        &paid.url,
        json!({"filter_types": ["order.paid"]}),
    )
    .await;
    assert_eq!(paid_ep["filter_types"], json!(["order.paid"]));
    let refunds_ep = endpoint(
        &gateway,
        &token,
        &refunds.url,
        json!({"filter_types": ["order.refunded", "order.partially_refunded", "order.refunded"]}),
    )
    .await;
    assert_eq!(
        refunds_ep["filter_types"],
        json!(["order.partially_refunded", "order.refunded"]),
        "sorted, each once"
    );
    let all_ep = endpoint(&gateway, &token, &all.url, json!({})).await;
    assert_eq!(all_ep["filter_types"], json!([]));
    until_loaded(&gateway, &db).await;
    // Two orders paid, the first refunded in two steps, and a third paid short (held).
    let first = order(&db, 1000).await;
    let second = order(&db, 2000).await;
    let short = order(&db, 3000).await;
    deliver(&gateway, "evt_p1", &capture("evt_p1", "pay_1", first, 1000)).await;
    deliver(
        &gateway,
        "evt_p2",
        &capture("evt_p2", "pay_2", second, 2000),
    )
    .await;
    deliver(&gateway, "evt_r1", &refund("evt_r1", "pay_1", first, 300)).await;
    deliver(&gateway, "evt_r2", &refund("evt_r2", "pay_1", first, 700)).await;
    let held = deliver(&gateway, "evt_h", &capture("evt_h", "pay_h", short, 2999)).await;
    assert_eq!(held["outcome"], "held");

    let got_all = all.until_delivered(5).await;
    let got_paid = paid.until_delivered(2).await;
    let got_refunds = refunds.until_delivered(2).await;
    // Every staged row of merchant 42 delivered: nothing else is still on its way.
    until("every staged notification delivered", async || {
        db.query_one(
            "SELECT count(*) FROM merchant_notifications WHERE status <> 'delivered'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
            == 0
    })
    .await;
    let mut unfiltered = types(&got_all);
    unfiltered.sort();
    let mut expected = vec![
        ("order.paid".to_owned(), first),
        ("order.paid".to_owned(), second),
        ("order.partially_refunded".to_owned(), first),
        ("order.refunded".to_owned(), first),
        ("payment.held".to_owned(), short),
    ];
    expected.sort();
    assert_eq!(
        unfiltered, expected,
        "the unfiltered endpoint gets every type"
    );
    let mut paid_types = types(&got_paid);
    paid_types.sort();
    assert_eq!(
        paid_types,
        [
            ("order.paid".to_owned(), first),
            ("order.paid".to_owned(), second)
        ]
    );
    assert_eq!(
        types(&got_refunds),
        [
            ("order.partially_refunded".to_owned(), first),
            ("order.refunded".to_owned(), first)
        ],
        "in the order of the order's changes"
    );
    // One order's notifications reach each endpoint in the order they happened.
    let first_at_all: Vec<String> = got_all
        .iter()
        .filter(|d| d.json["data"]["order_id"] == first)
        .map(|d| d.kind().to_owned())
        .collect();
    assert_eq!(
        first_at_all,
        ["order.paid", "order.partially_refunded", "order.refunded"]
    );
    // Each signed with its own endpoint's secret, and only that one.
    for (receiver, created, others) in [
        (&paid, &paid_ep, [&refunds_ep, &all_ep]),
        (&refunds, &refunds_ep, [&paid_ep, &all_ep]),
        (&all, &all_ep, [&paid_ep, &refunds_ep]),
    ] {
        for delivery in receiver.hooks() {
            assert!(python_verifies(
                created["secret"].as_str().unwrap(),
                &delivery
            ));
            for other in others {
                assert!(!python_verifies(
                    other["secret"].as_str().unwrap(),
                    &delivery
                ));
            }
        }
    }
    // Staged once per subscribed endpoint, nothing for the file endpoint.
    let staged = staged_per_endpoint(&db).await;
    let id = |created: &Value| created["id"].as_str().unwrap().to_owned();
    assert_eq!(
        staged,
        BTreeMap::from([(id(&paid_ep), 2), (id(&refunds_ep), 2), (id(&all_ep), 5)])
    );
    // Nothing more arrives afterwards (a second copy would come within a poll).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        (paid.hooks().len(), refunds.hooks().len(), all.hooks().len()),
        (2, 2, 5)
    );

    // The filter changes by PATCH and holds for the next change.
    let (status, changed) = call(
        &gateway,
        reqwest::Method::PATCH,
        &token,
        &format!("/v1/webhook-endpoints/{}", id(&paid_ep)),
        Some(json!({"filter_types": ["payment.held"]})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    let third = order(&db, 400).await;
    deliver(&gateway, "evt_p3", &capture("evt_p3", "pay_3", third, 400)).await;
    deliver(&gateway, "evt_h2", &capture("evt_h2", "pay_h2", third, 1)).await;
    all.until_delivered(7).await;
    let later = paid.until_delivered(3).await;
    assert_eq!(later[2].kind(), "payment.held");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        paid.hooks().len(),
        3,
        "the paid capture no longer goes there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_endpoint_gets_a_burst_at_its_rate_and_loses_none() {
    const RATE: usize = 5;
    const BURST: usize = 20;
    let database_url = fresh_database().await;
    let limited = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let free = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let origins = [limited.origin(), free.origin()];
    let gateway =
        GatewayProcess::spawn_on(&database_url, &config(&database_url, &origins, "")).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let created = endpoint(
        &gateway,
        &token,
        &limited.url,
        json!({"rate_limit_per_sec": RATE}),
    )
    .await;
    assert_eq!(created["rate_limit_per_sec"], RATE);
    endpoint(&gateway, &token, &free.url, json!({})).await;
    until_loaded(&gateway, &db).await;
    for n in 0..BURST {
        let order = order(&db, 100).await;
        let event = format!("evt_burst_{n}");
        deliver(
            &gateway,
            &event,
            &capture(&event, &format!("pay_b{n}"), order, 100),
        )
        .await;
    }
    let unlimited = free.until_delivered(BURST).await;
    let held = limited.until_delivered(BURST).await;
    // None lost, none twice: each order's one notification, once.
    let mut orders: Vec<i64> = held
        .iter()
        .map(|d| d.json["data"]["order_id"].as_i64().unwrap())
        .collect();
    orders.sort_unstable();
    orders.dedup();
    assert_eq!(orders.len(), BURST);
    assert_eq!(limited.hooks().len(), BURST, "no attempt beyond one each");
    // Held to its rate: any RATE + 1 consecutive arrivals span at least a second (less the
    // network's jitter between the sender's turn and the receiver's clock).
    for window in held.windows(RATE + 1) {
        let span = window[RATE].at - window[0].at;
        assert!(
            span >= Duration::from_millis(900),
            "{} notifications within {span:?}",
            RATE + 1
        );
    }
    // The unlimited endpoint of the same merchant was not held back with it.
    let unlimited_span = unlimited[BURST - 1].at - unlimited[0].at;
    let limited_span = held[BURST - 1].at - held[0].at;
    assert!(
        unlimited_span < limited_span,
        "unlimited {unlimited_span:?}, limited {limited_span:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_disables_one_endpoint_and_the_merchants_others_go_on() {
    let database_url = fresh_database().await;
    let first = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let second = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let origins = [first.origin(), second.origin()];
    let gateway =
        GatewayProcess::spawn_on(&database_url, &config(&database_url, &origins, "")).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let stopped = endpoint(&gateway, &token, &first.url, json!({})).await;
    endpoint(&gateway, &token, &second.url, json!({})).await;
    let stopped_id = stopped["id"].as_str().unwrap();
    let (status, disabled) = call(
        &gateway,
        reqwest::Method::PATCH,
        ADMIN_TOKEN,
        &format!("/admin/merchants/{MERCHANT}/webhook-endpoints/{stopped_id}"),
        Some(json!({"disabled": true})),
    )
    .await;
    assert_eq!(status, 200, "{disabled}");
    assert_eq!(disabled["disabled_reason"], "operator");
    until_loaded(&gateway, &db).await;
    let paid = order(&db, 100).await;
    deliver(&gateway, "evt_d1", &capture("evt_d1", "pay_d1", paid, 100)).await;
    second.until_delivered(1).await;
    // The merchant may not enable what the operator disabled, nor add an endpoint meanwhile.
    let (status, refused) = call(
        &gateway,
        reqwest::Method::PATCH,
        &token,
        &format!("/v1/webhook-endpoints/{stopped_id}"),
        Some(json!({"disabled": false})),
    )
    .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (409, Some("endpoint_disabled_by_operator"))
    );
    let pending: i64 = db
        .query_one(
            "SELECT count(*) FROM merchant_notifications WHERE endpoint_id = $1 AND status = 'pending'",
            &[&stopped_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, 1, "its notification waits for it");
    assert!(first.hooks().is_empty());
    // The operator's enable sends it.
    let (status, _) = call(
        &gateway,
        reqwest::Method::PATCH,
        ADMIN_TOKEN,
        &format!("/admin/merchants/{MERCHANT}/webhook-endpoints/{stopped_id}"),
        Some(json!({"disabled": false})),
    )
    .await;
    assert_eq!(status, 200);
    let arrived = first.until_delivered(1).await;
    assert_eq!(arrived[0].json["data"]["order_id"], paid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eleventh_endpoint_is_refused_and_two_racing_for_the_last_place_get_one() {
    let database_url = fresh_database().await;
    let gateway = GatewayProcess::spawn_on(&database_url, &config(&database_url, &[], "")).await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    for n in 0..9 {
        endpoint(
            &gateway,
            &token,
            &format!("https://merchant.example/hooks/{n}"),
            json!({}),
        )
        .await;
    }
    // Two at once for the tenth place: one is made, the other refused.
    let racing = |n: usize| {
        call(
            &gateway,
            reqwest::Method::POST,
            &token,
            "/v1/webhook-endpoints",
            Some(json!({"url": format!("https://merchant.example/race/{n}")})),
        )
    };
    let ((a, _), (b, _)) = tokio::join!(racing(1), racing(2));
    let mut statuses = [a, b];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 409]);
    let (status, refused) = call(
        &gateway,
        reqwest::Method::POST,
        &token,
        "/v1/webhook-endpoints",
        Some(json!({"url": "https://merchant.example/eleventh"})),
    )
    .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (409, Some("too_many_endpoints")),
        "{refused}"
    );
    let stored: (i64, i64) = {
        let row = db
            .query_one(
                "SELECT (SELECT count(*) FROM webhook_endpoints), \
                        (SELECT count(*) FROM audit_log WHERE action = 'webhook_endpoint.create')",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        stored,
        (10, 10),
        "ten endpoints, ten audit rows, nothing else"
    );
    // Another merchant has its own ten.
    let other = merchant_token(&database_url, OTHER_MERCHANT);
    endpoint(&gateway, &other, "https://other.example/hooks", json!({})).await;
}
