//! HTTP routes: one file per resource. Handlers read the request, call one domain
//! function, and write the response; they hold no SQL.

mod admin;
mod body;
mod callbacks;
mod health;
mod observe;
mod openapi;
mod orders;

use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{HttpResponse, web};

use crate::error::error_body;
use crate::idempotency::Executed;
use crate::metrics::OutcomeLabel;

pub use body::read_body;
pub use observe::observe;
pub use openapi::ApiDoc;

/// The header that marks a replayed response.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

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

/// The stored status and the stored bytes, exactly; a replay says so in a header.
/// `first_outcome` labels a first response in the metrics and the request log.
pub fn idempotent_response(executed: Executed, first_outcome: &'static str) -> HttpResponse {
    let (stored, replayed) = match executed {
        Executed::First(stored) => (stored, false),
        Executed::Replayed(stored) => (stored, true),
    };
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    response.insert_header((CONTENT_TYPE, "application/json"));
    if replayed {
        response.insert_header((REPLAYED_HEADER, "true"));
    }
    let label = if replayed { "replayed" } else { first_outcome };
    let mut response = response.body(stored.body);
    response.extensions_mut().insert(OutcomeLabel(label));
    response
}
