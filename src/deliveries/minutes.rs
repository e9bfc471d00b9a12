//! Callbacks per minute and outcome, the console's chart of the last hour, read from a cache
//! that stays small however fast callbacks arrive: the read-caches job adds each delivery to
//! `callback_minute_counts` once (up to a settled position, `crate::settled`), and a read adds
//! the few deliveries after that position. Counting the last hour row by row instead grew with
//! the traffic: about a million rows at the benchmark's rate. Deliveries are never updated or
//! deleted, so a count, once added, stays right. Nothing on the callback path writes here.

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use crate::db::one_row::CommittedResult;
use crate::settled::Tracker;

/// Where the counts stand (`callback_minute_state`).
const POSITION: Tracker = Tracker {
    state_table: "callback_minute_state",
    through: "through_delivery_id",
    pending: "pending_delivery_id",
    source: "callback_deliveries",
};

/// How far back the cache keeps minutes: the chart shows one hour; the rest is margin.
const KEPT_MINUTES: i64 = 3 * 60;

/// Callbacks received in one minute with one outcome.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct MinuteCount {
    /// Minutes since the Unix epoch.
    #[diesel(sql_type = BigInt)]
    pub minute: i64,
    #[diesel(sql_type = Text)]
    pub outcome: String,
    #[diesel(sql_type = BigInt)]
    pub count: i64,
}

/// The chart's statement ($1: the first minute, in minutes since the epoch; $2: the delivery id
/// the counts cover): the cached counts of those minutes plus the deliveries after the
/// position. The position is a value, not a subquery, so the planner sees how few rows lie
/// past it and takes the primary key's range (at most two passes of traffic) rather than the
/// last hour of `idx_callback_deliveries_received`.
pub const PER_MINUTE_SQL: &str = "SELECT minute, outcome, sum(count)::BIGINT AS count FROM ( \
         SELECT minute, outcome, count FROM callback_minute_counts WHERE minute >= $1 \
         UNION ALL \
         SELECT (floor(extract(epoch FROM received_at) / 60))::BIGINT, \
                COALESCE(outcome, 'unknown'), count(*) \
         FROM callback_deliveries \
         WHERE id > $2 AND received_at >= to_timestamp($1 * 60) \
         GROUP BY 1, 2) AS counts \
     GROUP BY minute, outcome ORDER BY minute, outcome";

#[derive(diesel::QueryableByName)]
struct Through {
    #[diesel(sql_type = BigInt)]
    through_delivery_id: i64,
}

/// Callbacks per minute and outcome in the minutes from the one holding `since` on (the cache
/// keeps the last three hours), in one snapshot.
pub async fn per_minute(
    conn: &mut AsyncPgConnection,
    since: DateTime<Utc>,
) -> QueryResult<Vec<MinuteCount>> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| {
            let Through {
                through_delivery_id,
            } = diesel::sql_query("SELECT through_delivery_id FROM callback_minute_state")
                .committed_result(conn)
                .await?;
            diesel::sql_query(PER_MINUTE_SQL)
                .bind::<BigInt, _>(since.timestamp().div_euclid(60))
                .bind::<BigInt, _>(through_delivery_id)
                .load(conn)
                .await
        })
        .await
}

/// One pass: add the deliveries up to the position the last pass noted, if it has settled,
/// then note a new one. Returns the position the counts moved to.
pub async fn pass(conn: &mut AsyncPgConnection) -> QueryResult<Option<i64>> {
    let noted = POSITION.read(conn).await?;
    let mut moved = None;
    if let Some(position) = noted.final_position().filter(|p| *p > noted.through) {
        let from = noted.through;
        conn.transaction(async |conn| {
            // Deliveries received before the kept minutes never reach the chart: after a long
            // stop (or on a first pass over an old history) they are skipped, not counted.
            diesel::sql_query(
                "INSERT INTO callback_minute_counts AS c (minute, outcome, count) \
                 SELECT (floor(extract(epoch FROM received_at) / 60))::BIGINT, \
                        COALESCE(outcome, 'unknown'), count(*) \
                 FROM callback_deliveries \
                 WHERE id > $1 AND id <= $2 \
                   AND received_at >= date_trunc('minute', now()) - make_interval(mins => $3::INT) \
                 GROUP BY 1, 2 \
                 ON CONFLICT (minute, outcome) DO UPDATE SET count = c.count + EXCLUDED.count",
            )
            .bind::<BigInt, _>(from)
            .bind::<BigInt, _>(position)
            .bind::<BigInt, _>(KEPT_MINUTES)
            .execute(conn)
            .await?;
            diesel::sql_query(
                "DELETE FROM callback_minute_counts \
                 WHERE minute < (floor(extract(epoch FROM now()) / 60))::BIGINT - $1",
            )
            .bind::<BigInt, _>(KEPT_MINUTES)
            .execute(conn)
            .await?;
            POSITION.advance(conn, position).await
        })
        .await?;
        moved = Some(position);
    }
    POSITION.note(conn).await?;
    Ok(moved)
}
