//! Integration tests: the real application over real HTTP against a real PostgreSQL, each
//! test on a database of its own. Run them through `scripts/test`.

// A failed unwrap in a test or its harness is a test failure with a clear message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod access;
mod asked_providers;
mod audit_chain;
mod balances;
mod batching;
mod callbacks;
mod cleanup;
mod cli;
mod commit_before_ack;
mod console;
mod database_switch;
mod database_tls;
mod deploy;
mod diesel_cli;
mod dispute_orders;
mod disputes;
mod endpoints;
mod events;
mod full_disk;
mod hardening;
mod health;
mod history;
mod limits;
mod localstripe;
mod merchant_endpoints;
mod migrations;
mod money;
mod money_findings;
mod notification_bounds;
mod notifications;
mod operability;
mod orders;
mod outbound;
mod paypal_fetch;
mod paypal_transmissions;
mod paypal_verify;
mod portal;
mod providers;
mod reconcile;
mod refund_safety;
mod refunds;
mod replay;
mod resilience;
mod restore_drill;
mod reused_event_ids;
mod roles;
mod schema;
mod settlement;
mod synchronous_commit;
mod traces;
mod write_path;
