//! The event log's partitions as PostgreSQL holds them: one table per UTC month
//! (`callback_deliveries_yYYYYmMM`) and `callback_deliveries_legacy`, the table from before
//! partitioning, which holds everything received before its upper bound.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

use crate::db::one_row::CommittedResult;

/// One table of the log: attached (its bounds known), or detached and not yet dropped (an
/// archive pass stopped between its steps).
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Partition {
    #[diesel(sql_type = Text)]
    pub name: String,
    /// None for the legacy partition (MINVALUE) and for detached tables.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub from: Option<DateTime<Utc>>,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub to: Option<DateTime<Utc>>,
    #[diesel(sql_type = Bool)]
    pub attached: bool,
    /// A `DETACH .. CONCURRENTLY` that was interrupted: FINALIZE completes it.
    #[diesel(sql_type = Bool)]
    pub detach_pending: bool,
    /// The planner's estimate (exact counts of a month are a full scan).
    #[diesel(sql_type = BigInt)]
    pub rows_estimate: i64,
    #[diesel(sql_type = BigInt)]
    pub bytes: i64,
}

/// Attached partitions in order of their bounds, then detached leftovers. The bounds are read
/// back from PostgreSQL's own text of them, which names each instant with its offset.
const LIST_SQL: &str = "\
    SELECT c.relname::TEXT AS name, \
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \\(''([^'']+)''\\)'))[1]::TIMESTAMPTZ AS \"from\", \
           (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \\(''([^'']+)''\\)'))[1]::TIMESTAMPTZ AS \"to\", \
           i.inhrelid IS NOT NULL AS attached, \
           coalesce(i.inhdetachpending, false) AS detach_pending, \
           greatest(c.reltuples, 0)::BIGINT AS rows_estimate, \
           pg_total_relation_size(c.oid) AS bytes \
    FROM pg_class c \
    JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema() \
    LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = 'callback_deliveries'::regclass \
    WHERE c.relkind = 'r' \
      AND (i.inhrelid IS NOT NULL \
           OR c.relname ~ '^callback_deliveries_(legacy|y[0-9]{4}m[0-9]{2})$') \
    ORDER BY i.inhrelid IS NULL, 3 NULLS FIRST, 1";

pub async fn list(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Vec<Partition>> {
    diesel::sql_query(LIST_SQL).load(conn).await
}

#[derive(QueryableByName)]
struct Added {
    #[diesel(sql_type = Text)]
    name: String,
}

/// Makes the monthly partitions missing through `months` after the current month (each is
/// built apart and attached under SHARE UPDATE EXCLUSIVE: callbacks keep writing). Returns the
/// names added.
pub async fn add_ahead(
    conn: &mut AsyncPgConnection,
    months: u32,
) -> diesel::QueryResult<Vec<String>> {
    let added: Vec<Added> = diesel::sql_query("SELECT callback_deliveries_add_ahead($1) AS name")
        .bind::<Integer, _>(months as i32)
        .load(conn)
        .await?;
    Ok(added.into_iter().map(|a| a.name).collect())
}

/// The partitions whose every row was received more than `keep_days` ago.
pub fn due(partitions: &[Partition], now: DateTime<Utc>, keep_days: u64) -> Vec<&Partition> {
    let cutoff = now - chrono::Duration::days(keep_days as i64);
    partitions
        .iter()
        .filter(|p| p.attached && p.to.is_some_and(|to| to <= cutoff))
        .collect()
}

/// The exact number of rows of `table` (one of [`list`]'s names).
pub async fn count_rows(conn: &mut AsyncPgConnection, table: &str) -> diesel::QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let count: Count = diesel::sql_query(format!("SELECT count(*) AS n FROM {}", quoted(table)))
        .committed_result(conn)
        .await?;
    Ok(count.n)
}

/// Detaches `table` from the log without blocking callbacks: CONCURRENTLY takes SHARE UPDATE
/// EXCLUSIVE and waits for the queries that use the log to end. A detach that was interrupted
/// (its connection lost) is completed with FINALIZE. The lock wait is bounded: behind a long
/// query the pass gives up and the next one tries again.
pub async fn detach(
    conn: &mut AsyncPgConnection,
    partition: &Partition,
) -> diesel::QueryResult<()> {
    let table = quoted(&partition.name);
    let statement = if partition.detach_pending {
        format!("ALTER TABLE callback_deliveries DETACH PARTITION {table} FINALIZE")
    } else {
        format!("ALTER TABLE callback_deliveries DETACH PARTITION {table} CONCURRENTLY")
    };
    // One statement per call: several in one query string would be one implicit transaction,
    // where CONCURRENTLY is refused.
    conn.batch_execute("SET lock_timeout = '10s'").await?;
    let detached = conn.batch_execute(&statement).await;
    conn.batch_execute("RESET lock_timeout").await?;
    detached
}

/// Locks a detached table against everyone until the transaction ends (its digest and its
/// drop see the same rows).
pub async fn lock(conn: &mut AsyncPgConnection, table: &str) -> diesel::QueryResult<()> {
    conn.batch_execute(&format!(
        "LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
        quoted(table)
    ))
    .await
}

/// Attaches a detached month again, as its bounds were (a pass that found its archive did not
/// hold its rows gives the month back to the log).
pub async fn attach(
    conn: &mut AsyncPgConnection,
    partition: &Partition,
) -> diesel::QueryResult<()> {
    let bound = |at: Option<DateTime<Utc>>| {
        at.map_or_else(
            || "MINVALUE".to_owned(),
            |at| format!("'{}'", at.to_rfc3339()),
        )
    };
    let Some(to) = partition.to else {
        return Ok(());
    };
    conn.batch_execute(&format!(
        "ALTER TABLE callback_deliveries ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})",
        quoted(&partition.name),
        bound(partition.from),
        bound(Some(to))
    ))
    .await
}

/// Drops a detached table.
pub async fn drop_detached(conn: &mut AsyncPgConnection, table: &str) -> diesel::QueryResult<()> {
    conn.batch_execute(&format!("DROP TABLE {}", quoted(table)))
        .await
}

/// `table` as an identifier. The names come from [`list`], which only returns the log's own
/// tables; quoting keeps a name from ever being read as SQL.
pub fn quoted(table: &str) -> String {
    format!("\"{}\"", table.replace('"', "\"\""))
}
