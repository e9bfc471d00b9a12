//! The provider's refund API: one HTTPS call (reqwest over rustls) per attempt, bounded by a
//! connect and a total timeout, always carrying the refund request's fixed provider
//! idempotency key, so however often it is repeated the provider refunds once. Stripe
//! (`payload = "stripe"`): `POST {api_base_url}/v1/refunds`, form-encoded `payment_intent` and
//! `amount`. Canonical: `POST {api_base_url}/refunds`, JSON `{payment_id, amount_minor, currency}`.

use std::collections::HashMap;
use std::sync::Arc;

use reqwest::StatusCode;

use crate::config::providers::{PayloadFormat, ProviderSettings};
use crate::config::refunds::RefundSettings;
use crate::outbound::{self, Outbound};
use crate::payments::event::MAX_EVENT_ID_LEN;
use crate::secret::Secret;
use crate::text;

/// One refund as the provider is asked for it.
#[derive(Debug, Clone, Copy)]
pub struct RefundCall<'a> {
    pub payment_id: &'a str,
    pub amount_minor: i64,
    pub currency: &'a str,
    /// Fixed in phase 1 and sent on every attempt.
    pub idempotency_key: &'a str,
}

/// What the provider answered, sorted by what the gateway does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderAnswer {
    /// 2xx with the provider's refund id.
    Accepted { refund_id: String },
    /// 4xx other than 401, 403, 408, 409, 425 and 429: a refusal that a repeat would get again.
    Declined { status: u16, message: String },
    /// 409 (a concurrent request with the key), 429, 408, 425, 5xx, a timeout, a network
    /// error, or an answer that cannot be read: the outcome is unknown, so the request stays
    /// processing. Also 401 and 403: the gateway's own credentials, not the merchant's refund.
    Unavailable(String),
    /// 2xx with a refund id the gateway cannot keep (a control character such as U+0000, which
    /// PostgreSQL refuses, or over 255 bytes): the refund may exist, and asking again gets the
    /// same answer, so a person looks at the provider instead.
    Unusable(String),
}

struct RefundApi {
    base_url: String,
    api_key: Secret,
    payload: PayloadFormat,
}

/// The refund APIs of the configured providers, with one HTTP client (and connection pool)
/// for all of them but the origins a provider's `api_base_url` names outright (an address, a
/// local emulator), each granted to its provider alone (crate::outbound).
#[derive(Clone)]
pub struct RefundClients {
    http: Arc<Outbound<String>>,
    apis: Arc<HashMap<String, RefundApi>>,
}

impl RefundClients {
    pub fn from_settings(
        providers: &[ProviderSettings],
        refunds: &RefundSettings,
    ) -> Result<Self, reqwest::Error> {
        let grants = providers.iter().filter_map(|p| {
            let api = p.refund_api.as_ref()?;
            let origin = reqwest::Url::parse(&api.base_url)
                .ok()
                .as_ref()
                .and_then(outbound::named_outright)?;
            Some((p.name.clone(), origin))
        });
        // No proxy, and a refund is never re-sent somewhere else on the provider's say-so (no
        // redirect); a name's addresses are checked as it resolves.
        let http = Outbound::new(grants, false, |builder| {
            builder
                .connect_timeout(refunds.provider_connect_timeout)
                .timeout(refunds.provider_timeout)
                .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")))
        })?;
        let apis = providers
            .iter()
            .filter_map(|p| {
                let api = p.refund_api.as_ref()?;
                Some((
                    p.name.clone(),
                    RefundApi {
                        base_url: api.base_url.clone(),
                        api_key: api.api_key.clone(),
                        payload: p.payload,
                    },
                ))
            })
            .collect();
        Ok(Self {
            http: Arc::new(http),
            apis: Arc::new(apis),
        })
    }

    /// Whether `provider` has a refund API configured.
    pub fn offers_refunds(&self, provider: &str) -> bool {
        self.apis.contains_key(provider)
    }

    /// Asks `provider` for the refund; never fails, the answer says what happened.
    #[tracing::instrument(skip_all, fields(provider = %provider, amount_minor = call.amount_minor))]
    pub async fn refund(&self, provider: &str, call: &RefundCall<'_>) -> ProviderAnswer {
        let Some(api) = self.apis.get(provider) else {
            return ProviderAnswer::Unavailable(format!(
                "provider {provider:?} has no refund API configured"
            ));
        };
        let path = match api.payload {
            PayloadFormat::Stripe => "/v1/refunds",
            // The configuration allows a refund API only for canonical and Stripe payloads.
            _ => "/refunds",
        };
        let url = match reqwest::Url::parse(&format!("{}{path}", api.base_url)) {
            Ok(url) => url,
            Err(error) => {
                return ProviderAnswer::Unavailable(format!("provider URL: {error}"));
            }
        };
        let http = match self.http.client(&provider.to_owned(), &url) {
            Ok(http) => http,
            Err(refused) => {
                return ProviderAnswer::Unavailable(format!("provider call refused: {refused}"));
            }
        };
        let request = match api.payload {
            PayloadFormat::Stripe => http.post(url).form(&[
                ("payment_intent", call.payment_id.to_owned()),
                ("amount", call.amount_minor.to_string()),
            ]),
            _ => http.post(url).json(&serde_json::json!({
                "payment_id": call.payment_id,
                "amount_minor": call.amount_minor,
                "currency": call.currency,
            })),
        }
        .bearer_auth(api.api_key.expose())
        .header("Idempotency-Key", call.idempotency_key);
        // The provider's side of the call joins the merchant's refund request's trace.
        let request = crate::telemetry::propagation::carry_current(request);
        let response = match request.send().await {
            Ok(response) => response,
            // reqwest's error names the URL and the cause, never the headers.
            Err(error) => {
                return ProviderAnswer::Unavailable(format!("provider call failed: {error}"));
            }
        };
        let status = response.status();
        let answer = match read_capped(response, MAX_ANSWER_BYTES).await {
            Ok(Capped::Whole(body)) => classify(status, &body),
            // A refund's answer is a few hundred bytes. A 2xx this large cannot be read, and
            // asking again (same key) gets the same answer: the refund may exist, so a person
            // looks. Any other status is sorted by its status alone.
            Ok(Capped::Cut) if status.is_success() => ProviderAnswer::Unusable(format!(
                "the provider's {status} answer is over {MAX_ANSWER_BYTES} bytes"
            )),
            Ok(Capped::Cut) => classify(status, b""),
            Err(error) => {
                return ProviderAnswer::Unavailable(format!(
                    "provider answer ({status}) could not be read: {error}"
                ));
            }
        };
        match &answer {
            ProviderAnswer::Unavailable(why) => {
                tracing::warn!(%status, why, "provider refund call did not complete");
            }
            ProviderAnswer::Unusable(why) => {
                tracing::error!(%status, why, "provider refund answer needs a person");
            }
            ProviderAnswer::Accepted { .. } | ProviderAnswer::Declined { .. } => {}
        }
        answer
    }
}

/// The most of a provider's answer the gateway reads (as the notification sender reads of an
/// endpoint's): past it the connection is dropped, so an answer that never ends holds neither
/// memory nor the call beyond the bytes read.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// An answer's body, read to a bound.
enum Capped {
    Whole(Vec<u8>),
    /// Longer than the bound; the rest was not read.
    Cut,
}

async fn read_capped(mut response: reqwest::Response, limit: usize) -> reqwest::Result<Capped> {
    if response
        .content_length()
        .is_some_and(|len| len > limit as u64)
    {
        return Ok(Capped::Cut);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(Capped::Cut);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Capped::Whole(body))
}

/// Sorts a provider's HTTP answer (pure, so each rule has its test).
fn classify(status: StatusCode, body: &[u8]) -> ProviderAnswer {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if status.is_success() {
        let refund_id = json.as_ref().and_then(|v| {
            v.get("id")
                .or_else(|| v.get("refund_id"))
                .and_then(|id| id.as_str())
        });
        return match refund_id {
            // Kept as the provider sent it: the refund webhook's id is checked the same way.
            Some(id) if text::storable(id, MAX_EVENT_ID_LEN) => ProviderAnswer::Accepted {
                refund_id: id.to_owned(),
            },
            Some(id) => ProviderAnswer::Unusable(format!(
                "provider answered {status} with a refund id the gateway cannot store: {:?}",
                id.chars().take(64).collect::<String>()
            )),
            None => ProviderAnswer::Unavailable(format!(
                "provider answered {status} without a refund id"
            )),
        };
    }
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        // The gateway's own api_key is wrong or lacks the permission: not the merchant's
        // refund being declined. Retried (with backoff) until an operator fixes the key.
        return ProviderAnswer::Unavailable(format!(
            "provider answered {status}: check this provider's api_key"
        ));
    }
    if status.is_client_error()
        && status != StatusCode::CONFLICT
        && status != StatusCode::TOO_MANY_REQUESTS
        // A timeout or "too early" from the provider or a proxy before it: the refund may or
        // may not have been made, so the outcome is unknown, never a decline.
        && status != StatusCode::REQUEST_TIMEOUT
        && status.as_u16() != 425
    {
        return ProviderAnswer::Declined {
            status: status.as_u16(),
            message: message_of(json.as_ref())
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("declined").to_owned()),
        };
    }
    ProviderAnswer::Unavailable(format!("provider answered {status}"))
}

/// Stripe's `{"error":{"message":..}}`, or a flat `{"message":..}` / `{"error":".."}`; at most
/// 500 characters of it, with control characters (U+0000 among them, which PostgreSQL cannot
/// store) shown as U+FFFD, so a decline is always stored.
fn message_of(json: Option<&serde_json::Value>) -> Option<String> {
    let json = json?;
    let message = json
        .pointer("/error/message")
        .or_else(|| json.get("message"))
        .or_else(|| json.get("error"))
        .and_then(|m| m.as_str())?;
    Some(text::printable(
        &message.chars().take(500).collect::<String>(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_2xx_with_an_id_is_accepted() {
        assert_eq!(
            classify(StatusCode::OK, br#"{"id":"re_1","object":"refund"}"#),
            ProviderAnswer::Accepted {
                refund_id: "re_1".into()
            }
        );
        assert_eq!(
            classify(StatusCode::CREATED, br#"{"refund_id":"re_2"}"#),
            ProviderAnswer::Accepted {
                refund_id: "re_2".into()
            }
        );
    }

    #[test]
    fn a_4xx_is_declined_with_the_providers_message() {
        let body = br#"{"error":{"type":"invalid_request_error","message":"Charge ch_1 has already been refunded."}}"#;
        assert_eq!(
            classify(StatusCode::BAD_REQUEST, body),
            ProviderAnswer::Declined {
                status: 400,
                message: "Charge ch_1 has already been refunded.".into()
            }
        );
    }

    #[test]
    fn credentials_timeouts_conflict_rate_limit_and_server_errors_leave_the_outcome_unknown() {
        for status in [
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::REQUEST_TIMEOUT,
            StatusCode::from_u16(425).unwrap(),
            StatusCode::CONFLICT,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::INTERNAL_SERVER_ERROR,
            StatusCode::BAD_GATEWAY,
        ] {
            assert!(
                matches!(classify(status, b"{}"), ProviderAnswer::Unavailable(_)),
                "{status}"
            );
        }
    }

    #[test]
    fn a_refund_id_that_cannot_be_stored_is_unusable_not_unavailable() {
        for body in [
            r#"{"id":"re_\u0000x"}"#.to_owned(),
            format!(r#"{{"id":"{}"}}"#, "r".repeat(256)),
            r#"{"id":"re\n1"}"#.to_owned(),
        ] {
            assert!(
                matches!(
                    classify(StatusCode::OK, body.as_bytes()),
                    ProviderAnswer::Unusable(_)
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn a_decline_message_keeps_no_control_characters() {
        let body = br#"{"error":{"message":"already\u0000 refunded\r\n"}}"#;
        assert_eq!(
            classify(StatusCode::BAD_REQUEST, body),
            ProviderAnswer::Declined {
                status: 400,
                message: "already\u{fffd} refunded\u{fffd}\u{fffd}".into()
            }
        );
    }

    #[test]
    fn a_2xx_without_a_refund_id_is_not_taken_for_success() {
        assert!(matches!(
            classify(StatusCode::OK, b"not json"),
            ProviderAnswer::Unavailable(_)
        ));
    }
}
