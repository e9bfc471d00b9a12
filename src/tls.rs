//! Native HTTPS: the `[server] tls_cert` / `tls_key` PEM files become a rustls server
//! configuration (TLS 1.2 and 1.3, the ring provider). `check-config` and `serve` load them
//! through the same function, so both refuse a bad file the same way (exit 2, naming the field).

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::rules::ConfigError;
use crate::config::server::TlsFiles;

/// Reads both files and checks that the key belongs to the certificate.
pub fn server_config(files: &TlsFiles) -> Result<ServerConfig, ConfigError> {
    let chain = certificate_chain(&files.cert)?;
    let key = private_key(&files.key)?;
    // Named explicitly rather than taken from the process default: the build has exactly one
    // provider (ring), and a default that another crate installs must not change ours.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| ConfigError(format!("server.tls_cert: TLS setup failed: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            ConfigError(format!(
                "server.tls_key: {} does not fit the certificate in server.tls_cert ({}): {e}",
                files.key.display(),
                files.cert.display()
            ))
        })
}

fn certificate_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let field = "server.tls_cert";
    let pem = read(field, path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            ConfigError(format!(
                "{field}: {} is not a PEM certificate file: {e}",
                path.display()
            ))
        })?;
    if chain.is_empty() {
        return Err(ConfigError(format!(
            "{field}: {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(chain)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, ConfigError> {
    let field = "server.tls_key";
    let pem = read(field, path)?;
    // The parser's error may quote a line of the file: say only what is expected.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        ConfigError(format!(
            "{field}: {} holds no usable PEM private key (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        ))
    })
}

fn read(field: &str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError(format!("{field}: cannot read {}: {e}", path.display())))
}
