//! After a point-in-time restore: the restored database's sequences resume where they stood at
//! the target (give or take the 32 values PostgreSQL logs ahead), so they would hand out again
//! the ids the lost timeline already gave away: order ids merchants keep, transfer ids in
//! providers' acks, notification ids (`webhook-id`) merchants drop duplicates by. `advance`
//! moves every sequence of the schema past them by a gap no lost timeline fills
//! (docs/backup.md).

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The default gap: ten billion ids, more than ten days of 10,000 a second on any sequence.
pub const DEFAULT_GAP: i64 = 10_000_000_000;

/// One sequence moved on.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct Advanced {
    #[diesel(sql_type = Text)]
    pub name: String,
    /// Its last value before (0: never used).
    #[diesel(sql_type = BigInt)]
    pub before: i64,
    /// Its last value now: the next id is the one after it.
    #[diesel(sql_type = BigInt)]
    pub after: i64,
}

/// Moves every sequence of the current schema `gap` past its last value (at most to its
/// maximum). Needs the sequences' owner (`setval` needs UPDATE on them).
pub async fn advance(conn: &mut AsyncPgConnection, gap: i64) -> diesel::QueryResult<Vec<Advanced>> {
    diesel::sql_query(
        "SELECT s.sequencename::TEXT AS name, coalesce(s.last_value, 0) AS before, \
                setval(format('%I.%I', s.schemaname, s.sequencename)::regclass, \
                       least(s.max_value, coalesce(s.last_value, 0) + $1)) AS after \
         FROM pg_sequences s WHERE s.schemaname = current_schema() ORDER BY 1",
    )
    .bind::<BigInt, _>(gap)
    .load(conn)
    .await
}
