//! Webhook signature verification: one [`SignatureScheme`] per provider scheme. The raw body
//! bytes are verified before anything is parsed or written; comparisons are constant-time
//! (`hmac`'s `verify_slice`), every configured secret and every listed signature may match.

pub mod hmac_sha256;
pub mod paypal;
pub mod scheme;
pub mod standard_webhooks;
pub mod stripe;

use std::time::Duration;

use crate::config::SchemeName;
use crate::secret::Secret;

use hmac_sha256::HmacSha256Scheme;
use scheme::SignatureScheme;
use standard_webhooks::StandardWebhooks;
use stripe::StripeScheme;

/// Builds the scheme `name` over `secrets` (validated by the configuration).
pub fn scheme_for(
    name: SchemeName,
    secrets: &[Secret],
    tolerance: Duration,
) -> Box<dyn SignatureScheme> {
    let tolerance_secs = i64::try_from(tolerance.as_secs()).unwrap_or(i64::MAX);
    match name {
        SchemeName::StandardWebhooks => Box::new(StandardWebhooks::new(secrets, tolerance_secs)),
        SchemeName::Stripe => Box::new(StripeScheme::new(secrets, tolerance_secs)),
        SchemeName::HmacSha256 => Box::new(HmacSha256Scheme::new(secrets, tolerance_secs)),
    }
}
