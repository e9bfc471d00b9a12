use callback_gateway::db;

use crate::support::{connect, empty_database};

/// The migrations diesel CLI sees: one directory each.
fn migration_count() -> usize {
    std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().is_dir())
        .count()
}

async fn tables(url: &str) -> Vec<String> {
    let client = connect(url).await;
    client
        .query(
            // The event log's partitions are its months (data), not tables of the schema.
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' \
             AND tablename <> '__diesel_schema_migrations' \
             AND NOT (SELECT relispartition FROM pg_class \
                      WHERE oid = (quote_ident(schemaname) || '.' || quote_ident(tablename))::regclass) \
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn migrations_apply_revert_and_apply_again() {
    let url = empty_database().await;

    let applied = db::run_migrations(&url).await.unwrap();
    assert_eq!(
        applied.len(),
        migration_count(),
        "all migrations apply to an empty database"
    );
    assert_eq!(
        tables(&url).await,
        [
            "api_tokens",
            "audit_log",
            "audit_log_chain",
            "callback_deliveries",
            "callback_minute_counts",
            "callback_minute_state",
            "idempotency_keys",
            "ledger_balance_checkpoints",
            "ledger_checkpoint_state",
            "ledger_entries",
            "ledger_transfers",
            "merchant_notifications",
            "notification_attempts",
            "notification_endpoints",
            "operators",
            "orders",
            "payment_disputes",
            "payments",
            "payouts",
            "portal_links",
            "portal_sessions",
            "provider_transmissions",
            "refund_requests",
            "settlement_payouts",
            "webhook_endpoint_revision",
            "webhook_endpoints"
        ]
    );
    assert!(
        db::run_migrations(&url).await.unwrap().is_empty(),
        "a second run applies nothing"
    );

    let reverted = db::revert_all_migrations(&url).await.unwrap();
    assert_eq!(reverted.len(), migration_count());
    assert!(
        tables(&url).await.is_empty(),
        "every down.sql removes what its up.sql made"
    );

    assert_eq!(
        db::run_migrations(&url).await.unwrap().len(),
        migration_count()
    );
}

#[tokio::test]
async fn the_seed_table_has_its_scoped_unique_index_and_expiry_index() {
    let url = empty_database().await;
    db::run_migrations(&url).await.unwrap();
    let client = connect(&url).await;
    let indexes: Vec<String> = client
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'idempotency_keys' ORDER BY indexname",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        indexes
            .iter()
            .any(|d| d.contains("UNIQUE INDEX uq_idempotency")
                && d.contains("(user_id, op, idem_key)")),
        "{indexes:?}"
    );
    assert!(
        indexes.iter().any(|d| d.contains("(expires_at)")),
        "{indexes:?}"
    );
}

#[tokio::test]
async fn the_ledger_refuses_updates_and_deletes() {
    let url = empty_database().await;
    db::run_migrations(&url).await.unwrap();
    let client = connect(&url).await;
    client
        .batch_execute(
            "INSERT INTO ledger_transfers (merchant_id, provider, event_id, kind, order_id, payment_id) \
             VALUES (1, 'p', 'e', 'payment', 1, 'pay')",
        )
        .await
        .unwrap();
    let update = client
        .batch_execute("UPDATE ledger_transfers SET kind = 'refund'")
        .await;
    let delete = client.batch_execute("DELETE FROM ledger_transfers").await;
    for refused in [update, delete] {
        let error = refused.expect_err("the ledger must refuse the change");
        let message = error
            .as_db_error()
            .map(|e| e.message().to_owned())
            .unwrap_or_default();
        assert!(message.contains("append-only"), "{error:?}");
    }
}

/// What a migration may change, as the catalog states it: every routine with its definition,
/// every column with its type and default, every index and constraint.
async fn schema_snapshot(url: &str) -> Vec<String> {
    let client = connect(url).await;
    let sql = "SELECT 'function ' || p.oid::regprocedure::text || E'\n' || pg_get_functiondef(p.oid) \
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace \
               WHERE n.nspname = 'public' AND p.prokind = 'f' \
               UNION ALL \
               SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' \
                      || is_nullable || ' ' || coalesce(column_default, '') \
               FROM information_schema.columns WHERE table_schema = 'public' \
               UNION ALL \
               SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' \
               UNION ALL \
               SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' ' \
                      || pg_get_constraintdef(oid) \
               FROM pg_constraint WHERE connamespace = 'public'::regnamespace \
               ORDER BY 1";
    client
        .query(sql, &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Applies the migrations before the one whose name contains `name`, then (`apply` true) that
/// one too, or (`apply` false) reverts the last applied; the versions it ran.
async fn migrate_around(url: &str, name: &'static str, step: Step) -> Vec<String> {
    use diesel_async::AsyncPgConnection;
    use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
    use diesel_migrations::MigrationHarness;
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut conn: AsyncConnectionWrapper<AsyncPgConnection> =
            diesel::Connection::establish(&url).unwrap();
        let mut ran = Vec::new();
        match step {
            Step::UpTo | Step::Through => {
                for migration in conn.pending_migrations(db::MIGRATIONS).unwrap() {
                    let is_it = migration.name().to_string().contains(name);
                    if is_it && step == Step::UpTo {
                        break;
                    }
                    ran.push(conn.run_migration(&*migration).unwrap().to_string());
                    if is_it {
                        break;
                    }
                }
            }
            Step::RevertLast => {
                ran.push(
                    conn.revert_last_migration(db::MIGRATIONS)
                        .unwrap()
                        .to_string(),
                );
            }
        }
        ran
    })
    .await
    .unwrap()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    UpTo,
    Through,
    RevertLast,
}

/// Migration 000040 redefines routines that older migrations made (issue 25's disputes among
/// them): its down.sql must leave every routine, column, index and constraint exactly as the
/// migrations before it left them, so a rollback runs the disputes' write path unchanged.
#[tokio::test]
async fn reverting_the_notifications_migration_restores_the_schema_the_migrations_before_made() {
    let url = empty_database().await;
    migrate_around(&url, "merchant_notifications", Step::UpTo).await;
    let before = schema_snapshot(&url).await;
    assert!(
        before
            .iter()
            .any(|s| s.starts_with("function payment_disputes_write(")),
        "the disputes' routines are among the migrations before"
    );
    let ran = migrate_around(&url, "merchant_notifications", Step::Through).await;
    assert_eq!(ran.len(), 1, "{ran:?}");
    let after = schema_snapshot(&url).await;
    assert_ne!(before, after);
    assert_eq!(
        migrate_around(&url, "merchant_notifications", Step::RevertLast).await,
        ran
    );
    let reverted = schema_snapshot(&url).await;
    let lost: Vec<&String> = before.iter().filter(|s| !reverted.contains(s)).collect();
    let left: Vec<&String> = reverted.iter().filter(|s| !before.contains(s)).collect();
    assert!(
        lost.is_empty() && left.is_empty(),
        "not restored: {lost:#?}\nleft behind: {left:#?}"
    );
}

/// Migrations 000041 and 000042 swap the index of every notification by merchant for one of
/// finished rows only; reverting both must give back exactly the schema of 000040 (the old
/// index, built again, and nothing of the new one), and applying them leaves no merchant index
/// that staging writes.
#[tokio::test]
async fn reverting_the_merchant_finished_index_migrations_restores_the_old_merchant_index() {
    let url = empty_database().await;
    migrate_around(&url, "notifications_merchant_finished_index", Step::UpTo).await;
    let before = schema_snapshot(&url).await;
    let mut ran =
        migrate_around(&url, "notifications_merchant_finished_index", Step::Through).await;
    ran.extend(migrate_around(&url, "drop_notifications_merchant_index", Step::Through).await);
    assert_eq!(ran.len(), 2, "{ran:?}");
    let after = schema_snapshot(&url).await;
    let merchant_indexes: Vec<&String> = after
        .iter()
        .filter(|s| s.starts_with("index CREATE INDEX idx_merchant_notifications_merchant"))
        .collect();
    assert_eq!(merchant_indexes.len(), 1, "{merchant_indexes:#?}");
    assert!(
        merchant_indexes[0].ends_with("WHERE (status <> 'pending'::text)"),
        "{merchant_indexes:#?}"
    );
    for _ in 0..2 {
        migrate_around(&url, "", Step::RevertLast).await;
    }
    assert_eq!(schema_snapshot(&url).await, before);
}

/// Reverts the migrations after the partitioning (000054), newest first, then it. The list
/// grows with every migration, so it is not written out here.
async fn revert_through_partitioning(url: &str) {
    let mut previous = String::from("99999999999999");
    loop {
        let reverted = db::revert_last_migration(url).await.unwrap();
        assert!(
            reverted < previous,
            "{reverted} after {previous}: newest first"
        );
        if reverted == "20261203000054" {
            return;
        }
        assert!(reverted.as_str() > "20261203000054", "{reverted}");
        previous = reverted;
    }
}

/// The event log's partitioning on a database that holds rows: every row, old and new, is
/// read back after it, a redelivered event is still recorded once, and the way back (down.sql)
/// returns every row to one table, those received into a monthly partition included.
#[tokio::test]
async fn partitioning_the_event_log_keeps_every_row_and_reverts_with_them() {
    let url = empty_database().await;
    db::run_migrations(&url).await.unwrap();
    revert_through_partitioning(&url).await;
    let client = connect(&url).await;
    client
        .batch_execute(
            "INSERT INTO callback_deliveries (merchant_id, provider, event_id, body, received_at) \
             SELECT 42, 'acme', 'evt_' || g, convert_to('{}', 'UTF8'), \
                    now() - g * interval '1 day' FROM generate_series(1, 1000) g",
        )
        .await
        .unwrap();

    db::run_migrations(&url).await.unwrap();
    assert_eq!(
        count(&client, "SELECT count(*) FROM callback_deliveries").await,
        1000
    );
    assert_eq!(
        count(&client, "SELECT count(*) FROM callback_deliveries_legacy").await,
        1000,
        "today's table became the legacy partition, no row copied"
    );
    // The writer's ON CONFLICT still finds an event already recorded in the legacy partition.
    let recorded: bool = client
        .query_one(
            "SELECT callback_record_delivery(42, 'acme', 'evt_1', convert_to('{}', 'UTF8'), \
                 NULL, NULL, NULL, 200, NULL)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!recorded);
    client
        .batch_execute(
            "INSERT INTO callback_deliveries (merchant_id, provider, event_id, body, received_at) \
             VALUES (42, 'acme', 'evt_next_month', '\\x7b7d', now() + interval '40 days')",
        )
        .await
        .unwrap();
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM callback_deliveries WHERE tableoid <> 'callback_deliveries_legacy'::regclass"
        )
        .await,
        1,
        "a row of a later month goes to its monthly partition"
    );

    revert_through_partitioning(&url).await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM callback_deliveries").await,
        1001
    );
    let partitioned: bool = client
        .query_one(
            "SELECT relkind = 'p' FROM pg_class WHERE relname = 'callback_deliveries'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!partitioned, "down.sql gives back one plain table");
    db::run_migrations(&url).await.unwrap();
    assert_eq!(
        count(&client, "SELECT count(*) FROM callback_deliveries").await,
        1001
    );
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Migrations 000067 to 000073 give each notification its endpoint without holding the table:
/// the pending rows in 000067, the indexes by endpoint built concurrently beside the old ones
/// and renamed to their names, the finished rows in batches. On a database holding the rows of
/// a merchant with an endpoint made by API and one without, every row names its endpoint after
/// them, the indexes are the ones by endpoint under the old names, and reverting all seven
/// gives back exactly the schema before them.
#[tokio::test]
async fn the_endpoint_of_each_notification_comes_in_steps_and_reverts_to_the_schema_before() {
    let url = empty_database().await;
    migrate_around(&url, "merchant_endpoints", Step::UpTo).await;
    let before = schema_snapshot(&url).await;
    let client = connect(&url).await;
    client
        .batch_execute(
            "INSERT INTO webhook_endpoints (id, merchant_id, url, secret_sealed) \
             VALUES ('ep_00000000000000000000abcd', 42, 'https://merchant.example/', '\\x00'); \
             INSERT INTO notification_endpoints (merchant_id, disabled_at, disabled_reason) \
             VALUES (42, now(), 'operator'); \
             INSERT INTO merchant_notifications (merchant_id, kind, object_status, status) \
             SELECT 42 + g % 2, 'order.paid', 'paid', \
                    CASE WHEN g % 3 = 0 THEN 'pending' ELSE 'delivered' END \
             FROM generate_series(1, 25000) g;",
        )
        .await
        .unwrap();
    let mut ran = Vec::new();
    for name in [
        "merchant_endpoints",
        "notifications_due_index_by_endpoint",
        "notifications_order_index_by_endpoint",
        "drop_notifications_due_index",
        "drop_notifications_order_index",
        "notifications_indexes_by_endpoint_names",
        "notifications_history_by_endpoint",
    ] {
        ran.extend(migrate_around(&url, name, Step::Through).await);
    }
    assert_eq!(ran.len(), 7, "{ran:?}");
    let by_endpoint: Vec<(i64, String, i64)> = client
        .query(
            "SELECT merchant_id, endpoint_id, count(*) FROM merchant_notifications \
             GROUP BY 1, 2 ORDER BY 1, 2",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        by_endpoint,
        [
            (42, "ep_00000000000000000000abcd".to_owned(), 12500),
            (43, "file".to_owned(), 12500)
        ],
        "pending and finished rows alike"
    );
    let health: Vec<(String, Option<String>)> = client
        .query(
            "SELECT endpoint_id, disabled_reason FROM notification_endpoints",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        health,
        [(
            "ep_00000000000000000000abcd".to_owned(),
            Some("operator".to_owned())
        )]
    );
    let after = schema_snapshot(&url).await;
    for index in [
        "index CREATE INDEX idx_merchant_notifications_due ON public.merchant_notifications USING btree (merchant_id, endpoint_id, next_attempt_at, id) WHERE (status = 'pending'::text)",
        "index CREATE INDEX idx_merchant_notifications_order ON public.merchant_notifications USING btree (order_id, endpoint_id, id) WHERE ((status = 'pending'::text) AND (order_id IS NOT NULL))",
    ] {
        assert!(after.iter().any(|s| s == index), "{index}: {after:#?}");
    }
    for _ in 0..7 {
        migrate_around(&url, "", Step::RevertLast).await;
    }
    let reverted = schema_snapshot(&url).await;
    let lost: Vec<&String> = before.iter().filter(|s| !reverted.contains(s)).collect();
    let left: Vec<&String> = reverted.iter().filter(|s| !before.contains(s)).collect();
    assert!(
        lost.is_empty() && left.is_empty(),
        "not restored: {lost:#?}\nleft behind: {left:#?}"
    );
    let operator: i64 = client
        .query_one(
            "SELECT count(*) FROM notification_endpoints WHERE disabled_reason = 'operator'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(operator, 1, "the operator's disable outlives the way back");
}
