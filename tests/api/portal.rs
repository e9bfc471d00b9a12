//! The merchant portal (issue 56), through the real binary: a one-time link opens a session
//! scoped to /portal, once and before it expires; a session sees its own merchant's endpoints,
//! notifications and events, and gets nothing of another's; every form needs its session's
//! token, bad input is a form error that stores nothing, and every change is an audit row of
//! `merchant:<id>`. Then the whole story in headless Chromium, with screenshots under
//! target/console-screenshots/portal-*.png.

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

use crate::console::{
    Driver, Screenshots, click_id, no_redirects, path_of, settled_done, settled_path, text_of,
    texts,
};
use crate::endpoints::{KEY, call, merchant_token, until_loaded};
use crate::notifications::capture;
use crate::support::gateway::GatewayProcess;
use crate::support::receiver::{Answer, Receiver};
use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, OTHER_MERCHANT, config_with, connect, fresh_database, sign, until,
};

/// The key, plain http by API, quick polls, two attempts 200 ms apart; `origins` granted to
/// merchant 42 and `other` to merchant 43.
fn config(database_url: &str, origins: &[String], other: &[String]) -> String {
    let list = |o: &[String]| {
        o.iter()
            .map(|o| format!("\"{o}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    config_with(
        database_url,
        &format!(
            "[secrets]\nkey = \"{KEY}\"\n[notifications]\nallow_http = true\npoll_interval_ms = 100\n\
             retry_delays_ms = [200]\nattempt_timeout_ms = 2000\n\
             [[merchants]]\nid = {MERCHANT}\nallow_hosts = [{}]\n\
             [[merchants]]\nid = {OTHER_MERCHANT}\nallow_hosts = [{}]\n",
            list(origins),
            list(other)
        ),
    )
}

/// A new link of `token`'s merchant: its path.
async fn link(gateway: &GatewayProcess, token: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/portal-sessions", gateway.address()))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let body: Value = response.json().await.unwrap();
    let path = body["path"].as_str().unwrap().to_owned();
    assert!(path.starts_with("/portal/open/"), "{body}");
    assert_eq!(
        body["url"],
        path.as_str(),
        "no [portal] public_url: the path"
    );
    path
}

/// Opens link `path` as a browser's button does: the session cookie (`name=value`), or `None`
/// with the status when refused.
async fn open(gateway: &GatewayProcess, path: &str) -> Result<String, u16> {
    let token = path.trim_start_matches("/portal/open/");
    let response = no_redirects()
        .post(format!("{}/portal/open", gateway.address()))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    if response.status() != 303 {
        assert!(response.headers().get("set-cookie").is_none());
        return Err(response.status().as_u16());
    }
    assert_eq!(response.headers()["location"], "/portal");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/portal"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    Ok(cookie.split(';').next().unwrap().to_owned())
}

/// A page of the portal with `cookie`: its status and body.
async fn page(gateway: &GatewayProcess, cookie: &str, path: &str) -> (u16, String) {
    let response = no_redirects()
        .get(format!("{}{path}", gateway.address()))
        .header("Cookie", cookie)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Posts `form` to `path` with `cookie`: the status, the `Location`, the body.
async fn post(
    gateway: &GatewayProcess,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
) -> (u16, String, String) {
    let response = no_redirects()
        .post(format!("{}{path}", gateway.address()))
        .header("Cookie", cookie)
        .form(form)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, location, response.text().await.unwrap())
}

/// The session's form token, read from a page of it.
fn csrf_of(body: &str) -> String {
    body.split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned()
}

/// Merchant 43's endpoint (made by API) and a `ping` of it: (endpoint id, notification id).
async fn other_merchants(gateway: &GatewayProcess, token: &str, url: &str) -> (String, i64) {
    let (status, created) = call(
        gateway,
        reqwest::Method::POST,
        token,
        "/v1/webhook-endpoints",
        Some(json!({"url": url})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, pinged) = call(
        gateway,
        reqwest::Method::POST,
        token,
        &format!("/v1/webhook-endpoints/{id}/test"),
        None,
    )
    .await;
    assert_eq!(status, 202);
    (id, pinged["notification_id"].as_i64().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_opens_one_session_once_and_the_session_sees_its_own_merchant_only() {
    let database_url = fresh_database().await;
    // Every request's line in its log, to look for the link's token there.
    let gateway = GatewayProcess::spawn_on_with_env(
        &database_url,
        &config(&database_url, &[], &[]),
        &[("RUST_LOG", "info")],
    )
    .await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let other_token = merchant_token(&database_url, OTHER_MERCHANT);
    let (other_endpoint, other_notification) =
        other_merchants(&gateway, &other_token, "https://other.example/hooks").await;

    // No session: nothing but the page that says so.
    let (status, body) = page(&gateway, "cg_portal=made-up", "/portal").await;
    assert_eq!(status, 401);
    assert!(!body.contains("other.example"));

    // Looking at the link spends nothing (a chat preview fetching it leaves it usable); the
    // button does, once.
    let path = link(&gateway, &token).await;
    // Another site's form cannot open it in its visitor's browser (and does not spend it).
    for (name, value) in [
        ("Sec-Fetch-Site", "cross-site"),
        ("Origin", "https://attacker.example"),
    ] {
        let response = no_redirects()
            .post(format!("{}/portal/open", gateway.address()))
            .header(name, value)
            .form(&[("token", path.trim_start_matches("/portal/open/"))])
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403, "{name}: {value}");
        assert!(response.headers().get("set-cookie").is_none());
    }
    let (status, body) = page(&gateway, "", &path).await;
    assert_eq!(status, 200);
    assert!(body.contains("id=\"open\""));
    let cookie = open(&gateway, &path).await.unwrap();
    assert_eq!(
        open(&gateway, &path).await,
        Err(404),
        "a second use gives nothing"
    );
    // The link's token is in no log line: whoever reads the logs cannot open it first.
    let link_token = path.trim_start_matches("/portal/open/");
    until("the link's request in the log", async || {
        gateway.log().contains("/portal/open/")
    })
    .await;
    assert!(!gateway.log().contains(link_token), "the token is logged");
    assert!(gateway.log().contains("/portal/open/(token hidden)"));
    // An expired link gives nothing.
    let late = link(&gateway, &token).await;
    db.execute(
        "UPDATE portal_links SET expires_at = now() - interval '1 second' WHERE opened_at IS NULL",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(open(&gateway, &late).await, Err(404));
    assert_eq!(open(&gateway, "/portal/open/not-a-link").await, Err(404));
    // An operator's link: for a merchant that holds a token, not for a typo.
    let (status, made) = call(
        &gateway,
        reqwest::Method::POST,
        ADMIN_TOKEN,
        &format!("/admin/merchants/{OTHER_MERCHANT}/portal-sessions"),
        None,
    )
    .await;
    assert_eq!(status, 201, "{made}");
    // What is done in a portal an operator opened names the operator too.
    let operator_cookie = open(&gateway, made["path"].as_str().unwrap())
        .await
        .unwrap();
    let (_, page_of_43) = page(&gateway, &operator_cookie, "/portal").await;
    let (status, location, _) = post(
        &gateway,
        &operator_cookie,
        &format!("/portal/endpoints/{other_endpoint}/test"),
        &[("csrf", &csrf_of(&page_of_43))],
    )
    .await;
    assert_eq!((status, location.contains("done=tested")), (303, true));
    let tested_by: String = db
        .query_one(
            "SELECT actor FROM audit_log WHERE action = 'webhook_endpoint.test' ORDER BY id DESC LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tested_by, "merchant:43 via bootstrap");
    let (status, refused) = call(
        &gateway,
        reqwest::Method::POST,
        ADMIN_TOKEN,
        "/admin/merchants/999/portal-sessions",
        None,
    )
    .await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (404, Some("merchant_not_found"))
    );
    // Another merchant's token makes links to its own portal only: there is no merchant in the
    // merchant route.
    let (status, _) = call(
        &gateway,
        reqwest::Method::POST,
        &other_token,
        &format!("/admin/merchants/{MERCHANT}/portal-sessions"),
        None,
    )
    .await;
    assert_eq!(status, 401);

    // Merchant 42's session: its pages carry the security headers, and none shows 43's data.
    let response = no_redirects()
        .get(format!("{}/portal", gateway.address()))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let csp = response.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert_eq!(response.headers()["x-frame-options"], "DENY");
    let home = response.text().await.unwrap();
    assert!(home.contains("merchant 42"), "{home}");
    let csrf = csrf_of(&home);
    for path in [
        "/portal".to_owned(),
        "/portal/notifications".to_owned(),
        "/portal/events".to_owned(),
    ] {
        let (status, body) = page(&gateway, &cookie, &path).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.contains("other.example"), "{path}");
        assert!(!body.contains(&other_endpoint), "{path}");
    }
    for path in [
        format!("/portal/endpoints/{other_endpoint}"),
        format!("/portal/notifications/{other_notification}"),
    ] {
        assert_eq!(page(&gateway, &cookie, &path).await.0, 404, "{path}");
    }
    let (status, _, _) = post(
        &gateway,
        &cookie,
        &format!("/portal/notifications/{other_notification}/redeliver"),
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(status, 404);
    let (status, _, _) = post(
        &gateway,
        &cookie,
        &format!("/portal/endpoints/{other_endpoint}/disable"),
        &[("csrf", &csrf)],
    )
    .await;
    assert_eq!(status, 404);

    // A form without the session's token is refused and changes nothing.
    let (status, _, _) = post(
        &gateway,
        &cookie,
        "/portal/endpoints",
        &[
            ("url", "https://merchant.example/hooks"),
            ("csrf", "forged"),
        ],
    )
    .await;
    assert_eq!(status, 403);
    // Bad input: a form error with the stable code, nothing stored.
    for (fields, code) in [
        (
            vec![
                ("url", "https://merchant.example/hooks"),
                ("filter_types", "order.shipped"),
            ],
            "unknown_event_type",
        ),
        (
            vec![
                ("url", "https://merchant.example/hooks"),
                ("rate_limit_per_sec", "0"),
            ],
            "rate_out_of_range",
        ),
        (
            vec![
                ("url", "https://merchant.example/hooks"),
                ("rate_limit_per_sec", "many"),
            ],
            "rate_out_of_range",
        ),
        (
            vec![("url", "https://10.0.0.7/hooks")],
            "address_not_allowed",
        ),
        (vec![("url", "ftp://merchant.example/")], "invalid_url"),
    ] {
        let mut form = fields.clone();
        form.push(("csrf", &csrf));
        let (status, _, body) = post(&gateway, &cookie, "/portal/endpoints", &form).await;
        assert_eq!(status, 400, "{fields:?}");
        assert!(body.contains("id=\"form-error\""), "{body}");
        assert!(body.contains(&format!("({code})")), "{fields:?}: {body}");
    }
    let stored: i64 = db
        .query_one(
            "SELECT count(*) FROM webhook_endpoints WHERE merchant_id = $1",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 0);

    // A good one: made, its secret on this answer only, an audit row of merchant:42.
    let (status, _, body) = post(
        &gateway,
        &cookie,
        "/portal/endpoints",
        &[
            ("url", "https://merchant.example/hooks"),
            ("filter_types", "order.paid"),
            ("filter_types", "order.refunded"),
            ("rate_limit_per_sec", "20"),
            ("csrf", &csrf),
        ],
    )
    .await;
    assert_eq!(status, 201);
    assert!(body.contains("whsec_"), "{body}");
    let (filter, rate): (Vec<String>, Option<i32>) = {
        let row = db
            .query_one(
                "SELECT filter_types, rate_limit_per_sec FROM webhook_endpoints WHERE merchant_id = $1",
                &[&MERCHANT],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        (filter, rate),
        (
            vec!["order.paid".to_owned(), "order.refunded".to_owned()],
            Some(20)
        )
    );
    let (status, home) = page(&gateway, &cookie, "/portal").await;
    assert_eq!(status, 200);
    assert!(!home.contains("whsec_"), "the secret is shown once");
    let actors: Vec<(String, String)> = db
        .query(
            "SELECT actor, action FROM audit_log WHERE actor = 'merchant:42' ORDER BY id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        actors.iter().map(|(_, a)| a.as_str()).collect::<Vec<_>>(),
        [
            "portal.link",
            "portal.open",
            "portal.link",
            "webhook_endpoint.create"
        ]
    );

    // Signing out ends the session everywhere.
    let (status, _, _) = post(&gateway, &cookie, "/portal/logout", &[("csrf", &csrf)]).await;
    assert_eq!(status, 200);
    assert_eq!(page(&gateway, &cookie, "/portal").await.0, 401);
}

/// Delivers ACME's capture of a new order of merchant 42; the order's id.
async fn paid_order(gateway: &GatewayProcess, db: &tokio_postgres::Client, n: u32) -> i64 {
    let order: i64 = db
        .query_one(
            "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 1250, 'USD') RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let event = format!("evt_portal_{n}");
    let (headers, body) = sign::signed_now(
        ACME,
        &event,
        &capture(&event, &format!("pay_portal_{n}"), order, 1250),
    );
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    order
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portal_in_a_real_browser() {
    let database_url = fresh_database().await;
    let receiver = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let other_receiver = Receiver::start("whsec_dW51c2VkLXVudXNlZC11bnVzZWQtdW51c2VkLXh4").await;
    let gateway = GatewayProcess::spawn_on(
        &database_url,
        &config(
            &database_url,
            &[receiver.origin()],
            &[other_receiver.origin()],
        ),
    )
    .await;
    let db = connect(&database_url).await;
    let token = merchant_token(&database_url, MERCHANT);
    let other_token = merchant_token(&database_url, OTHER_MERCHANT);
    let (status, created) = call(
        &gateway,
        reqwest::Method::POST,
        &token,
        "/v1/webhook-endpoints",
        Some(json!({"url": receiver.url, "description": "orders service"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let endpoint_id = created["id"].as_str().unwrap().to_owned();
    let (other_endpoint, other_notification) =
        other_merchants(&gateway, &other_token, &other_receiver.url).await;
    until_loaded(&gateway, &db).await;
    // Merchant 42's endpoint fails both attempts of its first notification: it is failed.
    receiver.script(&[Answer::Status(500), Answer::Status(500)]);
    let order = paid_order(&gateway, &db, 1).await;
    until("the notification failed", async || {
        db.query_one(
            "SELECT count(*) FROM merchant_notifications WHERE merchant_id = $1 AND status = 'failed'",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
            == 1
    })
    .await;
    let failed_id: i64 = db
        .query_one(
            "SELECT id FROM merchant_notifications WHERE merchant_id = $1 AND status = 'failed'",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let link = link(&gateway, &token).await;

    let driver = Driver::start();
    let browser = driver.client().await;
    let shots = Screenshots::new();
    let result = story(
        &gateway,
        &browser,
        &shots,
        Story {
            link: &link,
            endpoint_id: &endpoint_id,
            order,
            failed_id,
            other_endpoint: &other_endpoint,
            other_notification,
            receiver: &receiver,
            other_receiver_url: &other_receiver.url,
        },
    )
    .await;
    let _ = browser.close().await;
    result.unwrap();
}

struct Story<'a> {
    link: &'a str,
    endpoint_id: &'a str,
    order: i64,
    failed_id: i64,
    other_endpoint: &'a str,
    other_notification: i64,
    receiver: &'a Receiver,
    other_receiver_url: &'a str,
}

async fn story(
    gateway: &GatewayProcess,
    browser: &Client,
    shots: &Screenshots,
    s: Story<'_>,
) -> Result<(), String> {
    let url = |path: &str| format!("{}{path}", gateway.address());
    // The link: a button, then merchant 42's endpoints.
    browser.goto(&url(s.link)).await.unwrap();
    shots.take(browser, "portal-01-open").await;
    click_id(browser, "open").await;
    assert_eq!(settled_path(browser, "/portal").await, "/portal");
    assert_eq!(text_of(browser, "merchant").await, "merchant 42");
    let endpoints = texts(browser, "li.endpoint").await;
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert!(endpoints[0].contains(&s.receiver.url), "{endpoints:?}");
    assert!(endpoints[0].contains("every event type"), "{endpoints:?}");
    let source = browser.source().await.unwrap();
    assert!(!source.contains(s.other_receiver_url));
    assert!(!source.contains(s.other_endpoint));
    shots.take(browser, "portal-02-endpoints").await;

    // Bad input in the new-endpoint form: the form says why, with its code.
    browser
        .find(Locator::Id("url"))
        .await
        .unwrap()
        .send_keys("https://10.0.0.9/hooks")
        .await
        .unwrap();
    click_id(browser, "create").await;
    let error = text_of(browser, "form-error").await;
    assert!(error.contains("address_not_allowed"), "{error}");
    shots.take(browser, "portal-03-form-error").await;

    // The failed notification: its attempts, the 500s, its body; then redelivered, and it
    // arrives at the endpoint.
    browser
        .goto(&url("/portal/notifications?status=failed"))
        .await
        .unwrap();
    let failed = texts(browser, "li.notification").await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("order.paid"), "{failed:?}");
    assert!(failed[0].contains("2 attempts"), "{failed:?}");
    assert!(failed[0].contains("last answer 500"), "{failed:?}");
    shots.take(browser, "portal-04-failed-notifications").await;
    browser
        .find(Locator::Css(&format!("#notification-{} a", s.failed_id)))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert_eq!(text_of(browser, "status").await, "failed");
    assert_eq!(text_of(browser, "last-status").await, "HTTP 500");
    let attempts = texts(browser, "li.attempt").await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    for (attempt, number) in attempts.iter().zip(["#2", "#1"]) {
        assert!(
            attempt.starts_with(number) && attempt.contains("failed · HTTP 500"),
            "{attempts:?}"
        );
    }
    let body = text_of(browser, "body").await;
    assert!(
        body.contains(&format!("\"order_id\":{}", s.order)),
        "{body}"
    );
    shots.take(browser, "portal-05-notification").await;
    assert!(s.receiver.delivered().is_empty());
    click_id(browser, "redeliver").await;
    settled_done(browser, "redelivered").await;
    let arrived = s.receiver.until_delivered(1).await;
    assert_eq!(arrived[0].json["data"]["order_id"], s.order);
    until("the page shows it delivered", async || {
        browser
            .goto(&url(&format!("/portal/notifications/{}", s.failed_id)))
            .await
            .unwrap();
        text_of(browser, "status").await == "delivered"
    })
    .await;
    let attempts = texts(browser, "li.attempt").await;
    assert_eq!(
        attempts.len(),
        3,
        "the earlier attempts are kept: {attempts:?}"
    );
    assert!(
        attempts[0].starts_with("#1") && attempts[0].contains("delivered · HTTP 200"),
        "{attempts:?}"
    );
    shots.take(browser, "portal-06-redelivered").await;

    // Another merchant's notification and endpoint: nothing.
    browser
        .goto(&url(&format!(
            "/portal/notifications/{}",
            s.other_notification
        )))
        .await
        .unwrap();
    assert_eq!(text_of(browser, "title").await, "Not found");
    browser
        .goto(&url(&format!("/portal/endpoints/{}", s.other_endpoint)))
        .await
        .unwrap();
    assert_eq!(text_of(browser, "title").await, "Not found");

    // The endpoint: filter and rate changed; its secret rotated and shown once.
    browser
        .goto(&url(&format!("/portal/endpoints/{}", s.endpoint_id)))
        .await
        .unwrap();
    click_id(browser, "type-order.paid").await;
    let rate = browser.find(Locator::Id("rate")).await.unwrap();
    rate.clear().await.unwrap();
    rate.send_keys("5").await.unwrap();
    click_id(browser, "save").await;
    settled_done(browser, "changed").await;
    assert!(text_of(browser, "notice").await.contains("Saved"));
    shots.take(browser, "portal-07-endpoint").await;
    click_id(browser, "rotate").await;
    let secret = text_of(browser, "secret").await;
    assert!(secret.starts_with("whsec_"), "{secret}");
    shots.take(browser, "portal-08-secret-once").await;
    browser.goto(&url("/portal")).await.unwrap();
    let endpoints = texts(browser, "li.endpoint").await;
    assert!(endpoints[0].contains("order.paid"), "{endpoints:?}");
    assert!(endpoints[0].contains("at most 5/s"), "{endpoints:?}");
    assert!(!browser.source().await.unwrap().contains(&secret));

    // The merchant's recent events; then the same page at a phone's width.
    browser.goto(&url("/portal/events")).await.unwrap();
    let events = texts(browser, "li.event").await;
    assert!(
        events
            .iter()
            .any(|e| e.contains("evt_portal_1") && e.contains("applied")),
        "{events:?}"
    );
    shots.take(browser, "portal-09-events").await;
    browser.set_window_size(390, 844).await.unwrap();
    browser.goto(&url("/portal/notifications")).await.unwrap();
    let width: f64 = browser
        .execute("return document.documentElement.scrollWidth;", Vec::new())
        .await
        .unwrap()
        .as_f64()
        .unwrap();
    assert!(
        width <= 390.0,
        "no sideways scrolling on a phone: {width}px"
    );
    shots.take(browser, "portal-10-phone").await;
    assert_eq!(path_of(browser).await, "/portal/notifications");
    Ok(())
}

/// A link token or a session cookie is a secret that can be guessed: each source address gets
/// `[limits] unknown_keys_per_minute` wrong ones, as bearer keys do, then 429 before the
/// database is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guessed_links_and_session_cookies_are_limited_per_source_address() {
    let database_url = fresh_database().await;
    let limited = format!(
        "{}\n[limits]\nunknown_keys_per_minute = 2\n",
        config(&database_url, &[], &[])
    );
    let gateway = GatewayProcess::spawn_on(&database_url, &limited).await;
    assert_eq!(open(&gateway, "/portal/open/guess-1").await, Err(404));
    assert_eq!(open(&gateway, "/portal/open/guess-2").await, Err(404));
    assert_eq!(open(&gateway, "/portal/open/guess-3").await, Err(429));
    assert_eq!(page(&gateway, "cg_portal=guess-4", "/portal").await.0, 429);
}
