//! Console sessions, kept server-side: signing in with the admin token mints a random session
//! id, sent only as an HttpOnly, SameSite=Strict cookie (Secure as `[console] secure_cookie`
//! says: under the gateway's own TLS, or when the proxy says the request was HTTPS); the store
//! keeps its SHA-256 and expiry, so signing out really ends it.

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
/// How long a session lasts after sign-in.
pub const LIFETIME_HOURS: i64 = 8;
/// At most this many live sessions; signing in beyond it ends the oldest.
const MAX_SESSIONS: usize = 1024;

/// The live sessions of this process (shared by its workers).
#[derive(Clone)]
pub struct Sessions {
    by_hash: Arc<Mutex<HashMap<[u8; 32], DateTime<Utc>>>>,
    /// When cookies carry `Secure`.
    secure: SecureCookie,
}

fn hash(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

impl Sessions {
    pub fn new(secure: SecureCookie) -> Self {
        Self {
            by_hash: Arc::default(),
            secure,
        }
    }

    /// A new session, as the cookie that carries it; `https`: the request came over HTTPS.
    pub fn start(&self, now: DateTime<Utc>, https: bool) -> Cookie<'static> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let id = URL_SAFE_NO_PAD.encode(bytes);
        if let Ok(mut sessions) = self.by_hash.lock() {
            sessions.retain(|_, expires| *expires > now);
            if sessions.len() >= MAX_SESSIONS
                && let Some(oldest) = sessions.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k)
            {
                sessions.remove(&oldest);
            }
            sessions.insert(hash(&id), now + Duration::hours(LIFETIME_HOURS));
        }
        self.cookie(id, CookieDuration::hours(LIFETIME_HOURS), https)
    }

    /// True when `id` is a live session.
    pub fn is_live(&self, id: &str, now: DateTime<Utc>) -> bool {
        self.by_hash
            .lock()
            .ok()
            .and_then(|sessions| sessions.get(&hash(id)).copied())
            .is_some_and(|expires| expires > now)
    }

    /// Ends the session `id` (if any); the cookie that clears it in the browser.
    pub fn end(&self, id: Option<&str>, https: bool) -> Cookie<'static> {
        if let (Some(id), Ok(mut sessions)) = (id, self.by_hash.lock()) {
            sessions.remove(&hash(id));
        }
        self.cookie(String::new(), CookieDuration::ZERO, https)
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
        let cookie = sessions.start(now, false);
        assert!(sessions.is_live(cookie.value(), now));
        assert!(!sessions.is_live(cookie.value(), now + Duration::hours(LIFETIME_HOURS)));
        assert!(!sessions.is_live("guessed", now));
        sessions.end(Some(cookie.value()), false);
        assert!(!sessions.is_live(cookie.value(), now));
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_behind_tls() {
        let cookie = Sessions::new(SecureCookie::Always).start(Utc::now(), false);
        assert_eq!(cookie.http_only(), Some(true));
        assert_eq!(cookie.same_site(), Some(SameSite::Strict));
        assert_eq!(cookie.secure(), Some(true));
        let by_request = Sessions::new(SecureCookie::WhenHttps);
        assert_eq!(by_request.start(Utc::now(), false).secure(), Some(false));
        assert_eq!(by_request.start(Utc::now(), true).secure(), Some(true));
        assert_eq!(
            Sessions::new(SecureCookie::Never).end(None, true).secure(),
            Some(false)
        );
    }
}
