//! HTTP routes: one file per resource. Handlers read the request, call one domain
//! function, and write the response; they hold no SQL. The route table and the OpenAPI
//! document that lists the handlers are in `startup`, which wires them into the app.

pub mod admin;
pub mod app_data;
pub mod audit;
mod body;
pub mod callbacks;
pub mod console;
pub mod event_log;
pub mod events;
pub mod extract;
pub mod health;
pub mod notifications;
pub mod observe;
pub mod openapi;
pub mod orders;
pub mod portal;
pub mod refunds;
mod respond;
pub mod settlements;
pub mod state;
pub mod webhook_endpoints;

use actix_web::HttpResponse;
use actix_web::http::header::CONTENT_TYPE;

use crate::error::error_body;

/// Unknown routes answer in the same JSON shape as every other error.
pub async fn not_found() -> HttpResponse {
    HttpResponse::NotFound()
        .insert_header((CONTENT_TYPE, "application/json"))
        .body(error_body("not_found", "no such route").to_string())
}
