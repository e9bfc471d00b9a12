//! HTTP routes: one file per resource. Handlers read the request, call one domain
//! function, and write the response; they hold no SQL.

mod admin;
mod body;
mod callbacks;
mod extract;
mod health;
mod observe;
mod openapi;
mod orders;
mod respond;
mod state;

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpResponse, web};

use crate::error::error_body;

pub use observe::observe;
pub use openapi::ApiDoc;
pub use state::AppState;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(health::healthz))
        .route("/readyz", web::get().to(health::readyz))
        .route("/metrics", web::get().to(health::metrics))
        .route("/openapi.json", web::get().to(openapi::document))
        .route("/v1/orders", web::post().to(orders::create_order))
        .route("/v1/orders/{id}", web::get().to(orders::get_order))
        .route(
            "/v1/callbacks/{provider}",
            web::post().to(callbacks::receive_callback),
        )
        .route(
            "/admin/idempotency/{user_id}/{op}/{key:.*}",
            web::get().to(admin::idempotency_record),
        )
        .route(
            "/admin/merchants/{merchant_id}/balances",
            web::get().to(admin::balances),
        );
}

/// Unknown routes answer in the same JSON shape as every other error.
pub async fn not_found() -> HttpResponse {
    HttpResponse::NotFound()
        .insert_header((CONTENT_TYPE, "application/json"))
        .body(error_body("not_found", "no such route").to_string())
}
