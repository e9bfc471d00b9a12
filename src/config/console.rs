//! `[console]`: when the console's session cookie is `Secure`.

use serde::Deserialize;

/// The web console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// When the session cookie carries `Secure`.
    pub secure_cookie: SecureCookie,
}

/// When the console's session cookie carries `Secure` (a browser then sends it over HTTPS only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecureCookie {
    /// Always: the gateway serves TLS itself, or `[console] secure_cookie = true`.
    Always,
    /// Never: `[console] secure_cookie = false` (plain-HTTP setups, e.g. a laptop).
    Never,
    /// When the request arrived over HTTPS, as the TLS-terminating proxy says
    /// (`X-Forwarded-Proto: https` or `Forwarded: proto=https`): the default without TLS.
    WhenHttps,
}

impl SecureCookie {
    /// `[console] secure_cookie` when set; otherwise always under the gateway's own TLS, and
    /// per request behind a proxy.
    pub fn of(setting: Option<bool>, serves_tls: bool) -> Self {
        match (setting, serves_tls) {
            (Some(true), _) | (None, true) => SecureCookie::Always,
            (Some(false), _) => SecureCookie::Never,
            (None, false) => SecureCookie::WhenHttps,
        }
    }

    /// Whether a cookie set in answer to a request (`https`: it came over HTTPS) is `Secure`.
    pub fn applies(self, https: bool) -> bool {
        match self {
            SecureCookie::Always => true,
            SecureCookie::Never => false,
            SecureCookie::WhenHttps => https,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConsole {
    secure_cookie: Option<bool>,
}

/// `[console]`; `serves_tls`: the gateway serves HTTPS itself.
pub(super) fn validate(raw: RawConsole, serves_tls: bool) -> ConsoleSettings {
    ConsoleSettings {
        secure_cookie: SecureCookie::of(raw.secure_cookie, serves_tls),
    }
}
