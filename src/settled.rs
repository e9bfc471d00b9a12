//! A position in an insert-only table below which nothing can still appear: the read caches
//! (balance checkpoints, per-minute callback counts) add rows up to such a position once and
//! leave the rest to the reader.
//!
//! Rows commit out of id order, so "every row up to id P" is only final once no transaction
//! that could still insert an id <= P is running. A pass notes the highest visible id together
//! with the transactions writing the table at that moment (each holds its row-exclusive lock on
//! the table until it ends); a later pass may use the noted id once all of them have ended. Ids
//! come from a sequence without a cache, so an id handed out after the note is above P, and an
//! id at or below P was handed out by a transaction that was writing (or had ended) when the
//! note was taken. pg_locks is this database's own view; a snapshot's xid horizon would also
//! wait for every other database's transactions.

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bool, Nullable};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::one_row::CommittedResult;

/// Where a cache keeps its position: a one-row state table with the id it covers (`through`),
/// the id it noted (`pending`) and the writers it waits for (`pending_writers`), for rows of
/// `source`. Names are compile-time constants, never input.
pub struct Tracker {
    pub state_table: &'static str,
    pub through: &'static str,
    pub pending: &'static str,
    pub source: &'static str,
}

/// The state a pass starts from.
#[derive(Debug, diesel::QueryableByName)]
pub struct Noted {
    /// Every row with an id up to this one is in the cache.
    #[diesel(sql_type = BigInt)]
    pub through: i64,
    /// The id noted by the last pass, not yet in the cache.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub pending: Option<i64>,
    /// Whether every transaction that was writing when `pending` was noted has ended.
    #[diesel(sql_type = Bool)]
    pub settled: bool,
}

impl Noted {
    /// The noted id, once it is final (nothing at or below it can still commit).
    pub fn final_position(&self) -> Option<i64> {
        self.pending.filter(|_| self.settled)
    }
}

impl Tracker {
    pub async fn read(&self, conn: &mut AsyncPgConnection) -> QueryResult<Noted> {
        let Self {
            state_table,
            through,
            pending,
            ..
        } = self;
        diesel::sql_query(format!(
            "SELECT {through} AS through, {pending} AS pending, \
                    NOT EXISTS (SELECT 1 FROM pg_locks \
                                WHERE virtualtransaction = ANY (coalesce(pending_writers, '{{}}'))) \
                        AS settled \
             FROM {state_table}"
        ))
        .committed_result(conn)
        .await
    }

    /// Notes the highest id visible to this statement's snapshot, then (read after that
    /// snapshot) the transactions still holding their write lock on the table.
    pub async fn note(&self, conn: &mut AsyncPgConnection) -> QueryResult<()> {
        let Self {
            state_table,
            pending,
            source,
            ..
        } = self;
        diesel::sql_query(format!(
            "UPDATE {state_table} \
             SET {pending} = (SELECT max(id) FROM {source}), \
                 pending_writers = ARRAY(SELECT virtualtransaction FROM pg_locks \
                     WHERE locktype = 'relation' AND relation = '{source}'::regclass \
                       AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                       AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid())"
        ))
        .execute(conn)
        .await?;
        Ok(())
    }

    /// Records that the cache now covers every row up to `position` (in the transaction that
    /// added them).
    pub async fn advance(&self, conn: &mut AsyncPgConnection, position: i64) -> QueryResult<()> {
        let Self {
            state_table,
            through,
            pending,
            ..
        } = self;
        diesel::sql_query(format!(
            "UPDATE {state_table} SET {through} = $1, {pending} = NULL, pending_writers = NULL"
        ))
        .bind::<BigInt, _>(position)
        .execute(conn)
        .await?;
        Ok(())
    }
}
