//! Merchant notifications: every change of a merchant's order (`order.<status>`), every held
//! payment (`payment.held`) and every end of a merchant refund request
//! (`refund_request.succeeded` / `.failed`) reaches the merchant's endpoint, signed as
//! Standard Webhooks, at least once. The routine that makes the change stages its notification
//! in the same transaction ([`model`], migration 000040), so none is lost and none is sent for
//! a change that did not commit; the [`sender`] inside `serve` delivers them on the contract's
//! [`schedule`], the [`body`] rendered from the staged row so every attempt sends the same
//! bytes. docs/notifications.md tells the whole story.

pub mod admin;
pub mod body;
pub mod model;
pub mod retention;
pub mod schedule;
pub mod sender;

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::Notify;

use crate::config::merchants::MerchantSettings;

/// Wakes this process's sender after a commit that staged a notification, so it need not wait
/// for its next poll. In-process only: the database's NOTIFY would take a database-wide lock at
/// every such commit; a sender of another gateway finds the row at its next poll.
#[derive(Clone, Default)]
pub struct Wake(Arc<Notify>);

impl Wake {
    pub fn wake(&self) {
        self.0.notify_one();
    }

    /// Returns after the next [`Wake::wake`] (or at once if one came since the last call).
    pub async fn woken(&self) {
        self.0.notified().await;
    }
}

/// Which merchants have an endpoint, for the writes that stage their notifications, and the
/// sender to wake once they commit.
#[derive(Clone, Default)]
pub struct Notifying {
    merchants: Arc<HashSet<i64>>,
    wake: Wake,
}

impl Notifying {
    pub fn new(merchants: &[MerchantSettings], wake: Wake) -> Self {
        Self {
            merchants: Arc::new(
                MerchantSettings::endpoints(merchants)
                    .map(|(id, _)| id)
                    .collect(),
            ),
            wake,
        }
    }

    /// Whether `merchant_id`'s changes stage notifications.
    pub fn wants(&self, merchant_id: i64) -> bool {
        self.merchants.contains(&merchant_id)
    }

    /// After a commit that may have staged a notification for `merchant_id`.
    pub fn committed(&self, merchant_id: i64) {
        if self.wants(merchant_id) {
            self.wake.wake();
        }
    }

    pub fn wake_handle(&self) -> &Wake {
        &self.wake
    }
}
