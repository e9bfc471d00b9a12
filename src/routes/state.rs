//! What the handlers of one worker share.

use std::sync::{Arc, Mutex};

use crate::config::Settings;
use crate::db::PgPool;
use crate::payments::batcher::Batcher;
use crate::payments::capture::Capture;
use crate::providers::Providers;

pub struct AppState {
    /// This worker's pool for provider callbacks, and nothing else.
    pub pool: PgPool,
    /// This worker's pool for merchants' API, admin and readiness: their traffic, whoever
    /// sends it, can never make a provider callback wait for a connection.
    pub api_pool: PgPool,
    /// This worker's queue of one-statement captures, served from `pool`.
    pub capture_batcher: Batcher<Capture>,
    /// Every worker's callback pool, for the metrics.
    pub all_pools: Arc<Mutex<Vec<PgPool>>>,
    pub settings: Arc<Settings>,
    pub providers: Providers,
    pub latest_migration: String,
}
