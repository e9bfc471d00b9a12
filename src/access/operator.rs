//! Operator keys: one per person, one role each. `operator add` prints a key once and stores
//! only its SHA-256; `operator revoke` ends it (at its next request: nothing caches a key);
//! `--expires-in-days` ends it by itself. A name belongs to one live key at a time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Duration, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rand::RngCore;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::Actor;
use super::audit::{self, Action, Entry};
use super::role::Role;
use crate::db::one_row::CommittedResult;
use crate::schema::operators;

/// Every operator key starts with this, so a leaked one is recognisable (secret scanners) and
/// never mistaken for a merchant's `cgw_` token.
pub const KEY_PREFIX: &str = "cgo_";
/// How often a key's `last_used_at` is written at most: a busy key costs one write a minute.
const LAST_USE_RESOLUTION_SECS: i64 = 60;
/// The longest life `--expires-in-days` gives a key (ten years).
pub const MAX_EXPIRES_IN_DAYS: u32 = 3650;

/// A name as `operator add` takes it: 1 to 64 letters, digits, `.`, `_`, `@` or `-`, starting
/// with a letter or digit, and neither `bootstrap` (the break-glass token's actor) nor `unknown`
/// (the actor of a refused sign-in), so the audit log's actor always says who acted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorName(String);

impl OperatorName {
    pub fn parse(text: &str) -> Result<Self, AddError> {
        let mut chars = text.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
        let rest_ok =
            chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-'));
        if !first_ok || !rest_ok || text.len() > 64 {
            return Err(AddError::InvalidName);
        }
        if text == super::BOOTSTRAP || text.eq_ignore_ascii_case(super::audit::NOBODY) {
            return Err(AddError::ReservedName);
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AddError {
    #[error(
        "a name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
    )]
    InvalidName,
    #[error(
        "'bootstrap' (the [admin] token's actor) and 'unknown' (a refused sign-in's) are reserved; choose another name"
    )]
    ReservedName,
    #[error("--expires-in-days must be 1 to {MAX_EXPIRES_IN_DAYS}")]
    InvalidExpiry,
    #[error("an operator named {0} already has a live key; revoke it first")]
    NameTaken(String),
    #[error(transparent)]
    Database(#[from] diesel::result::Error),
}

/// A key's row as `operator list` shows it (never the key, nor its hash).
#[derive(Debug, Clone, Queryable, Selectable, serde::Serialize)]
#[diesel(table_name = operators)]
pub struct OperatorRow {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// Why a key does not open anything; each is 401 `unauthorized` to the caller, and only the
/// log tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    Unknown,
    Revoked,
    Expired,
}

impl Denied {
    pub fn as_str(self) -> &'static str {
        match self {
            Denied::Unknown => "unknown",
            Denied::Revoked => "revoked",
            Denied::Expired => "expired",
        }
    }
}

impl OperatorRow {
    /// The actor this key stands for at `now`, or why it does not.
    pub fn standing(&self, now: DateTime<Utc>) -> Result<Actor, Denied> {
        if self.revoked_at.is_some() {
            return Err(Denied::Revoked);
        }
        if self.expires_at.is_some_and(|at| at <= now) {
            return Err(Denied::Expired);
        }
        let role = Role::parse(&self.role).ok_or(Denied::Unknown)?;
        Ok(Actor {
            name: self.name.clone(),
            role,
            operator_id: Some(self.id),
        })
    }

    /// True when `last_used_at` is old enough to be written again.
    fn last_use_stale(&self, now: DateTime<Utc>) -> bool {
        self.last_used_at
            .is_none_or(|at| now - at >= Duration::seconds(LAST_USE_RESOLUTION_SECS))
    }
}

fn key_hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

fn mint_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// Adds an operator and returns its key (shown once); the audit row commits with it.
pub async fn add(
    conn: &mut AsyncPgConnection,
    context: &audit::Context,
    name: &OperatorName,
    role: Role,
    expires_in_days: Option<u32>,
) -> Result<String, AddError> {
    if expires_in_days.is_some_and(|days| days == 0 || days > MAX_EXPIRES_IN_DAYS) {
        return Err(AddError::InvalidExpiry);
    }
    let key = mint_key();
    let hash = key_hash(&key);
    let expires_at = expires_in_days.map(|days| Utc::now() + Duration::days(i64::from(days)));
    let added = conn
        .transaction(async |conn| {
            let id: i64 = diesel::insert_into(operators::table)
                .values((
                    operators::name.eq(name.as_str()),
                    operators::role.eq(role.as_str()),
                    operators::key_sha256.eq(&hash),
                    operators::expires_at.eq(expires_at),
                ))
                .returning(operators::id)
                .committed_result(conn)
                .await?;
            let entry = Entry::new(
                Action::OperatorAdd,
                Some(format!("operator:{}", name.as_str())),
                "live",
            )
            .with_changes(json!({
                "operator_id": id,
                "role": role.as_str(),
                "expires_at": expires_at,
            }));
            audit::record(conn, context, entry).await?;
            Ok::<_, diesel::result::Error>(())
        })
        .await;
    match added {
        Ok(()) => Ok(key),
        Err(diesel::result::Error::DatabaseError(
            diesel::result::DatabaseErrorKind::UniqueViolation,
            info,
        )) if info.constraint_name() == Some("uq_operators_live_name") => {
            Err(AddError::NameTaken(name.as_str().to_owned()))
        }
        Err(error) => Err(error.into()),
    }
}

/// Revokes the live key named `name`; false when there is none. The audit row commits with it.
pub async fn revoke(
    conn: &mut AsyncPgConnection,
    context: &audit::Context,
    name: &str,
) -> QueryResult<bool> {
    conn.transaction(async |conn| {
        let revoked: Option<(i64, String)> = diesel::update(
            operators::table
                .filter(operators::name.eq(name))
                .filter(operators::revoked_at.is_null()),
        )
        .set(operators::revoked_at.eq(diesel::dsl::now))
        .returning((operators::id, operators::role))
        .committed_result(conn)
        .await
        .optional()?;
        let Some((id, role)) = revoked else {
            return Ok(false);
        };
        let entry = Entry::new(
            Action::OperatorRevoke,
            Some(format!("operator:{name}")),
            "revoked",
        )
        .with_changes(json!({"operator_id": id, "role": role}));
        audit::record(conn, context, entry).await?;
        Ok(true)
    })
    .await
}

/// Every key ever added, live ones first, then by name.
pub async fn list(conn: &mut AsyncPgConnection) -> QueryResult<Vec<OperatorRow>> {
    operators::table
        .select(OperatorRow::as_select())
        .order((
            operators::revoked_at.is_not_null(),
            operators::name,
            operators::id,
        ))
        .load(conn)
        .await
}

/// `operator list`'s table: one line a key, its state at `now` last.
pub fn table(rows: &[OperatorRow], now: DateTime<Utc>) -> String {
    let time = |t: Option<DateTime<Utc>>| {
        t.map_or_else(
            || "-".to_owned(),
            |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        )
    };
    let mut out = format!(
        "{:<24} {:<9} {:<20} {:<20} {:<20} {}\n",
        "NAME", "ROLE", "CREATED", "EXPIRES", "LAST USED", "STATE"
    );
    for row in rows {
        let state = match row.standing(now) {
            Ok(_) => "live",
            Err(denied) => denied.as_str(),
        };
        out.push_str(&format!(
            "{:<24} {:<9} {:<20} {:<20} {:<20} {}\n",
            row.name,
            row.role,
            time(Some(row.created_at)),
            time(row.expires_at),
            time(row.last_used_at),
            state
        ));
    }
    out
}

/// The actor a presented key stands for: one lookup of the key's unique index (and, at most
/// once a minute per key, a write of its last use).
pub async fn authenticate(
    conn: &mut AsyncPgConnection,
    key: &str,
    now: DateTime<Utc>,
) -> QueryResult<Result<Actor, Denied>> {
    if !key.starts_with(KEY_PREFIX) {
        return Ok(Err(Denied::Unknown));
    }
    let row: Option<OperatorRow> = operators::table
        .filter(operators::key_sha256.eq(key_hash(key)))
        .select(OperatorRow::as_select())
        .first(conn)
        .await
        .optional()?;
    standing_of(conn, row, now).await
}

/// The actor of operator `id` now (a console session's key, re-read on each request so a
/// revocation ends the session at once): one lookup of the primary key.
pub async fn current(
    conn: &mut AsyncPgConnection,
    id: i64,
    now: DateTime<Utc>,
) -> QueryResult<Result<Actor, Denied>> {
    let row: Option<OperatorRow> = operators::table
        .find(id)
        .select(OperatorRow::as_select())
        .first(conn)
        .await
        .optional()?;
    standing_of(conn, row, now).await
}

async fn standing_of(
    conn: &mut AsyncPgConnection,
    row: Option<OperatorRow>,
    now: DateTime<Utc>,
) -> QueryResult<Result<Actor, Denied>> {
    let Some(row) = row else {
        return Ok(Err(Denied::Unknown));
    };
    let standing = row.standing(now);
    if standing.is_ok() && row.last_use_stale(now) {
        diesel::update(operators::table.find(row.id))
            .set(operators::last_used_at.eq(diesel::dsl::now))
            .execute(conn)
            .await?;
    }
    Ok(standing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(revoked: bool, expires_in: Option<i64>) -> OperatorRow {
        let now = Utc::now();
        OperatorRow {
            id: 7,
            name: "alice".into(),
            role: "finance".into(),
            created_at: now,
            expires_at: expires_in.map(|s| now + Duration::seconds(s)),
            revoked_at: revoked.then_some(now),
            last_used_at: None,
        }
    }

    #[test]
    fn a_live_key_stands_for_its_operator_with_its_role() {
        let actor = row(false, Some(60)).standing(Utc::now()).unwrap();
        assert_eq!(actor.name, "alice");
        assert_eq!(actor.role, Role::Finance);
        assert_eq!(actor.operator_id, Some(7));
    }

    #[test]
    fn a_revoked_or_expired_key_stands_for_nobody() {
        assert_eq!(row(true, None).standing(Utc::now()), Err(Denied::Revoked));
        assert_eq!(
            row(false, Some(-1)).standing(Utc::now()),
            Err(Denied::Expired)
        );
    }

    #[test]
    fn names_are_short_plain_words_and_bootstrap_is_taken() {
        assert!(OperatorName::parse("alice").is_ok());
        assert!(OperatorName::parse("a.b_c-d@example.com").is_ok());
        for bad in [
            "",
            "-alice",
            "al ice",
            "alice\n",
            "cli:root",
            &"a".repeat(65),
        ] {
            assert!(
                matches!(OperatorName::parse(bad), Err(AddError::InvalidName)),
                "{bad:?}"
            );
        }
        assert!(matches!(
            OperatorName::parse("bootstrap"),
            Err(AddError::ReservedName)
        ));
    }

    #[test]
    fn a_minted_key_is_prefixed_and_only_its_hash_is_kept() {
        let key = mint_key();
        assert!(key.starts_with(KEY_PREFIX));
        assert_eq!(key.len(), KEY_PREFIX.len() + 43);
        assert_eq!(key_hash(&key).len(), 64);
        assert_ne!(mint_key(), key);
    }
}
