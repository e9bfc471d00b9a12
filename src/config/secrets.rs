//! `[secrets]`: the key that seals merchant endpoint secrets at rest (docs/notifications.md).

use serde::Deserialize;

use super::rules::{ConfigError, Environment, resolve_secret};
use crate::secret_box::{Keyring, SecretsKey};

#[derive(Debug, Clone, Default)]
pub struct SecretsSettings {
    /// `None`: endpoints by API are off (creating one answers 501), and `serve` refuses to
    /// start once the database holds one.
    pub key: Option<SecretsKey>,
    /// Earlier keys: they open secrets sealed before a rotation (new seals use `key`).
    pub previous_keys: Vec<SecretsKey>,
}

impl SecretsSettings {
    /// The key and the earlier ones, for opening; `None` without a key.
    pub fn keyring(&self) -> Option<Keyring> {
        self.key
            .clone()
            .map(|key| Keyring::new(key, self.previous_keys.clone()))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSecrets {
    key: Option<String>,
    previous_keys: Option<Vec<String>>,
}

pub(super) fn validate(
    raw: RawSecrets,
    env: &dyn Environment,
) -> Result<SecretsSettings, ConfigError> {
    let key = raw
        .key
        .map(|text| parse_key("secrets.key", &text, env))
        .transpose()?;
    let previous_keys = raw
        .previous_keys
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, text)| parse_key(&format!("secrets.previous_keys[{i}]"), text, env))
        .collect::<Result<Vec<_>, _>>()?;
    if key.is_none() && !previous_keys.is_empty() {
        return Err(ConfigError(
            "secrets.previous_keys needs secrets.key: new seals use the key".into(),
        ));
    }
    Ok(SecretsSettings { key, previous_keys })
}

/// The old key of `secrets rekey --old-key`: `env:NAME`, or `-` for one line of stdin. The key
/// itself is refused: on a command line it is in the shell's history and in `ps` for every
/// user of the machine.
pub fn parse_old_key(
    text: &str,
    env: &dyn Environment,
    stdin: impl FnOnce() -> std::io::Result<String>,
) -> Result<SecretsKey, ConfigError> {
    if text == "-" {
        let line = stdin().map_err(|e| ConfigError(format!("--old-key -: reading stdin: {e}")))?;
        return SecretsKey::from_base64(line.trim())
            .map_err(|why| ConfigError(format!("--old-key (stdin) {why}")));
    }
    if !text.starts_with("env:") {
        return Err(ConfigError(
            "--old-key takes env:NAME or - (one line of stdin), never the key itself: a key \
             on the command line is in the shell's history and in ps"
                .into(),
        ));
    }
    parse_key("--old-key", text, env)
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
