//! One line of the provider's report: a money movement as JSON.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::classify::Kind;
use crate::money::{AmountMinor, Currency};

/// A movement the provider reports; the payment id borrows from the line when it can.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Movement<'a> {
    pub payment_id: Cow<'a, str>,
    pub kind: Kind,
    pub amount_minor: AmountMinor,
    pub currency: Currency,
    pub at: DateTime<Utc>,
}

#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow)]
    payment_id: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    amount_minor: i64,
    #[serde(borrow)]
    currency: Cow<'a, str>,
    at: DateTime<Utc>,
    // Carried for people reading the file; the comparison is per payment id and kind.
    #[serde(default, rename = "reference")]
    _reference: Option<serde::de::IgnoredAny>,
}

/// Parses one line (without its line break); the error says what is wrong, not where.
pub fn parse_line(bytes: &[u8]) -> Result<Movement<'_>, String> {
    let line: Line<'_> =
        serde_json::from_slice(bytes).map_err(|e| format!("not a movement: {e}"))?;
    if line.payment_id.is_empty() {
        return Err("payment_id is empty".into());
    }
    let kind = Kind::parse(&line.kind).ok_or_else(|| {
        format!(
            "kind must be \"payment\", \"refund\", \"chargeback\", \"chargeback_reversal\", \
             \"dispute_fee\" or \"refund_reversal\", not {:?}",
            line.kind
        )
    })?;
    let amount_minor = AmountMinor::parse(line.amount_minor).ok_or_else(|| {
        format!(
            "amount_minor must be a positive integer, not {}",
            line.amount_minor
        )
    })?;
    // Stripe writes codes in lower case; the ledger stores them upper case.
    let currency = Currency::parse_any_case(&line.currency)
        .ok_or_else(|| format!("currency {:?} is not an ISO 4217 code", line.currency))?;
    Ok(Movement {
        payment_id: line.payment_id,
        kind,
        amount_minor,
        currency,
        at: line.at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_example_parses() {
        let line = br#"{"payment_id":"pi_1","kind":"payment","amount_minor":4620,"currency":"EUR","at":"2026-11-30T10:00:00Z","reference":"ch_1"}"#;
        let movement = parse_line(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(movement.payment_id, "pi_1");
        assert_eq!(movement.kind, Kind::Payment);
        assert_eq!(movement.amount_minor.get(), 4620);
        assert_eq!(movement.currency.code(), "EUR");
        assert!(matches!(movement.payment_id, Cow::Borrowed(_)));
    }

    #[test]
    fn the_reference_is_optional_and_a_lower_case_currency_is_accepted() {
        let line = br#"{"payment_id":"pi_1","kind":"refund","amount_minor":5,"currency":"usd","at":"2026-11-30T10:00:00+01:00"}"#;
        let movement = parse_line(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (movement.kind, movement.currency.code()),
            (Kind::Refund, "USD")
        );
        assert_eq!(movement.at.to_rfc3339(), "2026-11-30T09:00:00+00:00");
    }

    #[test]
    fn dispute_kinds_are_movements_of_their_own() {
        for (kind, expected) in [
            ("chargeback", Kind::Chargeback),
            ("chargeback_reversal", Kind::ChargebackReversal),
            ("dispute_fee", Kind::DisputeFee),
            ("refund_reversal", Kind::RefundReversal),
        ] {
            let line = format!(
                r#"{{"payment_id":"pi_1","kind":"{kind}","amount_minor":1500,"currency":"usd","at":"2026-12-01T10:00:00Z"}}"#
            );
            let movement = parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(movement.kind, expected);
        }
    }

    #[test]
    fn a_line_that_is_not_a_movement_says_why() {
        let cases: [(&[u8], &str); 6] = [
            (b"{not json", "not a movement"),
            (br#"{"payment_id":"pi_1"}"#, "missing field"),
            (
                br#"{"payment_id":"","kind":"payment","amount_minor":1,"currency":"EUR","at":"2026-11-30T10:00:00Z"}"#,
                "payment_id is empty",
            ),
            (
                br#"{"payment_id":"p","kind":"payout","amount_minor":1,"currency":"EUR","at":"2026-11-30T10:00:00Z"}"#,
                "kind must be",
            ),
            (
                br#"{"payment_id":"p","kind":"refund","amount_minor":-5,"currency":"EUR","at":"2026-11-30T10:00:00Z"}"#,
                "positive integer",
            ),
            (
                br#"{"payment_id":"p","kind":"refund","amount_minor":5,"currency":"EURO","at":"2026-11-30T10:00:00Z"}"#,
                "ISO 4217",
            ),
        ];
        for (line, expected) in cases {
            let error = parse_line(line).err().unwrap_or_default();
            assert!(
                error.contains(expected),
                "{error:?} should say {expected:?}"
            );
        }
    }

    #[test]
    fn a_time_that_is_not_rfc3339_is_rejected() {
        let line = br#"{"payment_id":"p","kind":"payment","amount_minor":1,"currency":"EUR","at":"yesterday"}"#;
        assert!(parse_line(line).is_err());
    }
}
