//! TLS to PostgreSQL, as libpq's `sslmode` and `sslrootcert` URL parameters say, over rustls
//! (ring: the build's one TLS stack). tokio-postgres reads `sslmode` `disable`, `prefer` and
//! `require` only, and no `sslrootcert`, so both are taken out of the URL here before the
//! driver reads the rest, and the modes it lacks are built with rustls' own verifiers:
//!
//! | `sslmode` | encrypted | the server's certificate |
//! |---|---|---|
//! | `disable` | never | - |
//! | `prefer` (libpq's default, and ours) | when the server offers TLS, else plain | not checked |
//! | `require` | always, else no connection | not checked; checked as `verify-ca` when `sslrootcert` is given (libpq does the same) |
//! | `verify-ca` | always | its chain leads to a root of `sslrootcert` |
//! | `verify-full` | always | `verify-ca`, and it names the host connected to (each host of a multi-host URL in turn) |
//!
//! `sslrootcert` is a PEM file of trusted roots, or `system` for Mozilla's roots (webpki-roots);
//! `verify-ca` and `verify-full` need it. `allow` (plain first, TLS only if the server insists)
//! is refused: it would send the password in clear to any server that accepts it.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values that the gateway supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: it tries plain text first, so the \
                            password goes in clear to any server that accepts it; use prefer, \
                            require, verify-ca or verify-full"
                        .into(),
                );
            }
            _ => {
                return Err(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full".into(),
                );
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// The driver's mode: it negotiates, the connector decides what a certificate must be.
    fn driver(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }
}

/// Where trusted roots come from (`sslrootcert`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// `system`: Mozilla's roots, as webpki-roots carries them.
    System,
    /// A PEM file.
    File(String),
}

/// A database URL's TLS parameters, taken out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsParams {
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
}

/// Splits `url` into the URL the driver reads (without `sslmode` and `sslrootcert`, every other
/// byte as it was) and its TLS parameters. `url` is a `postgres://` or `postgresql://` URL (the
/// configuration accepts no other form). Errors name the parameter, never the URL (it may hold
/// a password).
pub fn split(url: &str) -> Result<(String, TlsParams), String> {
    // The driver reads the credentials up to the first `@`, so a password may hold a `?`:
    // the query starts at the first `?` after them. (An `@` in a query value makes the driver
    // read all before it as credentials, and this split reads it the same way: such a URL
    // names another host and fails to connect, whatever its sslmode; encode it as %40.)
    let after_credentials = url.find('@').map_or(0, |at| at + 1);
    let (base, query) = match url[after_credentials..].find('?') {
        Some(at) => url.split_at(after_credentials + at),
        None => (url, ""),
    };
    let query = query.strip_prefix('?').unwrap_or(query);
    let mut mode = None;
    let mut root_cert = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = || {
            percent_decode(value).ok_or_else(|| format!("{key}: not valid percent-encoded UTF-8"))
        };
        match percent_decode(key).as_deref() {
            Some("sslmode") => mode = Some(SslMode::parse(&value()?)?),
            Some("sslrootcert") => {
                let value = value()?;
                root_cert = Some(if value == "system" {
                    RootCert::System
                } else {
                    RootCert::File(value)
                });
            }
            _ => kept.push(pair),
        }
    }
    // `system` trusts every public CA, which will certify anyone's own domain: only a check of
    // the name means anything with it, so it implies verify-full and refuses weaker modes (as
    // libpq 16 does).
    let mode = match (mode, &root_cert) {
        (None, Some(RootCert::System)) => SslMode::VerifyFull,
        (Some(mode), Some(RootCert::System)) if mode != SslMode::VerifyFull => {
            return Err(format!(
                "sslrootcert=system needs sslmode=verify-full (the public roots vouch for anyone's \
                 domain, so only the host name check authenticates the server), not {}",
                mode.as_str()
            ));
        }
        (mode, _) => mode.unwrap_or(SslMode::Prefer),
    };
    if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && root_cert.is_none() {
        return Err(format!(
            "sslmode={} needs sslrootcert: a PEM file of the CA that signed the server's \
             certificate, or `system` for the public roots",
            mode.as_str()
        ));
    }
    let driver_url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((driver_url, TlsParams { mode, root_cert }))
}

/// `%XX` decoding of one URL query component (`+` stays `+`, as libpq reads it).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl TlsParams {
    /// The driver's `sslmode` for these parameters.
    pub fn driver_mode(&self) -> tokio_postgres::config::SslMode {
        self.mode.driver()
    }

    /// The connector, or `None` for `disable`. Reads `sslrootcert` now, so a missing or bad
    /// file stops startup rather than every connection.
    pub fn connector(&self) -> Result<Option<MakeRustlsConnect>, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        let roots = match &self.root_cert {
            Some(root) => Some(Arc::new(roots(root)?)),
            None => None,
        };
        let config = match (self.mode, roots) {
            (SslMode::Disable, _) => return Ok(None),
            // Encryption without a check of who answers, as libpq's prefer and require.
            (SslMode::Prefer | SslMode::Require, None) => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate { provider }))
                .with_no_client_auth(),
            (SslMode::VerifyFull, Some(roots)) => {
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, Some(roots)) => {
                let chain = WebPkiServerVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| format!("sslrootcert: {e}"))?;
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(chain)))
                    .with_no_client_auth()
            }
            (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
                return Err(format!("sslmode={} needs sslrootcert", self.mode.as_str()));
            }
        };
        Ok(Some(MakeRustlsConnect::new(config)))
    }
}

/// The roots `sslrootcert` names.
fn roots(root: &RootCert) -> Result<RootCertStore, String> {
    match root {
        RootCert::System => Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        }),
        RootCert::File(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("sslrootcert {path}: {e}"))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("sslrootcert {path}: not a PEM certificate file: {e}"))?;
            if certs.is_empty() {
                return Err(format!("sslrootcert {path}: holds no PEM certificate"));
            }
            let mut store = RootCertStore::empty();
            for cert in certs {
                store
                    .add(cert)
                    .map_err(|e| format!("sslrootcert {path}: not a usable root: {e}"))?;
            }
            Ok(store)
        }
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not checked. rustls checks
/// the chain before the name, so a name error means the chain held.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without `sslrootcert`: any certificate, as libpq accepts it. The
/// handshake's signatures are still checked against the certificate presented, so the session
/// is encrypted to whoever holds its key (which may be anyone: that is what verify-full is for).
#[derive(Debug)]
struct AnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_leave_the_url_and_every_other_byte_stays() {
        let (url, params) = split(
            "postgres://u:p%3Fw@db1:5432,db2:5433/gw?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u:p%3Fw@db1:5432,db2:5433/gw?target_session_attrs=read-write&application_name=x"
        );
        assert_eq!(
            params,
            TlsParams {
                mode: SslMode::VerifyFull,
                root_cert: Some(RootCert::File("/etc/ca.pem".into())),
            }
        );
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        let (url, params) =
            split("postgres://u:pa?ss@h/db?sslmode=require&application_name=x").unwrap();
        assert_eq!(url, "postgres://u:pa?ss@h/db?application_name=x");
        assert_eq!(params.mode, SslMode::Require);
        let parsed: tokio_postgres::Config = url.parse().unwrap();
        assert_eq!(parsed.get_password(), Some(&b"pa?ss"[..]));
    }

    #[test]
    fn without_sslmode_the_mode_is_prefer_as_libpqs() {
        let (url, params) = split("postgres://u@h/db").unwrap();
        assert_eq!(url, "postgres://u@h/db");
        assert_eq!(params.mode, SslMode::Prefer);
        let (url, _) = split("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(url, "postgres://u@h/db");
    }

    #[test]
    fn verify_modes_need_a_root_and_allow_is_refused() {
        assert!(
            split("postgres://h/db?sslmode=verify-full")
                .unwrap_err()
                .contains("needs sslrootcert")
        );
        assert!(
            split("postgres://h/db?sslmode=verify-ca")
                .unwrap_err()
                .contains("needs sslrootcert")
        );
        assert!(
            split("postgres://h/db?sslmode=allow")
                .unwrap_err()
                .contains("not supported")
        );
        assert!(split("postgres://h/db?sslmode=bogus").is_err());
        let (_, params) = split("postgres://h/db?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(params.root_cert, Some(RootCert::System));
        assert!(params.connector().unwrap().is_some());
    }

    #[test]
    fn the_public_roots_mean_verify_full_and_nothing_weaker() {
        let (_, params) = split("postgres://h/db?sslrootcert=system").unwrap();
        assert_eq!(params.mode, SslMode::VerifyFull);
        for weaker in ["prefer", "require", "verify-ca"] {
            let error = split(&format!(
                "postgres://h/db?sslrootcert=system&sslmode={weaker}"
            ))
            .unwrap_err();
            assert!(
                error.contains("needs sslmode=verify-full"),
                "{weaker}: {error}"
            );
        }
    }

    #[test]
    fn a_missing_root_file_is_an_error_naming_the_parameter() {
        let (_, params) =
            split("postgres://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem").unwrap();
        let error = params.connector().err().unwrap();
        assert!(
            error.starts_with("sslrootcert /nonexistent/ca.pem"),
            "{error}"
        );
    }

    #[test]
    fn disable_has_no_connector() {
        let (_, params) = split("postgres://h/db?sslmode=disable").unwrap();
        assert!(params.connector().unwrap().is_none());
    }
}
