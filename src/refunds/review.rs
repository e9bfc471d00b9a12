//! Why the gateway stopped retrying a refund request on its own (the `review_reason` column of
//! `refund_requests`, migration 000023): a person then looks at the provider and resolves it
//! (`super::create::resolve`). A leaf, so the error types above can name it.

/// Why the gateway stopped retrying a processing request on its own (its `review_reason`
/// column, migration 000023): a person looks at the provider and resolves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReviewReason {
    /// Older than `[refunds] max_retry_age_hours`: the provider may have forgotten its
    /// idempotency key, so another call could refund twice.
    RetryAgeExceeded,
    /// The provider answered with something the gateway cannot store (a refund id holding a
    /// control character); asking again gets the same answer.
    UnusableProviderAnswer,
    /// The provider answered with a refund id another request already holds: one of the two
    /// is wrong, and only the provider's dashboard can tell which.
    RefundIdInUse,
}

impl ReviewReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewReason::RetryAgeExceeded => "retry_age_exceeded",
            ReviewReason::UnusableProviderAnswer => "unusable_provider_answer",
            ReviewReason::RefundIdInUse => "refund_id_in_use",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [
            ReviewReason::RetryAgeExceeded,
            ReviewReason::UnusableProviderAnswer,
            ReviewReason::RefundIdInUse,
        ]
        .into_iter()
        .find(|reason| reason.as_str() == s)
    }
}

/// A request whose automatic retries stopped, and why.
#[derive(Debug, Clone, Copy)]
pub struct Review {
    pub refund_request_id: i64,
    pub reason: ReviewReason,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_reasons_round_trip_through_their_column_text() {
        for reason in [
            ReviewReason::RetryAgeExceeded,
            ReviewReason::UnusableProviderAnswer,
            ReviewReason::RefundIdInUse,
        ] {
            assert_eq!(ReviewReason::parse(reason.as_str()), Some(reason));
        }
        assert_eq!(ReviewReason::parse("later"), None);
    }
}
