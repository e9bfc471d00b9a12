//! What the handlers of one worker share. The extractors' own data (the API pool, the admin
//! token) and the providers are separate app data, so the extractors need none of this.

use std::sync::{Arc, Mutex};

use crate::config::Settings;
use crate::db::pool::PgPool;
use crate::db::replication::Replication;
use crate::notifications::Notifying;
use crate::payments::batcher::Batcher;
use crate::payments::capture::Capture;

pub struct AppState {
    /// This worker's pool for provider callbacks, and nothing else.
    pub pool: PgPool,
    /// This worker's queue of one-statement captures, served from `pool`.
    pub capture_batcher: Batcher<Capture>,
    /// Every worker's callback pool, for the metrics.
    pub all_pools: Arc<Mutex<Vec<PgPool>>>,
    /// What a replay waits for: the synchronous standby's confirmation of what it read.
    pub replication: Replication,
    pub settings: Arc<Settings>,
    pub latest_migration: String,
    /// The merchants whose changes stage notifications, and this process's sender to wake.
    pub notifying: Notifying,
}
