//! The read caches' background job inside `serve`: balance checkpoints (`ledger::checkpoint`)
//! and per-minute callback counts (`deliveries::minutes`), moved forward every interval by one
//! gateway at a time, elected by an advisory lock as the expiry cleaner is. Every read stays
//! exact without the job; it only gets slower as the part after the caches grows.

use std::time::Duration;

use diesel_async::AsyncPgConnection;

use crate::db;
use crate::deliveries::minutes;
use crate::ledger::checkpoint;

/// Arbitrary but fixed: the advisory lock that elects one gateway to move the caches.
pub const LOCK_KEY: i64 = 0x6367_775f_636b_7074; // "cgw_ckpt"

/// What one pass moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Moved {
    pub checkpoints: checkpoint::Pass,
    /// The delivery id the per-minute counts now cover, if they moved.
    pub minute_counts_at: Option<i64>,
}

/// One pass of both caches in the caller's connection.
pub async fn pass(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Moved> {
    Ok(Moved {
        checkpoints: checkpoint::pass(conn).await?,
        minute_counts_at: minutes::pass(conn).await?,
    })
}

/// A pass on a connection of its own if no other gateway holds the lock; `None` when another
/// instance moves the caches. The lock dies with the connection.
pub async fn run_exclusive_pass(database_url: &str) -> anyhow::Result<Option<Moved>> {
    let Some(mut conn) = db::connect_holding_lock(database_url, LOCK_KEY).await? else {
        return Ok(None);
    };
    Ok(Some(pass(&mut conn).await?))
}

/// How often a gateway that lost the election tries again: each try is a new connection, and
/// a slower takeover after the elected gateway stops only makes reads add a longer tail.
const ELECTION_RETRY: Duration = Duration::from_secs(30);

/// A pass every `interval`, forever. The elected gateway keeps its connection (and with it the
/// lock) between passes, so a short interval costs no new connection a pass; a failed pass
/// drops it, and the next tick runs the election again. The others try every
/// [`ELECTION_RETRY`] (or every interval, if that is longer).
pub async fn run_periodically(database_url: String, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut elected: Option<AsyncPgConnection> = None;
    let mut next_election = tokio::time::Instant::now();
    loop {
        ticker.tick().await;
        if elected.is_none() {
            if tokio::time::Instant::now() < next_election {
                continue;
            }
            next_election = tokio::time::Instant::now() + ELECTION_RETRY;
            match db::connect_holding_lock(&database_url, LOCK_KEY).await {
                Ok(conn) => elected = conn,
                Err(error) => {
                    tracing::warn!(error = %error, "read caches: no connection; will retry");
                    continue;
                }
            }
        }
        let Some(conn) = elected.as_mut() else {
            tracing::debug!("another gateway moves the read caches");
            continue;
        };
        match pass(conn).await {
            Ok(moved) => tracing::debug!(
                checkpoints_at = moved.checkpoints.finished_at,
                merchants = moved.checkpoints.merchants,
                minute_counts_at = moved.minute_counts_at,
                "read caches moved"
            ),
            Err(error) => {
                tracing::warn!(error = %error, "read caches pass failed; will retry");
                elected = None;
                next_election = tokio::time::Instant::now();
            }
        }
    }
}
