//! The pool's type and the limits each of its connections runs under ([`super::build_pool`]
//! builds one): what the code that only holds a pool needs to know.

use std::time::Duration;

use diesel_async::AsyncPgConnection;
use diesel_async::pooled_connection::AsyncDieselConnectionManager;

pub type PgPool = bb8::Pool<AsyncDieselConnectionManager<AsyncPgConnection>>;

/// Limits applied to every pooled connection when it is opened.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// Bounds every lock wait, in particular a duplicate waiting on the unique index for the
    /// first request of its key (the acquire timeout).
    pub lock_timeout: Duration,
    /// Bounds every statement.
    pub statement_timeout: Duration,
    /// Plans every statement for its own values (`plan_cache_mode = force_custom_plan`). The
    /// API pool's event-log reads need it: after five runs of a prepared statement PostgreSQL
    /// may keep a generic plan, and the generic plan of "this event id, newest first, limit
    /// $n" walks the whole history backwards by time (measured: 57 ms at 109,000 events and
    /// growing, against 0.2 ms planned for the value). The callback pool keeps generic plans:
    /// its statements are the same few, and planning them each time costs CPU per event.
    pub custom_plans: bool,
}

impl SessionLimits {
    /// The statements each pooled connection runs once when it opens.
    pub fn sql(self) -> String {
        // A transaction left idle (a handler that stalls mid-transaction) is ended by the
        // server too, so it cannot hold its locks forever.
        let idle = self.statement_timeout.saturating_mul(2);
        format!(
            "SET lock_timeout = {}; SET statement_timeout = {}; SET idle_in_transaction_session_timeout = {};{}",
            self.lock_timeout.as_millis().max(1),
            self.statement_timeout.as_millis().max(1),
            idle.as_millis().max(1),
            if self.custom_plans {
                " SET plan_cache_mode = force_custom_plan;"
            } else {
                ""
            },
        )
    }
}
