//! Every row of the contract's `POST /v1/orders` table, over real HTTP.

use std::sync::Arc;

use crate::support::{answer, spawn_app, spawn_app_with};

const ORDER: &str = r#"{"amount_minor":1999,"currency":"USD","reference":"cart-77"}"#;

#[tokio::test]
async fn a_first_request_creates_the_order_and_answers_201() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    let response = app.post_order(&token, "key-1", ORDER).await;
    assert_eq!(response.status(), 201);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(response.headers().get("Idempotent-Replayed").is_none());
    let order: serde_json::Value = response.json().await.unwrap();
    assert_eq!(order["status"], "pending_payment");
    assert_eq!(order["amount_minor"], 1999);
    assert_eq!(order["currency"], "USD");
    assert_eq!(order["reference"], "cart-77");
    assert!(order["id"].as_i64().is_some() && order["created_at"].is_string());
    assert_eq!(
        app.count("SELECT count(*) FROM orders WHERE user_id = 7")
            .await,
        1
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE status = 'succeeded' AND op = 'order.create'")
            .await,
        1
    );
}

#[tokio::test]
async fn a_replay_returns_the_byte_identical_response_and_creates_nothing() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    let (status, replayed, first) = answer(app.post_order(&token, "key-1", ORDER).await).await;
    assert_eq!((status, replayed), (201, false));

    let response = app.post_order(&token, "key-1", ORDER).await;
    assert_eq!(response.headers()["content-type"], "application/json");
    let (status, replayed, second) = answer(response).await;
    assert_eq!((status, replayed), (201, true));
    assert_eq!(second, first, "a replay must send the same bytes");
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn the_quoted_structured_field_key_is_the_same_key() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    let (_, _, first) = answer(app.post_order(&token, "abc", ORDER).await).await;
    let (status, replayed, second) = answer(app.post_order(&token, "\"abc\"", ORDER).await).await;
    assert_eq!((status, replayed), (201, true));
    assert_eq!(second, first);
}

#[tokio::test]
async fn no_token_or_an_unknown_token_is_401_and_records_nothing() {
    let app = spawn_app().await;
    let response = app
        .client
        .post(app.url("/v1/orders"))
        .header("Idempotency-Key", "k")
        .body(ORDER)
        .send()
        .await
        .unwrap();
    let (status, _, body) = answer(response).await;
    assert_eq!(status, 401);
    assert!(body.contains("\"unauthorized\""));
    let (status, _, _) = answer(app.post_order("cgw_not_a_real_token", "k", ORDER).await).await;
    assert_eq!(status, 401);
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);
}

#[tokio::test]
async fn bad_keys_are_400_with_their_codes_and_record_nothing() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    let missing = app
        .client
        .post(app.url("/v1/orders"))
        .bearer_auth(&token)
        .body(ORDER)
        .send()
        .await
        .unwrap();
    let cases = [
        (missing, "missing_idempotency_key"),
        (
            app.post_order(&token, "", ORDER).await,
            "missing_idempotency_key",
        ),
        (
            app.post_order(&token, &"k".repeat(129), ORDER).await,
            "invalid_idempotency_key",
        ),
        (
            app.post_order(&token, "has space", ORDER).await,
            "invalid_idempotency_key",
        ),
    ];
    for (response, code) in cases {
        let (status, _, body) = answer(response).await;
        assert_eq!(status, 400, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"], code);
    }
    let (status, _, _) = answer(app.post_order(&token, &"k".repeat(128), ORDER).await).await;
    assert_eq!(status, 201, "128 characters is the longest valid key");
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 1);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_records_nothing() {
    let app = spawn_app_with("[server]\nbody_limit_bytes = 1024\n").await;
    let token = app.token_for(7).await;
    let big = format!(
        r#"{{"amount_minor":1,"currency":"USD","reference":"{}"}}"#,
        "x".repeat(2000)
    );
    let (status, _, body) = answer(app.post_order(&token, "k", &big).await).await;
    assert_eq!(status, 413);
    assert!(body.contains("payload_too_large"));
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422_and_changes_nothing() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    app.post_order(&token, "k", ORDER).await;
    let other = r#"{"amount_minor":2000,"currency":"USD","reference":"cart-77"}"#;
    let (status, replayed, body) = answer(app.post_order(&token, "k", other).await).await;
    assert_eq!((status, replayed), (422, false));
    assert!(body.contains("key_reused_with_different_body"));
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn user_a_key_never_affects_user_b() {
    let app = spawn_app().await;
    let (a, b) = (app.token_for(1).await, app.token_for(2).await);
    let (status_a, _, body_a) = answer(app.post_order(&a, "shared-key", ORDER).await).await;
    let other = r#"{"amount_minor":5,"currency":"EUR"}"#;
    let (status_b, replayed_b, body_b) =
        answer(app.post_order(&b, "shared-key", other).await).await;
    assert_eq!((status_a, status_b, replayed_b), (201, 201, false));
    assert_ne!(body_a, body_b);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 2);
}

#[tokio::test]
async fn a_deterministic_failure_is_stored_and_replayed_as_it_was() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    let cases = [
        (
            "k-amount",
            r#"{"amount_minor":0,"currency":"USD"}"#,
            422,
            "invalid_amount",
        ),
        (
            "k-currency",
            r#"{"amount_minor":5,"currency":"ABC"}"#,
            422,
            "unknown_currency",
        ),
        ("k-json", r#"{"amount_minor":"#, 400, "invalid_json"),
    ];
    for (key, body, expected_status, code) in cases {
        let (status, replayed, first) = answer(app.post_order(&token, key, body).await).await;
        assert_eq!((status, replayed), (expected_status, false), "{first}");
        let parsed: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(parsed["error"], code);
        let (status, replayed, second) = answer(app.post_order(&token, key, body).await).await;
        assert_eq!((status, replayed), (expected_status, true));
        assert_eq!(second, first);
    }
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE status = 'failed'")
            .await,
        3
    );
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);
}

#[tokio::test]
async fn a_failed_commit_leaves_no_record_and_a_retry_runs_as_the_first_time() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    // A deferred constraint trigger fails at COMMIT, after the order and the record were written.
    app.db
        .batch_execute(
            "CREATE FUNCTION fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'forced commit failure'; END $$; \
             CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON orders \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_commit();",
        )
        .await
        .unwrap();
    let (status, _, body) = answer(app.post_order(&token, "k", ORDER).await).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"unavailable\""));
    assert!(
        !body.contains("forced commit failure"),
        "internal errors stay in the log"
    );
    assert_eq!(app.count("SELECT count(*) FROM idempotency_keys").await, 0);
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 0);

    app.db
        .batch_execute("DROP TRIGGER fail_at_commit ON orders")
        .await
        .unwrap();
    let (status, replayed, _) = answer(app.post_order(&token, "k", ORDER).await).await;
    assert_eq!(
        (status, replayed),
        (201, false),
        "the retry is a first request"
    );
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

#[tokio::test]
async fn forty_concurrent_same_key_requests_create_exactly_one_order() {
    let app = Arc::new(spawn_app().await);
    let token = Arc::new(app.token_for(7).await);
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let (app, token) = (app.clone(), token.clone());
            tokio::spawn(async move { answer(app.post_order(&token, "storm", ORDER).await).await })
        })
        .collect();
    let mut created = Vec::new();
    for task in tasks {
        let (status, _, body) = task.await.unwrap();
        match status {
            201 => created.push(body),
            409 => assert!(body.contains("idempotency_key_in_flight")),
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    assert!(!created.is_empty());
    assert!(
        created.iter().all(|b| *b == created[0]),
        "every 201 carries the same bytes"
    );
    assert_eq!(app.count("SELECT count(*) FROM orders").await, 1);
}

/// Another "request" for user 7's `key` with the ORDER body, in flight.
async fn hold_key_in_open_transaction(
    app: &crate::support::TestApp,
    key: &str,
) -> tokio_postgres::Client {
    let fingerprint = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(ORDER.as_bytes()));
    crate::support::hold_key(app, 7, "order.create", key, &fingerprint).await
}

#[tokio::test]
async fn a_duplicate_of_an_in_flight_request_gets_409_after_the_acquire_timeout() {
    let app = spawn_app_with("[server]\nacquire_timeout_ms = 300\n").await;
    let token = app.token_for(7).await;
    // Another "request" holds the key in an open transaction.
    let holder = hold_key_in_open_transaction(&app, "busy").await;

    let response = app.post_order(&token, "busy", ORDER).await;
    assert_eq!(response.status(), 409);
    assert_eq!(response.headers()["retry-after"], "2");
    let (_, _, body) = answer(response).await;
    assert!(body.contains("idempotency_key_in_flight"));

    holder.batch_execute("ROLLBACK").await.unwrap();
    let (status, replayed, _) = answer(app.post_order(&token, "busy", ORDER).await).await;
    assert_eq!(
        (status, replayed),
        (201, false),
        "after the holder rolled back the key is free"
    );
}

#[tokio::test]
async fn a_waiting_duplicate_replays_the_first_once_it_commits() {
    let app = spawn_app().await;
    let token = app.token_for(7).await;
    let holder = hold_key_in_open_transaction(&app, "slow").await;
    let waiting = {
        let (client, url, token) = (app.client.clone(), app.url("/v1/orders"), token.clone());
        tokio::spawn(async move {
            let response = client
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", "slow")
                .body(ORDER)
                .send()
                .await
                .unwrap();
            answer(response).await
        })
    };
    // Commit the first only once the duplicate is really waiting on the key's lock. Polled
    // from another session: inside a transaction pg_stat_activity is a frozen snapshot.
    let observer = crate::support::connect(&app.database_url).await;
    let wait_for_lock = async {
        loop {
            let waiting_on_lock: i64 = observer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if waiting_on_lock > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
    };
    // A bound so a regression fails the test instead of hanging the suite.
    tokio::time::timeout(std::time::Duration::from_secs(30), wait_for_lock)
        .await
        .expect("the duplicate never waited on the key's lock");
    holder
        .execute(
            "UPDATE idempotency_keys SET status = 'succeeded', response_status = 201, response_body = '{\"id\": 99}' \
             WHERE idem_key = 'slow'",
            &[],
        )
        .await
        .unwrap();
    holder.batch_execute("COMMIT").await.unwrap();
    let (status, replayed, body) = waiting.await.unwrap();
    assert_eq!(
        (status, replayed, body.as_str()),
        (201, true, "{\"id\": 99}")
    );
}

#[tokio::test]
async fn an_order_is_visible_to_its_owner_only() {
    let app = spawn_app().await;
    let (owner, stranger) = (app.token_for(1).await, app.token_for(2).await);
    let created: serde_json::Value = app
        .post_order(&owner, "k", ORDER)
        .await
        .json()
        .await
        .unwrap();
    let path = format!("/v1/orders/{}", created["id"]);
    let mine = app
        .client
        .get(app.url(&path))
        .bearer_auth(&owner)
        .send()
        .await
        .unwrap();
    assert_eq!(mine.status(), 200);
    let fetched: serde_json::Value = mine.json().await.unwrap();
    assert_eq!(fetched, created);
    let theirs = app
        .client
        .get(app.url(&path))
        .bearer_auth(&stranger)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);
    let nobody = app.client.get(app.url(&path)).send().await.unwrap();
    assert_eq!(nobody.status(), 401);
}
