//! Integration tests: the real application over real HTTP against a real PostgreSQL, each
//! test on a database of its own. Run them through `scripts/test`.

// A failed unwrap in a test or its harness is a test failure with a clear message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod access;
mod asked_providers;
mod balances;
mod batching;
mod callbacks;
mod cleanup;
mod cli;
mod console;
mod database_switch;
mod database_tls;
mod deploy;
mod dispute_orders;
mod disputes;
mod endpoints;
mod events;
mod full_disk;
mod hardening;
mod health;
mod history;
mod migrations;
mod money;
mod notification_bounds;
mod notifications;
mod operability;
mod orders;
mod paypal_transmissions;
mod paypal_verify;
mod providers;
mod reconcile;
mod refund_safety;
mod refunds;
mod replay;
mod resilience;
mod reused_event_ids;
mod schema;
mod synchronous_commit;
mod traces;
mod write_path;
