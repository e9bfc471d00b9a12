//! The `idempotency_keys` rows: acquire and finish, inside the caller's transaction.

use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Int4, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use sha2::{Digest, Sha256};

use crate::db::one_row::CommittedResult;
use crate::schema::idempotency_keys;

/// The operation a key is scoped to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    OrderCreate,
    PaymentCallback,
    /// Two-phase: committed `processing` under a lease before the provider is called.
    RefundCreate,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        self.as_str_ref()
    }

    /// The name as a place a bind parameter can borrow for the statement's lifetime.
    pub fn as_str_ref(&self) -> &'static &'static str {
        match self {
            Operation::OrderCreate => &"order.create",
            Operation::PaymentCallback => &"payment.callback",
            Operation::RefundCreate => &"refund.create",
        }
    }

    /// Every operation, for parsing its name.
    pub const ALL: [Operation; 3] = [
        Operation::OrderCreate,
        Operation::PaymentCallback,
        Operation::RefundCreate,
    ];
}

/// The lifecycle of a record, as stored in its `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordStatus {
    Processing,
    Succeeded,
    Failed,
}

impl RecordStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Processing => "processing",
            RecordStatus::Succeeded => "succeeded",
            RecordStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "processing" => Some(RecordStatus::Processing),
            "succeeded" => Some(RecordStatus::Succeeded),
            "failed" => Some(RecordStatus::Failed),
            _ => None,
        }
    }
}

/// Who may see a record: user A's key never affects user B's request with the same key.
#[derive(Debug, Clone)]
pub struct Scope {
    pub user_id: i64,
    pub op: Operation,
    pub key: String,
}

/// Hex SHA-256 of the raw request body: the same key with another body is a mismatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn of(body: &[u8]) -> Self {
        Self(hex::encode(Sha256::digest(body)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A response exactly as stored: replays send these bytes unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// The JSON text as PostgreSQL renders the stored JSONB; the first answer is sent from
    /// this same text, so the first response and every replay are byte-identical.
    pub body: String,
}

/// One idempotent request: its scope, the fingerprint of its body and when its record expires.
#[derive(Debug, Clone)]
pub struct IdempotentRequest {
    pub scope: Scope,
    pub fingerprint: Fingerprint,
    pub expires_at: DateTime<Utc>,
}

/// The final answer of an operation that ran for the first time, to be stored and sent.
#[derive(Debug, Clone)]
pub struct Completion {
    pub record_status: RecordStatus,
    pub http_status: u16,
    pub body: serde_json::Value,
}

impl Completion {
    pub fn succeeded(http_status: u16, body: serde_json::Value) -> Self {
        Self {
            record_status: RecordStatus::Succeeded,
            http_status,
            body,
        }
    }

    /// A deterministic failure: stored, and replayed as it was.
    pub fn failed(http_status: u16, body: serde_json::Value) -> Self {
        Self {
            record_status: RecordStatus::Failed,
            http_status,
            body,
        }
    }
}

/// What a one-statement attempt (see [`super::IdempotentWork::run_in_one_statement`]) found.
#[derive(Debug)]
pub enum OneStatement<O> {
    /// The request claimed its key, ran and committed: its stored response and what it did.
    Finished(StoredResponse, O),
    /// A record committed by an earlier request (a replay or a mismatch).
    Existing(Acquired),
    /// Another request holds the key past the lock timeout.
    InFlight,
    /// The shortcut does not fit this request's state; nothing was written.
    Declined,
}

/// Proof that this transaction inserted the record and must finish it.
#[derive(Debug)]
pub struct Claim {
    record_id: i64,
}

/// What acquiring a key found.
#[derive(Debug)]
pub enum Acquired {
    /// This request inserted the record: run the operation.
    First(Claim),
    /// A record exists (committed by an earlier request).
    Existing {
        status: RecordStatus,
        response: Option<StoredResponse>,
        request_hash: String,
    },
    /// Another transaction holds the key and did not commit within the lock timeout.
    InFlight,
}

diesel::define_sql_function! {
    /// The migration's plpgsql acquire: one row (record id, acquired, in flight, status,
    /// response status, response body as text, request hash). Called through the query
    /// builder so the statement is prepared once per connection.
    fn idempotency_acquire(
        user_id: BigInt,
        op: Text,
        idem_key: Text,
        request_hash: Text,
        expires_at: Timestamptz,
    ) -> Record<(Nullable<BigInt>, Bool, Bool, Nullable<Text>, Nullable<Int4>, Nullable<Text>, Nullable<Text>)>;
}

diesel::define_sql_function! {
    /// UPDATE .. RETURNING response_body::text, as a prepared call (see the migrations).
    fn idempotency_finish(
        record_id: BigInt,
        status: Text,
        response_status: diesel::sql_types::Int4,
        response_body: diesel::sql_types::Jsonb,
    ) -> Text;
}

type AcquireRow = (
    Option<i64>,
    bool,
    bool,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

/// INSERT .. ON CONFLICT DO NOTHING, then read the row, in one round trip (see the
/// `idempotency_acquire` function in the migrations). Must run inside a transaction.
pub async fn acquire(
    conn: &mut AsyncPgConnection,
    scope: &Scope,
    fingerprint: &Fingerprint,
    expires_at: DateTime<Utc>,
) -> QueryResult<Acquired> {
    let (record_id, acquired, in_flight, status, response_status, response_body, request_hash): AcquireRow =
        diesel::select(idempotency_acquire(
                scope.user_id,
                scope.op.as_str(),
                &scope.key,
                fingerprint.as_str(),
                expires_at,
            ))
        .committed_result(conn)
        .await?;
    if in_flight {
        return Ok(Acquired::InFlight);
    }
    if acquired {
        let record_id = record_id.ok_or_else(|| corrupt("acquire returned no record id"))?;
        return Ok(Acquired::First(Claim { record_id }));
    }
    existing(status, response_status, response_body, request_hash)
}

/// A committed record from its columns (status, response status, response text, request hash).
pub fn existing(
    status: Option<String>,
    response_status: Option<i32>,
    response_body: Option<String>,
    request_hash: Option<String>,
) -> QueryResult<Acquired> {
    let status = status
        .as_deref()
        .and_then(RecordStatus::parse)
        .ok_or_else(|| corrupt("unknown idempotency record status"))?;
    let response = match (response_status, response_body) {
        (Some(code), Some(body)) => Some(StoredResponse {
            status: u16::try_from(code).map_err(|_| corrupt("stored status out of range"))?,
            body,
        }),
        _ => None,
    };
    Ok(Acquired::Existing {
        status,
        response,
        request_hash: request_hash.unwrap_or_default(),
    })
}

/// The committed record of `scope`, if any: one prepared read outside any transaction, so a
/// duplicate costs one indexed lookup. A committed record is always finished (it is created
/// and finished in one transaction), and finished records never change, so this read is as
/// good as the one inside the acquire.
pub async fn lookup(conn: &mut AsyncPgConnection, scope: &Scope) -> QueryResult<Option<Acquired>> {
    let row: Option<RecordRow> = ReadRecord(scope).committed_result(conn).await.optional()?;
    row.map(|(status, response_status, response_body, request_hash)| {
        existing(status, response_status, response_body, request_hash)
    })
    .transpose()
}

/// A record's (status, response status, response text, request hash).
pub type RecordRow = (Option<String>, Option<i32>, Option<String>, Option<String>);

/// `idempotency_record(user, op, key)`: the one read of a record (migration 000007), which
/// the one-statement capture and the acquire use too. Written by hand so it is prepared once
/// per connection (diesel caches a query by its static id).
pub struct ReadRecord<'a>(pub &'a Scope);

impl QueryId for ReadRecord<'_> {
    type QueryId = ReadRecord<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for ReadRecord<'_> {
    type SqlType = (
        Nullable<Text>,
        Nullable<Int4>,
        Nullable<Text>,
        Nullable<Text>,
    );
}

impl QueryFragment<Pg> for ReadRecord<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(
            "SELECT status, response_status, response_body, request_hash FROM idempotency_record(",
        );
        walk_scope(self.0, &mut out)?;
        out.push_sql(")");
        Ok(())
    }
}

/// A scope as `idempotency_record`'s three arguments: user, op, key.
pub fn walk_scope<'b>(scope: &'b Scope, out: &mut AstPass<'_, 'b, Pg>) -> QueryResult<()> {
    out.push_bind_param::<BigInt, _>(&scope.user_id)?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(scope.op.as_str_ref())?;
    out.push_sql(", ");
    out.push_bind_param::<Text, _>(&scope.key)
}

/// Writes the final response into the claimed record, in the same transaction as the
/// business change, and returns the exact text that replays will send.
pub async fn finish(
    conn: &mut AsyncPgConnection,
    claim: Claim,
    status: RecordStatus,
    http_status: u16,
    body: &serde_json::Value,
) -> QueryResult<StoredResponse> {
    let stored_body: String = diesel::select(idempotency_finish(
        claim.record_id,
        status.as_str(),
        i32::from(http_status),
        body,
    ))
    .committed_result(conn)
    .await?;
    Ok(StoredResponse {
        status: http_status,
        body: stored_body,
    })
}

fn corrupt(what: &'static str) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}

/// A record as the admin endpoint shows it.
#[derive(Debug, Queryable, Selectable, serde::Serialize, utoipa::ToSchema)]
#[diesel(table_name = idempotency_keys)]
pub struct IdempotencyRecord {
    pub id: i64,
    pub user_id: i64,
    pub op: String,
    pub idem_key: String,
    pub request_hash: String,
    pub status: String,
    pub response_status: Option<i32>,
    #[schema(value_type = Option<Object>)]
    pub response_body: Option<serde_json::Value>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

impl IdempotencyRecord {
    pub async fn find(conn: &mut AsyncPgConnection, scope: &Scope) -> QueryResult<Option<Self>> {
        idempotency_keys::table
            .filter(idempotency_keys::user_id.eq(scope.user_id))
            .filter(idempotency_keys::op.eq(scope.op.as_str()))
            .filter(idempotency_keys::idem_key.eq(&scope.key))
            .select(Self::as_select())
            .first(conn)
            .await
            .optional()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_the_hex_sha256_of_the_raw_body() {
        assert_eq!(
            Fingerprint::of(b"abc").as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_single_changed_byte_changes_the_fingerprint() {
        assert_ne!(
            Fingerprint::of(b"{\"a\":1}"),
            Fingerprint::of(b"{\"a\": 1}")
        );
    }

    #[test]
    fn statuses_round_trip_through_their_column_text() {
        for s in [
            RecordStatus::Processing,
            RecordStatus::Succeeded,
            RecordStatus::Failed,
        ] {
            assert_eq!(RecordStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(RecordStatus::parse("done"), None);
    }
}
