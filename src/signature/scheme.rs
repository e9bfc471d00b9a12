//! What every scheme shares: the trait, the verified facts, the errors, and the HMAC keys
//! with their constant-time check.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a delivery was refused. Every variant is a 401 `invalid_signature` for the client;
/// the variant is only for the log and never carries a secret or a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("header {0} is missing")]
    MissingHeader(&'static str),
    #[error("header {0} is malformed")]
    MalformedHeader(&'static str),
    #[error("signed timestamp is {skew_secs}s away from now, beyond the tolerance")]
    OutsideTolerance { skew_secs: i64 },
    #[error("no signature matches any configured secret")]
    NoMatch,
    /// The delivery names a signature algorithm the scheme does not accept (PayPal).
    #[error("header {0} names an unsupported algorithm")]
    UnsupportedAlgorithm(&'static str),
    /// The certificate URL a delivery names was refused before any request (PayPal).
    #[error("certificate URL refused: {0}")]
    CertUrlRefused(&'static str),
    /// The certificate that URL served cannot vouch for the signature (PayPal): its chain,
    /// dates, name or key, or the answer itself. `reason` is stable; `detail` says more.
    #[error("certificate refused: {reason} ({detail})")]
    CertificateRefused {
        reason: &'static str,
        detail: String,
    },
}

/// What a verified delivery tells beyond its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signed timestamp (unix seconds).
    pub timestamp: i64,
    /// The event id when the scheme carries it in a header (Standard Webhooks' `webhook-id`).
    pub header_event_id: Option<String>,
}

/// Read access to request headers, so schemes work with actix's and reqwest's maps alike.
pub trait HeaderSource {
    /// The first value of the header `name` (case-insensitive), if present and visible ASCII.
    fn header(&self, name: &str) -> Option<&str>;
}

impl HeaderSource for actix_web::http::header::HeaderMap {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
}

impl HeaderSource for Vec<(String, String)> {
    fn header(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A provider's signature scheme, keyed with its configured secrets.
pub trait SignatureScheme: Send + Sync {
    /// Verifies a delivery's headers over its raw body at unix time `now`.
    fn verify(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
        now: i64,
    ) -> Result<Verified, SignatureError>;

    /// The headers that sign `body` with the first secret at `timestamp`, as the provider would.
    fn sign(&self, event_id: &str, body: &[u8], timestamp: i64) -> Vec<(String, String)>;
}

/// Refuses a signed timestamp further than `tolerance_secs` from `now`, in either direction.
pub(super) fn check_tolerance(
    timestamp: i64,
    now: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let skew_secs = timestamp.saturating_sub(now);
    if skew_secs.unsigned_abs() > tolerance_secs.unsigned_abs() {
        return Err(SignatureError::OutsideTolerance { skew_secs });
    }
    Ok(())
}

pub(super) fn parse_timestamp(value: &str, header: &'static str) -> Result<i64, SignatureError> {
    if value.is_empty() || value.len() > 12 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SignatureError::MalformedHeader(header));
    }
    value
        .parse()
        .map_err(|_| SignatureError::MalformedHeader(header))
}

/// HMAC-SHA256 over the parts in order, under `key`.
fn mac_over(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
    for part in parts {
        mac.update(part);
    }
    mac
}

/// A provider's HMAC keys (one per configured secret) and its timestamp tolerance.
pub(super) struct Keys {
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) tolerance_secs: i64,
}

impl Keys {
    /// Keys that are the secrets' own UTF-8 bytes (Stripe, plain HMAC). Takes the exposed
    /// secrets, so the scheme's core needs no configuration type.
    pub(super) fn utf8<'s>(
        secrets: impl IntoIterator<Item = &'s str>,
        tolerance_secs: i64,
    ) -> Self {
        let keys = secrets.into_iter().map(|s| s.as_bytes().to_vec()).collect();
        Self {
            keys,
            tolerance_secs,
        }
    }

    /// Accepts when the timestamp is within tolerance and any candidate signature matches the
    /// MAC of the signed parts under any key, compared in constant time.
    pub(super) fn check(
        &self,
        parts: &[&[u8]],
        timestamp: i64,
        now: i64,
        candidates: &[Vec<u8>],
    ) -> Result<(), SignatureError> {
        check_tolerance(timestamp, now, self.tolerance_secs)?;
        let matches = self.keys.iter().any(|key| {
            let mac = mac_over(key, parts);
            candidates
                .iter()
                .any(|candidate| mac.clone().verify_slice(candidate).is_ok())
        });
        if matches {
            Ok(())
        } else {
            Err(SignatureError::NoMatch)
        }
    }

    /// The MAC of the parts under the first key, as a provider signs.
    pub(super) fn sign(&self, parts: &[&[u8]]) -> Vec<u8> {
        self.keys
            .first()
            .map(|key| mac_over(key, parts).finalize().into_bytes().to_vec())
            .unwrap_or_default()
    }
}
