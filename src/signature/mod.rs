//! Signature primitives the providers' own checks (in `providers/`, one file per provider)
//! share: header access, the refusals, timestamp rules and HMAC keys compared in constant time
//! (`hmac`'s `verify_slice`), where every configured secret and every listed signature may match.

pub mod paypal;
pub mod scheme;
pub mod standard_webhooks;
