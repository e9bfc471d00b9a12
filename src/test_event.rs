//! `send-test-event`: a newcomer's first callback in one command (like `stripe trigger`). It
//! builds a sample event in the provider's payload format, signs it with the provider's
//! configured secret under its scheme, posts it to the gateway and prints the answer.

use std::time::Duration;

use chrono::Utc;

use crate::config::{ProviderSettings, SchemeName, Settings};
use crate::orders::model::Order;
use crate::providers::{self, Sample};
use crate::secret::shown_url;

#[derive(Debug, Clone, clap::Args)]
pub struct SendTestEventArgs {
    /// The configured provider whose scheme, secret and payload format to use.
    #[arg(long)]
    pub provider: String,
    /// payment.succeeded, payment.failed or refund.succeeded (mapped to the provider's own
    /// types: Stripe's payment_intent.succeeded, Adyen's AUTHORISATION, ...), or any other type,
    /// sent as the provider's own, to see it acknowledged as ignored.
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
    if provider.scheme == SchemeName::Paypal && !provider.asks_api() {
        return Err(format!(
            "provider {:?} is a PayPal provider: PayPal signs with its own private key, which the \
             gateway does not have, so it cannot send a PayPal test event (use PayPal's webhook \
             simulator, which delivers signed events to the registered URL)",
            provider.name
        ));
    }
    if provider.asks_api() && args.url.is_none() {
        let api = provider
            .fetch_api
            .as_ref()
            .map_or("its API", |api| api.base_url.as_str());
        return Err(format!(
            "provider {:?} is fetch-verified (scheme {}): the gateway does not act on the sample \
             itself but asks {api} about what it names, which only an emulator of the provider's \
             API that knows it can answer (a live API says 404: a stored unknown_resource). Point \
             api_base_url at such an emulator (ca_file for its CA) and pass --url of the gateway",
            provider.name,
            provider.scheme.as_str()
        ));
    }
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
            let mut conn = crate::db::connect(settings.database_url()?).await?;
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
    let provider = providers::configure(provider_settings.clone());
    let body = provider.sample_body(&args.event_type, &sample);
    let signed = provider
        .sign(&sample.event_id, body.as_bytes(), Utc::now().timestamp())
        .map_err(|e| anyhow::anyhow!("cannot sign for provider {:?}: {e}", provider.name()))?;
    let body = String::from_utf8_lossy(signed.body_or(body.as_bytes())).into_owned();
    // Straight to the gateway: no client of the gateway reads a proxy from the environment.
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = format!("{base_url}{}", signed.path(&provider_settings.name));
    // Shown without the password of a `user:password@` in --url (still sent, as basic auth).
    let shown = shown_url(&url);
    eprintln!("POST {shown}\n{body}");
    let mut request = client
        .post(&url)
        .header("Content-Type", signed.content_type)
        .body(body);
    for (name, value) in signed.headers {
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
    use crate::config::{ProcessEnv, SchemeName};
    use crate::payments::event::{Parsed, PaymentEvent};
    use crate::providers::Provider;

    fn sample() -> Sample {
        Sample {
            event_id: "evt_test_1".into(),
            payment_id: "pay_test_order_7".into(),
            order_id: Some(7),
            amount_minor: 4620,
            currency: "EUR".into(),
        }
    }

    /// A provider of every scheme, configured as the README shows.
    fn providers() -> Vec<Provider> {
        SchemeName::ALL
            .into_iter()
            .map(|scheme| {
                let secret = match scheme {
                    SchemeName::StandardWebhooks => "secrets = [\"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"]",
                    SchemeName::Adyen => "secrets = [\"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056\"]",
                    SchemeName::Paypal => "webhook_id = \"WH1\"",
                    SchemeName::Mollie => "api_key = \"test_mollie_api_key\"",
                    SchemeName::Gocardless | SchemeName::Mercadopago => {
                        "secrets = [\"a-signing-secret-of-some-length\"]\napi_key = \"test_api_key\""
                    }
                    SchemeName::Braintree => {
                        "secrets = [\"a-signing-secret-of-some-length\"]\npublic_key = \"public_key_1\""
                    }
                    _ => "secrets = [\"a-signing-secret-of-some-length\"]",
                };
                let url = if scheme == SchemeName::Square {
                    "notification_url = \"https://gw.example/v1/callbacks/p\"\n"
                } else {
                    ""
                };
                let text = format!(
                    "[[providers]]\nname = \"p\"\nscheme = \"{}\"\nmerchant_id = 7\n{secret}\n{url}",
                    scheme.as_str()
                );
                let settings = Settings::from_toml(&text, &ProcessEnv).unwrap();
                providers::configure(settings.providers[0].clone())
            })
            .collect()
    }

    /// The providers whose samples are the events themselves: a fetch-verified provider's
    /// sample only names a payment its API (an emulator) must describe.
    fn self_describing() -> impl Iterator<Item = Provider> {
        providers().into_iter().filter(|p| !p.settings().asks_api())
    }

    #[test]
    fn a_sample_capture_parses_as_a_capture_of_its_order_in_every_format() {
        for provider in self_describing() {
            let body = provider.sample_body("payment.succeeded", &sample());
            let signed = provider.sign("evt_test_1", body.as_bytes(), 0);
            // Adyen's signature travels in the body: what is sent is the signed body's item.
            let body = match &signed {
                Ok(signed) => signed.body_or(body.as_bytes()).to_vec(),
                Err(_) => body.into_bytes(),
            };
            let item = match provider.settings().scheme {
                SchemeName::Adyen => {
                    let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    value["notificationItems"][0]["NotificationRequestItem"].to_string()
                }
                _ => String::from_utf8(body).unwrap(),
            };
            match provider.parse_event(item.as_bytes()) {
                Parsed::Event(PaymentEvent::Succeeded {
                    order_id, amount, ..
                }) => {
                    assert_eq!((order_id, amount.get()), (Some(7), 4620), "{item}");
                }
                other => panic!("{:?}: {other:?} from {item}", provider.settings().scheme),
            }
        }
    }

    #[test]
    fn a_sample_refund_refers_to_the_sample_payment() {
        for provider in self_describing() {
            let body = provider.sample_body("refund.succeeded", &sample());
            let item = match provider.settings().scheme {
                SchemeName::Adyen => {
                    let value: serde_json::Value = serde_json::from_str(&body).unwrap();
                    value["notificationItems"][0]["NotificationRequestItem"].to_string()
                }
                _ => body,
            };
            let Parsed::Event(event) = provider.parse_event(item.as_bytes()) else {
                panic!("{:?}: {item}", provider.settings().scheme);
            };
            assert_eq!(event.payment_id(), "pay_test_order_7");
        }
    }

    #[test]
    fn every_provider_but_paypal_can_sign_a_sample() {
        for provider in providers() {
            let body = provider.sample_body("payment.succeeded", &sample());
            let signed = provider.sign("evt_test_1", body.as_bytes(), 1_700_000_000);
            assert_eq!(
                signed.is_ok(),
                provider.settings().scheme != SchemeName::Paypal,
                "{:?}",
                provider.settings().scheme
            );
        }
    }
}
