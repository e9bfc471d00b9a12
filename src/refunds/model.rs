//! The `refund_requests` table: one merchant refund request, its status column as an enum,
//! and the queries that read and move it. Its outcome from the provider's webhook is written by
//! `payment_apply_strict` (migration 000009), in the transaction that posts the refund.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

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
            .get_result(conn)
            .await
    }
}

diesel::define_sql_function! {
    /// Phase 3's write when the provider accepted (migration 000009): the status afterwards,
    /// or NULL if the request was no longer processing.
    fn refund_request_accepted(request_id: BigInt, refund_id: Text) -> Nullable<Text>;
}

impl RefundRequest {
    /// The status; one the code does not know is an error, never a guess.
    pub fn status(&self) -> QueryResult<RefundStatus> {
        parse_status(&self.status)
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
    /// its webhook overtook the answer. `None` if it was no longer processing.
    pub async fn accepted(
        conn: &mut AsyncPgConnection,
        id: i64,
        refund_id: &str,
    ) -> QueryResult<Option<RefundStatus>> {
        let status: Option<String> = diesel::select(refund_request_accepted(id, refund_id))
            .get_result(conn)
            .await?;
        status.as_deref().map(parse_status).transpose()
    }

    /// The provider declined the request: failed, its amount released. False if it was no
    /// longer processing.
    pub async fn declined(
        conn: &mut AsyncPgConnection,
        id: i64,
        message: &str,
    ) -> QueryResult<bool> {
        let updated = diesel::update(refund_requests::table)
            .filter(refund_requests::id.eq(id))
            .filter(refund_requests::status.eq(RefundStatus::Processing.as_str()))
            .set((
                refund_requests::status.eq(RefundStatus::Failed.as_str()),
                refund_requests::failure_message.eq(message),
                refund_requests::updated_at.eq(diesel::dsl::now),
            ))
            .execute(conn)
            .await?;
        Ok(updated == 1)
    }
}

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
    /// failed, or processing past its lease
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = diesel::sql_types::Timestamptz)]
    #[schema(value_type = String)]
    pub updated_at: DateTime<Utc>,
}

impl RefundAttention {
    /// The newest `limit` requests that failed at the provider, or that are still processing
    /// with no live lease (their holder crashed or gave up; the recoverer or a retry takes them
    /// over), from the partial index of migration 000011.
    pub async fn newest(conn: &mut AsyncPgConnection, limit: i64) -> QueryResult<Vec<Self>> {
        diesel::sql_query(
            "SELECT r.id AS refund_request_id, r.order_id, r.amount_minor, r.currency, r.status, \
                    r.updated_at \
             FROM refund_requests r \
             LEFT JOIN idempotency_keys k ON k.id = r.idempotency_record_id \
             WHERE r.status IN ('failed', 'processing') \
               AND (r.status = 'failed' OR k.locked_until IS NULL OR k.locked_until < now()) \
             ORDER BY r.updated_at DESC, r.id DESC \
             LIMIT $1",
        )
        .bind::<BigInt, _>(limit)
        .load(conn)
        .await
    }
}
