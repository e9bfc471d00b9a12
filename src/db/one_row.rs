//! One row of a query, read to the end of the server's answer.

use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::FutureExt;

/// The one row of a query, read to the end of the server's answer: every query of the crate
/// that wants one row runs this instead of diesel-async's `get_result` (clippy.toml forbids
/// that one).
///
/// Outside an explicit transaction a statement commits only after its rows are sent (at the
/// protocol's Sync), and that commit can still fail: a deferred constraint, a backend
/// terminated in between. `get_result` stops at the first row, so such a failure went unseen
/// and the statement was answered as done; `load` reads on to the commit's outcome
/// (`commit_before_ack::a_capture_whose_commit_fails_after_its_row_is_never_acknowledged`).
/// Inside a transaction it costs nothing more: the rest of the answer is read either way.
pub trait CommittedResult: Sized {
    fn committed_result<'query, 'conn, U>(
        self,
        conn: &'conn mut AsyncPgConnection,
    ) -> OneRow<'conn, 'query, Self, U>
    where
        U: Send,
        Self: diesel_async::methods::LoadQuery<'query, AsyncPgConnection, U> + 'query;
}

/// The future of [`CommittedResult::committed_result`].
pub type OneRow<'conn, 'query, Q, U> = futures_util::future::Map<
    diesel_async::return_futures::LoadFuture<'conn, 'query, Q, AsyncPgConnection, U>,
    fn(diesel::QueryResult<Vec<U>>) -> diesel::QueryResult<U>,
>;

impl<Q> CommittedResult for Q {
    fn committed_result<'query, 'conn, U>(
        self,
        conn: &'conn mut AsyncPgConnection,
    ) -> OneRow<'conn, 'query, Self, U>
    where
        U: Send,
        Self: diesel_async::methods::LoadQuery<'query, AsyncPgConnection, U> + 'query,
    {
        RunQueryDsl::load(self, conn).map(first_row::<U> as fn(_) -> _)
    }
}

fn first_row<U>(rows: diesel::QueryResult<Vec<U>>) -> diesel::QueryResult<U> {
    rows?
        .into_iter()
        .next()
        .ok_or(diesel::result::Error::NotFound)
}
