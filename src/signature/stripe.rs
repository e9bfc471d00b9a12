//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...]`, signed content `{t}.{body}`,
//! key = the UTF-8 bytes of the whole secret string (no decoding).

use super::scheme::{
    HeaderSource, Keys, SignatureError, SignatureScheme, Verified, parse_timestamp,
};
use crate::secret::Secret;

const HEADER: &str = "stripe-signature";

pub struct StripeScheme {
    keys: Keys,
}

impl StripeScheme {
    pub fn new(secrets: &[Secret], tolerance_secs: i64) -> Self {
        Self {
            keys: Keys::utf8(secrets.iter().map(Secret::expose), tolerance_secs),
        }
    }
}

impl SignatureScheme for StripeScheme {
    fn verify(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError> {
        let header = headers
            .header(HEADER)
            .ok_or(SignatureError::MissingHeader("Stripe-Signature"))?;
        let mut timestamp_text = None;
        let mut candidates = Vec::new();
        for item in header.split(',') {
            let Some((key, value)) = item.trim().split_once('=') else {
                continue;
            };
            match key {
                "t" if timestamp_text.is_none() => timestamp_text = Some(value),
                "t" => return Err(SignatureError::MalformedHeader("Stripe-Signature")),
                // Stripe lists one v1 per active secret; v0 and unknown schemes are ignored.
                "v1" => candidates.extend(hex::decode(value).ok()),
                _ => {}
            }
        }
        let timestamp_text =
            timestamp_text.ok_or(SignatureError::MalformedHeader("Stripe-Signature"))?;
        let timestamp = parse_timestamp(timestamp_text, "Stripe-Signature")?;
        let parts: [&[u8]; 3] = [timestamp_text.as_bytes(), b".", body];
        self.keys.check(&parts, timestamp, now, &candidates)?;
        Ok(Verified {
            timestamp,
            header_event_id: None,
        })
    }

    fn sign(&self, _event_id: &str, body: &[u8], timestamp: i64) -> Vec<(String, String)> {
        let timestamp = timestamp.to_string();
        let parts: [&[u8]; 3] = [timestamp.as_bytes(), b".", body];
        let signature = hex::encode(self.keys.sign(&parts));
        vec![(
            "Stripe-Signature".to_owned(),
            format!("t={timestamp},v1={signature}"),
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Computed independently: printf '1700000000.{"id":"evt_1"}' | openssl dgst -sha256 -hmac whsec_test_secret
    const SECRET: &str = "whsec_test_secret";
    const BODY: &str = r#"{"id":"evt_1"}"#;
    const SIGNATURE: &str = "248a374f50f943a28b0f6ab50faf9a7e7e29b710fa26df9fb1618b9bf8ea9c9a";
    const T: i64 = 1_700_000_000;

    fn scheme(secrets: &[&str]) -> StripeScheme {
        let secrets: Vec<Secret> = secrets.iter().map(|s| Secret::new(*s)).collect();
        StripeScheme::new(&secrets, 300)
    }

    fn header(value: &str) -> Vec<(String, String)> {
        vec![("Stripe-Signature".into(), value.into())]
    }

    #[test]
    fn the_whole_secret_string_is_the_key_without_decoding() {
        let h = header(&format!("t={T},v1={SIGNATURE}"));
        assert!(scheme(&[SECRET]).verify(&h, BODY.as_bytes(), T).is_ok());
    }

    #[test]
    fn signing_matches_an_independent_implementation() {
        let signed = scheme(&[SECRET]).sign("ignored", BODY.as_bytes(), T);
        assert_eq!(signed[0].1, format!("t={T},v1={SIGNATURE}"));
    }

    #[test]
    fn any_v1_may_match_and_v0_is_ignored() {
        let h = header(&format!("t={T},v0=00ff,v1=deadbeef,v1={SIGNATURE}"));
        assert!(
            scheme(&["other", SECRET])
                .verify(&h, BODY.as_bytes(), T)
                .is_ok()
        );
    }

    #[test]
    fn a_tampered_body_or_a_wrong_secret_fails() {
        let h = header(&format!("t={T},v1={SIGNATURE}"));
        assert_eq!(
            scheme(&[SECRET]).verify(&h, br#"{"id":"evt_2"}"#, T),
            Err(SignatureError::NoMatch)
        );
        assert_eq!(
            scheme(&["whsec_other"]).verify(&h, BODY.as_bytes(), T),
            Err(SignatureError::NoMatch)
        );
    }

    #[test]
    fn a_header_without_timestamp_or_with_two_is_malformed() {
        let s = scheme(&[SECRET]);
        for value in [
            format!("v1={SIGNATURE}"),
            format!("t={T},t={T},v1={SIGNATURE}"),
            "garbage".into(),
        ] {
            assert_eq!(
                s.verify(&header(&value), BODY.as_bytes(), T),
                Err(SignatureError::MalformedHeader("Stripe-Signature"))
            );
        }
    }

    #[test]
    fn a_stale_timestamp_fails() {
        let h = header(&format!("t={T},v1={SIGNATURE}"));
        assert!(matches!(
            scheme(&[SECRET]).verify(&h, BODY.as_bytes(), T + 3600),
            Err(SignatureError::OutsideTolerance { skew_secs: -3600 })
        ));
    }
}
