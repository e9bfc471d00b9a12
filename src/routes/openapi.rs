//! Serving the OpenAPI 3 document (generated in `startup` from the handlers' annotations and
//! the response types), and its security schemes. Every `/admin/*` route and console page
//! names the least role it needs as the scope of its `operator_key` or `console_session`
//! requirement (docs/access.md); the role table test reads them from here.

use actix_web::HttpResponse;
use actix_web::web;
use utoipa::Modify;
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};

/// The schemes the handlers' `security` annotations name.
pub struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A merchant's API token (`token issue`)"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "operator_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An operator key (`operator add`) or the [admin] token; the scope is the \
                         least role the route needs: viewer, finance, operator or admin",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "console_session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                "cg_console",
                "The console's session cookie (sign in at /console/login with an operator key); \
                 the scope is the least role the page needs",
            ))),
        );
    }
}

/// `GET /openapi.json`: the document `startup` generated from the handlers.
pub async fn document(document: web::Data<OpenApi>) -> HttpResponse {
    HttpResponse::Ok().json(document.get_ref())
}
