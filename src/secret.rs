//! Secrets as configured: a value `Debug` never prints, and the keys they stand for. Below
//! both the configuration (which validates them once) and the signature schemes (which key
//! their MACs with them), so neither imports the other for it.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// A secret value: never printed by `Debug`, so it cannot leak through a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The HMAC key of a Standard Webhooks secret: the base64 decoding after its `whsec_`
    /// prefix (optional, as in the reference libraries); `None` when it does not decode.
    pub fn standard_webhooks_key(&self) -> Option<Vec<u8>> {
        let encoded = self.0.strip_prefix("whsec_").unwrap_or(&self.0);
        STANDARD.decode(encoded).ok().filter(|key| !key.is_empty())
    }
}

/// `url` as it may be printed: the password of its `user:password@` (which reqwest still sends,
/// as basic auth) replaced by `***`. Text that is not a URL is not repeated at all.
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                // Fails only for URLs that cannot have userinfo, which have no password either.
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "(not a URL)".to_owned(),
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whsec_secret_decodes_to_its_key() {
        let secret = Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        assert_eq!(secret.standard_webhooks_key().map(|k| k.len()), Some(24));
        assert_eq!(Secret::new("whsec_!!!").standard_webhooks_key(), None);
    }

    #[test]
    fn a_shown_url_keeps_everything_but_the_password() {
        assert_eq!(
            shown_url("http://ops:p%2Fw%3F@127.0.0.1:8080/v1/callbacks/acme"),
            "http://ops:***@127.0.0.1:8080/v1/callbacks/acme"
        );
        assert_eq!(
            shown_url("https://gw.example/v1/callbacks/acme"),
            "https://gw.example/v1/callbacks/acme"
        );
        // What the URL parser (and so reqwest) cannot read is not repeated at all.
        assert_eq!(shown_url("http://ops:pw/x@127.0.0.1/"), "(not a URL)");
    }

    #[test]
    fn debug_never_shows_the_value() {
        assert_eq!(format!("{:?}", Secret::new("s3cret")), "Secret(<redacted>)");
    }
}
