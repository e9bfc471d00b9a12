//! Test bodies of each provider, written for these tests from the providers' documentation
//! (docs/providers.md names each field): a capture, a refund, a failed payment and a type the
//! gateway does not handle, with the event id the gateway keys them by.

use base64::Engine;

use super::{
    ACME, ADYEN, BRAINTREE, CHECKOUT, GOCARDLESS, PADDLE, PAYPAL, PLAIN, RAZORPAY, SQUARE, STRIPE,
    THIRD,
};

/// What a test event says.
#[derive(Debug, Clone)]
pub enum Kind {
    /// `amount` captured for `order` (`None`: the body names no order).
    Capture {
        order: Option<i64>,
        amount: i64,
        currency: &'static str,
    },
    /// `amount` refunded under the refund id `refund_id` (Stripe: the cumulative total).
    Refund {
        amount: i64,
        currency: &'static str,
        refund_id: String,
    },
    Failed {
        order: i64,
    },
    /// A type the gateway does not handle.
    Unhandled,
    /// The provider took `amount` back for dispute `dispute_id`, and `fee` for it (providers
    /// whose dispute events carry no fee ignore it).
    Withdrawal {
        dispute_id: String,
        amount: i64,
        fee: i64,
        currency: &'static str,
    },
    /// The provider gave `amount` of dispute `dispute_id` back (Razorpay and PayPal have no
    /// such event).
    Reinstatement {
        dispute_id: String,
        amount: i64,
        currency: &'static str,
    },
}

/// Whether `provider`'s dispute events carry a fee the gateway books.
pub fn books_dispute_fees(provider: &str) -> bool {
    matches!(provider, ACME | PLAIN | THIRD | STRIPE | PADDLE)
}

/// Whether `provider` has an event that gives a chargeback's money back.
pub fn reinstates(provider: &str) -> bool {
    !matches!(provider, RAZORPAY | PAYPAL)
}

/// One provider event: the id the gateway keys it by (for Razorpay and Standard Webhooks the
/// id travels in a header the signer sets), and its body (Adyen's still unsigned).
#[derive(Debug, Clone)]
pub struct Payload {
    pub event_id: String,
    pub body: String,
}

/// A Square `dispute.*` event of a dispute in `state`.
fn square_dispute(
    id: &str,
    kind: &str,
    dispute_id: &str,
    payment: &str,
    amount: i64,
    currency: &str,
    state: &str,
) -> String {
    format!(
        r#"{{"merchant_id":"MLGW","type":"{kind}","event_id":"{id}","created_at":"2026-12-20T10:00:00Z","data":{{"type":"dispute","id":"{dispute_id}","object":{{"dispute":{{"id":"{dispute_id}","amount_money":{{"amount":{amount},"currency":"{currency}"}},"reason":"NOT_RECEIVED","state":"{state}","due_at":"2027-01-05T00:00:00Z","disputed_payment":{{"payment_id":"{payment}"}},"card_brand":"VISA","version":1}}}}}}}}"#
    )
}

/// `amount` minor units of `currency` as a decimal string (PayPal).
pub fn decimal(amount: i64, currency: &str) -> String {
    match currency {
        "JPY" | "KRW" => amount.to_string(),
        _ => format!("{}.{:02}", amount / 100, amount % 100),
    }
}

/// An event `n` of `provider` about payment `payment`, saying `kind`.
pub fn payload(provider: &str, n: &str, payment: &str, kind: &Kind) -> Payload {
    let id = format!("evt_{provider}_{n}");
    let order_text =
        |order: Option<i64>| order.map_or_else(|| "none".to_owned(), |o| o.to_string());
    let body = match provider {
        ACME | PLAIN | THIRD => match kind {
            Kind::Capture { order, amount, currency } => {
                let order = order.map_or_else(String::new, |o| format!(r#","order_id":{o}"#));
                format!(r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"{payment}","amount_minor":{amount},"currency":"{currency}"{order}}}}}"#)
            }
            Kind::Refund { amount, currency, refund_id } => format!(r#"{{"id":"{id}","type":"refund.succeeded","data":{{"payment_id":"{payment}","refund_id":"{refund_id}","amount_minor":{amount},"currency":"{currency}"}}}}"#),
            Kind::Failed { order } => format!(r#"{{"id":"{id}","type":"payment.failed","data":{{"payment_id":"{payment}","order_id":{order}}}}}"#),
            Kind::Unhandled => format!(r#"{{"id":"{id}","type":"customer.created","data":{{"id":"cus_{n}"}}}}"#),
            Kind::Withdrawal { dispute_id, amount, fee, currency } => format!(r#"{{"id":"{id}","type":"dispute.funds_withdrawn","data":{{"dispute_id":"{dispute_id}","payment_id":"{payment}","amount_minor":{amount},"currency":"{currency}","fee_minor":{fee}}}}}"#),
            Kind::Reinstatement { dispute_id, amount, currency } => format!(r#"{{"id":"{id}","type":"dispute.funds_reinstated","data":{{"dispute_id":"{dispute_id}","payment_id":"{payment}","amount_minor":{amount},"currency":"{currency}"}}}}"#),
        },
        STRIPE => match kind {
            Kind::Capture { order, amount, currency } => format!(r#"{{"id":"{id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"id":"{payment}","object":"payment_intent","amount_received":{amount},"currency":"{}","metadata":{{"order_id":"{}"}}}}}}}}"#, currency.to_lowercase(), order_text(*order)),
            Kind::Refund { amount, currency, .. } => format!(r#"{{"id":"{id}","object":"event","type":"charge.refunded","data":{{"object":{{"id":"ch_{payment}","object":"charge","payment_intent":"{payment}","amount_refunded":{amount},"currency":"{}"}}}}}}"#, currency.to_lowercase()),
            Kind::Failed { order } => format!(r#"{{"id":"{id}","object":"event","type":"payment_intent.payment_failed","data":{{"object":{{"id":"{payment}","metadata":{{"order_id":"{order}"}}}}}}}}"#),
            Kind::Unhandled => format!(r#"{{"id":"{id}","object":"event","type":"customer.created","data":{{"object":{{"id":"cus_{n}"}}}}}}"#),
            Kind::Withdrawal { dispute_id, amount, fee, currency } => format!(r#"{{"id":"{id}","object":"event","type":"charge.dispute.funds_withdrawn","data":{{"object":{{"id":"{dispute_id}","object":"dispute","amount":{amount},"currency":"{c}","charge":"ch_{payment}","payment_intent":"{payment}","status":"needs_response","balance_transactions":[{{"id":"txn_{n}","object":"balance_transaction","amount":-{amount},"currency":"{c}","fee":{fee},"net":-{net},"type":"adjustment"}}]}}}}}}"#, c = currency.to_lowercase(), net = amount + fee),
            Kind::Reinstatement { dispute_id, amount, currency } => format!(r#"{{"id":"{id}","object":"event","type":"charge.dispute.funds_reinstated","data":{{"object":{{"id":"{dispute_id}","object":"dispute","amount":{amount},"currency":"{c}","charge":"ch_{payment}","payment_intent":"{payment}","status":"won","balance_transactions":[]}}}}}}"#, c = currency.to_lowercase()),
        },
        ADYEN => {
            let (item, event_id) = match kind {
                Kind::Capture { order, amount, currency } => (format!(r#"{{"pspReference":"{payment}","merchantAccountCode":"GatewayTest","merchantReference":"{}","amount":{{"value":{amount},"currency":"{currency}"}},"eventCode":"AUTHORISATION","success":"true","eventDate":"2026-12-01T10:00:00+01:00","paymentMethod":"mc"}}"#, order_text(*order)), format!("{payment}:AUTHORISATION:true")),
                Kind::Refund { amount, currency, refund_id } => (format!(r#"{{"pspReference":"{refund_id}","originalReference":"{payment}","merchantAccountCode":"GatewayTest","merchantReference":"refund-{n}","amount":{{"value":{amount},"currency":"{currency}"}},"eventCode":"REFUND","success":"true","eventDate":"2026-12-01T10:05:00+01:00"}}"#), format!("{refund_id}:REFUND:true")),
                Kind::Failed { order } => (format!(r#"{{"pspReference":"{payment}","merchantAccountCode":"GatewayTest","merchantReference":"{order}","amount":{{"value":100,"currency":"USD"}},"eventCode":"AUTHORISATION","success":"false","reason":"Refused"}}"#), format!("{payment}:AUTHORISATION:false")),
                Kind::Unhandled => (format!(r#"{{"pspReference":"rep_{n}","merchantAccountCode":"GatewayTest","merchantReference":"","amount":{{"value":0,"currency":"EUR"}},"eventCode":"REPORT_AVAILABLE","success":"true","reason":"https://ca-test.adyen.com/report.csv"}}"#), format!("rep_{n}:REPORT_AVAILABLE:true")),
                Kind::Withdrawal { dispute_id, amount, currency, .. } => (format!(r#"{{"pspReference":"{dispute_id}","originalReference":"{payment}","merchantAccountCode":"GatewayTest","merchantReference":"dispute-{n}","amount":{{"value":{amount},"currency":"{currency}"}},"eventCode":"CHARGEBACK","success":"true","eventDate":"2026-12-20T10:00:00+01:00","reason":"Fraud","additionalData":{{"chargebackReasonCode":"10.4","disputeStatus":"Undefended"}}}}"#), format!("{dispute_id}:CHARGEBACK:true")),
                Kind::Reinstatement { dispute_id, amount, currency } => (format!(r#"{{"pspReference":"{dispute_id}","originalReference":"{payment}","merchantAccountCode":"GatewayTest","merchantReference":"dispute-{n}","amount":{{"value":{amount},"currency":"{currency}"}},"eventCode":"CHARGEBACK_REVERSED","success":"true","eventDate":"2027-01-20T10:00:00+01:00","additionalData":{{"disputeStatus":"Won"}}}}"#), format!("{dispute_id}:CHARGEBACK_REVERSED:true")),
            };
            return Payload {
                event_id,
                body: format!(r#"{{"live":"false","notificationItems":[{{"NotificationRequestItem":{item}}}]}}"#),
            };
        }
        SQUARE => match kind {
            Kind::Capture { order, amount, currency } => format!(r#"{{"merchant_id":"MLGW","type":"payment.updated","event_id":"{id}","created_at":"2026-12-01T10:00:00Z","data":{{"type":"payment","id":"{payment}","object":{{"payment":{{"id":"{payment}","status":"COMPLETED","reference_id":"{}","source_type":"CARD","amount_money":{{"amount":{amount},"currency":"{currency}"}},"total_money":{{"amount":{amount},"currency":"{currency}"}}}}}}}}}}"#, order_text(*order)),
            Kind::Refund { amount, currency, refund_id } => format!(r#"{{"merchant_id":"MLGW","type":"refund.updated","event_id":"{id}","created_at":"2026-12-01T10:05:00Z","data":{{"type":"refund","id":"{refund_id}","object":{{"refund":{{"id":"{refund_id}","payment_id":"{payment}","status":"COMPLETED","amount_money":{{"amount":{amount},"currency":"{currency}"}}}}}}}}}}"#),
            Kind::Failed { order } => format!(r#"{{"merchant_id":"MLGW","type":"payment.updated","event_id":"{id}","data":{{"type":"payment","id":"{payment}","object":{{"payment":{{"id":"{payment}","status":"FAILED","reference_id":"{order}","amount_money":{{"amount":100,"currency":"USD"}}}}}}}}}}"#),
            Kind::Unhandled => format!(r#"{{"merchant_id":"MLGW","type":"customer.created","event_id":"{id}","data":{{"type":"customer","id":"C{n}","object":{{"customer":{{"id":"C{n}"}}}}}}}}"#),
            Kind::Withdrawal { dispute_id, amount, currency, .. } => square_dispute(&id, "dispute.created", dispute_id, payment, *amount, currency, "EVIDENCE_REQUIRED"),
            Kind::Reinstatement { dispute_id, amount, currency } => square_dispute(&id, "dispute.state.updated", dispute_id, payment, *amount, currency, "WON"),
        },
        RAZORPAY => match kind {
            Kind::Capture { order, amount, currency } => format!(r#"{{"entity":"event","account_id":"acc_GW","event":"payment.captured","contains":["payment"],"payload":{{"payment":{{"entity":{{"id":"{payment}","entity":"payment","amount":{amount},"currency":"{currency}","status":"captured","captured":true,"notes":{{"order_id":"{}"}}}}}}}},"created_at":1764583200}}"#, order_text(*order)),
            Kind::Refund { amount, currency, refund_id } => format!(r#"{{"entity":"event","account_id":"acc_GW","event":"refund.processed","contains":["refund","payment"],"payload":{{"refund":{{"entity":{{"id":"{refund_id}","entity":"refund","amount":{amount},"currency":"{currency}","payment_id":"{payment}","status":"processed"}}}}}},"created_at":1764583500}}"#),
            Kind::Failed { order } => format!(r#"{{"entity":"event","account_id":"acc_GW","event":"payment.failed","contains":["payment"],"payload":{{"payment":{{"entity":{{"id":"{payment}","amount":100,"currency":"INR","status":"failed","notes":{{"order_id":"{order}"}}}}}}}}}}"#),
            Kind::Unhandled => r#"{"entity":"event","account_id":"acc_GW","event":"order.paid","contains":["order"],"payload":{"order":{"entity":{"id":"order_1"}}}}"#.to_owned(),
            Kind::Withdrawal { dispute_id, amount, currency, .. } => format!(r#"{{"entity":"event","account_id":"acc_GW","event":"payment.dispute.lost","contains":["payment","dispute"],"payload":{{"payment":{{"entity":{{"id":"{payment}","entity":"payment","amount":{amount},"currency":"{currency}","status":"captured"}}}},"dispute":{{"entity":{{"id":"{dispute_id}","entity":"dispute","payment_id":"{payment}","amount":{amount},"currency":"{currency}","amount_deducted":{amount},"reason_code":"chargeback","status":"lost","phase":"chargeback"}}}}}},"created_at":1766224800}}"#),
            Kind::Reinstatement { .. } => panic!("Razorpay has no event that gives a chargeback back"),
        },
        CHECKOUT => match kind {
            Kind::Capture { order, amount, currency } => format!(r#"{{"id":"{id}","type":"payment_captured","version":"1.0.33","created_on":"2026-12-01T10:00:00Z","data":{{"id":"{payment}","action_id":"act_{n}","reference":"{}","amount":{amount},"currency":"{currency}","response_code":"10000"}}}}"#, order_text(*order)),
            Kind::Refund { amount, currency, refund_id } => format!(r#"{{"id":"{id}","type":"payment_refunded","version":"1.0.33","created_on":"2026-12-01T10:05:00Z","data":{{"id":"{payment}","action_id":"{refund_id}","amount":{amount},"currency":"{currency}","response_code":"10000"}}}}"#),
            Kind::Failed { order } => format!(r#"{{"id":"{id}","type":"payment_declined","data":{{"id":"{payment}","reference":"{order}","amount":100,"currency":"USD","response_code":"20005"}}}}"#),
            Kind::Unhandled => format!(r#"{{"id":"{id}","type":"payment_approved","data":{{"id":"{payment}","amount":1,"currency":"USD"}}}}"#),
            Kind::Withdrawal { dispute_id, amount, currency, .. } => format!(r#"{{"id":"{id}","type":"dispute_evidence_required","version":"1.0.6","created_on":"2026-12-20T10:00:00Z","data":{{"id":"{dispute_id}","category":"fraudulent","amount":{amount},"currency":"{currency}","reason_code":"10.4","payment_id":"{payment}","payment_action_id":"act_{n}","evidence_required_by":"2027-01-05T18:00:00Z"}}}}"#),
            Kind::Reinstatement { dispute_id, amount, currency } => format!(r#"{{"id":"{id}","type":"dispute_won","version":"1.0.6","created_on":"2027-01-20T10:00:00Z","data":{{"id":"{dispute_id}","category":"fraudulent","amount":{amount},"currency":"{currency}","reason_code":"10.4","payment_id":"{payment}"}}}}"#),
        },
        PADDLE => match kind {
            Kind::Capture { order, amount, currency } => {
                let custom = order.map_or_else(|| "null".to_owned(), |o| format!(r#"{{"order_id":"{o}"}}"#));
                format!(r#"{{"event_id":"{id}","event_type":"transaction.completed","occurred_at":"2026-12-01T10:00:00Z","notification_id":"ntf_{n}","data":{{"id":"{payment}","status":"completed","currency_code":"{currency}","custom_data":{custom},"details":{{"totals":{{"subtotal":"{amount}","tax":"0","total":"{amount}","grand_total":"{amount}"}}}}}}}}"#)
            }
            Kind::Refund { amount, currency, refund_id } => format!(r#"{{"event_id":"{id}","event_type":"adjustment.created","occurred_at":"2026-12-01T10:05:00Z","notification_id":"ntf_{n}","data":{{"id":"{refund_id}","action":"refund","type":"partial","transaction_id":"{payment}","status":"approved","currency_code":"{currency}","reason":"requested","totals":{{"subtotal":"{amount}","tax":"0","total":"{amount}"}}}}}}"#),
            Kind::Failed { order } => format!(r#"{{"event_id":"{id}","event_type":"transaction.payment_failed","notification_id":"ntf_{n}","data":{{"id":"{payment}","status":"past_due","currency_code":"USD","custom_data":{{"order_id":"{order}"}}}}}}"#),
            Kind::Unhandled => format!(r#"{{"event_id":"{id}","event_type":"customer.created","notification_id":"ntf_{n}","data":{{"id":"ctm_{n}","email":"a@b.example"}}}}"#),
            // A chargeback's adjustment id names its dispute.
            Kind::Withdrawal { dispute_id, amount, fee, currency } => format!(r#"{{"event_id":"{id}","event_type":"adjustment.created","occurred_at":"2026-12-20T10:00:00Z","notification_id":"ntf_{n}","data":{{"id":"{dispute_id}","action":"chargeback","type":"full","transaction_id":"{payment}","status":"approved","currency_code":"{currency}","reason":"fraudulent","totals":{{"subtotal":"{amount}","tax":"0","total":"{amount}","fee":"0","earnings":"-{amount}","currency_code":"{currency}"}},"payout_totals":{{"subtotal":"{amount}","tax":"0","total":"{amount}","fee":"0","chargeback_fee":{{"amount":"{fee}","original":null}},"earnings":"-{net}","currency_code":"{currency}"}}}}}}"#, net = amount + fee),
            Kind::Reinstatement { amount, currency, .. } => format!(r#"{{"event_id":"{id}","event_type":"adjustment.created","occurred_at":"2027-01-20T10:00:00Z","notification_id":"ntf_{n}","data":{{"id":"adj_cbr_{n}","action":"chargeback_reverse","type":"full","transaction_id":"{payment}","status":"approved","currency_code":"{currency}","reason":"chargeback won","totals":{{"subtotal":"{amount}","tax":"0","total":"{amount}","currency_code":"{currency}"}}}}}}"#),
        },
        PAYPAL => match kind {
            Kind::Capture { order, amount, currency } => {
                let custom = order.map_or_else(String::new, |o| format!(r#","custom_id":"{o}""#));
                format!(r#"{{"id":"{id}","event_version":"1.0","create_time":"2026-12-01T10:00:00Z","resource_type":"capture","resource_version":"2.0","event_type":"PAYMENT.CAPTURE.COMPLETED","summary":"Payment completed","resource":{{"id":"{payment}","status":"COMPLETED","final_capture":true,"amount":{{"currency_code":"{currency}","value":"{}"}}{custom}}}}}"#, decimal(*amount, currency))
            }
            Kind::Refund { amount, currency, refund_id } => format!(r#"{{"id":"{id}","event_version":"1.0","create_time":"2026-12-01T10:05:00Z","resource_type":"refund","resource_version":"2.0","event_type":"PAYMENT.CAPTURE.REFUNDED","summary":"A refund","resource":{{"id":"{refund_id}","status":"COMPLETED","amount":{{"currency_code":"{currency}","value":"{}"}},"links":[{{"href":"https://api.paypal.com/v2/payments/refunds/{refund_id}","rel":"self","method":"GET"}},{{"href":"https://api.paypal.com/v2/payments/captures/{payment}","rel":"up","method":"GET"}}]}}}}"#, decimal(*amount, currency)),
            Kind::Failed { order } => format!(r#"{{"id":"{id}","event_version":"1.0","resource_type":"capture","event_type":"PAYMENT.CAPTURE.DENIED","resource":{{"id":"{payment}","status":"DECLINED","custom_id":"{order}","amount":{{"currency_code":"USD","value":"1.00"}}}}}}"#),
            Kind::Unhandled => format!(r#"{{"id":"{id}","event_version":"1.0","resource_type":"checkout-order","event_type":"CHECKOUT.ORDER.APPROVED","resource":{{"id":"ORD{n}"}}}}"#),
            Kind::Withdrawal { dispute_id, amount, currency, .. } => format!(r#"{{"id":"{id}","event_version":"1.0","create_time":"2026-12-20T10:00:00Z","resource_type":"refund","resource_version":"2.0","event_type":"PAYMENT.CAPTURE.REVERSED","summary":"A payment was reversed","resource":{{"id":"{dispute_id}","status":"COMPLETED","note_to_payer":"Payment reversed","amount":{{"currency_code":"{currency}","value":"{}"}},"links":[{{"href":"https://api.paypal.com/v2/payments/refunds/{dispute_id}","rel":"self","method":"GET"}},{{"href":"https://api.paypal.com/v2/payments/captures/{payment}","rel":"up","method":"GET"}}]}}}}"#, decimal(*amount, currency)),
            Kind::Reinstatement { .. } => panic!("PayPal's reinstatement is not mapped"),
        },
        // GoCardless's events name their resource only: what they move is in its API (see
        // [`api_resources`]).
        GOCARDLESS => {
            let on_payment = format!(r#"{{"payment":"{payment}"}}"#);
            let (resource_type, action, links) = match kind {
                Kind::Capture { .. } => ("payments", "confirmed", on_payment),
                // A refund is reported when it is created and again when it is paid.
                Kind::Refund { refund_id, .. } => (
                    "refunds",
                    if n.ends_with("_again") { "paid" } else { "created" },
                    format!(r#"{{"refund":"{refund_id}","mandate":"MD1"}}"#),
                ),
                Kind::Failed { .. } => ("payments", "failed", on_payment),
                Kind::Unhandled => ("mandates", "created", format!(r#"{{"mandate":"MD_{n}"}}"#)),
                Kind::Withdrawal { .. } => ("payments", "charged_back", on_payment),
                Kind::Reinstatement { .. } => ("payments", "chargeback_cancelled", on_payment),
            };
            format!(r#"{{"events":[{{"id":"{id}","created_at":"2026-12-01T10:00:00.000Z","resource_type":"{resource_type}","action":"{action}","links":{links},"details":{{"origin":"gocardless","cause":"{action}","description":"simulated"}},"metadata":{{}}}}]}}"#)
        }
        BRAINTREE => {
            // The event id holds the notification's timestamp: a credit reported again is
            // another notification, an hour later.
            let at = if n.ends_with("_again") { "2026-12-01T11:00:00Z" } else { "2026-12-01T10:00:00Z" };
            let order_element = |order: &Option<i64>| order.map_or_else(String::new, |o| format!("<order-id>{o}</order-id>"));
            let dispute = |id: &str, status: &str, kind: &str, amount: i64, currency: &str| format!("<dispute><id>{id}</id><kind>{kind}</kind><status>{status}</status><amount-disputed>{}</amount-disputed><currency-iso-code>{currency}</currency-iso-code><transaction><id>{payment}</id></transaction></dispute>", decimal(amount, currency));
            let (notification, subject_id, subject) = match kind {
                Kind::Capture { order, amount, currency } => ("transaction_settled", payment.to_owned(), format!("<transaction><id>{payment}</id><status>settled</status><type>sale</type><currency-iso-code>{currency}</currency-iso-code><amount>{}</amount>{}</transaction>", decimal(*amount, currency), order_element(order))),
                Kind::Refund { amount, currency, refund_id } => ("transaction_settled", refund_id.clone(), format!("<transaction><id>{refund_id}</id><status>settled</status><type>credit</type><currency-iso-code>{currency}</currency-iso-code><amount>{}</amount><refunded-transaction-id>{payment}</refunded-transaction-id></transaction>", decimal(*amount, currency))),
                Kind::Failed { order } => ("transaction_settlement_declined", payment.to_owned(), format!("<transaction><id>{payment}</id><status>settlement_declined</status><type>sale</type><currency-iso-code>USD</currency-iso-code><amount>1.00</amount>{}</transaction>", order_element(&Some(*order)))),
                // A retrieval (a request for information) moves no money.
                Kind::Unhandled => ("dispute_opened", format!("rt_{n}"), dispute(&format!("rt_{n}"), "open", "retrieval", 100, "USD")),
                Kind::Withdrawal { dispute_id, amount, currency, .. } => ("dispute_opened", dispute_id.clone(), dispute(dispute_id, "open", "chargeback", *amount, currency)),
                Kind::Reinstatement { dispute_id, amount, currency } => ("dispute_won", dispute_id.clone(), dispute(dispute_id, "won", "chargeback", *amount, currency)),
            };
            let xml = format!("<notification><timestamp type=\"datetime\">{at}</timestamp><kind>{notification}</kind><subject>{subject}</subject></notification>");
            return Payload {
                event_id: format!("{notification}:{subject_id}:{at}"),
                // Unsigned: the signer adds `bt_signature` as Braintree's SDKs compute it.
                body: url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("bt_payload", &mime_base64(xml.as_bytes()))
                    .finish(),
            };
        }
        other => panic!("no test payloads for provider {other}"),
    };
    // Razorpay's bodies name no event id: its header carries `id` (the signer sets it).
    Payload { event_id: id, body }
}

/// Base64 in lines of 76 characters, each ending in a newline, as Braintree's SDKs write
/// `bt_payload` (Python's `base64.encodebytes`).
fn mime_base64(bytes: &[u8]) -> String {
    let flat = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = String::new();
    for chunk in flat.as_bytes().chunks(76) {
        out.push_str(std::str::from_utf8(chunk).unwrap());
        out.push('\n');
    }
    out
}

/// What `provider`'s API must answer before event `kind` about `payment` is sent (path, JSON),
/// for the providers whose events carry no amounts (GoCardless: its payment, or its refund).
pub fn api_resources(provider: &str, payment: &str, kind: &Kind) -> Vec<(String, String)> {
    if provider != GOCARDLESS {
        return Vec::new();
    }
    match kind {
        Kind::Capture {
            order,
            amount,
            currency,
        } => {
            let metadata =
                order.map_or_else(|| "{}".to_owned(), |o| format!(r#"{{"order_id":"{o}"}}"#));
            vec![(
                format!("/payments/{payment}"),
                format!(
                    r#"{{"payments":{{"id":"{payment}","created_at":"2026-12-01T09:00:00.000Z","charge_date":"2026-12-03","amount":{amount},"description":null,"currency":"{currency}","status":"confirmed","reference":null,"metadata":{metadata},"amount_refunded":0,"links":{{"mandate":"MD1","creditor":"CR1"}}}}}}"#
                ),
            )]
        }
        Kind::Refund {
            amount,
            currency,
            refund_id,
        } => vec![(
            format!("/refunds/{refund_id}"),
            format!(
                r#"{{"refunds":{{"id":"{refund_id}","created_at":"2026-12-01T10:00:00.000Z","amount":{amount},"currency":"{currency}","reference":null,"metadata":{{}},"links":{{"payment":"{payment}","mandate":"MD1"}}}}}}"#
            ),
        )],
        _ => Vec::new(),
    }
}

/// A payment's whole state at a provider that must be asked and answers it whole (Mollie,
/// Mercado Pago): the status in the provider's own words, and amounts in minor units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskedState {
    pub status: &'static str,
    pub amount: i64,
    pub currency: &'static str,
    pub refunded: i64,
    pub charged_back: i64,
    pub order: Option<i64>,
}

/// Mollie's answer to `GET /v2/payments/{id}` in `state`, and the event id the gateway derives
/// from it (`{id}:{status}:{amountRefunded}:{amountChargedBack}`, an absent amount `0`). As
/// Mollie's API does, a payment shows `amountRefunded` once paid and `amountChargedBack` once
/// charged back.
pub fn mollie_payment(id: &str, state: &AskedState) -> (String, String) {
    let c = state.currency;
    let money = |minor: i64| serde_json::json!({"value": decimal(minor, c), "currency": c});
    let mut payment = serde_json::json!({"resource": "payment", "id": id, "mode": "test",
        "createdAt": "2026-12-01T10:00:00+00:00", "status": state.status,
        "amount": money(state.amount), "description": "Simulated order", "method": "ideal",
        "metadata": state.order.map(|o| serde_json::json!({"order_id": o.to_string()})),
        "_links": {"self": {"href": format!("https://api.mollie.com/v2/payments/{id}")}}});
    let (mut refunded, mut charged_back) = ("0".to_owned(), "0".to_owned());
    if state.status == "paid" {
        refunded = decimal(state.refunded, c);
        payment["amountRefunded"] = money(state.refunded);
        payment["amountRemaining"] = money(state.amount - state.refunded);
        if state.charged_back > 0 {
            charged_back = decimal(state.charged_back, c);
            payment["amountChargedBack"] = money(state.charged_back);
        }
    }
    let event_id = format!("{id}:{}:{refunded}:{charged_back}", state.status);
    (payment.to_string(), event_id)
}

/// `minor` units of `currency` as a JSON number the way Mercado Pago's API writes amounts (no
/// trailing zeros: 10050 BRL cents is `100.5`; CLP has no minor unit).
fn mercadopago_number(minor: i64, currency: &str) -> String {
    if currency == "CLP" {
        return minor.to_string();
    }
    match (minor / 100, minor % 100) {
        (whole, 0) => whole.to_string(),
        (whole, cents) if cents % 10 == 0 => format!("{whole}.{}", cents / 10),
        (whole, cents) => format!("{whole}.{cents:02}"),
    }
}

/// Mercado Pago's answer to `GET /v1/payments/{id}` in `state` (its `charged_back` is the status;
/// `state.charged_back` is not a field of it), and the event id the gateway derives from it:
/// `{id}:{status}`, with the refunded total while a partly refunded payment keeps its status.
pub fn mercadopago_payment(id: &str, state: &AskedState) -> (String, String) {
    let refunded = mercadopago_number(state.refunded, state.currency);
    let external_reference = state
        .order
        .map_or_else(|| "null".to_owned(), |o| format!(r#""{o}""#));
    let answer = format!(
        r#"{{"id":{id},"date_created":"2026-12-01T10:00:00.000-03:00","status":"{status}","status_detail":"simulated","currency_id":"{currency}","transaction_amount":{amount},"transaction_amount_refunded":{refunded},"external_reference":{external_reference},"payment_method_id":"visa","payment_type_id":"credit_card"}}"#,
        status = state.status,
        currency = state.currency,
        amount = mercadopago_number(state.amount, state.currency),
    );
    let event_id = if state.refunded > 0 && state.status != "refunded" {
        format!("{id}:{}:{refunded}", state.status)
    } else {
        format!("{id}:{}", state.status)
    };
    (answer, event_id)
}
