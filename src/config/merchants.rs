//! `[[merchants]]`: the merchants that hear of their orders' changes, and their endpoints.

use serde::Deserialize;

use super::rules::{ConfigError, Environment, long_enough, outbound_url, resolve_secret};
use crate::secret::Secret;

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

impl MerchantSettings {
    /// The merchants whose notifications this gateway sends, with their endpoints.
    pub fn endpoints(
        merchants: &[MerchantSettings],
    ) -> impl Iterator<Item = (i64, &NotifyEndpoint)> {
        merchants
            .iter()
            .filter_map(|m| m.endpoint.as_ref().map(|e| (m.id, e)))
    }
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMerchant {
    id: Option<i64>,
    notify_url: Option<String>,
    notify_secret: Option<String>,
}

/// `[[merchants]]`: ids unique and positive; `notify_url` and `notify_secret` both or neither.
pub(super) fn validate(
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
                let secret = Secret::new(resolve_secret(&name, &secret, env)?);
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
