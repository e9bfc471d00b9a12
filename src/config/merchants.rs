//! `[[merchants]]`: the merchants that hear of their orders' changes, and their endpoints.

use serde::Deserialize;

use super::rules::{ConfigError, Environment, long_enough, outbound_url, resolve_secret};
use crate::outbound::Origin;
use crate::secret::Secret;

/// A merchant of `[[merchants]]`: its notification endpoint, if it has one, and the origins
/// its endpoints may reach although their addresses are refused to everyone else.
#[derive(Debug, Clone)]
pub struct MerchantSettings {
    pub id: i64,
    /// `None`: the merchant gets no notifications from the file (it may make an endpoint by API).
    pub endpoint: Option<NotifyEndpoint>,
    /// `allow_hosts`: origins (scheme, host, port) this merchant's endpoints by API may name
    /// although they resolve to an address the sender refuses (a local receiver, a host inside
    /// the network the operator vouches for). Nobody else's.
    pub allow_hosts: Vec<Origin>,
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
    /// The origins each merchant was granted: those of its `allow_hosts`, and the origin of its
    /// endpoint in the file (the operator named it, for this merchant only).
    pub fn grants(merchants: &[MerchantSettings]) -> impl Iterator<Item = (i64, Origin)> + '_ {
        merchants.iter().flat_map(|m| {
            let file = m
                .endpoint
                .as_ref()
                .and_then(|e| Origin::of(&e.url))
                .map(|origin| (m.id, origin));
            m.allow_hosts
                .iter()
                .map(|origin| (m.id, origin.clone()))
                .chain(file)
        })
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
    allow_hosts: Option<Vec<String>>,
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
        let allow_hosts = merchant
            .allow_hosts
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(i, text)| {
                Origin::parse(text).map_err(|why| {
                    ConfigError(format!("{}[{i}] {text:?} {why}", field("allow_hosts")))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        merchants.push(MerchantSettings {
            id,
            endpoint,
            allow_hosts,
        });
    }
    Ok(merchants)
}
