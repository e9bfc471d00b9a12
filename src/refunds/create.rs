//! `refund.create` in three steps, because the provider call cannot sit inside a transaction:
//! 1. one committed transaction claims the key as `processing` under a lease, checks the order
//!    (the caller's, paid, enough left counting requests in flight, under the order's row lock)
//!    and inserts the refund request with its provider idempotency key; a refusal is stored;
//! 2. the provider is called with no transaction and no pooled connection held;
//! 3. one transaction stores the provider's answer and finishes the key, if this attempt still
//!    holds the lease. An unknown outcome releases the lease instead.
//!
//! Each phase's commit is an answer (or, for phase 1, a reason to call the provider) only when
//! it was confirmed, by the synchronous standby when there is one ([`confirmed_transaction`]),
//! and a stored answer is replayed only after the replay barrier: a phase 1 that a failover
//! lost after the provider was called would let the client's retry create a new request under
//! a new provider key, and the provider would refund twice.
//!
//! A crash anywhere leaves a `processing` record that the next request with the key, or the
//! recoverer, takes over once the lease expires; it repeats step 2 with the same provider key.
//! Not forever: a takeover of a request older than `max_retry_age` (below the provider's key
//! lifetime, 24 h at Stripe) stops the retries instead, as does an answer the gateway cannot
//! store; a person then looks at the provider and [`resolve`]s the request.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use rand::RngCore;

use serde_json::json;

use super::error::{RefundError, ResolveError};
use super::model::{DueRequest, NewRefundRequest, RefundRequest, RefundStatus};
use super::provider::{ProviderAnswer, RefundCall, RefundClients};
use super::request::{RefundRefusal, RefusalKind, ValidRefund};
use super::review::{Review, ReviewReason};
use crate::access::audit::{self, Action, Entry};
use crate::db::commit::confirmed_transaction;
use crate::db::pool::PgPool;
use crate::db::replication::Replication;
use crate::idempotency::Executed;
use crate::idempotency::lease::{self, Claimed, Lease};
use crate::idempotency::record::{Completion, IdempotentRequest, StoredResponse};
use crate::notifications::Notifying;
use crate::orders::model::{Order, OrderStatus};
use crate::payments::event::MAX_EVENT_ID_LEN;
use crate::payments::model::OrderPayment;
use crate::text;

/// What a refund request ended in, to be stored and answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The provider accepted it; the ledger moves when its refund webhook arrives.
    Accepted {
        refund_request_id: i64,
        status: RefundStatus,
        provider_refund_id: String,
    },
    Refused(RefundRefusal),
}

/// How an outcome is stored and answered (its HTTP status and body); supplied by the route,
/// which owns the mapping to HTTP, and by `serve` for the recoverer.
pub type RenderRefund = fn(&RefundOutcome) -> Completion;

/// What every attempt needs: the provider clients, the lease, the bounds of retries, the
/// rendering of outcomes.
#[derive(Clone)]
pub struct Refunds {
    pub clients: RefundClients,
    pub lease: Duration,
    /// No provider call for a request older than this: the provider may have forgotten its
    /// idempotency key, so the call could refund twice.
    pub max_retry_age: Duration,
    /// The first wait before the provider is called again after an unknown outcome, by the
    /// recoverer or a client's retry; it doubles with each unknown outcome, up to 15 minutes.
    pub retry_backoff: Duration,
    pub render: RenderRefund,
    /// Whose refund requests' ends stage notifications, and the sender to wake after them.
    pub notifying: Notifying,
    /// How long a phase's commit may wait for its confirmation (`[database]
    /// commit_timeout_ms`); past it the request answers 503 and a retry decides.
    pub commit_timeout: Duration,
}

/// A refund request held by this attempt, to be sent to the provider.
struct Attempt {
    lease: Lease,
    request: RefundRequest,
}

/// An outcome that is known, from the provider or an operator: stored in phase 3.
enum Known {
    Accepted(String),
    /// The message stored and answered (provider_declined).
    Declined(String),
}

/// What storing a known outcome found.
enum Stored {
    Done(Executed<RefundOutcome>),
    /// The refund id is already another request's (`uq_refund_requests_provider_refund`):
    /// nothing was written.
    RefundIdInUse {
        held_by: i64,
    },
}

/// What a takeover allows the new holder to do; the last two give the lease back in the same
/// transaction, which commits, so a review mark stays.
enum Takeover {
    Call(Box<Attempt>),
    /// Retries stopped for a person.
    Review(Review),
    /// The provider answered unknown a moment ago: its backoff has this long to run.
    Wait(Duration),
}

enum Started {
    Done(Executed<RefundOutcome>),
    Takeover(Takeover),
}

/// `POST /v1/orders/{id}/refunds` for `merchant_id`: the three steps, each phase on a pooled
/// connection of its own, none held while the provider answers. `order_id` is `None` when the
/// path does not name an order (stored as order_not_found). A stored answer is replayed only
/// once `replication` confirmed it.
#[tracing::instrument(skip_all, fields(merchant_id, order_id))]
pub async fn create(
    pool: &PgPool,
    replication: &Replication,
    refunds: &Refunds,
    merchant_id: i64,
    order_id: Option<i64>,
    idempotent: &IdempotentRequest,
    body: &[u8],
) -> Result<Executed<RefundOutcome>, RefundError> {
    let started = {
        let mut conn = pool.get().await?;
        start(&mut conn, refunds, merchant_id, order_id, idempotent, body).await?
    };
    let attempt = match started {
        Started::Done(Executed::Replayed(stored)) => {
            replication.confirm_replay().await?;
            return Ok(Executed::Replayed(stored));
        }
        Started::Done(executed) => return Ok(executed),
        Started::Takeover(Takeover::Call(attempt)) => *attempt,
        Started::Takeover(Takeover::Review(review)) => {
            return Err(RefundError::NeedsReview(review));
        }
        Started::Takeover(Takeover::Wait(retry_after)) => {
            return Err(RefundError::ProviderUnavailable { retry_after });
        }
    };
    let answer = call_provider(&refunds.clients, &attempt.request).await;
    let mut conn = pool.get().await?;
    settle(&mut conn, refunds, attempt, answer).await
}

/// Takes a due request's record over and finishes it (the recoverer). False when another
/// attempt holds it now, when it needs a person, or when the provider's outcome is still
/// unknown (it is then due again after its backoff).
pub async fn recover(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    due: &DueRequest,
) -> Result<bool, RefundError> {
    // Confirmed before the provider is called: the takeover's commit comes after the phase 1
    // it read, so its confirmation says that phase 1 is on the standby too.
    let attempt = confirmed_transaction(conn, refunds.commit_timeout, async |conn| {
        let lease = lease::take_over(
            conn,
            due.record_id,
            due.lease_token.as_deref(),
            refunds.lease,
        )
        .await?;
        let Some(lease) = lease else {
            return Ok::<_, RefundError>(None);
        };
        retryable(conn, refunds, lease).await.map(Some)
    })
    .await?;
    let Some(Takeover::Call(attempt)) = attempt else {
        return Ok(false);
    };
    let attempt = *attempt;
    let answer = call_provider(&refunds.clients, &attempt.request).await;
    match settle(conn, refunds, attempt, answer).await {
        Ok(_) => Ok(true),
        Err(
            RefundError::InFlight
            | RefundError::NeedsReview(_)
            | RefundError::ProviderUnavailable { .. },
        ) => Ok(false),
        Err(error) => Err(error),
    }
}

// ---------------------------------------------------------------------------------------
// An operator's answer (docs/refunds.md, "a person resolves"): for a request the gateway will
// not, or cannot yet, finish on its own (its retries stopped, or its outcome is unknown and
// nobody is calling the provider for it), or a `pending` request whose refund id turned out
// wrong. Stored exactly as phase 3 stores the provider's, in one transaction, so a refused
// resolution leaves nothing behind.
// ---------------------------------------------------------------------------------------

/// What an operator found at the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The provider made the refund, under this id: the request becomes pending (or succeeded,
    /// if its webhook already posted).
    Accepted { provider_refund_id: String },
    /// The provider has no such refund: the request fails and its amount is released.
    Declined { message: String },
}

impl Resolution {
    /// The provider made the refund under `provider_refund_id`, if that id can be stored and
    /// shown as it is.
    pub fn accepted(provider_refund_id: String) -> Result<Self, String> {
        if !text::storable(&provider_refund_id, MAX_EVENT_ID_LEN) {
            return Err(
                "provider_refund_id must be 1 to 255 bytes with no control characters".into(),
            );
        }
        Ok(Resolution::Accepted { provider_refund_id })
    }

    /// The provider has no such refund, for the reason `message`, if it can be stored and
    /// shown as it is.
    pub fn declined(message: String) -> Result<Self, String> {
        if !text::storable(&message, 500) {
            return Err("message must be 1 to 500 bytes with no control characters".into());
        }
        Ok(Resolution::Declined { message })
    }
}

/// Stores `resolution` for request `request_id`; its status afterwards.
///
/// A `processing` request must be idle (retries stopped, lease released, or expired more than
/// a lease ago): the resolution takes its lease over and finishes its record, so the client's
/// retry with its key replays the answer. A `pending` request (accepted under a refund id that
/// turned out wrong) gets its refund id corrected, or fails; its record keeps the answer its
/// client already has.
pub async fn resolve(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    request_id: i64,
    resolution: Resolution,
    audit: &audit::Context,
) -> Result<RefundStatus, ResolveError> {
    let changes = match &resolution {
        Resolution::Accepted { provider_refund_id } => {
            json!({"resolution": "accepted", "provider_refund_id": provider_refund_id})
        }
        Resolution::Declined { message } => json!({"resolution": "declined", "message": message}),
    };
    let resolved = confirmed_transaction(conn, refunds.commit_timeout, async |conn| {
        let status = resolve_in(conn, refunds, request_id, resolution).await?;
        let entry = Entry::new(
            Action::RefundRequestResolve,
            Some(format!("refund_request:{request_id}")),
            status.as_str(),
        )
        .with_changes(changes);
        audit::record(conn, audit, entry).await?;
        Ok(status)
    })
    .await;
    if resolved.is_ok() {
        // The resolution may have ended the request: its notification goes out now.
        refunds.notifying.wake_handle().wake();
    }
    resolved
}

/// [`resolve`]'s change, inside its transaction.
async fn resolve_in(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    request_id: i64,
    resolution: Resolution,
) -> Result<RefundStatus, ResolveError> {
    let found = RefundRequest::resolvable(conn, request_id, refunds.lease)
        .await?
        .ok_or(ResolveError::NotFound)?;
    match RefundStatus::parse(&found.status) {
        Some(RefundStatus::Processing) if found.idle => {
            let record_id = found.record_id.ok_or(ResolveError::NotResolvable)?;
            let lease =
                lease::take_over(conn, record_id, found.lease_token.as_deref(), refunds.lease)
                    .await?
                    .ok_or(ResolveError::NotResolvable)?;
            let request = request_of(conn, &lease).await?;
            let known = match resolution {
                Resolution::Accepted { provider_refund_id } => Known::Accepted(provider_refund_id),
                Resolution::Declined { message } => {
                    Known::Declined(format!("resolved by an operator: {message}"))
                }
            };
            match store_known(conn, refunds, &Attempt { lease, request }, &known).await? {
                Some(Stored::Done(Executed::First {
                    output: RefundOutcome::Accepted { status, .. },
                    ..
                })) => Ok(status),
                Some(Stored::Done(_)) => Ok(RefundStatus::Failed),
                Some(Stored::RefundIdInUse { held_by }) => {
                    Err(ResolveError::RefundIdInUse { held_by })
                }
                None => Err(ResolveError::NotResolvable),
            }
        }
        Some(RefundStatus::Pending) => {
            // The order's row lock first, as the refund webhook takes it before it settles.
            Order::lock_for_merchant(conn, found.merchant_id, found.order_id).await?;
            let notify = refunds.notifying.wants(found.merchant_id);
            match resolution {
                Resolution::Accepted { provider_refund_id } => {
                    let request = RefundRequest::for_id(conn, request_id).await?;
                    if let Some(held_by) =
                        RefundRequest::holder_of_refund_id(conn, &request, &provider_refund_id)
                            .await?
                    {
                        return Err(ResolveError::RefundIdInUse { held_by });
                    }
                    RefundRequest::corrected(conn, request_id, &provider_refund_id, notify)
                        .await?
                        .ok_or(ResolveError::NotResolvable)
                }
                Resolution::Declined { message } => {
                    let message = format!("withdrawn by an operator: {message}");
                    if RefundRequest::withdrawn(conn, request_id, &message, notify).await? {
                        Ok(RefundStatus::Failed)
                    } else {
                        Err(ResolveError::NotResolvable)
                    }
                }
            }
        }
        _ => Err(ResolveError::NotResolvable),
    }
}

/// What the holder of a takeover may do: call the provider; or nothing, because the request's
/// retries stopped, it is older than `max_retry_age`, or its backoff is still running (a client
/// retry right after an unknown answer: it must not hammer a rate-limiting provider). The lease
/// is given back at once in the last three cases.
async fn retryable(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    lease: Lease,
) -> Result<Takeover, RefundError> {
    let request = request_of(conn, &lease).await?;
    let reason = match request.review_reason()? {
        Some(reason) => Some(reason),
        None if RefundRequest::older_than(conn, request.id, refunds.max_retry_age).await? => {
            RefundRequest::stop_retrying(conn, request.id, ReviewReason::RetryAgeExceeded).await?;
            tracing::warn!(
                refund_request_id = request.id,
                "refund request is older than the retry age; a person must resolve it"
            );
            Some(ReviewReason::RetryAgeExceeded)
        }
        None => None,
    };
    if let Some(reason) = reason {
        lease::release(conn, &lease).await?;
        return Ok(Takeover::Review(Review {
            refund_request_id: request.id,
            reason,
        }));
    }
    if let Some(left) = RefundRequest::backoff_left(conn, request.id).await? {
        lease::release(conn, &lease).await?;
        return Ok(Takeover::Wait(left));
    }
    Ok(Takeover::Call(Box::new(Attempt { lease, request })))
}

/// Phase 1, one transaction, committed before the provider is called.
async fn start(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    merchant_id: i64,
    order_id: Option<i64>,
    idempotent: &IdempotentRequest,
    body: &[u8],
) -> Result<Started, RefundError> {
    // Confirmed, or the provider is not called: see the module's comment.
    confirmed_transaction(
        conn,
        refunds.commit_timeout,
        async |conn| match lease::claim(conn, idempotent, refunds.lease).await? {
            Claimed::Replay(stored) => Ok(Started::Done(Executed::Replayed(stored))),
            Claimed::InFlight => Err(RefundError::InFlight),
            Claimed::Mismatch => Err(RefundError::KeyReusedWithDifferentBody),
            Claimed::TakenOver(lease) => {
                tracing::info!(
                    record_id = lease.record_id(),
                    "took over an expired refund lease"
                );
                Ok(Started::Takeover(retryable(conn, refunds, lease).await?))
            }
            Claimed::New(lease) => {
                match reserve(conn, refunds, merchant_id, order_id, body, &lease).await? {
                    Ok(request) => Ok(Started::Takeover(Takeover::Call(Box::new(Attempt {
                        lease,
                        request,
                    })))),
                    Err(refusal) => {
                        let outcome = RefundOutcome::Refused(refusal);
                        let response = finish(conn, refunds, &lease, &outcome).await?;
                        Ok(Started::Done(Executed::First {
                            response,
                            output: outcome,
                        }))
                    }
                }
            }
        },
    )
    .await
}

/// The checks of phase 1 and the refund request they allow, under the order's row lock (so
/// two concurrent refunds of one order are decided one after the other).
async fn reserve(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    merchant_id: i64,
    order_id: Option<i64>,
    body: &[u8],
    lease: &Lease,
) -> Result<Result<RefundRequest, RefundRefusal>, RefundError> {
    let valid = match ValidRefund::parse(body) {
        Ok(valid) => valid,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let not_found = || RefundRefusal::new(RefusalKind::OrderNotFound, "order not found");
    let Some(order_id) = order_id else {
        return Ok(Err(not_found()));
    };
    let Some(order) = Order::lock_for_merchant(conn, merchant_id, order_id).await? else {
        return Ok(Err(not_found()));
    };
    let status = order.status()?;
    // A disputed or charged-back order may still have something left to refund (a dispute of
    // part of it); what is left is decided by the amounts below, as for the others.
    if !matches!(
        status,
        OrderStatus::Paid
            | OrderStatus::PartiallyRefunded
            | OrderStatus::Disputed
            | OrderStatus::ChargedBack
    ) {
        return Ok(Err(RefundRefusal::new(
            RefusalKind::NotRefundable,
            format!(
                "the order is {}; only paid, partially refunded or disputed orders can be refunded",
                status.as_str()
            ),
        )));
    }
    let Some(payment) = OrderPayment::of_order(conn, merchant_id, order.id).await? else {
        return Ok(Err(RefundRefusal::new(
            RefusalKind::NotRefundable,
            "the order has no captured payment applied to it",
        )));
    };
    if !refunds.clients.offers_refunds(&payment.provider) {
        return Ok(Err(RefundRefusal::new(
            RefusalKind::NotRefundable,
            format!(
                "provider {:?} has no refund API configured",
                payment.provider
            ),
        )));
    }
    // What disputes hold back is not refundable: the bank already paid the customer. The
    // order's row lock orders this against a withdrawal, which locks it before it posts.
    let reserved = RefundRequest::reserved_minor(conn, order.id).await?;
    let refundable = payment.refundable_minor().saturating_sub(reserved).max(0);
    if valid.amount.get() > refundable {
        return Ok(Err(RefundRefusal::new(
            RefusalKind::AmountExceedsRefundable,
            format!(
                "amount_minor {} is more than the {refundable} still refundable \
                 ({} captured, {} refunded, {} held back by disputes, {reserved} in refund \
                 requests in flight)",
                valid.amount.get(),
                payment.amount_minor,
                payment.refunded_minor,
                payment.disputed_minor
            ),
        )));
    }
    let provider_key = provider_idempotency_key();
    let request = NewRefundRequest {
        merchant_id,
        order_id: order.id,
        provider: &payment.provider,
        payment_id: &payment.payment_id,
        amount_minor: valid.amount.get(),
        currency: &payment.currency,
        reason: valid.reason.as_deref(),
        status: RefundStatus::Processing.as_str(),
        provider_idempotency_key: &provider_key,
        idempotency_record_id: lease.record_id(),
    }
    .insert(conn)
    .await?;
    Ok(Ok(request))
}

/// Phase 2: the provider call, outside any transaction.
async fn call_provider(clients: &RefundClients, request: &RefundRequest) -> ProviderAnswer {
    clients
        .refund(
            &request.provider,
            &RefundCall {
                payment_id: &request.payment_id,
                amount_minor: request.amount_minor,
                currency: &request.currency,
                idempotency_key: &request.provider_idempotency_key,
            },
        )
        .await
}

/// Phase 3: stores the provider's answer and finishes the key, if this attempt still holds
/// the lease (else 409: the holder that took over answers). An unknown outcome releases the
/// lease and sets the request's next attempt after its backoff; an answer that cannot be
/// stored stops the retries for a person. Either leaves the record processing.
async fn settle(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    attempt: Attempt,
    answer: ProviderAnswer,
) -> Result<Executed<RefundOutcome>, RefundError> {
    let known = match answer {
        ProviderAnswer::Accepted { refund_id } => Known::Accepted(refund_id),
        ProviderAnswer::Declined { status, message } => Known::Declined(format!(
            "the provider declined the refund ({status}): {message}"
        )),
        ProviderAnswer::Unavailable(_) => {
            // The provider client logged why.
            return Err(match give_back(conn, refunds, &attempt).await? {
                Some(retry_after) => RefundError::ProviderUnavailable { retry_after },
                // Another attempt took the lease over meanwhile: it answers.
                None => RefundError::InFlight,
            });
        }
        ProviderAnswer::Unusable(why) => {
            tracing::error!(
                refund_request_id = attempt.request.id,
                why,
                "refund request needs a person"
            );
            return stop_for_review(conn, attempt, ReviewReason::UnusableProviderAnswer).await;
        }
    };
    let accepted_id = match &known {
        Known::Accepted(refund_id) => Some(refund_id.clone()),
        Known::Declined(_) => None,
    };
    let request_id = attempt.request.id;
    let stored = confirmed_transaction(conn, refunds.commit_timeout, async |conn| {
        store_known(conn, refunds, &attempt, &known).await
    })
    .await;
    match stored {
        Ok(Some(Stored::Done(executed))) => {
            refunds.notifying.committed(attempt.request.merchant_id);
            Ok(executed)
        }
        Ok(Some(Stored::RefundIdInUse { held_by })) => {
            tracing::error!(
                refund_request_id = request_id,
                held_by,
                "the provider answered with a refund id another request holds; a person must resolve it"
            );
            stop_for_review(conn, attempt, ReviewReason::RefundIdInUse).await
        }
        Ok(None) => {
            // Another attempt took the lease over (this one outlived it); it calls the provider
            // with the same key and stores the same refund. Said loudly, in case it does not.
            if let Some(refund_id) = accepted_id {
                tracing::error!(
                    refund_request_id = request_id,
                    refund_id,
                    "the provider accepted the refund after this attempt lost its lease; the new holder stores it"
                );
            }
            Err(RefundError::InFlight)
        }
        Err(error @ RefundError::Unconfirmed(_)) => {
            // Stored, perhaps on this node only (or still waiting for the standby): nothing is
            // given back. The client's retry replays it once the barrier confirms it; if a
            // failover lost it, the lease expires and a takeover calls the provider again
            // under the same key.
            Err(error)
        }
        Err(error) => {
            // The answer is known but could not be stored (the database): give the lease back
            // with a backoff rather than leave it held until it expires.
            if let Err(release_error) = give_back(conn, refunds, &attempt).await {
                tracing::warn!(error = %release_error, "could not give a refund lease back; it expires");
            }
            Err(error)
        }
    }
}

/// Gives the attempt's lease back and pushes the request's next attempt back by its backoff,
/// in one transaction; the wait, or `None` when another attempt holds the lease now.
async fn give_back(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    attempt: &Attempt,
) -> Result<Option<Duration>, RefundError> {
    conn.transaction(async |conn| {
        if !lease::release(conn, &attempt.lease).await? {
            return Ok(None);
        }
        Ok(Some(
            RefundRequest::retry_later(conn, attempt.request.id, refunds.retry_backoff).await?,
        ))
    })
    .await
}

/// Stops the automatic retries of a held request and gives its lease back, committed; the
/// caller is told to wait for a person (or that another attempt holds it now).
async fn stop_for_review(
    conn: &mut AsyncPgConnection,
    attempt: Attempt,
    reason: ReviewReason,
) -> Result<Executed<RefundOutcome>, RefundError> {
    let Attempt { lease, request } = attempt;
    let held = conn
        .transaction(async |conn| {
            if !lease::hold(conn, &lease).await? {
                return Ok::<_, RefundError>(false);
            }
            RefundRequest::stop_retrying(conn, request.id, reason).await?;
            lease::release(conn, &lease).await?;
            Ok(true)
        })
        .await?;
    if !held {
        return Err(RefundError::InFlight);
    }
    Err(RefundError::NeedsReview(Review {
        refund_request_id: request.id,
        reason,
    }))
}

/// Phase 3's writes, in the caller's transaction: if `attempt` still holds its lease, the
/// outcome and the finished record; `None` when the lease was lost. A refund id that another
/// request already holds writes nothing.
async fn store_known(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    attempt: &Attempt,
    known: &Known,
) -> Result<Option<Stored>, RefundError> {
    let Attempt { lease, request } = attempt;
    // The record first, then the order, as in phase 1: no lock-order inversion.
    if !lease::hold(conn, lease).await? {
        return Ok(None);
    }
    // The order's row lock orders this write against the refund webhook, which takes it too
    // before it posts (see refund_request_accepted in migration 000009).
    Order::lock_for_merchant(conn, request.merchant_id, request.order_id).await?;
    let outcome = match known {
        Known::Accepted(refund_id) => {
            if let Some(held_by) =
                RefundRequest::holder_of_refund_id(conn, request, refund_id).await?
            {
                return Ok(Some(Stored::RefundIdInUse { held_by }));
            }
            let notify = refunds.notifying.wants(request.merchant_id);
            let status = RefundRequest::accepted(conn, request.id, refund_id, notify)
                .await?
                .ok_or_else(|| corrupt("a held refund request was not processing"))?;
            RefundOutcome::Accepted {
                refund_request_id: request.id,
                status,
                provider_refund_id: refund_id.clone(),
            }
        }
        Known::Declined(message) => {
            let notify = refunds.notifying.wants(request.merchant_id);
            RefundRequest::declined(conn, request.id, message, notify).await?;
            RefundOutcome::Refused(RefundRefusal {
                kind: RefusalKind::ProviderDeclined,
                message: message.clone(),
                refund_request_id: Some(request.id),
            })
        }
    };
    let response = finish(conn, refunds, lease, &outcome).await?;
    Ok(Some(Stored::Done(Executed::First {
        response,
        output: outcome,
    })))
}

/// Finishes the held record with `outcome` as rendered.
async fn finish(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    lease: &Lease,
    outcome: &RefundOutcome,
) -> Result<StoredResponse, RefundError> {
    let completion = (refunds.render)(outcome);
    lease::finish(
        conn,
        lease,
        completion.record_status,
        completion.http_status,
        &completion.body,
    )
    .await?
    .ok_or_else(|| corrupt("lost a lease held in this transaction").into())
}

async fn request_of(
    conn: &mut AsyncPgConnection,
    lease: &Lease,
) -> Result<RefundRequest, RefundError> {
    RefundRequest::for_record(conn, lease.record_id())
        .await?
        .ok_or_else(|| {
            corrupt("a processing refund.create record without its refund request").into()
        })
}

/// A fresh key for the provider: random, so no two requests (or databases) ever share one.
fn provider_idempotency_key() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    format!("cgw-refund-{}", hex::encode(bytes))
}

fn corrupt(what: &'static str) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}
