//! Webhook signature verification: one [`SignatureScheme`] per provider scheme. The raw body
//! bytes are verified before anything is parsed or written; comparisons are constant-time
//! (`hmac`'s `verify_slice`), every configured secret and every listed signature may match.

mod hmac_sha256;
mod scheme;
mod standard_webhooks;
mod stripe;

use std::time::Duration;

use crate::config::SchemeName;
use crate::secret::Secret;

pub use hmac_sha256::HmacSha256Scheme;
pub use scheme::{HeaderSource, SignatureError, SignatureScheme, Verified};
pub use standard_webhooks::StandardWebhooks;
pub use stripe::StripeScheme;

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
