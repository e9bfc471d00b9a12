//! Braintree: a notification is the form `bt_signature`, `bt_payload` (the notification's XML
//! in base64, with a snapshot of its subject: the transaction or the dispute, and the time it
//! was triggered), signed with HMAC-SHA1. A sale settles (`transaction_settled`), or its
//! settlement is declined; a refund is a credit transaction of its own that settles; a
//! chargeback opens a dispute (`dispute_opened`), which is won (money back) or lost. Some
//! notifications have a subject without an id (Account Updater's daily report): two of them
//! can be triggered in the same second. No fee is in the dispute. Braintree retries every
//! hour for 24 hours.

use base64::Engine;

use super::{Expected, Model, Webhook, decimal};
use crate::support::{BRAINTREE, BRAINTREE_PRIVATE, BRAINTREE_PUBLIC};
use crate::truth::{Change, Payment};

pub struct Braintree;

/// Base64 in lines of 76 characters, each ending in a newline, as Braintree's SDKs write it.
fn mime_base64(bytes: &[u8]) -> String {
    let flat = base64::engine::general_purpose::STANDARD.encode(bytes);
    flat.as_bytes()
        .chunks(76)
        .map(|chunk| format!("{}\n", String::from_utf8_lossy(chunk)))
        .collect()
}

impl Model for Braintree {
    fn provider(&self) -> &'static str {
        BRAINTREE
    }

    fn provider_toml(&self, _api: Option<&crate::support::emulator::Emulator>) -> String {
        super::provider_entry(
            BRAINTREE,
            "braintree",
            &format!("public_key = \"{BRAINTREE_PUBLIC}\"\nsecrets = [\"{BRAINTREE_PRIVATE}\"]"),
        )
    }

    fn payment_id(&self, history: u64, index: usize) -> String {
        format!("bt{history}x{index}")
    }

    fn webhooks(&self, p: &Payment, change: &Change, seq: u64) -> Vec<Webhook> {
        let c = p.currency;
        // Triggered at a second of its own, or (every few) the same second as the one before.
        let at = format!(
            "2026-12-01T{:02}:{:02}:{:02}Z",
            (seq / 3600) % 24,
            (seq / 60) % 60,
            (seq / 2) % 60
        );
        let order = p
            .order
            .map_or_else(String::new, |o| format!("<order-id>{o}</order-id>"));
        let dispute = |k: usize, status: &str| {
            let cb = &p.chargebacks[k];
            (
                cb.id.clone(),
                format!(
                    "<dispute><id>{}</id><kind>chargeback</kind><status>{status}</status><amount-disputed>{}</amount-disputed><currency-iso-code>{c}</currency-iso-code><transaction><id>{}</id></transaction></dispute>",
                    cb.id,
                    decimal(cb.amount, c),
                    p.id
                ),
            )
        };
        let mut notes: Vec<(&str, String, String)> = match *change {
            Change::Captured => vec![(
                "transaction_settled",
                p.id.clone(),
                format!(
                    "<transaction><id>{}</id><status>settled</status><type>sale</type><currency-iso-code>{c}</currency-iso-code><amount>{}</amount>{order}</transaction>",
                    p.id,
                    decimal(p.captured, c)
                ),
            )],
            Change::Failed => vec![(
                "transaction_settlement_declined",
                p.id.clone(),
                format!(
                    "<transaction><id>{}</id><status>settlement_declined</status><type>sale</type><currency-iso-code>{c}</currency-iso-code><amount>{}</amount>{order}</transaction>",
                    p.id,
                    decimal(p.amount, c)
                ),
            )],
            Change::RefundMade(r) => {
                let refund = &p.refunds[r];
                vec![(
                    "transaction_settled",
                    refund.id.clone(),
                    format!(
                        "<transaction><id>{}</id><status>settled</status><type>credit</type><currency-iso-code>{c}</currency-iso-code><amount>{}</amount><refunded-transaction-id>{}</refunded-transaction-id></transaction>",
                        refund.id,
                        decimal(refund.amount, c),
                        p.id
                    ),
                )]
            }
            Change::ChargedBack(k) => {
                let (id, xml) = dispute(k, "open");
                vec![("dispute_opened", id, xml)]
            }
            Change::Reversed(k) => {
                let (id, xml) = dispute(k, "won");
                vec![("dispute_won", id, xml)]
            }
            Change::Lost(k) => {
                let (id, xml) = dispute(k, "lost");
                vec![("dispute_lost", id, xml)]
            }
            _ => Vec::new(),
        };
        // Account Updater's daily report: a subject without an id, no money.
        if matches!(change, Change::Captured) {
            notes.push((
                "account_updater_daily_report",
                String::new(),
                format!("<account-updater-daily-report><report-date>2026-12-01</report-date><report-url>https://example.test/report/{seq}</report-url></account-updater-daily-report>"),
            ));
        }
        notes
            .into_iter()
            .map(|(kind, subject_id, subject)| {
                let xml = format!("<notification><timestamp type=\"datetime\">{at}</timestamp><kind>{kind}</kind><subject>{subject}</subject></notification>");
                Webhook {
                    id: format!("{kind}:{subject_id}:{at}"),
                    body: url::form_urlencoded::Serializer::new(String::new())
                        .append_pair("bt_payload", &mime_base64(xml.as_bytes()))
                        .finish(),
                    label: kind.to_owned(),
                }
            })
            .collect()
    }

    fn expect(&self, p: &Payment) -> Expected {
        Expected::truth(p, false)
    }

    fn schedule(&self) -> &'static [u64] {
        &[60; 24]
    }
}
