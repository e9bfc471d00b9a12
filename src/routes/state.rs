//! What the handlers of one worker share. The extractors' own data (the API pool, the admin
//! token) and the providers are separate app data, so the extractors need none of this.

use std::sync::{Arc, Mutex};

use crate::config::Settings;
use crate::db::pool::PgPool;
use crate::db::replication::Replication;
use crate::error::ApiError;
use crate::limits::Limits;
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
    /// The abuse limits, shared by every worker.
    pub limits: Arc<Limits>,
}

impl AppState {
    /// `Err` (503, Retry-After 1) until this gateway has read the merchants' endpoints once:
    /// what a request writes before could leave a merchant's notification unstaged.
    pub fn serving(&self) -> Result<(), ApiError> {
        if self.notifying.loaded() {
            Ok(())
        } else {
            Err(ApiError::Starting)
        }
    }
}

impl AppState {
    /// The merchant `path` names, if it has a notification endpoint: in this gateway's
    /// directory, or made by API and not loaded here yet (an operator acting right after the
    /// merchant made it, or through another gateway, must not get a 404 for a second).
    pub async fn endpoint_merchant(
        &self,
        path: &str,
        conn: &mut diesel_async::AsyncPgConnection,
    ) -> Result<i64, ApiError> {
        if let Some(merchant_id) = self.notifying.merchant(path) {
            return Ok(merchant_id);
        }
        match path.parse::<i64>() {
            Ok(merchant_id)
                if crate::notifications::endpoints::exists_for(conn, merchant_id).await? =>
            {
                Ok(merchant_id)
            }
            _ => Err(ApiError::NotFound {
                code: "merchant_not_found",
                what: "merchant with a notification endpoint",
            }),
        }
    }

    /// The merchant an endpoint enable names: one with an endpoint in this gateway, or one whose
    /// endpoint an operator disabled and which has none now (its own new one is refused until
    /// an operator enables it); 404 `merchant_not_found` for any other.
    pub async fn enabled_merchant(
        &self,
        path: &str,
        conn: &mut diesel_async::AsyncPgConnection,
    ) -> Result<i64, ApiError> {
        if let Some(merchant_id) = self.notifying.merchant(path) {
            return Ok(merchant_id);
        }
        match path.parse::<i64>() {
            Ok(merchant_id)
                if crate::notifications::admin::has_disabled_endpoint(conn, merchant_id)
                    .await? =>
            {
                Ok(merchant_id)
            }
            _ => Err(ApiError::NotFound {
                code: "merchant_not_found",
                what: "merchant with a notification endpoint",
            }),
        }
    }
}
