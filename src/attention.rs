//! What finance must look at (`GET /admin/attention`, the console's attention page): held and
//! rejected events from the event log, refund requests that failed or are stuck, disputes
//! that need a look, and reused PayPal transmissions. Each list is read by the module that
//! owns its table; this one only gathers them.

use diesel::QueryResult;
use diesel_async::AsyncPgConnection;
use serde::Serialize;

use crate::deliveries::read::{EventFilter, EventOutcome, EventRow, list};
use crate::idempotency::transmission::ReusedTransmission;
use crate::notifications::{self, admin::NotificationView};
use crate::payments::dispute::DisputeAttention;
use crate::refunds::model::RefundAttention;

/// What finance must look at: the newest held and rejected events, refund requests that
/// failed or are stuck, and disputes that are open or need a look.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Attention {
    pub held: Vec<EventRow>,
    pub rejected: Vec<EventRow>,
    /// Merchant refunds declined, left processing with no live lease, stopped for a person, or
    /// pending longer than `pending_overdue` (each with its reason).
    pub refund_requests: Vec<RefundAttention>,
    /// Disputes not closed yet, closed won with their funds still withdrawn, or whose
    /// withdrawal took more than remained of the payment (each with its reason).
    pub disputes: Vec<DisputeAttention>,
    /// Genuine transmissions (PayPal's) that were delivered again with another body: a forgery
    /// refused with 401, or, if the forgery came first, a genuine event the gateway refused.
    pub reused_transmissions: Vec<ReusedTransmission>,
    /// Notifications not sent because their endpoint is, resolves to, or redirects to an
    /// address the gateway may not call (`address_not_allowed`).
    pub refused_addresses: Vec<NotificationView>,
}

/// The newest `limit` held and the newest `limit` rejected events, and the newest `limit`
/// refund requests and disputes to look at.
pub async fn gather(
    conn: &mut AsyncPgConnection,
    limit: i64,
    pending_overdue: std::time::Duration,
) -> QueryResult<Attention> {
    let mut by_outcome = async |outcome| {
        let filter = EventFilter {
            outcome: Some(outcome),
            ..EventFilter::default()
        };
        list(conn, &filter, None, limit)
            .await
            .map(|page| page.events)
    };
    let held = by_outcome(EventOutcome::Held).await?;
    let rejected = by_outcome(EventOutcome::Rejected).await?;
    let refund_requests = RefundAttention::newest(conn, limit, pending_overdue).await?;
    let disputes = DisputeAttention::newest(conn, limit).await?;
    let reused_transmissions = ReusedTransmission::newest(conn, limit).await?;
    let refused_addresses = notifications::admin::refused_addresses(conn, limit).await?;
    Ok(Attention {
        refused_addresses,
        held,
        rejected,
        refund_requests,
        disputes,
        reused_transmissions,
    })
}
