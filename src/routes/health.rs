use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde_json::json;

use super::app_data::ApiPool;
use super::state::AppState;
use crate::metrics::Metrics;

/// How long one write the database refused for lack of disk keeps `/readyz` degraded when no
/// write commits after it (with traffic, the next failure or commit decides sooner).
const CANNOT_WRITE_WINDOW: Duration = Duration::from_secs(60);

/// 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process runs")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// 200 when the database answers and the migrations are applied, else 503. While the database
/// answers but its last write failed for lack of disk (no write committed since, within a
/// minute), 200 `degraded`: every gateway shares that database, so taking this one out of
/// rotation would not help, and replays of stored events are still answered.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "{\"status\":\"ready\"}, or {\"status\":\"degraded\",\"cause\":\"database_cannot_write\",\"reason\":..} while the database answers but cannot write (a full disk): new writes get 503 database_cannot_write"),
    (status = 503, description = "not_ready: the database does not answer or is not migrated", body = crate::error::ErrorBody),
))]
pub async fn readyz(
    state: web::Data<AppState>,
    api_pool: web::Data<ApiPool>,
    metrics: web::Data<Metrics>,
) -> HttpResponse {
    if !state.notifying.loaded() {
        // Callbacks get 503 until the merchants' endpoints are read: a balancer should wait.
        return HttpResponse::ServiceUnavailable().json(json!({
            "error": "not_ready",
            "message": "starting: the merchants' endpoints are not loaded yet",
        }));
    }
    if crate::db::is_ready(&api_pool, &state.latest_migration).await {
        match metrics.write_health().degraded(CANNOT_WRITE_WINDOW) {
            None => HttpResponse::Ok().json(json!({ "status": "ready" })),
            Some(degraded) => HttpResponse::Ok().json(json!({
                "status": "degraded",
                "cause": "database_cannot_write",
                "reason": degraded.reason.as_str(),
                "failed_secs_ago": degraded.ago.as_secs(),
                "message": "the database answers but could not write; new writes get 503 until one commits",
            })),
        }
    } else {
        HttpResponse::ServiceUnavailable().json(json!({
            "error": "not_ready",
            "message": "the database does not answer or its migrations are not applied",
        }))
    }
}

/// Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
))]
pub async fn metrics(state: web::Data<AppState>, metrics: web::Data<Metrics>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(metrics.render(&state.all_pools, state.settings.database.pool_size))
}
