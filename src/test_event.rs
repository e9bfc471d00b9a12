//! `send-test-event`: a newcomer's first callback in one command (like `stripe trigger`). It
//! builds a sample event in the provider's payload format, signs it with the provider's
//! configured secret under its scheme, posts it to the gateway and prints the answer.

use std::time::Duration;

use chrono::Utc;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;

use crate::config::{PayloadFormat, ProviderSettings, Settings};
use crate::orders::model::Order;
use crate::providers::Provider;
use crate::secret::shown_url;

#[derive(Debug, Clone, clap::Args)]
pub struct SendTestEventArgs {
    /// The configured provider whose scheme, secret and payload format to use.
    #[arg(long)]
    pub provider: String,
    /// payment.succeeded, payment.failed or refund.succeeded (mapped to Stripe's own types
    /// for a Stripe provider), or any other type to see it acknowledged as ignored.
    #[arg(long = "type", default_value = "payment.succeeded")]
    pub event_type: String,
    /// The order the event pays: its amount and currency are read from the database, so the
    /// event applies. Without it the sample names no order (captured money is then held).
    #[arg(long)]
    pub order: Option<i64>,
    /// The gateway's base URL (default: http://127.0.0.1:<port of [server] bind>).
    #[arg(long)]
    pub url: Option<String>,
    /// Send even though the provider is not marked `test = true` (it may be a live account:
    /// the sample would post to a real merchant's ledger, and `--order` would mark it paid).
    #[arg(long)]
    pub force: bool,
}

/// What the sample carries about its payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub event_id: String,
    pub payment_id: String,
    pub order_id: Option<i64>,
    pub amount_minor: i64,
    pub currency: String,
}

/// The body of a sample `event_type` event in `format`.
pub fn sample_body(format: PayloadFormat, event_type: &str, s: &Sample) -> String {
    let body = match format {
        PayloadFormat::Canonical => {
            let mut data = json!({"payment_id": s.payment_id, "amount_minor": s.amount_minor, "currency": s.currency});
            if let Some(order_id) = s.order_id {
                data["order_id"] = json!(order_id);
            }
            if event_type == "refund.succeeded" {
                data["refund_id"] = json!(format!("re_{}", s.event_id));
            }
            json!({"id": s.event_id, "type": event_type, "data": data})
        }
        PayloadFormat::Stripe => {
            let stripe_type = match event_type {
                "payment.succeeded" => "payment_intent.succeeded",
                "payment.failed" => "payment_intent.payment_failed",
                "refund.succeeded" => "charge.refunded",
                other => other,
            };
            let metadata = match s.order_id {
                Some(order_id) => json!({"order_id": order_id.to_string()}),
                None => json!({}),
            };
            let object = if stripe_type == "charge.refunded" {
                json!({"id": format!("ch_{}", s.payment_id), "object": "charge", "payment_intent": s.payment_id,
                       "amount_refunded": s.amount_minor, "currency": s.currency.to_lowercase(), "metadata": metadata})
            } else {
                json!({"id": s.payment_id, "object": "payment_intent", "amount_received": s.amount_minor,
                       "currency": s.currency.to_lowercase(), "metadata": metadata})
            };
            json!({"id": s.event_id, "object": "event", "type": stripe_type, "data": {"object": object}})
        }
    };
    body.to_string()
}

/// Where to post: `--url`, or this machine at the configured port.
pub fn base_url(settings: &Settings, args: &SendTestEventArgs) -> anyhow::Result<String> {
    let url = match &args.url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let port = settings
                .server
                .bind
                .rsplit_once(':')
                .map(|(_, port)| port)
                .unwrap_or("8080");
            let scheme = if settings.server.tls.is_some() {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://127.0.0.1:{port}")
        }
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        anyhow::bail!("--url must be an http:// or https:// URL");
    }
    Ok(url)
}

/// The provider's settings, or a usage error naming the configured ones.
pub fn provider<'a>(settings: &'a Settings, name: &str) -> Result<&'a ProviderSettings, String> {
    settings
        .providers
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            let names: Vec<&str> = settings.providers.iter().map(|p| p.name.as_str()).collect();
            format!(
                "--provider {name:?} is not in the configuration (configured: {})",
                names.join(", ")
            )
        })
}

/// The provider's settings when a sample may be sent to it: it is marked `test = true`, or the
/// operator said `--force`. Otherwise a one-line usage error that says both ways out.
pub fn allowed<'a>(
    provider: &'a ProviderSettings,
    args: &SendTestEventArgs,
) -> Result<&'a ProviderSettings, String> {
    if provider.test || args.force {
        return Ok(provider);
    }
    let what = match args.order {
        Some(order) => format!(
            "would mark order {order} of merchant {} paid",
            provider.merchant_id
        ),
        None => format!(
            "would post a sample capture to merchant {}'s unapplied funds",
            provider.merchant_id
        ),
    };
    Err(format!(
        "provider {:?} is not marked test = true, so it may be a live account and this {what}: \
         set test = true in its [[providers]] entry (sandbox accounts only) or pass --force",
        provider.name
    ))
}

/// Signs and posts the sample; returns the status line and the answer's body.
pub async fn run(
    settings: &Settings,
    provider_settings: &ProviderSettings,
    args: &SendTestEventArgs,
) -> anyhow::Result<(u16, String)> {
    let base_url = base_url(settings, args)?;
    let (amount_minor, currency) = match args.order {
        Some(order_id) => {
            let mut conn = AsyncPgConnection::establish(settings.database_url()?).await?;
            let order = Order::find_for_user(&mut conn, provider_settings.merchant_id, order_id)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "order {order_id} is not an order of merchant {}",
                        provider_settings.merchant_id
                    )
                })?;
            (order.amount_minor, order.currency)
        }
        None => (1999, "USD".to_owned()),
    };
    let suffix = format!("{:x}", Utc::now().timestamp_micros());
    let sample = Sample {
        event_id: format!("evt_test_{suffix}"),
        // A refund refers to the payment the same order's test capture created.
        payment_id: match args.order {
            Some(order_id) => format!("pay_test_order_{order_id}"),
            None => format!("pay_test_{suffix}"),
        },
        order_id: args.order,
        amount_minor,
        currency,
    };
    let body = sample_body(provider_settings.payload, &args.event_type, &sample);
    let provider = Provider::new(provider_settings.clone());
    let headers = provider
        .scheme()
        .sign(&sample.event_id, body.as_bytes(), Utc::now().timestamp());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = format!("{base_url}/v1/callbacks/{}", provider_settings.name);
    // Shown without the password of a `user:password@` in --url (still sent, as basic auth).
    let shown = shown_url(&url);
    eprintln!("POST {shown}\n{body}");
    let mut request = client
        .post(&url)
        .header("Content-Type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = request
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("no answer from {shown}: {e}"))?;
    let status = response.status().as_u16();
    Ok((status, response.text().await?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payments::event::{Parsed, PaymentEvent};

    fn sample() -> Sample {
        Sample {
            event_id: "evt_test_1".into(),
            payment_id: "pay_test_order_7".into(),
            order_id: Some(7),
            amount_minor: 4620,
            currency: "EUR".into(),
        }
    }

    #[test]
    fn a_sample_capture_parses_as_a_capture_of_its_order_in_both_formats() {
        for format in [PayloadFormat::Canonical, PayloadFormat::Stripe] {
            let body = sample_body(format, "payment.succeeded", &sample());
            match Parsed::from_body(format, body.as_bytes()) {
                Parsed::Event(PaymentEvent::Succeeded {
                    order_id, amount, ..
                }) => {
                    assert_eq!((order_id, amount.get()), (Some(7), 4620), "{format:?}");
                }
                other => panic!("{format:?}: {other:?} from {body}"),
            }
        }
    }

    #[test]
    fn a_sample_refund_refers_to_the_sample_payment() {
        for format in [PayloadFormat::Canonical, PayloadFormat::Stripe] {
            let body = sample_body(format, "refund.succeeded", &sample());
            let Parsed::Event(event) = Parsed::from_body(format, body.as_bytes()) else {
                panic!("{format:?}: {body}");
            };
            assert_eq!(event.payment_id(), "pay_test_order_7");
        }
    }
}
