//! Leases for two-phase operations (`refund.create`): the record is claimed and committed as
//! `processing` before the slow work (a provider call) runs outside any transaction. The
//! holder owns it until `locked_until`, under a token of its own; an expired (or released)
//! lease may be taken over with a compare-and-set, and only the token's holder can finish.
//! Every time comes from the database's clock, so gateways with skewed clocks agree.

use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Int4, Jsonb, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use rand::RngCore;

use super::record::{Fingerprint, IdempotentRequest, RecordStatus, StoredResponse};

use crate::db::one_row::CommittedResult;

/// Proof that this attempt holds a processing record's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    record_id: i64,
    token: String,
}

impl Lease {
    pub fn record_id(&self) -> i64 {
        self.record_id
    }
}

/// What claiming a key of a two-phase operation found.
#[derive(Debug)]
pub enum Claimed {
    /// This request inserted the record and holds its lease: run phase 1.
    New(Lease),
    /// The record was processing and its lease had expired (or was released): this request
    /// took it over and must finish the work it describes.
    TakenOver(Lease),
    /// The record is finished: its response, to replay.
    Replay(StoredResponse),
    /// Another attempt holds a live lease.
    InFlight,
    /// The record was made for another request body.
    Mismatch,
}

diesel::define_sql_function! {
    /// The one claim of a key (migration 000007): the new record's id, or NULL if it exists.
    fn idempotency_claim(
        user_id: BigInt,
        op: Text,
        idem_key: Text,
        request_hash: Text,
        expires_at: Timestamptz,
    ) -> Nullable<BigInt>;
}

#[derive(QueryableByName)]
struct LeaseRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Text)]
    request_hash: String,
    #[diesel(sql_type = Nullable<Int4>)]
    response_status: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    response_body: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lease_token: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Bool)]
    live: bool,
}

#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct TextRow {
    #[diesel(sql_type = Text)]
    text: String,
}

/// Claims `request`'s key inside the caller's transaction, which the caller commits before
/// the slow work starts: a new record gets a lease of `lease`; an existing one is replayed,
/// in flight, a mismatch, or (lease expired, same body) taken over.
pub async fn claim(
    conn: &mut AsyncPgConnection,
    request: &IdempotentRequest,
    lease: Duration,
) -> QueryResult<Claimed> {
    let scope = &request.scope;
    let inserted: Option<i64> = diesel::select(idempotency_claim(
        scope.user_id,
        scope.op.as_str(),
        &scope.key,
        request.fingerprint.as_str(),
        request.expires_at,
    ))
    .committed_result(conn)
    .await?;
    if let Some(record_id) = inserted {
        // A new record has no lease yet: granting it is the takeover of "no holder".
        return match take_over(conn, record_id, None, lease).await? {
            Some(lease) => Ok(Claimed::New(lease)),
            None => Err(corrupt("a record claimed just now had a lease")),
        };
    }
    let row: Option<LeaseRow> = diesel::sql_query(
        "SELECT id, status, request_hash, response_status, response_body::TEXT AS response_body, \
         lease_token, coalesce(locked_until > now(), false) AS live \
         FROM idempotency_keys WHERE user_id = $1 AND op = $2 AND idem_key = $3",
    )
    .bind::<BigInt, _>(scope.user_id)
    .bind::<Text, _>(scope.op.as_str())
    .bind::<Text, _>(&scope.key)
    .committed_result(conn)
    .await
    .optional()?;
    // Removed between the claim and the read (an expired, finished record): try again later.
    let Some(row) = row else {
        return Ok(Claimed::InFlight);
    };
    decide(conn, row, &request.fingerprint, lease).await
}

async fn decide(
    conn: &mut AsyncPgConnection,
    row: LeaseRow,
    fingerprint: &Fingerprint,
    lease: Duration,
) -> QueryResult<Claimed> {
    let status = RecordStatus::parse(&row.status)
        .ok_or_else(|| corrupt("unknown idempotency record status"))?;
    // A live holder is answered first, whatever the body: nothing is decided while it runs.
    if status == RecordStatus::Processing && row.live {
        return Ok(Claimed::InFlight);
    }
    if row.request_hash != fingerprint.as_str() {
        return Ok(Claimed::Mismatch);
    }
    if status != RecordStatus::Processing {
        return match (row.response_status, row.response_body) {
            (Some(code), Some(body)) => Ok(Claimed::Replay(StoredResponse {
                status: u16::try_from(code).map_err(|_| corrupt("stored status out of range"))?,
                body,
            })),
            _ => Err(corrupt("a finished record without a response")),
        };
    }
    Ok(
        match take_over(conn, row.id, row.lease_token.as_deref(), lease).await? {
            Some(lease) => Claimed::TakenOver(lease),
            // Another attempt took it over first.
            None => Claimed::InFlight,
        },
    )
}

/// The compare-and-set of a takeover: the record gets a fresh token and `locked_until = now +
/// lease` only if it is still processing, its lease is expired or released, and its token is
/// still the one the caller saw. Of two racers exactly one gets `Some`.
pub async fn take_over(
    conn: &mut AsyncPgConnection,
    record_id: i64,
    seen_token: Option<&str>,
    lease: Duration,
) -> QueryResult<Option<Lease>> {
    let token = new_token();
    let taken: Option<IdRow> = diesel::sql_query(
        "UPDATE idempotency_keys \
         SET locked_until = now() + $2 * interval '1 millisecond', lease_token = $3 \
         WHERE id = $1 AND status = 'processing' AND lease_token IS NOT DISTINCT FROM $4 \
           AND (locked_until IS NULL OR locked_until <= now()) \
         RETURNING id",
    )
    .bind::<BigInt, _>(record_id)
    .bind::<BigInt, _>(millis(lease))
    .bind::<Text, _>(&token)
    .bind::<Nullable<Text>, _>(seen_token)
    .committed_result(conn)
    .await
    .optional()?;
    Ok(taken.map(|row| Lease {
        record_id: row.id,
        token,
    }))
}

/// Locks the record for the rest of the transaction if `lease` still holds it (whatever its
/// expiry: a holder that outlived `locked_until` may still finish until someone takes over).
pub async fn hold(conn: &mut AsyncPgConnection, lease: &Lease) -> QueryResult<bool> {
    let held: Option<IdRow> = diesel::sql_query(
        "SELECT id FROM idempotency_keys \
         WHERE id = $1 AND lease_token = $2 AND status = 'processing' FOR UPDATE",
    )
    .bind::<BigInt, _>(lease.record_id)
    .bind::<Text, _>(&lease.token)
    .committed_result(conn)
    .await
    .optional()?;
    Ok(held.is_some())
}

/// Finishes the record with its response if `lease` still holds it (compare-and-set on the
/// token); returns the exact text replays will send, or `None` when the lease was lost. The
/// record expires its ttl (the span it was claimed with) after it finished, not after it was
/// claimed: one that stayed processing through a long provider outage must not be cleaned the
/// moment it finishes, or the client's retry would be a new request and refund again.
pub async fn finish(
    conn: &mut AsyncPgConnection,
    lease: &Lease,
    status: RecordStatus,
    http_status: u16,
    body: &serde_json::Value,
) -> QueryResult<Option<StoredResponse>> {
    let stored: Option<TextRow> = diesel::sql_query(
        "UPDATE idempotency_keys \
         SET status = $3, response_status = $4, response_body = $5, \
             locked_until = NULL, lease_token = NULL, \
             expires_at = now() + (expires_at - created_at) \
         WHERE id = $1 AND lease_token = $2 AND status = 'processing' \
         RETURNING response_body::TEXT AS text",
    )
    .bind::<BigInt, _>(lease.record_id)
    .bind::<Text, _>(&lease.token)
    .bind::<Text, _>(status.as_str())
    .bind::<Int4, _>(i32::from(http_status))
    .bind::<Jsonb, _>(body)
    .committed_result(conn)
    .await
    .optional()?;
    Ok(stored.map(|row| StoredResponse {
        status: http_status,
        body: row.text,
    }))
}

/// Gives the lease up at once (the work failed transiently): the record stays processing,
/// and the next request with its key, or the recoverer, may take it over without waiting.
pub async fn release(conn: &mut AsyncPgConnection, lease: &Lease) -> QueryResult<bool> {
    let released = diesel::sql_query(
        "UPDATE idempotency_keys SET locked_until = NULL, lease_token = NULL \
         WHERE id = $1 AND lease_token = $2 AND status = 'processing'",
    )
    .bind::<BigInt, _>(lease.record_id)
    .bind::<Text, _>(&lease.token)
    .execute(conn)
    .await?;
    Ok(released == 1)
}

fn new_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn corrupt(what: &'static str) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_attempt_gets_a_token_of_its_own() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
