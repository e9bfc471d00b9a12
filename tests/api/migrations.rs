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
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' \
             AND tablename <> '__diesel_schema_migrations' ORDER BY 1",
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
            "callback_deliveries",
            "callback_minute_counts",
            "callback_minute_state",
            "idempotency_keys",
            "ledger_balance_checkpoints",
            "ledger_checkpoint_state",
            "ledger_entries",
            "ledger_transfers",
            "orders",
            "payment_disputes",
            "payments",
            "refund_requests"
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
