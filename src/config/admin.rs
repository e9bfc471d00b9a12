//! `[admin]`: the admin token.

use serde::Deserialize;

use super::rules::{ConfigError, Environment, long_enough, resolve_secret};
use crate::secret::Secret;

#[derive(Debug, Clone, Default)]
pub struct AdminSettings {
    /// `None` disables the admin endpoints (every call is 401).
    pub token: Option<Secret>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    token: Option<String>,
}

pub(super) fn validate(raw: RawAdmin, env: &dyn Environment) -> Result<AdminSettings, ConfigError> {
    let admin_token = raw
        .token
        .map(|t| resolve_secret("admin.token", &t, env).map(Secret::new))
        .transpose()?;
    if let Some(token) = &admin_token {
        long_enough("admin.token", token.expose().len())?;
    }
    Ok(AdminSettings { token: admin_token })
}
