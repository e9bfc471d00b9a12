//! Expiry: batched deletes that keep processing and unexpired rows, via the expires_at index.

use callback_gateway::idempotency::cleanup::{self, DELETE_BATCH_SQL};
use diesel_async::{AsyncConnection, AsyncPgConnection};

use crate::support::spawn_app;

async fn seed(app: &crate::support::TestApp) {
    app.db
        .batch_execute(
            "INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, status, response_status, response_body, expires_at) \
             SELECT n % 100, 'order.create', 'expired-' || n, 'h', CASE WHEN n % 2 = 0 THEN 'succeeded' ELSE 'failed' END, 201, '{}', now() - interval '1 hour' \
             FROM generate_series(1, 23000) n; \
             INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, status, expires_at) \
             SELECT 1, 'order.create', 'processing-' || n, 'h', 'processing', now() - interval '1 hour' FROM generate_series(1, 50) n; \
             INSERT INTO idempotency_keys (user_id, op, idem_key, request_hash, status, response_status, response_body, expires_at) \
             SELECT 1, 'payment.callback', 'live-' || n, 'h', 'succeeded', 200, '{}', now() + interval '1 hour' FROM generate_series(1, 700) n; \
             ANALYZE idempotency_keys;",
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn expired_finished_rows_go_in_batches_and_the_rest_stays() {
    let app = spawn_app().await;
    seed(&app).await;
    let mut conn = AsyncPgConnection::establish(&app.database_url)
        .await
        .unwrap();

    assert_eq!(
        cleanup::delete_batch(&mut conn, 5000).await.unwrap(),
        5000,
        "one batch is at most 5000 rows"
    );
    assert_eq!(
        cleanup::run_pass(&mut conn, 5000).await.unwrap(),
        18_000,
        "the pass loops until a short batch"
    );

    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE status = 'processing'")
            .await,
        50
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys WHERE expires_at > now()")
            .await,
        700
    );
    assert_eq!(
        app.count("SELECT count(*) FROM idempotency_keys").await,
        750
    );
    assert_eq!(cleanup::run_pass(&mut conn, 5000).await.unwrap(), 0);
}

#[tokio::test]
async fn the_batch_delete_walks_the_expires_at_index() {
    let app = spawn_app().await;
    seed(&app).await;
    let plan = app.explain(&DELETE_BATCH_SQL.replace("$1", "5000")).await;
    assert!(plan.contains("idx_idempotency_keys_expires_at"), "{plan}");
}

#[tokio::test]
async fn only_one_of_two_concurrent_cleaners_wins_the_lock() {
    let app = spawn_app().await;
    seed(&app).await;
    // A first cleaner holds the lock on its own session.
    let holder = crate::support::connect(&app.database_url).await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&cleanup::CLEANER_LOCK_KEY])
        .await
        .unwrap();
    let skipped = cleanup::run_exclusive_pass(&app.database_url, 5000)
        .await
        .unwrap();
    assert_eq!(skipped, None, "the second cleaner steps aside");
    holder
        .execute("SELECT pg_advisory_unlock_all()", &[])
        .await
        .unwrap();
    let ran = cleanup::run_exclusive_pass(&app.database_url, 5000)
        .await
        .unwrap();
    assert_eq!(ran, Some(23_000));
}

#[test]
fn the_cleanup_command_prints_how_many_rows_it_deleted() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let app = runtime.block_on(spawn_app());
    runtime.block_on(seed(&app));
    let output = std::process::Command::new(crate::support::gateway::gateway_binary())
        .arg("cleanup")
        .env("DATABASE_URL", &app.database_url)
        .env_remove("GATEWAY_CONFIG")
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "deleted 23000 expired idempotency record(s)\n\
         deleted 0 delivered notification(s) past retention\n\
         deleted 0 failed notification(s) past retention\n\
         dropped 0 pending notification(s) of disabled endpoints beyond what they keep\n\
         deleted 0 expired transmission binding(s)"
    );
}
