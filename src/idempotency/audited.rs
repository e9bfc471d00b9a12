//! An idempotent operation that a person started: its audit row is written inside the
//! operation's own transaction, after the work and before the response is stored, so the
//! action and its row commit or roll back together.

use diesel_async::AsyncPgConnection;
use futures_util::future::BoxFuture;

use super::IdempotentWork;
use super::error::IdempotencyError;
use crate::access::audit::{self, Entry};

/// `work`, with the audit row `entry` makes of its output.
pub struct Audited<'a, W, F> {
    work: &'a W,
    context: &'a audit::Context,
    entry: F,
}

impl<'a, W, F> Audited<'a, W, F>
where
    W: IdempotentWork,
    F: Fn(&W::Output) -> Entry + Sync,
{
    pub fn new(work: &'a W, context: &'a audit::Context, entry: F) -> Self {
        Self {
            work,
            context,
            entry,
        }
    }
}

impl<W, F> IdempotentWork for Audited<'_, W, F>
where
    W: IdempotentWork,
    F: Fn(&W::Output) -> Entry + Sync,
{
    type Output = W::Output;

    fn run<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, Result<Self::Output, IdempotencyError>> {
        Box::pin(async move {
            let output = self.work.run(conn).await?;
            audit::record(conn, self.context, (self.entry)(&output)).await?;
            Ok(output)
        })
    }

    // No one-statement shortcut: it commits on its own, so the row could not join it. The
    // general path gives the same guarantees.
}
