//! Integration tests: the real application over real HTTP against a real PostgreSQL, each
//! test on a database of its own. Run them through `scripts/test`.

#[path = "../support/mod.rs"]
mod support;

mod callbacks;
mod cleanup;
mod cli;
mod health;
mod migrations;
mod orders;
