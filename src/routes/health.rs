use actix_web::{HttpResponse, web};
use serde_json::json;

use super::extract::ApiPool;
use super::state::AppState;
use crate::metrics::Metrics;

/// 200 while the process runs.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process runs")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok" }))
}

/// 200 when the database answers and the migrations are applied, else 503.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "not_ready: the database does not answer or is not migrated", body = crate::error::ErrorBody),
))]
pub async fn readyz(state: web::Data<AppState>, api_pool: web::Data<ApiPool>) -> HttpResponse {
    if crate::db::is_ready(&api_pool, &state.latest_migration).await {
        HttpResponse::Ok().json(json!({ "status": "ready" }))
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
