//! The `refund_requests` table: one merchant refund request, its status column as an enum,
//! and the queries that read and move it. Its outcome from the provider's webhook is written by
//! `payment_apply_strict` (migration 000009), in the transaction that posts the refund.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::review::ReviewReason;
use crate::db::one_row::CommittedResult;
use crate::schema::refund_requests;

/// A refund request's status, as stored in its `status` column (see migration 000008).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundStatus {
    /// Phase 1 committed; the provider's answer is not stored yet.
    Processing,
    /// The provider accepted it; its refund webhook has not posted yet.
    Pending,
    /// The provider's refund webhook posted it to the ledger.
    Succeeded,
    /// The provider declined it; its amount is refundable again.
    Failed,
}

impl RefundStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RefundStatus::Processing => "processing",
            RefundStatus::Pending => "pending",
            RefundStatus::Succeeded => "succeeded",
            RefundStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            RefundStatus::Processing,
            RefundStatus::Pending,
            RefundStatus::Succeeded,
            RefundStatus::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == s)
    }
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = refund_requests)]
pub struct RefundRequest {
    pub id: i64,
    pub merchant_id: i64,
    pub order_id: i64,
    pub provider: String,
    pub payment_id: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: Option<String>,
    pub status: String,
    pub provider_idempotency_key: String,
    pub provider_refund_id: Option<String>,
    pub failure_message: Option<String>,
    pub idempotency_record_id: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub review_reason: Option<String>,
}

#[derive(Debug, Insertable)]
#[diesel(table_name = refund_requests)]
pub struct NewRefundRequest<'a> {
    pub merchant_id: i64,
    pub order_id: i64,
    pub provider: &'a str,
    pub payment_id: &'a str,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub reason: Option<&'a str>,
    pub status: &'static str,
    pub provider_idempotency_key: &'a str,
    pub idempotency_record_id: i64,
}

impl NewRefundRequest<'_> {
    pub async fn insert(&self, conn: &mut AsyncPgConnection) -> QueryResult<RefundRequest> {
        diesel::insert_into(refund_requests::table)
            .values(self)
            .returning(RefundRequest::as_returning())
            .committed_result(conn)
            .await
    }
}

diesel::define_sql_function! {
    /// Phase 3's write when the provider accepted (migration 000009; 000040 adds `notify`):
    /// the status afterwards, or NULL if the request was no longer processing.
    fn refund_request_accepted(request_id: BigInt, refund_id: Text, notify: Bool) -> Nullable<Text>;
}

diesel::define_sql_function! {
    /// A refund request fails from status `from` with `message`, staging
    /// `refund_request.failed` when `notify` (migration 000040): false if it was not `from`.
    fn refund_request_fail(request_id: BigInt, from: Text, message: Text, notify: Bool) -> Bool;
}

impl RefundRequest {
    /// The status; one the code does not know is an error, never a guess.
    pub fn status(&self) -> QueryResult<RefundStatus> {
        parse_status(&self.status)
    }

    /// Request `id`.
    pub async fn for_id(conn: &mut AsyncPgConnection, id: i64) -> QueryResult<RefundRequest> {
        refund_requests::table
            .find(id)
            .select(RefundRequest::as_select())
            .first(conn)
            .await
    }

    /// The request that idempotency record `record_id` answers for.
    pub async fn for_record(
        conn: &mut AsyncPgConnection,
        record_id: i64,
    ) -> QueryResult<Option<RefundRequest>> {
        refund_requests::table
            .filter(refund_requests::idempotency_record_id.eq(record_id))
            .select(RefundRequest::as_select())
            .first(conn)
            .await
            .optional()
    }

    /// What the order's refund requests in flight (processing or pending) reserve. The caller
    /// holds the order's row lock, so no other request can reserve meanwhile.
    pub async fn reserved_minor(conn: &mut AsyncPgConnection, order_id: i64) -> QueryResult<i64> {
        let sum: Option<i64> = refund_requests::table
            .filter(refund_requests::order_id.eq(order_id))
            .filter(refund_requests::status.eq_any([
                RefundStatus::Processing.as_str(),
                RefundStatus::Pending.as_str(),
            ]))
            .select(diesel::dsl::sql::<Nullable<BigInt>>(
                "sum(amount_minor)::BIGINT",
            ))
            .first(conn)
            .await?;
        Ok(sum.unwrap_or(0))
    }

    /// The provider accepted the request as `refund_id`: pending, or succeeded at once when
    /// its webhook overtook the answer (staging `refund_request.succeeded` when `notify`).
    /// `None` if it was no longer processing.
    pub async fn accepted(
        conn: &mut AsyncPgConnection,
        id: i64,
        refund_id: &str,
        notify: bool,
    ) -> QueryResult<Option<RefundStatus>> {
        let status: Option<String> = diesel::select(refund_request_accepted(id, refund_id, notify))
            .committed_result(conn)
            .await?;
        status.as_deref().map(parse_status).transpose()
    }

    /// An operator found no refund at the provider for a pending request (its refund id was
    /// wrong): failed, its amount released. False if it was no longer pending.
    pub async fn withdrawn(
        conn: &mut AsyncPgConnection,
        id: i64,
        message: &str,
        notify: bool,
    ) -> QueryResult<bool> {
        Self::fail(conn, id, RefundStatus::Pending, message, notify).await
    }

    /// An operator corrects a pending request's refund id: it becomes pending under
    /// `refund_id`, through the same writer as phase 3 (`refund_request_accepted`), which settles
    /// it at once if that refund is already in the ledger. The status afterwards, or `None` if
    /// it was no longer pending.
    pub async fn corrected(
        conn: &mut AsyncPgConnection,
        id: i64,
        refund_id: &str,
        notify: bool,
    ) -> QueryResult<Option<RefundStatus>> {
        // Back to processing in this transaction only, so the one writer of an accepted refund
        // id (and its settling rule) serves the correction too.
        let reopened = diesel::update(refund_requests::table)
            .filter(refund_requests::id.eq(id))
            .filter(refund_requests::status.eq(RefundStatus::Pending.as_str()))
            .set(refund_requests::status.eq(RefundStatus::Processing.as_str()))
            .execute(conn)
            .await?;
        if reopened != 1 {
            return Ok(None);
        }
        Self::accepted(conn, id, refund_id, notify).await
    }

    /// The provider declined the request: failed, its amount released. False if it was no
    /// longer processing.
    pub async fn declined(
        conn: &mut AsyncPgConnection,
        id: i64,
        message: &str,
        notify: bool,
    ) -> QueryResult<bool> {
        Self::fail(conn, id, RefundStatus::Processing, message, notify).await
    }

    /// `from` -> failed with `message`, through the routine that also stages the merchant's
    /// `refund_request.failed` (when `notify`); false if the request was not `from`.
    async fn fail(
        conn: &mut AsyncPgConnection,
        id: i64,
        from: RefundStatus,
        message: &str,
        notify: bool,
    ) -> QueryResult<bool> {
        diesel::select(refund_request_fail(id, from.as_str(), message, notify))
            .committed_result(conn)
            .await
    }
}

/// A processing request the recoverer may take over now: its record and the lease token it saw.
#[derive(Debug, Clone, QueryableByName)]
pub struct DueRequest {
    #[diesel(sql_type = BigInt)]
    pub record_id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    pub lease_token: Option<String>,
}

/// A refund request as an operator's resolution finds it.
#[derive(Debug, Clone, QueryableByName)]
pub struct Resolvable {
    #[diesel(sql_type = BigInt)]
    pub merchant_id: i64,
    #[diesel(sql_type = BigInt)]
    pub order_id: i64,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub record_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    pub lease_token: Option<String>,
    /// Processing and nobody may be calling the provider for it: its retries stopped, its
    /// lease was released, or its lease expired more than a lease ago (a holder that outlived
    /// its lease is still given that long to store the provider's answer).
    #[diesel(sql_type = diesel::sql_types::Bool)]
    pub idle: bool,
}

impl RefundRequest {
    /// The reason automatic retries stopped, if they did; one the code does not know is an
    /// error, never "no reason" (that would let a stopped request be sent again).
    pub fn review_reason(&self) -> QueryResult<Option<ReviewReason>> {
        self.review_reason
            .as_deref()
            .map(|text| {
                ReviewReason::parse(text).ok_or_else(|| {
                    diesel::result::Error::DeserializationError(
                        format!("unknown review reason {text:?}").into(),
                    )
                })
            })
            .transpose()
    }

    /// How long the backoff of request `id` still runs, if it does (the database's clock).
    pub async fn backoff_left(
        conn: &mut AsyncPgConnection,
        id: i64,
    ) -> QueryResult<Option<std::time::Duration>> {
        let left: Option<f64> = refund_requests::table
            .filter(refund_requests::id.eq(id))
            .filter(refund_requests::next_attempt_at.gt(diesel::dsl::now))
            .select(diesel::dsl::sql::<diesel::sql_types::Double>(
                "extract(epoch FROM next_attempt_at - now())::float8",
            ))
            .first(conn)
            .await
            .optional()?;
        Ok(left.map(|secs| std::time::Duration::from_secs_f64(secs.max(0.0))))
    }

    /// Another request of the same merchant and provider that already holds `refund_id`.
    pub async fn holder_of_refund_id(
        conn: &mut AsyncPgConnection,
        request: &RefundRequest,
        refund_id: &str,
    ) -> QueryResult<Option<i64>> {
        refund_requests::table
            .filter(refund_requests::merchant_id.eq(request.merchant_id))
            .filter(refund_requests::provider.eq(&request.provider))
            .filter(refund_requests::provider_refund_id.eq(refund_id))
            .filter(refund_requests::id.ne(request.id))
            .select(refund_requests::id)
            .first(conn)
            .await
            .optional()
    }

    /// Whether the request was created more than `age` ago (the database's clock): its
    /// provider idempotency key may be forgotten by now.
    pub async fn older_than(
        conn: &mut AsyncPgConnection,
        id: i64,
        age: std::time::Duration,
    ) -> QueryResult<bool> {
        refund_requests::table
            .filter(refund_requests::id.eq(id))
            .select(
                diesel::dsl::sql::<diesel::sql_types::Bool>("created_at < now() - ")
                    .bind::<diesel::sql_types::Double, _>(age.as_secs_f64())
                    .sql(" * interval '1 second'"),
            )
            .first(conn)
            .await
    }

    /// Stops the automatic retries of a processing request: a person resolves it. False if it
    /// was no longer processing.
    pub async fn stop_retrying(
        conn: &mut AsyncPgConnection,
        id: i64,
        reason: ReviewReason,
    ) -> QueryResult<bool> {
        let updated = diesel::update(refund_requests::table)
            .filter(refund_requests::id.eq(id))
            .filter(refund_requests::status.eq(RefundStatus::Processing.as_str()))
            .set((
                refund_requests::review_reason.eq(reason.as_str()),
                refund_requests::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .await?;
        Ok(updated == 1)
    }

    /// The provider gave no known outcome: nobody calls again before a backoff that doubles
    /// with each such attempt from `base` up to `MAX_BACKOFF`, plus up to a quarter of jitter,
    /// so a rate-limiting provider is not hammered and retries of many requests spread. The
    /// wait, for the client's `Retry-After`.
    pub async fn retry_later(
        conn: &mut AsyncPgConnection,
        id: i64,
        base: std::time::Duration,
    ) -> QueryResult<std::time::Duration> {
        #[derive(QueryableByName)]
        struct Wait {
            #[diesel(sql_type = diesel::sql_types::Double)]
            secs: f64,
        }
        let wait: Option<Wait> = diesel::sql_query(
            "UPDATE refund_requests \
             SET attempts = attempts + 1, \
                 next_attempt_at = now() + least($2 * power(2, least(attempts, 20)), $3) \
                     * (1 + random() / 4) * interval '1 second' \
             WHERE id = $1 AND status = 'processing' \
             RETURNING extract(epoch FROM next_attempt_at - now())::float8 AS secs",
        )
        .bind::<BigInt, _>(id)
        .bind::<diesel::sql_types::Double, _>(base.as_secs_f64())
        .bind::<diesel::sql_types::Double, _>(MAX_BACKOFF.as_secs_f64())
        .committed_result(conn)
        .await
        .optional()?;
        Ok(std::time::Duration::from_secs_f64(
            wait.map_or(0.0, |w| w.secs).max(0.0),
        ))
    }

    /// Up to `limit` processing requests the recoverer should try now: no live lease, not
    /// stopped for review, their backoff over. A crashed holder's request (its lease expired
    /// rather than released) comes first, then the longest due: round-robin, since every
    /// attempt that ends unknown moves its request to the back by its backoff.
    pub async fn due(conn: &mut AsyncPgConnection, limit: i64) -> QueryResult<Vec<DueRequest>> {
        diesel::sql_query(
            "SELECT k.id AS record_id, k.lease_token \
             FROM refund_requests r JOIN idempotency_keys k ON k.id = r.idempotency_record_id \
             WHERE r.status = 'processing' AND r.review_reason IS NULL \
               AND r.next_attempt_at <= now() \
               AND k.status = 'processing' AND (k.locked_until IS NULL OR k.locked_until <= now()) \
             ORDER BY k.locked_until IS NULL, r.next_attempt_at, r.id \
             LIMIT $1",
        )
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await
    }

    /// Request `id` as an operator's resolution needs it (read, not locked: the resolution
    /// then locks the record, the order and the request, in phase 3's order); `None` if there is
    /// no such request.
    pub async fn resolvable(
        conn: &mut AsyncPgConnection,
        id: i64,
        lease: std::time::Duration,
    ) -> QueryResult<Option<Resolvable>> {
        diesel::sql_query(
            "SELECT r.merchant_id, r.order_id, r.status, k.id AS record_id, k.lease_token, \
                    (r.status = 'processing' AND k.status = 'processing' \
                     AND (r.review_reason IS NOT NULL OR k.locked_until IS NULL \
                          OR k.locked_until < now() - $2 * interval '1 millisecond')) AS idle \
             FROM refund_requests r LEFT JOIN idempotency_keys k ON k.id = r.idempotency_record_id \
             WHERE r.id = $1",
        )
        .bind::<BigInt, _>(id)
        .bind::<BigInt, _>(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX))
        .committed_result(conn)
        .await
        .optional()
    }

    /// How many processing requests wait for a person (retries stopped).
    pub async fn needing_review(conn: &mut AsyncPgConnection) -> QueryResult<i64> {
        refund_requests::table
            .filter(refund_requests::status.eq(RefundStatus::Processing.as_str()))
            .filter(refund_requests::review_reason.is_not_null())
            .count()
            .committed_result(conn)
            .await
    }
}

/// The longest wait between two automatic attempts of one request.
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(15 * 60);

fn parse_status(s: &str) -> QueryResult<RefundStatus> {
    RefundStatus::parse(s).ok_or_else(|| {
        diesel::result::Error::DeserializationError(format!("unknown refund status {s:?}").into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_through_their_column_text() {
        for status in [
            RefundStatus::Processing,
            RefundStatus::Pending,
            RefundStatus::Succeeded,
            RefundStatus::Failed,
        ] {
            assert_eq!(RefundStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(RefundStatus::parse("done"), None);
    }
}

/// A refund request finance must look at, as `GET /admin/attention` shows it.
#[derive(Debug, Clone, serde::Serialize, QueryableByName, utoipa::ToSchema)]
pub struct RefundAttention {
    #[diesel(sql_type = BigInt)]
    pub refund_request_id: i64,
    #[diesel(sql_type = BigInt)]
    pub order_id: i64,
    #[diesel(sql_type = BigInt)]
    pub amount_minor: i64,
    #[diesel(sql_type = Text)]
    pub currency: String,
    /// failed, processing (no live lease), or pending past the overdue threshold
    #[diesel(sql_type = Text)]
    pub status: String,
    /// Why it is listed: `declined` (failed at the provider or by an operator), `no_live_lease`
    /// (the recoverer or a client retry will try again), `retry_age_exceeded` and
    /// `unusable_provider_answer` and `refund_id_in_use` (retries stopped: resolve it, see
    /// docs/refunds.md), or
    /// `webhook_overdue` (accepted, but the provider's refund webhook never came)
    #[diesel(sql_type = Text)]
    pub reason: String,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    #[schema(value_type = String)]
    pub updated_at: DateTime<Utc>,
}

/// The attention list's statement ($1 limit, $2 overdue seconds): newest first from the partial
/// index `idx_refund_requests_attention`, never a scan of every request.
pub const ATTENTION_SQL: &str = "SELECT r.id AS refund_request_id, r.order_id, r.amount_minor, r.currency, r.status, \
            CASE WHEN r.status = 'failed' THEN 'declined' \
                 WHEN r.status = 'pending' THEN 'webhook_overdue' \
                 ELSE coalesce(r.review_reason, 'no_live_lease') END AS reason, \
            r.updated_at \
     FROM refund_requests r \
     LEFT JOIN idempotency_keys k ON k.id = r.idempotency_record_id \
     WHERE r.status IN ('failed', 'processing', 'pending') \
       AND (r.status = 'failed' \
            OR (r.status = 'processing' \
                AND (k.locked_until IS NULL OR k.locked_until < now())) \
            OR (r.status = 'pending' \
                AND r.updated_at < now() - $2 * interval '1 second')) \
     ORDER BY r.updated_at DESC, r.id DESC \
     LIMIT $1";

impl RefundAttention {
    /// The newest `limit` requests that failed, that are processing with no live lease (their
    /// holder crashed or gave up, or retries stopped for a person), or that have been pending
    /// for longer than `overdue` (their amount stays reserved until the webhook comes), from the
    /// partial index of migration 000023.
    pub async fn newest(
        conn: &mut AsyncPgConnection,
        limit: i64,
        overdue: std::time::Duration,
    ) -> QueryResult<Vec<Self>> {
        diesel::sql_query(ATTENTION_SQL)
            .bind::<BigInt, _>(limit)
            .bind::<BigInt, _>(i64::try_from(overdue.as_secs()).unwrap_or(i64::MAX))
            .load(conn)
            .await
    }
}
