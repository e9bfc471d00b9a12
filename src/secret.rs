//! Secrets as configured: a value `Debug` never prints, and the keys they stand for. Below
//! both the configuration (which validates them once) and the signature schemes (which key
//! their MACs with them), so neither imports the other for it.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The fewest key bytes a signing secret or the admin token may have.
pub const MIN_SECRET_BYTES: usize = 16;

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
    fn debug_never_shows_the_value() {
        assert_eq!(format!("{:?}", Secret::new("s3cret")), "Secret(<redacted>)");
    }
}
