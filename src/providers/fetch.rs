//! Asking a provider's API: the fetch step of the schemes whose deliveries do not carry the
//! truth (Mollie, GoCardless, Mercado Pago, and PayPal with `verify = "fetch"`). It is part of verification, so it runs before
//! the idempotency key is claimed and holds no database connection; it is bounded in time
//! (the provider's `fetch_timeout_ms` covers the wait for a slot, the connection and the whole
//! answer) and in concurrency (`fetch_concurrency` slots per provider and process). What the
//! API answers is sorted into what the gateway does with it: found, not found (a stored
//! rejection), unusable (larger than it reads, or not the resource: a stored rejection too),
//! a refused key (503 and an alert) or unavailable (503, the provider retries).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;

use prometheus::IntCounterVec;
use reqwest::StatusCode;
use tokio::sync::{Mutex, Semaphore};

use crate::config::providers::{FetchApi, OauthClient};
use crate::outbound::{self, Outbound};
use crate::signature::paypal::settings::roots;
use crate::signature::scheme::Rejection;

/// The most of an answer the gateway reads; a larger one is not read further (a provider's
/// payment is a few kilobytes).
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The result labels of `gateway_provider_fetches_total`.
pub const RESULTS: [&str; 5] = [
    "found",
    "not_found",
    "unusable",
    "unavailable",
    "key_refused",
];

/// The reason of an id the provider's API does not know (Mollie, GoCardless, Mercado Pago).
pub const UNKNOWN_RESOURCE: &str = "unknown_resource";

/// The reason of an answer the gateway cannot use: larger than it reads, or not the resource
/// asked for. The same answer comes on every retry, so it is a stored `rejected` (in front of
/// finance), never a 503 a provider would repeat for days.
pub const UNUSABLE_ANSWER: &str = "unusable_answer";

/// What the API said about a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// 200, with the answer's bytes.
    Found(Vec<u8>),
    /// 404 or 410: the API does not know it (a forged or foreign id).
    NotFound,
    /// 200 with an answer larger than [`MAX_ANSWER_BYTES`]: why it was not read.
    Unusable(String),
}

/// The fetch's HTTP clients: TLS through rustls with Mozilla's roots plus `extra_roots_pem` (an
/// emulator's CA), `timeout` for the whole request, no cookies, and what every outgoing client
/// has (crate::outbound): no proxy from the environment, no redirect followed (the answer must
/// come from the configured API), the host resolved by the gateway itself with loopback,
/// private, link-local and metadata addresses refused, the connection made to the checked
/// address. The provider's own allowlist is its `api_base_url`: an origin it names outright (an
/// IP address, `localhost`: an emulator the operator chose) is granted to this provider alone;
/// a name (`api.mollie.com`) always is checked.
pub fn api_client(
    base_url: &str,
    extra_roots_pem: Option<&str>,
    timeout: Duration,
) -> Result<Outbound<()>, String> {
    let roots = roots(extra_roots_pem.map(str::as_bytes)).map_err(|e| e.message)?;
    // Named rather than the process default: the build has one provider (ring), and a default
    // another crate installs must not change ours.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let grants = reqwest::Url::parse(base_url)
        .ok()
        .as_ref()
        .and_then(outbound::named_outright)
        .map(|origin| ((), origin));
    Outbound::new(grants, false, |builder| {
        builder
            .use_preconfigured_tls(tls.clone())
            .connect_timeout(timeout.min(Duration::from_secs(3)))
            .timeout(timeout)
            .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")))
    })
    .map_err(|e| format!("HTTP client setup failed: {e}"))
}

/// One provider's API, as its deliveries' verification asks it.
pub struct ProviderApi {
    provider: String,
    http: Outbound<()>,
    base_url: String,
    authorization: Authorization,
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
            authorization: Authorization::of(settings),
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
            Ok(Fetched::Unusable(_)) => "unusable",
            Err(Rejection::KeyRefused(_)) => "key_refused",
            Err(_) => "unavailable",
        };
        counter.with_label_values(&[&self.provider, label]).inc();
    }

    async fn get_in_slot(&self, path: &str) -> Result<Fetched, Rejection> {
        let _slot = self.slots.acquire().await.map_err(|_| {
            Rejection::Unavailable(format!("{}: fetch slots closed", self.provider))
        })?;
        let unavailable = |why: String| Rejection::Unavailable(format!("{}: {why}", self.provider));
        let url = reqwest::Url::parse(&format!("{}{path}", self.base_url))
            .map_err(|e| unavailable(format!("not a URL: {e}")))?;
        let mut response = self.send_get(&url, Renew::IfDue).await?;
        if matches!(
            response.status(),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
        ) && self.authorization.renews()
        {
            // A token can be revoked or expire early: one new one, then the answer stands.
            response = self.send_get(&url, Renew::Now).await?;
        }
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
        match read_bounded(response)
            .await
            .map_err(|e| unavailable(error_chain(&e)))?
        {
            Some(body) => Ok(Fetched::Found(body)),
            None => Ok(Fetched::Unusable(format!(
                "an answer of more than {MAX_ANSWER_BYTES} bytes"
            ))),
        }
    }

    /// The HTTP client for `url`, or why the outgoing rules refuse it.
    fn client_for(&self, url: &reqwest::Url) -> Result<&reqwest::Client, Rejection> {
        self.http
            .client(&(), url)
            .map_err(|refused| Rejection::Unavailable(format!("{}: {refused}", self.provider)))
    }

    async fn send_get(
        &self,
        url: &reqwest::Url,
        renew: Renew,
    ) -> Result<reqwest::Response, Rejection> {
        let authorization = self.authorization_header(renew).await?;
        let mut request = self
            .client_for(url)?
            .get(url.clone())
            .header("Authorization", authorization)
            .header("Accept", "application/json");
        for (name, value) in self.headers {
            request = request.header(*name, *value);
        }
        request
            .send()
            .await
            .map_err(|e| Rejection::Unavailable(format!("{}: {}", self.provider, error_chain(&e))))
    }

    /// The `Authorization` header of the next call: the key, or the client's token (a new
    /// one when the kept one is due, or when `renew` says now).
    async fn authorization_header(&self, renew: Renew) -> Result<String, Rejection> {
        let (client, basic, kept) = match &self.authorization {
            Authorization::Key(header) => return Ok(header.clone()),
            Authorization::Client {
                client,
                basic,
                token,
            } => (client, basic, token),
        };
        // One token request at a time: the calls waiting here take the token it brings.
        let mut kept = kept.lock().await;
        if let Some(token) = kept.as_ref()
            && renew == Renew::IfDue
            && Instant::now() < token.renew_at
        {
            return Ok(token.header.clone());
        }
        let token = self.new_token(client, basic).await?;
        let header = token.header.clone();
        *kept = Some(token);
        Ok(header)
    }

    /// A token for the client's credentials: `POST {base}{token_path}` with
    /// `grant_type=client_credentials` (OAuth 2.0, RFC 6749 section 4.4).
    async fn new_token(&self, client: &OauthClient, basic: &str) -> Result<Token, Rejection> {
        let unavailable = |why: String| Rejection::Unavailable(format!("{}: {why}", self.provider));
        let url = reqwest::Url::parse(&format!("{}{}", self.base_url, client.token_path))
            .map_err(|e| unavailable(format!("not a URL: {e}")))?;
        let response = self
            .client_for(&url)?
            .post(url)
            .header("Authorization", basic)
            .header("Accept", "application/json")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .map_err(|e| unavailable(error_chain(&e)))?;
        match response.status() {
            StatusCode::OK => {}
            // The client's id or secret is refused: ours to fix, an alert, never a rejection.
            status @ (StatusCode::BAD_REQUEST
            | StatusCode::UNAUTHORIZED
            | StatusCode::FORBIDDEN) => {
                return Err(Rejection::KeyRefused(format!(
                    "{} refused the client credentials ({status})",
                    self.provider
                )));
            }
            other => return Err(unavailable(format!("token request answered {other}"))),
        }
        let body = read_bounded(response)
            .await
            .map_err(|e| unavailable(error_chain(&e)))?
            .ok_or_else(|| unavailable("a token answer larger than it reads".into()))?;
        #[derive(serde::Deserialize)]
        struct Granted {
            access_token: String,
            #[serde(default)]
            expires_in: Option<u64>,
        }
        let granted: Granted = serde_json::from_slice(&body)
            .map_err(|e| unavailable(format!("the token answer is not a token: {e}")))?;
        if granted.access_token.is_empty()
            || !granted.access_token.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(unavailable("the token answer holds no usable token".into()));
        }
        // Renewed a minute early (a call in flight must not carry an expired one), and at
        // least every 8 hours (PayPal's tokens last 9).
        let lifetime = Duration::from_secs(granted.expires_in.unwrap_or(0).min(8 * 3600));
        Ok(Token {
            header: format!("Bearer {}", granted.access_token),
            renew_at: Instant::now() + lifetime.saturating_sub(Duration::from_secs(60)),
        })
    }
}

/// How the API's calls are authorised.
enum Authorization {
    /// The API key as a bearer token (Mollie, GoCardless, Mercado Pago): the whole header.
    Key(String),
    /// A token asked for with the client's credentials, kept until shortly before it expires
    /// (PayPal): `basic` is the token request's header.
    Client {
        client: OauthClient,
        basic: String,
        token: Mutex<Option<Token>>,
    },
}

impl Authorization {
    fn of(settings: &FetchApi) -> Self {
        match &settings.oauth_client {
            None => Authorization::Key(format!("Bearer {}", settings.api_key.expose())),
            Some(client) => Authorization::Client {
                basic: format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!(
                        "{}:{}",
                        client.client_id,
                        settings.api_key.expose()
                    ))
                ),
                client: client.clone(),
                token: Mutex::new(None),
            },
        }
    }

    /// Whether a refused call is worth one more with a new token.
    fn renews(&self) -> bool {
        matches!(self, Authorization::Client { .. })
    }
}

/// A bearer token and when to ask for the next one.
struct Token {
    header: String,
    renew_at: Instant,
}

/// Whether the next call takes the kept token while it lasts, or a new one now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renew {
    IfDue,
    Now,
}

/// The whole answer, or `None` when it is larger than [`MAX_ANSWER_BYTES`] (not read further).
async fn read_bounded(mut response: reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|len| len > MAX_ANSWER_BYTES as u64)
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
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
