//! PayPal: SHA256withRSA over `{transmission id}|{transmission time}|{webhook id}|{CRC-32 of the
//! raw body, unsigned decimal}`, with the key of a certificate that the delivery names by URL
//! (`PAYPAL-CERT-URL`). We hold no secret: anyone can sign, so everything rests on which
//! certificate we accept. A delivery is checked in this order, cheapest and offline first:
//!
//! 1. Headers: `PAYPAL-TRANSMISSION-ID`, `-TIME` (RFC 3339), `-SIG` (base64),
//!    `PAYPAL-CERT-URL` present and well-formed, `PAYPAL-AUTH-ALGO` exactly `SHA256withRSA`
//!    (ASCII case aside).
//! 2. Transmission time: at most `tolerance` ahead of `now` and at most `max_age` (the
//!    provider's retry window) behind it. PayPal's SDKs check no time at all, and a retry may
//!    carry the first attempt's time, so a 5-minute tolerance would refuse PayPal's own retries;
//!    but without any bound a captured delivery could be replayed after its idempotency record
//!    expired and post twice. With `max_age` = `retry_window` and `ttl` > `retry_window` +
//!    `tolerance` (the configuration guarantees `ttl_hours` > `retry_window_hours`, and
//!    `tolerance_secs` is at most an hour), every accepted replay still finds its record.
//! 3. Certificate URL, before any lookup or connection (`crate::allowlist`): https, a host of
//!    `cert_url_hosts` (exact host or dot-suffix), its port (443 unless the entry names one), no
//!    user information.
//! 4. Certificate, from the cache or fetched (`fetch.rs`, `cache.rs`): one GET, no redirect, a
//!    bounded body and time; the chain is verified with rustls-webpki against webpki-roots plus
//!    `ca_file`'s roots at the delivery's `now` (each use, cached or not, so dates are exact and a
//!    test's clock is honoured), and the leaf must name a host of `cert_url_hosts` (as PayPal's
//!    SDKs require `messageverificationcerts.*paypal.com`).
//! 5. Signature: ring's `RSA_PKCS1_2048_8192_SHA256` with the leaf's key over the signed
//!    string (`signed_string`).
//! 6. The body: the signature covers only its CRC-32, which is no MAC (anyone can write another
//!    body with the same CRC-32), so a verified delivery carries its [`Transmission`] and the
//!    callback path holds that id to the first body it verified under it
//!    (`idempotency::transmission`): another body under a seen id is refused.
//!
//! The TLS connection to the certificate host is checked by rustls at the system clock with the
//! same roots; only the signing chain uses the delivery's `now`.
//!
//! Errors: [`PaypalError::Refused`] carries a [`SignatureError`] and is a 401
//! `invalid_signature` (headers, time, URL off the allowlist, an answer that is not a good
//! certificate, a chain that does not verify, a bad signature): no retry changes it.
//! [`PaypalError::CertificateUnavailable`] is a 503: the certificate could not be fetched now
//! (network, timeout, PayPal answering 5xx, 429 or 408, too many fetches at once); nothing is
//! stored and PayPal's retry may succeed. It is a separate variant, not one more
//! `SignatureError`, so that code which turns a `SignatureError` into a 401 with `?` cannot
//! swallow it: the caller has to decide.

mod cache;
mod certificate;
pub(crate) mod settings;

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use futures_util::FutureExt;
use std::sync::Arc;

use url::Url;

pub use certificate::FetchLimits;
pub use settings::{DEFAULT_CERT_URL_HOSTS, SettingsError};

use self::cache::{CacheLimits, CertCache, Failure, Lookup};
use self::certificate::{BadSignature, Chain, FetchError, Fetcher, Names, Refusal, Trust};
use self::settings::{check_webhook_id, plain_field, roots};
use crate::allowlist::CertUrlPolicy;
use crate::outbound::Origin;
use crate::signature::scheme::{HeaderSource, Naming, SignatureError, Transmission, Verified};

const TRANSMISSION_ID: &str = "PAYPAL-TRANSMISSION-ID";
const TRANSMISSION_TIME: &str = "PAYPAL-TRANSMISSION-TIME";
const TRANSMISSION_SIG: &str = "PAYPAL-TRANSMISSION-SIG";
const CERT_URL: &str = "PAYPAL-CERT-URL";
const AUTH_ALGO: &str = "PAYPAL-AUTH-ALGO";
/// The one algorithm PayPal uses and we accept.
pub const AUTH_ALGORITHM: &str = "SHA256withRSA";

/// An RSA-8192 signature is 1024 bytes, 1368 in base64.
const MAX_SIGNATURE_B64_LEN: usize = 1400;

/// One PayPal provider's settings, as the configuration gives them.
#[derive(Debug, Clone)]
pub struct PaypalSettings {
    /// `webhook_id`: the receiving webhook's id at PayPal, part of what PayPal signs.
    pub webhook_id: String,
    /// `cert_url_hosts`: where certificates may come from (exact host or dot-suffix, port 443
    /// unless an entry names one; `crate::allowlist` has the rules);
    /// [`DEFAULT_CERT_URL_HOSTS`] when the configuration says nothing. Empty is refused.
    pub cert_url_hosts: Vec<String>,
    /// The contents of `ca_file`: PEM certificates trusted in addition to webpki-roots, both for
    /// the signing chain and for the TLS connection to the certificate host. A CA certificate
    /// that is not a root works too (a chain may end at it).
    pub extra_roots_pem: Option<Vec<u8>>,
    /// How old a transmission time may be: the provider's `retry_window`.
    pub max_age: Duration,
    /// How far a transmission time may be ahead of the gateway's clock: `tolerance_secs`.
    pub tolerance: Duration,
}

impl PaypalSettings {
    /// Settings with the contract's defaults: hosts under `paypal.com`, no extra roots, PayPal's
    /// 3-day retry window, 300 s of clock tolerance.
    pub fn new(webhook_id: impl Into<String>) -> Self {
        Self {
            webhook_id: webhook_id.into(),
            cert_url_hosts: DEFAULT_CERT_URL_HOSTS
                .iter()
                .map(|h| (*h).to_owned())
                .collect(),
            extra_roots_pem: None,
            max_age: Duration::from_secs(72 * 3600),
            tolerance: Duration::from_secs(300),
        }
    }

    /// Checks every setting without building anything, for the configuration to refuse a bad
    /// file at startup (`check-config` included).
    pub fn validate(&self) -> Result<(), SettingsError> {
        check_webhook_id(&self.webhook_id)?;
        CertUrlPolicy::new(&self.cert_url_hosts)
            .map_err(|m| SettingsError::new("cert_url_hosts", m))?;
        roots(self.extra_roots_pem.as_deref())?;
        Ok(())
    }
}

/// Why a PayPal delivery was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaypalError {
    /// Not verifiable as PayPal's for this webhook, and no retry changes that: 401
    /// `invalid_signature`, nothing stored.
    #[error(transparent)]
    Refused(#[from] SignatureError),
    /// The certificate could not be fetched now (network, timeout, PayPal 5xx, 429 or 408, too
    /// many fetches at once): 503, nothing stored; PayPal retries.
    #[error("PayPal's certificate could not be fetched now: {0}")]
    CertificateUnavailable(String),
}

/// The verifier of one PayPal provider, built once: trusted roots, the HTTPS client and the
/// certificate cache are shared by all its deliveries.
pub struct PaypalVerifier {
    webhook_id: String,
    max_age: TimeDelta,
    tolerance: TimeDelta,
    urls: CertUrlPolicy,
    trust: Trust,
    fetcher: Fetcher,
    cache: CertCache<Chain, FetchError>,
}

impl PaypalVerifier {
    /// A verifier with the default [`FetchLimits`].
    pub fn new(settings: PaypalSettings) -> Result<Self, SettingsError> {
        Self::with_limits(settings, FetchLimits::default())
    }

    pub fn with_limits(
        settings: PaypalSettings,
        limits: FetchLimits,
    ) -> Result<Self, SettingsError> {
        check_webhook_id(&settings.webhook_id)?;
        let urls = CertUrlPolicy::new(&settings.cert_url_hosts)
            .map_err(|m| SettingsError::new("cert_url_hosts", m))?;
        let roots = roots(settings.extra_roots_pem.as_deref())?;
        let trust = Trust::new(roots.roots.clone(), names_of(&urls));
        // The outgoing-URL rules: a host is resolved and its addresses checked, but for the
        // origins the allowlist names outright (an address, localhost, with its port).
        let grants: Vec<((), _)> = urls
            .named_outright()
            .map(|(host, port)| ((), Origin::new("https", &host, port)))
            .collect();
        let fetcher =
            Fetcher::new(roots, &limits, grants).map_err(|m| SettingsError::new("ca_file", m))?;
        Ok(Self {
            webhook_id: settings.webhook_id,
            max_age: TimeDelta::from_std(settings.max_age).unwrap_or(TimeDelta::MAX),
            tolerance: TimeDelta::from_std(settings.tolerance).unwrap_or(TimeDelta::MAX),
            urls,
            trust,
            fetcher,
            cache: CertCache::new(CacheLimits {
                capacity: limits.cache_capacity,
                max_concurrent_fetches: limits.max_concurrent_fetches,
                failures_kept: limits.failures_kept,
                refused_for: limits.refused_for,
                transient_for: limits.transient_for,
                max_waiting: limits.max_waiting,
                slot_wait: limits.timeout,
            }),
        })
    }

    /// Verifies a delivery's headers over its raw body at `now` (module doc: what, in which
    /// order). The headers are read before the first await, so the future does not borrow them
    /// and is `Send`. The event id is the body's `id` (`naming` is `Body`); the
    /// timestamp is the transmission time.
    pub fn verify<'a>(
        &'a self,
        headers: &dyn HeaderSource,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<Verified, PaypalError>> + Send + 'a {
        let checked = self.check_offline(headers, now);
        async move {
            let (delivery, url) = checked?;
            let chain = self.signing_chain(url, now).await?;
            let message = signed_string(
                &delivery.transmission_id,
                &delivery.transmission_time,
                &self.webhook_id,
                body,
            );
            let leaf = chain.first().ok_or(SignatureError::NoMatch)?;
            certificate::check_signature(leaf, message.as_bytes(), &delivery.signature)
                .map_err(bad_signature)?;
            // The signature covers only a CRC-32 of the body, which anyone can match with
            // another body: the caller holds the transmission id to this body for as long as
            // the transmission is accepted, and a tolerance more, for a database clock ahead
            // of this one.
            let valid_until = delivery
                .transmitted_at
                .checked_add_signed(self.max_age)
                .and_then(|t| t.checked_add_signed(self.tolerance))
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            Ok(Verified {
                timestamp: Some(delivery.transmitted_at.timestamp()),
                naming: Naming::Body,
                transmission: Some(Transmission {
                    id: delivery.transmission_id,
                    valid_until,
                }),
            })
        }
    }

    /// Verified certificates held in the cache now (at most the cache's capacity).
    pub fn cached_certificates(&self) -> usize {
        self.cache.len()
    }

    /// Steps 1 to 3: everything decided without the network.
    fn check_offline(
        &self,
        headers: &dyn HeaderSource,
        now: DateTime<Utc>,
    ) -> Result<(Delivery, Url), SignatureError> {
        let delivery = Delivery::read(headers)?;
        let ahead = delivery.transmitted_at - now;
        if ahead > self.tolerance || -ahead > self.max_age {
            return Err(SignatureError::OutsideTolerance {
                skew_secs: ahead.num_seconds(),
            });
        }
        let url = self
            .urls
            .check(&delivery.cert_url)
            .map_err(SignatureError::CertUrlRefused)?;
        Ok((delivery, url))
    }

    /// Deliveries waiting for a certificate fetch slot now.
    pub fn fetches_waiting(&self) -> usize {
        self.cache.waiting()
    }

    /// The verified chain `url` serves: from the cache, the failure it gave moments ago, or
    /// fetched (one fetch per URL at a time, waiting for a fetch slot when all are taken).
    async fn signing_chain(&self, url: Url, now: DateTime<Utc>) -> Result<Chain, PaypalError> {
        let at = certificate::unix_time(now);
        let key = url.as_str().to_owned();
        let mut expired = None;
        let mut slot = None;
        // An expired cached chain is looked up once more (the URL fetched again, in case the
        // certificate there was renewed); a wait for a slot is followed by one more look.
        for _ in 0..4 {
            let fetcher = self.fetcher.clone();
            let target = url.clone();
            let lookup = self.cache.lookup(&key, now, slot.take(), move || {
                async move { fetcher.fetch(target).await }.boxed()
            });
            match lookup {
                Lookup::Ready(chain) => match self.trust.check(&chain, at) {
                    Ok(()) => return Ok(chain),
                    Err(refusal) if refusal.is_expiry() && expired.is_none() => {
                        self.cache
                            .forget(&key, |cached| Arc::ptr_eq(cached, &chain));
                        expired = Some(refusal);
                    }
                    Err(refusal) => return Err(SignatureError::from(refusal).into()),
                },
                Lookup::Failed(error) => return Err(refused_or_unavailable(error)),
                Lookup::Busy => match self.cache.wait_for_slot().await {
                    Some(free) => slot = Some(free),
                    None => {
                        return Err(PaypalError::CertificateUnavailable(
                            "every certificate fetch slot is taken".into(),
                        ));
                    }
                },
                Lookup::InFlight(id, flight) => {
                    let fetched = flight.await;
                    let outcome = match &fetched {
                        Ok(chain) => self
                            .trust
                            .check(chain, at)
                            .map(|()| chain.clone())
                            .map_err(FetchError::Refused),
                        Err(error) => Err(error.clone()),
                    };
                    return match outcome {
                        Ok(chain) => {
                            // Rare (a certificate lasts about a year): worth a line, once.
                            if self.cache.store(&key, chain.clone()) {
                                tracing::info!(
                                    host = url.host_str(),
                                    "PayPal certificate fetched and verified"
                                );
                            }
                            Ok(chain)
                        }
                        // An expired chain is not remembered as a failure: it was valid at
                        // another delivery's clock, and the next one fetches again.
                        Err(FetchError::Refused(refusal)) if refusal.is_expiry() => {
                            self.cache.forget_fetch(&key, id);
                            Err(SignatureError::from(refusal).into())
                        }
                        Err(error) => {
                            self.cache.fail(&key, id, error.clone(), now);
                            Err(refused_or_unavailable(error))
                        }
                    };
                }
            }
        }
        Err(PaypalError::Refused(
            expired
                .map(SignatureError::from)
                .unwrap_or(SignatureError::NoMatch),
        ))
    }
}

/// The names a signing certificate may carry, as the allowlist of certificate URLs says.
fn names_of(urls: &CertUrlPolicy) -> Names {
    let allowed = urls.clone();
    Names {
        addresses: urls.addresses().collect(),
        dns: Box::new(move |name| allowed.allows_name(name)),
    }
}

impl Failure for FetchError {
    fn is_transient(&self) -> bool {
        matches!(self, FetchError::Transient(_))
    }

    fn task_ended(why: String) -> Self {
        FetchError::Transient(why)
    }
}

impl From<Refusal> for SignatureError {
    fn from(refusal: Refusal) -> Self {
        SignatureError::CertificateRefused {
            reason: refusal.reason,
            detail: refusal.detail,
        }
    }
}

/// A signature the leaf's key did not accept, as every scheme says it.
fn bad_signature(bad: BadSignature) -> SignatureError {
    match bad {
        BadSignature::NoMatch => SignatureError::NoMatch,
        BadSignature::Unusable(refusal) => refusal.into(),
    }
}

/// A failed fetch as the delivery's answer: a refusal is a 401, a transient failure a 503.
fn refused_or_unavailable(error: FetchError) -> PaypalError {
    match error {
        FetchError::Transient(why) => PaypalError::CertificateUnavailable(why),
        FetchError::Refused(refusal) => PaypalError::Refused(refusal.into()),
    }
}

/// Checks a delivery's headers over `body` with the key of `cert_pem`'s first certificate
/// only: no allowlist, no fetch, no chain, no dates, no transmission-time window. For
/// known-answer tests of PayPal's published vectors, whose certificates have long expired;
/// deliveries go through [`PaypalVerifier::verify`].
pub fn check_vector(
    cert_pem: &[u8],
    webhook_id: &str,
    headers: &dyn HeaderSource,
    body: &[u8],
) -> Result<(), SignatureError> {
    let delivery = Delivery::read(headers)?;
    let chain = certificate::parse_pem(cert_pem)?;
    let leaf = chain.first().ok_or(SignatureError::NoMatch)?;
    let message = signed_string(
        &delivery.transmission_id,
        &delivery.transmission_time,
        webhook_id,
        body,
    );
    certificate::check_signature(leaf, message.as_bytes(), &delivery.signature)
        .map_err(bad_signature)
}

/// The string PayPal signs: `{transmission id}|{transmission time}|{webhook id}|{crc32}`, the
/// time exactly as the header gives it and the CRC-32 (IEEE) of the raw body as an unsigned
/// decimal. Only PayPal can sign it (with its private key); `send-test-event` cannot.
pub(crate) fn signed_string(
    transmission_id: &str,
    transmission_time: &str,
    webhook_id: &str,
    body: &[u8],
) -> String {
    format!(
        "{transmission_id}|{transmission_time}|{webhook_id}|{}",
        crc32fast::hash(body)
    )
}

/// A delivery's PayPal headers, read and checked for form.
struct Delivery {
    transmission_id: String,
    /// As sent: it is signed as text.
    transmission_time: String,
    transmitted_at: DateTime<Utc>,
    signature: Vec<u8>,
    cert_url: String,
}

impl Delivery {
    fn read(headers: &dyn HeaderSource) -> Result<Self, SignatureError> {
        let get = |name: &'static str| {
            headers
                .header(name)
                .map(str::trim)
                .ok_or(SignatureError::MissingHeader(name))
        };
        let transmission_id = get(TRANSMISSION_ID)?;
        let transmission_time = get(TRANSMISSION_TIME)?;
        let signature = get(TRANSMISSION_SIG)?;
        let cert_url = get(CERT_URL)?;
        let algorithm = get(AUTH_ALGO)?;
        if !algorithm.eq_ignore_ascii_case(AUTH_ALGORITHM) {
            return Err(SignatureError::UnsupportedAlgorithm(AUTH_ALGO));
        }
        // A `|` inside a field would let two different headers sign the same string.
        if !plain_field(transmission_id) {
            return Err(SignatureError::MalformedHeader(TRANSMISSION_ID));
        }
        let transmitted_at = DateTime::parse_from_rfc3339(transmission_time)
            .map_err(|_| SignatureError::MalformedHeader(TRANSMISSION_TIME))?
            .with_timezone(&Utc);
        if signature.len() > MAX_SIGNATURE_B64_LEN {
            return Err(SignatureError::MalformedHeader(TRANSMISSION_SIG));
        }
        use base64::Engine as _;
        let signature = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .map_err(|_| SignatureError::MalformedHeader(TRANSMISSION_SIG))?;
        Ok(Self {
            transmission_id: transmission_id.to_owned(),
            transmission_time: transmission_time.to_owned(),
            transmitted_at,
            signature,
            cert_url: cert_url.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests;
