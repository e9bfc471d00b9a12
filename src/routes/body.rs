//! Reading a request body: bounded in size (413) and in time (408), so a slow or huge
//! upload can neither exhaust memory nor hold a worker forever.

use actix_web::HttpRequest;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::web::{Bytes, BytesMut, Payload};
use futures_util::StreamExt;

use crate::config::server::ServerSettings;
use crate::error::ApiError;

/// The whole body, at most `body_limit_bytes`, within `body_read_timeout`.
pub async fn read_body(
    request: &HttpRequest,
    mut payload: Payload,
    server: &ServerSettings,
) -> Result<Bytes, ApiError> {
    let (limit, timeout) = (server.body_limit_bytes, server.body_read_timeout);
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    let read = async {
        let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(limit));
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(|e| ApiError::BodyUnreadable(e.to_string()))?;
            if body.len() + chunk.len() > limit {
                return Err(ApiError::PayloadTooLarge { limit });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| ApiError::BodyTimeout)?
}
