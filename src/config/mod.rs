//! Settings: the TOML file plus `DATABASE_URL` / `GATEWAY_BIND` overrides, validated once at
//! startup. A bad setting becomes a [`ConfigError`] that names the field (exit code 2).
//!
//! One file per section of the file, each with its settings, its raw form (as written, every
//! field optional) and its validation and defaults: `server`, `database`, `idempotency`,
//! `admin`, `providers`, `merchants`, `notifications`, `refunds`, `console`, `portal`, `ledger`,
//! `history`, `telemetry`, `secrets`, `limits`; `rules`
//! holds what they share (the error, bounds, secrets, outgoing URLs). This file reads the
//! document and assembles the sections.

pub mod admin;
pub mod console;
pub mod database;
pub mod history;
pub mod idempotency;
pub mod ledger;
pub mod limits;
pub mod merchants;
pub mod notifications;
pub mod portal;
pub mod providers;
pub mod refunds;
pub mod rules;
pub mod secrets;
pub mod server;
pub mod telemetry;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::secret::Secret;
pub use admin::AdminSettings;
pub use console::{ConsoleSettings, SecureCookie};
pub use database::DatabaseSettings;
pub use history::HistorySettings;
pub use idempotency::IdempotencySettings;
pub use ledger::LedgerSettings;
pub use limits::LimitSettings;
pub use merchants::{MerchantSettings, NotifyEndpoint};
pub use notifications::NotificationSettings;
pub use providers::{
    PayloadFormat, PaypalProviderSettings, ProviderSettings, RefundApi, SchemeName,
};
pub use refunds::RefundSettings;
pub use rules::{ConfigError, Environment, ProcessEnv};
pub use secrets::SecretsSettings;
pub use server::{ServerSettings, TlsFiles};
pub use telemetry::TelemetrySettings;

/// Where the configuration file is looked for when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "gateway.toml";

#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub idempotency: IdempotencySettings,
    pub ledger: LedgerSettings,
    /// `[history]`: retention of the event log's raw bodies.
    pub history: HistorySettings,
    pub admin: AdminSettings,
    pub providers: Vec<ProviderSettings>,
    pub refunds: RefundSettings,
    pub console: ConsoleSettings,
    /// `[portal]`: the merchant portal's links.
    pub portal: portal::PortalSettings,
    /// `[[merchants]]`: the merchants that hear of their orders' changes.
    pub merchants: Vec<MerchantSettings>,
    pub notifications: NotificationSettings,
    /// `[telemetry]`: trace export, `None` when no `otlp_endpoint` is set.
    pub telemetry: Option<TelemetrySettings>,
    /// `[secrets]`: the key of endpoint secrets at rest.
    pub secrets: SecretsSettings,
    /// `[limits]`: what one source address or merchant may cost before a 429.
    pub limits: LimitSettings,
}

// The file as written; every section and field is optional so defaults apply.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    server: server::RawServer,
    #[serde(default)]
    database: database::RawDatabase,
    #[serde(default)]
    idempotency: idempotency::RawIdempotency,
    #[serde(default)]
    admin: admin::RawAdmin,
    #[serde(default)]
    providers: Vec<providers::RawProvider>,
    #[serde(default)]
    refunds: refunds::RawRefunds,
    #[serde(default)]
    console: console::RawConsole,
    #[serde(default)]
    portal: portal::RawPortal,
    #[serde(default)]
    ledger: ledger::RawLedger,
    #[serde(default)]
    history: history::RawHistory,
    #[serde(default)]
    merchants: Vec<merchants::RawMerchant>,
    #[serde(default)]
    notifications: notifications::RawNotifications,
    #[serde(default)]
    telemetry: telemetry::RawTelemetry,
    #[serde(default)]
    secrets: secrets::RawSecrets,
    #[serde(default)]
    limits: limits::RawLimits,
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

    /// The schema owner's URL: `[database] migrate_url`, else the database URL (one role for
    /// everything). Migrations and the event log's partition changes run with it.
    pub fn migrate_database_url(&self) -> Result<&str, ConfigError> {
        match &self.database.migrate_url {
            Some(url) => Ok(url.expose()),
            None => self.database_url(),
        }
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
    let server = server::validate(raw.server, env)?;
    let database = database::validate(raw.database, env)?;
    let idempotency = idempotency::validate(raw.idempotency)?;
    let admin = admin::validate(raw.admin, env)?;
    let providers = providers::validate_all(raw.providers, env)?;
    let merchants = merchants::validate(raw.merchants, env)?;
    let notifications = notifications::validate(raw.notifications)?;
    let refunds = refunds::validate(raw.refunds)?;
    let ledger = ledger::validate(raw.ledger)?;
    let history = history::validate(raw.history)?;
    let console = console::validate(raw.console, server.tls.is_some());
    let portal = portal::validate(raw.portal)?;
    let telemetry = telemetry::validate(raw.telemetry)?;
    let secrets = secrets::validate(raw.secrets, env)?;
    let limits = limits::validate(raw.limits)?;
    Ok(Settings {
        server,
        database,
        idempotency,
        admin,
        providers,
        refunds,
        console,
        portal,
        ledger,
        history,
        merchants,
        notifications,
        telemetry,
        secrets,
        limits,
    })
}

#[cfg(test)]
mod tests;
