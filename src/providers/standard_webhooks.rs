//! Standard Webhooks (Svix and others): `webhook-id`, `webhook-timestamp`, `webhook-signature`
//! (space-separated `v1,<base64>`), signed content `{id}.{timestamp}.{body}`, key = base64
//! decoding of the secret after its `whsec_` prefix; event id = `webhook-id`. Its payload is
//! canonical or Stripe's (`payload`), read by those files.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};

use super::connector::{Connector, Naming, Signed, Unsignable, Verification, Verified};
use crate::secret::Secret;
use crate::signature::scheme::{HeaderSource, Keys, SignatureError, parse_timestamp};
use crate::signature::standard_webhooks;

pub struct StandardWebhooks {
    keys: Keys,
}

impl StandardWebhooks {
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Self {
            keys: standard_webhooks::keys(secrets, tolerance_secs),
        }
    }

    /// Verifies a delivery's headers over its raw body at unix time `now`.
    pub fn check(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let id = headers
            .header("webhook-id")
            .ok_or(SignatureError::MissingHeader("webhook-id"))?;
        if id.is_empty() {
            return Err(SignatureError::MalformedHeader("webhook-id"));
        }
        let timestamp_text = headers
            .header("webhook-timestamp")
            .ok_or(SignatureError::MissingHeader("webhook-timestamp"))?;
        let timestamp = parse_timestamp(timestamp_text, "webhook-timestamp")?;
        let signatures = headers
            .header("webhook-signature")
            .ok_or(SignatureError::MissingHeader("webhook-signature"))?;

        // Versions other than v1 (e.g. asymmetric v1a) are skipped, not errors.
        let candidates: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|encoded| STANDARD.decode(encoded).ok())
            .collect();
        let parts = standard_webhooks::parts(id.as_bytes(), timestamp_text.as_bytes(), body);
        self.keys.check(&parts, timestamp, now, &candidates)?;
        Ok(Verified::new(
            Some(timestamp),
            Naming::Header(id.to_owned()),
        ))
    }

    /// The headers that sign `body` as event `event_id` with the first secret at `timestamp`.
    pub fn sign_headers(
        &self,
        event_id: &str,
        body: &[u8],
        timestamp: i64,
    ) -> Vec<(String, String)> {
        let first = Keys {
            keys: self.keys.keys.iter().take(1).cloned().collect(),
            tolerance_secs: 0,
        };
        standard_webhooks::sign_headers(&first, event_id, body, timestamp)
    }
}

impl Connector for StandardWebhooks {
    fn verify<'a>(
        &'a self,
        headers: &'a dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Verification<'a> {
        self.check(headers, body, now.timestamp()).into()
    }

    fn sign(&self, event_id: &str, body: &[u8], timestamp: i64) -> Result<Signed, Unsignable> {
        Ok(Signed::headers(
            self.sign_headers(event_id, body, timestamp),
        ))
    }

    fn event_id_header(&self) -> Option<&'static str> {
        Some("webhook-id")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The published test vector of the Standard Webhooks specification's reference libraries.
    const SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const TIMESTAMP: i64 = 1649367553;
    const BODY: &str = r#"{"email":"test@example.com","username":"test_user"}"#;
    const SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    fn scheme(secrets: &[&str]) -> StandardWebhooks {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        StandardWebhooks::new(&secrets, 300)
    }

    fn headers(signature: &str) -> Vec<(String, String)> {
        vec![
            ("webhook-id".into(), ID.into()),
            ("webhook-timestamp".into(), TIMESTAMP.to_string()),
            ("webhook-signature".into(), signature.into()),
        ]
    }

    #[test]
    fn the_published_vector_verifies() {
        let verified = scheme(&[SECRET])
            .check(&headers(SIGNATURE), BODY.as_bytes(), TIMESTAMP)
            .unwrap();
        assert_eq!(verified.naming, Naming::Header(ID.to_owned()));
        assert_eq!(verified.timestamp, Some(TIMESTAMP));
    }

    #[test]
    fn signing_reproduces_the_published_vector() {
        let signed = scheme(&[SECRET]).sign_headers(ID, BODY.as_bytes(), TIMESTAMP);
        assert!(signed.contains(&("webhook-signature".to_owned(), SIGNATURE.to_owned())));
    }

    #[test]
    fn one_changed_body_byte_fails() {
        let body = BODY.replace("test_user", "test_usex");
        let err = scheme(&[SECRET]).check(&headers(SIGNATURE), body.as_bytes(), TIMESTAMP);
        assert_eq!(err, Err(SignatureError::NoMatch));
    }

    #[test]
    fn a_rotated_secret_still_verifies_when_listed_second() {
        let verified = scheme(&["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", SECRET]).check(
            &headers(SIGNATURE),
            BODY.as_bytes(),
            TIMESTAMP,
        );
        assert!(verified.is_ok());
    }

    #[test]
    fn any_listed_signature_may_match_and_unknown_versions_are_ignored() {
        let list = format!("v1a,abcdef v1,bm9wZQ== {SIGNATURE} v2,zzz");
        let verified = scheme(&[SECRET]).check(&headers(&list), BODY.as_bytes(), TIMESTAMP);
        assert!(verified.is_ok());
    }

    #[test]
    fn a_timestamp_outside_tolerance_fails_in_both_directions() {
        let s = scheme(&[SECRET]);
        for now in [TIMESTAMP + 301, TIMESTAMP - 301] {
            let err = s.check(&headers(SIGNATURE), BODY.as_bytes(), now);
            assert!(matches!(err, Err(SignatureError::OutsideTolerance { .. })));
        }
        assert!(
            s.check(&headers(SIGNATURE), BODY.as_bytes(), TIMESTAMP + 300)
                .is_ok()
        );
    }

    #[test]
    fn missing_and_malformed_headers_are_errors_not_panics() {
        let s = scheme(&[SECRET]);
        let mut h = headers(SIGNATURE);
        h.remove(0);
        assert_eq!(
            s.check(&h, BODY.as_bytes(), TIMESTAMP),
            Err(SignatureError::MissingHeader("webhook-id"))
        );
        let mut h = headers(SIGNATURE);
        h[1].1 = "-12".into();
        assert_eq!(
            s.check(&h, BODY.as_bytes(), TIMESTAMP),
            Err(SignatureError::MalformedHeader("webhook-timestamp"))
        );
        assert_eq!(
            s.check(&headers("garbage"), BODY.as_bytes(), TIMESTAMP),
            Err(SignatureError::NoMatch)
        );
    }
}
