//! What every provider's signature check shares: header access, the errors, the timestamp
//! rules, and the HMAC keys with their constant-time check. Each provider's own scheme is in
//! its file under `providers/`.

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
    /// A transmission id seen before with another body (PayPal, whose signature covers only a
    /// CRC-32 of the body): a body forged under a genuine delivery's headers.
    #[error("transmission {0} was verified before with another body")]
    TransmissionReused(String),
}

/// Why a delivery's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// Not the provider's, and no retry changes that: 401 `invalid_signature`, nothing stored.
    #[error(transparent)]
    Refused(#[from] SignatureError),
    /// The check could not be made now (a certificate that could not be fetched, a provider
    /// API that timed out or answered 5xx or 429): 503, nothing stored, the provider retries.
    /// Apart from `Refused` so that no `?` turns it into a 401.
    #[error("the signature could not be checked now: {0}")]
    Unavailable(String),
    /// The provider's API refused the gateway's own key (401 or 403): 503, nothing stored, and
    /// an alert, since no retry helps until an operator fixes `api_key`; never a rejection
    /// stored forever for an event that may be genuine.
    #[error("the provider's API refused our api_key: {0}")]
    KeyRefused(String),
}

/// What a verified delivery tells beyond its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signed timestamp (unix seconds), for schemes that sign one.
    pub timestamp: Option<i64>,
    /// Where the delivery's event id (or ids) come from.
    pub naming: Naming,
    /// Set when the signature binds the body only weakly (PayPal's covers a CRC-32 of it): the
    /// gateway then holds the transmission to the first body it verified under it.
    pub transmission: Option<Transmission>,
}

impl Verified {
    /// A delivery whose signature covers its body and names its events as `naming` says.
    pub fn new(timestamp: Option<i64>, naming: Naming) -> Self {
        Self {
            timestamp,
            naming,
            transmission: None,
        }
    }
}

/// A signed transmission whose body must be held to it (see [`Verified::transmission`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmission {
    /// The provider's id of the transmission (`PAYPAL-TRANSMISSION-ID`).
    pub id: String,
    /// Until when a delivery of it is accepted (its signed time plus the retry window): the
    /// binding must be kept that long.
    pub valid_until: chrono::DateTime<chrono::Utc>,
}

/// How a verified delivery names its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// The body names its one event (its format's id field).
    Body,
    /// A header carried the id (Standard Webhooks' `webhook-id`, Razorpay's
    /// `x-razorpay-event-id`).
    Header(String),
    /// The header that carries the id is absent: the delivery cannot be keyed (a 400).
    MissingHeader(&'static str),
    /// The delivery carries several events, each signed on its own (Adyen's notification
    /// items): where each one's body is in the request body, and its id.
    Items(Vec<NamedItem>),
    /// The provider's API said what happened (fetch-verified schemes): each event with the
    /// body the gateway made of the delivery and the API's answer, which is what it stores,
    /// fingerprints and reads.
    Fetched(Vec<FetchedEvent>),
    /// The delivery names nothing the gateway can key or ask about (a Mollie id that is not a
    /// payment's): a 400 with this detail, nothing stored.
    Unusable(String),
}

/// One event a fetch-verified delivery names, as the provider's API described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedEvent {
    pub event_id: String,
    pub body: Vec<u8>,
}

/// One event of a multi-event delivery, as its signature check found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedItem {
    /// The item's bytes within the request body.
    pub span: std::ops::Range<usize>,
    pub event_id: String,
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

/// Refuses a signed timestamp further than `tolerance_secs` from `now`, in either direction.
pub(crate) fn check_tolerance(
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

pub(crate) fn parse_timestamp(value: &str, header: &'static str) -> Result<i64, SignatureError> {
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
pub(crate) struct Keys {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) tolerance_secs: i64,
}

impl Keys {
    /// Keys that are the secrets' own UTF-8 bytes (Stripe, plain HMAC). Takes the exposed
    /// secrets, so the scheme's core needs no configuration type.
    pub(crate) fn utf8<'s>(
        secrets: impl IntoIterator<Item = &'s str>,
        tolerance_secs: i64,
    ) -> Self {
        let keys = secrets.into_iter().map(|s| s.as_bytes().to_vec()).collect();
        Self {
            keys,
            tolerance_secs,
        }
    }

    /// Keys that are the hex decoding of the secrets (Adyen's 64 hex characters); a secret that
    /// does not decode is left out (the configuration refuses it first).
    pub(crate) fn hex<'s>(secrets: impl IntoIterator<Item = &'s str>) -> Self {
        let keys = secrets
            .into_iter()
            .filter_map(|s| hex::decode(s).ok())
            .collect();
        Self {
            keys,
            tolerance_secs: 0,
        }
    }

    /// Accepts when the timestamp is within tolerance and any candidate signature matches the
    /// MAC of the signed parts under any key, compared in constant time.
    pub(crate) fn check(
        &self,
        parts: &[&[u8]],
        timestamp: i64,
        now: i64,
        candidates: &[Vec<u8>],
    ) -> Result<(), SignatureError> {
        check_tolerance(timestamp, now, self.tolerance_secs)?;
        self.check_untimed(parts, candidates)
    }

    /// Accepts when any candidate signature matches the MAC of the signed parts under any key,
    /// compared in constant time: for schemes that sign no timestamp.
    pub(crate) fn check_untimed(
        &self,
        parts: &[&[u8]],
        candidates: &[Vec<u8>],
    ) -> Result<(), SignatureError> {
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

    /// The MAC of the parts under each key, in order.
    pub(crate) fn sign_each(&self, parts: &[&[u8]]) -> Vec<Vec<u8>> {
        self.keys
            .iter()
            .map(|key| mac_over(key, parts).finalize().into_bytes().to_vec())
            .collect()
    }

    /// The MAC of the parts under the first key, as a provider signs.
    pub(crate) fn sign(&self, parts: &[&[u8]]) -> Vec<u8> {
        self.keys
            .first()
            .map(|key| mac_over(key, parts).finalize().into_bytes().to_vec())
            .unwrap_or_default()
    }
}
