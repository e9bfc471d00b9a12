//! Which URLs the gateway may fetch from a host a provider's delivery names (PayPal's
//! `cert_url_hosts`), decided from the URL alone before any name lookup or connection. A small
//! type of its own, below both the configuration (which refuses a bad entry at startup) and the
//! verifier (which checks each delivery's URL).
//!
//! An entry is a host, optionally with a port:
//! - `paypal.com` allows the host `paypal.com` itself and every host ending in `.paypal.com`
//!   (exact host or dot-suffix, never a substring: `paypal.com.evil.example` and
//!   `evilpaypal.com` do not match);
//! - `127.0.0.1` or `[::1]` allows that address only, written as an IP literal in the URL;
//! - without a port an entry allows port 443 only; `localhost:8443` allows exactly that port.
//!
//! A DNS entry needs two labels at least (`com` would allow half the internet), except
//! `localhost`. PayPal's default (`signature::paypal::settings::DEFAULT_CERT_URL_HOSTS`) is
//! `paypal.com`: it never allows an IP literal, `localhost` or another port.
//!
//! The URL is parsed once (WHATWG rules, as browsers): numeric host tricks (`0x7f.1`,
//! `2130706433`) become the IPv4 address they mean and then need an IP entry, `user@host`
//! forms are refused, a trailing-dot host is refused, a query is refused (PayPal's URLs have
//! none, and each query would be one more cache key for the same certificate). The same parsed
//! URL is what gets fetched, so the check and the request cannot read the string differently.

use std::net::IpAddr;

use url::{Host, Url};

/// Longer URLs are refused (PayPal's are under 100 bytes); they also key the cache.
const MAX_URL_LEN: usize = 2048;
const HTTPS_PORT: u16 = 443;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    /// The domain and its subdomains (lowercase ASCII, no trailing dot).
    Domain(String),
    Ip(IpAddr),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    pattern: Pattern,
    port: u16,
}

/// The parsed `cert_url_hosts`.
#[derive(Debug, Clone)]
pub struct CertUrlPolicy {
    rules: Vec<Rule>,
}

impl CertUrlPolicy {
    /// Parses every entry; the error names the entry and what is wrong with it.
    pub fn new(entries: &[String]) -> Result<Self, String> {
        if entries.is_empty() {
            return Err("is empty: no PayPal delivery could be verified".into());
        }
        let rules = entries
            .iter()
            .map(|entry| Rule::parse(entry).map_err(|why| format!("entry {entry:?}: {why}")))
            .collect::<Result<_, _>>()?;
        Ok(Self { rules })
    }

    /// The URL to fetch, when `raw` may be fetched; otherwise why not (no secret, no echo of
    /// the URL: the reason reaches the log).
    pub fn check(&self, raw: &str) -> Result<Url, &'static str> {
        if raw.len() > MAX_URL_LEN {
            return Err("longer than 2048 bytes");
        }
        let mut url = Url::parse(raw).map_err(|_| "not a URL")?;
        if url.scheme() != "https" {
            return Err("not https");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("carries user information (user@host)");
        }
        // PayPal's certificate URLs have none; allowing one would let a sender name the same
        // certificate under endless cache keys and push the real ones out.
        if url.query().is_some() {
            return Err("has a query");
        }
        let port = url.port_or_known_default().unwrap_or(HTTPS_PORT);
        let allowed = match url.host() {
            Some(Host::Domain(domain)) => {
                if domain.ends_with('.') {
                    return Err("host ends with a dot");
                }
                self.rules.iter().any(|rule| {
                    rule.port == port
                        && matches!(&rule.pattern, Pattern::Domain(d) if within(domain, d))
                })
            }
            Some(Host::Ipv4(ip)) => self.allows_ip(IpAddr::V4(ip), port),
            Some(Host::Ipv6(ip)) => self.allows_ip(IpAddr::V6(ip), port),
            None => return Err("has no host"),
        };
        if !allowed {
            return Err("host or port not in cert_url_hosts");
        }
        // Never sent, but the cache key should not vary with it.
        url.set_fragment(None);
        Ok(url)
    }

    /// Whether a DNS name a certificate presents (possibly `*.`-wildcarded) lies under an
    /// allowed host, whatever the port.
    pub fn allows_name(&self, presented: &str) -> bool {
        let name = presented.to_ascii_lowercase();
        let name = name.strip_prefix("*.").unwrap_or(&name);
        self.rules
            .iter()
            .any(|rule| matches!(&rule.pattern, Pattern::Domain(d) if within(name, d)))
    }

    /// The IP addresses allowed by an entry (their certificates must name the address).
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.rules.iter().filter_map(|rule| match rule.pattern {
            Pattern::Ip(ip) => Some(ip),
            Pattern::Domain(_) => None,
        })
    }

    /// The https hosts and ports an entry names outright (an IP address, or `localhost`):
    /// the operator chose them, so the fetch does not refuse their addresses, for this provider
    /// and on that port only (crate::outbound's grants). A domain entry (`paypal.com`) names no
    /// address: whatever it resolves to is checked.
    pub fn named_outright(&self) -> impl Iterator<Item = (String, u16)> + '_ {
        self.rules.iter().filter_map(|rule| match &rule.pattern {
            Pattern::Ip(ip) => Some((ip.to_string(), rule.port)),
            Pattern::Domain(d) if d == "localhost" => Some((d.clone(), rule.port)),
            Pattern::Domain(_) => None,
        })
    }

    fn allows_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.port == port && rule.pattern == Pattern::Ip(ip))
    }
}

/// `host` is `domain` or one of its subdomains.
fn within(host: &str, domain: &str) -> bool {
    host == domain
        || host
            .strip_suffix(domain)
            .is_some_and(|head| head.ends_with('.'))
}

impl Rule {
    fn parse(entry: &str) -> Result<Self, &'static str> {
        let entry = entry.trim();
        if entry.contains("://") || entry.contains('/') || entry.contains('@') {
            return Err("write a host (and port), not a URL");
        }
        // A bare IPv6 address (`::1`) has colons of its own; bracketed it may carry a port.
        if let Ok(ip) = entry.parse::<IpAddr>() {
            return Ok(Self {
                pattern: Pattern::Ip(ip),
                port: HTTPS_PORT,
            });
        }
        let (host, port) = split_port(entry)?;
        if let Some(inner) = host.strip_prefix('[') {
            let ip = inner
                .strip_suffix(']')
                .and_then(|ip| ip.parse::<std::net::Ipv6Addr>().ok())
                .ok_or("not an IPv6 address in brackets")?;
            return Ok(Self {
                pattern: Pattern::Ip(IpAddr::V6(ip)),
                port,
            });
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(Self {
                pattern: Pattern::Ip(ip),
                port,
            });
        }
        Ok(Self {
            pattern: Pattern::Domain(domain(host)?),
            port,
        })
    }
}

fn split_port(entry: &str) -> Result<(&str, u16), &'static str> {
    // The last colon after any closing bracket separates the port.
    let after_bracket = entry.rfind(']').map_or(0, |i| i + 1);
    match entry[after_bracket..].rfind(':') {
        Some(i) => {
            let at = after_bracket + i;
            let port = entry[at + 1..]
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or("port is not a number from 1 to 65535")?;
            Ok((&entry[..at], port))
        }
        None => Ok((entry, HTTPS_PORT)),
    }
}

fn domain(host: &str) -> Result<String, &'static str> {
    if host.starts_with("*.") {
        return Err("no wildcards: an entry already covers its subdomains");
    }
    let host = host.to_ascii_lowercase();
    if host.is_empty() || host.len() > 253 {
        return Err("a host name is 1 to 253 characters");
    }
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !labels.iter().all(label_ok) {
        return Err("not a host name (letters, digits and '-' between dots)");
    }
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err("looks like an IP address: write all four numbers");
    }
    if labels.len() < 2 && host != "localhost" {
        return Err("a single label would allow a whole top-level domain");
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::paypal::settings::DEFAULT_CERT_URL_HOSTS;

    fn policy(entries: &[&str]) -> CertUrlPolicy {
        CertUrlPolicy::new(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn default_policy() -> CertUrlPolicy {
        policy(DEFAULT_CERT_URL_HOSTS)
    }

    #[test]
    fn paypal_hosts_and_their_subdomains_are_allowed_by_default() {
        let p = default_policy();
        for url in [
            "https://api.paypal.com/v1/notifications/certs/CERT-360caa42-fca2a594-a5cafa77",
            "https://api.sandbox.paypal.com/v1/notifications/test",
            "https://paypal.com/cert.pem",
            "https://API.PayPal.com:443/x",
        ] {
            assert!(p.check(url).is_ok(), "{url} should be allowed");
        }
    }

    #[test]
    fn lookalike_hosts_are_refused() {
        let p = default_policy();
        for url in [
            "https://paypal.com.evil.example/cert.pem",
            "https://evilpaypal.com/cert.pem",
            "https://paypal.co/cert.pem",
            "https://api.paypal.com.evil.example/v1/notifications/certs/x",
            "https://xn--pypal-4ve.com/cert.pem",
            "https://api.paypal.com./cert.pem",
        ] {
            assert!(p.check(url).is_err(), "{url} should be refused");
        }
    }

    #[test]
    fn user_information_is_refused_wherever_the_paypal_name_sits() {
        let p = default_policy();
        assert_eq!(
            p.check("https://api.paypal.com@evil.example/"),
            Err("carries user information (user@host)")
        );
        assert_eq!(
            p.check("https://user:pass@api.paypal.com/"),
            Err("carries user information (user@host)")
        );
        // WHATWG reads a backslash as a slash: the host is api.paypal.com, the rest is path,
        // and that parsed URL (not the string) is what would be fetched.
        let url = p.check("https://api.paypal.com\\@evil.example/").unwrap();
        assert_eq!(url.host_str(), Some("api.paypal.com"));
    }

    #[test]
    fn only_https_on_port_443_is_allowed_by_default() {
        let p = default_policy();
        assert_eq!(p.check("http://api.paypal.com/x"), Err("not https"));
        assert_eq!(p.check("ftp://api.paypal.com/x"), Err("not https"));
        assert_eq!(
            p.check("https://api.paypal.com:8443/x"),
            Err("host or port not in cert_url_hosts")
        );
        assert_eq!(p.check("not a url"), Err("not a URL"));
        assert_eq!(p.check("https://api.paypal.com/c?v=1"), Err("has a query"));
        assert_eq!(p.check("https://api.paypal.com/c?"), Err("has a query"));
        let long = format!("https://api.paypal.com/{}", "a".repeat(3000));
        assert_eq!(p.check(&long), Err("longer than 2048 bytes"));
    }

    #[test]
    fn ip_literals_and_localhost_need_entries_of_their_own() {
        let p = default_policy();
        for url in [
            "https://127.0.0.1/cert.pem",
            "https://0x7f.1/cert.pem",
            "https://2130706433/cert.pem",
            "https://[::1]/cert.pem",
            "https://localhost/cert.pem",
        ] {
            assert!(p.check(url).is_err(), "{url} should be refused by default");
        }
        let p = policy(&["127.0.0.1:8443", "[::1]", "localhost:9000"]);
        assert!(p.check("https://127.0.0.1:8443/cert.pem").is_ok());
        // The same address however it is spelled: the parser normalises it first.
        assert!(p.check("https://0x7f.0.0.1:8443/cert.pem").is_ok());
        assert!(p.check("https://127.0.0.1/cert.pem").is_err());
        assert!(p.check("https://127.0.0.2:8443/cert.pem").is_err());
        assert!(p.check("https://[::1]/cert.pem").is_ok());
        assert!(p.check("https://localhost:9000/cert.pem").is_ok());
        assert!(p.check("https://localhost/cert.pem").is_err());
    }

    #[test]
    fn the_fragment_is_dropped_from_the_url_to_fetch() {
        let url = default_policy()
            .check("https://api.paypal.com/c#frag")
            .unwrap();
        assert_eq!(url.as_str(), "https://api.paypal.com/c");
    }

    #[test]
    fn entries_that_would_allow_too_much_or_nothing_are_refused() {
        for entry in [
            "com",
            "*.paypal.com",
            "https://api.paypal.com",
            "api.paypal.com/x",
            "paypal..com",
            "127.1",
            "paypal.com:0",
            "paypal.com:99999",
            "[::1",
            "-a.paypal.com",
            "",
        ] {
            assert!(
                CertUrlPolicy::new(&[entry.to_string()]).is_err(),
                "{entry:?} should be refused"
            );
        }
        assert!(CertUrlPolicy::new(&[]).is_err());
    }

    #[test]
    fn certificate_names_are_matched_by_the_same_rule() {
        let p = default_policy();
        assert!(p.allows_name("messageverificationcerts.paypal.com"));
        assert!(p.allows_name("messageverificationcerts.sandbox.paypal.com"));
        assert!(p.allows_name("*.paypal.com"));
        assert!(p.allows_name("PayPal.com"));
        assert!(!p.allows_name("*.com"));
        assert!(!p.allows_name("paypal.com.evil.example"));
        assert!(!p.allows_name("evilpaypal.com"));
    }
}
