//! What admins see of notifications and what they may do: list them, send one or a merchant's
//! time range again (same `webhook-id`, same body), and enable a disabled endpoint.

use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;

use super::body::{as_json, webhook_id};
use super::model::{self, Endpoint, Notification, NotificationStatus, StatusFilter};
use crate::access::audit::{self, Action, Entry};

/// A notification as `/admin/notifications` shows it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct NotificationView {
    pub id: i64,
    /// The `webhook-id` of every attempt.
    pub webhook_id: String,
    pub merchant_id: i64,
    /// The endpoint it goes to: `file` (the configuration file's) or an endpoint's id.
    pub endpoint_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub order_id: Option<i64>,
    /// pending, delivered or failed
    pub status: String,
    /// Attempts so far (a redelivery starts again from 0).
    pub attempts: i32,
    #[schema(value_type = String)]
    pub created_at: DateTime<Utc>,
    /// When the next attempt is due (pending only).
    #[schema(value_type = Option<String>)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    #[schema(value_type = Option<String>)]
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// The last attempt's HTTP status, if it got one.
    pub last_status: Option<i32>,
    /// Why the last attempt failed, while it is not delivered.
    pub last_error: Option<String>,
    #[schema(value_type = Option<String>)]
    pub delivered_at: Option<DateTime<Utc>>,
    /// The body every attempt sends.
    #[schema(value_type = Object)]
    pub payload: serde_json::Value,
}

impl From<&Notification> for NotificationView {
    fn from(n: &Notification) -> Self {
        let pending = n.status == NotificationStatus::Pending.as_str();
        Self {
            id: n.id,
            webhook_id: webhook_id(n.id),
            merchant_id: n.merchant_id,
            endpoint_id: n.endpoint_id.clone(),
            kind: n.kind.clone(),
            order_id: n.order_id,
            status: n.status.clone(),
            attempts: n.attempts,
            created_at: n.created_at,
            next_attempt_at: pending.then_some(n.next_attempt_at),
            last_attempt_at: n.last_attempt_at,
            last_status: n.last_status,
            last_error: n.last_error.clone(),
            delivered_at: n.delivered_at,
            payload: as_json(n),
        }
    }
}

impl NotificationView {
    /// As the merchant itself may see it: an endpoint whose name resolves only to addresses the
    /// gateway refuses reads as one that does not answer at all, so a merchant cannot probe
    /// which names exist inside the network from its notifications (operators see the reason).
    pub fn as_merchant_sees_it(mut self) -> Self {
        self.last_error = self.last_error.map(|e| Self::error_as_merchant_sees_it(&e));
        self
    }

    /// An attempt's error as the merchant may see it (see [`Self::as_merchant_sees_it`]).
    pub fn error_as_merchant_sees_it(error: &str) -> String {
        if error == crate::outbound::ADDRESS_NOT_ALLOWED {
            super::schedule::CONNECTION_FAILED.to_owned()
        } else {
            error.to_owned()
        }
    }
}

impl NotificationPage {
    /// The page as the merchant whose notifications these are may see it.
    pub fn as_merchant_sees_it(self) -> Self {
        Self {
            notifications: self
                .notifications
                .into_iter()
                .map(NotificationView::as_merchant_sees_it)
                .collect(),
            next_cursor: self.next_cursor,
        }
    }
}

/// A page of the list, newest first.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct NotificationPage {
    pub notifications: Vec<NotificationView>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// What the list shows.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListFilter {
    pub merchant_id: Option<i64>,
    pub status: Option<StatusFilter>,
    /// Below this id (the previous page's cursor).
    pub before: Option<i64>,
}

pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: ListFilter,
    limit: i64,
) -> diesel::QueryResult<NotificationPage> {
    let rows = model::list(
        conn,
        filter.merchant_id,
        filter.status,
        filter.before,
        limit,
    )
    .await?;
    let next_cursor = (i64::try_from(rows.len()).ok() == Some(limit))
        .then(|| rows.last().map(|n| n.id.to_string()))
        .flatten();
    Ok(NotificationPage {
        notifications: rows.iter().map(NotificationView::from).collect(),
        next_cursor,
    })
}

/// Sends notification `id` again now; `None` when there is no such notification (or, with
/// `merchant_id`, when it is another merchant's). The audit row commits with the change.
pub async fn redeliver(
    conn: &mut AsyncPgConnection,
    id: i64,
    merchant_id: Option<i64>,
    audit: &audit::Context,
) -> diesel::QueryResult<Option<NotificationView>> {
    conn.transaction(async |conn| {
        let Some(view) = model::redeliver(conn, id, merchant_id)
            .await?
            .as_ref()
            .map(NotificationView::from)
        else {
            return Ok(None);
        };
        let entry = Entry::new(
            Action::NotificationRedeliver,
            Some(format!("notification:{id}")),
            &view.status,
        )
        .with_changes(json!({
            "webhook_id": view.webhook_id,
            "merchant_id": view.merchant_id,
        }));
        audit::record(conn, audit, entry).await?;
        Ok(Some(view))
    })
    .await
}

/// What one call of a merchant's redelivery did.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Redelivered {
    pub merchant_id: i64,
    /// Notifications of the range this call made pending and due (at most its `limit`).
    pub redelivered: usize,
    /// More of the range remain: pass this as `cursor` (with the same window) for the next
    /// part; absent when the range is done.
    pub next_cursor: Option<String>,
}

/// Most rows one redelivery call sends again, and its default.
pub const REDELIVER_MAX_LIMIT: i64 = 10_000;
pub const REDELIVER_DEFAULT_LIMIT: i64 = 1_000;

/// One part of a range redelivery: at most `limit` rows after `cursor` (`None`: the start).
pub async fn redeliver_range(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    window: (DateTime<Utc>, DateTime<Utc>),
    cursor: Option<i64>,
    limit: i64,
    audit: &audit::Context,
) -> diesel::QueryResult<Redelivered> {
    let (since, until) = window;
    conn.transaction(async |conn| {
        let part =
            model::redeliver_range(conn, merchant_id, since, until, cursor.unwrap_or(0), limit)
                .await?;
        let done = Redelivered {
            merchant_id,
            redelivered: part.redelivered,
            next_cursor: part.next_after.map(|id| id.to_string()),
        };
        let entry = Entry::new(
            Action::NotificationsRedeliverRange,
            Some(format!("merchant:{merchant_id}")),
            "pending",
        )
        .with_changes(json!({
            "since": since,
            "until": until,
            "cursor": cursor,
            "limit": limit,
            "redelivered": done.redelivered,
            "next_cursor": done.next_cursor,
        }));
        audit::record(conn, audit, entry).await?;
        Ok(done)
    })
    .await
}

/// A merchant's endpoints after they were enabled.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Enabled {
    pub merchant_id: i64,
    /// Their pending notifications, coming due from now at the release rate, in order.
    pub pending: i64,
    /// What the senders know of each (none listed that no sender ever tried nor anyone
    /// disabled).
    pub endpoints: Vec<Endpoint>,
}

/// Whether `merchant_id` has an endpoint disabled in the database: an operator's disable outlives
/// the endpoint it stopped (its merchant cannot make a new one until an operator enables it),
/// so it can be enabled though no gateway has an endpoint of the merchant now.
pub async fn has_disabled_endpoint(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
) -> diesel::QueryResult<bool> {
    Ok(model::endpoints_of(conn, merchant_id)
        .await?
        .iter()
        .any(|e| e.disabled_at.is_some()))
}

/// Enables every endpoint of `merchant_id`; the audit row commits with it.
pub async fn enable(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    release_per_sec: u64,
    audit: &audit::Context,
) -> diesel::QueryResult<Enabled> {
    conn.transaction(async |conn| {
        let was_disabled = has_disabled_endpoint(conn, merchant_id).await?;
        let pending =
            model::enable(conn, merchant_id, model::Endpoints::All, release_per_sec).await?;
        let entry = Entry::new(
            Action::EndpointEnable,
            Some(format!("merchant:{merchant_id}")),
            "enabled",
        )
        .with_changes(json!({"was_disabled": was_disabled, "pending": pending}));
        audit::record(conn, audit, entry).await?;
        Ok(Enabled {
            merchant_id,
            pending,
            endpoints: model::endpoints_of(conn, merchant_id).await?,
        })
    })
    .await
}

/// A merchant's endpoints after an operator disabled them.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Disabled {
    pub merchant_id: i64,
    /// Their pending notifications, kept (up to `[notifications] disabled_keep` each) until
    /// they are enabled again.
    pub pending: i64,
    pub endpoints: Vec<Endpoint>,
}

/// Disables every endpoint of `merchant_id`, its file endpoint and each made by API (no sender
/// attempts them until they are enabled); the audit row commits with it. An endpoint disabled
/// already keeps its first reason and time.
pub async fn disable(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    audit: &audit::Context,
) -> diesel::QueryResult<Disabled> {
    conn.transaction(async |conn| {
        // Every endpoint: one made concurrently is either seen here or refused its creation.
        super::endpoints::lock_merchant(conn, merchant_id).await?;
        let (was_disabled, pending) = model::disable(
            conn,
            merchant_id,
            model::Endpoints::All,
            model::DISABLED_BY_OPERATOR,
        )
        .await?;
        let entry = Entry::new(
            Action::EndpointDisable,
            Some(format!("merchant:{merchant_id}")),
            "disabled",
        )
        .with_changes(json!({"was_disabled": was_disabled, "pending": pending}));
        audit::record(conn, audit, entry).await?;
        Ok(Disabled {
            merchant_id,
            pending,
            endpoints: model::endpoints_of(conn, merchant_id).await?,
        })
    })
    .await
}

/// What the console lists: failing and failed notifications (newest first), and the disabled
/// endpoints.
pub struct Attention {
    pub failing: Vec<NotificationView>,
    pub failed: Vec<NotificationView>,
    pub disabled: Vec<Endpoint>,
}

pub async fn attention(conn: &mut AsyncPgConnection, limit: i64) -> diesel::QueryResult<Attention> {
    let views = |rows: Vec<Notification>| rows.iter().map(NotificationView::from).collect();
    Ok(Attention {
        failing: views(model::list(conn, None, Some(StatusFilter::Failing), None, limit).await?),
        failed: views(model::list(conn, None, Some(StatusFilter::Failed), None, limit).await?),
        disabled: model::disabled_endpoints(conn).await?,
    })
}

/// The newest `limit` notifications whose last attempt was refused because their endpoint is,
/// resolves to, or redirects to an address the gateway may not call: someone must fix the
/// endpoint (or name its host in `[notifications] allow_hosts`). Read from the attention index.
pub async fn refused_addresses(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Vec<NotificationView>> {
    let rows = model::refused_addresses(conn, limit).await?;
    Ok(rows.iter().map(NotificationView::from).collect())
}
