//! One body per transmission: for providers whose signature binds the body only weakly
//! (PayPal's covers a CRC-32 of it, and anyone can write another body with the same CRC-32),
//! the first verified body under a transmission id is held to that id, like a body to its
//! idempotency key. A redelivery of the same body passes; another body under the id is refused
//! as a forgery (401, nothing else written) and counted on the transmission's row, which
//! `/admin/attention` lists. A row lives while its transmission may still be delivered
//! (`valid_until`) and the expiry pass deletes it after that (a row that saw a forgery 30 days
//! later), so the table holds one retry window of one provider's transmissions.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Int4, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::record::Fingerprint;

/// A verified delivery's transmission, to hold to its body.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub transmission_id: &'a str,
    /// The event id the body names.
    pub event_id: &'a str,
    pub body: &'a [u8],
    pub valid_until: DateTime<Utc>,
}

/// What binding a transmission to its body found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The transmission's first verified body: now bound to it.
    First,
    /// The body it was bound to, again (a redelivery).
    Again,
    /// Another body: refused, and counted on the transmission's row.
    Reused,
}

/// Inserts the binding, or finds the one there. Another body is counted on the existing row in
/// the same statement (the row is locked for it), so a concurrent first delivery and forgery
/// are decided one after the other: whichever commits first holds the id.
const BIND_SQL: &str = "INSERT INTO provider_transmissions AS t \
         (provider, transmission_id, merchant_id, body_sha256, event_id, valid_until) \
     VALUES ($1, $2, $3, $4, $5, $6) \
     ON CONFLICT (provider, transmission_id) DO UPDATE \
     SET conflicts = t.conflicts + 1, last_conflict_at = now(), \
         last_conflict_sha256 = EXCLUDED.body_sha256, last_conflict_event_id = EXCLUDED.event_id \
     WHERE t.body_sha256 <> EXCLUDED.body_sha256 \
     RETURNING t.conflicts = 0 AS first";

#[derive(QueryableByName)]
struct BindRow {
    #[diesel(sql_type = Bool)]
    first: bool,
}

/// Holds `binding`'s transmission to its body (one statement, committed on its own).
pub async fn bind(
    conn: &mut AsyncPgConnection,
    binding: Binding<'_>,
) -> diesel::QueryResult<Bound> {
    let fingerprint = Fingerprint::of(binding.body);
    let rows: Vec<BindRow> = diesel::sql_query(BIND_SQL)
        .bind::<Text, _>(binding.provider)
        .bind::<Text, _>(binding.transmission_id)
        .bind::<BigInt, _>(binding.merchant_id)
        .bind::<Text, _>(fingerprint.as_str())
        .bind::<Text, _>(binding.event_id)
        .bind::<Timestamptz, _>(binding.valid_until)
        .load(conn)
        .await?;
    // No row: the conflict's update was skipped by its WHERE, so the bound body is this one.
    Ok(match rows.as_slice().first() {
        None => Bound::Again,
        Some(BindRow { first: true }) => Bound::First,
        Some(BindRow { first: false }) => Bound::Reused,
    })
}

/// How long a row that saw a forgery stays after its transmission expired: long enough for
/// finance to find it in `/admin/attention`.
pub const REUSED_KEPT_DAYS: i32 = 30;

/// One batch of the expiry pass: rows whose transmission can no longer be delivered (and those
/// that saw a forgery, [`REUSED_KEPT_DAYS`] later), oldest first.
const DELETE_BATCH_SQL: &str = "DELETE FROM provider_transmissions WHERE (provider, transmission_id) IN (\
     SELECT provider, transmission_id FROM provider_transmissions \
     WHERE valid_until < now() \
       AND (conflicts = 0 OR valid_until < now() - make_interval(days => $2)) \
     ORDER BY valid_until LIMIT $1 FOR UPDATE SKIP LOCKED)";

/// Deletes expired bindings in batches of `batch` until one comes back short; how many.
pub async fn delete_expired(conn: &mut AsyncPgConnection, batch: i64) -> diesel::QueryResult<u64> {
    let mut total = 0u64;
    loop {
        let deleted = diesel::sql_query(DELETE_BATCH_SQL)
            .bind::<BigInt, _>(batch)
            .bind::<Int4, _>(REUSED_KEPT_DAYS)
            .execute(conn)
            .await? as u64;
        total += deleted;
        if deleted < u64::try_from(batch).unwrap_or(u64::MAX) {
            return Ok(total);
        }
    }
}

/// A transmission that was delivered with another body than its own, as `/admin/attention`
/// lists it: the event its signature was made for, and the latest other body (by its event id
/// and hash) refused under it.
#[derive(Debug, Clone, serde::Serialize, QueryableByName, utoipa::ToSchema)]
pub struct ReusedTransmission {
    #[diesel(sql_type = BigInt)]
    pub merchant_id: i64,
    #[diesel(sql_type = Text)]
    pub provider: String,
    #[diesel(sql_type = Text)]
    pub transmission_id: String,
    /// The event of the body the transmission was signed for (its first verified body).
    #[diesel(sql_type = Text)]
    pub event_id: String,
    #[diesel(sql_type = Timestamptz)]
    #[schema(value_type = String)]
    pub first_seen_at: DateTime<Utc>,
    /// Other bodies refused under this transmission.
    #[diesel(sql_type = Int4)]
    pub conflicts: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    #[schema(value_type = Option<String>)]
    pub last_conflict_at: Option<DateTime<Utc>>,
    /// The event id the latest refused body named, and its SHA-256 (hex).
    #[diesel(sql_type = Nullable<Text>)]
    pub last_conflict_event_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub last_conflict_sha256: Option<String>,
}

/// The newest `limit` transmissions that saw another body, from their partial index.
const REUSED_SQL: &str = "SELECT merchant_id, provider, transmission_id, event_id, first_seen_at, \
            conflicts, last_conflict_at, last_conflict_event_id, last_conflict_sha256 \
     FROM provider_transmissions WHERE conflicts > 0 \
     ORDER BY last_conflict_at DESC LIMIT $1";

impl ReusedTransmission {
    pub async fn newest(
        conn: &mut AsyncPgConnection,
        limit: i64,
    ) -> diesel::QueryResult<Vec<Self>> {
        diesel::sql_query(REUSED_SQL)
            .bind::<BigInt, _>(limit)
            .load(conn)
            .await
    }
}
