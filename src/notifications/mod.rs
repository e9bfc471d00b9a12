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
pub mod directory;
pub mod endpoints;
pub mod model;
pub mod retention;
pub mod schedule;
pub mod sender;
pub mod watch;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::config::merchants::MerchantSettings;
use directory::Directory;

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
#[derive(Clone)]
pub struct Notifying {
    directory: Arc<Directory>,
    wake: Wake,
    /// Wakes this gateway's endpoint watcher after a change made here, so this gateway sees it
    /// at once (the others within a second).
    endpoints_changed: Arc<Notify>,
}

impl Notifying {
    /// The configuration file's endpoints alone (the commands and tests that stage nothing
    /// for endpoints made by API).
    pub fn new(merchants: &[MerchantSettings], wake: Wake) -> Self {
        Self::of(Arc::new(Directory::new(merchants)), wake)
    }

    /// Over `directory`, which `directory::watch` keeps in step with the database.
    pub fn of(directory: Arc<Directory>, wake: Wake) -> Self {
        Self {
            directory,
            wake,
            endpoints_changed: Arc::default(),
        }
    }

    /// Whether `merchant_id`'s changes stage notifications: it has an endpoint now.
    pub fn wants(&self, merchant_id: i64) -> bool {
        self.directory.wants(merchant_id)
    }

    /// Whether this gateway knows which merchants have an endpoint yet (its first read of the
    /// endpoints made by API is done): nothing that stages a notification runs before.
    pub fn loaded(&self) -> bool {
        self.directory.loaded()
    }

    /// Returns once the first read of the endpoints is done.
    pub async fn until_loaded(&self) {
        self.directory.until_loaded().await;
    }

    /// The merchant that `text` (a path segment) names, if this gateway has its endpoint:
    /// nothing here could send to another.
    pub fn merchant(&self, text: &str) -> Option<i64> {
        text.parse::<i64>().ok().filter(|id| self.wants(*id))
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

    pub fn directory(&self) -> &Arc<Directory> {
        &self.directory
    }

    /// After this gateway changed an endpoint: its watcher reloads now.
    pub fn endpoints_changed(&self) {
        self.endpoints_changed.notify_one();
    }

    /// What the watcher waits on besides its clock.
    pub fn endpoints_changed_handle(&self) -> Arc<Notify> {
        self.endpoints_changed.clone()
    }
}
