//! People, roles and the audit log (issue 38), through the real binary: operator keys from
//! `operator add`, every `/admin` route and console page against every role, the audit row of
//! each action (and none for an action that failed or rolled back), the trail the database
//! itself keeps append-only, and merchants who read only their own history.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use fantoccini::Locator;
use serde_json::{Value, json};

use crate::console::{
    Driver, Screenshots, click_id, no_redirects, settled_done, settled_path, submit_token, text_of,
    texts,
};
use crate::notifications::capture;
use crate::support::gateway::GatewayProcess;
use crate::support::{ACME, ADMIN_TOKEN, MERCHANT, PLAIN, audit_rows, connect, sign};

/// The contract's role table ("People, roles and the audit log"): every `/admin` route and
/// console page with the least role it needs. The OpenAPI document must name exactly these, so
/// a route added without a role, or with another one, fails here.
const ROLE_TABLE: &[(&str, &str, &str)] = &[
    ("get", "/admin/attention", "viewer"),
    ("get", "/admin/audit", "admin"),
    ("get", "/admin/events", "viewer"),
    ("get", "/admin/events.jsonl", "finance"),
    ("get", "/admin/settlements", "finance"),
    ("get", "/admin/events/{provider}/{event_id}", "viewer"),
    (
        "post",
        "/admin/events/{provider}/{event_id}/replay",
        "finance",
    ),
    ("get", "/admin/idempotency/{user_id}/{op}/{key}", "viewer"),
    ("get", "/admin/merchants/{merchant_id}/balances", "viewer"),
    (
        "post",
        "/admin/merchants/{merchant_id}/endpoint/disable",
        "operator",
    ),
    (
        "post",
        "/admin/merchants/{merchant_id}/endpoint/enable",
        "operator",
    ),
    (
        "post",
        "/admin/merchants/{merchant_id}/notifications/redeliver",
        "operator",
    ),
    (
        "post",
        "/admin/merchants/{merchant_id}/portal-sessions",
        "operator",
    ),
    (
        "get",
        "/admin/merchants/{merchant_id}/webhook-endpoints",
        "admin",
    ),
    (
        "post",
        "/admin/merchants/{merchant_id}/webhook-endpoints",
        "admin",
    ),
    (
        "delete",
        "/admin/merchants/{merchant_id}/webhook-endpoints/{id}",
        "admin",
    ),
    (
        "patch",
        "/admin/merchants/{merchant_id}/webhook-endpoints/{id}",
        "admin",
    ),
    (
        "post",
        "/admin/merchants/{merchant_id}/webhook-endpoints/{id}/rotate-secret",
        "admin",
    ),
    (
        "post",
        "/admin/merchants/{merchant_id}/webhook-endpoints/{id}/test",
        "admin",
    ),
    ("get", "/admin/notifications", "viewer"),
    ("post", "/admin/notifications/{id}/redeliver", "operator"),
    ("post", "/admin/refund-requests/{id}/resolve", "operator"),
    ("get", "/console", "viewer"),
    ("get", "/console/attention", "viewer"),
    ("get", "/console/audit", "admin"),
    ("get", "/console/balances", "viewer"),
    ("get", "/console/events", "viewer"),
    ("get", "/console/events.jsonl", "finance"),
    ("get", "/console/settlements", "finance"),
    ("get", "/console/events/{provider}/{event_id}", "viewer"),
    (
        "post",
        "/console/events/{provider}/{event_id}/replay",
        "finance",
    ),
    (
        "post",
        "/console/merchants/{merchant_id}/endpoint/disable",
        "operator",
    ),
    (
        "post",
        "/console/merchants/{merchant_id}/endpoint/enable",
        "operator",
    ),
    ("get", "/console/notifications", "viewer"),
    ("post", "/console/notifications/{id}/redeliver", "operator"),
    ("post", "/console/refund-requests/{id}/resolve", "operator"),
];

const ROLES: [&str; 4] = ["viewer", "finance", "operator", "admin"];

fn rank(role: &str) -> usize {
    ROLES
        .iter()
        .position(|r| *r == role)
        .unwrap_or_else(|| panic!("{role} is not a role"))
}

/// The binary's one-shot command `args` against `database_url` (no config file).
fn cli(database_url: &str, args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("cg-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = Command::new(crate::support::gateway::gateway_binary())
        .args(args)
        .current_dir(&dir)
        .env_remove("GATEWAY_CONFIG")
        .env("DATABASE_URL", database_url)
        .env("USER", "ops-laptop")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `operator add`: the key, alone on stdout.
fn add_operator(database_url: &str, name: &str, role: &str) -> String {
    let output = cli(
        database_url,
        &["operator", "add", "--name", name, "--role", role],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    let key = stdout.trim_end_matches('\n');
    assert!(
        key.starts_with("cgo_") && !key.contains(char::is_whitespace),
        "stdout is the key alone: {stdout:?}"
    );
    key.to_owned()
}

fn revoke_operator(database_url: &str, name: &str) {
    let output = cli(database_url, &["operator", "revoke", "--name", name]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

/// A console session: its cookie and its forms' token (from the page's `csrf` meta).
struct Session {
    cookie: String,
    csrf: String,
}

async fn sign_in(gateway: &GatewayProcess, key: &str) -> reqwest::Response {
    crate::support::console_sign_in(&no_redirects(), &gateway.address(), Some(key)).await
}

async fn session(gateway: &GatewayProcess, key: &str) -> Session {
    let response = sign_in(gateway, key).await;
    assert_eq!(response.status(), 303, "signing in with a live key");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = no_redirects()
        .get(format!("{}/console/events", gateway.address()))
        .header("Cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("<meta name=\"csrf\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("a signed-in page carries its form token: {page}"))
        .to_owned();
    Session { cookie, csrf }
}

/// Each route's least role as the OpenAPI document names it (the scope of its `operator_key`
/// or `console_session` requirement); a route under /admin or /console without exactly one
/// role fails the test.
async fn documented_roles(gateway: &GatewayProcess) -> BTreeSet<(String, String, String)> {
    let document: Value = reqwest::get(format!("{}/openapi.json", gateway.address()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut roles = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        if !(path.starts_with("/admin") || path.starts_with("/console")) {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let scopes: Vec<String> = operation["security"]
                .as_array()
                .unwrap_or_else(|| panic!("{method} {path} names no security requirement"))
                .iter()
                .flat_map(|requirement| requirement.as_object().unwrap().values())
                .flat_map(|scopes| scopes.as_array().unwrap().iter())
                .map(|scope| scope.as_str().unwrap().to_owned())
                .collect();
            assert_eq!(
                scopes.len(),
                1,
                "{method} {path} must name exactly one role, names {scopes:?}"
            );
            assert!(
                ROLES.contains(&scopes[0].as_str()),
                "{method} {path}: {scopes:?}"
            );
            roles.insert((method.clone(), path.clone(), scopes[0].clone()));
        }
    }
    roles
}

fn concrete(path: &str) -> String {
    path.replace("{user_id}", "42")
        .replace("{op}", "payment.callback")
        .replace("{key}", "acme:evt_none")
        .replace("{merchant_id}", "999")
        .replace("{provider}", "acme")
        .replace("{event_id}", "evt_none")
        .replace("{id}", "999999")
}

/// Who knocks: a bearer key for /admin, a console session for /console (or neither).
struct Principal<'a> {
    label: &'static str,
    /// `None`: no role opens anything for it (no key, unknown, revoked, expired).
    role: Option<&'static str>,
    key: Option<&'a str>,
    session: Option<&'a Session>,
}

async fn knock(
    gateway: &GatewayProcess,
    method: &str,
    path: &str,
    who: &Principal<'_>,
) -> (u16, String, String) {
    let client = no_redirects();
    let url = format!("{}{}", gateway.address(), concrete(path));
    let mut request = match method {
        "get" => client.get(&url),
        "post" => client.post(&url),
        "patch" => client.patch(&url),
        "delete" => client.delete(&url),
        other => panic!("no {other} routes are expected"),
    };
    if path.starts_with("/admin") {
        if let Some(key) = who.key {
            request = request.bearer_auth(key);
        }
    } else if let Some(session) = who.session {
        request = request
            .header("Cookie", &session.cookie)
            .form(&[("csrf", session.csrf.as_str())]);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, location, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_and_console_page_answers_each_role_as_the_contract_says() {
    // Every route is knocked on with revoked and expired keys too: more refused keys from one
    // address than the default limit lets through (limits.rs tests the limit).
    let gateway = GatewayProcess::spawn("[limits]\nunknown_keys_per_minute = 100000\n").await;
    let url = gateway.database_url.clone();
    let keys: Vec<(&str, String)> = ROLES
        .iter()
        .map(|role| (*role, add_operator(&url, &format!("{role}-person"), role)))
        .collect();
    let revoked_key = add_operator(&url, "left-the-company", "admin");
    let expired_key = add_operator(&url, "contractor", "admin");
    let mut sessions = Vec::new();
    for (_, key) in &keys {
        sessions.push(session(&gateway, key).await);
    }
    let bootstrap_session = session(&gateway, ADMIN_TOKEN).await;
    // Both signed in while their keys lived; then one is revoked and one runs out.
    let revoked_session = session(&gateway, &revoked_key).await;
    let expired_session = session(&gateway, &expired_key).await;
    revoke_operator(&url, "left-the-company");
    connect(&url)
        .await
        .execute(
            "UPDATE operators SET expires_at = now() - interval '1 second' WHERE name = 'contractor'",
            &[],
        )
        .await
        .unwrap();

    let documented = documented_roles(&gateway).await;
    let expected: BTreeSet<(String, String, String)> = ROLE_TABLE
        .iter()
        .map(|(m, p, r)| (m.to_string(), p.to_string(), r.to_string()))
        .collect();
    assert_eq!(
        documented, expected,
        "the OpenAPI document's roles are the contract's role table"
    );

    let unknown = "cgo_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let mut principals = vec![
        Principal {
            label: "no key",
            role: None,
            key: None,
            session: None,
        },
        Principal {
            label: "an unknown key",
            role: None,
            key: Some(unknown),
            session: None,
        },
        Principal {
            label: "a revoked key",
            role: None,
            key: Some(&revoked_key),
            session: Some(&revoked_session),
        },
        Principal {
            label: "an expired key",
            role: None,
            key: Some(&expired_key),
            session: Some(&expired_session),
        },
        Principal {
            label: "the bootstrap token",
            role: Some("admin"),
            key: Some(ADMIN_TOKEN),
            session: Some(&bootstrap_session),
        },
    ];
    for ((role, key), session) in keys.iter().zip(&sessions) {
        principals.push(Principal {
            label: role,
            role: Some(role),
            key: Some(key),
            session: Some(session),
        });
    }

    let mut checked = 0;
    for (method, path, needed) in ROLE_TABLE {
        for who in &principals {
            let (status, location, body) = knock(&gateway, method, path, who).await;
            let what = format!(
                "{} {path} as {}: {status} {location} {body}",
                method, who.label
            );
            let console = path.starts_with("/console");
            match who.role {
                None if console => {
                    assert_eq!(
                        (status, location.as_str()),
                        (303, "/console/login"),
                        "{what}"
                    );
                }
                None => {
                    assert_eq!(status, 401, "{what}");
                    assert_eq!(
                        serde_json::from_str::<Value>(&body).unwrap()["error"],
                        "unauthorized",
                        "{what}"
                    );
                }
                Some(role) if rank(role) < rank(needed) => {
                    assert_eq!(status, 403, "{what}");
                    if console {
                        assert!(
                            body.contains(&format!(
                                "<strong id=\"required-role\">{needed}</strong>"
                            )),
                            "{what}"
                        );
                    } else {
                        let error: Value = serde_json::from_str(&body).unwrap();
                        assert_eq!(error["error"], "forbidden", "{what}");
                        assert_eq!(error["required_role"], *needed, "{what}");
                    }
                }
                Some(_) => {
                    assert!(
                        ![401, 403].contains(&status) && location != "/console/login",
                        "{what}"
                    );
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, ROLE_TABLE.len() * principals.len());

    // Every allowed action above named something that does not exist: none changed anything,
    // so the trail holds the sign-ins alone (the two since-refused keys' included).
    let db = connect(&url).await;
    let rows = db
        .query(
            "SELECT action, outcome, count(*) FROM audit_log WHERE action NOT LIKE 'operator.%' \
             GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(String, String, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        rows,
        [("console.sign_in".to_owned(), "succeeded".to_owned(), 7)]
    );
}

/// Merchant 42 with a notification endpoint nobody listens on: notifications are staged and
/// their attempts fail, which is all these tests need of them.
fn endpoint_config() -> String {
    format!(
        "[[merchants]]\nid = {MERCHANT}\nnotify_url = \"http://127.0.0.1:9/hooks\"\n\
         notify_secret = \"whsec_bWVyY2hhbnQtNDItYWNjZXNzLXRlc3Rz\"\n"
    )
}

/// A pending order of merchant 42, captured through acme; (order id, event id).
async fn captured_order(gateway: &GatewayProcess, db: &tokio_postgres::Client) -> (i64, String) {
    let order: i64 = db
        .query_one(
            "INSERT INTO orders (user_id, amount_minor, currency) VALUES ($1, 1500, 'USD') RETURNING id",
            &[&MERCHANT],
        )
        .await
        .unwrap()
        .get(0);
    let event_id = format!("evt_access_{order}");
    let body = capture(&event_id, &format!("pay_{order}"), order, 1500);
    let (headers, body) = sign::signed_now(ACME, &event_id, &body);
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{ACME}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    (order, event_id)
}

async fn post(gateway: &GatewayProcess, key: &str, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", gateway.address()))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn get_json(gateway: &GatewayProcess, key: &str, path: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}{path}", gateway.address()))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_changing_action_writes_exactly_one_audit_row_with_its_actor() {
    let gateway = GatewayProcess::spawn(&endpoint_config()).await;
    let url = gateway.database_url.clone();
    let db = connect(&url).await;
    let olga = add_operator(&url, "olga", "operator");
    let fiona = add_operator(&url, "fiona", "finance");
    let (_, event_id) = captured_order(&gateway, &db).await;
    let notification: i64 = db
        .query_one(
            "SELECT id FROM merchant_notifications ORDER BY id LIMIT 1",
            &[],
        )
        .await
        .unwrap()
        .get(0);

    // Adding and revoking keys from the command line: rows by the command line's login name.
    let added = audit_rows(&db, "operator.add").await;
    assert_eq!(added.len(), 2);
    assert_eq!(added[0].0, "cli:ops-laptop");
    assert_eq!(added[0].2.as_deref(), Some("operator:olga"));
    assert_eq!(added[0].4["role"], "operator");

    // A finance key replays a stored event: its stored answer goes out again, nothing changes.
    let (status, body) = post(
        &gateway,
        &fiona,
        &format!("/admin/events/{ACME}/{event_id}/replay"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let replays = audit_rows(&db, "event.replay").await;
    assert_eq!(replays.len(), 1);
    assert_eq!(
        (
            replays[0].0.as_str(),
            replays[0].1.as_str(),
            replays[0].3.as_str()
        ),
        ("fiona", "finance", "replayed")
    );
    assert_eq!(replays[0].2, Some(format!("event:{ACME}/{event_id}")));

    // An operator key: one redelivery, one range, disable, enable. One row each, by olga.
    let steps = [
        (
            format!("/admin/notifications/{notification}/redeliver"),
            "notification.redeliver",
            "pending",
        ),
        (
            format!(
                "/admin/merchants/{MERCHANT}/notifications/redeliver?since=2020-01-01T00:00:00Z"
            ),
            "notifications.redeliver_range",
            "pending",
        ),
        (
            format!("/admin/merchants/{MERCHANT}/endpoint/disable"),
            "endpoint.disable",
            "disabled",
        ),
        (
            format!("/admin/merchants/{MERCHANT}/endpoint/enable"),
            "endpoint.enable",
            "enabled",
        ),
    ];
    for (path, action, outcome) in &steps {
        let (status, body) = post(&gateway, &olga, path).await;
        assert!(status == 200 || status == 202, "{path}: {status} {body}");
        let rows = audit_rows(&db, action).await;
        assert_eq!(rows.len(), 1, "{action}: {rows:?}");
        assert_eq!(
            (rows[0].0.as_str(), rows[0].1.as_str()),
            ("olga", "operator")
        );
        assert_eq!(rows[0].3, *outcome, "{action}");
    }
    let disabled = &audit_rows(&db, "endpoint.disable").await[0];
    assert_eq!(disabled.2.as_deref(), Some("merchant:42"));
    assert_eq!(disabled.4["was_disabled"], false);

    // Failed actions write nothing: an unknown notification, and a role too low.
    let before: i64 = db
        .query_one("SELECT count(*) FROM audit_log", &[])
        .await
        .unwrap()
        .get(0);
    let (status, _) = post(&gateway, &olga, "/admin/notifications/987654/redeliver").await;
    assert_eq!(status, 404);
    let (status, _) = post(
        &gateway,
        &fiona,
        &format!("/admin/merchants/{MERCHANT}/endpoint/disable"),
    )
    .await;
    assert_eq!(status, 403);
    let after: i64 = db
        .query_one("SELECT count(*) FROM audit_log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(after, before, "a refused or failed action writes no row");

    // The trail, read back: by actor, by action, in pages.
    let admin = add_operator(&url, "ada", "admin");
    let (status, page) = get_json(&gateway, &admin, "/admin/audit?actor=olga").await;
    assert_eq!(status, 200, "{page}");
    let actions: Vec<&str> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "endpoint.enable",
            "endpoint.disable",
            "notifications.redeliver_range",
            "notification.redeliver"
        ],
        "olga's rows, newest first"
    );
    let (_, first) = get_json(&gateway, &admin, "/admin/audit?limit=2").await;
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (_, second) = get_json(
        &gateway,
        &admin,
        &format!("/admin/audit?limit=2&cursor={cursor}"),
    )
    .await;
    let ids = |page: &Value| -> Vec<i64> {
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_i64().unwrap())
            .collect()
    };
    assert!(
        ids(&first).iter().min() > ids(&second).iter().max(),
        "pages go back in time"
    );
    let (status, only) = get_json(&gateway, &admin, "/admin/audit?action=event.replay").await;
    assert_eq!(status, 200);
    assert_eq!(only["entries"].as_array().unwrap().len(), 1);
    let (status, bad) = get_json(&gateway, &admin, "/admin/audit?action=event.delete").await;
    assert_eq!(
        (status, bad["error"].as_str()),
        (400, Some("invalid_query"))
    );
    let (status, _) = get_json(&gateway, &olga, "/admin/audit").await;
    assert_eq!(status, 403, "the trail is for admins");

    // Revoking from the command line is a row too; no row ever holds a key.
    revoke_operator(&url, "fiona");
    assert_eq!(audit_rows(&db, "operator.revoke").await.len(), 1);
    let everything: String = db
        .query_one(
            "SELECT string_agg(audit_log::text, ' ') FROM audit_log",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    for key in [&olga, &fiona, &admin] {
        assert!(
            !everything.contains(key.as_str()),
            "a key reached the audit log"
        );
        assert!(
            !everything.contains(&key[4..20]),
            "part of a key reached the audit log"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_that_rolls_back_leaves_no_audit_row() {
    let gateway = GatewayProcess::spawn(&endpoint_config()).await;
    let url = gateway.database_url.clone();
    let db = connect(&url).await;
    let olga = add_operator(&url, "olga", "operator");
    // The endpoint change's transaction fails at its commit, after its audit row was written.
    db.batch_execute(
        "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'refused at commit'; END $$; \
         CREATE CONSTRAINT TRIGGER endpoints_refuse AFTER INSERT OR UPDATE ON notification_endpoints \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit();",
    )
    .await
    .unwrap();
    let (status, body) = post(
        &gateway,
        &olga,
        &format!("/admin/merchants/{MERCHANT}/endpoint/disable"),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(
        audit_rows(&db, "endpoint.disable").await.is_empty(),
        "no row for a rolled-back action"
    );
    assert_eq!(
        db.query_one(
            "SELECT count(*) FROM notification_endpoints WHERE disabled_at IS NOT NULL",
            &[]
        )
        .await
        .unwrap()
        .get::<_, i64>(0),
        0
    );

    db.batch_execute("DROP TRIGGER endpoints_refuse ON notification_endpoints")
        .await
        .unwrap();
    let (status, body) = post(
        &gateway,
        &olga,
        &format!("/admin/merchants/{MERCHANT}/endpoint/disable"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(audit_rows(&db, "endpoint.disable").await.len(), 1);
}

#[tokio::test]
async fn the_database_refuses_to_change_delete_or_empty_the_audit_log_for_the_gateways_role() {
    let database_url = crate::support::fresh_database().await;
    add_operator(&database_url, "olga", "operator");
    // The gateway connects as the URL's user; so does this client.
    let db = connect(&database_url).await;
    for statement in [
        "UPDATE audit_log SET actor = 'someone else'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ] {
        let error = db.execute(statement, &[]).await.unwrap_err();
        let code = error.code().map(|c| c.code().to_owned());
        assert_eq!(code.as_deref(), Some("42501"), "{statement}: {error}");
        assert!(
            error.to_string().contains("append-only")
                || format!("{error:?}").contains("append-only"),
            "{error:?}"
        );
    }
    let actor: String = db
        .query_one("SELECT actor FROM audit_log", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(actor, "cli:ops-laptop", "the row is as it was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_is_refused_at_its_next_request_and_its_console_session_ends() {
    let gateway = GatewayProcess::spawn("").await;
    let url = gateway.database_url.clone();
    let key = add_operator(&url, "vera", "viewer");
    let (status, _) = get_json(&gateway, &key, "/admin/events").await;
    assert_eq!(status, 200);
    let session = session(&gateway, &key).await;
    let last_used: bool = connect(&url)
        .await
        .query_one(
            "SELECT last_used_at > now() - interval '1 minute' FROM operators WHERE name = 'vera'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(last_used, "a used key shows when it was last used");

    revoke_operator(&url, "vera");
    let (status, body) = get_json(&gateway, &key, "/admin/events").await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );
    let page = no_redirects()
        .get(format!("{}/console/events", gateway.address()))
        .header("Cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 303);
    assert_eq!(page.headers()["location"], "/console/login");
    // The same name may hold a new key; the old one and its session stay dead.
    let again = add_operator(&url, "vera", "viewer");
    assert_ne!(again, key);
    let (status, _) = get_json(&gateway, &key, "/admin/events").await;
    assert_eq!(status, 401);
    let page = no_redirects()
        .get(format!("{}/console/events", gateway.address()))
        .header("Cookie", &session.cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 303, "the ended session does not come back");
}

#[tokio::test]
async fn operator_commands_print_a_key_once_list_none_and_refuse_bad_input() {
    let url = crate::support::fresh_database().await;
    let key = add_operator(&url, "alice", "finance");
    let output = cli(
        &url,
        &["operator", "add", "--name", "alice", "--role", "viewer"],
    );
    assert_eq!(output.status.code(), Some(2), "a live name is taken");
    assert!(
        text(&output.stderr).contains("already has a live key"),
        "{}",
        text(&output.stderr)
    );
    assert!(output.stdout.is_empty());
    for (args, says) in [
        (vec!["--name", "bob", "--role", "root"], "--role must be"),
        (vec!["--name", "bootstrap", "--role", "admin"], "bootstrap"),
        (vec!["--name", "bob smith", "--role", "admin"], "a name is"),
        (
            vec!["--name", "bob", "--role", "admin", "--expires-in-days", "0"],
            "--expires-in-days",
        ),
    ] {
        let mut full = vec!["operator", "add"];
        full.extend(args);
        let output = cli(&url, &full);
        assert_eq!(output.status.code(), Some(2), "{full:?}");
        assert!(
            text(&output.stderr).contains(says),
            "{full:?}: {}",
            text(&output.stderr)
        );
    }
    let output = cli(
        &url,
        &[
            "operator",
            "add",
            "--name",
            "carol",
            "--role",
            "admin",
            "--expires-in-days",
            "30",
        ],
    );
    assert!(output.status.success());

    let output = cli(&url, &["operator", "list"]);
    assert!(output.status.success());
    let list = text(&output.stdout);
    let hash: String = connect(&url)
        .await
        .query_one("SELECT key_sha256 FROM operators WHERE name = 'alice'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(
        !list.contains(&key) && !list.contains(&key[4..]) && !list.contains(&hash),
        "{list}"
    );
    let alice = list.lines().find(|l| l.starts_with("alice ")).unwrap();
    assert!(
        alice.contains("finance") && alice.ends_with("live"),
        "{alice}"
    );
    let carol = list.lines().find(|l| l.starts_with("carol ")).unwrap();
    assert_eq!(
        carol.split_whitespace().count(),
        6,
        "carol has an expiry: {carol}"
    );

    let output = cli(&url, &["operator", "revoke", "--name", "nobody"]);
    assert_eq!(output.status.code(), Some(2));
    revoke_operator(&url, "alice");
    let list = text(&cli(&url, &["operator", "list"]).stdout);
    assert!(
        list.lines()
            .any(|l| l.starts_with("alice ") && l.ends_with("revoked")),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_sign_ins_are_audit_rows_up_to_a_limit_a_minute_and_never_open_a_session() {
    // Sixty refusals from one address: past the default limit of refused sign-ins, which
    // limits.rs tests; here the rows they write.
    let gateway = GatewayProcess::spawn(
        "[limits]\nfailed_sign_ins_per_minute = 100000\nunknown_keys_per_minute = 100000\n",
    )
    .await;
    let url = gateway.database_url.clone();
    let revoked = add_operator(&url, "gone", "admin");
    revoke_operator(&url, "gone");
    for attempt in 0..60 {
        let key = match attempt {
            0 => revoked.clone(),
            1 => String::new(),
            n => format!("cgo_guess{n}"),
        };
        let response = sign_in(&gateway, &key).await;
        assert_eq!(response.status(), 401, "attempt {attempt}");
        assert!(response.headers().get("set-cookie").is_none());
    }
    let db = connect(&url).await;
    let rows = db
        .query(
            "SELECT actor, role, outcome, changes::text FROM audit_log WHERE action = 'console.sign_in' ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        20,
        "a row each for the first 20 of a minute, the rest counted"
    );
    let first: Value = serde_json::from_str(rows[0].get(3)).unwrap();
    assert_eq!(first["reason"], "revoked");
    for row in &rows {
        assert_eq!(
            (
                row.get::<_, String>(0),
                row.get::<_, String>(1),
                row.get::<_, String>(2)
            ),
            ("unknown".to_owned(), "none".to_owned(), "failed".to_owned())
        );
    }
    // A good key still signs in during the flood, and that is a row of its own.
    let key = add_operator(&url, "ok", "viewer");
    assert_eq!(sign_in(&gateway, &key).await.status(), 303);
    assert_eq!(audit_rows(&db, "console.sign_in").await.len(), 21);
}

/// A merchant's own API token, from `token issue`.
fn merchant_token(database_url: &str, merchant: i64) -> String {
    let output = cli(
        database_url,
        &["token", "issue", "--user-id", &merchant.to_string()],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    text(&output.stdout).trim().to_owned()
}

async fn merchant_get(gateway: &GatewayProcess, token: &str, path: &str) -> (u16, Value) {
    get_json(gateway, token, path).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merchant_reads_its_own_events_and_notifications_and_never_another_merchants() {
    let gateway = GatewayProcess::spawn(&endpoint_config()).await;
    let url = gateway.database_url.clone();
    let db = connect(&url).await;
    let (_, mine) = captured_order(&gateway, &db).await;
    // Merchant 43's event, through its own provider.
    let theirs = "evt_merchant_43";
    let body = r#"{"id":"evt_merchant_43","type":"payment.succeeded","data":{"payment_id":"pay_x","amount_minor":700,"currency":"EUR"}}"#;
    let (headers, body) = sign::signed_now(PLAIN, theirs, body);
    let mut request = reqwest::Client::new()
        .post(format!("{}/v1/callbacks/{PLAIN}", gateway.address()))
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    assert_eq!(request.send().await.unwrap().status(), 200);
    let a = merchant_token(&url, MERCHANT);
    let b = merchant_token(&url, 43);

    let (status, page) = merchant_get(&gateway, &a, "/v1/events").await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [mine.as_str()]);
    assert!(
        page["events"][0].get("raw_body").is_none() && page["events"][0].get("trace_id").is_none()
    );
    let (_, page) = merchant_get(&gateway, &b, "/v1/events").await;
    let ids: Vec<&str> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [theirs]);

    // Their own event in full: outcome, ack and ledger transfer.
    let (status, detail) = merchant_get(&gateway, &a, &format!("/v1/events/{ACME}/{mine}")).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["outcome"], "applied");
    assert_eq!(detail["ack"]["event_id"], mine);
    assert_eq!(detail["transfer"]["entries"].as_array().unwrap().len(), 2);

    // The other merchant's event, by guessing its id: the same 404 as one that never existed.
    let (status, guessed) =
        merchant_get(&gateway, &a, &format!("/v1/events/{PLAIN}/{theirs}")).await;
    let (never_status, never) =
        merchant_get(&gateway, &a, &format!("/v1/events/{PLAIN}/evt_never")).await;
    assert_eq!((status, never_status), (404, 404));
    assert_eq!(guessed, never);
    // ...or by filters: a merchant_id is not a parameter here, another provider is empty.
    for path in [
        "/v1/events?merchant_id=43",
        "/v1/notifications?merchant_id=43",
    ] {
        let (status, error) = merchant_get(&gateway, &a, path).await;
        assert_eq!(
            (status, error["error"].as_str()),
            (400, Some("invalid_query")),
            "{path}"
        );
    }
    let (_, page) = merchant_get(&gateway, &a, &format!("/v1/events?provider={PLAIN}")).await;
    assert_eq!(page["events"], json!([]));

    // Notifications: 42 has its capture's, 43 (no endpoint) none, and neither sees the other's.
    let (status, page) = merchant_get(&gateway, &a, "/v1/notifications").await;
    assert_eq!(status, 200, "{page}");
    let notifications = page["notifications"].as_array().unwrap();
    assert!(!notifications.is_empty());
    assert!(notifications.iter().all(|n| n["merchant_id"] == MERCHANT));
    let (_, page) = merchant_get(&gateway, &b, "/v1/notifications").await;
    assert_eq!(page["notifications"], json!([]));
    // Without a token: 401; an operator key is not a merchant token.
    let (status, _) = merchant_get(&gateway, "cgw_not_a_token", "/v1/events").await;
    assert_eq!(status, 401);
    let (status, _) = merchant_get(&gateway, ADMIN_TOKEN, "/v1/events").await;
    assert_eq!(status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_browser_a_viewer_sees_no_actions_and_an_operator_uses_them() {
    let gateway = GatewayProcess::spawn(&endpoint_config()).await;
    let url = gateway.database_url.clone();
    let db = connect(&url).await;
    let (_, event_id) = captured_order(&gateway, &db).await;
    // The capture's notification failed against the dead endpoint: a row to redeliver.
    db.execute(
        "UPDATE merchant_notifications SET status = 'failed', last_error = 'connection refused', \
         attempts = 8, last_attempt_at = now()",
        &[],
    )
    .await
    .unwrap();
    let viewer = add_operator(&url, "vic", "viewer");
    let operator = add_operator(&url, "otto", "operator");
    let driver = Driver::start();
    let browser = driver.client().await;
    let shots = Screenshots::new();
    let result: Result<(), String> = async {
        let base = gateway.address();
        browser
            .goto(&format!("{base}/console/login"))
            .await
            .unwrap();
        submit_token(&browser, &viewer).await;
        assert_eq!(
            settled_path(&browser, "/console/events").await,
            "/console/events"
        );
        assert_eq!(texts(&browser, "#signed-in-as").await, ["vic viewer"]);
        assert!(
            texts(&browser, "#nav-audit").await.is_empty(),
            "no audit link for a viewer"
        );
        browser
            .goto(&format!("{base}/console/notifications"))
            .await
            .unwrap();
        shots.take(&browser, "access-viewer-notifications").await;
        assert!(
            texts(&browser, "button.redeliver").await.is_empty(),
            "a viewer is offered no redelivery"
        );
        assert!(
            browser.find(Locator::Id("disable-42")).await.is_err(),
            "nor an endpoint switch"
        );
        assert_eq!(
            texts(&browser, "tr.endpoint-state td").await[..2],
            ["42".to_owned(), "enabled".to_owned()]
        );
        browser
            .goto(&format!("{base}/console/events/{ACME}/{event_id}"))
            .await
            .unwrap();
        assert!(
            browser.find(Locator::Id("replay")).await.is_err(),
            "nor a replay"
        );
        browser
            .goto(&format!("{base}/console/audit"))
            .await
            .unwrap();
        assert_eq!(
            text_of(&browser, "required-role").await,
            "admin",
            "the audit page names the role it needs"
        );
        browser
            .goto(&format!("{base}/console/events"))
            .await
            .unwrap();
        click_id(&browser, "sign-out").await;
        settled_path(&browser, "/console/login").await;

        submit_token(&browser, &operator).await;
        assert_eq!(
            settled_path(&browser, "/console/events").await,
            "/console/events"
        );
        assert_eq!(texts(&browser, "#signed-in-as").await, ["otto operator"]);
        browser
            .goto(&format!("{base}/console/events/{ACME}/{event_id}"))
            .await
            .unwrap();
        click_id(&browser, "replay").await;
        settled_done(&browser, "replayed").await;
        browser
            .goto(&format!("{base}/console/notifications"))
            .await
            .unwrap();
        shots.take(&browser, "access-operator-notifications").await;
        let buttons = texts(&browser, "button.redeliver").await;
        assert_eq!(
            buttons,
            ["Redeliver"],
            "the failed notification offers its redelivery"
        );
        browser
            .find(Locator::Css("button.redeliver"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        settled_done(&browser, "redelivered").await;
        let notice = text_of(&browser, "notice").await;
        assert!(notice.starts_with("Redelivery queued"), "{notice:?}");
        click_id(&browser, "disable-42").await;
        settled_done(&browser, "disabled").await;
        browser
            .wait()
            .for_element(Locator::Id("enable-42"))
            .await
            .map_err(|e| format!("no enable after disable: {e}"))?;
        Ok(())
    }
    .await;
    let _ = browser.close().await;
    result.unwrap();
    assert_eq!(
        path_of_audit(&db).await,
        [
            ("vic".to_owned(), "console.sign_in".to_owned()),
            ("otto".to_owned(), "console.sign_in".to_owned()),
            ("otto".to_owned(), "event.replay".to_owned()),
            ("otto".to_owned(), "notification.redeliver".to_owned()),
            ("otto".to_owned(), "endpoint.disable".to_owned()),
        ]
    );
}

/// Who did what since the keys were added, oldest first.
async fn path_of_audit(db: &tokio_postgres::Client) -> Vec<(String, String)> {
    db.query(
        "SELECT actor, action FROM audit_log WHERE action <> 'operator.add' ORDER BY id",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[tokio::test]
async fn token_issue_and_cleanup_write_audit_rows_and_no_operator_may_be_named_unknown() {
    let database_url = crate::support::fresh_database().await;
    let db = connect(&database_url).await;
    let issued = cli(&database_url, &["token", "issue", "--user-id", "42"]);
    assert!(issued.status.success(), "{}", text(&issued.stderr));
    let token = text(&issued.stdout).trim().to_owned();
    let cleaned = cli(&database_url, &["cleanup"]);
    assert!(cleaned.status.success(), "{}", text(&cleaned.stderr));

    let rows = audit_rows(&db, "token.issue").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (actor, role, target, _, changes) = &rows[0];
    assert_eq!(
        (actor.as_str(), role.as_str(), target.as_deref()),
        ("cli:ops-laptop", "admin", Some("merchant:42"))
    );
    assert!(
        !changes.to_string().contains(&token[4..]),
        "the token never reaches the log: {changes}"
    );
    let rows = audit_rows(&db, "idempotency.cleanup").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].0, "cli:ops-laptop");
    assert!(rows[0].4.get("deleted").is_some(), "{:?}", rows[0].4);

    // `unknown` is the actor of a refused sign-in: no person may be named so.
    let refused = cli(
        &database_url,
        &["operator", "add", "--name", "unknown", "--role", "viewer"],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stdout));
    assert!(text(&refused.stderr).contains("unknown"));
}

#[tokio::test]
async fn the_sign_in_form_carries_a_token_a_cross_site_post_lacks() {
    let gateway = GatewayProcess::spawn("").await;
    // A form posted from another site: no cookie of the sign-in page, no token.
    let forged = no_redirects()
        .post(format!("{}/console/login", gateway.address()))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(forged.headers().get("set-cookie").is_none(), "no session");
    // The page's own form signs in.
    let signed_in =
        crate::support::console_sign_in(&no_redirects(), &gateway.address(), Some(ADMIN_TOKEN))
            .await;
    assert_eq!(signed_in.status(), 303);
}
