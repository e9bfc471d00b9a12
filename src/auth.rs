//! Bearer authentication: API tokens for merchants (only their SHA-256 is stored) and the
//! admin token (compared in constant time).

use actix_web::http::header::{AUTHORIZATION, HeaderMap};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::schema::api_tokens;
use crate::secret::Secret;

const TOKEN_PREFIX: &str = "cgw_";

/// The token of an `Authorization: Bearer <token>` header, if well-formed.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Mints a token for `user_id`, stores its hash, and returns the token (shown once).
pub async fn issue_token(conn: &mut AsyncPgConnection, user_id: i64) -> QueryResult<String> {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    diesel::insert_into(api_tokens::table)
        .values((
            api_tokens::user_id.eq(user_id),
            api_tokens::token_sha256.eq(token_hash(&token)),
        ))
        .execute(conn)
        .await?;
    Ok(token)
}

/// [`issue_token`] by a person (`token issue`), with its audit row in the same transaction:
/// whoever minted a merchant's key is on record, the key itself never is.
pub async fn issue_token_audited(
    conn: &mut AsyncPgConnection,
    user_id: i64,
    context: &crate::access::audit::Context,
) -> QueryResult<String> {
    use crate::access::audit::{self, Action, Entry};
    conn.transaction(async |conn| {
        let token = issue_token(conn, user_id).await?;
        let entry = Entry::new(
            Action::TokenIssue,
            Some(format!("merchant:{user_id}")),
            "issued",
        )
        .with_changes(serde_json::json!({ "user_id": user_id }));
        audit::record(conn, context, entry).await?;
        Ok(token)
    })
    .await
}

/// The user a token belongs to, or `None` for an unknown token.
pub async fn authenticate(conn: &mut AsyncPgConnection, token: &str) -> QueryResult<Option<i64>> {
    api_tokens::table
        .filter(api_tokens::token_sha256.eq(token_hash(token)))
        .select(api_tokens::user_id)
        .first(conn)
        .await
        .optional()
}

/// True when `given` is the admin token. Both sides are hashed first so the comparison
/// takes the same time whatever their lengths.
pub fn is_admin(given: Option<&str>, expected: Option<&Secret>) -> bool {
    match (given, expected) {
        (Some(given), Some(expected)) => {
            let a = Sha256::digest(given.as_bytes());
            let b = Sha256::digest(expected.expose().as_bytes());
            a.as_slice().ct_eq(b.as_slice()).into()
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::HeaderValue;

    use super::*;

    #[test]
    fn a_bearer_header_yields_its_token() {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer cgw_abc"));
        assert_eq!(bearer_token(&headers), Some("cgw_abc"));
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic dXNlcg=="));
        assert_eq!(bearer_token(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer_token(&headers), None);
    }

    #[test]
    fn the_admin_token_must_match_exactly() {
        let expected = Secret::new("admin-secret");
        assert!(is_admin(Some("admin-secret"), Some(&expected)));
        assert!(!is_admin(Some("admin-secre"), Some(&expected)));
        assert!(!is_admin(None, Some(&expected)));
        assert!(!is_admin(Some("admin-secret"), None));
    }
}
