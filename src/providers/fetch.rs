//! Asking a provider's API: the fetch step of the schemes whose deliveries do not carry the
//! truth (Mollie, GoCardless, Mercado Pago). It is part of verification, so it runs before
//! the idempotency key is claimed and holds no database connection; it is bounded in time
//! (the provider's `fetch_timeout_ms` covers the wait for a slot, the connection and the whole
//! answer) and in concurrency (`fetch_concurrency` slots per provider and process). What the
//! API answers is sorted into what the gateway does with it: found, not found (a stored
//! rejection), a refused key (503 and an alert) or unavailable (503, the provider retries).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use reqwest::StatusCode;
use tokio::sync::Semaphore;

use crate::config::providers::FetchApi;
use crate::outbound::AddressPolicy;
use crate::signature::paypal::settings::roots;
use crate::signature::scheme::Rejection;

/// The most of an answer the gateway reads; a larger one is not read further (a provider's
/// payment is a few kilobytes).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The result labels of `gateway_provider_fetches_total`.
pub const RESULTS: [&str; 4] = ["found", "not_found", "unavailable", "key_refused"];

/// What the API said about a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// 200, with the answer's bytes.
    Found(Vec<u8>),
    /// 404 or 410: the API does not know it (a forged or foreign id).
    NotFound,
}

/// The one place the fetch's HTTP client is built: TLS through rustls with Mozilla's roots
/// plus `extra_roots_pem` (an emulator's CA), `timeout` for the whole request, no redirect
/// followed (the answer must come from the configured API, never from where a hop points), no
/// cookies, no proxy from the environment.
///
/// The outgoing-address rules of "Merchant endpoints by API" hold here too (crate::outbound):
/// the API's host is resolved by the client itself, loopback, private, link-local and metadata
/// addresses are refused, and the connection goes to the checked address. The provider's own
/// allowlist is its `api_base_url`: a host it names outright (an IP address, `localhost`: an
/// emulator the operator chose) is not checked; a name (`api.mollie.com`) always is, so a DNS
/// answer pointing it inside the network is refused.
pub fn api_client(
    base_url: &str,
    extra_roots_pem: Option<&str>,
    timeout: Duration,
) -> Result<reqwest::Client, String> {
    let roots = roots(extra_roots_pem.map(str::as_bytes)).map_err(|e| e.message)?;
    // Named rather than the process default: the build has one provider (ring), and a default
    // another crate installs must not change ours.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let named = reqwest::Url::parse(base_url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .filter(|host| {
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            bare.eq_ignore_ascii_case("localhost") || bare.parse::<std::net::IpAddr>().is_ok()
        });
    let policy = AddressPolicy::new(named, false);
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .dns_resolver(policy.resolver())
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(timeout.min(Duration::from_secs(3)))
        .timeout(timeout)
        .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("HTTP client setup failed: {e}"))
}

/// One provider's API, as its deliveries' verification asks it.
pub struct ProviderApi {
    provider: String,
    http: reqwest::Client,
    base_url: String,
    authorization: String,
    /// Headers the provider's API requires on every call (GoCardless's version).
    headers: &'static [(&'static str, &'static str)],
    timeout: Duration,
    slots: Arc<Semaphore>,
    fetches: Option<IntCounterVec>,
}

impl ProviderApi {
    /// The API of `provider` as `settings` configure it, sending `headers` on every call;
    /// `fetches` counts the answers by result (`gateway_provider_fetches_total`).
    pub fn new(
        provider: &str,
        settings: &FetchApi,
        headers: &'static [(&'static str, &'static str)],
        fetches: Option<IntCounterVec>,
    ) -> Result<Self, String> {
        let http = api_client(
            &settings.base_url,
            settings.extra_roots_pem.as_deref(),
            settings.timeout,
        )?;
        if let Some(counter) = &fetches {
            // Every result's series exists from the start, so an alert sees its first increase.
            for result in RESULTS {
                counter.with_label_values(&[provider, result]);
            }
        }
        Ok(Self {
            provider: provider.to_owned(),
            http,
            base_url: settings.base_url.clone(),
            authorization: format!("Bearer {}", settings.api_key.expose()),
            headers,
            timeout: settings.timeout,
            slots: Arc::new(Semaphore::new(settings.concurrency.max(1))),
            fetches,
        })
    }

    /// GETs `path` (which the caller built from checked ids only) under the whole bound.
    pub async fn get(&self, path: &str) -> Result<Fetched, Rejection> {
        let span = tracing::info_span!(
            target: crate::trace_switch::TRACE,
            "provider_fetch",
            otel.kind = "client",
            provider = %self.provider,
        );
        let bounded = tokio::time::timeout(self.timeout, self.get_in_slot(path));
        let result = match tracing::Instrument::instrument(bounded, span).await {
            Ok(result) => result,
            Err(_) => Err(Rejection::Unavailable(format!(
                "{}: no complete answer within {} ms",
                self.provider,
                self.timeout.as_millis()
            ))),
        };
        self.count(&result);
        if let Err(Rejection::KeyRefused(why)) = &result {
            // The alert's log line; the metric above is its series.
            tracing::error!(provider = %self.provider, %why, "provider API refused the configured api_key: fix api_key; deliveries are answered 503 meanwhile");
        }
        result
    }

    fn count(&self, result: &Result<Fetched, Rejection>) {
        let Some(counter) = &self.fetches else {
            return;
        };
        let label = match result {
            Ok(Fetched::Found(_)) => "found",
            Ok(Fetched::NotFound) => "not_found",
            Err(Rejection::KeyRefused(_)) => "key_refused",
            Err(_) => "unavailable",
        };
        counter.with_label_values(&[&self.provider, label]).inc();
    }

    async fn get_in_slot(&self, path: &str) -> Result<Fetched, Rejection> {
        let _slot = self.slots.acquire().await.map_err(|_| {
            Rejection::Unavailable(format!("{}: fetch slots closed", self.provider))
        })?;
        let url = format!("{}{path}", self.base_url);
        let mut request = self
            .http
            .get(&url)
            .header("Authorization", &self.authorization)
            .header("Accept", "application/json");
        for (name, value) in self.headers {
            request = request.header(*name, *value);
        }
        let unavailable = |why: String| Rejection::Unavailable(format!("{}: {why}", self.provider));
        let response = request
            .send()
            .await
            .map_err(|e| unavailable(error_chain(&e)))?;
        let status = response.status();
        match status {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND | StatusCode::GONE => return Ok(Fetched::NotFound),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                return Err(Rejection::KeyRefused(format!(
                    "{} answered {status}",
                    self.provider
                )));
            }
            // 5xx, 429, 408, a redirect (not followed) or anything else the provider should
            // not answer to a GET of a resource: nothing is decided on it, the provider
            // redelivers later.
            other => return Err(unavailable(format!("answered {other}"))),
        }
        if response
            .content_length()
            .is_some_and(|len| len > MAX_ANSWER_BYTES as u64)
        {
            return Err(unavailable(format!(
                "an answer of more than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| unavailable(error_chain(&e)))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(unavailable(format!(
                    "an answer of more than {MAX_ANSWER_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched::Found(body))
    }
}

/// The API of a fetch-verified provider's settings; `None` (logged) when its client cannot be
/// built after the configuration accepted it: every delivery is then a 503, never a 401.
pub fn api_of(
    settings: &crate::config::providers::ProviderSettings,
    headers: &'static [(&'static str, &'static str)],
    fetches: Option<&IntCounterVec>,
) -> Option<ProviderApi> {
    let api = settings.fetch_api.as_ref()?;
    ProviderApi::new(&settings.name, api, headers, fetches.cloned())
        .inspect_err(|error| {
            tracing::error!(%error, provider = %settings.name, "provider API client not built");
        })
        .ok()
}

/// The refusal of a delivery whose provider API has no client.
pub fn no_api() -> Rejection {
    Rejection::Unavailable("the provider API client could not be built from its settings".into())
}

/// An id that may stand in an API path: 1 to 64 ASCII letters, digits, `_` or `-` (no `/`,
/// `.`, `%` or `?` can reach the URL).
pub fn path_safe(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_may_stand_in_a_path() {
        assert!(path_safe("tr_WDqYK6vllg"));
        assert!(path_safe("PM000123"));
        assert!(path_safe("1234567890"));
        for bad in [
            "",
            "tr_1/../x",
            "a.b",
            "a%2F",
            "a?b",
            "a b",
            &"x".repeat(65),
        ] {
            assert!(!path_safe(bad), "{bad}");
        }
    }
}
