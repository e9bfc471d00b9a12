//! Plain HMAC senders: `X-Timestamp: <unix>` and `X-Signature: sha256=<hex>`, the HMAC-SHA256
//! of `{timestamp}.{body}` keyed with the secret's UTF-8 bytes; event id = body `id`. Its
//! payload is canonical or Stripe's (`payload`), read by those files.

use chrono::{DateTime, Utc};

use super::connector::{Connector, Naming, Signed, Unsignable, Verification, Verified};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError, parse_timestamp};

pub struct HmacSha256Scheme {
    keys: Keys,
}

impl HmacSha256Scheme {
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Self {
            keys: Keys::utf8(secrets.iter().map(Secret::expose), tolerance_secs),
        }
    }

    /// Verifies a delivery's headers over its raw body at unix time `now`.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let timestamp_text = headers
            .header("x-timestamp")
            .ok_or(SignatureError::MissingHeader("X-Timestamp"))?;
        let timestamp = parse_timestamp(timestamp_text, "X-Timestamp")?;
        let signature = headers
            .header("x-signature")
            .ok_or(SignatureError::MissingHeader("X-Signature"))?;
        let candidate = signature
            .strip_prefix("sha256=")
            .and_then(|hex_text| hex::decode(hex_text).ok())
            .ok_or(SignatureError::MalformedHeader("X-Signature"))?;
        let parts: [&[u8]; 3] = [timestamp_text.as_bytes(), b".", body];
        self.keys.check(&parts, timestamp, now, &[candidate])?;
        Ok(Verified::new(Some(timestamp), Naming::Body))
    }

    /// The headers that sign `body` with the first secret at `timestamp`.
    pub fn sign_headers(&self, body: &[u8], timestamp: i64) -> Vec<(String, String)> {
        let timestamp = timestamp.to_string();
        let parts: [&[u8]; 3] = [timestamp.as_bytes(), b".", body];
        let signature = hex::encode(self.keys.sign(&parts));
        vec![
            ("X-Timestamp".to_owned(), timestamp),
            ("X-Signature".to_owned(), format!("sha256={signature}")),
        ]
    }
}

impl Connector for HmacSha256Scheme {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(headers, body, now.timestamp()).into()
    }

    fn sign(&self, _event_id: &str, body: &[u8], timestamp: i64) -> Result<Signed, Unsignable> {
        Ok(Signed::headers(self.sign_headers(body, timestamp)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed independently: printf '1700000000.{"id":"evt_1"}' | openssl dgst -sha256 -hmac plain-secret
    const SECRET: &str = "plain-secret";
    const BODY: &str = r#"{"id":"evt_1"}"#;
    const SIGNATURE: &str = "b293b50a6b683a9cbc7932e6cab29e59d100b23e9d06a2c3faf35f8eed8e61f9";
    const T: i64 = 1_700_000_000;

    fn scheme() -> HmacSha256Scheme {
        HmacSha256Scheme::new(&[Secret::new(SECRET)], 300)
    }

    fn headers(timestamp: &str, signature: &str) -> Vec<(String, String)> {
        vec![
            ("X-Timestamp".into(), timestamp.into()),
            ("X-Signature".into(), signature.into()),
        ]
    }

    #[test]
    fn an_independently_computed_signature_verifies() {
        let h = headers("1700000000", &format!("sha256={SIGNATURE}"));
        assert!(scheme().check(&h, BODY.as_bytes(), T).is_ok());
    }

    #[test]
    fn signing_matches_an_independent_implementation() {
        let signed = scheme().sign_headers(BODY.as_bytes(), T);
        assert_eq!(signed[1].1, format!("sha256={SIGNATURE}"));
    }

    #[test]
    fn a_signature_without_its_prefix_or_with_bad_hex_is_malformed() {
        for sig in [SIGNATURE.to_owned(), "sha256=zz".to_owned()] {
            let h = headers("1700000000", &sig);
            assert_eq!(
                scheme().check(&h, BODY.as_bytes(), T),
                Err(SignatureError::MalformedHeader("X-Signature"))
            );
        }
    }

    #[test]
    fn the_timestamp_is_part_of_the_signed_content() {
        let h = headers("1700000001", &format!("sha256={SIGNATURE}"));
        assert_eq!(
            scheme().check(&h, BODY.as_bytes(), T),
            Err(SignatureError::NoMatch)
        );
    }
}
