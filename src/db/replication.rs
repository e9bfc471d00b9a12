//! The replay barrier: proof that a stored answer is on the synchronous standby before it is
//! sent again. A first answer is sent only after its own commit was confirmed, but a record
//! can also become visible without the standby: when a backend's wait for the standby is
//! cancelled or terminated (an operator, a shutdown), PostgreSQL commits locally. The
//! provider's next retry would find that record and get a byte-identical 2xx, although the
//! event is on one node only. So a replay waits for a barrier round: one tiny committing
//! statement, begun after the replay read its record, whose commit the standby confirmed.
//! WAL is one sequence, so the standby then has everything that was visible at the read.
//! Rounds are shared by every replay waiting at the time; without synchronous replication
//! (`synchronous_standby_names` empty) there is no standby to wait for, and replays do not wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use diesel::ConnectionError;
use diesel::sql_types::Bool;
use diesel_async::AsyncPgConnection;
use futures_util::future::BoxFuture;
use tokio::sync::{Mutex, Notify, watch};

use super::unconfirmed::ReplayUnconfirmed;
use super::watch::{commit_confirmed, mark_commit};

use crate::db::one_row::CommittedResult;

/// How long one round may wait before its connection is given up and a new one opened (a
/// socket to a node that vanished can stay silent far longer).
const ROUND_LIMIT: Duration = Duration::from_secs(30);
/// How often the task looks whether synchronous replication is configured, rounds or not.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The barrier's statement: a transactional WAL record (it takes a transaction id, so the
/// commit waits for the synchronous standby like any write, and touches no table) and
/// whether replays need to wait at all.
const ROUND_SQL: &str = "SELECT pg_logical_emit_message(true, 'callback-gateway', 'replay barrier') IS NOT NULL AS emitted, \
     current_setting('synchronous_standby_names') <> '' \
     AND current_setting('synchronous_commit') NOT IN ('off', 'local') AS synchronous";
const CHECK_SQL: &str = "SELECT true AS emitted, current_setting('synchronous_standby_names') <> '' \
     AND current_setting('synchronous_commit') NOT IN ('off', 'local') AS synchronous";

#[derive(diesel::QueryableByName)]
struct RoundRow {
    #[diesel(sql_type = Bool)]
    #[allow(dead_code)]
    emitted: bool,
    #[diesel(sql_type = Bool)]
    synchronous: bool,
}

#[derive(Default)]
struct Rounds {
    /// The number of the next round to begin.
    next: u64,
    /// The highest round a waiter waits for.
    wanted: u64,
}

struct Shared {
    rounds: Mutex<Rounds>,
    wake: Notify,
    confirmed: watch::Sender<u64>,
    /// Synchronous replication was configured at the last look (true until the first).
    synchronous: AtomicBool,
}

/// Opens the barrier's connection: a watched one to the primary ([`super::watch`] tells
/// whether its rounds were confirmed). Given by the caller, so the barrier does not depend
/// on how connections are opened.
pub type Connect =
    Box<dyn Fn() -> BoxFuture<'static, Result<AsyncPgConnection, ConnectionError>> + Send>;

/// The process's replay barrier (one task and one connection, shared by every worker).
#[derive(Clone)]
pub struct Replication {
    shared: Arc<Shared>,
    /// How long a commit, or a replay's barrier, may wait for the standby.
    commit_timeout: Duration,
}

impl Replication {
    /// Starts the barrier's task on the current runtime.
    pub fn spawn(connect: Connect, commit_timeout: Duration) -> Self {
        let (confirmed, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            rounds: Mutex::new(Rounds { next: 1, wanted: 0 }),
            wake: Notify::new(),
            confirmed,
            synchronous: AtomicBool::new(true),
        });
        tokio::spawn(run_rounds(connect, shared.clone()));
        Self {
            shared,
            commit_timeout,
        }
    }

    /// The bound of a commit's (or a barrier's) wait for the standby.
    pub fn commit_timeout(&self) -> Duration {
        self.commit_timeout
    }

    /// [`Self::confirm_visible`] within the commit bound.
    pub async fn confirm_replay(&self) -> Result<(), ReplayUnconfirmed> {
        self.confirm_visible(self.commit_timeout).await
    }

    /// Waits until every commit visible now is confirmed by the synchronous standby (at once
    /// without synchronous replication); `ReplayUnconfirmed` after `bound`.
    pub async fn confirm_visible(&self, bound: Duration) -> Result<(), ReplayUnconfirmed> {
        if !AtomicBool::load(&self.shared.synchronous, Ordering::Acquire) {
            return Ok(());
        }
        let mut confirmed = self.shared.confirmed.subscribe();
        let ticket = {
            let mut rounds = self.shared.rounds.lock().await;
            rounds.wanted = rounds.wanted.max(rounds.next);
            rounds.next
        };
        self.shared.wake.notify_one();
        match tokio::time::timeout(bound, confirmed.wait_for(|done| *done >= ticket)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ReplayUnconfirmed(bound)),
        }
    }
}

async fn run_rounds(connect: Connect, shared: Arc<Shared>) {
    let mut conn: Option<AsyncPgConnection> = None;
    loop {
        // A round when a waiter wants one, otherwise a look at the settings every second.
        let wanted = {
            let rounds = shared.rounds.lock().await;
            rounds.wanted >= rounds.next
        };
        if !wanted {
            let _ = tokio::time::timeout(CHECK_EVERY, shared.wake.notified()).await;
        }
        let round = {
            let mut rounds = shared.rounds.lock().await;
            if rounds.wanted >= rounds.next {
                let round = rounds.next;
                rounds.next += 1;
                Some(round)
            } else {
                None
            }
        };
        let connection = match conn.as_mut() {
            Some(connection) => connection,
            None => match connect().await {
                Ok(connection) => conn.insert(connection),
                Err(error) => {
                    tracing::warn!(%error, "replay barrier: cannot connect; will retry");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let sql = if round.is_some() {
            ROUND_SQL
        } else {
            CHECK_SQL
        };
        let mark = mark_commit(connection);
        let answer = tokio::time::timeout(
            ROUND_LIMIT,
            diesel::sql_query(sql).committed_result::<RoundRow>(connection),
        )
        .await;
        match answer {
            Ok(Ok(row)) if commit_confirmed(connection, mark) => {
                shared.synchronous.store(row.synchronous, Ordering::Release);
                if let Some(round) = round {
                    shared
                        .confirmed
                        .send_modify(|done| *done = (*done).max(round));
                }
            }
            Ok(Ok(_)) => {
                tracing::warn!(
                    "replay barrier: the round's wait for the standby was abandoned; another round follows"
                );
                conn = None;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "replay barrier: round failed; reconnecting");
                conn = None;
            }
            Err(_) => {
                tracing::warn!(limit = ?ROUND_LIMIT, "replay barrier: no confirmation; reconnecting");
                conn = None;
            }
        }
        if round.is_some() && conn.is_none() {
            // The waiters still wait: the next round, on a new connection, serves them.
            let mut rounds = shared.rounds.lock().await;
            rounds.wanted = rounds.wanted.max(rounds.next);
        }
    }
}
