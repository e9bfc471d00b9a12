//! The audit log: one row per state-changing admin or console action, per console sign-in and
//! per month of history dropped, written with the action's own connection inside its
//! transaction, so there is no action without its row and no row for an action that rolled
//! back. The table is append-only for everyone who connects (migration 000052's triggers); rows
//! name the actor, never a secret.

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

use crate::schema::audit_log;

/// What was done; its text is the row's `action` (stable: filters and exports match on it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A console sign-in, succeeded or failed.
    SignIn,
    /// A stored event run through the callback path again.
    EventReplay,
    /// An operator's answer for a refund request the gateway stopped retrying.
    RefundRequestResolve,
    /// One notification sent again.
    NotificationRedeliver,
    /// A merchant's notifications of a time range sent again (one call of it).
    NotificationsRedeliverRange,
    EndpointEnable,
    EndpointDisable,
    OperatorAdd,
    OperatorRevoke,
    /// A merchant's notification endpoint created by API (by the merchant or an admin).
    EndpointCreate,
    /// Its URL, description or disabled state changed.
    EndpointUpdate,
    EndpointDelete,
    /// A new signing secret; the previous one signs beside it for the overlap.
    EndpointRotateSecret,
    /// A `ping` notification staged for it.
    EndpointTest,
    /// Every endpoint secret re-sealed under a new `[secrets] key`.
    SecretsRekey,
    /// A month of the event log dropped after its archive was read back (`history archive`, or
    /// the pass inside `serve`).
    HistoryDropPartition,
    /// A merchant API token minted (`token issue`): never the token, its merchant only.
    TokenIssue,
    /// One expiry pass run by hand (`cleanup`), with what it deleted.
    IdempotencyCleanup,
    /// A provider's settlement report settled (`settle`): the fees it booked and what it found.
    SettlementRun,
    /// A one-time link to a merchant's portal made (never the link).
    PortalLink,
    /// A portal link opened: a session started.
    PortalOpen,
}

impl Action {
    pub const ALL: [Action; 21] = [
        Action::SignIn,
        Action::EventReplay,
        Action::RefundRequestResolve,
        Action::NotificationRedeliver,
        Action::NotificationsRedeliverRange,
        Action::EndpointEnable,
        Action::EndpointDisable,
        Action::OperatorAdd,
        Action::OperatorRevoke,
        Action::EndpointCreate,
        Action::EndpointUpdate,
        Action::EndpointDelete,
        Action::EndpointRotateSecret,
        Action::EndpointTest,
        Action::SecretsRekey,
        Action::HistoryDropPartition,
        Action::TokenIssue,
        Action::IdempotencyCleanup,
        Action::SettlementRun,
        Action::PortalLink,
        Action::PortalOpen,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::SignIn => "console.sign_in",
            Action::EventReplay => "event.replay",
            Action::RefundRequestResolve => "refund_request.resolve",
            Action::NotificationRedeliver => "notification.redeliver",
            Action::NotificationsRedeliverRange => "notifications.redeliver_range",
            Action::EndpointEnable => "endpoint.enable",
            Action::EndpointDisable => "endpoint.disable",
            Action::OperatorAdd => "operator.add",
            Action::OperatorRevoke => "operator.revoke",
            Action::EndpointCreate => "webhook_endpoint.create",
            Action::EndpointUpdate => "webhook_endpoint.update",
            Action::EndpointDelete => "webhook_endpoint.delete",
            Action::EndpointRotateSecret => "webhook_endpoint.rotate_secret",
            Action::EndpointTest => "webhook_endpoint.test",
            Action::SecretsRekey => "secrets.rekey",
            Action::HistoryDropPartition => "history.drop_partition",
            Action::TokenIssue => "token.issue",
            Action::IdempotencyCleanup => "idempotency.cleanup",
            Action::SettlementRun => "settlement.run",
            Action::PortalLink => "portal.link",
            Action::PortalOpen => "portal.open",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Action::ALL.into_iter().find(|a| a.as_str() == text)
    }
}

/// Who acts, and in which request: what every row of an action carries.
#[derive(Debug, Clone)]
pub struct Context {
    /// An operator's name, `bootstrap`, `cli:<login>`, `merchant:<id>`, or `system:<job>` for
    /// the gateway's own scheduled work.
    pub actor: String,
    /// The operator's role, or `merchant` for a merchant acting with its API token.
    pub role: &'static str,
    /// The request's id, as its log lines carry it; `None` from the command line.
    pub request_id: Option<String>,
}

impl Context {
    /// A merchant acting on its own endpoints with its API token.
    pub fn merchant(merchant_id: i64, request_id: Option<String>) -> Self {
        Self {
            actor: format!("merchant:{merchant_id}"),
            role: MERCHANT_ROLE,
            request_id,
        }
    }
}

impl Context {
    /// The merchant `merchant_id` in its portal. A portal an operator opened for it (`by`, who
    /// asked for the link) names that person too: `merchant:<id> via <operator>`, so the trail
    /// tells a merchant's own change from one made for it.
    pub fn portal(merchant_id: i64, by: &str, request_id: Option<String>) -> Self {
        let merchant = format!("merchant:{merchant_id}");
        Self {
            actor: if by == merchant {
                merchant
            } else {
                format!("{merchant} via {by}")
            },
            role: MERCHANT_ROLE,
            request_id,
        }
    }
}

/// The role column of a merchant's own actions.
pub const MERCHANT_ROLE: &str = "merchant";

/// The role column of the gateway's own scheduled work: no person and no key acts.
pub const SYSTEM_ROLE: &str = "system";

impl Context {
    /// The gateway's own scheduled `job` inside `serve` (`system:history`).
    pub fn system(job: &str) -> Self {
        Self {
            actor: format!("system:{job}"),
            role: SYSTEM_ROLE,
            request_id: None,
        }
    }
}

/// One row, before it is written.
#[derive(Debug, Clone)]
pub struct Entry {
    pub action: Action,
    /// What it was done to: `notification:17`, `merchant:42`, `event:acme/evt_1`.
    pub target: Option<String>,
    /// How it ended: the state it left behind (`pending`, `failed`, `enabled`), or `failed` for
    /// a refused sign-in.
    pub outcome: String,
    /// What changed, as JSON; never a secret.
    pub changes: Value,
}

impl Entry {
    pub fn new(action: Action, target: impl Into<Option<String>>, outcome: &str) -> Self {
        Self {
            action,
            target: target.into(),
            outcome: outcome.into(),
            changes: Value::Object(Default::default()),
        }
    }

    pub fn with_changes(mut self, changes: Value) -> Self {
        self.changes = changes;
        self
    }
}

/// Writes `entry` for `context` on `conn`: inside the caller's transaction when it has one.
pub async fn record(
    conn: &mut AsyncPgConnection,
    context: &Context,
    entry: Entry,
) -> QueryResult<()> {
    diesel::insert_into(audit_log::table)
        .values((
            audit_log::actor.eq(&context.actor),
            audit_log::role.eq(context.role),
            audit_log::action.eq(entry.action.as_str()),
            audit_log::target.eq(entry.target),
            audit_log::request_id.eq(context.request_id.as_deref()),
            audit_log::outcome.eq(entry.outcome),
            audit_log::changes.eq(entry.changes),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// The actor and role of a refused sign-in's row: a key that opens nothing names nobody.
pub const NOBODY: &str = "unknown";
pub const NO_ROLE: &str = "none";

/// The row of a refused console sign-in (or of the count of those a minute left out).
pub async fn record_refused_sign_in(
    conn: &mut AsyncPgConnection,
    request_id: Option<&str>,
    changes: Value,
) -> QueryResult<()> {
    diesel::insert_into(audit_log::table)
        .values((
            audit_log::actor.eq(NOBODY),
            audit_log::role.eq(NO_ROLE),
            audit_log::action.eq(Action::SignIn.as_str()),
            audit_log::request_id.eq(request_id),
            audit_log::outcome.eq("failed"),
            audit_log::changes.eq(changes),
        ))
        .execute(conn)
        .await?;
    Ok(())
}

/// A row as `/admin/audit` and the console show it.
#[derive(Debug, Clone, Queryable, Selectable, serde::Serialize, utoipa::ToSchema)]
#[diesel(table_name = audit_log)]
pub struct AuditRow {
    pub id: i64,
    #[schema(value_type = String)]
    pub at: DateTime<Utc>,
    pub actor: String,
    pub role: String,
    pub action: String,
    pub target: Option<String>,
    pub request_id: Option<String>,
    pub outcome: String,
    #[schema(value_type = Object)]
    pub changes: Value,
}

/// What a page of the log shows.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub action: Option<Action>,
    /// At or after.
    pub since: Option<DateTime<Utc>>,
    /// Before.
    pub until: Option<DateTime<Utc>>,
    /// Rows older than this id (the previous page's cursor).
    pub before: Option<i64>,
}

/// A page of the log, newest first.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditRow>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

pub const MAX_LIMIT: i64 = 500;
pub const DEFAULT_LIMIT: i64 = 100;

/// Why a query of the log was refused (400 `invalid_query`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InvalidQuery(pub String);

/// The query string of the log (and of the console's page).
#[derive(Debug, Clone, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// The actor's name: an operator, `bootstrap`, `cli:<login>`, or `unknown` (refused
    /// sign-ins).
    pub actor: Option<String>,
    /// e.g. `event.replay`, `console.sign_in` (docs/access.md lists them).
    pub action: Option<String>,
    /// RFC 3339: at or after.
    pub since: Option<String>,
    /// RFC 3339: before.
    pub until: Option<String>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// 1..=500, default 100.
    pub limit: Option<String>,
}

fn present(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn time(name: &str, value: &Option<String>) -> Result<Option<DateTime<Utc>>, InvalidQuery> {
    present(value)
        .map(|v| {
            DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| InvalidQuery(format!("{name} must be an RFC 3339 time")))
        })
        .transpose()
}

impl AuditQuery {
    /// The filter the query names.
    pub fn filter(&self) -> Result<AuditFilter, InvalidQuery> {
        Ok(AuditFilter {
            actor: present(&self.actor).map(str::to_owned),
            action: present(&self.action)
                .map(|v| {
                    Action::parse(v).ok_or_else(|| {
                        InvalidQuery(format!("action {v:?} is not an audited action"))
                    })
                })
                .transpose()?,
            since: time("since", &self.since)?,
            until: time("until", &self.until)?,
            before: present(&self.cursor)
                .map(|v| {
                    v.parse::<i64>()
                        .ok()
                        .filter(|id| *id > 0)
                        .ok_or_else(|| InvalidQuery("unknown cursor".into()))
                })
                .transpose()?,
        })
    }

    /// The page size the query names, or the default.
    pub fn limit(&self) -> Result<i64, InvalidQuery> {
        present(&self.limit)
            .map(|v| {
                v.parse::<i64>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| InvalidQuery(format!("limit must be 1 to {MAX_LIMIT}")))
            })
            .transpose()
            .map(|limit| limit.unwrap_or(DEFAULT_LIMIT))
    }
}

/// Newest first by id; an actor or action filter reads its own index, the time window the
/// `at` index (or filters the id order it walks).
pub async fn page(
    conn: &mut AsyncPgConnection,
    filter: &AuditFilter,
    limit: i64,
) -> QueryResult<AuditPage> {
    let mut query = audit_log::table
        .select(AuditRow::as_select())
        .order(audit_log::id.desc())
        .limit(limit)
        .into_boxed();
    if let Some(actor) = &filter.actor {
        query = query.filter(audit_log::actor.eq(actor.clone()));
    }
    if let Some(action) = filter.action {
        query = query.filter(audit_log::action.eq(action.as_str()));
    }
    if let Some(since) = filter.since {
        query = query.filter(audit_log::at.ge(since));
    }
    if let Some(until) = filter.until {
        query = query.filter(audit_log::at.lt(until));
    }
    if let Some(before) = filter.before {
        query = query.filter(audit_log::id.lt(before));
    }
    let entries: Vec<AuditRow> = query.load(conn).await?;
    let next_cursor = (i64::try_from(entries.len()).ok() == Some(limit))
        .then(|| entries.last().map(|row| row.id.to_string()))
        .flatten();
    Ok(AuditPage {
        entries,
        next_cursor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_through_their_stored_text() {
        for action in Action::ALL {
            assert_eq!(Action::parse(action.as_str()), Some(action));
        }
        assert_eq!(Action::parse("event.delete"), None);
    }
}
