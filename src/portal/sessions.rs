//! Portal links and sessions (`portal_links`, `portal_sessions`, migration 000074). A link is
//! 32 random bytes, shown once, kept as its SHA-256, opened at most once before it expires; its
//! opening makes a session (another 32 random bytes, kept hashed) that lasts
//! [`SESSION_MINUTES`] and carries the token its forms must send back. Both live in the
//! database, so a link made through one gateway opens through any other, and a session works
//! behind any of them.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Duration, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::db::one_row::CommittedResult;
use crate::schema::{portal_links, portal_sessions};

/// How long a session lasts after its link was opened.
pub const SESSION_MINUTES: i64 = 60;
/// The cookie of a portal session (Path=/portal).
pub const COOKIE: &str = "cg_portal";

/// A new link, as its asker gets it (the token is not kept).
#[derive(Debug, Clone)]
pub struct Link {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// A session a link opened, for the browser's cookie.
#[derive(Debug, Clone)]
pub struct Opened {
    pub token: String,
    pub merchant_id: i64,
    /// Who asked for the link.
    pub created_by: String,
    pub expires_at: DateTime<Utc>,
}

/// A live session, as a request finds it.
#[derive(Debug, Clone, Queryable)]
pub struct Live {
    pub merchant_id: i64,
    /// What its forms carry in their `csrf` field.
    pub csrf: String,
    /// Who asked for its link (`merchant:<id>`, or an operator's name).
    pub created_by: String,
}

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

fn hash(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// Makes a link to `merchant_id`'s portal, valid for `minutes`, asked for by `created_by`; the
/// expired links and sessions of every merchant go first (a bounded batch).
pub async fn create_link(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    created_by: &str,
    minutes: i64,
) -> QueryResult<Link> {
    let token = random_token();
    let expires_at = Utc::now() + Duration::minutes(minutes);
    conn.transaction(async |conn| {
        delete_expired(conn).await?;
        diesel::insert_into(portal_links::table)
            .values((
                portal_links::link_hash.eq(hash(&token)),
                portal_links::merchant_id.eq(merchant_id),
                portal_links::created_by.eq(created_by),
                portal_links::expires_at.eq(expires_at),
            ))
            .execute(conn)
            .await?;
        Ok(Link {
            token: token.clone(),
            expires_at,
        })
    })
    .await
}

/// Opens link `token`: once, before it expires. The link is marked opened and a session made
/// in one transaction, so two browsers racing with one link get one session.
pub async fn open_link(conn: &mut AsyncPgConnection, token: &str) -> QueryResult<Option<Opened>> {
    let session = random_token();
    let csrf = random_token();
    let expires_at = Utc::now() + Duration::minutes(SESSION_MINUTES);
    conn.transaction(async |conn| {
        let link: Option<(i64, String)> = diesel::update(
            portal_links::table
                .filter(portal_links::link_hash.eq(hash(token)))
                .filter(portal_links::opened_at.is_null())
                .filter(portal_links::expires_at.gt(diesel::dsl::now)),
        )
        .set(portal_links::opened_at.eq(diesel::dsl::now))
        .returning((portal_links::merchant_id, portal_links::created_by))
        .committed_result(conn)
        .await
        .optional()?;
        let Some((merchant_id, created_by)) = link else {
            return Ok(None);
        };
        diesel::insert_into(portal_sessions::table)
            .values((
                portal_sessions::session_hash.eq(hash(&session)),
                portal_sessions::merchant_id.eq(merchant_id),
                portal_sessions::csrf.eq(&csrf),
                portal_sessions::created_by.eq(&created_by),
                portal_sessions::expires_at.eq(expires_at),
            ))
            .execute(conn)
            .await?;
        Ok(Some(Opened {
            token: session.clone(),
            merchant_id,
            created_by,
            expires_at,
        }))
    })
    .await
}

/// The live session of cookie `token`, if any (one primary-key lookup).
pub async fn find(conn: &mut AsyncPgConnection, token: &str) -> QueryResult<Option<Live>> {
    portal_sessions::table
        .filter(portal_sessions::session_hash.eq(hash(token)))
        .filter(portal_sessions::expires_at.gt(diesel::dsl::now))
        .select((
            portal_sessions::merchant_id,
            portal_sessions::csrf,
            portal_sessions::created_by,
        ))
        .first(conn)
        .await
        .optional()
}

/// Ends the session of cookie `token` (signing out).
pub async fn end(conn: &mut AsyncPgConnection, token: &str) -> QueryResult<()> {
    diesel::delete(portal_sessions::table.filter(portal_sessions::session_hash.eq(hash(token))))
        .execute(conn)
        .await?;
    Ok(())
}

/// Whether `merchant_id` is a merchant the gateway knows: it holds an API token. An operator's
/// typo makes no link to a portal nobody owns.
pub async fn known_merchant(conn: &mut AsyncPgConnection, merchant_id: i64) -> QueryResult<bool> {
    use crate::schema::api_tokens;
    diesel::select(diesel::dsl::exists(
        api_tokens::table.filter(api_tokens::user_id.eq(merchant_id)),
    ))
    .committed_result(conn)
    .await
}

/// At most this many expired links and as many sessions go per new link.
const EXPIRED_BATCH: i64 = 1000;

async fn delete_expired(conn: &mut AsyncPgConnection) -> QueryResult<()> {
    diesel::sql_query(
        "WITH links AS (DELETE FROM portal_links WHERE link_hash = ANY(ARRAY( \
           SELECT link_hash FROM portal_links WHERE expires_at < now() \
           ORDER BY expires_at LIMIT $1))), \
         sessions AS (DELETE FROM portal_sessions WHERE session_hash = ANY(ARRAY( \
           SELECT session_hash FROM portal_sessions WHERE expires_at < now() \
           ORDER BY expires_at LIMIT $1))) \
         SELECT 1",
    )
    .bind::<diesel::sql_types::BigInt, _>(EXPIRED_BATCH)
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_32_random_bytes_and_only_its_hash_is_kept() {
        let (a, b) = (random_token(), random_token());
        assert_ne!(a, b);
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 32);
        assert_eq!(hash(&a).len(), 32);
        assert_ne!(hash(&a), a.as_bytes());
    }
}
