//! Fetching a certificate: one HTTPS GET to a URL the allowlist passed, bounded in time and
//! size, no redirect followed, over TLS that trusts the same roots as the chain check.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use rustls::RootCertStore;
use url::Url;

use super::chain::{self, Chain, Refusal};

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
    http: reqwest::Client,
    timeout: Duration,
    max_body_bytes: usize,
}

impl Fetcher {
    pub(super) fn new(roots: RootCertStore, limits: &FetchLimits) -> Result<Self, String> {
        // Named rather than the process default: the build has one provider (ring), and a
        // default another crate installs must not change ours.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS setup failed: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut builder = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .https_only(true)
            // The allowlist vetted this URL only; a redirect would take the key from wherever
            // the hop points.
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(limits.connect_timeout)
            .timeout(limits.timeout)
            .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")));
        for (host, addr) in &limits.resolve {
            builder = builder.resolve(host, *addr);
        }
        let http = builder
            .build()
            .map_err(|e| format!("HTTP client setup failed: {e}"))?;
        Ok(Self {
            http,
            timeout: limits.timeout,
            max_body_bytes: limits.max_body_bytes,
        })
    }

    /// GETs `url` and reads the PEM chain it serves.
    pub(super) async fn fetch(&self, url: Url) -> Result<Chain, FetchError> {
        // reqwest's timeout covers the body too; this one also bounds the chunk loop.
        match tokio::time::timeout(self.timeout, self.get(url)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Transient(format!(
                "no complete answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }

    async fn get(&self, url: Url) -> Result<Chain, FetchError> {
        let host = url.host_str().unwrap_or_default().to_owned();
        let response = self
            .http
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
        chain::parse_pem(&body).map_err(FetchError::Refused)
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
