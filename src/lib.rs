//! callback-gateway: verifies payment-provider callbacks, posts each event to a double-entry
//! ledger exactly once, and answers every redelivery with the byte-identical ack.

pub mod access;
pub mod allowlist;
pub mod attention;
pub mod auth;
pub mod cli;
pub mod command;
pub mod config;
pub mod db;
pub mod deliveries;
pub mod error;
pub mod export;
pub mod idempotency;
pub mod ledger;
pub mod metrics;
pub mod money;
pub mod notifications;
pub mod orders;
pub mod payments;
pub mod preflight;
pub mod providers;
pub mod read_caches;
pub mod reconcile;
pub mod refunds;
pub mod replay;
pub mod routes;
pub mod schema;
pub mod secret;
pub mod settled;
pub mod signature;
pub mod startup;
pub mod telemetry;
pub mod test_event;
pub mod text;
pub mod tls;
pub mod trace_switch;
