//! What the app gives every route besides [`AppState`](super::state::AppState): the pools and
//! the admin token that the extractors read, the request's id, and the roles a route may need,
//! as types. The console's session extractor and [`super::extract`]'s bearer extractors both
//! stand on it.

use actix_web::{HttpMessage, HttpRequest};
use tracing_actix_web::RequestId;

use crate::access::role::Role;
use crate::db::pool::PgPool;
use crate::limits::Limits;
use crate::secret::Secret;

/// This worker's pool for merchants' API, admin and readiness: their traffic, whoever sends
/// it, can never make a provider callback wait for a connection.
#[derive(Clone)]
pub struct ApiPool(pub PgPool);

impl std::ops::Deref for ApiPool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.0
    }
}

/// This worker's pool for the read-only work: the console, the event log API and its export,
/// and balances. It reads from `[database] replica_url` when one is set (a standby: its data
/// lags the primary by the replication delay), otherwise it is the API pool. A route that
/// only reads and may show slightly old data takes this one; callbacks, orders and refunds
/// never do.
#[derive(Clone)]
pub struct ReadPool(pub PgPool);

impl std::ops::Deref for ReadPool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.0
    }
}

/// The configured admin token (the break-glass `bootstrap` actor), as the bearer and console
/// extractors compare it.
pub struct AdminToken(pub Option<Secret>);

/// The least role a route needs, as a type: a handler that takes `Staff<Finance>` runs only
/// for a key whose role includes finance. The route's OpenAPI entry names the same role, and
/// the role table test holds the two together.
pub trait Needs {
    const ROLE: Role;
}

/// Events, event detail, attention, balances, notifications, idempotency records.
pub struct Viewer;
/// + the export and replays of stored events.
pub struct Finance;
/// + redelivery, refund-request resolution, endpoint enable and disable.
pub struct Operator;
/// + the audit log, operators and merchants' endpoints.
pub struct Admin;

impl Needs for Viewer {
    const ROLE: Role = Role::Viewer;
}
impl Needs for Finance {
    const ROLE: Role = Role::Finance;
}
impl Needs for Operator {
    const ROLE: Role = Role::Operator;
}
impl Needs for Admin {
    const ROLE: Role = Role::Admin;
}

/// The request's id, as its log lines carry it.
pub fn request_id(request: &HttpRequest) -> Option<String> {
    request
        .extensions()
        .get::<RequestId>()
        .map(ToString::to_string)
}

/// The request's source address as the abuse limits key it (crate::limits): its peer, or
/// behind trusted proxies the address they saw.
pub fn source_address(request: &HttpRequest, limits: &Limits) -> Option<std::net::IpAddr> {
    let forwarded: Vec<&str> = request
        .headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .collect();
    limits.source(request.peer_addr().map(|a| a.ip()), &forwarded)
}
