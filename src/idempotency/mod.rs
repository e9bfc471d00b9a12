//! The idempotency engine. A key is not a dedup switch: a replay returns the previous
//! response exactly, failures included. One transaction claims the key, runs the operation,
//! and stores its response; a transient failure rolls all of it back and leaves no record.

pub mod audited;
pub mod cleanup;
pub mod error;
pub mod key;
pub mod lease;
pub mod record;
pub mod transmission;

use diesel_async::AsyncPgConnection;
use futures_util::future::BoxFuture;
use tracing::Instrument;

use crate::db::commit::confirmed_transaction;
use crate::db::pool::PgPool;
use crate::db::replication::Replication;
use crate::trace_switch::TRACE;

use error::IdempotencyError;
use record::{
    Acquired, Claim, Completion, Fingerprint, IdempotentRequest, OneStatement, RecordStatus,
    StoredResponse, acquire, finish, lookup,
};

// The paths tests/ and the replay client use.
pub use key::{IdempotencyKey, MAX_KEY_LEN};

/// The header that marks a replayed response; the replay client reads it too.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// What to do with a request, given what acquiring its key found.
#[derive(Debug)]
pub enum Decision {
    First(Claim),
    Replay(StoredResponse),
    InFlight,
    Mismatch,
}

impl Decision {
    /// The seed's rules: a record still processing is in flight; another body under the same
    /// key is a mismatch; otherwise the stored response is replayed as it was.
    pub fn from_acquired(acquired: Acquired, fingerprint: &Fingerprint) -> Self {
        match acquired {
            Acquired::First(claim) => Decision::First(claim),
            Acquired::InFlight => Decision::InFlight,
            Acquired::Existing {
                status: RecordStatus::Processing,
                ..
            }
            | Acquired::Existing { response: None, .. } => Decision::InFlight,
            Acquired::Existing { request_hash, .. } if request_hash != fingerprint.as_str() => {
                Decision::Mismatch
            }
            Acquired::Existing {
                response: Some(response),
                ..
            } => Decision::Replay(response),
        }
    }
}

/// How a request was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Executed<O> {
    /// The operation ran now: its stored response, and what it did.
    First { response: StoredResponse, output: O },
    /// An earlier request's stored response, sent again unchanged.
    Replayed(StoredResponse),
}

/// How an operation's output is stored and answered (its HTTP status and body); supplied by
/// the route, which owns the mapping to HTTP.
pub type Respond<'a, O> = &'a (dyn Fn(&O) -> Completion + Sync);

/// The business step of an idempotent operation, run inside the claiming transaction.
/// Returning `Err` rolls back the whole transaction, the claim included (transient failures,
/// operations that must wait); a deterministic failure is an output that is stored.
pub trait IdempotentWork: Sync {
    /// What the operation did, as its caller reports it (outcome, created row, refusal).
    type Output: Send;

    fn run<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, Result<Self::Output, IdempotencyError>>;

    /// A shortcut for the common case: look up, claim, apply and finish in one statement (one
    /// round trip, committed by the time it answers), all or nothing. It brings its own
    /// connection. `None` when this request has none; `Declined` sends it down the general
    /// path. Either way the guarantees are the same.
    fn run_in_one_statement<'c>(
        &'c self,
        _request: &'c IdempotentRequest,
        _respond: Respond<'c, Self::Output>,
    ) -> Option<BoxFuture<'c, Result<OneStatement<Self::Output>, IdempotencyError>>> {
        None
    }
}

/// Claims the key, runs `work` for a first request, and stores its response (as `respond`
/// renders it): one transaction. A connection is taken from `pool` only for the general path,
/// after the shortcut. A first answer is returned only for a confirmed commit (with
/// synchronous replication: one the standby acknowledged); a stored answer is returned only
/// after `replication` confirmed that the standby has it, since a record can become visible
/// after a commit whose wait for the standby was cancelled.
#[tracing::instrument(skip_all, fields(op = request.scope.op.as_str(), user_id = request.scope.user_id))]
pub async fn execute<W: IdempotentWork>(
    pool: &PgPool,
    replication: &Replication,
    request: &IdempotentRequest,
    work: &W,
    respond: Respond<'_, W::Output>,
) -> Result<Executed<W::Output>, IdempotencyError> {
    let executed = execute_unconfirmed(pool, replication, request, work, respond).await?;
    if let Executed::Replayed(_) = &executed {
        replication.confirm_replay().await?;
    }
    Ok(executed)
}

async fn execute_unconfirmed<W: IdempotentWork>(
    pool: &PgPool,
    replication: &Replication,
    request: &IdempotentRequest,
    work: &W,
    respond: Respond<'_, W::Output>,
) -> Result<Executed<W::Output>, IdempotencyError> {
    // A duplicate of a finished request is answered from one read, without a transaction:
    // the plain lookup, or the first statement of the work's one-statement shortcut.
    // In a trace, the one-statement path is one `write` span: the claim, the write and the
    // commit are one statement (shared with other deliveries: its span is linked).
    let shortcut = match work.run_in_one_statement(request, respond) {
        Some(attempt) => Some(
            attempt
                .instrument(tracing::info_span!(target: TRACE, "write", one_statement = true))
                .await?,
        ),
        None => None,
    };
    // A connection is taken only once it is needed, and then kept for the transaction.
    let mut pooled = None;
    let existing = match shortcut {
        Some(OneStatement::Finished(response, output)) => {
            return Ok(Executed::First { response, output });
        }
        Some(OneStatement::Existing(existing)) => Some(existing),
        Some(OneStatement::InFlight) => return Err(IdempotencyError::InFlight),
        // It read no record before it declined; the acquire below decides.
        Some(OneStatement::Declined) => None,
        None => {
            let conn = pooled.insert(pool.get().await?);
            lookup(conn, &request.scope)
                .instrument(tracing::info_span!(target: TRACE, "key_lookup"))
                .await?
        }
    };
    if let Some(existing) = existing {
        match Decision::from_acquired(existing, &request.fingerprint) {
            Decision::Replay(stored) => return Ok(Executed::Replayed(stored)),
            Decision::Mismatch => return Err(IdempotencyError::KeyReusedWithDifferentBody),
            // Not visible when committed; the acquire below decides.
            Decision::First(_) | Decision::InFlight => {}
        }
    }
    let mut conn = match pooled {
        Some(conn) => conn,
        None => pool.get().await?,
    };
    confirmed_transaction(&mut conn, replication.commit_timeout(), async |conn| {
        let acquired = acquire(
            conn,
            &request.scope,
            &request.fingerprint,
            request.expires_at,
        )
        .instrument(tracing::info_span!(target: TRACE, "key_claim"))
        .await?;
        match Decision::from_acquired(acquired, &request.fingerprint) {
            Decision::First(claim) => {
                let write = async {
                    let output = work.run(conn).await?;
                    let completion = respond(&output);
                    let response = finish(
                        conn,
                        claim,
                        completion.record_status,
                        completion.http_status,
                        &completion.body,
                    )
                    .await?;
                    Ok::<_, IdempotencyError>(Executed::First { response, output })
                };
                write
                    .instrument(tracing::info_span!(target: TRACE, "write"))
                    .await
            }
            Decision::Replay(stored) => Ok(Executed::Replayed(stored)),
            Decision::InFlight => Err(IdempotencyError::InFlight),
            Decision::Mismatch => Err(IdempotencyError::KeyReusedWithDifferentBody),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn existing(status: RecordStatus, hash: &str) -> Acquired {
        Acquired::Existing {
            status,
            response: Some(StoredResponse {
                status: 201,
                body: "{}".into(),
            }),
            request_hash: hash.into(),
        }
    }

    #[test]
    fn a_finished_record_with_the_same_body_is_replayed() {
        let fp = Fingerprint::of(b"body");
        let decision = Decision::from_acquired(existing(RecordStatus::Succeeded, fp.as_str()), &fp);
        assert!(matches!(decision, Decision::Replay(r) if r.status == 201));
    }

    #[test]
    fn a_stored_failure_is_replayed_too() {
        let fp = Fingerprint::of(b"body");
        let decision = Decision::from_acquired(existing(RecordStatus::Failed, fp.as_str()), &fp);
        assert!(matches!(decision, Decision::Replay(_)));
    }

    #[test]
    fn another_body_under_the_same_key_is_a_mismatch() {
        let fp = Fingerprint::of(b"body");
        let decision = Decision::from_acquired(existing(RecordStatus::Succeeded, "other"), &fp);
        assert!(matches!(decision, Decision::Mismatch));
    }

    #[test]
    fn a_processing_record_is_in_flight_even_with_another_body() {
        let fp = Fingerprint::of(b"body");
        let decision = Decision::from_acquired(existing(RecordStatus::Processing, "other"), &fp);
        assert!(matches!(decision, Decision::InFlight));
    }
}
