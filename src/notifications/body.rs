//! What a merchant receives: the notification's JSON body, rendered from the staged row, so
//! every attempt of one notification sends the same bytes, and its `webhook-id`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::model::Notification;

/// The `webhook-id` of notification `id`: stable across attempts and redeliveries, unique per
/// gateway database, so a merchant drops a duplicate by it.
pub fn webhook_id(id: i64) -> String {
    format!("ntf_{id}")
}

/// `{"type":..,"timestamp":..,"data":{..}}`: the change's type, when it was staged (RFC 3339,
/// microseconds, UTC), and what changed. `data` always has the same keys for every type, null
/// where a type has nothing to say; `refund_request_id` is added for refund requests, `reason`
/// for a held payment, `failure_message` for a failed refund request, `dispute_id` for a
/// dispute's change of the order (withdrawn, lost, reinstated) and `endpoint_id` for a `ping`.
pub fn render(n: &Notification) -> Vec<u8> {
    let body = Body {
        kind: &n.kind,
        timestamp: rfc3339(n.created_at),
        data: Data {
            order_id: n.order_id,
            reference: n.reference.as_deref(),
            status: &n.object_status,
            amount_minor: n.amount_minor,
            currency: n.currency.as_deref(),
            provider: n.provider.as_deref(),
            event_id: n.event_id.as_deref(),
            transfer_id: n.transfer_id,
            payment_id: n.payment_id.as_deref(),
            refund_request_id: n.refund_request_id,
            reason: n.detail.as_deref().filter(|_| n.kind == "payment.held"),
            failure_message: n
                .detail
                .as_deref()
                .filter(|_| n.kind == "refund_request.failed"),
            dispute_id: n.dispute_id.as_deref(),
            endpoint_id: n.detail.as_deref().filter(|_| n.kind == PING),
        },
    };
    // Serializing this struct of strings and numbers cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The body as JSON, for the admin API.
pub fn as_json(n: &Notification) -> serde_json::Value {
    serde_json::from_slice(&render(n)).unwrap_or(serde_json::Value::Null)
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    order_id: Option<i64>,
    reference: Option<&'a str>,
    status: &'a str,
    amount_minor: Option<i64>,
    currency: Option<&'a str>,
    provider: Option<&'a str>,
    event_id: Option<&'a str>,
    transfer_id: Option<i64>,
    payment_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    refund_request_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dispute_id: Option<&'a str>,
    /// A `ping`'s endpoint (`POST /v1/webhook-endpoints/{id}/test`).
    #[serde(skip_serializing_if = "Option::is_none")]
    endpoint_id: Option<&'a str>,
}

/// The type of the notification a merchant's endpoint test sends.
pub const PING: &str = "ping";

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::notifications::model::NotificationStatus;

    fn paid() -> Notification {
        Notification {
            id: 7,
            merchant_id: 42,
            endpoint_id: "file".into(),
            kind: "order.paid".into(),
            order_id: Some(123),
            object_status: "paid".into(),
            reference: Some("cart-77".into()),
            amount_minor: Some(1999),
            currency: Some("USD".into()),
            provider: Some("acme".into()),
            event_id: Some("evt_1".into()),
            transfer_id: Some(12),
            payment_id: Some("pay_1".into()),
            refund_request_id: None,
            detail: None,
            dispute_id: None,
            created_at: Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap(),
            status: NotificationStatus::Pending.as_str().into(),
            attempts: 0,
            next_attempt_at: Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap(),
            last_attempt_at: None,
            last_status: None,
            last_error: None,
            delivered_at: None,
        }
    }

    #[test]
    fn an_order_paid_body_has_the_contract_shape() {
        assert_eq!(
            String::from_utf8(render(&paid())).unwrap(),
            r#"{"type":"order.paid","timestamp":"2026-12-01T10:00:00.000000Z","data":{"order_id":123,"reference":"cart-77","status":"paid","amount_minor":1999,"currency":"USD","provider":"acme","event_id":"evt_1","transfer_id":12,"payment_id":"pay_1"}}"#
        );
    }

    #[test]
    fn the_detail_is_a_held_payments_reason_and_a_failed_requests_message() {
        let held = Notification {
            kind: "payment.held".into(),
            object_status: "held".into(),
            detail: Some("amount_mismatch".into()),
            ..paid()
        };
        assert_eq!(as_json(&held)["data"]["reason"], "amount_mismatch");
        let failed = Notification {
            kind: "refund_request.failed".into(),
            object_status: "failed".into(),
            refund_request_id: Some(5),
            detail: Some("the provider declined the refund (400): nope".into()),
            ..paid()
        };
        let json = as_json(&failed);
        assert_eq!(json["data"]["refund_request_id"], 5);
        assert_eq!(
            json["data"]["failure_message"],
            "the provider declined the refund (400): nope"
        );
        assert!(json["data"].get("reason").is_none());
    }

    #[test]
    fn a_disputes_change_of_the_order_names_its_dispute() {
        let disputed = Notification {
            kind: "order.disputed".into(),
            object_status: "disputed".into(),
            amount_minor: Some(500),
            event_id: Some("evt_dw".into()),
            transfer_id: Some(13),
            dispute_id: Some("dp_1".into()),
            ..paid()
        };
        assert_eq!(
            String::from_utf8(render(&disputed)).unwrap(),
            r#"{"type":"order.disputed","timestamp":"2026-12-01T10:00:00.000000Z","data":{"order_id":123,"reference":"cart-77","status":"disputed","amount_minor":500,"currency":"USD","provider":"acme","event_id":"evt_dw","transfer_id":13,"payment_id":"pay_1","dispute_id":"dp_1"}}"#
        );
        assert!(as_json(&paid())["data"].get("dispute_id").is_none());
    }

    #[test]
    fn the_same_row_always_renders_the_same_bytes() {
        assert_eq!(render(&paid()), render(&paid()));
        assert_eq!(webhook_id(7), "ntf_7");
    }
}
