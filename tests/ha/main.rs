//! High availability against a real Patroni cluster (scripts/ha-cluster: etcd and two
//! PostgreSQL 15 nodes, synchronous_mode_strict) and the real `callback-gateway` binary: a
//! failover mid-load, a stalled standby, the same run with synchronous replication off (it
//! loses acknowledged events: the check can fail), and the read-only work on a replica.
//! A test binary of its own, so it runs after the API tests and alone: Patroni's timings
//! (ttl 10 s) do not mix with a machine full of other tests. The tests take one lock, one at
//! a time. Each test owns its cluster and its gateways; drop guards stop them on panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod backup;
mod failover;

/// One HA scenario at a time.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
