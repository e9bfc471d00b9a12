//! `[secrets]`: the key that seals merchant endpoint secrets at rest (docs/notifications.md).

use serde::Deserialize;

use super::rules::{ConfigError, Environment, resolve_secret};
use crate::secret_box::SecretsKey;

#[derive(Debug, Clone, Default)]
pub struct SecretsSettings {
    /// `None`: endpoints by API are off (creating one answers 501), and `serve` refuses to
    /// start once the database holds one.
    pub key: Option<SecretsKey>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecrets {
    key: Option<String>,
}

pub(super) fn validate(
    raw: RawSecrets,
    env: &dyn Environment,
) -> Result<SecretsSettings, ConfigError> {
    let key = raw
        .key
        .map(|text| parse_key("secrets.key", &text, env))
        .transpose()?;
    Ok(SecretsSettings { key })
}

/// A key as configured (`env:NAME` or the base64 itself): 32 bytes. `field` names it in the
/// error, which never repeats the value.
pub fn parse_key(
    field: &str,
    text: &str,
    env: &dyn Environment,
) -> Result<SecretsKey, ConfigError> {
    let text = resolve_secret(field, text, env)?;
    SecretsKey::from_base64(&text).map_err(|why| ConfigError(format!("{field} {why}")))
}
