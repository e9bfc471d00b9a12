//! Settings: the TOML file plus `DATABASE_URL` / `GATEWAY_BIND` overrides, validated once at
//! startup. A bad setting becomes a [`ConfigError`] that names the field (exit code 2).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::secret::MIN_SECRET_BYTES;
pub use crate::secret::Secret;

/// The PEM files named by `[server] tls_cert` and `tls_key` (both set, or neither).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where the configuration file is looked for when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "gateway.toml";

/// A configuration problem, phrased as one line that names the offending field.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub idempotency: IdempotencySettings,
    pub ledger: LedgerSettings,
    pub admin: AdminSettings,
    pub providers: Vec<ProviderSettings>,
    pub refunds: RefundSettings,
    pub console: ConsoleSettings,
    /// `[[merchants]]`: the merchants that hear of their orders' changes.
    pub merchants: Vec<MerchantSettings>,
    pub notifications: NotificationSettings,
}

/// A merchant of `[[merchants]]`: its notification endpoint, if it has one.
#[derive(Debug, Clone)]
pub struct MerchantSettings {
    pub id: i64,
    /// `None`: the merchant gets no notifications.
    pub endpoint: Option<NotifyEndpoint>,
}

/// Where a merchant's notifications go and the Standard Webhooks secret that signs them.
#[derive(Debug, Clone)]
pub struct NotifyEndpoint {
    /// `https://`, or `http://` on a loopback address; never printed whole (its query may hold
    /// a token): see [`NotifyEndpoint::shown`].
    pub url: reqwest::Url,
    /// `whsec_` + base64, at least 16 bytes of key.
    pub secret: Secret,
}

impl NotifyEndpoint {
    /// The URL as it may be printed: scheme, host, port and path, without the query.
    pub fn shown(&self) -> String {
        let mut url = self.url.clone();
        let had_query = url.query().is_some();
        url.set_query(None);
        if had_query {
            format!("{url}?(query hidden)")
        } else {
            url.to_string()
        }
    }
}

/// Merchant notifications: how the sender in `serve` delivers them, and how long delivered
/// ones are kept.
#[derive(Debug, Clone)]
pub struct NotificationSettings {
    /// Delivered notifications are deleted this long after their delivery.
    pub retention: Duration,
    /// Failed notifications (every attempt of the schedule failed) are deleted this long after
    /// their last attempt: long enough for an operator to redeliver them, not forever.
    pub failed_retention: Duration,
    /// The most pending notifications a disabled endpoint's merchant keeps: beyond it the
    /// retention pass deletes the first due (the newest stay) and counts them on the endpoint.
    pub disabled_keep: u64,
    /// How fast the pending notifications of an endpoint that is enabled again come due, per
    /// second (they would otherwise all come due at once).
    pub release_per_sec: u64,
    /// Attempts one gateway has in flight at once, over all merchants.
    pub concurrency: usize,
    /// Attempts one gateway has in flight at once for one merchant, so a slow endpoint holds
    /// at most this many of the others' slots.
    pub per_merchant_concurrency: usize,
    /// Upper bound of one attempt (connect, request, answer); the contract's 15 s by default.
    pub attempt_timeout: Duration,
    /// The waits before the second, third... attempt (each +-20% jitter); after the last
    /// attempt a notification is failed. Tests shorten it.
    pub retry_delays: Vec<Duration>,
    /// How often a sender looks for due notifications it was not woken for (those staged by
    /// another gateway, retries coming due).
    pub poll_interval: Duration,
}

impl NotificationSettings {
    /// The contract's schedule after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
    pub const DEFAULT_RETRY_DELAYS_MS: [u64; 7] = [
        5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
    ];

    /// How long a claimed notification is kept from other senders: twice the attempt's bound,
    /// so a live attempt has finished and stored its result long before, and one of a sender
    /// that died is sent again within it (30 s by default, within the contract's 60 s).
    pub fn claim_lease(&self) -> Duration {
        self.attempt_timeout.saturating_mul(2)
    }

    /// The merchants whose notifications this gateway sends, with their endpoints.
    pub fn endpoints(
        merchants: &[MerchantSettings],
    ) -> impl Iterator<Item = (i64, &NotifyEndpoint)> {
        merchants
            .iter()
            .filter_map(|m| m.endpoint.as_ref().map(|e| (m.id, e)))
    }
}

/// The web console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// When the session cookie carries `Secure`.
    pub secure_cookie: SecureCookie,
}

/// When the console's session cookie carries `Secure` (a browser then sends it over HTTPS only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecureCookie {
    /// Always: the gateway serves TLS itself, or `[console] secure_cookie = true`.
    Always,
    /// Never: `[console] secure_cookie = false` (plain-HTTP setups, e.g. a laptop).
    Never,
    /// When the request arrived over HTTPS, as the TLS-terminating proxy says
    /// (`X-Forwarded-Proto: https` or `Forwarded: proto=https`): the default without TLS.
    WhenHttps,
}

impl SecureCookie {
    /// `[console] secure_cookie` when set; otherwise always under the gateway's own TLS, and
    /// per request behind a proxy.
    pub fn of(setting: Option<bool>, serves_tls: bool) -> Self {
        match (setting, serves_tls) {
            (Some(true), _) | (None, true) => SecureCookie::Always,
            (Some(false), _) => SecureCookie::Never,
            (None, false) => SecureCookie::WhenHttps,
        }
    }

    /// Whether a cookie set in answer to a request (`https`: it came over HTTPS) is `Secure`.
    pub fn applies(self, https: bool) -> bool {
        match self {
            SecureCookie::Always => true,
            SecureCookie::Never => false,
            SecureCookie::WhenHttps => https,
        }
    }
}

/// Merchant refunds (`refund.create`): the lease of a request and the provider call's bounds.
#[derive(Debug, Clone)]
pub struct RefundSettings {
    /// How long one attempt holds a request before another may take it over; longer than
    /// `provider_timeout`, so a live attempt never loses its lease while it waits.
    pub lease: Duration,
    /// How often the background recoverer looks for expired leases.
    pub recover_interval: Duration,
    /// Upper bound of one provider call, connect included.
    pub provider_timeout: Duration,
    pub provider_connect_timeout: Duration,
    /// No provider call for a request older than this (a person resolves it): below the
    /// providers' idempotency key lifetime (Stripe: 24 h), past which a call could refund twice.
    pub max_retry_age: Duration,
    /// A request the provider accepted whose refund webhook has not come after this is listed
    /// in `/admin/attention` (its amount stays reserved meanwhile).
    pub pending_overdue: Duration,
}

#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub bind: String,
    pub body_limit_bytes: usize,
    /// How long a same-key duplicate waits for the first request to commit.
    pub acquire_timeout: Duration,
    /// Worker threads; defaults to the number of cores.
    pub workers: usize,
    /// How long a client may take to send its body before the request is dropped.
    pub body_read_timeout: Duration,
    /// `Some`: serve HTTPS with these PEM files; `None`: plain HTTP behind a TLS proxy.
    pub tls: Option<TlsFiles>,
}

#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    /// Required by every command that touches the database; see [`Settings::database_url`].
    pub url: Option<Secret>,
    /// Connections for provider callbacks (the process's total, split over its workers).
    pub pool_size: u32,
    /// Connections for everything else: merchants' API, admin, readiness. Kept apart so that
    /// unauthenticated or merchant traffic never makes a provider callback wait.
    pub api_pool_size: u32,
    /// Capture batches one worker runs at once, each on one of its callback connections; the
    /// others stay free for the general path. One gives the largest batches.
    pub capture_batches_per_worker: u32,
    /// Upper bound of any one SQL statement, so a request never holds a connection forever.
    pub statement_timeout: Duration,
    /// How long a request waits for its commit (or a replay for its barrier) to be confirmed,
    /// by the synchronous standby when there is one, before it answers 503. The wait is given
    /// up by dropping the connection, never by cancelling it: a cancelled wait commits locally.
    pub commit_timeout: Duration,
    /// A standby for the read-only work (console, event log, export, reconcile, balances);
    /// `None`: they read from `url`. Callbacks, orders and refunds never read from it.
    pub replica_url: Option<Secret>,
}

impl DatabaseSettings {
    /// Where the read-only work reads: the replica when one is configured.
    pub fn read_url(&self) -> Option<&str> {
        self.replica_url
            .as_ref()
            .or(self.url.as_ref())
            .map(Secret::expose)
    }
}

/// The ledger's background work.
#[derive(Debug, Clone)]
pub struct LedgerSettings {
    /// How often the read caches move forward: balance checkpoints and the chart's per-minute
    /// counts (a read adds what came after them).
    pub checkpoint_interval: Duration,
}

#[derive(Debug, Clone)]
pub struct IdempotencySettings {
    /// Lifetime of `order.create` records.
    pub ttl: Duration,
    pub cleanup_interval: Duration,
    pub cleanup_batch_size: i64,
}

#[derive(Debug, Clone, Default)]
pub struct AdminSettings {
    /// `None` disables the admin endpoints (every call is 401).
    pub token: Option<Secret>,
}

/// A payment provider that may post callbacks to `/v1/callbacks/{name}`.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    pub name: String,
    pub scheme: SchemeName,
    pub payload: PayloadFormat,
    pub merchant_id: i64,
    pub secrets: Vec<Secret>,
    pub tolerance: Duration,
    pub retry_window: Duration,
    /// Lifetime of this provider's `payment.callback` records; longer than `retry_window`.
    pub ttl: Duration,
    /// The provider's refund API; `None`: refunds of its payments are not refundable here.
    pub refund_api: Option<RefundApi>,
    /// A sandbox account (`test = true`): `send-test-event` may post samples for it. Unset, the
    /// provider may be live, and a sample capture would move a real merchant's books.
    pub test: bool,
    /// Whether this provider's merchant has a notification endpoint (`[[merchants]]`): its
    /// changes then stage notifications.
    pub notifies: bool,
    /// Square: the notification URL exactly as registered at Square (part of what it signs).
    pub notification_url: Option<String>,
    /// PayPal: the receiving webhook's id and where its certificates may come from.
    pub paypal: Option<PaypalProviderSettings>,
}

/// What a PayPal provider verifies with (it has no secrets: PayPal signs with its certificate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaypalProviderSettings {
    /// The receiving endpoint's own webhook id at PayPal, part of the signed string.
    pub webhook_id: String,
    /// Hosts a `PAYPAL-CERT-URL` may name: each one itself or any host under it.
    pub cert_url_hosts: Vec<String>,
    /// Extra trusted roots (PEM), from `ca_file`: tests and private setups.
    pub extra_roots_pem: Option<String>,
}

/// Where and how the gateway calls a provider's refund API.
#[derive(Debug, Clone)]
pub struct RefundApi {
    /// `https://`, or `http://` on a loopback address; no trailing slash.
    pub base_url: String,
    pub api_key: Secret,
}

/// The signature schemes (one file each under `providers/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemeName {
    StandardWebhooks,
    Stripe,
    HmacSha256,
    Adyen,
    Square,
    Razorpay,
    Checkout,
    Paddle,
    Paypal,
}

/// The payload formats: how a body maps onto the gateway's payment events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadFormat {
    Canonical,
    Stripe,
    Adyen,
    Square,
    Razorpay,
    Checkout,
    Paddle,
    Paypal,
}

impl SchemeName {
    /// Every scheme, in the order the configuration's error messages list them.
    pub const ALL: [SchemeName; 9] = [
        SchemeName::StandardWebhooks,
        SchemeName::Stripe,
        SchemeName::HmacSha256,
        SchemeName::Adyen,
        SchemeName::Square,
        SchemeName::Razorpay,
        SchemeName::Checkout,
        SchemeName::Paddle,
        SchemeName::Paypal,
    ];

    /// The name as the configuration file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SchemeName::StandardWebhooks => "standard-webhooks",
            SchemeName::Stripe => "stripe",
            SchemeName::HmacSha256 => "hmac-sha256",
            SchemeName::Adyen => "adyen",
            SchemeName::Square => "square",
            SchemeName::Razorpay => "razorpay",
            SchemeName::Checkout => "checkout",
            SchemeName::Paddle => "paddle",
            SchemeName::Paypal => "paypal",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The format `payload` defaults to: the provider's own where it has one, else canonical.
    pub fn own_payload(self) -> PayloadFormat {
        match self {
            SchemeName::StandardWebhooks | SchemeName::HmacSha256 => PayloadFormat::Canonical,
            SchemeName::Stripe => PayloadFormat::Stripe,
            SchemeName::Adyen => PayloadFormat::Adyen,
            SchemeName::Square => PayloadFormat::Square,
            SchemeName::Razorpay => PayloadFormat::Razorpay,
            SchemeName::Checkout => PayloadFormat::Checkout,
            SchemeName::Paddle => PayloadFormat::Paddle,
            SchemeName::Paypal => PayloadFormat::Paypal,
        }
    }

    /// Whether the scheme signs any payload (the three generic ones: canonical or Stripe), or
    /// only its provider's own, whose fields the signature or the event id is part of.
    fn takes_any_payload(self) -> bool {
        matches!(
            self,
            SchemeName::StandardWebhooks | SchemeName::Stripe | SchemeName::HmacSha256
        )
    }

    /// The provider's published retry window, `retry_window_hours`' default (the fixtures'
    /// README lists them): Adyen retries for 30 days, Stripe, PayPal and Paddle for 3,
    /// Razorpay for 24 hours, Checkout.com for about 30. Square's current pages say 24 hours
    /// and older ones 72: the longer is taken, since a record that outlives the window costs
    /// only storage, and one that does not lets a late retry be processed as new.
    pub fn default_retry_window_hours(self) -> u64 {
        match self {
            SchemeName::Adyen => 720,
            SchemeName::Razorpay => 24,
            SchemeName::Checkout => 30,
            SchemeName::StandardWebhooks
            | SchemeName::Stripe
            | SchemeName::HmacSha256
            | SchemeName::Square
            | SchemeName::Paddle
            | SchemeName::Paypal => 72,
        }
    }
}

impl PayloadFormat {
    const ALL: [PayloadFormat; 8] = [
        PayloadFormat::Canonical,
        PayloadFormat::Stripe,
        PayloadFormat::Adyen,
        PayloadFormat::Square,
        PayloadFormat::Razorpay,
        PayloadFormat::Checkout,
        PayloadFormat::Paddle,
        PayloadFormat::Paypal,
    ];

    /// The name as the configuration file writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            PayloadFormat::Canonical => "canonical",
            PayloadFormat::Stripe => "stripe",
            PayloadFormat::Adyen => "adyen",
            PayloadFormat::Square => "square",
            PayloadFormat::Razorpay => "razorpay",
            PayloadFormat::Checkout => "checkout",
            PayloadFormat::Paddle => "paddle",
            PayloadFormat::Paypal => "paypal",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

// The file as written; every section and field is optional so defaults apply.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    database: RawDatabase,
    #[serde(default)]
    idempotency: RawIdempotency,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    providers: Vec<RawProvider>,
    #[serde(default)]
    refunds: RawRefunds,
    #[serde(default)]
    console: RawConsole,
    #[serde(default)]
    ledger: RawLedger,
    #[serde(default)]
    merchants: Vec<RawMerchant>,
    #[serde(default)]
    notifications: RawNotifications,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMerchant {
    id: Option<i64>,
    notify_url: Option<String>,
    notify_secret: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotifications {
    retention_hours: Option<u64>,
    failed_retention_hours: Option<u64>,
    disabled_keep: Option<u64>,
    release_per_sec: Option<u64>,
    concurrency: Option<u64>,
    per_merchant_concurrency: Option<u64>,
    attempt_timeout_ms: Option<u64>,
    retry_delays_ms: Option<Vec<u64>>,
    poll_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLedger {
    checkpoint_interval_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConsole {
    secure_cookie: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRefunds {
    lease_secs: Option<u64>,
    recover_interval_secs: Option<u64>,
    provider_timeout_ms: Option<u64>,
    provider_connect_timeout_ms: Option<u64>,
    max_retry_age_hours: Option<u64>,
    pending_attention_hours: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    bind: Option<String>,
    body_limit_bytes: Option<usize>,
    acquire_timeout_ms: Option<u64>,
    workers: Option<usize>,
    body_read_timeout_ms: Option<u64>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: Option<String>,
    pool_size: Option<u32>,
    api_pool_size: Option<u32>,
    capture_batches_per_worker: Option<u32>,
    statement_timeout_ms: Option<u64>,
    commit_timeout_ms: Option<u64>,
    replica_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdempotency {
    ttl_hours: Option<u64>,
    cleanup_interval_secs: Option<u64>,
    cleanup_batch_size: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    name: Option<String>,
    scheme: Option<String>,
    payload: Option<String>,
    merchant_id: Option<i64>,
    #[serde(default)]
    secrets: Vec<String>,
    tolerance_secs: Option<u64>,
    retry_window_hours: Option<u64>,
    ttl_hours: Option<u64>,
    api_base_url: Option<String>,
    api_key: Option<String>,
    test: Option<bool>,
    notification_url: Option<String>,
    webhook_id: Option<String>,
    cert_url_hosts: Option<Vec<String>>,
    ca_file: Option<PathBuf>,
}

/// Reads the environment; a seam so tests can load settings without touching the process env.
pub trait Environment {
    fn var(&self, name: &str) -> Option<String>;
}

/// The real process environment.
pub struct ProcessEnv;

impl Environment for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Settings {
    /// The database URL, for the commands that need one.
    pub fn database_url(&self) -> Result<&str, ConfigError> {
        self.database
            .url
            .as_ref()
            .map(Secret::expose)
            .ok_or_else(|| {
                ConfigError(
                    "database.url is not set (set it in the config file or DATABASE_URL)".into(),
                )
            })
    }

    /// Where the read-only commands (export, reconcile) read: `[database] replica_url`, else
    /// the database URL.
    pub fn read_database_url(&self) -> Result<&str, ConfigError> {
        match &self.database.replica_url {
            Some(url) => Ok(url.expose()),
            None => self.database_url(),
        }
    }

    /// Loads the file (`explicit` path, or `gateway.toml` if it exists) and applies env overrides.
    pub fn load(explicit: Option<&Path>, env: &dyn Environment) -> Result<Self, ConfigError> {
        let text = match explicit {
            Some(path) => Some(read_file(path)?),
            None => {
                let default = PathBuf::from(DEFAULT_CONFIG_PATH);
                default.exists().then(|| read_file(&default)).transpose()?
            }
        };
        Self::from_toml(text.as_deref().unwrap_or(""), env)
    }

    /// Parses and validates a TOML document, then applies env overrides.
    pub fn from_toml(text: &str, env: &dyn Environment) -> Result<Self, ConfigError> {
        let raw: RawSettings = toml::from_str(text).map_err(|e| {
            ConfigError(format!("invalid configuration: {}", e.message().trim_end()))
        })?;
        validate(raw, env)
    }
}

fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read config file {}: {e}", path.display())))
}

fn validate(raw: RawSettings, env: &dyn Environment) -> Result<Settings, ConfigError> {
    let bind = env
        .var("GATEWAY_BIND")
        .or(raw.server.bind)
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let body_limit_bytes = raw.server.body_limit_bytes.unwrap_or(1024 * 1024);
    positive("server.body_limit_bytes", body_limit_bytes as u64)?;
    let acquire_timeout_ms = raw.server.acquire_timeout_ms.unwrap_or(3000);
    within("server.acquire_timeout_ms", acquire_timeout_ms, 1, 60_000)?;
    let workers = raw.server.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    });
    positive("server.workers", workers as u64)?;
    let body_read_timeout_ms = raw.server.body_read_timeout_ms.unwrap_or(10_000);
    positive("server.body_read_timeout_ms", body_read_timeout_ms)?;
    // Only the pairing is checked here; the files are read by `tls::server_config`, which
    // `serve` and `check-config` call (a `migrate` job need not see the private key).
    let tls = match (raw.server.tls_cert, raw.server.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        (None, None) => None,
        (Some(_), None) => {
            return Err(ConfigError(
                "server.tls_key is required when server.tls_cert is set (set both for HTTPS, or neither)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(ConfigError(
                "server.tls_cert is required when server.tls_key is set (set both for HTTPS, or neither)".into(),
            ));
        }
    };

    let url = env.var("DATABASE_URL").or(raw.database.url);
    for (field, url) in [
        ("database.url", &url),
        ("database.replica_url", &raw.database.replica_url),
    ] {
        if let Some(url) = url {
            check_database_url(field, url)?;
        }
    }
    let pool_size = raw.database.pool_size.unwrap_or(16);
    within("database.pool_size", u64::from(pool_size), 1, 1000)?;
    let api_pool_size = raw.database.api_pool_size.unwrap_or(4);
    within("database.api_pool_size", u64::from(api_pool_size), 1, 1000)?;
    let capture_batches_per_worker = raw.database.capture_batches_per_worker.unwrap_or(1);
    within(
        "database.capture_batches_per_worker",
        u64::from(capture_batches_per_worker),
        1,
        1000,
    )?;
    let statement_timeout_ms = raw.database.statement_timeout_ms.unwrap_or(10_000);
    positive("database.statement_timeout_ms", statement_timeout_ms)?;
    let commit_timeout_ms = raw.database.commit_timeout_ms.unwrap_or(5_000);
    within("database.commit_timeout_ms", commit_timeout_ms, 1, 600_000)?;

    let ttl_hours = raw.idempotency.ttl_hours.unwrap_or(72);
    within("idempotency.ttl_hours", ttl_hours, 1, MAX_HOURS)?;
    let cleanup_interval_secs = raw.idempotency.cleanup_interval_secs.unwrap_or(60);
    positive("idempotency.cleanup_interval_secs", cleanup_interval_secs)?;
    let cleanup_batch_size = raw.idempotency.cleanup_batch_size.unwrap_or(5000);
    if cleanup_batch_size <= 0 {
        return Err(ConfigError(
            "idempotency.cleanup_batch_size must be greater than 0".into(),
        ));
    }

    let admin_token = raw
        .admin
        .token
        .map(|t| resolve_secret("admin.token", &t, env))
        .transpose()?;
    if let Some(token) = &admin_token {
        long_enough("admin.token", token.expose().len())?;
    }

    let mut providers: Vec<ProviderSettings> = Vec::with_capacity(raw.providers.len());
    for (index, provider) in raw.providers.into_iter().enumerate() {
        let provider = validate_provider(index, provider, env)?;
        if providers.iter().any(|p| p.name == provider.name) {
            return Err(ConfigError(format!(
                "providers[{index}].name: duplicate provider name {:?}",
                provider.name
            )));
        }
        providers.push(provider);
    }

    let merchants = validate_merchants(raw.merchants, env)?;
    for provider in &mut providers {
        provider.notifies =
            NotificationSettings::endpoints(&merchants).any(|(id, _)| id == provider.merchant_id);
    }
    let notifications = validate_notifications(raw.notifications)?;
    let refunds = validate_refunds(raw.refunds)?;
    let checkpoint_interval_secs = raw.ledger.checkpoint_interval_secs.unwrap_or(1);
    within(
        "ledger.checkpoint_interval_secs",
        checkpoint_interval_secs,
        1,
        86_400,
    )?;
    let ledger = LedgerSettings {
        checkpoint_interval: Duration::from_secs(checkpoint_interval_secs),
    };
    let console = ConsoleSettings {
        secure_cookie: SecureCookie::of(raw.console.secure_cookie, tls.is_some()),
    };

    Ok(Settings {
        server: ServerSettings {
            bind,
            body_limit_bytes,
            acquire_timeout: Duration::from_millis(acquire_timeout_ms),
            workers,
            body_read_timeout: Duration::from_millis(body_read_timeout_ms),
            tls,
        },
        database: DatabaseSettings {
            url: url.map(Secret::new),
            pool_size,
            api_pool_size,
            capture_batches_per_worker,
            statement_timeout: Duration::from_millis(statement_timeout_ms),
            commit_timeout: Duration::from_millis(commit_timeout_ms),
            replica_url: raw.database.replica_url.map(Secret::new),
        },
        idempotency: IdempotencySettings {
            ttl: hours(ttl_hours),
            cleanup_interval: Duration::from_secs(cleanup_interval_secs),
            cleanup_batch_size,
        },
        admin: AdminSettings { token: admin_token },
        providers,
        refunds,
        console,
        ledger,
        merchants,
        notifications,
    })
}

/// `[[merchants]]`: ids unique and positive; `notify_url` and `notify_secret` both or neither.
fn validate_merchants(
    raw: Vec<RawMerchant>,
    env: &dyn Environment,
) -> Result<Vec<MerchantSettings>, ConfigError> {
    let mut merchants: Vec<MerchantSettings> = Vec::with_capacity(raw.len());
    for (index, merchant) in raw.into_iter().enumerate() {
        let field = |name: &str| format!("merchants[{index}].{name}");
        let id = merchant
            .id
            .ok_or_else(|| ConfigError(format!("{} is required", field("id"))))?;
        if id <= 0 {
            return Err(ConfigError(format!(
                "{} must be greater than 0",
                field("id")
            )));
        }
        if merchants.iter().any(|m| m.id == id) {
            return Err(ConfigError(format!(
                "{}: merchant {id} is listed twice",
                field("id")
            )));
        }
        let endpoint = match (merchant.notify_url, merchant.notify_secret) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError(format!(
                    "{} is required when notify_url is set",
                    field("notify_secret")
                )));
            }
            (None, Some(_)) => {
                return Err(ConfigError(format!(
                    "{} is required when notify_secret is set",
                    field("notify_url")
                )));
            }
            (Some(url), Some(secret)) => {
                let url = outbound_url(&field("notify_url"), &url, true)?;
                let name = field("notify_secret");
                let secret = resolve_secret(&name, &secret, env)?;
                let key = secret.standard_webhooks_key().ok_or_else(|| {
                    ConfigError(format!(
                        "{name}: a Standard Webhooks secret is whsec_ followed by base64"
                    ))
                })?;
                long_enough(&name, key.len())?;
                Some(NotifyEndpoint { url, secret })
            }
        };
        merchants.push(MerchantSettings { id, endpoint });
    }
    Ok(merchants)
}

fn validate_notifications(raw: RawNotifications) -> Result<NotificationSettings, ConfigError> {
    let retention_hours = raw.retention_hours.unwrap_or(168);
    within(
        "notifications.retention_hours",
        retention_hours,
        1,
        MAX_HOURS,
    )?;
    let failed_retention_hours = raw.failed_retention_hours.unwrap_or(720);
    within(
        "notifications.failed_retention_hours",
        failed_retention_hours,
        1,
        MAX_HOURS,
    )?;
    let disabled_keep = raw.disabled_keep.unwrap_or(100_000);
    within("notifications.disabled_keep", disabled_keep, 1, 10_000_000)?;
    let release_per_sec = raw.release_per_sec.unwrap_or(100);
    within("notifications.release_per_sec", release_per_sec, 1, 100_000)?;
    let concurrency = raw.concurrency.unwrap_or(64);
    within("notifications.concurrency", concurrency, 1, 1000)?;
    let per_merchant = raw.per_merchant_concurrency.unwrap_or(8);
    within(
        "notifications.per_merchant_concurrency",
        per_merchant,
        1,
        concurrency,
    )?;
    // The contract bounds an attempt by 15 s; the setting may only shorten it (tests do).
    let attempt_timeout_ms = raw.attempt_timeout_ms.unwrap_or(15_000);
    within(
        "notifications.attempt_timeout_ms",
        attempt_timeout_ms,
        100,
        15_000,
    )?;
    let delays = raw
        .retry_delays_ms
        .unwrap_or_else(|| NotificationSettings::DEFAULT_RETRY_DELAYS_MS.to_vec());
    within(
        "notifications.retry_delays_ms (its length)",
        delays.len() as u64,
        1,
        20,
    )?;
    for (i, delay) in delays.iter().enumerate() {
        // A week at most: beyond it the endpoint is disabled long before (5 days).
        within(
            &format!("notifications.retry_delays_ms[{i}]"),
            *delay,
            1,
            7 * 24 * 3_600_000,
        )?;
    }
    // A dead sender's claim passes after twice the attempt timeout; with this poll the row is
    // sent again within the contract's 60 s.
    let poll_interval_ms = raw.poll_interval_ms.unwrap_or(1000);
    within(
        "notifications.poll_interval_ms",
        poll_interval_ms,
        10,
        30_000,
    )?;
    Ok(NotificationSettings {
        retention: hours(retention_hours),
        failed_retention: hours(failed_retention_hours),
        disabled_keep,
        release_per_sec,
        concurrency: concurrency as usize,
        per_merchant_concurrency: per_merchant as usize,
        attempt_timeout: Duration::from_millis(attempt_timeout_ms),
        retry_delays: delays.into_iter().map(Duration::from_millis).collect(),
        poll_interval: Duration::from_millis(poll_interval_ms),
    })
}

/// A URL the gateway calls out to: `https://`, or `http://` only on a loopback address; no
/// `user:password@`, no fragment, and a query only when `query_allowed`. Errors never repeat
/// the value (until it is known to carry no userinfo, it may hold a password).
fn outbound_url(
    field: &str,
    value: &str,
    query_allowed: bool,
) -> Result<reqwest::Url, ConfigError> {
    let parsed =
        reqwest::Url::parse(value).map_err(|e| ConfigError(format!("{field}: not a URL: {e}")))?;
    // A password in the URL would reach every log line that names it (reqwest's errors quote
    // the URL); credentials belong in secrets, which are never logged.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(ConfigError(format!(
            "{field}: must not carry user:password@"
        )));
    }
    if value.len() > 2048 {
        return Err(ConfigError(format!("{field}: longer than 2048 characters")));
    }
    let host = parsed.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let allowed = match parsed.scheme() {
        "https" => parsed.host().is_some(),
        "http" => loopback,
        _ => false,
    };
    let query_ok = query_allowed || parsed.query().is_none();
    if !allowed || !query_ok || parsed.fragment().is_some() {
        let query = if query_allowed { "" } else { " without query" };
        return Err(ConfigError(format!(
            "{field}: must be an https:// URL{query} (http:// only on 127.0.0.0/8, ::1 or localhost)"
        )));
    }
    Ok(parsed)
}

/// A PostgreSQL URL the driver can read, refused here rather than at the first connection;
/// the driver's message names the parameter, never its value, and the URL itself is not
/// repeated (it may hold a password).
fn check_database_url(field: &str, url: &str) -> Result<(), ConfigError> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(ConfigError(format!("{field} must be a postgres:// URL")));
    }
    let (driver_url, tls) =
        crate::db::tls::split(url).map_err(|e| ConfigError(format!("{field}: {e}")))?;
    driver_url.parse::<tokio_postgres::Config>().map_err(|e| {
        ConfigError(format!(
            "{field}: the PostgreSQL driver cannot read it: {e}"
        ))
    })?;
    // Reads sslrootcert now: a missing or bad file stops startup, not every connection.
    tls.connector()
        .map_err(|e| ConfigError(format!("{field}: {e}")))?;
    Ok(())
}

fn validate_refunds(raw: RawRefunds) -> Result<RefundSettings, ConfigError> {
    let lease_secs = raw.lease_secs.unwrap_or(30);
    within("refunds.lease_secs", lease_secs, 1, 3600)?;
    let recover_interval_secs = raw.recover_interval_secs.unwrap_or(10);
    within(
        "refunds.recover_interval_secs",
        recover_interval_secs,
        1,
        3600,
    )?;
    let timeout_ms = raw.provider_timeout_ms.unwrap_or(10_000);
    within("refunds.provider_timeout_ms", timeout_ms, 1, 600_000)?;
    let connect_ms = raw
        .provider_connect_timeout_ms
        .unwrap_or_else(|| timeout_ms.min(3000));
    within(
        "refunds.provider_connect_timeout_ms",
        connect_ms,
        1,
        timeout_ms,
    )?;
    // A holder still waiting for the provider must never find its lease taken over.
    if lease_secs.saturating_mul(1000) <= timeout_ms {
        return Err(ConfigError(format!(
            "refunds.lease_secs: {lease_secs} s must be greater than the provider call's total timeout \
             (refunds.provider_timeout_ms = {timeout_ms} ms), or a live attempt could lose its lease"
        )));
    }
    // Stripe forgets an idempotency key about 24 hours after its first use: a call after that
    // with the same key may create a second refund.
    let max_retry_age_hours = raw.max_retry_age_hours.unwrap_or(20);
    within("refunds.max_retry_age_hours", max_retry_age_hours, 1, 23)?;
    let pending_attention_hours = raw.pending_attention_hours.unwrap_or(24);
    within(
        "refunds.pending_attention_hours",
        pending_attention_hours,
        1,
        720,
    )?;
    Ok(RefundSettings {
        lease: Duration::from_secs(lease_secs),
        recover_interval: Duration::from_secs(recover_interval_secs),
        provider_timeout: Duration::from_millis(timeout_ms),
        provider_connect_timeout: Duration::from_millis(connect_ms),
        max_retry_age: hours(max_retry_age_hours),
        pending_overdue: hours(pending_attention_hours),
    })
}

/// `api_base_url` and `api_key` of a provider: both or neither; `https://` except on loopback.
fn validate_refund_api(
    field: &dyn Fn(&str) -> String,
    base_url: Option<String>,
    api_key: Option<String>,
    env: &dyn Environment,
) -> Result<Option<RefundApi>, ConfigError> {
    let (base_url, api_key) = match (base_url, api_key) {
        (None, None) => return Ok(None),
        (Some(url), Some(key)) => (url, key),
        (Some(_), None) => {
            return Err(ConfigError(format!(
                "{} is required when api_base_url is set",
                field("api_key")
            )));
        }
        (None, Some(_)) => {
            return Err(ConfigError(format!(
                "{} is required when api_key is set",
                field("api_base_url")
            )));
        }
    };
    outbound_url(&field("api_base_url"), &base_url, false)?;
    let api_key = resolve_secret(&field("api_key"), &api_key, env)?;
    Ok(Some(RefundApi {
        base_url: base_url.trim_end_matches('/').to_owned(),
        api_key,
    }))
}

fn validate_provider(
    index: usize,
    raw: RawProvider,
    env: &dyn Environment,
) -> Result<ProviderSettings, ConfigError> {
    let field = |name: &str| format!("providers[{index}].{name}");
    let name = raw
        .name
        .ok_or_else(|| ConfigError(format!("{} is required", field("name"))))?;
    let valid_name = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !valid_name {
        return Err(ConfigError(format!(
            "{}: {name:?} must be 1 to 64 characters of a-z, 0-9, '-' or '_' (it is a URL segment)",
            field("name")
        )));
    }
    let scheme = match raw.scheme.as_deref() {
        Some(name) => SchemeName::parse(name).ok_or_else(|| {
            let known: Vec<&str> = SchemeName::ALL.iter().map(|s| s.as_str()).collect();
            ConfigError(format!(
                "{}: unknown scheme {name:?} ({})",
                field("scheme"),
                known.join(", ")
            ))
        })?,
        None => return Err(ConfigError(format!("{} is required", field("scheme")))),
    };
    let payload = match raw.payload.as_deref() {
        None => scheme.own_payload(),
        Some(name) => PayloadFormat::parse(name).ok_or_else(|| {
            let known: Vec<&str> = PayloadFormat::ALL.iter().map(|f| f.as_str()).collect();
            ConfigError(format!(
                "{}: unknown payload format {name:?} ({})",
                field("payload"),
                known.join(", ")
            ))
        })?,
    };
    let generic = matches!(payload, PayloadFormat::Canonical | PayloadFormat::Stripe);
    if scheme.takes_any_payload() != generic || (!generic && payload != scheme.own_payload()) {
        return Err(ConfigError(format!(
            "{}: scheme {} reads {}, not {}",
            field("payload"),
            scheme.as_str(),
            if scheme.takes_any_payload() {
                "canonical or stripe payloads".to_owned()
            } else {
                format!(
                    "only its own payload ({}): its signature or event id is part of it",
                    scheme.own_payload().as_str()
                )
            },
            payload.as_str()
        )));
    }
    let merchant_id = raw
        .merchant_id
        .ok_or_else(|| ConfigError(format!("{} is required", field("merchant_id"))))?;
    if merchant_id <= 0 {
        return Err(ConfigError(format!(
            "{} must be greater than 0",
            field("merchant_id")
        )));
    }
    if scheme == SchemeName::Paypal && !raw.secrets.is_empty() {
        return Err(ConfigError(format!(
            "{}: scheme paypal takes no secrets (PayPal signs with its certificate; set webhook_id)",
            field("secrets")
        )));
    }
    if scheme != SchemeName::Paypal && raw.secrets.is_empty() {
        return Err(ConfigError(format!(
            "{} needs at least one secret",
            field("secrets")
        )));
    }
    let mut secrets = Vec::with_capacity(raw.secrets.len());
    for (i, secret) in raw.secrets.iter().enumerate() {
        let name = format!("providers[{index}].secrets[{i}]");
        let secret = resolve_secret(&name, secret, env)?;
        let key_len = match scheme {
            SchemeName::StandardWebhooks => secret
                .standard_webhooks_key()
                .ok_or_else(|| {
                    ConfigError(format!(
                        "{name}: a standard-webhooks secret is whsec_ followed by base64"
                    ))
                })?
                .len(),
            // Adyen's HMAC key is 64 hex characters, used hex-decoded (32 bytes).
            SchemeName::Adyen => {
                let text = secret.expose();
                if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(ConfigError(format!(
                        "{name}: an adyen secret is the HMAC key of 64 hex characters"
                    )));
                }
                32
            }
            SchemeName::Stripe
            | SchemeName::HmacSha256
            | SchemeName::Square
            | SchemeName::Razorpay
            | SchemeName::Checkout
            | SchemeName::Paddle
            | SchemeName::Paypal => secret.expose().len(),
        };
        long_enough(&name, key_len)?;
        secrets.push(secret);
    }
    let tolerance_secs = raw.tolerance_secs.unwrap_or(300);
    within(&field("tolerance_secs"), tolerance_secs, 1, 3600)?;
    let retry_window_hours = raw
        .retry_window_hours
        .unwrap_or_else(|| scheme.default_retry_window_hours());
    within(
        &field("retry_window_hours"),
        retry_window_hours,
        1,
        MAX_HOURS,
    )?;
    // A week, or two days past a longer retry window (Adyen's 30 days): the record outlives
    // every retry.
    let ttl_hours = raw
        .ttl_hours
        .unwrap_or_else(|| (retry_window_hours + 48).max(168));
    within(&field("ttl_hours"), ttl_hours, 1, MAX_HOURS)?;
    if ttl_hours <= retry_window_hours {
        return Err(ConfigError(format!(
            "{}: {ttl_hours} must be greater than retry_window_hours ({retry_window_hours}) of provider {name:?}, \
             or a late retry would be processed as new",
            field("ttl_hours")
        )));
    }
    if !generic && raw.api_base_url.is_some() {
        return Err(ConfigError(format!(
            "{}: merchant refunds call canonical or Stripe refund APIs only; scheme {} has none here",
            field("api_base_url"),
            scheme.as_str()
        )));
    }
    let refund_api = validate_refund_api(&field, raw.api_base_url, raw.api_key, env)?;
    let notification_url = match (scheme, raw.notification_url) {
        (SchemeName::Square, Some(url)) => {
            // Used byte for byte in the signed content, so it is not normalised in any way.
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err(ConfigError(format!(
                    "{}: must be the URL registered at Square, exactly as registered (https://...)",
                    field("notification_url")
                )));
            }
            Some(url)
        }
        (SchemeName::Square, None) => {
            return Err(ConfigError(format!(
                "{} is required for scheme square: Square signs it with the body",
                field("notification_url")
            )));
        }
        (_, Some(_)) => {
            return Err(ConfigError(format!(
                "{} is only for scheme square",
                field("notification_url")
            )));
        }
        (_, None) => None,
    };
    let paypal = validate_paypal(
        &field,
        scheme,
        raw.webhook_id,
        raw.cert_url_hosts,
        raw.ca_file,
    )?;
    Ok(ProviderSettings {
        name,
        scheme,
        payload,
        merchant_id,
        secrets,
        tolerance: Duration::from_secs(tolerance_secs),
        retry_window: hours(retry_window_hours),
        ttl: hours(ttl_hours),
        refund_api,
        test: raw.test.unwrap_or(false),
        notifies: false,
        notification_url,
        paypal,
    })
}

/// PayPal's settings: `webhook_id` (required), `cert_url_hosts` (default: hosts under
/// paypal.com), `ca_file` (optional PEM of extra trusted roots); none of them elsewhere.
fn validate_paypal(
    field: &dyn Fn(&str) -> String,
    scheme: SchemeName,
    webhook_id: Option<String>,
    cert_url_hosts: Option<Vec<String>>,
    ca_file: Option<PathBuf>,
) -> Result<Option<PaypalProviderSettings>, ConfigError> {
    if scheme != SchemeName::Paypal {
        for (name, set) in [
            ("webhook_id", webhook_id.is_some()),
            ("cert_url_hosts", cert_url_hosts.is_some()),
            ("ca_file", ca_file.is_some()),
        ] {
            if set {
                return Err(ConfigError(format!(
                    "{} is only for scheme paypal",
                    field(name)
                )));
            }
        }
        return Ok(None);
    }
    let webhook_id = webhook_id.filter(|id| !id.is_empty()).ok_or_else(|| {
        ConfigError(format!(
            "{} is required for scheme paypal: the receiving webhook's id at PayPal",
            field("webhook_id")
        ))
    })?;
    let cert_url_hosts = cert_url_hosts.unwrap_or_else(|| {
        crate::signature::paypal::DEFAULT_CERT_URL_HOSTS
            .iter()
            .map(|h| (*h).to_owned())
            .collect()
    });
    let extra_roots_pem = match ca_file {
        Some(path) => {
            let pem = std::fs::read_to_string(&path).map_err(|e| {
                ConfigError(format!(
                    "{}: cannot read {}: {e}",
                    field("ca_file"),
                    path.display()
                ))
            })?;
            if !pem.contains("-----BEGIN CERTIFICATE-----") {
                return Err(ConfigError(format!(
                    "{}: {} holds no PEM certificate",
                    field("ca_file"),
                    path.display()
                )));
            }
            Some(pem)
        }
        None => None,
    };
    // The verifier's own rules (hosts and ports, the PEM's certificates), checked here so that
    // serve and check-config refuse what it could not build.
    let mut check = crate::signature::paypal::PaypalSettings::new(webhook_id.clone());
    check.cert_url_hosts = cert_url_hosts.clone();
    check.extra_roots_pem = extra_roots_pem.as_ref().map(|pem| pem.as_bytes().to_vec());
    check
        .validate()
        .map_err(|e| ConfigError(format!("{}: {}", field(e.field), e.message)))?;
    Ok(Some(PaypalProviderSettings {
        webhook_id,
        cert_url_hosts,
        extra_roots_pem,
    }))
}

/// `env:NAME` reads the variable NAME; any other value is the secret itself.
fn resolve_secret(field: &str, value: &str, env: &dyn Environment) -> Result<Secret, ConfigError> {
    let resolved = match value.strip_prefix("env:") {
        Some(var) => env.var(var).ok_or_else(|| {
            ConfigError(format!(
                "{field}: environment variable {var} is not set or empty"
            ))
        })?,
        None => value.to_owned(),
    };
    if resolved.is_empty() {
        return Err(ConfigError(format!("{field} is empty")));
    }
    Ok(Secret::new(resolved))
}

/// A year: the longest record lifetime or retry window a setting may name.
const MAX_HOURS: u64 = 8760;

fn within(field: &str, value: u64, min: u64, max: u64) -> Result<(), ConfigError> {
    if !(min..=max).contains(&value) {
        return Err(ConfigError(format!(
            "{field} must be between {min} and {max} (got {value})"
        )));
    }
    Ok(())
}

/// A signing key or token shorter than this is guessable.
fn long_enough(field: &str, key_bytes: usize) -> Result<(), ConfigError> {
    if key_bytes < MIN_SECRET_BYTES {
        return Err(ConfigError(format!(
            "{field} must be at least {MIN_SECRET_BYTES} bytes of key (got {key_bytes})"
        )));
    }
    Ok(())
}

fn positive(field: &str, value: u64) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError(format!("{field} must be greater than 0")));
    }
    Ok(())
}

fn hours(h: u64) -> Duration {
    Duration::from_secs(h.saturating_mul(3600))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    struct FakeEnv(HashMap<&'static str, &'static str>);

    impl Environment for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| (*v).to_owned())
        }
    }

    fn env() -> FakeEnv {
        FakeEnv(HashMap::from([(
            "DATABASE_URL",
            "postgres://u@localhost/db",
        )]))
    }

    fn provider(extra: &str) -> String {
        format!(
            "[[providers]]\nname = \"acme\"\nscheme = \"hmac-sha256\"\nmerchant_id = 42\nsecrets = [\"s3cret-s3cret-s3cret\"]\n{extra}"
        )
    }

    fn error_of(text: &str) -> String {
        match Settings::from_toml(text, &env()) {
            Ok(_) => panic!("expected a configuration error for:\n{text}"),
            Err(e) => e.0,
        }
    }

    #[test]
    fn an_empty_file_gives_the_contract_defaults() {
        let settings = Settings::from_toml("", &env()).unwrap();
        assert_eq!(settings.server.bind, "127.0.0.1:8080");
        assert_eq!(settings.server.body_limit_bytes, 1_048_576);
        assert_eq!(settings.server.acquire_timeout, Duration::from_secs(3));
        assert_eq!(settings.database.pool_size, 16);
        assert_eq!(settings.idempotency.ttl, Duration::from_secs(72 * 3600));
        assert_eq!(settings.idempotency.cleanup_batch_size, 5000);
    }

    #[test]
    fn environment_overrides_the_file() {
        let env = FakeEnv(HashMap::from([
            ("DATABASE_URL", "postgres://env@localhost/db"),
            ("GATEWAY_BIND", "0.0.0.0:9999"),
        ]));
        let text = "[server]\nbind = \"127.0.0.1:1\"\n[database]\nurl = \"postgres://file@localhost/db\"\n";
        let settings = Settings::from_toml(text, &env).unwrap();
        assert_eq!(settings.server.bind, "0.0.0.0:9999");
        assert_eq!(
            settings.database_url().unwrap(),
            "postgres://env@localhost/db"
        );
    }

    #[test]
    fn a_missing_database_url_names_the_field_when_it_is_needed() {
        let settings = Settings::from_toml("", &FakeEnv(HashMap::new())).unwrap();
        let err = settings.database_url().unwrap_err();
        assert!(err.0.contains("database.url"), "{}", err.0);
    }

    #[test]
    fn an_unknown_scheme_names_the_field() {
        let text =
            "[[providers]]\nname = \"a\"\nscheme = \"md5\"\nmerchant_id = 1\nsecrets = [\"x\"]\n";
        assert!(error_of(text).contains("providers[0].scheme"));
    }

    #[test]
    fn a_duplicate_provider_name_is_refused() {
        let text = format!("{}{}", provider(""), provider(""));
        assert!(error_of(&text).contains("providers[1].name: duplicate"));
    }

    #[test]
    fn a_ttl_not_above_the_retry_window_is_refused_naming_the_provider() {
        let err = error_of(&provider("retry_window_hours = 72\nttl_hours = 72\n"));
        assert!(err.contains("providers[0].ttl_hours"), "{err}");
        assert!(err.contains("\"acme\""), "{err}");
    }

    #[test]
    fn an_unset_env_secret_is_refused() {
        let text = "[admin]\ntoken = \"env:NOPE_NOT_SET\"\n";
        assert!(error_of(text).contains("admin.token: environment variable NOPE_NOT_SET"));
    }

    #[test]
    fn an_unknown_field_is_refused() {
        assert!(error_of("[server]\nbnid = \"x\"\n").contains("bnid"));
    }

    #[test]
    fn a_standard_webhooks_secret_must_be_base64_after_its_prefix() {
        let text = "[[providers]]\nname = \"a\"\nscheme = \"standard-webhooks\"\nmerchant_id = 1\nsecrets = [\"whsec_!!!\"]\n";
        assert!(error_of(text).contains("providers[0].secrets[0]"));
    }

    #[test]
    fn a_tls_cert_without_a_key_names_the_missing_field() {
        let err = error_of("[server]\ntls_cert = \"cert.pem\"\n");
        assert!(err.starts_with("server.tls_key is required"), "{err}");
        let err = error_of("[server]\ntls_key = \"key.pem\"\n");
        assert!(err.starts_with("server.tls_cert is required"), "{err}");
    }

    #[test]
    fn tls_is_off_unless_both_files_are_named() {
        assert_eq!(Settings::from_toml("", &env()).unwrap().server.tls, None);
        let text = "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n";
        let tls = Settings::from_toml(text, &env())
            .unwrap()
            .server
            .tls
            .unwrap();
        assert_eq!(
            (tls.cert.to_str(), tls.key.to_str()),
            (Some("c.pem"), Some("k.pem"))
        );
    }

    #[test]
    fn secrets_are_not_printed_by_debug() {
        let settings = Settings::from_toml(&provider(""), &env()).unwrap();
        let printed = format!("{settings:?}");
        assert!(!printed.contains("s3cret-s3cret-s3cret"));
        assert!(!printed.contains("postgres://u@localhost/db"));
    }

    #[test]
    fn values_out_of_their_bounds_name_the_field() {
        let cases = [
            (provider("ttl_hours = 1000000\n"), "providers[0].ttl_hours"),
            (
                provider("retry_window_hours = 0\n"),
                "providers[0].retry_window_hours",
            ),
            (
                provider("tolerance_secs = 3601\n"),
                "providers[0].tolerance_secs",
            ),
            (
                "[server]\nacquire_timeout_ms = 60001\n".to_owned(),
                "server.acquire_timeout_ms",
            ),
            (
                "[database]\npool_size = 1001\n".to_owned(),
                "database.pool_size",
            ),
            (
                "[database]\napi_pool_size = 0\n".to_owned(),
                "database.api_pool_size",
            ),
            (
                "[idempotency]\nttl_hours = 8761\n".to_owned(),
                "idempotency.ttl_hours",
            ),
        ];
        for (text, field) in cases {
            let err = error_of(&text);
            assert!(err.starts_with(field), "{field}: {err}");
        }
    }

    #[test]
    fn short_secrets_and_admin_tokens_are_refused() {
        let text = "[[providers]]\nname = \"a\"\nscheme = \"stripe\"\nmerchant_id = 1\nsecrets = [\"whsec_short\"]\n";
        assert!(error_of(text).contains("providers[0].secrets[0] must be at least 16 bytes"));
        // A Standard Webhooks key is measured after decoding: 12 bytes here.
        let text = "[[providers]]\nname = \"a\"\nscheme = \"standard-webhooks\"\nmerchant_id = 1\nsecrets = [\"whsec_AAAAAAAAAAAAAAAA\"]\n";
        assert!(error_of(text).contains("providers[0].secrets[0] must be at least 16 bytes"));
        assert!(error_of("[admin]\ntoken = \"short\"\n").contains("admin.token must be at least"));
    }

    #[test]
    fn refund_apis_must_be_https_except_on_loopback() {
        for url in [
            "https://api.stripe.com",
            "http://127.0.0.1:9000",
            "http://127.5.6.7",
            "http://[::1]:8080",
            "http://localhost:1",
        ] {
            let text = provider(&format!(
                "api_base_url = \"{url}\"\napi_key = \"sk_test\"\n"
            ));
            let settings = Settings::from_toml(&text, &env()).unwrap();
            assert!(settings.providers[0].refund_api.is_some(), "{url}");
        }
        for url in [
            "http://api.stripe.com",
            "http://10.0.0.1",
            "ftp://127.0.0.1",
            "nope",
        ] {
            let text = provider(&format!(
                "api_base_url = \"{url}\"\napi_key = \"sk_test\"\n"
            ));
            assert!(
                error_of(&text).starts_with("providers[0].api_base_url"),
                "{url}"
            );
        }
    }

    #[test]
    fn a_refund_api_url_with_userinfo_is_refused_without_repeating_it() {
        for url in [
            "https://ui-name:pw-in-url@api.example.com",
            "https://ui-name@api.example.com",
            "https://:pw-in-url@api.example.com",
        ] {
            let text = provider(&format!(
                "api_base_url = \"{url}\"\napi_key = \"sk_test\"\n"
            ));
            let err = error_of(&text);
            assert!(err.starts_with("providers[0].api_base_url"), "{url}: {err}");
            assert!(
                !err.contains("pw-in-url") && !err.contains("ui-name"),
                "{url}: {err}"
            );
        }
    }

    #[test]
    fn a_database_url_the_driver_cannot_read_is_refused_without_repeating_it() {
        let text = "[database]\nurl = \"postgres://u:pw-in-url@h:notaport/db\"\n";
        let err = match Settings::from_toml(text, &FakeEnv(HashMap::new())) {
            Ok(_) => panic!("the driver cannot read this port"),
            Err(e) => e.0,
        };
        assert!(err.starts_with("database.url"), "{err}");
        assert!(!err.contains("pw-in-url"), "{err}");
    }

    #[test]
    fn a_refund_api_needs_its_key_and_the_key_is_never_printed() {
        let err = error_of(&provider("api_base_url = \"https://api.example.com\"\n"));
        assert!(err.starts_with("providers[0].api_key is required"), "{err}");
        let text = provider(
            "api_base_url = \"https://api.example.com/\"\napi_key = \"sk_live_never_printed\"\n",
        );
        let settings = Settings::from_toml(&text, &env()).unwrap();
        let api = settings.providers[0].refund_api.as_ref().unwrap();
        assert_eq!(api.base_url, "https://api.example.com");
        assert!(!format!("{settings:?}").contains("sk_live_never_printed"));
    }

    #[test]
    fn a_lease_not_above_the_provider_timeout_is_refused() {
        let err = error_of("[refunds]\nlease_secs = 10\nprovider_timeout_ms = 10000\n");
        assert!(err.starts_with("refunds.lease_secs"), "{err}");
        let settings = Settings::from_toml("", &env()).unwrap();
        assert_eq!(settings.refunds.lease, Duration::from_secs(30));
        assert_eq!(settings.refunds.recover_interval, Duration::from_secs(10));
        assert_eq!(settings.refunds.provider_timeout, Duration::from_secs(10));
        assert_eq!(
            settings.refunds.max_retry_age,
            Duration::from_secs(20 * 3600)
        );
        assert_eq!(
            settings.refunds.pending_overdue,
            Duration::from_secs(24 * 3600)
        );
    }

    #[test]
    fn the_console_cookie_is_secure_under_tls_per_request_behind_a_proxy_or_as_set() {
        let tls = "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n";
        let cases = [
            ("", SecureCookie::WhenHttps),
            (tls, SecureCookie::Always),
            ("[console]\nsecure_cookie = true\n", SecureCookie::Always),
            (
                &format!("{tls}[console]\nsecure_cookie = false\n"),
                SecureCookie::Never,
            ),
        ];
        for (text, expected) in cases {
            let settings = Settings::from_toml(text, &env()).unwrap();
            assert_eq!(settings.console.secure_cookie, expected, "{text}");
        }
        assert!(SecureCookie::WhenHttps.applies(true));
        assert!(!SecureCookie::WhenHttps.applies(false));
    }

    const WHSEC: &str = "whsec_bWVyY2hhbnQtNDItbm90aWZpY2F0aW9uLXNlY3JldA==";

    fn merchant(extra: &str) -> String {
        format!(
            "{}[[merchants]]\nid = 42\nnotify_url = \"https://merchant.example/hooks\"\nnotify_secret = \"{WHSEC}\"\n{extra}",
            provider("")
        )
    }

    #[test]
    fn notifications_default_to_the_contract_schedule_and_a_168_hour_retention() {
        let settings = Settings::from_toml("", &env()).unwrap();
        let n = &settings.notifications;
        assert_eq!(n.retention, Duration::from_secs(168 * 3600));
        assert_eq!(n.attempt_timeout, Duration::from_secs(15));
        assert_eq!(n.claim_lease(), Duration::from_secs(30));
        assert_eq!(
            n.retry_delays,
            [5, 300, 1800, 7200, 18_000, 36_000, 36_000].map(Duration::from_secs)
        );
        assert_eq!((n.concurrency, n.per_merchant_concurrency), (64, 8));
        assert!(settings.merchants.is_empty());
    }

    #[test]
    fn a_merchant_with_an_endpoint_makes_its_providers_notify_and_reads_env_secrets() {
        let env = FakeEnv(HashMap::from([
            ("DATABASE_URL", "postgres://u@localhost/db"),
            ("MERCHANT_42_WHSEC", WHSEC),
        ]));
        let text = format!(
            "{}[[merchants]]\nid = 42\nnotify_url = \"http://127.0.0.1:9000/h?k=v\"\nnotify_secret = \"env:MERCHANT_42_WHSEC\"\n[[merchants]]\nid = 43\n",
            provider("")
        );
        let settings = Settings::from_toml(&text, &env).unwrap();
        assert!(settings.providers[0].notifies);
        let endpoint = settings.merchants[0].endpoint.as_ref().unwrap();
        assert_eq!(endpoint.secret.expose(), WHSEC);
        assert_eq!(endpoint.shown(), "http://127.0.0.1:9000/h?(query hidden)");
        assert!(settings.merchants[1].endpoint.is_none());
        assert!(!format!("{settings:?}").contains("bWVyY2hhbnQ"));
        let settings = Settings::from_toml(&provider(""), &env).unwrap();
        assert!(!settings.providers[0].notifies);
    }

    #[test]
    fn merchants_and_notification_settings_out_of_their_bounds_name_the_field() {
        let cases = [
            (
                merchant("[[merchants]]\nid = 42\n"),
                "merchants[1].id: merchant 42 is listed twice",
            ),
            (
                "[[merchants]]\nid = 0\n".to_owned(),
                "merchants[0].id must be greater than 0",
            ),
            (
                "[[merchants]]\nid = 1\nnotify_url = \"https://m.example/h\"\n".to_owned(),
                "merchants[0].notify_secret is required",
            ),
            (
                format!("[[merchants]]\nid = 1\nnotify_url = \"http://m.example/h\"\nnotify_secret = \"{WHSEC}\"\n"),
                "merchants[0].notify_url: must be an https:// URL",
            ),
            (
                format!("[[merchants]]\nid = 1\nnotify_url = \"https://u:p@m.example/h\"\nnotify_secret = \"{WHSEC}\"\n"),
                "merchants[0].notify_url: must not carry user:password@",
            ),
            (
                "[[merchants]]\nid = 1\nnotify_url = \"https://m.example/h\"\nnotify_secret = \"not-a-whsec!\"\n".to_owned(),
                "merchants[0].notify_secret: a Standard Webhooks secret",
            ),
            (
                "[[merchants]]\nid = 1\nnotify_url = \"https://m.example/h\"\nnotify_secret = \"whsec_AAAAAAAAAAAAAAAA\"\n".to_owned(),
                "merchants[0].notify_secret must be at least 16 bytes",
            ),
            (
                "[[merchants]]\nid = 1\nnotify = true\n".to_owned(),
                "unknown field `notify`",
            ),
            (
                "[notifications]\nattempt_timeout_ms = 15001\n".to_owned(),
                "notifications.attempt_timeout_ms",
            ),
            (
                "[notifications]\nconcurrency = 4\nper_merchant_concurrency = 5\n".to_owned(),
                "notifications.per_merchant_concurrency",
            ),
            (
                "[notifications]\nretry_delays_ms = []\n".to_owned(),
                "notifications.retry_delays_ms",
            ),
            (
                "[notifications]\nretention_hours = 0\n".to_owned(),
                "notifications.retention_hours",
            ),
            (
                "[notifications]\npoll_interval_ms = 60000\n".to_owned(),
                "notifications.poll_interval_ms",
            ),
        ];
        for (text, expected) in cases {
            let err = error_of(&text);
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }

    fn one(text: &str) -> ProviderSettings {
        Settings::from_toml(text, &env())
            .unwrap_or_else(|e| panic!("{text}: {e}"))
            .providers
            .remove(0)
    }

    const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

    #[test]
    fn the_payload_defaults_to_the_schemes_own_format() {
        let adyen = one(&format!(
            "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\n"
        ));
        assert_eq!(adyen.payload, PayloadFormat::Adyen);
        let stripe = one(
            "[[providers]]\nname = \"s\"\nscheme = \"stripe\"\nmerchant_id = 1\nsecrets = [\"whsec_a_long_enough_secret\"]\n",
        );
        assert_eq!(stripe.payload, PayloadFormat::Stripe);
        assert_eq!(one(&provider("")).payload, PayloadFormat::Canonical);
    }

    #[test]
    fn a_new_scheme_reads_only_its_own_payload() {
        let err = error_of(&format!(
            "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\npayload = \"canonical\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\n"
        ));
        assert!(err.starts_with("providers[0].payload"), "{err}");
        let err = error_of(&provider("payload = \"adyen\"\n"));
        assert!(err.starts_with("providers[0].payload"), "{err}");
    }

    #[test]
    fn retry_windows_default_to_the_providers_published_ones_and_the_ttl_stays_above() {
        let secret = |scheme: &str| match scheme {
            "adyen" => format!("secrets = [\"{ADYEN_KEY}\"]"),
            "paypal" => "webhook_id = \"WH1\"".to_owned(),
            _ => "secrets = [\"a-long-enough-signing-secret\"]".to_owned(),
        };
        for (scheme, window) in [
            ("adyen", 720),
            ("square", 72),
            ("razorpay", 24),
            ("checkout", 30),
            ("paddle", 72),
            ("paypal", 72),
            ("stripe", 72),
        ] {
            let url = if scheme == "square" {
                "notification_url = \"https://gw.example/v1/callbacks/p\"\n"
            } else {
                ""
            };
            let p = one(&format!(
                "[[providers]]\nname = \"p\"\nscheme = \"{scheme}\"\nmerchant_id = 1\n{}\n{url}",
                secret(scheme)
            ));
            assert_eq!(p.retry_window, hours(window), "{scheme}");
            assert!(p.ttl > p.retry_window, "{scheme}");
        }
        let err = error_of(&format!(
            "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\nttl_hours = 168\n"
        ));
        assert!(err.starts_with("providers[0].ttl_hours"), "{err}");
    }

    #[test]
    fn an_adyen_secret_is_64_hex_characters() {
        for bad in [
            "zz".repeat(32),
            "ab".repeat(31),
            "a-long-enough-signing-secret".to_owned(),
        ] {
            let err = error_of(&format!(
                "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{bad}\"]\n"
            ));
            assert!(err.starts_with("providers[0].secrets[0]"), "{bad}: {err}");
        }
    }

    #[test]
    fn square_needs_its_notification_url_and_nobody_else_takes_one() {
        let square = "[[providers]]\nname = \"q\"\nscheme = \"square\"\nmerchant_id = 1\nsecrets = [\"a-long-enough-signing-secret\"]\n";
        assert!(error_of(square).starts_with("providers[0].notification_url is required"));
        let p = one(&format!(
            "{square}notification_url = \"https://gw.example/cb/q?x=1\"\n"
        ));
        assert_eq!(
            p.notification_url.as_deref(),
            Some("https://gw.example/cb/q?x=1")
        );
        let err = error_of(&provider("notification_url = \"https://x.example\"\n"));
        assert!(
            err.starts_with("providers[0].notification_url is only for"),
            "{err}"
        );
    }

    #[test]
    fn paypal_takes_a_webhook_id_no_secrets_and_checks_its_hosts() {
        let paypal = "[[providers]]\nname = \"pp\"\nscheme = \"paypal\"\nmerchant_id = 1\n";
        assert!(error_of(paypal).starts_with("providers[0].webhook_id is required"));
        let err = error_of(&format!(
            "{paypal}webhook_id = \"WH1\"\nsecrets = [\"a-long-enough-signing-secret\"]\n"
        ));
        assert!(err.starts_with("providers[0].secrets"), "{err}");
        let p = one(&format!("{paypal}webhook_id = \"WH1\"\n"));
        let settings = p.paypal.unwrap();
        assert_eq!(settings.cert_url_hosts, ["paypal.com"]);
        assert_eq!(settings.extra_roots_pem, None);
        let err = error_of(&format!(
            "{paypal}webhook_id = \"WH1\"\ncert_url_hosts = [\"com\"]\n"
        ));
        assert!(err.starts_with("providers[0].cert_url_hosts"), "{err}");
        let err = error_of(&format!(
            "{paypal}webhook_id = \"WH1\"\nca_file = \"/nonexistent/ca.pem\"\n"
        ));
        assert!(err.starts_with("providers[0].ca_file"), "{err}");
        let err = error_of(&provider("webhook_id = \"WH1\"\n"));
        assert!(
            err.starts_with("providers[0].webhook_id is only for"),
            "{err}"
        );
    }

    #[test]
    fn a_refund_api_is_only_for_canonical_and_stripe_payloads() {
        let err = error_of(&format!(
            "[[providers]]\nname = \"a\"\nscheme = \"adyen\"\nmerchant_id = 1\nsecrets = [\"{ADYEN_KEY}\"]\napi_base_url = \"https://x.example\"\napi_key = \"k\"\n"
        ));
        assert!(err.starts_with("providers[0].api_base_url"), "{err}");
    }

    #[test]
    fn a_replica_url_is_read_by_the_driver_and_the_read_work_uses_it() {
        let settings = Settings::from_toml("", &env()).unwrap();
        assert_eq!(
            settings.database.read_url(),
            Some("postgres://u@localhost/db")
        );
        assert_eq!(settings.database.commit_timeout, Duration::from_secs(5));
        let text = "[database]\nreplica_url = \"postgres://u@standby:5432/db\"\n";
        let settings = Settings::from_toml(text, &env()).unwrap();
        assert_eq!(
            settings.database.read_url(),
            Some("postgres://u@standby:5432/db")
        );
        let err = error_of("[database]\nreplica_url = \"postgres://u:pw-in-url@h:notaport/db\"\n");
        assert!(err.starts_with("database.replica_url"), "{err}");
        assert!(!err.contains("pw-in-url"), "{err}");
        assert!(!format!("{settings:?}").contains("standby:5432"));
    }

    #[test]
    fn the_api_pool_defaults_to_four() {
        let settings = Settings::from_toml("", &env()).unwrap();
        assert_eq!(settings.database.api_pool_size, 4);
    }
}
