//! The event log: every first delivery is kept with its outcome, whichever path it took, and
//! admins read it through `/admin/events` (filters, keyset pages), one event with what the
//! gateway did with it, and `/admin/attention`.

use std::collections::HashSet;

use callback_gateway::db::one_row::CommittedResult;
use callback_gateway::deliveries::read::{self, EventFilter, EventOutcome};
use diesel_async::{AsyncConnection, AsyncPgConnection};

use crate::support::{
    ACME, ADMIN_TOKEN, MERCHANT, PLAIN, STRIPE, TestApp, sequential_scans_of_data, spawn_app,
};

fn capture(event_id: &str, payment_id: &str, order_id: i64, amount: i64) -> String {
    format!(
        r#"{{"id":"{event_id}","type":"payment.succeeded","data":{{"payment_id":"{payment_id}","order_id":{order_id},"amount_minor":{amount},"currency":"USD"}}}}"#
    )
}

async fn json(response: reqwest::Response) -> serde_json::Value {
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "answer: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// An applied capture (one-statement path), a held one (general path), an ignored type and a
/// rejected body: four events of merchant 42.
async fn four_outcomes(app: &TestApp) -> i64 {
    let order = app.create_order(MERCHANT, 1999, "USD").await;
    let paid = app.create_order(MERCHANT, 500, "USD").await;
    for (id, body) in [
        ("evt_applied", capture("evt_applied", "pay_1", order, 1999)),
        ("evt_held", capture("evt_held", "pay_2", paid, 777)),
        (
            "evt_ignored",
            r#"{"id":"evt_ignored","type":"customer.created","data":{}}"#.to_owned(),
        ),
        (
            "evt_rejected",
            r#"{"id":"evt_rejected","type":"payment.succeeded","data":{"payment_id":"p"}}"#
                .to_owned(),
        ),
    ] {
        let response = app.deliver(ACME, id, &body).await;
        assert_eq!(
            response.status(),
            200,
            "{id}: {}",
            response.text().await.unwrap()
        );
    }
    order
}

/// (event id, type, outcome, reason, ack status, has a transfer)
type LogRow = (String, Option<String>, String, Option<String>, i32, bool);

#[tokio::test]
async fn each_delivery_is_kept_with_its_outcome_whichever_path_it_took() {
    let app = spawn_app().await;
    four_outcomes(&app).await;
    let rows = app
        .db
        .query(
            "SELECT event_id, event_type, outcome, reason, ack_status, transfer_id \
             FROM callback_deliveries ORDER BY id",
            &[],
        )
        .await
        .unwrap();
    let got: Vec<LogRow> = rows
        .iter()
        .map(|r| {
            (
                r.get(0),
                r.get(1),
                r.get(2),
                r.get(3),
                r.get(4),
                r.get::<_, Option<i64>>(5).is_some(),
            )
        })
        .collect();
    let ty = |t: &str| Some(t.to_owned());
    assert_eq!(
        got,
        vec![
            (
                "evt_applied".into(),
                ty("payment.succeeded"),
                "applied".into(),
                None,
                200,
                true
            ),
            (
                "evt_held".into(),
                ty("payment.succeeded"),
                "held".into(),
                ty("amount_mismatch"),
                200,
                true
            ),
            (
                "evt_ignored".into(),
                ty("customer.created"),
                "ignored".into(),
                ty("unsupported_event_type"),
                200,
                false
            ),
            (
                "evt_rejected".into(),
                ty("payment.succeeded"),
                "rejected".into(),
                ty("invalid_payload"),
                200,
                false
            ),
        ]
    );
    // The transfer id kept is the one the ack carries.
    let event = json(app.admin_get("/admin/events/acme/evt_applied").await).await;
    assert_eq!(event["transfer_id"], event["ack"]["transfer_id"]);
}

#[tokio::test]
async fn the_list_filters_by_each_parameter() {
    let app = spawn_app().await;
    four_outcomes(&app).await;
    let body = r#"{"id":"evt_plain","type":"customer.created","data":{}}"#;
    assert_eq!(app.deliver(PLAIN, "evt_plain", body).await.status(), 200);
    let ids = async |query: &str| -> Vec<String> {
        let page = json(app.admin_get(&format!("/admin/events?{query}")).await).await;
        page["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        ids("").await,
        [
            "evt_plain",
            "evt_rejected",
            "evt_ignored",
            "evt_held",
            "evt_applied"
        ],
        "newest first"
    );
    assert_eq!(ids("provider=plain").await, ["evt_plain"]);
    assert_eq!(ids("merchant_id=43").await, ["evt_plain"]);
    assert_eq!(ids("outcome=held").await, ["evt_held"]);
    assert_eq!(ids("outcome=applied").await, ["evt_applied"]);
    assert_eq!(
        ids("type=customer.created&provider=acme").await,
        ["evt_ignored"]
    );
    assert_eq!(ids("event_id=evt_rejected").await, ["evt_rejected"]);
    assert_eq!(
        ids("until=2000-01-01T00:00:00Z").await,
        Vec::<String>::new()
    );
    assert_eq!(
        ids("since=2000-01-01T00:00:00Z&outcome=ignored")
            .await
            .len(),
        2
    );
    let page = json(app.admin_get("/admin/events?event_id=evt_held").await).await;
    let held = &page["events"][0];
    for field in [
        "provider",
        "event_id",
        "merchant_id",
        "type",
        "received_at",
        "outcome",
        "reason",
        "status",
        "transfer_id",
    ] {
        assert!(held.get(field).is_some(), "field {field} in {held}");
    }
    for bad in [
        "outcome=paid",
        "limit=0",
        "limit=201",
        "since=yesterday",
        "cursor=xyz",
        "merchant_id=x",
    ] {
        let response = app.admin_get(&format!("/admin/events?{bad}")).await;
        assert_eq!(response.status(), 400, "{bad}");
    }
}

#[tokio::test]
async fn paging_forward_returns_every_event_once_in_order() {
    let app = spawn_app().await;
    // 57 events, several sharing one received_at (the cursor's tie-breaker is the id).
    app.db
        .execute(
            "INSERT INTO callback_deliveries (merchant_id, provider, event_id, body, received_at, \
             event_type, outcome, ack_status) \
             SELECT 42, 'acme', 'evt_' || g, '{}'::bytea, \
                    '2026-11-30T10:00:00Z'::timestamptz + (g / 4) * interval '1 second', \
                    'payment.succeeded', CASE WHEN g % 5 = 0 THEN 'held' ELSE 'applied' END, 200 \
             FROM generate_series(1, 57) g",
            &[],
        )
        .await
        .unwrap();
    for (query, expected) in [("", 57), ("outcome=held&", 11)] {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let path = match &cursor {
                Some(c) => format!("/admin/events?{query}limit=10&cursor={c}"),
                None => format!("/admin/events?{query}limit=10"),
            };
            let page = json(app.admin_get(&path).await).await;
            pages += 1;
            for e in page["events"].as_array().unwrap() {
                seen.push(e["event_id"].as_str().unwrap().to_owned());
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
            assert!(pages < 20, "paging does not end");
        }
        let expected_order: Vec<String> = app
            .db
            .query(
                &format!(
                    "SELECT event_id FROM callback_deliveries {} ORDER BY received_at DESC, id DESC",
                    if query.is_empty() { "" } else { "WHERE outcome = 'held'" }
                ),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(seen.len(), expected, "{query}: one row per event");
        assert_eq!(
            seen.iter().collect::<HashSet<_>>().len(),
            expected,
            "{query}: no duplicates"
        );
        assert_eq!(seen, expected_order, "{query}: newest first, no gaps");
    }
}

#[tokio::test]
async fn an_event_shows_its_raw_body_ack_transfer_payment_and_order() {
    let app = spawn_app().await;
    let order = four_outcomes(&app).await;
    let sent = capture("evt_applied", "pay_1", order, 1999);
    let event = json(app.admin_get("/admin/events/acme/evt_applied").await).await;
    assert_eq!(
        event["raw_body"],
        sent.as_str(),
        "the verified bytes as a string"
    );
    assert_eq!(event["ack"]["outcome"], "applied");
    assert_eq!(event["status"], 200);
    let entries = event["transfer"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{event}");
    assert_eq!(entries[0]["account"], "psp_clearing:acme");
    assert_eq!(entries[0]["amount_minor"], 1999);
    assert_eq!(event["payment"]["status"], "succeeded");
    assert_eq!(event["order"]["id"], order);
    assert_eq!(event["order"]["status"], "paid");

    let held = json(app.admin_get("/admin/events/acme/evt_held").await).await;
    assert_eq!(held["transfer"]["entries"][1]["account"], "unapplied_funds");
    assert_eq!(held["payment"]["status"], "held");
    let response = app.admin_get("/admin/events/acme/evt_nope").await;
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn attention_lists_held_and_rejected_events() {
    let app = spawn_app().await;
    four_outcomes(&app).await;
    let attention = json(app.admin_get("/admin/attention").await).await;
    let ids = |list: &serde_json::Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|e| e["event_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&attention["held"]), ["evt_held"]);
    assert_eq!(ids(&attention["rejected"]), ["evt_rejected"]);
    assert_eq!(attention["rejected"][0]["reason"], "invalid_payload");
}

#[tokio::test]
async fn the_export_link_streams_the_filtered_events_as_replay_lines() {
    let app = spawn_app().await;
    four_outcomes(&app).await;
    let response = app.admin_get("/admin/events.jsonl?outcome=ignored").await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    let (lines, trailer) = export_lines(&text);
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(trailer["events"], 1, "{text}");
    assert_eq!(lines[0]["provider"], "acme");
    assert_eq!(lines[0]["id"], "evt_ignored");
    assert!(
        lines[0]["body"]
            .as_str()
            .unwrap()
            .contains("customer.created")
    );
}

#[tokio::test]
async fn admin_event_endpoints_refuse_a_missing_or_wrong_token_alike() {
    let app = spawn_app().await;
    for path in [
        "/admin/events",
        "/admin/events.jsonl",
        "/admin/events/acme/evt_1",
        "/admin/attention",
    ] {
        let missing = app.client.get(app.url(path)).send().await.unwrap();
        let wrong = app
            .client
            .get(app.url(path))
            .bearer_auth(format!("{ADMIN_TOKEN}x"))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 401, "{path} without a token");
        assert_eq!(wrong.status(), 401, "{path} with a wrong token");
        assert_eq!(
            missing.text().await.unwrap(),
            wrong.text().await.unwrap(),
            "{path}: the same answer"
        );
    }
}

/// The page queries at volume: 200,000 events of realistic shape and ANALYZE, so the planner
/// costs a sequential scan and a sort against each index. Every filter must be an index scan
/// in the list's order: no Seq Scan, no Sort.
#[tokio::test]
async fn every_filter_of_the_list_is_served_by_an_index() {
    let app = spawn_app().await;
    load_events(&app, 200_000).await;
    let mut conn = AsyncPgConnection::establish(&app.database_url)
        .await
        .unwrap();
    let page = read::list(&mut conn, &EventFilter::default(), None, 50)
        .await
        .unwrap();
    let cursor = read::Cursor::decode(page.next_cursor.as_deref().unwrap());
    let filters = [
        ("none", EventFilter::default()),
        (
            "provider",
            EventFilter {
                provider: Some(STRIPE.into()),
                ..Default::default()
            },
        ),
        (
            "merchant_id",
            EventFilter {
                merchant_id: Some(43),
                ..Default::default()
            },
        ),
        (
            "outcome held",
            EventFilter {
                outcome: Some(EventOutcome::Held),
                ..Default::default()
            },
        ),
        (
            "outcome rejected",
            EventFilter {
                outcome: Some(EventOutcome::Rejected),
                ..Default::default()
            },
        ),
        (
            "outcome applied",
            EventFilter {
                outcome: Some(EventOutcome::Applied),
                ..Default::default()
            },
        ),
        (
            "type",
            EventFilter {
                event_type: Some("charge.refunded".into()),
                ..Default::default()
            },
        ),
        (
            "event_id",
            EventFilter {
                event_id: Some("evt_123".into()),
                ..Default::default()
            },
        ),
        (
            "since/until",
            EventFilter {
                since: Some("2026-11-20T00:00:00Z".parse().unwrap()),
                until: Some("2026-11-21T00:00:00Z".parse().unwrap()),
                ..Default::default()
            },
        ),
    ];
    for (name, filter) in filters {
        for cursor in [None, cursor] {
            let plan = read::explain_list(&mut conn, &filter, cursor, 50)
                .await
                .unwrap();
            println!("-- filter {name}, cursor {}:\n{plan}\n", cursor.is_some());
            assert!(
                sequential_scans_of_data(&plan).is_empty(),
                "{name}: a sequential scan\n{plan}"
            );
            // An event id names at most one event per (merchant, provider): sorting those is free.
            if name != "event_id" {
                assert!(
                    !plan.contains("Sort"),
                    "{name}: a sort instead of index order\n{plan}"
                );
            }
            assert!(plan.contains("Index"), "{name}: no index\n{plan}");
        }
    }
}

/// `n` events at the real row shapes: three providers, four outcomes (mostly applied), bodies
/// of a few hundred bytes, over 30 days.
pub async fn load_events(app: &TestApp, n: i64) {
    app.db
        .execute(
            "INSERT INTO callback_deliveries (merchant_id, provider, event_id, body, received_at, \
             event_type, outcome, reason, ack_status, transfer_id) \
             SELECT CASE WHEN g % 10 = 0 THEN 43 ELSE 42 END, \
                    (ARRAY['acme','stripe','plain'])[1 + g % 3], 'evt_' || g, \
                    convert_to('{\"id\":\"evt_' || g || '\",\"type\":\"payment.succeeded\",\"data\":{\"payment_id\":\"pay_' || g || \
                      '\",\"order_id\":' || g || ',\"amount_minor\":' || (1000 + g % 5000) || ',\"currency\":\"USD\",\"note\":\"' || repeat('x', 120) || '\"}}', 'UTF8'), \
                    '2026-11-30T00:00:00Z'::timestamptz - (g * interval '13 seconds'), \
                    CASE WHEN g % 97 = 0 THEN 'charge.refunded' ELSE 'payment.succeeded' END, \
                    CASE WHEN g % 500 = 0 THEN 'held' WHEN g % 701 = 0 THEN 'rejected' \
                         WHEN g % 211 = 0 THEN 'ignored' ELSE 'applied' END, \
                    CASE WHEN g % 500 = 0 THEN 'amount_mismatch' END, 200, g \
             FROM generate_series(1, $1::bigint) g",
            &[&n],
        )
        .await
        .unwrap();
    app.db
        .batch_execute("ANALYZE callback_deliveries")
        .await
        .unwrap();
}

/// Inserts `n` applied events of `acme` straight into the event log (the write path is not
/// under test here), bodies of about 200 bytes, and analyzes the table, as autovacuum would
/// have by the time anyone exports that many; returns their event ids, oldest first. Without
/// statistics the planner guesses that `provider = 'acme'` matches 0.5% of the rows (287 of
/// 50,000), so each export batch read every one of them and sorted them for its 1,000 (a
/// bitmap scan and a top-N sort, 30 to 75 ms here, past the 100 ms bound under load) instead
/// of walking the index for 1,000 (0.5 ms).
async fn insert_events(app: &TestApp, n: i64) -> Vec<String> {
    let ids = app
        .db
        .query(
            "INSERT INTO callback_deliveries \
                 (merchant_id, provider, event_id, body, received_at, event_type, outcome, ack_status) \
             SELECT 42, 'acme', 'evt_bulk_' || g, \
                    convert_to('{\"id\":\"evt_bulk_' || g || '\",\"type\":\"payment.succeeded\",\"pad\":\"' \
                               || repeat('x', 120) || '\"}', 'UTF8'), \
                    '2026-11-01T00:00:00Z'::timestamptz + g * interval '1 millisecond', \
                    'payment.succeeded', 'applied', 200 \
             FROM generate_series(1, $1::bigint) g \
             RETURNING event_id",
            &[&n],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    app.db
        .batch_execute("ANALYZE callback_deliveries")
        .await
        .unwrap();
    ids
}

/// The JSONL lines of an export and its trailer (the last line), parsed.
fn export_lines(text: &str) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let trailer = lines
        .pop()
        .unwrap_or_else(|| panic!("an empty export has its trailer too"));
    assert!(
        trailer.get("trailer").is_some(),
        "the last line is the trailer, got {trailer} after {} line(s)",
        lines.len()
    );
    (lines, trailer["trailer"].clone())
}

/// One statement for the whole export would run as long as the download and be cancelled by
/// statement_timeout part-way (the file silently cut). Keyset batches are short statements:
/// with a 100 ms bound every one of 50,000 events arrives, in order, and the trailer counts them.
#[tokio::test]
async fn the_http_export_pages_in_short_statements_and_ends_with_a_trailer_that_counts_every_line()
{
    let app = crate::support::spawn_app_with("[database]\nstatement_timeout_ms = 100\n").await;
    let ids = insert_events(&app, 50_000).await;
    let response = app.admin_get("/admin/events.jsonl?provider=acme").await;
    assert_eq!(response.status(), 200);
    let text = response
        .text()
        .await
        .unwrap_or_else(|e| panic!("the export stopped part-way: {e}"));
    let (lines, trailer) = export_lines(&text);
    let exported: Vec<&str> = lines.iter().map(|l| l["id"].as_str().unwrap()).collect();
    assert_eq!(exported.len(), ids.len(), "every event, once");
    assert!(exported == ids, "oldest first, none missing or repeated");
    assert_eq!(
        trailer,
        serde_json::json!({"events": 50_000, "skipped_non_utf8": 0})
    );
}

/// A body that is not UTF-8 cannot be a JSON string: skipped, as `export` does, and counted.
#[tokio::test]
async fn the_http_export_counts_bodies_that_are_not_utf8_in_its_trailer() {
    let app = spawn_app().await;
    four_outcomes(&app).await;
    app.db
        .execute(
            "INSERT INTO callback_deliveries (merchant_id, provider, event_id, body, outcome, ack_status) \
             VALUES (42, 'acme', 'evt_latin1', '\\xff7b7d'::bytea, 'ignored', 200)",
            &[],
        )
        .await
        .unwrap();
    let response = app.admin_get("/admin/events.jsonl?merchant_id=42").await;
    assert_eq!(response.status(), 200);
    let (lines, trailer) = export_lines(&response.text().await.unwrap());
    assert_eq!(lines.len(), 4);
    assert_eq!(
        trailer,
        serde_json::json!({"events": 4, "skipped_non_utf8": 1})
    );
}

/// A stream that fails has no trailer, so a cut file is told from a whole one: here every
/// batch waits on a lock the test holds until lock_timeout ends it.
#[tokio::test]
async fn an_http_export_that_fails_has_no_trailer() {
    let app = crate::support::spawn_app_with("[server]\nacquire_timeout_ms = 50\n").await;
    insert_events(&app, 10).await;
    let locker = crate::support::connect(&app.database_url).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE callback_deliveries IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let response = app.admin_get("/admin/events.jsonl").await;
    let body = match response.status().as_u16() {
        200 => response.text().await.unwrap_or_default(),
        status => panic!("the stream had not started: {status}"),
    };
    assert!(
        !body.contains("\"trailer\""),
        "a failed export must not end with a trailer: {body}"
    );
    locker.batch_execute("ROLLBACK").await.unwrap();
}

#[derive(diesel::QueryableByName)]
struct PlanCounts {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    custom_plans: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    generic_plans: i64,
}

/// The API pool's connections plan every event-log read for its values: a generic plan of the
/// event-id search, kept after five runs of its prepared statement, walked the whole history
/// backwards by time under the benchmark (docs/performance.md).
#[tokio::test]
async fn the_api_pool_plans_every_event_log_read_for_its_own_values() {
    use callback_gateway::db::{self, connection::ConnectSpec, pool::SessionLimits};
    use std::time::Duration;

    let app = spawn_app().await;
    load_events(&app, 20_000).await;
    let limits = SessionLimits {
        lock_timeout: Duration::from_secs(3),
        statement_timeout: Duration::from_secs(5),
        custom_plans: true,
    };
    let spec = ConnectSpec::new(
        &app.database_url,
        false,
        Duration::from_secs(5),
        "test",
        limits.sql(),
    )
    .unwrap();
    let pool = db::build_pool(spec, 1, Duration::from_secs(5));
    let mut conn = pool.get().await.unwrap();
    for g in 1..=12 {
        let filter = EventFilter {
            event_id: Some(format!("evt_{g}")),
            ..Default::default()
        };
        let page = read::list(&mut conn, &filter, None, 50).await.unwrap();
        assert_eq!(page.events.len(), 1);
    }
    let plans: PlanCounts = diesel::sql_query(
        "SELECT custom_plans, generic_plans FROM pg_prepared_statements \
         WHERE statement LIKE '%event_id%' ORDER BY custom_plans DESC LIMIT 1",
    )
    .committed_result(&mut conn)
    .await
    .unwrap();
    assert_eq!(
        (plans.custom_plans, plans.generic_plans),
        (12, 0),
        "each run planned for its own event id"
    );
}

/// The event detail's seven statements (the delivery, its ack, its transfer, the transfer's
/// entries, the payment, the payment's disputes, the order) are index lookups at 200,000 rows
/// in every table (4,000 disputes).
#[tokio::test]
async fn an_events_detail_is_index_lookups_at_200k_rows() {
    use diesel_async::AsyncConnection;

    let app = spawn_app().await;
    load_events(&app, 200_000).await;
    app.db
        .batch_execute(
            "INSERT INTO orders (id, user_id, amount_minor, currency, reference, status) \
             SELECT g, 42, 1000 + g % 5000, 'USD', 'ref_' || g, 'paid' FROM generate_series(1, 200000) g; \
             INSERT INTO payments (merchant_id, provider, payment_id, order_id, status, amount_minor, currency) \
             SELECT 42, 'acme', 'pay_' || g, g, 'succeeded', 1000 + g % 5000, 'USD' FROM generate_series(1, 200000) g; \
             INSERT INTO ledger_transfers (id, merchant_id, provider, event_id, kind, order_id, payment_id) \
             SELECT g, 42, 'acme', 'evt_' || g, 'payment', g, 'pay_' || g FROM generate_series(1, 200000) g; \
             INSERT INTO ledger_entries (transfer_id, merchant_id, account, currency, amount_minor) \
             SELECT g, 42, a.account, 'USD', a.sign * (1000 + g % 5000) \
             FROM generate_series(1, 200000) g, \
                  (VALUES ('psp_clearing:acme', 1), ('merchant_payable', -1)) a(account, sign); \
             INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, status, response_status, \
                                           response_body, expires_at) \
             SELECT 42, 'payment.callback', 'acme:evt_' || g, 'h', 'succeeded', 200, '{}'::jsonb, \
                    now() + interval '1 day' FROM generate_series(1, 200000) g; \
             INSERT INTO payment_disputes (merchant_id, provider, dispute_id, payment_id, order_id, funds, \
                                           outcome, currency, withdrawn_minor) \
             SELECT 42, 'acme', 'dp_' || g, 'pay_' || g, g, 'withdrawn', 'lost', 'USD', 1000 \
             FROM generate_series(1, 200000, 50) g; \
             ANALYZE;",
        )
        .await
        .unwrap();
    let mut conn = AsyncPgConnection::establish(&app.database_url)
        .await
        .unwrap();
    let plans = read::explain_detail(
        &mut conn,
        ("acme", "evt_123456"),
        42,
        (123_456, "pay_123456", 123_456),
    )
    .await
    .unwrap();
    println!("-- event detail:\n{plans}\n");
    let statements: Vec<&str> = plans.split("\n--\n").collect();
    assert_eq!(statements.len(), 7, "{plans}");
    for (statement, plan) in [
        "delivery", "ack", "transfer", "entries", "payment", "disputes", "order",
    ]
    .iter()
    .zip(statements)
    {
        assert!(
            sequential_scans_of_data(plan).is_empty() && plan.contains("Index"),
            "{statement}: not an index lookup\n{plan}"
        );
    }
}
