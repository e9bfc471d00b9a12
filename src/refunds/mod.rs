//! Merchant refunds (`refund.create`), the seed's two-phase variant: the request is committed
//! as `processing` under a lease before the provider's refund API is called ([`create`]), the
//! provider client ([`provider`]), the `refund_requests` rows ([`model`]), the request's rules
//! ([`request`]), the background recoverer of abandoned requests ([`recover`]), and why the
//! gateway stops retrying a request for a person to resolve ([`review`]).
//! See docs/refunds.md.

pub mod create;
pub mod error;
pub mod model;
pub mod provider;
pub mod recover;
pub mod request;
pub mod review;
