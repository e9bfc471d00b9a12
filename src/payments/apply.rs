//! Applying an [`Effect`] on the general path: `payment_apply` (migrations 000007, 000032, 000050) runs
//! the guarded writes in a subtransaction and says what it found, as a typed result.

use diesel::QueryResult;
use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::pg::{Pg, PgValue};
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bool, Nullable, SqlType, Text};
use diesel_async::AsyncPgConnection;

use super::effect::Effect;

use crate::db::one_row::CommittedResult;

/// The database type `payment_apply_result`.
#[derive(Debug, Clone, Copy, SqlType, QueryId)]
#[diesel(postgres_type(name = "payment_apply_result"))]
pub struct PaymentApplyResultSql;

/// What applying an effect found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Every write held its guard; the transfer id when one was posted.
    Done(Option<i64>),
    /// A row was not in the state the plan was made for; nothing was written.
    StateChanged,
    /// This event, or its refund or dispute id, was posted before; nothing was written.
    AlreadyPosted,
}

/// `payment_apply_result` without its transfer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromSqlRow)]
pub enum ApplyResult {
    Applied,
    StateChanged,
    AlreadyPosted,
}

impl FromSql<PaymentApplyResultSql, Pg> for ApplyResult {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        match value.as_bytes() {
            b"applied" => Ok(ApplyResult::Applied),
            b"state_changed" => Ok(ApplyResult::StateChanged),
            b"already_posted" => Ok(ApplyResult::AlreadyPosted),
            other => Err(format!(
                "unknown payment_apply_result {:?}",
                String::from_utf8_lossy(other)
            )
            .into()),
        }
    }
}

/// Applies `effect` inside the caller's transaction.
pub async fn apply(conn: &mut AsyncPgConnection, effect: &Effect) -> QueryResult<Applied> {
    let (result, transfer_id): (ApplyResult, Option<i64>) =
        PaymentApply(effect).committed_result(conn).await?;
    Ok(match result {
        ApplyResult::Applied => Applied::Done(transfer_id),
        ApplyResult::StateChanged => Applied::StateChanged,
        ApplyResult::AlreadyPosted => Applied::AlreadyPosted,
    })
}

/// `SELECT result, transfer_id FROM payment_apply(..)`, prepared once per connection.
struct PaymentApply<'a>(&'a Effect);

impl QueryId for PaymentApply<'_> {
    type QueryId = PaymentApply<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for PaymentApply<'_> {
    type SqlType = (PaymentApplyResultSql, Nullable<BigInt>);
}

impl QueryFragment<Pg> for PaymentApply<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql("SELECT result, transfer_id FROM payment_apply(");
        self.0.walk_general_params(&mut out)?;
        out.push_sql(", ");
        out.push_bind_param::<Bool, _>(&self.0.notify)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.0.reason)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&self.0.dispute.reinstated_by)?;
        out.push_sql(", ");
        out.push_bind_param::<Bool, _>(&self.0.disputes_exceeded)?;
        out.push_sql(")");
        Ok(())
    }
}
