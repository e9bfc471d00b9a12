//! An operator's answer for a refund request the gateway will not, or cannot yet, finish on
//! its own (docs/refunds.md, "a person resolves"): its retries stopped, or its provider
//! outcome is unknown and nobody is calling the provider for it; or a `pending` request whose
//! refund id turned out wrong. The answer is stored exactly as phase 3 would store the
//! provider's, in one transaction, so a refused resolution leaves nothing behind.

use diesel_async::{AsyncConnection, AsyncPgConnection};

use super::create::{Attempt, Known, Refunds, Stored, request_of, store_known};
use super::error::ResolveError;
use super::model::{RefundRequest, RefundStatus};
use crate::idempotency::Executed;
use crate::idempotency::lease;
use crate::orders::model::Order;

use super::create::RefundOutcome;

/// What an operator found at the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The provider made the refund, under this id: the request becomes pending (or succeeded,
    /// if its webhook already posted).
    Accepted { provider_refund_id: String },
    /// The provider has no such refund: the request fails and its amount is released.
    Declined { message: String },
}

/// Stores `resolution` for request `request_id`; its status afterwards.
///
/// A `processing` request must be idle (retries stopped, lease released, or expired more than
/// a lease ago): the resolution takes its lease over and finishes its record, so the client's
/// retry with its key replays the answer. A `pending` request (accepted under a refund id that
/// turned out wrong) gets its refund id corrected, or fails; its record keeps the answer its
/// client already has.
pub async fn resolve(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    request_id: i64,
    resolution: Resolution,
) -> Result<RefundStatus, ResolveError> {
    conn.transaction(async |conn| {
        let found = RefundRequest::resolvable(conn, request_id, refunds.lease)
            .await?
            .ok_or(ResolveError::NotFound)?;
        match RefundStatus::parse(&found.status) {
            Some(RefundStatus::Processing) if found.idle => {
                let record_id = found.record_id.ok_or(ResolveError::NotResolvable)?;
                let lease =
                    lease::take_over(conn, record_id, found.lease_token.as_deref(), refunds.lease)
                        .await?
                        .ok_or(ResolveError::NotResolvable)?;
                let request = request_of(conn, &lease).await?;
                let known = match resolution {
                    Resolution::Accepted { provider_refund_id } => {
                        Known::Accepted(provider_refund_id)
                    }
                    Resolution::Declined { message } => {
                        Known::Declined(format!("resolved by an operator: {message}"))
                    }
                };
                match store_known(conn, refunds, &Attempt { lease, request }, &known).await? {
                    Some(Stored::Done(Executed::First {
                        output: RefundOutcome::Accepted { status, .. },
                        ..
                    })) => Ok(status),
                    Some(Stored::Done(_)) => Ok(RefundStatus::Failed),
                    Some(Stored::RefundIdInUse { held_by }) => {
                        Err(ResolveError::RefundIdInUse { held_by })
                    }
                    None => Err(ResolveError::NotResolvable),
                }
            }
            Some(RefundStatus::Pending) => {
                // The order's row lock first, as the refund webhook takes it before it settles.
                Order::lock_for_merchant(conn, found.merchant_id, found.order_id).await?;
                match resolution {
                    Resolution::Accepted { provider_refund_id } => {
                        let request = RefundRequest::for_id(conn, request_id).await?;
                        if let Some(held_by) =
                            RefundRequest::holder_of_refund_id(conn, &request, &provider_refund_id)
                                .await?
                        {
                            return Err(ResolveError::RefundIdInUse { held_by });
                        }
                        RefundRequest::corrected(conn, request_id, &provider_refund_id)
                            .await?
                            .ok_or(ResolveError::NotResolvable)
                    }
                    Resolution::Declined { message } => {
                        let message = format!("withdrawn by an operator: {message}");
                        if RefundRequest::withdrawn(conn, request_id, &message).await? {
                            Ok(RefundStatus::Failed)
                        } else {
                            Err(ResolveError::NotResolvable)
                        }
                    }
                }
            }
            _ => Err(ResolveError::NotResolvable),
        }
    })
    .await
}
