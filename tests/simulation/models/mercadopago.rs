//! Mercado Pago: a notification names a payment (`data.id`, in the query and the body),
//! signed over that id; what happened is what `GET /v1/payments/{id}` answers when the gateway
//! asks, which may already be a later state than the one the notification was sent for. A
//! payment is `approved`, partly refunded (`transaction_amount_refunded`, still `approved`),
//! `refunded`, `in_mediation` while a dispute is open (no money taken yet; it may return to
//! `approved`), `charged_back` once the chargeback takes what refunds left (`status_detail`
//! `settled`), and `charged_back` with `status_detail` `reimbursed` when the money is given
//! back. A payment is charged back at most once. Fees are not in the payment. Mercado Pago
//! retries a notification that is not answered 200/201 every 15 minutes, for up to 3 days.

use serde_json::json;

use super::{Expected, Model, Webhook};
use crate::support::emulator::Emulator;
use crate::support::{MERCADOPAGO, MERCADOPAGO_SECRET};
use crate::truth::{Change, ChargebackSize, DisputeState, OpKind, Payment, Rules, Status};

pub struct Mercadopago;

/// An amount as Mercado Pago's API writes it: a JSON number without trailing zeros.
fn number(minor: i64, currency: &str) -> String {
    if super::exponent(currency) == 0 {
        return minor.to_string();
    }
    match (minor / 100, minor % 100) {
        (whole, 0) => whole.to_string(),
        (whole, cents) if cents % 10 == 0 => format!("{whole}.{}", cents / 10),
        (whole, cents) => format!("{whole}.{cents:02}"),
    }
}

impl Model for Mercadopago {
    fn provider(&self) -> &'static str {
        MERCADOPAGO
    }

    fn rules(&self) -> Rules {
        Rules {
            chargeback_size: ChargebackSize::AfterRefunds,
            // A charged-back payment's status stays `charged_back`: no refund is made of it.
            refunds_after_chargeback: false,
            ..Rules::default()
        }
    }

    fn ops(&self) -> &'static [OpKind] {
        &[
            OpKind::Capture,
            OpKind::Fail,
            OpKind::Refund,
            OpKind::Mediation,
            OpKind::MediationWon,
            OpKind::Chargeback,
            OpKind::Reverse,
        ]
    }

    fn currencies(&self) -> &'static [&'static str] {
        &["BRL", "ARS", "CLP"]
    }

    fn asks_api(&self) -> bool {
        true
    }

    fn provider_toml(&self, api: Option<&Emulator>) -> String {
        api.map(|api| {
            api.provider_toml(
                MERCADOPAGO,
                "mercadopago",
                &format!("secrets = [\"{MERCADOPAGO_SECRET}\"]"),
            )
        })
        .unwrap_or_default()
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("{}{index:03}", 7_000_000 + history)
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        if matches!(change, Change::Lost(_)) {
            return Vec::new();
        }
        vec![Webhook {
            id: format!("{}", 9_000_000_000u64 + seq),
            body: json!({"action": "payment.updated", "api_version": "v1",
                         "data": {"id": p.id}, "date_created": "2026-12-01T10:00:00Z",
                         "id": 9_000_000_000u64 + seq, "live_mode": false, "type": "payment",
                         "user_id": "123456"})
            .to_string(),
            label: format!("{change:?}"),
        }]
    }

    fn api(&self, p: &Payment) -> Vec<(String, String)> {
        let refunded = p.refunded(false);
        let (status, detail) = match p.status {
            Status::Open => ("pending", "pending_contingency"),
            Status::Failed => ("rejected", "cc_rejected_other_reason"),
            Status::Captured => match p.chargebacks.first() {
                Some(cb) if cb.state == DisputeState::Reinstated => ("charged_back", "reimbursed"),
                Some(_) => ("charged_back", "settled"),
                None if p.mediation => ("in_mediation", "in_mediation"),
                None if refunded == p.captured => ("refunded", "refunded"),
                None if refunded > 0 => ("approved", "partially_refunded"),
                None => ("approved", "accredited"),
            },
        };
        let answer = json!({"id": p.id.parse::<u64>().unwrap_or_default(),
            "date_created": "2026-12-01T10:00:00.000-03:00", "status": status,
            "status_detail": detail, "currency_id": p.currency,
            "external_reference": p.order.map(|o| o.to_string()),
            "payment_method_id": "visa", "payment_type_id": "credit_card"});
        // Amounts are numbers written by their digits: spliced in as text.
        let answer = answer.to_string().replacen(
            "{",
            &format!(
                "{{\"transaction_amount\":{},\"transaction_amount_refunded\":{},",
                number(
                    p.captured
                        .max(p.amount * i64::from(p.status != Status::Captured)),
                    p.currency
                ),
                number(refunded, p.currency)
            ),
            1,
        );
        vec![(format!("/v1/payments/{}", p.id), answer)]
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, false)
    }

    fn schedule(&self) -> &'static [u64] {
        &[15, 30, 360, 2880, 5760]
    }
}
