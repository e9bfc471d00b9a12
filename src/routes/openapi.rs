//! Serving the OpenAPI 3 document (generated in `startup` from the handlers' annotations and
//! the response types), and its bearer security schemes.

use actix_web::HttpResponse;
use actix_web::web;
use utoipa::Modify;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

/// The bearer schemes the handlers' `security` annotations name.
pub struct BearerSchemes;

impl Modify for BearerSchemes {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["bearer", "admin"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}

/// `GET /openapi.json`: the document `startup` generated from the handlers.
pub async fn document(document: web::Data<OpenApi>) -> HttpResponse {
    HttpResponse::Ok().json(document.get_ref())
}
