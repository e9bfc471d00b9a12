//! How a first delivery ended, and the ack a provider gets for it (and gets again, byte for
//! byte, on every redelivery).

/// The status of a provider's ack: every verified event that is answered at all is answered
/// 200, so a provider never retries a deterministic outcome.
pub const ACK_STATUS: u16 = 200;

/// How a first delivery ended, as its ack says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    /// Captured money posted to unapplied funds instead of its order.
    Held,
    Ignored,
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Held => "held",
            Outcome::Ignored => "ignored",
            Outcome::Rejected => "rejected",
        }
    }
}

/// What a first delivery did: the content of its ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackOutcome {
    pub outcome: Outcome,
    /// Why an event was held, ignored or rejected, e.g. `amount_mismatch`; or why an applied
    /// one is in front of finance (`withdrawal_exceeds_remaining`).
    pub reason: Option<&'static str>,
    /// For an unusable body: what was wrong with it.
    pub detail: Option<String>,
    /// The ledger transfer the event posted. The one-statement capture leaves it `None` here:
    /// its ack, written by the database, holds it.
    pub transfer_id: Option<i64>,
    /// Every transfer, when the event posted several (a provider's whole state that brought a
    /// capture and a refund at once); empty otherwise.
    pub transfer_ids: Vec<i64>,
}

impl CallbackOutcome {
    pub fn applied(transfer_id: Option<i64>) -> Self {
        Self {
            outcome: Outcome::Applied,
            reason: None,
            detail: None,
            transfer_id,
            transfer_ids: Vec::new(),
        }
    }

    pub fn held(reason: &'static str, transfer_id: Option<i64>) -> Self {
        Self {
            outcome: Outcome::Held,
            reason: Some(reason),
            detail: None,
            transfer_id,
            transfer_ids: Vec::new(),
        }
    }

    pub fn ignored(reason: &'static str) -> Self {
        Self {
            outcome: Outcome::Ignored,
            reason: Some(reason),
            detail: None,
            transfer_id: None,
            transfer_ids: Vec::new(),
        }
    }

    pub fn rejected(reason: &'static str, detail: Option<String>) -> Self {
        Self {
            outcome: Outcome::Rejected,
            reason: Some(reason),
            detail,
            transfer_id: None,
            transfer_ids: Vec::new(),
        }
    }

    /// The ack body for the event `event_id`.
    pub fn ack(&self, event_id: &str) -> serde_json::Value {
        serde_json::to_value(Ack {
            received: true,
            event_id,
            outcome: self.outcome.as_str(),
            reason: self.reason,
            detail: self.detail.as_deref(),
            transfer_id: self.transfer_id,
            transfer_ids: &self.transfer_ids,
        })
        .unwrap_or_default()
    }
}

/// The ack's JSON shape.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Ack<'a> {
    pub received: bool,
    pub event_id: &'a str,
    /// applied, held, ignored or rejected
    pub outcome: &'static str,
    /// Why an event was held, ignored or rejected, e.g. amount_mismatch; on an applied
    /// dispute withdrawal, withdrawal_exceeds_remaining or fee_not_booked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// What made a body unusable (with reason invalid_payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<&'a str>,
    /// The ledger transfer an applied or held event posted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_id: Option<i64>,
    /// Every transfer, when one event posted several (a fetched payment state that brought a
    /// capture and a refund at once); `transfer_id` is the first.
    #[serde(skip_serializing_if = "<[i64]>::is_empty")]
    pub transfer_ids: &'a [i64],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_leaves_out_what_it_does_not_have() {
        assert_eq!(
            CallbackOutcome::applied(Some(7)).ack("evt_1").to_string(),
            r#"{"event_id":"evt_1","outcome":"applied","received":true,"transfer_id":7}"#
        );
        assert_eq!(
            CallbackOutcome::rejected("invalid_payload", Some("type must be a string".into()))
                .ack("evt_2")["detail"],
            "type must be a string"
        );
    }
}
