//! Answers built from an idempotent execution: the stored status and the stored bytes.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::CONTENT_TYPE;

use crate::idempotency::{Executed, REPLAYED_HEADER};
use crate::metrics::{OutcomeLabel, WriteCommitted};

/// The stored status and the stored bytes, exactly; a replay says so in a header.
/// `first_outcome` labels a first response in the metrics and the request log.
pub fn idempotent_response<O>(
    executed: Executed<O>,
    first_outcome: impl FnOnce(&O) -> &'static str,
) -> HttpResponse {
    let (stored, label, first) = match executed {
        Executed::First { response, output } => {
            let label = first_outcome(&output);
            (response, label, true)
        }
        Executed::Replayed(stored) => (stored, "replayed", false),
    };
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    response.insert_header((CONTENT_TYPE, "application/json"));
    if !first {
        response.insert_header((REPLAYED_HEADER, "true"));
    }
    let mut response = response.body(stored.body);
    response.extensions_mut().insert(OutcomeLabel(label));
    if first {
        // A first answer is sent only after its record committed.
        response.extensions_mut().insert(WriteCommitted);
    }
    response
}
