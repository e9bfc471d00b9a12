//! The signing certificate: fetched (one HTTPS GET to a URL the allowlist passed, bounded in
//! time and size, no redirect followed, over TLS that trusts the same roots as the chain
//! check), read (PEM), its chain to a trusted root at the delivery's `now` (rustls-webpki), its
//! name, and the SHA256withRSA check of a signature with its key (ring, through webpki). What
//! this file needs of the rest (which names are allowed) it is given, so it stands alone.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, ServerName, SignatureVerificationAlgorithm, TrustAnchor, UnixTime,
};
use url::Url;
use webpki::{EndEntityCert, KeyUsage};

use crate::outbound::{Origin, Outbound};

/// A served PEM with more certificates than this is refused (PayPal's: the leaf, perhaps with
/// its issuer).
const MAX_CHAIN_LEN: usize = 8;

/// A certificate chain as served: the signing (leaf) certificate first, then any intermediates.
pub(super) type Chain = Arc<[CertificateDer<'static>]>;

/// Why a certificate or a signature was refused. `reason` is stable (tests and log queries
/// match it); `detail` is webpki's or the parser's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) reason: &'static str,
    pub(super) detail: String,
}

impl Refusal {
    fn new(reason: &'static str, detail: impl std::fmt::Display) -> Self {
        Self {
            reason,
            detail: detail.to_string(),
        }
    }

    /// The leaf, or an issuer on its path, is past its notAfter at the given time.
    pub(super) fn is_expiry(&self) -> bool {
        self.reason == EXPIRED
    }
}

pub(super) const EXPIRED: &str = "expired";
pub(super) const NOT_YET_VALID: &str = "not yet valid";
pub(super) const UNTRUSTED: &str = "untrusted chain";
pub(super) const NAME_NOT_ALLOWED: &str = "name not in cert_url_hosts";
pub(super) const NOT_PEM: &str = "not a PEM certificate";
pub(super) const UNUSABLE_KEY: &str = "not an RSA key of 2048 to 8192 bits";

/// The certificates of a PEM document, leaf first.
pub(super) fn parse_pem(pem: &[u8]) -> Result<Chain, Refusal> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Refusal::new(NOT_PEM, e))?;
    if certs.is_empty() {
        return Err(Refusal::new(NOT_PEM, "no CERTIFICATE block"));
    }
    if certs.len() > MAX_CHAIN_LEN {
        return Err(Refusal::new(
            "too many certificates",
            format!("{} in one response", certs.len()),
        ));
    }
    Ok(certs.into())
}

/// The names a signing certificate may carry: a DNS name the allowlist allows, or one of its
/// IP addresses.
pub(super) struct Names {
    pub(super) dns: Box<dyn Fn(&str) -> bool + Send + Sync>,
    pub(super) addresses: Vec<IpAddr>,
}

/// What a signing certificate is checked against: the trusted roots and the allowed names.
pub(super) struct Trust {
    anchors: Vec<TrustAnchor<'static>>,
    pub(super) names: Names,
    /// ring's, as rustls uses them for TLS.
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
}

impl Trust {
    pub(super) fn new(anchors: Vec<TrustAnchor<'static>>, names: Names) -> Self {
        Self {
            anchors,
            names,
            algorithms: rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .all,
        }
    }

    /// The chain leads from its leaf to a trusted root, every certificate on that path is
    /// valid at `now`, the leaf may serve TLS (EKU serverAuth when it lists EKUs, as PayPal's
    /// does) and it names a host of `cert_url_hosts`.
    pub(super) fn check(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> Result<(), Refusal> {
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| Refusal::new(NOT_PEM, "no certificate"))?;
        let leaf = EndEntityCert::try_from(leaf).map_err(|e| Refusal::new(NOT_PEM, e))?;
        leaf.verify_for_usage(
            self.algorithms,
            &self.anchors,
            intermediates,
            now,
            KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| {
            let reason = match e {
                webpki::Error::CertExpired { .. } => EXPIRED,
                webpki::Error::CertNotValidYet { .. } => NOT_YET_VALID,
                _ => UNTRUSTED,
            };
            Refusal::new(reason, format!("{e:?}"))
        })?;
        // Any CA-issued certificate has a trusted chain: the name says it is the certificate of
        // a host we fetch from, not one an attacker obtained for their own domain and managed
        // to have served from an allowed host. PayPal's SDKs check the same
        // (CN messageverificationcerts.*.paypal.com).
        let named = leaf.valid_dns_names().any(|n| (self.names.dns)(n))
            || self.names.addresses.iter().any(|ip| {
                leaf.verify_is_valid_for_subject_name(&ServerName::IpAddress((*ip).into()))
                    .is_ok()
            });
        if !named {
            let names: Vec<&str> = leaf.valid_dns_names().collect();
            return Err(Refusal::new(
                NAME_NOT_ALLOWED,
                format!("certificate names {names:?}"),
            ));
        }
        Ok(())
    }
}

/// Why a signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BadSignature {
    /// It does not verify with the leaf's key (as for every scheme, a no match).
    NoMatch,
    /// The leaf cannot check it at all (not a certificate, not an RSA key of 2048 to 8192 bits).
    Unusable(Refusal),
}

/// SHA256withRSA (RSASSA-PKCS1-v1_5 with SHA-256, keys of 2048 to 8192 bits) of `message` by the
/// leaf's key: ring's `RSA_PKCS1_2048_8192_SHA256`, with the key read from the certificate by
/// webpki.
pub(super) fn check_signature(
    leaf: &CertificateDer<'_>,
    message: &[u8],
    signature: &[u8],
) -> Result<(), BadSignature> {
    let leaf = EndEntityCert::try_from(leaf)
        .map_err(|e| BadSignature::Unusable(Refusal::new(NOT_PEM, e)))?;
    leaf.verify_signature(webpki::ring::RSA_PKCS1_2048_8192_SHA256, message, signature)
        .map_err(|e| match e {
            webpki::Error::InvalidSignatureForPublicKey => BadSignature::NoMatch,
            // An EC key, or RSA under 2048 bits: PayPal signs with RSA.
            other => BadSignature::Unusable(Refusal::new(UNUSABLE_KEY, format!("{other:?}"))),
        })
}

/// `now` as webpki's time (a time before 1970 is 1970: nothing is valid then).
pub(super) fn unix_time(now: chrono::DateTime<chrono::Utc>) -> UnixTime {
    let secs = u64::try_from(now.timestamp()).unwrap_or(0);
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs))
}

// ---------------------------------------------------------------------------------------
// Fetching
// ---------------------------------------------------------------------------------------

/// Bounds of the certificate fetch and its cache. The defaults suit PayPal: a certificate of a
/// few kilobytes that changes about once a year.
#[derive(Debug, Clone)]
pub struct FetchLimits {
    /// Connecting (TCP and TLS handshake).
    pub connect_timeout: Duration,
    /// The whole fetch, connect and body included.
    pub timeout: Duration,
    /// A larger response is refused; the body is read chunk by chunk and dropped past this.
    pub max_body_bytes: usize,
    /// Verified certificates kept, by URL (least recently used goes first).
    pub cache_capacity: usize,
    /// Fetches running at once, across URLs; a delivery that would start one more is answered
    /// as unavailable (PayPal retries), so a flood of unknown URLs cannot open sockets without
    /// bound.
    pub max_concurrent_fetches: usize,
    /// Deliveries that may wait for a fetch slot at once (each at most `timeout`); one more is
    /// answered as unavailable at once.
    pub max_waiting: usize,
    /// Failed URLs remembered, and for how long: a refusal (the URL will answer the same) and a
    /// transient failure (PayPal's retry should fetch again). A repeated bad URL then costs no
    /// fetch slot.
    pub failures_kept: usize,
    pub refused_for: Duration,
    pub transient_for: Duration,
    /// Fixed addresses for host names (reqwest's `resolve`): the host is still the one in the
    /// URL, for TLS and for the allowlist; only the lookup is skipped. For tests and private
    /// setups; empty normally.
    pub resolve: Vec<(String, SocketAddr)>,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            timeout: Duration::from_secs(5),
            max_body_bytes: 64 * 1024,
            cache_capacity: 32,
            max_concurrent_fetches: 8,
            max_waiting: 256,
            failures_kept: 1024,
            refused_for: Duration::from_secs(60),
            transient_for: Duration::from_secs(5),
            resolve: Vec::new(),
        }
    }
}

/// Why a fetch gave no certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum FetchError {
    /// A retry may succeed: the network, a timeout, PayPal answering 5xx, 429 or 408.
    Transient(String),
    /// The answer itself is wrong (a redirect, another status, too large, not PEM): the same
    /// URL will answer the same.
    Refused(Refusal),
}

/// The HTTPS client for certificate URLs.
#[derive(Clone)]
pub(super) struct Fetcher {
    http: Arc<Outbound<()>>,
    timeout: Duration,
    max_body_bytes: usize,
}

impl Fetcher {
    pub(super) fn new(
        roots: RootCertStore,
        limits: &FetchLimits,
        grants: Vec<((), Origin)>,
    ) -> Result<Self, String> {
        // Named rather than the process default: the build has one provider (ring), and a
        // default another crate installs must not change ours.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // No proxy, no redirect (the allowlist vetted this URL only; a redirect would take the
        // key from wherever the hop points), and a name resolved here with only its allowed
        // addresses connected to: a DNS answer pointing PayPal's name at an internal address
        // is refused (crate::outbound).
        let http = Outbound::new(grants, false, |builder| {
            let mut builder = builder
                .use_preconfigured_tls(tls.clone())
                .https_only(true)
                .connect_timeout(limits.connect_timeout)
                .timeout(limits.timeout)
                .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")));
            for (host, addr) in &limits.resolve {
                builder = builder.resolve(host, *addr);
            }
            builder
        })
        .map_err(|e| format!("HTTP client setup failed: {e}"))?;
        Ok(Self {
            http: Arc::new(http),
            timeout: limits.timeout,
            max_body_bytes: limits.max_body_bytes,
        })
    }

    /// GETs `url` and reads the PEM chain it serves.
    pub(super) async fn fetch(&self, url: Url) -> Result<Chain, FetchError> {
        // reqwest's timeout covers the body too; this one also bounds the chunk loop.
        let span = tracing::info_span!(
            target: crate::trace_switch::TRACE,
            "provider_fetch",
            otel.kind = "client",
            host = url.host_str().unwrap_or_default(),
        );
        let get = tracing::Instrument::instrument(self.get(url), span);
        match tokio::time::timeout(self.timeout, get).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Transient(format!(
                "no complete answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    async fn get(&self, url: Url) -> Result<Chain, FetchError> {
        let host = url.host_str().unwrap_or_default().to_owned();
        let http = self.http.client(&(), &url).map_err(|refused| {
            FetchError::Refused(Refusal {
                reason: "address not allowed",
                detail: format!("{host}: {refused}"),
            })
        })?;
        let response = http
            .get(url)
            .send()
            .await
            .map_err(|e| FetchError::Transient(format!("{host}: {}", error_chain(&e))))?;
        let status = response.status();
        if status != StatusCode::OK {
            return Err(classify(&host, status));
        }
        let too_large = || {
            FetchError::Refused(Refusal {
                reason: "too large",
                detail: format!("{host}: more than {} bytes", self.max_body_bytes),
            })
        };
        if response
            .content_length()
            .is_some_and(|len| len > self.max_body_bytes as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| FetchError::Transient(format!("{host}: {}", error_chain(&e))))?
        {
            if body.len() + chunk.len() > self.max_body_bytes {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        parse_pem(&body).map_err(FetchError::Refused)
    }
}

/// A non-200 answer: PayPal overloaded or down is worth a retry, anything else is not.
fn classify(host: &str, status: StatusCode) -> FetchError {
    let detail = format!("{host} answered {status}");
    if status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
    {
        FetchError::Transient(detail)
    } else if status.is_redirection() {
        FetchError::Refused(Refusal {
            reason: "redirect",
            detail: format!("{detail}; redirects are not followed"),
        })
    } else {
        FetchError::Refused(Refusal {
            reason: "unexpected status",
            detail,
        })
    }
}

/// reqwest's error with its causes (the DNS, TCP or TLS reason sits underneath).
fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
