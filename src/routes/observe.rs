//! The per-request observation: one log line (inside the request span, so it carries the
//! request id, provider and event id), the request metrics, and whether the database wrote
//! (a committed first answer) or could not (a full disk).

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{Error, web};

use crate::error::ApiError;
use crate::metrics::{Metrics, OutcomeLabel, WriteCommitted};

pub async fn observe(
    request: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, Error> {
    let metrics = request.app_data::<web::Data<Metrics>>().cloned();
    let started = Instant::now();
    let response = next.call(request).await?;
    let elapsed = started.elapsed();
    let route = response
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let status = response.status().as_u16();
    let error = response
        .response()
        .error()
        .and_then(|e| e.as_error::<ApiError>());
    let outcome = response
        .response()
        .extensions()
        .get::<OutcomeLabel>()
        .map(|o| o.0)
        .or_else(|| error.map(ApiError::outcome_label))
        .unwrap_or(if status < 400 { "ok" } else { "error" });
    tracing::info!(
        route,
        status,
        outcome,
        latency_ms = elapsed.as_secs_f64() * 1000.0,
        "request finished"
    );
    if let Some(metrics) = metrics {
        metrics.observe_request(&route, status, outcome, elapsed);
        if let Some(ApiError::CannotWrite { reason, .. }) = error {
            metrics.record_cannot_write(*reason);
        } else if response
            .response()
            .extensions()
            .contains::<WriteCommitted>()
        {
            metrics.record_write_committed();
        }
    }
    Ok(response)
}
