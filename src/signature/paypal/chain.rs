//! The signing certificate: its chain to a trusted root at the delivery's `now` (rustls-webpki),
//! its name, and the SHA256withRSA check of a signature with its key (ring, through webpki).

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{
    CertificateDer, ServerName, SignatureVerificationAlgorithm, TrustAnchor, UnixTime,
};
use webpki::{EndEntityCert, KeyUsage};

use super::cert_url::CertUrlPolicy;
use crate::signature::scheme::SignatureError;

/// A served PEM with more certificates than this is refused (PayPal's: the leaf, perhaps with
/// its issuer).
const MAX_CHAIN_LEN: usize = 8;

/// A certificate chain as served: the signing (leaf) certificate first, then any intermediates.
pub(super) type Chain = Arc<[CertificateDer<'static>]>;

/// Why a certificate or a signature was refused. `reason` is stable (tests and log queries
/// match it); `detail` is webpki's or the parser's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) reason: &'static str,
    pub(super) detail: String,
}

impl Refusal {
    fn new(reason: &'static str, detail: impl std::fmt::Display) -> Self {
        Self {
            reason,
            detail: detail.to_string(),
        }
    }

    /// The leaf, or an issuer on its path, is past its notAfter at the given time.
    pub(super) fn is_expiry(&self) -> bool {
        self.reason == EXPIRED
    }
}

pub(super) const EXPIRED: &str = "expired";
pub(super) const NOT_YET_VALID: &str = "not yet valid";
pub(super) const UNTRUSTED: &str = "untrusted chain";
pub(super) const NAME_NOT_ALLOWED: &str = "name not in cert_url_hosts";
pub(super) const NOT_PEM: &str = "not a PEM certificate";
pub(super) const UNUSABLE_KEY: &str = "not an RSA key of 2048 to 8192 bits";

/// The certificates of a PEM document, leaf first.
pub(super) fn parse_pem(pem: &[u8]) -> Result<Chain, Refusal> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Refusal::new(NOT_PEM, e))?;
    if certs.is_empty() {
        return Err(Refusal::new(NOT_PEM, "no CERTIFICATE block"));
    }
    if certs.len() > MAX_CHAIN_LEN {
        return Err(Refusal::new(
            "too many certificates",
            format!("{} in one response", certs.len()),
        ));
    }
    Ok(certs.into())
}

/// What a signing certificate is checked against: the trusted roots and the allowed names.
pub(super) struct Trust {
    anchors: Vec<TrustAnchor<'static>>,
    pub(super) names: CertUrlPolicy,
    /// ring's, as rustls uses them for TLS.
    algorithms: &'static [&'static dyn SignatureVerificationAlgorithm],
}

impl Trust {
    pub(super) fn new(anchors: Vec<TrustAnchor<'static>>, names: CertUrlPolicy) -> Self {
        Self {
            anchors,
            names,
            algorithms: rustls::crypto::ring::default_provider()
                .signature_verification_algorithms
                .all,
        }
    }

    /// The chain leads from its leaf to a trusted root, every certificate on that path is
    /// valid at `now`, the leaf may serve TLS (EKU serverAuth when it lists EKUs, as PayPal's
    /// does) and it names a host of `cert_url_hosts`.
    pub(super) fn check(&self, chain: &[CertificateDer<'_>], now: UnixTime) -> Result<(), Refusal> {
        let (leaf, intermediates) = chain
            .split_first()
            .ok_or_else(|| Refusal::new(NOT_PEM, "no certificate"))?;
        let leaf = EndEntityCert::try_from(leaf).map_err(|e| Refusal::new(NOT_PEM, e))?;
        leaf.verify_for_usage(
            self.algorithms,
            &self.anchors,
            intermediates,
            now,
            KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(|e| {
            let reason = match e {
                webpki::Error::CertExpired { .. } => EXPIRED,
                webpki::Error::CertNotValidYet { .. } => NOT_YET_VALID,
                _ => UNTRUSTED,
            };
            Refusal::new(reason, format!("{e:?}"))
        })?;
        // Any CA-issued certificate has a trusted chain: the name says it is the certificate of
        // a host we fetch from, not one an attacker obtained for their own domain and managed
        // to have served from an allowed host. PayPal's SDKs check the same
        // (CN messageverificationcerts.*.paypal.com).
        let named = leaf.valid_dns_names().any(|n| self.names.allows_name(n))
            || self.names.addresses().any(|ip| {
                leaf.verify_is_valid_for_subject_name(&ServerName::IpAddress(ip.into()))
                    .is_ok()
            });
        if !named {
            let names: Vec<&str> = leaf.valid_dns_names().collect();
            return Err(Refusal::new(
                NAME_NOT_ALLOWED,
                format!("certificate names {names:?}"),
            ));
        }
        Ok(())
    }
}

impl From<Refusal> for SignatureError {
    fn from(refusal: Refusal) -> Self {
        SignatureError::CertificateRefused {
            reason: refusal.reason,
            detail: refusal.detail,
        }
    }
}

/// SHA256withRSA (RSASSA-PKCS1-v1_5 with SHA-256, keys of 2048 to 8192 bits) of `message` by the
/// leaf's key: ring's `RSA_PKCS1_2048_8192_SHA256`, with the key read from the certificate by
/// webpki. A signature that does not verify is [`SignatureError::NoMatch`], as for every scheme.
pub(super) fn check_signature(
    leaf: &CertificateDer<'_>,
    message: &[u8],
    signature: &[u8],
) -> Result<(), SignatureError> {
    let leaf = EndEntityCert::try_from(leaf).map_err(|e| Refusal::new(NOT_PEM, e))?;
    leaf.verify_signature(webpki::ring::RSA_PKCS1_2048_8192_SHA256, message, signature)
        .map_err(|e| match e {
            webpki::Error::InvalidSignatureForPublicKey => SignatureError::NoMatch,
            // An EC key, or RSA under 2048 bits: PayPal signs with RSA.
            other => Refusal::new(UNUSABLE_KEY, format!("{other:?}")).into(),
        })
}

/// `now` as webpki's time (a time before 1970 is 1970: nothing is valid then).
pub(super) fn unix_time(now: chrono::DateTime<chrono::Utc>) -> UnixTime {
    let secs = u64::try_from(now.timestamp()).unwrap_or(0);
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs))
}
