//! `[[providers]]`: each provider's scheme, payload, merchant, secrets, windows, refund API and
//! the settings of its one scheme.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::rules::{
    ConfigError, Environment, MAX_HOURS, hours, long_enough, outbound_url, resolve_secret, within,
};
use crate::allowlist::CertUrlPolicy;
use crate::secret::Secret;
use crate::signature::paypal::settings as paypal;

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
    /// Square: the notification URL exactly as registered at Square (part of what it signs).
    pub notification_url: Option<String>,
    /// PayPal: the receiving webhook's id and where its certificates may come from.
    pub paypal: Option<PaypalProviderSettings>,
    /// Fetch-verified providers (mollie, gocardless, mercadopago, and paypal with
    /// `verify = "fetch"`): the provider's API the gateway asks before it acts on a delivery.
    pub fetch_api: Option<FetchApi>,
    /// Braintree: the public key a delivery's `bt_signature` must name.
    pub public_key: Option<String>,
}

impl ProviderSettings {
    /// Whether the gateway asks the provider's API before it acts on a delivery (the API's
    /// answer, not the delivery, says what happened): the fetch-verified schemes, and PayPal
    /// with `verify = "fetch"`.
    pub fn asks_api(&self) -> bool {
        self.fetch_api.is_some()
    }
}

/// The provider API a fetch-verified scheme asks (`api_base_url`, `api_key`, `ca_file`,
/// `fetch_timeout_ms`, `fetch_concurrency`).
#[derive(Debug, Clone)]
pub struct FetchApi {
    /// `https://` (or `http://` on loopback), without a trailing slash.
    pub base_url: String,
    pub api_key: Secret,
    /// Extra trusted roots (PEM) for the API's TLS certificate: an emulator's CA.
    pub extra_roots_pem: Option<String>,
    /// The whole fetch: waiting for a slot, connecting, the answer read to its end.
    pub timeout: Duration,
    /// Fetches of this provider running at once in one process.
    pub concurrency: usize,
    /// Whose resources the key may read: the API answers any resource the key can see, so
    /// where the account is named, a resource of another is refused (stored `rejected`).
    pub owner: ResourceOwner,
    /// PayPal: `api_key` is the secret of this OAuth 2.0 client, exchanged for a bearer token
    /// (client credentials); `None`: `api_key` is the bearer token itself.
    pub oauth_client: Option<OauthClient>,
}

/// An OAuth 2.0 client whose credentials are exchanged for a bearer token (PayPal's REST
/// API): `POST {api_base_url}{token_path}`, HTTP Basic `client_id:api_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OauthClient {
    pub client_id: String,
    pub token_path: &'static str,
}

/// The account a provider's fetched resources must belong to, where configured: Mollie's
/// `profile_id` and `mode` (`live` or `test`), GoCardless's `creditor`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceOwner {
    pub profile_id: Option<String>,
    pub mode: Option<String>,
    pub creditor: Option<String>,
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
    Mollie,
    Gocardless,
    Braintree,
    Mercadopago,
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
    Mollie,
    Gocardless,
    Braintree,
    Mercadopago,
}

impl SchemeName {
    /// Every scheme, in the order the configuration's error messages list them.
    pub const ALL: [SchemeName; 13] = [
        SchemeName::StandardWebhooks,
        SchemeName::Stripe,
        SchemeName::HmacSha256,
        SchemeName::Adyen,
        SchemeName::Square,
        SchemeName::Razorpay,
        SchemeName::Checkout,
        SchemeName::Paddle,
        SchemeName::Paypal,
        SchemeName::Mollie,
        SchemeName::Gocardless,
        SchemeName::Braintree,
        SchemeName::Mercadopago,
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
            SchemeName::Mollie => "mollie",
            SchemeName::Gocardless => "gocardless",
            SchemeName::Braintree => "braintree",
            SchemeName::Mercadopago => "mercadopago",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the gateway asks the provider's API before it acts on a delivery: the API's
    /// answer, not the delivery, says what happened.
    pub fn fetches(self) -> bool {
        matches!(
            self,
            SchemeName::Mollie | SchemeName::Gocardless | SchemeName::Mercadopago
        )
    }

    /// The live API a fetch-verified scheme asks when `api_base_url` is not set.
    pub fn default_api_base_url(self) -> Option<&'static str> {
        match self {
            SchemeName::Mollie => Some("https://api.mollie.com"),
            SchemeName::Gocardless => Some("https://api.gocardless.com"),
            SchemeName::Mercadopago => Some("https://api.mercadopago.com"),
            SchemeName::Paypal => Some("https://api-m.paypal.com"),
            _ => None,
        }
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
            SchemeName::Mollie => PayloadFormat::Mollie,
            SchemeName::Gocardless => PayloadFormat::Gocardless,
            SchemeName::Braintree => PayloadFormat::Braintree,
            SchemeName::Mercadopago => PayloadFormat::Mercadopago,
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
            // Mollie, GoCardless (8 tries), Braintree and Mercado Pago: no window confirmed
            // from their documentation here, so the 72 hours of the others; a record that
            // outlives the window costs only storage (set retry_window_hours to change it).
            SchemeName::Mollie
            | SchemeName::Gocardless
            | SchemeName::Braintree
            | SchemeName::Mercadopago => 72,
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
    const ALL: [PayloadFormat; 12] = [
        PayloadFormat::Canonical,
        PayloadFormat::Stripe,
        PayloadFormat::Adyen,
        PayloadFormat::Square,
        PayloadFormat::Razorpay,
        PayloadFormat::Checkout,
        PayloadFormat::Paddle,
        PayloadFormat::Paypal,
        PayloadFormat::Mollie,
        PayloadFormat::Gocardless,
        PayloadFormat::Braintree,
        PayloadFormat::Mercadopago,
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
            PayloadFormat::Mollie => "mollie",
            PayloadFormat::Gocardless => "gocardless",
            PayloadFormat::Braintree => "braintree",
            PayloadFormat::Mercadopago => "mercadopago",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
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
    public_key: Option<String>,
    fetch_timeout_ms: Option<u64>,
    fetch_concurrency: Option<u64>,
    profile_id: Option<String>,
    mode: Option<String>,
    creditor: Option<String>,
    verify: Option<String>,
    client_id: Option<String>,
}

/// Every provider, in order; names are unique, and no two ask their API with one key.
pub(super) fn validate_all(
    raw: Vec<RawProvider>,
    env: &dyn Environment,
) -> Result<Vec<ProviderSettings>, ConfigError> {
    let mut providers: Vec<ProviderSettings> = Vec::with_capacity(raw.len());
    for (index, provider) in raw.into_iter().enumerate() {
        let provider = validate_provider(index, provider, env)?;
        // A key reads every resource of its account: two providers asking one API with one
        // key (two merchants on one Mollie key, say) would each accept the other's payments
        // as its own merchant's.
        if let Some(api) = &provider.fetch_api
            && let Some(other) = providers.iter().find(|p| {
                p.scheme == provider.scheme
                    && p.fetch_api.as_ref().is_some_and(|o| {
                        o.base_url == api.base_url && o.api_key.expose() == api.api_key.expose()
                    })
            })
        {
            return Err(ConfigError(format!(
                "providers[{index}].api_key: the same key as provider {:?}: each provider needs a key of its own account",
                other.name
            )));
        }
        if providers.iter().any(|p| p.name == provider.name) {
            return Err(ConfigError(format!(
                "providers[{index}].name: duplicate provider name {:?}",
                provider.name
            )));
        }
        providers.push(provider);
    }
    Ok(providers)
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
    let api_key = Secret::new(resolve_secret(&field("api_key"), &api_key, env)?);
    Ok(Some(RefundApi {
        base_url: base_url.trim_end_matches('/').to_owned(),
        api_key,
    }))
}

fn validate_provider(
    index: usize,
    mut raw: RawProvider,
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
    let paypal_fetches = paypal_verify(&field, scheme, raw.verify.take())? == PaypalVerify::Fetch;
    if scheme == SchemeName::Paypal && !raw.secrets.is_empty() {
        return Err(ConfigError(format!(
            "{}: scheme paypal takes no secrets (PayPal signs with its certificate; set webhook_id, \
             or verify = \"fetch\" with client_id and api_key)",
            field("secrets")
        )));
    }
    if scheme == SchemeName::Mollie && !raw.secrets.is_empty() {
        return Err(ConfigError(format!(
            "{}: scheme mollie takes no secrets (Mollie signs nothing: the gateway asks its API with api_key)",
            field("secrets")
        )));
    }
    let unsigned = matches!(scheme, SchemeName::Paypal | SchemeName::Mollie);
    if !unsigned && raw.secrets.is_empty() {
        return Err(ConfigError(format!(
            "{} needs at least one secret",
            field("secrets")
        )));
    }
    let mut secrets = Vec::with_capacity(raw.secrets.len());
    for (i, secret) in raw.secrets.iter().enumerate() {
        let name = format!("providers[{index}].secrets[{i}]");
        let secret = Secret::new(resolve_secret(&name, secret, env)?);
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
            | SchemeName::Paypal
            | SchemeName::Mollie
            | SchemeName::Gocardless
            | SchemeName::Braintree
            | SchemeName::Mercadopago => secret.expose().len(),
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
    let oauth_client = match (paypal_fetches, raw.client_id.take()) {
        (true, Some(client_id)) => Some(OauthClient {
            client_id: checked_client_id(&field, client_id)?,
            token_path: PAYPAL_TOKEN_PATH,
        }),
        (true, None) => {
            return Err(ConfigError(format!(
                "{} is required with verify = \"fetch\": the REST app's client id at PayPal, \
                 whose secret is api_key",
                field("client_id")
            )));
        }
        (false, Some(_)) => {
            return Err(ConfigError(format!(
                "{} is only for scheme paypal with verify = \"fetch\"",
                field("client_id")
            )));
        }
        (false, None) => None,
    };
    let (refund_api, fetch_api) = if scheme.fetches() || paypal_fetches {
        let api = validate_fetch_api(
            &field,
            scheme,
            FetchFields {
                base_url: raw.api_base_url,
                api_key: raw.api_key,
                ca_file: raw.ca_file.take(),
                timeout_ms: raw.fetch_timeout_ms,
                concurrency: raw.fetch_concurrency,
                owner: ResourceOwner {
                    profile_id: raw.profile_id.take(),
                    mode: raw.mode.take(),
                    creditor: raw.creditor.take(),
                },
                oauth_client,
            },
            env,
        )?;
        (None, Some(api))
    } else {
        for (name, set) in [
            ("fetch_timeout_ms", raw.fetch_timeout_ms.is_some()),
            ("fetch_concurrency", raw.fetch_concurrency.is_some()),
        ] {
            if set {
                return Err(ConfigError(format!(
                    "{} is only for the providers that ask the provider's API (mollie, gocardless, \
                     mercadopago, paypal with verify = \"fetch\")",
                    field(name)
                )));
            }
        }
        if !generic && raw.api_base_url.is_some() {
            return Err(ConfigError(format!(
                "{}: merchant refunds call canonical or Stripe refund APIs only; scheme {} has none here",
                field("api_base_url"),
                scheme.as_str()
            )));
        }
        (
            validate_refund_api(&field, raw.api_base_url, raw.api_key, env)?,
            None,
        )
    };
    let public_key = match (scheme, raw.public_key) {
        (SchemeName::Braintree, Some(key))
            if !key.is_empty()
                && key.len() <= 128
                && key
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'|' && b != b'&') =>
        {
            Some(key)
        }
        (SchemeName::Braintree, Some(_)) => {
            return Err(ConfigError(format!(
                "{}: 1 to 128 visible characters without '|' or '&' (they separate bt_signature's pairs)",
                field("public_key")
            )));
        }
        (SchemeName::Braintree, None) => {
            return Err(ConfigError(format!(
                "{} is required for scheme braintree: bt_signature must name it",
                field("public_key")
            )));
        }
        (_, Some(_)) => {
            return Err(ConfigError(format!(
                "{} is only for scheme braintree",
                field("public_key")
            )));
        }
        (_, None) => None,
    };
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
    let paypal = if paypal_fetches {
        for (name, set) in [
            ("webhook_id", raw.webhook_id.is_some()),
            ("cert_url_hosts", raw.cert_url_hosts.is_some()),
        ] {
            if set {
                return Err(ConfigError(format!(
                    "{} is only for verify = \"signature\": with verify = \"fetch\" PayPal's API \
                     says which events are this app's, and no signature is checked",
                    field(name)
                )));
            }
        }
        None
    } else {
        validate_paypal(
            &field,
            scheme,
            raw.webhook_id,
            raw.cert_url_hosts,
            raw.ca_file,
        )?
    };
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
        notification_url,
        paypal,
        fetch_api,
        public_key,
    })
}

/// A fetch-verified scheme's API settings as written.
struct FetchFields {
    base_url: Option<String>,
    api_key: Option<String>,
    ca_file: Option<PathBuf>,
    timeout_ms: Option<u64>,
    concurrency: Option<u64>,
    owner: ResourceOwner,
    oauth_client: Option<OauthClient>,
}

/// The API a fetch-verified scheme asks: `api_key` (required, `env:NAME` like every secret),
/// `api_base_url` (default: the provider's live API; the outgoing-URL rules hold),
/// `ca_file` (extra roots for an emulator), `fetch_timeout_ms` (default 5000) and
/// `fetch_concurrency` (default 16).
fn validate_fetch_api(
    field: &dyn Fn(&str) -> String,
    scheme: SchemeName,
    fields: FetchFields,
    env: &dyn Environment,
) -> Result<FetchApi, ConfigError> {
    let base_url = match fields.base_url {
        Some(url) => url,
        None => scheme.default_api_base_url().unwrap_or_default().to_owned(),
    };
    outbound_url(&field("api_base_url"), &base_url, false)?;
    let api_key = fields.api_key.ok_or_else(|| {
        ConfigError(format!(
            "{} is required for scheme {}: the gateway asks the provider's API with it",
            field("api_key"),
            scheme.as_str()
        ))
    })?;
    let api_key = Secret::new(resolve_secret(&field("api_key"), &api_key, env)?);
    if api_key.expose().is_empty() || api_key.expose().chars().any(char::is_control) {
        return Err(ConfigError(format!(
            "{}: must be non-empty without control characters (it travels in a header)",
            field("api_key")
        )));
    }
    let timeout_ms = fields.timeout_ms.unwrap_or(5000);
    within(&field("fetch_timeout_ms"), timeout_ms, 100, 60_000)?;
    let concurrency = fields.concurrency.unwrap_or(16);
    within(&field("fetch_concurrency"), concurrency, 1, 1000)?;
    let extra_roots_pem = match fields.ca_file {
        Some(path) => Some(read_ca_file(&field("ca_file"), &path)?),
        None => None,
    };
    let owner = fields.owner;
    for (name, set, scheme_of_it) in [
        ("profile_id", owner.profile_id.is_some(), SchemeName::Mollie),
        ("mode", owner.mode.is_some(), SchemeName::Mollie),
        ("creditor", owner.creditor.is_some(), SchemeName::Gocardless),
    ] {
        if set && scheme != scheme_of_it {
            return Err(ConfigError(format!(
                "{} is only for scheme {}",
                field(name),
                scheme_of_it.as_str()
            )));
        }
    }
    if let Some(mode) = &owner.mode
        && mode != "live"
        && mode != "test"
    {
        return Err(ConfigError(format!(
            "{}: {mode:?} must be \"live\" or \"test\"",
            field("mode")
        )));
    }
    for (name, value) in [
        ("profile_id", &owner.profile_id),
        ("creditor", &owner.creditor),
    ] {
        if let Some(value) = value
            && !(!value.is_empty()
                && value.len() <= 64
                && value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        {
            return Err(ConfigError(format!(
                "{}: {value:?} must be the provider's id (letters, digits, _ or -)",
                field(name)
            )));
        }
    }
    Ok(FetchApi {
        base_url: base_url.trim_end_matches('/').to_owned(),
        api_key,
        extra_roots_pem,
        timeout: Duration::from_millis(timeout_ms),
        concurrency: usize::try_from(concurrency).unwrap_or(16),
        owner,
        oauth_client: fields.oauth_client,
    })
}

/// The PEM text of `path`, which must hold at least one certificate.
fn read_ca_file(field: &str, path: &std::path::Path) -> Result<String, ConfigError> {
    let pem = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("{field}: cannot read {}: {e}", path.display())))?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(ConfigError(format!(
            "{field}: {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(pem)
}

/// Where PayPal's REST API exchanges a client's credentials for a token.
const PAYPAL_TOKEN_PATH: &str = "/v1/oauth2/token";

/// How a PayPal provider verifies a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PaypalVerify {
    /// PayPal's signature with its certificate (the default).
    Signature,
    /// The event as PayPal's API shows it, by the id the body names.
    Fetch,
}

/// `verify`: only for scheme paypal, `"signature"` (the default) or `"fetch"`.
fn paypal_verify(
    field: &dyn Fn(&str) -> String,
    scheme: SchemeName,
    verify: Option<String>,
) -> Result<PaypalVerify, ConfigError> {
    match (scheme, verify.as_deref()) {
        (_, None) => Ok(PaypalVerify::Signature),
        (SchemeName::Paypal, Some("signature")) => Ok(PaypalVerify::Signature),
        (SchemeName::Paypal, Some("fetch")) => Ok(PaypalVerify::Fetch),
        (SchemeName::Paypal, Some(other)) => Err(ConfigError(format!(
            "{}: {other:?} must be \"signature\" or \"fetch\"",
            field("verify")
        ))),
        (_, Some(_)) => Err(ConfigError(format!(
            "{} is only for scheme paypal",
            field("verify")
        ))),
    }
}

/// A PayPal REST app's client id: it travels in a Basic authorization header.
fn checked_client_id(field: &dyn Fn(&str) -> String, id: String) -> Result<String, ConfigError> {
    if id.is_empty() || id.len() > 256 || !id.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
        return Err(ConfigError(format!(
            "{}: 1 to 256 visible characters without ':' (PayPal's client id)",
            field("client_id")
        )));
    }
    Ok(id)
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
                    "{} is only for scheme paypal{}",
                    field(name),
                    if name == "ca_file" {
                        " and the schemes that ask the provider's API (mollie, gocardless, mercadopago)"
                    } else {
                        ""
                    }
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
        paypal::DEFAULT_CERT_URL_HOSTS
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
    // The verifier's own rules (the id's form, hosts and ports, the PEM's certificates),
    // checked here so that serve and check-config refuse what it could not build.
    let refused =
        |e: paypal::SettingsError| ConfigError(format!("{}: {}", field(e.field), e.message));
    paypal::check_webhook_id(&webhook_id).map_err(refused)?;
    CertUrlPolicy::new(&cert_url_hosts)
        .map_err(|m| ConfigError(format!("{}: {m}", field("cert_url_hosts"))))?;
    paypal::roots(extra_roots_pem.as_ref().map(|pem| pem.as_bytes())).map_err(refused)?;
    Ok(Some(PaypalProviderSettings {
        webhook_id,
        cert_url_hosts,
        extra_roots_pem,
    }))
}
