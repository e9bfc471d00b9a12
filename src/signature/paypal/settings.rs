//! PayPal's settings rules, on their own so that the configuration can refuse a bad file at
//! startup without the verifier: the webhook id's form, the default certificate hosts, and the
//! trusted roots (webpki-roots plus `ca_file`). The verifier (`mod.rs`) applies the same.

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// `cert_url_hosts` when the configuration says nothing: PayPal's own domain and its subdomains.
pub const DEFAULT_CERT_URL_HOSTS: &[&str] = &["paypal.com"];

/// Longest transmission id or webhook id accepted (PayPal's are UUIDs and 17 characters).
pub(crate) const MAX_ID_LEN: usize = 128;

/// A PayPal setting that cannot work; `field` is the configuration key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SettingsError {
    pub field: &'static str,
    pub message: String,
}

impl SettingsError {
    pub(crate) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// 1 to 128 visible ASCII characters without `|`.
pub(crate) fn plain_field(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_ID_LEN
        && value.bytes().all(|b| b.is_ascii_graphic() && b != b'|')
}

pub fn check_webhook_id(webhook_id: &str) -> Result<(), SettingsError> {
    if plain_field(webhook_id) {
        Ok(())
    } else {
        Err(SettingsError::new(
            "webhook_id",
            "must be PayPal's id of this webhook: 1 to 128 visible ASCII characters without '|'",
        ))
    }
}

/// webpki-roots plus the PEM certificates of `ca_file`.
pub fn roots(extra_pem: Option<&[u8]>) -> Result<RootCertStore, SettingsError> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let Some(pem) = extra_pem else {
        return Ok(roots);
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| SettingsError::new("ca_file", format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(SettingsError::new("ca_file", "holds no PEM certificate"));
    }
    for (i, cert) in certs.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            SettingsError::new(
                "ca_file",
                format!("certificate {} cannot be a trust anchor: {e}", i + 1),
            )
        })?;
    }
    Ok(roots)
}
