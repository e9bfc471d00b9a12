//! The `merchant_notifications` and `notification_endpoints` tables: a staged notification
//! (written only by the SQL routine `notifications_stage`, in the transaction of its change),
//! and the queries the senders and the admins run on them.

use chrono::{DateTime, Utc};
use diesel::dsl::{AsSelect, SqlTypeOf};
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Bool, Double, Int4, Nullable, Text, Timestamptz, Untyped};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::one_row::CommittedResult;
use crate::schema::{merchant_notifications, notification_endpoints};

/// A notification's delivery status, as stored in its `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationStatus {
    /// Not delivered yet: due now, waiting for its next attempt, or for its endpoint.
    Pending,
    /// The endpoint answered 2xx.
    Delivered,
    /// The last attempt of the schedule failed; an admin may redeliver it.
    Failed,
}

impl NotificationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            NotificationStatus::Pending => "pending",
            NotificationStatus::Delivered => "delivered",
            NotificationStatus::Failed => "failed",
        }
    }
}

/// A staged notification with its delivery state.
#[derive(Debug, Clone, Queryable, Selectable, QueryableByName)]
#[diesel(table_name = merchant_notifications)]
pub struct Notification {
    pub id: i64,
    pub merchant_id: i64,
    /// The endpoint it goes to: [`FILE_ENDPOINT`] or the id of an endpoint made by API.
    pub endpoint_id: String,
    pub kind: String,
    pub order_id: Option<i64>,
    pub object_status: String,
    pub reference: Option<String>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub provider: Option<String>,
    pub event_id: Option<String>,
    pub transfer_id: Option<i64>,
    pub payment_id: Option<String>,
    pub refund_request_id: Option<i64>,
    pub detail: Option<String>,
    /// The provider's dispute id, for a dispute's change of the order.
    pub dispute_id: Option<String>,
    pub created_at: DateTime<Utc>,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTime<Utc>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub delivered_at: Option<DateTime<Utc>>,
}

/// The endpoint of the configuration file (`[[merchants]] notify_url`), as rows name it.
pub const FILE_ENDPOINT: &str = "file";

/// One endpoint of one merchant: what the sender claims for, rate-limits and keeps the health
/// of.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointKey {
    pub merchant_id: i64,
    /// [`FILE_ENDPOINT`] or the id of an endpoint made by API.
    pub endpoint_id: String,
}

impl EndpointKey {
    pub fn new(merchant_id: i64, endpoint_id: &str) -> Self {
        Self {
            merchant_id,
            endpoint_id: endpoint_id.to_owned(),
        }
    }

    /// The merchant's endpoint of the configuration file.
    pub fn file(merchant_id: i64) -> Self {
        Self::new(merchant_id, FILE_ENDPOINT)
    }

    pub fn of(notification: &Notification) -> Self {
        Self::new(notification.merchant_id, &notification.endpoint_id)
    }
}

impl std::fmt::Display for EndpointKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "merchant:{}/{}", self.merchant_id, self.endpoint_id)
    }
}

/// An endpoint of a merchant as the senders found it.
#[derive(
    Debug, Clone, Queryable, Selectable, QueryableByName, serde::Serialize, utoipa::ToSchema,
)]
#[diesel(table_name = notification_endpoints)]
pub struct Endpoint {
    pub merchant_id: i64,
    /// `file` (the configuration file's) or the id of an endpoint made by API.
    pub endpoint_id: String,
    #[schema(value_type = Option<String>)]
    pub disabled_at: Option<DateTime<Utc>>,
    /// `gone` (it answered 410), `no_success` (no 2xx for 5 days) or `operator` (disabled by
    /// a person)
    pub disabled_reason: Option<String>,
    #[schema(value_type = Option<String>)]
    pub failing_since: Option<DateTime<Utc>>,
    #[schema(value_type = Option<String>)]
    pub last_success_at: Option<DateTime<Utc>>,
    #[schema(value_type = Option<String>)]
    pub last_failure_at: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    /// Pending notifications deleted while it was disabled, beyond what a disabled endpoint
    /// keeps (`[notifications] disabled_keep`), and when the last went.
    pub dropped: i64,
    #[schema(value_type = Option<String>)]
    pub last_dropped_at: Option<DateTime<Utc>>,
}

/// An endpoint with no success for this long is disabled (the contract's 5 days).
pub const DISABLE_AFTER: std::time::Duration = std::time::Duration::from_secs(5 * 24 * 3600);

/// The sender's claim: for each endpoint (merchant `$1`, endpoint `$5`) up to its room (`$2`)
/// due notifications, oldest due first, none whose order has an earlier notification for the
/// same endpoint still pending, none of a disabled endpoint, at most `$4` in all; each claimed row counts its attempt and is kept from the other
/// senders for the lease (`$3` ms) by pushing its due time forward, so a row whose sender dies
/// is due again once the lease has passed. `SKIP LOCKED`: two senders claiming at once take
/// different rows, and neither waits for the other.
pub const CLAIM_SQL: &str = "UPDATE merchant_notifications n \
     SET attempts = n.attempts + 1, last_attempt_at = now(), \
         next_attempt_at = now() + $3 * interval '1 millisecond' \
     WHERE n.id = ANY(ARRAY( \
       SELECT c.id FROM unnest($1::bigint[], $5::text[], $2::int[]) AS m(merchant_id, endpoint_id, room) \
       CROSS JOIN LATERAL ( \
         SELECT d.id FROM merchant_notifications d \
         WHERE d.merchant_id = m.merchant_id AND d.endpoint_id = m.endpoint_id \
           AND d.status = 'pending' AND d.next_attempt_at <= now() \
           AND (d.order_id IS NULL OR d.id = (SELECT min(e.id) FROM merchant_notifications e \
                                              WHERE e.order_id = d.order_id \
                                                AND e.endpoint_id = d.endpoint_id \
                                                AND e.status = 'pending')) \
         ORDER BY d.next_attempt_at, d.id \
         LIMIT m.room \
         FOR UPDATE SKIP LOCKED) c \
       WHERE NOT EXISTS (SELECT 1 FROM notification_endpoints x \
                         WHERE x.merchant_id = m.merchant_id AND x.endpoint_id = m.endpoint_id \
                           AND x.disabled_at IS NOT NULL) \
       LIMIT $4)) \
     RETURNING n.*";

/// Claims up to `rooms[i]` due notifications of `endpoints[i]`, at most `limit` in all.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    endpoints: &[EndpointKey],
    rooms: &[i32],
    limit: i64,
    lease: std::time::Duration,
) -> QueryResult<Vec<Notification>> {
    Claim {
        merchants: endpoints.iter().map(|e| e.merchant_id).collect(),
        endpoint_ids: endpoints.iter().map(|e| e.endpoint_id.as_str()).collect(),
        rooms,
        lease_ms: millis(lease),
        limit,
    }
    .load(conn)
    .await
}

/// [`CLAIM_SQL`] with its parameters, prepared once per connection (see [`numbered`]).
struct Claim<'a> {
    merchants: Vec<i64>,
    endpoint_ids: Vec<&'a str>,
    rooms: &'a [i32],
    lease_ms: i64,
    limit: i64,
}

impl QueryId for Claim<'_> {
    type QueryId = Claim<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for Claim<'_> {
    type SqlType = Untyped;
}

impl QueryFragment<Pg> for Claim<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        numbered(CLAIM_SQL, &mut out, |n, out| match n {
            1 => out.push_bind_param::<Array<BigInt>, _>(&self.merchants),
            2 => out.push_bind_param::<Array<Int4>, _>(self.rooms),
            3 => out.push_bind_param::<BigInt, _>(&self.lease_ms),
            4 => out.push_bind_param::<BigInt, _>(&self.limit),
            _ => out.push_bind_param::<Array<Text>, _>(&self.endpoint_ids),
        })
    }
}

/// Writes `sql` with each `$n` replaced by `bind(n)`'s parameter, so a statement written with
/// numbered parameters (one may appear twice) is a query diesel prepares once per connection
/// and caches by its static id: a `sql_query` is never cached, so PostgreSQL planned the
/// claim and the store again on every call, about 0.3 ms each (docs/notifications.md). The
/// sender's session plans them once, generically (`plan_cache_mode`).
fn numbered<'b>(
    sql: &'static str,
    out: &mut AstPass<'_, 'b, Pg>,
    mut bind: impl FnMut(usize, &mut AstPass<'_, 'b, Pg>) -> QueryResult<()>,
) -> QueryResult<()> {
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_sql(&rest[..at]);
        let digits = rest[at + 1..]
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len() - at - 1);
        let n = rest[at + 1..at + 1 + digits].parse().map_err(|_| {
            diesel::result::Error::QueryBuilderError("a `$` without a number".into())
        })?;
        bind(n, out)?;
        rest = &rest[at + 1 + digits..];
    }
    out.push_sql(rest);
    Ok(())
}

/// The result of one attempt, as it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub id: i64,
    /// The attempt's number (the claim counted it): a failure is stored only while the row is
    /// still at that attempt, so a late result of a sender whose lease ran out cannot undo what
    /// a later attempt or an admin's redelivery did. A success is stored whatever the number.
    pub attempt: i32,
    pub delivered: bool,
    /// 410: the endpoint is disabled and the notification stays pending, due at once.
    pub gone: bool,
    /// Pending again after this many milliseconds; `None` (and neither delivered nor gone):
    /// that was the last attempt, the notification is failed.
    pub retry_ms: Option<i64>,
    pub status_code: Option<i32>,
    pub error: Option<String>,
}

/// Stores attempts' results (a failure in the notification's history of failed attempts too),
/// and what they say of each endpoint, in one statement:
/// a success clears its endpoint's failing streak; a 410 disables it (`gone`); failures start a
/// streak or, when it began more than [`DISABLE_AFTER`] ago, disable it (`no_success`).
/// A row still pending is written `NOT IN ('delivered', 'failed')` so that no partial index of
/// pending rows qualifies: the statement is planned once per connection, and a plan made while
/// the table was empty chose to read the whole due index (4.7 ms for 9 rows of 30,000).
pub const RECORD_SQL: &str = "WITH r AS ( \
       SELECT * FROM unnest($1::bigint[], $2::int[], $3::bool[], $4::bool[], $5::bigint[], \
                            $6::int[], $7::text[]) \
         AS r(id, attempt, delivered, gone, retry_ms, status_code, error)), \
     updated AS ( \
       UPDATE merchant_notifications n SET \
         status = CASE WHEN r.delivered THEN 'delivered' \
                       WHEN r.gone OR r.retry_ms IS NOT NULL THEN 'pending' ELSE 'failed' END, \
         delivered_at = CASE WHEN r.delivered THEN now() END, \
         next_attempt_at = CASE WHEN r.gone THEN now() \
                                WHEN r.retry_ms IS NOT NULL THEN now() + r.retry_ms * interval '1 millisecond' \
                                ELSE n.next_attempt_at END, \
         last_status = r.status_code, \
         last_error = r.error \
       FROM r \
       WHERE n.id = ANY($1::bigint[]) AND n.id = r.id AND n.status NOT IN ('delivered', 'failed') \
         AND (r.delivered OR n.attempts = r.attempt) \
       RETURNING n.id, n.merchant_id, n.endpoint_id, r.attempt, r.status_code, r.delivered, \
                 r.gone, r.error), \
     logged AS ( \
       INSERT INTO notification_attempts (notification_id, attempt, status_code, error) \
       SELECT id, attempt, status_code, error FROM updated WHERE NOT delivered), \
     outcomes AS ( \
       SELECT merchant_id, endpoint_id, bool_or(delivered) AS succeeded, bool_or(gone) AS gone, \
              bool_or(NOT delivered) AS failed, \
              (array_agg(error ORDER BY id DESC) FILTER (WHERE NOT delivered))[1] AS error \
       FROM updated GROUP BY merchant_id, endpoint_id) \
     INSERT INTO notification_endpoints AS e \
       (merchant_id, endpoint_id, disabled_at, disabled_reason, failing_since, last_success_at, \
        last_failure_at, last_error) \
     SELECT merchant_id, endpoint_id, CASE WHEN gone THEN now() END, CASE WHEN gone THEN 'gone' END, \
            CASE WHEN NOT succeeded THEN now() END, CASE WHEN succeeded THEN now() END, \
            CASE WHEN failed THEN now() END, error \
     FROM outcomes \
     ON CONFLICT (merchant_id, endpoint_id) DO UPDATE SET \
       disabled_at = CASE WHEN e.disabled_at IS NOT NULL THEN e.disabled_at \
                          WHEN EXCLUDED.disabled_at IS NOT NULL THEN EXCLUDED.disabled_at \
                          WHEN EXCLUDED.last_success_at IS NULL \
                               AND e.failing_since <= now() - $8 * interval '1 second' THEN now() END, \
       disabled_reason = CASE WHEN e.disabled_at IS NOT NULL THEN e.disabled_reason \
                              WHEN EXCLUDED.disabled_at IS NOT NULL THEN EXCLUDED.disabled_reason \
                              WHEN EXCLUDED.last_success_at IS NULL \
                                   AND e.failing_since <= now() - $8 * interval '1 second' \
                                   THEN 'no_success' END, \
       failing_since = CASE WHEN EXCLUDED.last_success_at IS NOT NULL THEN NULL \
                            ELSE coalesce(e.failing_since, EXCLUDED.failing_since) END, \
       last_success_at = coalesce(EXCLUDED.last_success_at, e.last_success_at), \
       last_failure_at = coalesce(EXCLUDED.last_failure_at, e.last_failure_at), \
       last_error = coalesce(EXCLUDED.last_error, e.last_error) \
     RETURNING e.merchant_id, e.endpoint_id, e.disabled_reason, \
               (e.disabled_at = now()) AS just_disabled";

/// An endpoint the results just disabled.
#[derive(Debug, Clone, QueryableByName)]
pub struct Disabled {
    #[diesel(sql_type = BigInt)]
    pub merchant_id: i64,
    #[diesel(sql_type = Text)]
    pub endpoint_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub disabled_reason: Option<String>,
    #[diesel(sql_type = Nullable<Bool>)]
    pub just_disabled: Option<bool>,
}

/// Stores `results`; returns the endpoints they disabled.
pub async fn record(
    conn: &mut AsyncPgConnection,
    results: &[Recorded],
) -> QueryResult<Vec<Disabled>> {
    let rows: Vec<Disabled> = Record {
        ids: results.iter().map(|r| r.id).collect(),
        attempts: results.iter().map(|r| r.attempt).collect(),
        delivered: results.iter().map(|r| r.delivered).collect(),
        gone: results.iter().map(|r| r.gone).collect(),
        retry_ms: results.iter().map(|r| r.retry_ms).collect(),
        status_code: results.iter().map(|r| r.status_code).collect(),
        error: results.iter().map(|r| r.error.as_deref()).collect(),
        disable_after_secs: i64::try_from(DISABLE_AFTER.as_secs()).unwrap_or(i64::MAX),
    }
    .load(conn)
    .await?;
    Ok(rows
        .into_iter()
        .filter(|row| row.just_disabled == Some(true))
        .collect())
}

/// [`RECORD_SQL`] with its parameters, prepared once per connection (see [`numbered`]).
struct Record<'a> {
    ids: Vec<i64>,
    attempts: Vec<i32>,
    delivered: Vec<bool>,
    gone: Vec<bool>,
    retry_ms: Vec<Option<i64>>,
    status_code: Vec<Option<i32>>,
    error: Vec<Option<&'a str>>,
    disable_after_secs: i64,
}

impl QueryId for Record<'_> {
    type QueryId = Record<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for Record<'_> {
    type SqlType = Untyped;
}

impl QueryFragment<Pg> for Record<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        numbered(RECORD_SQL, &mut out, |n, out| match n {
            1 => out.push_bind_param::<Array<BigInt>, _>(&self.ids),
            2 => out.push_bind_param::<Array<Int4>, _>(&self.attempts),
            3 => out.push_bind_param::<Array<Bool>, _>(&self.delivered),
            4 => out.push_bind_param::<Array<Bool>, _>(&self.gone),
            5 => out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.retry_ms),
            6 => out.push_bind_param::<Array<Nullable<Int4>>, _>(&self.status_code),
            7 => out.push_bind_param::<Array<Nullable<Text>>, _>(&self.error),
            _ => out.push_bind_param::<BigInt, _>(&self.disable_after_secs),
        })
    }
}

/// Gives back the attempt a claim counted for rows the sender never sent (their claim would have
/// run out during the attempt, behind a slow endpoint) and makes them due at once, while each is
/// still at that attempt: otherwise every such claim would use up one attempt of the schedule,
/// and a notification behind a slow endpoint could be failed after fewer attempts than the
/// contract's. Written so no partial index qualifies, as [`RECORD_SQL`].
pub const RELEASE_SQL: &str = "UPDATE merchant_notifications n \
     SET attempts = n.attempts - 1, next_attempt_at = now() \
     FROM unnest($1::bigint[], $2::int[]) AS r(id, attempt) \
     WHERE n.id = ANY($1::bigint[]) AND n.id = r.id AND n.attempts = r.attempt \
       AND n.status NOT IN ('delivered', 'failed')";

/// Releases `rows` (id, the attempt their claim counted); how many were still at that attempt.
pub async fn release(conn: &mut AsyncPgConnection, rows: &[(i64, i32)]) -> QueryResult<usize> {
    Release {
        ids: rows.iter().map(|(id, _)| *id).collect(),
        attempts: rows.iter().map(|(_, attempt)| *attempt).collect(),
    }
    .execute(conn)
    .await
}

/// [`RELEASE_SQL`] with its parameters, prepared once per connection (see [`numbered`]).
struct Release {
    ids: Vec<i64>,
    attempts: Vec<i32>,
}

impl QueryId for Release {
    type QueryId = Release;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl QueryFragment<Pg> for Release {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        numbered(RELEASE_SQL, &mut out, |n, out| match n {
            1 => out.push_bind_param::<Array<BigInt>, _>(&self.ids),
            _ => out.push_bind_param::<Array<Int4>, _>(&self.attempts),
        })
    }
}

/// How many notifications are pending, and how long the oldest has waited.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backlog {
    /// Exact up to [`BACKLOG_EXACT`]; above it the due index's size as the last VACUUM or
    /// ANALYZE counted it (`estimated`).
    pub pending: i64,
    pub estimated: bool,
    pub oldest_secs: Option<f64>,
}

/// Pending rows the backlog counts one by one; beyond it, it takes the index's estimate.
pub const BACKLOG_EXACT: i64 = 10_000;

/// The backlog count: at most `$1` entries of the due index (index-only), and its estimate.
const BACKLOG_COUNT_SQL: &str = "SELECT        (SELECT count(*) FROM (SELECT 1 FROM merchant_notifications WHERE status = 'pending'                               LIMIT $1) AS t) AS counted,        coalesce((SELECT reltuples::bigint FROM pg_class                  WHERE oid = 'idx_merchant_notifications_due'::regclass), 0) AS estimate";

/// When the oldest pending notification was staged, without reading every pending row. The
/// due index orders an endpoint's pending rows by due time: its first row is either the
/// endpoint's oldest never-attempted row (whose due time is its staging time) or a retried row
/// due earlier, which was staged earlier still. A retried row has an error and is in the
/// attention index, by id, so its oldest is that index's first pending row. One probe per
/// endpoint with pending rows (a skip scan of the due index) and one of the attention index.
/// Not seen: a row in flight (its due time pushed past the lease) until it is due again, and a
/// row whose due time an admin reset (a redelivery, an enable) behind an endpoint's first due
/// row; each is counted again once it is first due or fails.
const BACKLOG_OLDEST_SQL: &str = "WITH RECURSIVE endpoints AS ( \
       (SELECT merchant_id, endpoint_id FROM merchant_notifications WHERE status = 'pending' \
        ORDER BY merchant_id, endpoint_id LIMIT 1) \
       UNION ALL \
       SELECT next.merchant_id, next.endpoint_id FROM endpoints m CROSS JOIN LATERAL ( \
         SELECT n.merchant_id, n.endpoint_id FROM merchant_notifications n \
         WHERE n.status = 'pending' AND (n.merchant_id, n.endpoint_id) > (m.merchant_id, m.endpoint_id) \
         ORDER BY n.merchant_id, n.endpoint_id LIMIT 1) AS next) \
     SELECT extract(epoch FROM now() - least( \
       (SELECT min(first.created_at) FROM endpoints m CROSS JOIN LATERAL ( \
          SELECT created_at FROM merchant_notifications n \
          WHERE n.merchant_id = m.merchant_id AND n.endpoint_id = m.endpoint_id \
            AND n.status = 'pending' \
          ORDER BY n.next_attempt_at, n.id LIMIT 1) AS first), \
       (SELECT created_at FROM merchant_notifications \
        WHERE status = 'pending' AND last_error IS NOT NULL ORDER BY id LIMIT 1)))::float8 \
       AS oldest_secs";

#[derive(QueryableByName)]
struct BacklogCount {
    #[diesel(sql_type = BigInt)]
    counted: i64,
    #[diesel(sql_type = BigInt)]
    estimate: i64,
}

#[derive(QueryableByName)]
struct BacklogOldest {
    #[diesel(sql_type = Nullable<Double>)]
    oldest_secs: Option<f64>,
}

/// The backlog, for the metrics: bounded work whatever the number of pending rows.
pub async fn backlog(conn: &mut AsyncPgConnection) -> QueryResult<Backlog> {
    let count: BacklogCount = diesel::sql_query(BACKLOG_COUNT_SQL)
        .bind::<BigInt, _>(BACKLOG_EXACT + 1)
        .committed_result(conn)
        .await?;
    let oldest: BacklogOldest = diesel::sql_query(BACKLOG_OLDEST_SQL)
        .committed_result(conn)
        .await?;
    let estimated = count.counted > BACKLOG_EXACT;
    Ok(Backlog {
        pending: if estimated {
            count.estimate.max(count.counted)
        } else {
            count.counted
        },
        estimated,
        oldest_secs: oldest.oldest_secs,
    })
}

/// Which notifications an admin list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusFilter {
    Pending,
    /// Pending after a failed attempt.
    Failing,
    Delivered,
    Failed,
}

impl StatusFilter {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(StatusFilter::Pending),
            "failing" => Some(StatusFilter::Failing),
            "delivered" => Some(StatusFilter::Delivered),
            "failed" => Some(StatusFilter::Failed),
            _ => None,
        }
    }
}

/// Newest first: up to `limit` notifications below id `before`, of one merchant and status
/// when given. A merchant's rows are read in two halves, each by its own partial index: the
/// pending ones by the due index, the finished ones by `_merchant_finished` (no index holds all
/// of a merchant's rows, so that staging writes one entry fewer); a list of every status
/// merges the two. Failing and failed rows of all merchants come from `_attention`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    merchant_id: Option<i64>,
    status: Option<StatusFilter>,
    before: Option<i64>,
    limit: i64,
) -> QueryResult<Vec<Notification>> {
    let Some(merchant_id) = merchant_id.filter(|_| status.is_none()) else {
        return list_query(merchant_id, status, None, before, limit)
            .load(conn)
            .await;
    };
    let mut rows = list_query(Some(merchant_id), None, Some(Half::Pending), before, limit)
        .load(conn)
        .await?;
    rows.extend(
        list_query(Some(merchant_id), None, Some(Half::Finished), before, limit)
            .load::<Notification>(conn)
            .await?,
    );
    rows.sort_unstable_by_key(|row| std::cmp::Reverse(row.id));
    rows.truncate(usize::try_from(limit).unwrap_or(0));
    Ok(rows)
}

/// Which half of a merchant's rows a list query reads.
#[derive(Clone, Copy)]
enum Half {
    Pending,
    Finished,
}

fn list_query(
    merchant_id: Option<i64>,
    status: Option<StatusFilter>,
    half: Option<Half>,
    before: Option<i64>,
    limit: i64,
) -> merchant_notifications::BoxedQuery<'static, Pg, SqlTypeOf<AsSelect<Notification, Pg>>> {
    use merchant_notifications::dsl as n;
    let mut query = n::merchant_notifications
        .select(Notification::as_select())
        .into_boxed();
    if let Some(merchant_id) = merchant_id {
        query = query.filter(n::merchant_id.eq(merchant_id));
    }
    query = match half {
        None => query,
        Some(Half::Pending) => query.filter(n::status.eq("pending")),
        // The index's own predicate, so the planner sees it applies.
        Some(Half::Finished) => query.filter(n::status.ne("pending")),
    };
    query = match status {
        None => query,
        Some(StatusFilter::Pending) => query.filter(n::status.eq("pending")),
        Some(StatusFilter::Failing) => query
            .filter(n::status.eq("pending"))
            .filter(n::last_error.is_not_null()),
        Some(StatusFilter::Delivered) => query.filter(n::status.eq("delivered")),
        Some(StatusFilter::Failed) => query.filter(n::status.eq("failed")),
    };
    if let Some(before) = before {
        query = query.filter(n::id.lt(before));
    }
    query.order(n::id.desc()).limit(limit)
}

/// The newest `limit` failing or failed rows refused for their endpoint's address, by the
/// attention index (its predicate repeated, so the planner sees it applies).
pub async fn refused_addresses(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> QueryResult<Vec<Notification>> {
    use merchant_notifications::dsl as n;
    n::merchant_notifications
        .select(Notification::as_select())
        .filter(
            n::status
                .eq("failed")
                .or(n::status.eq("pending").and(n::last_error.is_not_null())),
        )
        .filter(n::last_error.eq(crate::outbound::ADDRESS_NOT_ALLOWED))
        .order(n::id.desc())
        .limit(limit)
        .load(conn)
        .await
}

/// Notification `id`.
pub async fn find(conn: &mut AsyncPgConnection, id: i64) -> QueryResult<Option<Notification>> {
    merchant_notifications::table
        .find(id)
        .select(Notification::as_select())
        .first(conn)
        .await
        .optional()
}

/// One failed attempt, as stored.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = crate::schema::notification_attempts)]
pub struct FailedAttempt {
    /// Its number as its claim counted it (from 1 again after a redelivery).
    pub attempt: i32,
    /// When its result was stored.
    pub finished_at: DateTime<Utc>,
    /// The endpoint's HTTP status, if it answered.
    pub status_code: Option<i32>,
    pub error: Option<String>,
}

/// The newest `limit` failed attempts of notification `id`, newest first.
pub async fn failed_attempts(
    conn: &mut AsyncPgConnection,
    id: i64,
    limit: i64,
) -> QueryResult<Vec<FailedAttempt>> {
    use crate::schema::notification_attempts as a;
    a::table
        .filter(a::notification_id.eq(id))
        .order(a::id.desc())
        .limit(limit)
        .select(FailedAttempt::as_select())
        .load(conn)
        .await
}

/// The SET of every redelivery: pending, due now, the schedule from its first attempt again.
const REDELIVER_SET: &str = "SET status = 'pending', attempts = 0, next_attempt_at = now(), \
         delivered_at = NULL, last_error = NULL";

/// Notification `id` is sent again now, whatever its state, under its `webhook-id`; when
/// `merchant_id` is given, only if it is that merchant's (`None` otherwise, as for no row).
pub async fn redeliver(
    conn: &mut AsyncPgConnection,
    id: i64,
    merchant_id: Option<i64>,
) -> QueryResult<Option<Notification>> {
    diesel::sql_query(format!(
        "UPDATE merchant_notifications {REDELIVER_SET} \
         WHERE id = $1 AND ($2::bigint IS NULL OR merchant_id = $2) RETURNING *"
    ))
    .bind::<BigInt, _>(id)
    .bind::<Nullable<BigInt>, _>(merchant_id)
    .committed_result(conn)
    .await
    .optional()
}

/// One call's part of a range redelivery: how many it made pending again, and the id to go on
/// after (`None`: the range is done).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangePart {
    pub redelivered: usize,
    pub next_after: Option<i64>,
}

#[derive(QueryableByName)]
struct Redone {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The notifications of `merchant_id` staged in [since, until) with an id above `after`, at
/// most `limit` of them in id order, are sent again. A range of any size is redelivered a part
/// per call, so no call holds more than `limit` rows locked nor makes more than that due at
/// once.
pub async fn redeliver_range(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    after: i64,
    limit: i64,
) -> QueryResult<RangePart> {
    // Two halves, as in `list`: no one index holds all of a merchant's rows.
    let rows: Vec<Redone> = diesel::sql_query(format!(
        "UPDATE merchant_notifications {REDELIVER_SET} WHERE id = ANY(ARRAY( \
           SELECT id FROM ( \
             (SELECT id FROM merchant_notifications \
              WHERE merchant_id = $1 AND status = 'pending' AND created_at >= $2 \
                AND created_at < $3 AND id > $4 ORDER BY id LIMIT $5) \
             UNION ALL \
             (SELECT id FROM merchant_notifications \
              WHERE merchant_id = $1 AND status <> 'pending' AND created_at >= $2 \
                AND created_at < $3 AND id > $4 ORDER BY id LIMIT $5)) AS t \
           ORDER BY id LIMIT $5)) RETURNING id"
    ))
    .bind::<BigInt, _>(merchant_id)
    .bind::<Timestamptz, _>(since)
    .bind::<Timestamptz, _>(until)
    .bind::<BigInt, _>(after)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?;
    let full = i64::try_from(rows.len()).is_ok_and(|n| n >= limit);
    Ok(RangePart {
        redelivered: rows.len(),
        next_after: rows.iter().map(|r| r.id).max().filter(|_| full),
    })
}

/// Which of a merchant's endpoints an enable or a disable is for.
#[derive(Debug, Clone, Copy)]
pub enum Endpoints<'a> {
    /// Every one: its file endpoint and each made by API (an operator's switch for a merchant).
    All,
    /// `file` or the id of one made by API.
    One(&'a str),
}

impl Endpoints<'_> {
    fn id(self) -> Option<String> {
        match self {
            Endpoints::All => None,
            Endpoints::One(id) => Some(id.to_owned()),
        }
    }
}

/// Enables `which` of `merchant_id`'s endpoints (a no-op for one not disabled) and lets their
/// pending notifications come due again at `per_sec` a second per endpoint, in the order they
/// were due (each order's in staging order), from now: an endpoint back from an outage is not
/// met with its whole backlog at once. Returns how many are pending.
pub async fn enable(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    which: Endpoints<'_>,
    per_sec: u64,
) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Pending {
        #[diesel(sql_type = BigInt)]
        pending: i64,
    }
    let spacing_us = i64::try_from(1_000_000 / per_sec.max(1)).unwrap_or(i64::MAX);
    let row: Pending = diesel::sql_query(
        "WITH enabled AS ( \
           UPDATE notification_endpoints \
           SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL \
           WHERE merchant_id = $1 AND ($3::text IS NULL OR endpoint_id = $3)), \
         queue AS ( \
           SELECT id, row_number() OVER (PARTITION BY endpoint_id ORDER BY next_attempt_at, id) - 1 \
                  AS place \
           FROM merchant_notifications \
           WHERE merchant_id = $1 AND ($3::text IS NULL OR endpoint_id = $3) \
             AND status = 'pending'), \
         due AS ( \
           UPDATE merchant_notifications n \
           SET next_attempt_at = now() + q.place * $2 * interval '1 microsecond' \
           FROM queue q WHERE n.id = q.id \
           RETURNING 1) \
         SELECT count(*) AS pending FROM due",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<BigInt, _>(spacing_us)
    .bind::<Nullable<Text>, _>(which.id())
    .committed_result(conn)
    .await?;
    Ok(row.pending)
}

/// The `disabled_reason` of an endpoint an admin or operator disabled.
pub const DISABLED_BY_OPERATOR: &str = "operator";
/// The `disabled_reason` of an endpoint its merchant disabled (by API).
pub const DISABLED_BY_MERCHANT: &str = "merchant";

/// Disables `which` of `merchant_id`'s endpoints for `reason` (one disabled already keeps its
/// time and reason, but an operator's disable takes the reason over: a merchant may lift its
/// own disable, never an operator's); whether any was disabled before, and their pending
/// notifications. The rows exist from now on even if no sender ever tried the endpoints.
pub async fn disable(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    which: Endpoints<'_>,
    reason: &str,
) -> QueryResult<(bool, i64)> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        was_disabled: bool,
        #[diesel(sql_type = BigInt)]
        pending: i64,
    }
    let row: Row = diesel::sql_query(
        "WITH targets AS ( \
           SELECT unnest(CASE WHEN $3::text IS NULL \
                              THEN ARRAY(SELECT id FROM webhook_endpoints WHERE merchant_id = $1) \
                                   || 'file'::text \
                              ELSE ARRAY[$3::text] END) AS endpoint_id), \
         before AS ( \
           SELECT disabled_at FROM notification_endpoints \
           WHERE merchant_id = $1 AND endpoint_id IN (SELECT endpoint_id FROM targets) \
           FOR UPDATE), \
         disabled AS ( \
           INSERT INTO notification_endpoints (merchant_id, endpoint_id, disabled_at, disabled_reason) \
           SELECT $1, endpoint_id, now(), $2 FROM targets \
           ON CONFLICT (merchant_id, endpoint_id) DO UPDATE \
           SET disabled_at = coalesce(notification_endpoints.disabled_at, now()), \
               disabled_reason = CASE WHEN notification_endpoints.disabled_at IS NULL \
                                        OR EXCLUDED.disabled_reason = 'operator' \
                                      THEN EXCLUDED.disabled_reason \
                                      ELSE notification_endpoints.disabled_reason END \
           RETURNING 1) \
         SELECT EXISTS (SELECT 1 FROM before WHERE disabled_at IS NOT NULL) AS was_disabled, \
                (SELECT count(*) FROM merchant_notifications \
                 WHERE merchant_id = $1 AND endpoint_id IN (SELECT endpoint_id FROM targets) \
                   AND status = 'pending') AS pending, \
                (SELECT count(*) FROM disabled) AS written",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<diesel::sql_types::Text, _>(reason)
    .bind::<Nullable<Text>, _>(which.id())
    .committed_result(conn)
    .await?;
    Ok((row.was_disabled, row.pending))
}

/// `merchant_id`'s endpoints that a sender reached or someone disabled, by endpoint id.
pub async fn endpoints_of(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
) -> QueryResult<Vec<Endpoint>> {
    notification_endpoints::table
        .filter(notification_endpoints::merchant_id.eq(merchant_id))
        .order(notification_endpoints::endpoint_id)
        .select(Endpoint::as_select())
        .load(conn)
        .await
}

/// One endpoint's state, if a sender ever reached it or someone disabled it.
pub async fn endpoint(
    conn: &mut AsyncPgConnection,
    key: &EndpointKey,
) -> QueryResult<Option<Endpoint>> {
    notification_endpoints::table
        .find((key.merchant_id, &key.endpoint_id))
        .select(Endpoint::as_select())
        .first(conn)
        .await
        .optional()
}

/// The disabled endpoints, most recently disabled first.
pub async fn disabled_endpoints(conn: &mut AsyncPgConnection) -> QueryResult<Vec<Endpoint>> {
    notification_endpoints::table
        .filter(notification_endpoints::disabled_at.is_not_null())
        .order(notification_endpoints::disabled_at.desc())
        .select(Endpoint::as_select())
        .load(conn)
        .await
}

/// What one call of [`settle_orphans`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Orphans {
    /// Failed: `endpoint deleted`, or `no endpoint` for the file's.
    pub failed: usize,
    /// Moved to the merchant's file endpoint.
    pub moved: usize,
}

/// How long a pending row of a merchant's file endpoint that this gateway's configuration does
/// not name waits before it is failed: a configuration rolled out gateway by gateway names it
/// on some before the others.
pub const FILE_ENDPOINT_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Settles up to `batch` pending notifications that no gateway can send: those of an endpoint
/// made by API that no longer exists go to the merchant's file endpoint when it has one
/// (`file_merchants`, this gateway's configuration) and no endpoint made by API, as its
/// deletion sends the rest, and otherwise fail (`endpoint deleted`); those of a file endpoint
/// the configuration does not name fail (`no endpoint`) after [`FILE_ENDPOINT_GRACE`]. Such
/// rows come from a change staged while the endpoint was deleted (it read it just before the
/// deletion committed; a gateway's view of the endpoints lags by up to a second). One probe
/// per endpoint with pending rows (a skip scan of the due index), as the backlog's.
pub async fn settle_orphans(
    conn: &mut AsyncPgConnection,
    file_merchants: &[i64],
    batch: i64,
) -> QueryResult<Orphans> {
    #[derive(QueryableByName)]
    struct Settled {
        #[diesel(sql_type = Bool)]
        to_file: bool,
    }
    let rows: Vec<Settled> = diesel::sql_query(
        "WITH RECURSIVE endpoints AS ( \
           (SELECT merchant_id, endpoint_id FROM merchant_notifications WHERE status = 'pending' \
            ORDER BY merchant_id, endpoint_id LIMIT 1) \
           UNION ALL \
           SELECT next.merchant_id, next.endpoint_id FROM endpoints m CROSS JOIN LATERAL ( \
             SELECT n.merchant_id, n.endpoint_id FROM merchant_notifications n \
             WHERE n.status = 'pending' \
               AND (n.merchant_id, n.endpoint_id) > (m.merchant_id, m.endpoint_id) \
             ORDER BY n.merchant_id, n.endpoint_id LIMIT 1) AS next), \
         orphans AS ( \
           SELECT e.merchant_id, e.endpoint_id, \
                  e.endpoint_id <> 'file' AND e.merchant_id = ANY($2) \
                  AND NOT EXISTS (SELECT 1 FROM webhook_endpoints w \
                                  WHERE w.merchant_id = e.merchant_id) AS to_file \
           FROM endpoints e \
           WHERE (e.endpoint_id <> 'file' \
                  AND NOT EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.id = e.endpoint_id)) \
              OR (e.endpoint_id = 'file' AND NOT e.merchant_id = ANY($2))), \
         picked AS ( \
           SELECT n.id, o.to_file FROM orphans o JOIN merchant_notifications n \
             ON n.merchant_id = o.merchant_id AND n.endpoint_id = o.endpoint_id \
           WHERE n.status = 'pending' \
             AND (o.endpoint_id <> 'file' OR n.created_at < now() - $3 * interval '1 second') \
           LIMIT $1 FOR UPDATE OF n SKIP LOCKED) \
         UPDATE merchant_notifications m SET \
           endpoint_id = CASE WHEN p.to_file THEN 'file' ELSE m.endpoint_id END, \
           status = CASE WHEN p.to_file THEN m.status ELSE 'failed' END, \
           last_error = CASE WHEN p.to_file THEN m.last_error \
                             WHEN m.endpoint_id = 'file' THEN 'no endpoint' \
                             ELSE 'endpoint deleted' END, \
           last_attempt_at = CASE WHEN p.to_file THEN m.last_attempt_at ELSE now() END \
         FROM picked p WHERE m.id = p.id \
         RETURNING p.to_file",
    )
    .bind::<BigInt, _>(batch)
    .bind::<Array<BigInt>, _>(file_merchants)
    .bind::<BigInt, _>(i64::try_from(FILE_ENDPOINT_GRACE.as_secs()).unwrap_or(600))
    .load(conn)
    .await?;
    let moved = rows.iter().filter(|r| r.to_file).count();
    Ok(Orphans {
        failed: rows.len() - moved,
        moved,
    })
}

/// Deletes up to `batch` notifications delivered more than `retention` ago; how many.
pub async fn delete_delivered(
    conn: &mut AsyncPgConnection,
    retention: std::time::Duration,
    batch: i64,
) -> QueryResult<usize> {
    diesel::sql_query(
        "DELETE FROM merchant_notifications WHERE id = ANY(ARRAY( \
           SELECT id FROM merchant_notifications \
           WHERE status = 'delivered' AND delivered_at < now() - $1 * interval '1 millisecond' \
           ORDER BY delivered_at LIMIT $2 FOR UPDATE SKIP LOCKED))",
    )
    .bind::<BigInt, _>(millis(retention))
    .bind::<BigInt, _>(batch)
    .execute(conn)
    .await
}

/// Deletes up to `batch` notifications that failed for good more than `retention` ago (by
/// their last attempt); how many.
pub async fn delete_failed(
    conn: &mut AsyncPgConnection,
    retention: std::time::Duration,
    batch: i64,
) -> QueryResult<usize> {
    diesel::sql_query(
        "DELETE FROM merchant_notifications WHERE id = ANY(ARRAY( \
           SELECT id FROM merchant_notifications \
           WHERE status = 'failed' AND last_attempt_at < now() - $1 * interval '1 millisecond' \
           ORDER BY last_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED))",
    )
    .bind::<BigInt, _>(millis(retention))
    .bind::<BigInt, _>(batch)
    .execute(conn)
    .await
}

/// Pending notifications of endpoint `key` (a disabled one), counted to at most `upto`.
pub async fn pending_upto(
    conn: &mut AsyncPgConnection,
    key: &EndpointKey,
    upto: i64,
) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Counted {
        #[diesel(sql_type = BigInt)]
        counted: i64,
    }
    let row: Counted = diesel::sql_query(
        "SELECT count(*) AS counted FROM (SELECT 1 FROM merchant_notifications \
         WHERE merchant_id = $1 AND endpoint_id = $3 AND status = 'pending' LIMIT $2) AS t",
    )
    .bind::<BigInt, _>(key.merchant_id)
    .bind::<BigInt, _>(upto)
    .bind::<Text, _>(&key.endpoint_id)
    .committed_result(conn)
    .await?;
    Ok(row.counted)
}

/// Deletes the `n` first due pending notifications of a disabled endpoint and counts them on
/// it, in one statement (so the count is the deletes); how many went. Only
/// while the endpoint is still disabled: the endpoint's row is share-locked first, so an
/// enable either commits before (and nothing goes) or waits for this statement to end.
pub async fn drop_first_due(
    conn: &mut AsyncPgConnection,
    key: &EndpointKey,
    n: i64,
) -> QueryResult<i64> {
    #[derive(QueryableByName)]
    struct Dropped {
        #[diesel(sql_type = BigInt)]
        dropped: i64,
    }
    let row: Dropped = diesel::sql_query(
        "WITH disabled AS ( \
           SELECT 1 FROM notification_endpoints \
           WHERE merchant_id = $1 AND endpoint_id = $3 AND disabled_at IS NOT NULL FOR SHARE), \
         gone AS ( \
           DELETE FROM merchant_notifications WHERE id = ANY(ARRAY( \
             SELECT n.id FROM merchant_notifications n \
             WHERE n.merchant_id = $1 AND n.endpoint_id = $3 AND n.status = 'pending' \
               AND EXISTS (SELECT 1 FROM disabled) \
             ORDER BY n.next_attempt_at, n.id LIMIT $2 FOR UPDATE SKIP LOCKED)) \
           RETURNING 1), \
         counted AS (SELECT count(*) AS dropped FROM gone), \
         noted AS ( \
           UPDATE notification_endpoints e \
           SET dropped = e.dropped + c.dropped, last_dropped_at = now() \
           FROM counted c WHERE e.merchant_id = $1 AND e.endpoint_id = $3 AND c.dropped > 0) \
         SELECT dropped FROM counted",
    )
    .bind::<BigInt, _>(key.merchant_id)
    .bind::<BigInt, _>(n)
    .bind::<Text, _>(&key.endpoint_id)
    .committed_result(conn)
    .await?;
    Ok(row.dropped)
}

fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
