//! Console sessions, kept server-side: signing in with an operator key (or the `[admin]
//! token`) mints a random session id, sent only as an HttpOnly, SameSite=Strict cookie (Secure
//! as `[console] secure_cookie` says: under the gateway's own TLS, or when the proxy says the
//! request was HTTPS); the store keeps its SHA-256, expiry, whose key it was, and the token its
//! forms must carry (a second guard against cross-site posts, beside SameSite), so signing out
//! really ends it. The key itself is not kept: each request re-reads its operator's row, so a
//! revocation ends the session at its next request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::config::console::SecureCookie;

pub const COOKIE: &str = "cg_console";
/// The sign-in form's cookie: the token its form carries must match it, so a form posted from
/// another site (which can neither read it nor, SameSite=Strict, send it) signs nobody in.
pub const LOGIN_COOKIE: &str = "cg_login";
/// How long a session lasts after sign-in.
pub const LIFETIME_HOURS: i64 = 8;
/// At most this many live sessions; signing in beyond it ends the oldest session of the owner
/// that holds the most, so nobody's sign-ins can end another person's session.
const MAX_SESSIONS: usize = 1024;
/// At most this many live sessions per key; its next sign-in ends its own oldest.
const MAX_SESSIONS_PER_OWNER: usize = 16;

/// Whose key opened a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The `[admin] token`.
    Bootstrap,
    /// The operator key of this row.
    Operator(i64),
}

/// A live session, as a request finds it.
#[derive(Debug, Clone)]
pub struct Live {
    pub owner: Owner,
    /// What its forms carry in their `csrf` field.
    pub csrf: String,
}

#[derive(Debug, Clone)]
struct Stored {
    expires: DateTime<Utc>,
    live: Live,
}

/// The live sessions of this process (shared by its workers).
#[derive(Clone)]
pub struct Sessions {
    by_hash: Arc<Mutex<HashMap<[u8; 32], Stored>>>,
    /// When cookies carry `Secure`.
    secure: SecureCookie,
}

fn hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn random_text() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

impl Sessions {
    pub fn new(secure: SecureCookie) -> Self {
        Self {
            by_hash: Arc::default(),
            secure,
        }
    }

    /// A new session of `owner`, as the cookie that carries it; `https`: the request came
    /// over HTTPS.
    pub fn start(&self, now: DateTime<Utc>, https: bool, owner: Owner) -> Cookie<'static> {
        let id = random_text();
        let stored = Stored {
            expires: now + Duration::hours(LIFETIME_HOURS),
            live: Live {
                owner,
                csrf: random_text(),
            },
        };
        if let Ok(mut sessions) = self.by_hash.lock() {
            sessions.retain(|_, s| s.expires > now);
            let own = sessions.values().filter(|s| s.live.owner == owner).count();
            // One key's sign-ins end its own sessions first, and a full store ends a session of
            // whoever holds the most: a flood of one viewer's sign-ins never ends an admin's.
            let evict = if own >= MAX_SESSIONS_PER_OWNER {
                Some(owner)
            } else if sessions.len() >= MAX_SESSIONS {
                let mut counts: HashMap<Owner, usize> = HashMap::new();
                for s in sessions.values() {
                    *counts.entry(s.live.owner).or_default() += 1;
                }
                counts.into_iter().max_by_key(|(_, n)| *n).map(|(o, _)| o)
            } else {
                None
            };
            if let Some(evicted) = evict
                && let Some(oldest) = sessions
                    .iter()
                    .filter(|(_, s)| s.live.owner == evicted)
                    .min_by_key(|(_, s)| s.expires)
                    .map(|(k, _)| *k)
            {
                sessions.remove(&oldest);
            }
            sessions.insert(hash(&id), stored);
        }
        self.cookie(id, CookieDuration::hours(LIFETIME_HOURS), https)
    }

    /// The session `id`, while it lives.
    pub fn find(&self, id: &str, now: DateTime<Utc>) -> Option<Live> {
        self.by_hash
            .lock()
            .ok()
            .and_then(|sessions| sessions.get(&hash(id)).cloned())
            .filter(|s| s.expires > now)
            .map(|s| s.live)
    }

    /// Ends every session of operator `id` (its key was found revoked or expired).
    pub fn end_all_of(&self, owner: Owner) {
        if let Ok(mut sessions) = self.by_hash.lock() {
            sessions.retain(|_, s| s.live.owner != owner);
        }
    }

    /// Ends the session `id` (if any); the cookie that clears it in the browser.
    pub fn end(&self, id: Option<&str>, https: bool) -> Cookie<'static> {
        if let (Some(id), Ok(mut sessions)) = (id, self.by_hash.lock()) {
            sessions.remove(&hash(id));
        }
        self.cookie(String::new(), CookieDuration::ZERO, https)
    }

    /// A new token for the sign-in form, and the cookie that carries the same token.
    pub fn login_form(&self, https: bool) -> (String, Cookie<'static>) {
        let token = random_text();
        let cookie = Cookie::build(LOGIN_COOKIE, token.clone())
            .path("/console/login")
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure.applies(https))
            .max_age(CookieDuration::hours(1))
            .finish();
        (token, cookie)
    }

    fn cookie(&self, value: String, max_age: CookieDuration, https: bool) -> Cookie<'static> {
        Cookie::build(COOKIE, value)
            .path("/console")
            .http_only(true)
            .same_site(SameSite::Strict)
            .secure(self.secure.applies(https))
            .max_age(max_age)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_lives_until_it_expires_or_ends() {
        let sessions = Sessions::new(SecureCookie::WhenHttps);
        let now = Utc::now();
        let cookie = sessions.start(now, false, Owner::Operator(3));
        let live = sessions.find(cookie.value(), now).unwrap();
        assert_eq!(live.owner, Owner::Operator(3));
        assert_eq!(live.csrf.len(), 43);
        assert!(
            sessions
                .find(cookie.value(), now + Duration::hours(LIFETIME_HOURS))
                .is_none()
        );
        assert!(sessions.find("guessed", now).is_none());
        sessions.end(Some(cookie.value()), false);
        assert!(sessions.find(cookie.value(), now).is_none());
    }

    #[test]
    fn a_flood_of_one_operators_sign_ins_never_ends_another_operators_session() {
        let sessions = Sessions::new(SecureCookie::WhenHttps);
        let now = Utc::now();
        let admin = sessions.start(now, false, Owner::Operator(1));
        let bootstrap = sessions.start(now, false, Owner::Bootstrap);
        for i in 0..2 * MAX_SESSIONS as i64 {
            sessions.start(now + Duration::milliseconds(i), false, Owner::Operator(2));
        }
        assert!(
            sessions.find(admin.value(), now).is_some(),
            "another operator's session lives on"
        );
        assert!(sessions.find(bootstrap.value(), now).is_some());
    }

    #[test]
    fn ending_an_operators_sessions_leaves_the_others() {
        let sessions = Sessions::new(SecureCookie::WhenHttps);
        let now = Utc::now();
        let a = sessions.start(now, false, Owner::Operator(1));
        let b = sessions.start(now, false, Owner::Operator(2));
        let c = sessions.start(now, false, Owner::Bootstrap);
        sessions.end_all_of(Owner::Operator(1));
        assert!(sessions.find(a.value(), now).is_none());
        assert!(sessions.find(b.value(), now).is_some());
        assert!(sessions.find(c.value(), now).is_some());
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_behind_tls() {
        let cookie = Sessions::new(SecureCookie::Always).start(Utc::now(), false, Owner::Bootstrap);
        assert_eq!(cookie.http_only(), Some(true));
        assert_eq!(cookie.same_site(), Some(SameSite::Strict));
        assert_eq!(cookie.secure(), Some(true));
        let by_request = Sessions::new(SecureCookie::WhenHttps);
        assert_eq!(
            by_request
                .start(Utc::now(), false, Owner::Bootstrap)
                .secure(),
            Some(false)
        );
        assert_eq!(
            by_request
                .start(Utc::now(), true, Owner::Bootstrap)
                .secure(),
            Some(true)
        );
        assert_eq!(
            Sessions::new(SecureCookie::Never).end(None, true).secure(),
            Some(false)
        );
    }
}
