//! Outgoing requests never reach what the operator did not allow, and never leave through a
//! proxy the environment names. Every client that calls out (notification attempts, provider
//! fetches, refund calls, PayPal certificates, the OTLP exporter) is built here, by
//! [`Outbound::new`]: no proxy is read from the environment (`HTTP_PROXY`, `HTTPS_PROXY` and
//! `ALL_PROXY` would otherwise carry every request, and the proxy, not the gateway, would choose
//! the address), no redirect is followed, and every host name is resolved by the gateway
//! itself ([`CheckedResolver`]), which keeps only the addresses a public service can have and
//! connects to the address it checked (no second lookup). A URL that names an IP literal is
//! checked before any connection, since no lookup happens for it.
//!
//! Refused: loopback, RFC 1918, carrier-grade NAT (100.64/10), link-local (169.254/16 and
//! fe80::/10, the cloud metadata address among them), unique-local (fc00::/7), site-local
//! (fec0::/10), multicast, unspecified and broadcast, 0/8, 192.0.0.0/24, the benchmarking
//! 198.18.0.0/15, the reserved 240.0.0.0/4, the documentation ranges; and every IPv6 form that
//! carries an IPv4 address (IPv4-mapped and -compatible, NAT64 `64:ff9b::/96` and
//! `64:ff9b:1::/48`, 6to4, Teredo) is judged by the IPv4 address it carries: on a DNS64 network
//! a name with only `A 10.0.0.5` resolves to `64:ff9b::a00:5`, which reaches 10.0.0.5.
//!
//! An exemption names an origin (scheme, host, port) and holds for the one owner it was written
//! for (a merchant, a provider): a request to a granted origin goes through a client of its own
//! whose resolver lets that host's addresses through; every other request goes through the
//! checked client. So one merchant's `allow_hosts`, or the host of its endpoint in the
//! configuration file, is nobody else's way in, and the same host on another port is not.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::Hash;
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
        IpAddr::V6(v6) => match embedded_v4(v6) {
            // Whatever carries an IPv4 address is judged by every address it may reach.
            Some(carried) => carried.into_iter().flatten().all(public_v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let carrier_grade_nat = a == 100 && (64..128).contains(&b);
    let this_network = a == 0;
    // IETF protocol assignments (192.0.0.0/24: DS-Lite, NAT64 discovery...).
    let protocol_assignments = a == 192 && b == 0 && c == 0;
    // Benchmarking (RFC 2544), often routed inside data centres.
    let benchmarking = a == 198 && (b & 0xfe) == 18;
    // Reserved for future use; 255.255.255.255 among them.
    let reserved = a >= 240;
    let documentation = (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113);
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || carrier_grade_nat
        || this_network
        || protocol_assignments
        || benchmarking
        || reserved
        || documentation)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    let [first, second, ..] = ip.segments();
    let unique_local = (first & 0xfe00) == 0xfc00;
    let link_local = (first & 0xffc0) == 0xfe80;
    let site_local = (first & 0xffc0) == 0xfec0;
    let documentation = first == 0x2001 && second == 0x0db8;
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || unique_local
        || link_local
        || site_local
        || documentation)
}

/// The IPv4 addresses an IPv6 address carries, when it is of a form that carries one (at most
/// two: a Teredo address names its server and its client).
fn embedded_v4(ip: Ipv6Addr) -> Option<[Option<Ipv4Addr>; 2]> {
    let o = ip.octets();
    let s = ip.segments();
    let last_32 = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if let Some(mapped) = ip.to_ipv4_mapped() {
        return Some([Some(mapped), None]);
    }
    // IPv4-compatible (::/96, deprecated); :: and ::1 among them, judged as 0.0.0.0 and
    // 0.0.0.1 (this network): refused either way.
    if s[..6].iter().all(|x| *x == 0) {
        return Some([Some(last_32), None]);
    }
    // NAT64, the well-known prefix (RFC 6052): the address in the last 32 bits.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) {
        return Some([Some(last_32), None]);
    }
    // NAT64, the local-use prefix (RFC 8215): a /48, whose RFC 6052 layout puts the address
    // in bits 48..63 and 72..87; networks that use it as a /96 put it in the last 32 bits.
    // Both are judged.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 0x0001 {
        let rfc6052 = Ipv4Addr::new(o[6], o[7], o[9], o[10]);
        return Some([Some(rfc6052), Some(last_32)]);
    }
    // 6to4 (2002::/16): the relay's IPv4 address in bits 16..47.
    if s[0] == 0x2002 {
        return Some([Some(Ipv4Addr::new(o[2], o[3], o[4], o[5])), None]);
    }
    // Teredo (2001:0::/32): the server in bits 32..63, the client bit-inverted in the last 32.
    if s[0] == 0x2001 && s[1] == 0 {
        let server = Ipv4Addr::new(o[4], o[5], o[6], o[7]);
        let client = Ipv4Addr::from(!u32::from(last_32));
        return Some([Some(server), Some(client)]);
    }
    None
}

/// An origin as an exemption names it: scheme, host (lowercase, IPv6 without brackets) and
/// port (the scheme's default when the URL has none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: String,
    host: String,
    port: u16,
}

impl Origin {
    /// The origin of `url`; `None` for a URL without a host or a port (not http or https).
    pub fn of(url: &reqwest::Url) -> Option<Self> {
        let host = bare_host(url);
        if host.is_empty() {
            return None;
        }
        Some(Self {
            scheme: url.scheme().to_owned(),
            host,
            port: url.port_or_known_default()?,
        })
    }

    /// `scheme://host:port` (an IPv6 host with or without its brackets).
    pub fn new(scheme: &str, host: &str, port: u16) -> Self {
        Self {
            scheme: scheme.to_ascii_lowercase(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase(),
            port,
        }
    }

    /// An origin as written in the configuration: `https://host` or `http://host:port`,
    /// nothing after the port but an optional `/`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let url = reqwest::Url::parse(text.trim())
            .map_err(|_| "is not an origin (write scheme://host[:port])".to_owned())?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err("is not an http:// or https:// origin".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("carries user:password@".into());
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err("names more than an origin: no path, query or fragment".into());
        }
        Self::of(&url).ok_or_else(|| "has no host".into())
    }

    pub fn host(&self) -> &str {
        &self.host
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
        }
    }
}

/// The origin of `url` when its host names an address outright (an IP literal, `localhost`):
/// a provider's `api_base_url` or allowlist entry the operator wrote so is granted to that
/// provider (an emulator, a local service). A name (`api.mollie.com`) grants nothing: whatever
/// it resolves to is checked, so a DNS answer pointing it inside the network is refused.
pub fn named_outright(url: &reqwest::Url) -> Option<Origin> {
    let host = bare_host(url);
    (host == "localhost" || host.parse::<IpAddr>().is_ok())
        .then(|| Origin::of(url))
        .flatten()
}

/// A URL's host as the policy compares it: lowercase, IPv6 without brackets.
fn bare_host(url: &reqwest::Url) -> String {
    url.host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// The host of `url` when it is an IP literal the policy refuses: what is asked of an endpoint
/// as it is made. A name is not resolved then (a merchant could tell the names that exist
/// inside the network from those that exist nowhere); it is judged by its addresses at every
/// attempt.
pub fn refused_outright(url: &reqwest::Url) -> Option<String> {
    refused_literal(url)
}

/// The host of `url` when it is an IP literal the policy refuses.
fn refused_literal(url: &reqwest::Url) -> Option<String> {
    let host = bare_host(url);
    match host.parse::<IpAddr>() {
        Ok(ip) if !public_address(ip) => Some(host),
        _ => None,
    }
}

/// The clients of one kind of outgoing request and the origins granted to each owner (`K`: a
/// merchant id for notifications, a provider's name, `()` for a provider's own client). The
/// only place a client that calls out is built.
#[derive(Clone)]
pub struct Outbound<K> {
    allow_http: bool,
    grants: HashSet<(K, Origin)>,
    checked: reqwest::Client,
    /// One client per granted origin: its resolver lets that origin's host through.
    granted: HashMap<Origin, reqwest::Client>,
    resolver: Arc<CheckedResolver>,
}

impl<K: Eq + Hash> Outbound<K> {
    /// The clients: `configure` adds what the caller needs (timeouts, TLS, a user agent) to a
    /// builder that already reads no proxy, follows no redirect and resolves through the
    /// checks. `allow_http`: plain `http://` is allowed to origins nobody granted.
    pub fn new(
        grants: impl IntoIterator<Item = (K, Origin)>,
        allow_http: bool,
        configure: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
    ) -> Result<Self, reqwest::Error> {
        let grants: HashSet<(K, Origin)> = grants.into_iter().collect();
        let resolver = Arc::new(CheckedResolver { exempt: None });
        let checked = configure(base(resolver.clone())).build()?;
        let mut granted = HashMap::new();
        for (_, origin) in &grants {
            if granted.contains_key(origin) {
                continue;
            }
            let exempt = Arc::new(CheckedResolver {
                exempt: Some(origin.host.clone()),
            });
            granted.insert(origin.clone(), configure(base(exempt)).build()?);
        }
        Ok(Self {
            allow_http,
            grants,
            checked,
            granted,
            resolver,
        })
    }

    /// Whether `owner` was granted `url`'s origin.
    pub fn grants(&self, owner: &K, url: &reqwest::Url) -> bool
    where
        K: Clone,
    {
        Origin::of(url).is_some_and(|origin| self.grants.contains(&(owner.clone(), origin)))
    }

    /// The client for `owner`'s request to `url`: the granted origin's, or the checked one
    /// once the URL's scheme and IP literal pass. A name is decided when it is resolved.
    pub fn client(&self, owner: &K, url: &reqwest::Url) -> Result<&reqwest::Client, Refused>
    where
        K: Clone,
    {
        if let Some(client) = Origin::of(url)
            .filter(|origin| self.grants.contains(&(owner.clone(), origin.clone())))
            .and_then(|origin| self.granted.get(&origin))
        {
            return Ok(client);
        }
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            _ => return Err(Refused::Scheme),
        }
        match refused_literal(url) {
            Some(host) => Err(Refused::Address(host)),
            None => Ok(&self.checked),
        }
    }

    /// Whether `owner` may not reach `url` (where a redirect, never followed, points): a
    /// refused literal, or a name that resolves only to refused addresses.
    pub async fn refuses(&self, owner: &K, url: &reqwest::Url) -> bool
    where
        K: Clone,
    {
        if self.grants(owner, url) {
            return false;
        }
        if refused_literal(url).is_some() {
            return true;
        }
        let host = bare_host(url);
        if host.parse::<IpAddr>().is_ok() {
            return false;
        }
        match host.parse::<Name>() {
            Ok(name) => self.resolver.resolve(name).await.is_err(),
            Err(_) => false,
        }
    }
}

/// The one builder every outgoing client starts from.
fn base(resolver: Arc<CheckedResolver>) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        // The environment's proxies would carry the request, and the proxy would choose the
        // address: every rule here would be void.
        .no_proxy()
        // A redirect would take the request wherever the answer points.
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(resolver)
}

/// Resolves a host and keeps only the addresses the policy allows (every address of the one
/// host a granted origin names); none left is an error reqwest reports as a connection
/// failure, recognisable with [`refused_address`].
#[derive(Debug)]
pub struct CheckedResolver {
    /// The host of the granted origin this resolver's client serves.
    exempt: Option<String>,
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
        let exempt = self.exempt.as_deref() == Some(host.as_str());
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
    fn ipv6_forms_that_carry_an_ipv4_address_are_judged_by_that_address() {
        for refused in [
            // NAT64, the well-known prefix and the local-use one (RFC 6052, RFC 8215).
            "64:ff9b::10.0.0.5",
            "64:ff9b::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:5",
            "64:ff9b:1:a00:0:500::",
            // IPv4-compatible (::/96).
            "::10.0.0.5",
            "::127.0.0.1",
            // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD.
            "2002:a00:5::1",
            "2002:7f00:1::",
            // Teredo: the client's address, bit-inverted, in the last 32 bits.
            "2001:0:4136:e378:8000:63bf:f5ff:fffa",
            // The server's address in bits 32 to 63.
            "2001:0:a00:5::1",
            // Site-local (deprecated, still routed inside some networks).
            "fec0::1",
            "feff::1",
        ] {
            assert!(!public_address(refused.parse().unwrap()), "{refused}");
        }
        for allowed in [
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        ] {
            assert!(public_address(allowed.parse().unwrap()), "{allowed}");
        }
    }

    #[test]
    fn special_purpose_ipv4_ranges_are_refused() {
        for refused in [
            "192.0.0.1",
            "192.0.0.170",
            "198.18.0.1",
            "198.19.255.254",
            "240.0.0.1",
            "250.1.2.3",
        ] {
            assert!(!public_address(refused.parse().unwrap()), "{refused}");
        }
        for allowed in [
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.1",
            "239.255.255.255",
        ] {
            let ip: IpAddr = allowed.parse().unwrap();
            assert_eq!(public_address(ip), !ip.is_multicast(), "{allowed}");
        }
    }

    fn outbound(grants: &[(i64, &str)], allow_http: bool) -> Outbound<i64> {
        Outbound::new(
            grants
                .iter()
                .map(|(owner, origin)| (*owner, Origin::parse(origin).unwrap())),
            allow_http,
            |builder| builder,
        )
        .unwrap()
    }

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).unwrap()
    }

    #[test]
    fn a_url_naming_a_nat64_literal_of_a_private_address_is_refused_before_connecting() {
        let outbound = outbound(&[], false);
        assert!(matches!(
            outbound.client(&1, &url("https://[64:ff9b::a00:5]/hook")),
            Err(Refused::Address(_))
        ));
    }

    #[test]
    fn a_url_is_refused_for_its_scheme_or_its_literal_address_unless_its_origin_is_granted() {
        let outbound = outbound(
            &[(1, "https://127.0.0.1:8443"), (1, "https://[::1]")],
            false,
        );
        assert_eq!(
            outbound.client(&1, &url("http://example.com/")).err(),
            Some(Refused::Scheme)
        );
        assert!(matches!(
            outbound.client(&1, &url("https://10.0.0.1/")),
            Err(Refused::Address(_))
        ));
        assert!(matches!(
            outbound.client(&1, &url("https://[fd00::1]/hook")),
            Err(Refused::Address(_))
        ));
        assert!(
            outbound
                .client(&1, &url("https://127.0.0.1:8443/any/path"))
                .is_ok()
        );
        assert!(outbound.client(&1, &url("https://[::1]/")).is_ok());
        // Another port, another scheme, another owner: not granted.
        assert!(
            outbound
                .client(&1, &url("https://127.0.0.1:8444/"))
                .is_err()
        );
        assert!(outbound.client(&1, &url("http://127.0.0.1:8443/")).is_err());
        assert!(
            outbound
                .client(&2, &url("https://127.0.0.1:8443/"))
                .is_err()
        );
        // A name is decided when it is resolved.
        assert!(outbound.client(&1, &url("https://localhost/")).is_ok());
        let http = outbound_with_http();
        assert!(matches!(
            http.client(&1, &url("http://127.0.0.1/")),
            Err(Refused::Address(_))
        ));
    }

    fn outbound_with_http() -> Outbound<i64> {
        outbound(&[], true)
    }

    #[test]
    fn an_origin_is_a_scheme_a_host_and_a_port_and_nothing_else() {
        let origin = Origin::parse("HTTPS://Merchant.Example").unwrap();
        assert_eq!(origin.to_string(), "https://merchant.example:443");
        assert_eq!(
            Origin::parse("http://[::1]:8080/").unwrap().to_string(),
            "http://[::1]:8080"
        );
        for bad in [
            "merchant.example",
            "ftp://merchant.example",
            "https://merchant.example/hooks",
            "https://merchant.example/?q=1",
            "https://user@merchant.example",
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn the_resolver_keeps_no_refused_address_of_a_name_unless_its_origin_is_granted() {
        let refusing = CheckedResolver { exempt: None };
        let name: Name = "localhost".parse().unwrap();
        let error = match refusing.resolve(name).await {
            Ok(addrs) => panic!("localhost resolved to {:?}", addrs.collect::<Vec<_>>()),
            Err(error) => error,
        };
        assert!(
            error.to_string().starts_with("address_not_allowed"),
            "{error}"
        );
        let granted = CheckedResolver {
            exempt: Some("localhost".into()),
        };
        let addrs: Vec<SocketAddr> = granted
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
        let outbound = outbound(&[(1, "http://localhost:9000")], false);
        assert!(!outbound.refuses(&1, &url("http://localhost:9000/x")).await);
        assert!(outbound.refuses(&1, &url("http://localhost:9001/x")).await);
        assert!(outbound.refuses(&2, &url("http://localhost:9000/x")).await);
        assert!(outbound.refuses(&1, &url("http://10.1.1.1/x")).await);
    }
}
