//! Outgoing requests never reach what the operator did not allow. The gateway resolves a
//! host itself and refuses the addresses a public service never has: loopback, RFC 1918,
//! carrier-grade NAT (100.64/10), link-local (169.254/16 and fe80::/10, the cloud metadata
//! address among them), unique-local (fc00::/7), multicast, unspecified and broadcast, and the
//! same behind an IPv4-mapped IPv6 address. It then connects to the address it checked: reqwest
//! gets the checked addresses from [`CheckedResolver`] and looks nothing up again. A URL that
//! names an IP literal is checked before any connection ([`AddressPolicy::check_url`]), since
//! no lookup happens for it. Hosts the operator names (`[notifications] allow_hosts`, an
//! endpoint of the configuration file, a provider's own allowlist entry for an address) are
//! exempt. Redirects are never followed and answers are read to a bound by the callers.
//!
//! Below the notification sender and the provider fetches, which each build their client with
//! [`AddressPolicy::resolver`].

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The stable reason of a refused address (attempts' `last_error`, attention, metrics).
pub const ADDRESS_NOT_ALLOWED: &str = "address_not_allowed";

/// Why an outgoing request was refused before it connected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The host is, or resolves only to, an address the policy refuses.
    #[error("address_not_allowed: {0} is not an address the gateway may call")]
    Address(String),
    /// `http://` where only `https://` is allowed.
    #[error("only https:// URLs are allowed")]
    Scheme,
}

/// True for an address a public service may have.
pub fn public_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let carrier_grade_nat = a == 100 && (64..128).contains(&b);
    let this_network = a == 0;
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || carrier_grade_nat
        || this_network)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = (first & 0xfe00) == 0xfc00;
    let link_local = (first & 0xffc0) == 0xfe80;
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || unique_local || link_local)
}

/// What outgoing requests of one kind may reach.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    /// Hosts (lowercase, IPv6 without brackets) whose addresses are not checked.
    exempt: Arc<HashSet<String>>,
    /// Plain `http://` is allowed too.
    allow_http: bool,
}

/// A URL's host as the policy compares it: lowercase, IPv6 without brackets.
fn bare_host(url: &reqwest::Url) -> String {
    url.host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

impl AddressPolicy {
    pub fn new(exempt: impl IntoIterator<Item = String>, allow_http: bool) -> Self {
        Self {
            exempt: Arc::new(
                exempt
                    .into_iter()
                    .map(|h| {
                        h.trim_start_matches('[')
                            .trim_end_matches(']')
                            .to_ascii_lowercase()
                    })
                    .collect(),
            ),
            allow_http,
        }
    }

    /// True when `host` is one the operator named.
    pub fn exempts(&self, host: &str) -> bool {
        self.exempt.contains(&host.to_ascii_lowercase())
    }

    /// What can be decided from the URL alone: its scheme, and an IP-literal host. A host
    /// name is decided when it is resolved ([`CheckedResolver`]).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            _ => return Err(Refused::Scheme),
        }
        self.check_literal(url)
    }

    /// The host alone: an IP literal the policy refuses (a name is decided when resolved).
    pub fn check_literal(&self, url: &reqwest::Url) -> Result<(), Refused> {
        let host = bare_host(url);
        if self.exempts(&host) {
            return Ok(());
        }
        match host.parse::<IpAddr>() {
            Ok(ip) if !public_address(ip) => Err(Refused::Address(host)),
            _ => Ok(()),
        }
    }

    /// The resolver a client of this policy connects through.
    pub fn resolver(&self) -> Arc<CheckedResolver> {
        Arc::new(CheckedResolver {
            exempt: self.exempt.clone(),
        })
    }
}

/// Resolves a host and keeps only the addresses the policy allows (all of them for an exempt
/// host); none left is an error reqwest reports as a connection failure, recognisable with
/// [`refused_address`].
#[derive(Debug)]
pub struct CheckedResolver {
    exempt: Arc<HashSet<String>>,
}

/// The resolver's refusal, inside reqwest's error.
#[derive(Debug, thiserror::Error)]
#[error("address_not_allowed: {host} resolves only to addresses the gateway may not call")]
struct AddressNotAllowed {
    host: String,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_ascii_lowercase();
        let exempt = self.exempt.contains(&host);
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|addr| exempt || public_address(addr.ip()))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(AddressNotAllowed { host }) as _);
            }
            let addrs: Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// True when `error` is the resolver refusing every address of the host.
pub fn refused_address(error: &reqwest::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<AddressNotAllowed>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addresses_a_public_service_never_has_are_refused() {
        for refused in [
            "127.0.0.1",
            "127.8.9.10",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fc12::5",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
        ] {
            assert!(!public_address(refused.parse().unwrap()), "{refused}");
        }
        for allowed in [
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
        ] {
            assert!(public_address(allowed.parse().unwrap()), "{allowed}");
        }
    }

    #[test]
    fn a_url_is_refused_for_its_scheme_or_its_literal_address_unless_its_host_is_named() {
        let policy = AddressPolicy::new(["127.0.0.1".to_owned(), "[::1]".to_owned()], false);
        let url = |u: &str| reqwest::Url::parse(u).unwrap();
        assert_eq!(
            policy.check_url(&url("http://example.com/")),
            Err(Refused::Scheme)
        );
        assert!(matches!(
            policy.check_url(&url("https://10.0.0.1/")),
            Err(Refused::Address(_))
        ));
        assert!(matches!(
            policy.check_url(&url("https://[fd00::1]/hook")),
            Err(Refused::Address(_))
        ));
        assert_eq!(policy.check_url(&url("https://127.0.0.1:8443/")), Ok(()));
        assert_eq!(policy.check_url(&url("https://[::1]/")), Ok(()));
        // A name is decided when it is resolved.
        assert_eq!(policy.check_url(&url("https://localhost/")), Ok(()));
        let http = AddressPolicy::new([], true);
        assert!(matches!(
            http.check_url(&url("http://127.0.0.1/")),
            Err(Refused::Address(_))
        ));
    }

    #[tokio::test]
    async fn the_resolver_keeps_no_refused_address_of_a_name_unless_it_is_named() {
        let refusing = AddressPolicy::new([], false).resolver();
        let name: Name = "localhost".parse().unwrap();
        let error = match refusing.resolve(name).await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(error) => error,
        };
        assert!(
            error.to_string().starts_with("address_not_allowed"),
            "{error}"
        );
        let named = AddressPolicy::new(["localhost".to_owned()], false).resolver();
        let addrs: Vec<SocketAddr> = named
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}
