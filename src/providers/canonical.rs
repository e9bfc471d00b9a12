//! The gateway's own payload (`payload = "canonical"`), for Standard Webhooks and plain HMAC
//! senders: `{"id","type","data":{"payment_id","order_id","amount_minor","currency"}}` with
//! types `payment.succeeded`, `payment.failed` and `refund.succeeded` (which may carry
//! `data.refund_id`: it posts once per merchant and provider), and the disputes'
//! `dispute.funds_withdrawn` / `dispute.funds_reinstated` / `dispute.closed`.

use serde_json::json;

use super::body::{self, IdField, Object, Unusable};
use super::connector::{Format, Sample};
use crate::payments::event::{
    DisputeChange, DisputeResult, Parsed, PayloadError, PaymentEvent, Reading, RefundAmount,
};

pub struct Canonical;

/// A body in the canonical format.
pub fn read(body: &[u8]) -> Reading {
    body::read(body, "type", parse)
}

impl Format for Canonical {
    fn read(&self, body: &[u8]) -> Reading {
        read(body)
    }

    fn event_id(&self, body: &[u8]) -> Result<String, PayloadError> {
        body::event_id_from_body(body, IdField::Id)
    }

    fn sample(&self, event_type: &str, s: &Sample) -> String {
        let mut data = json!({"payment_id": s.payment_id, "amount_minor": s.amount_minor, "currency": s.currency});
        if let Some(order_id) = s.order_id {
            data["order_id"] = json!(order_id);
        }
        if event_type == "refund.succeeded" {
            data["refund_id"] = json!(format!("re_{}", s.event_id));
        }
        json!({"id": s.event_id, "type": event_type, "data": data}).to_string()
    }
}

fn parse(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if kind.starts_with("dispute.") {
        return parse_dispute(kind, body);
    }
    if !matches!(
        kind,
        "payment.succeeded" | "payment.failed" | "refund.succeeded"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let data = body.object("data")?;
    let event = match kind {
        "payment.succeeded" => PaymentEvent::Succeeded {
            payment_id: data.id("payment_id")?,
            order_id: data.order_id("order_id"),
            amount: data.amount("amount_minor")?,
            currency: data.currency("currency", false)?,
        },
        "payment.failed" => PaymentEvent::Failed {
            payment_id: data.id("payment_id")?,
            order_id: data.order_id("order_id"),
        },
        _ => PaymentEvent::Refunded {
            payment_id: data.id("payment_id")?,
            refund_id: data.optional_id("refund_id")?,
            refund: RefundAmount::Delta(data.amount("amount_minor")?),
            currency: data.currency("currency", false)?,
        },
    };
    Ok(Parsed::Event(event))
}

/// `dispute.funds_withdrawn` (`data.dispute_id, payment_id, amount_minor, currency`, optional
/// `fee_minor`), `dispute.funds_reinstated` (the same without a fee) and `dispute.closed`
/// (`data.dispute_id, payment_id, status` won or lost).
fn parse_dispute(kind: &str, body: &Object<'_>) -> Result<Parsed, Unusable> {
    if !matches!(
        kind,
        "dispute.funds_withdrawn" | "dispute.funds_reinstated" | "dispute.closed"
    ) {
        return Ok(Parsed::Ignored("unsupported_event_type"));
    }
    let data = body.object("data")?;
    let change = match kind {
        "dispute.funds_withdrawn" => DisputeChange::FundsWithdrawn {
            amount: data.amount("amount_minor")?,
            fee_minor: match data.member("fee_minor") {
                None => 0,
                Some(_) => data.total("fee_minor")?,
            },
            currency: data.currency("currency", false)?,
            fee_in_other_currency: false,
        },
        "dispute.funds_reinstated" => DisputeChange::FundsReinstated {
            amount: data.amount("amount_minor")?,
            currency: data.currency("currency", false)?,
        },
        _ => match data.string("status").as_deref() {
            Some("won") => DisputeChange::Closed(DisputeResult::Won),
            Some("lost") => DisputeChange::Closed(DisputeResult::Lost),
            _ => return Err(body::invalid("data.status must be \"won\" or \"lost\"").into()),
        },
    };
    Ok(Parsed::Event(PaymentEvent::Dispute {
        payment_id: data.id("payment_id")?,
        dispute_id: data.id("dispute_id")?,
        change,
    }))
}
