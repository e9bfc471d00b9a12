//! The OpenAPI 3 document, generated from the handlers' annotations and the response types.

use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{admin, callbacks, health, orders};

#[derive(OpenApi)]
#[openapi(
    info(title = "callback-gateway", description = "Verified payment callbacks, exactly-once ledger postings, byte-identical idempotent replays"),
    paths(
        orders::create_order,
        orders::get_order,
        callbacks::receive_callback,
        admin::idempotency_record,
        admin::balances,
        health::healthz,
        health::readyz,
        health::metrics,
    ),
    modifiers(&BearerSchemes)
)]
pub struct ApiDoc;

struct BearerSchemes;

impl Modify for BearerSchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["bearer", "admin"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// `GET /openapi.json`.
pub async fn document() -> HttpResponse {
    HttpResponse::Ok().json(ApiDoc::openapi())
}
