//! `[portal]`: how long a portal link stays valid, and the address merchants reach the gateway
//! at (for the link's full URL).

use serde::Deserialize;

use super::rules::{ConfigError, bounded};

/// The merchant portal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortalSettings {
    /// A link opens a session within this many minutes of being made (15 by default).
    pub link_minutes: i64,
    /// `https://pay.example.com`: the gateway as merchants reach it; a link's `url` is this
    /// plus its path. `None`: the answer gives the path alone.
    pub public_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPortal {
    link_minutes: Option<u64>,
    public_url: Option<String>,
}

pub(super) fn validate(raw: RawPortal) -> Result<PortalSettings, ConfigError> {
    let link_minutes = bounded("portal.link_minutes", raw.link_minutes, 15, 1, 1440)?;
    let public_url = raw
        .public_url
        .map(|text| {
            let url = reqwest::Url::parse(&text)
                .map_err(|e| ConfigError(format!("portal.public_url: not a URL ({e})")))?;
            if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
                return Err(ConfigError(
                    "portal.public_url: an http(s):// URL with a host".into(),
                ));
            }
            Ok(text.trim_end_matches('/').to_owned())
        })
        .transpose()?;
    Ok(PortalSettings {
        link_minutes: i64::try_from(link_minutes).unwrap_or(15),
        public_url,
    })
}
