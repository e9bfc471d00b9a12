//! `refund.create` in three steps, because the provider call cannot sit inside a transaction:
//! 1. one committed transaction claims the key as `processing` under a lease, checks the order
//!    (the caller's, paid, enough left counting requests in flight, under the order's row lock)
//!    and inserts the refund request with its provider idempotency key; a refusal is stored;
//! 2. the provider is called with no transaction and no pooled connection held;
//! 3. one transaction stores the provider's answer and finishes the key, if this attempt still
//!    holds the lease. An unknown outcome releases the lease instead.
//!
//! A crash anywhere leaves a `processing` record that the next request with the key, or the
//! recoverer, takes over once the lease expires; it repeats step 2 with the same provider key.
//! Not forever: a takeover of a request older than `max_retry_age` (below the provider's key
//! lifetime, 24 h at Stripe) stops the retries instead, as does an answer the gateway cannot
//! store; a person then looks at the provider and [`resolve`]s the request.

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use rand::RngCore;

use super::error::{RefundError, ResolveError};
use super::model::{DueRequest, NewRefundRequest, RefundRequest, RefundStatus, ReviewReason};
use super::provider::{ProviderAnswer, RefundCall, RefundClients};
use super::request::{RefundRefusal, RefusalKind, ValidRefund};
use crate::db::PgPool;
use crate::idempotency::Executed;
use crate::idempotency::lease::{self, Claimed, Lease};
use crate::idempotency::record::{Completion, IdempotentRequest, StoredResponse};
use crate::orders::model::{Order, OrderStatus};
use crate::payments::model::OrderPayment;

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
    /// The first wait before the recoverer calls again after an unknown outcome; it doubles.
    pub retry_backoff: Duration,
    pub render: RenderRefund,
}

/// What an operator found at the provider for a request whose retries stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The provider made the refund, under this id: the request becomes pending (or succeeded,
    /// if its webhook already posted).
    Accepted { provider_refund_id: String },
    /// The provider has no such refund: the request fails and its amount is released.
    Declined { message: String },
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

enum Started {
    Done(Executed<RefundOutcome>),
    Call(Box<Attempt>),
    /// Retries stopped for a person; committed, unlike an error, so the mark stays.
    Review(Review),
}

/// A request whose automatic retries stopped, and why.
#[derive(Debug, Clone, Copy)]
pub struct Review {
    pub refund_request_id: i64,
    pub reason: ReviewReason,
}

/// `POST /v1/orders/{id}/refunds` for `merchant_id`: the three steps, each phase on a pooled
/// connection of its own, none held while the provider answers. `order_id` is `None` when the
/// path does not name an order (stored as order_not_found).
#[tracing::instrument(skip_all, fields(merchant_id, order_id))]
pub async fn create(
    pool: &PgPool,
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
        Started::Done(executed) => return Ok(executed),
        Started::Call(attempt) => *attempt,
        Started::Review(review) => return Err(RefundError::NeedsReview(review)),
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
    let attempt = conn
        .transaction(async |conn| {
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
    let Some(Ok(attempt)) = attempt else {
        return Ok(false);
    };
    let answer = call_provider(&refunds.clients, &attempt.request).await;
    match settle(conn, refunds, attempt, answer).await {
        Ok(_) => Ok(true),
        Err(
            RefundError::InFlight
            | RefundError::NeedsReview(_)
            | RefundError::ProviderUnavailable(_),
        ) => Ok(false),
        Err(error) => Err(error),
    }
}

/// An operator's answer for a processing request nobody is calling the provider for (retries
/// stopped, or its lease expired or was released): stored as phase 3 would store the
/// provider's, so the client's retry with its key replays it. The request's status afterwards.
pub async fn resolve(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    request_id: i64,
    resolution: Resolution,
) -> Result<RefundStatus, ResolveError> {
    let attempt = conn
        .transaction(async |conn| {
            let Some(found) = RefundRequest::resolvable(conn, request_id).await? else {
                return Err(if RefundRequest::exists(conn, request_id).await? {
                    ResolveError::NotResolvable
                } else {
                    ResolveError::NotFound
                });
            };
            if !found.resolvable {
                return Err(ResolveError::NotResolvable);
            }
            let lease = lease::take_over(
                conn,
                found.record_id,
                found.lease_token.as_deref(),
                refunds.lease,
            )
            .await?
            .ok_or(ResolveError::NotResolvable)?;
            let request = request_of(conn, &lease).await.map_err(ResolveError::from)?;
            Ok(Attempt { lease, request })
        })
        .await?;
    let known = match resolution {
        Resolution::Accepted { provider_refund_id } => Known::Accepted(provider_refund_id),
        Resolution::Declined { message } => {
            Known::Declined(format!("resolved by an operator: {message}"))
        }
    };
    match finish_known(conn, refunds, attempt, known).await {
        Ok(Executed::First {
            output: RefundOutcome::Accepted { status, .. },
            ..
        }) => Ok(status),
        Ok(_) => Ok(RefundStatus::Failed),
        Err(RefundError::InFlight) => Err(ResolveError::NotResolvable),
        Err(error) => Err(error.into()),
    }
}

/// The attempt a takeover allows, or the review that stops it (the lease given back in the
/// same transaction) when the request's retries stopped or it is older than `max_retry_age`.
async fn retryable(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    lease: Lease,
) -> Result<Result<Attempt, Review>, RefundError> {
    let request = request_of(conn, &lease).await?;
    let reason = match request.review_reason() {
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
        return Ok(Err(Review {
            refund_request_id: request.id,
            reason,
        }));
    }
    Ok(Ok(Attempt { lease, request }))
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
    conn.transaction(
        async |conn| match lease::claim(conn, idempotent, refunds.lease).await? {
            Claimed::Replay(stored) => Ok(Started::Done(Executed::Replayed(stored))),
            Claimed::InFlight => Err(RefundError::InFlight),
            Claimed::Mismatch => Err(RefundError::KeyReusedWithDifferentBody),
            Claimed::TakenOver(lease) => {
                tracing::info!(
                    record_id = lease.record_id(),
                    "took over an expired refund lease"
                );
                Ok(match retryable(conn, refunds, lease).await? {
                    Ok(attempt) => Started::Call(Box::new(attempt)),
                    Err(review) => Started::Review(review),
                })
            }
            Claimed::New(lease) => {
                match reserve(conn, refunds, merchant_id, order_id, body, &lease).await? {
                    Ok(request) => Ok(Started::Call(Box::new(Attempt { lease, request }))),
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
    if !matches!(status, OrderStatus::Paid | OrderStatus::PartiallyRefunded) {
        return Ok(Err(RefundRefusal::new(
            RefusalKind::NotRefundable,
            format!(
                "the order is {}; only paid or partially refunded orders can be refunded",
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
    let reserved = RefundRequest::reserved_minor(conn, order.id).await?;
    let refundable = payment
        .amount_minor
        .saturating_sub(payment.refunded_minor)
        .saturating_sub(reserved)
        .max(0);
    if valid.amount.get() > refundable {
        return Ok(Err(RefundRefusal::new(
            RefusalKind::AmountExceedsRefundable,
            format!(
                "amount_minor {} is more than the {refundable} still refundable \
                 ({} captured, {} refunded, {reserved} in refund requests in flight)",
                valid.amount.get(),
                payment.amount_minor,
                payment.refunded_minor
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
        ProviderAnswer::Unavailable(why) => {
            let Attempt { lease, request } = attempt;
            conn.transaction(async |conn| {
                if lease::release(conn, &lease).await? {
                    RefundRequest::retry_later(conn, request.id, refunds.retry_backoff).await?;
                }
                Ok::<_, RefundError>(())
            })
            .await?;
            return Err(RefundError::ProviderUnavailable(why));
        }
        ProviderAnswer::Unusable(why) => {
            let Attempt { lease, request } = attempt;
            let reason = ReviewReason::UnusableProviderAnswer;
            conn.transaction(async |conn| {
                if lease::hold(conn, &lease).await? {
                    RefundRequest::stop_retrying(conn, request.id, reason).await?;
                    lease::release(conn, &lease).await?;
                }
                Ok::<_, RefundError>(())
            })
            .await?;
            tracing::error!(
                refund_request_id = request.id,
                why,
                "refund request needs a person"
            );
            return Err(RefundError::NeedsReview(Review {
                refund_request_id: request.id,
                reason,
            }));
        }
    };
    finish_known(conn, refunds, attempt, known).await
}

/// Stores a known outcome and finishes the key in one transaction, if `attempt` still holds
/// the lease (else `InFlight`).
async fn finish_known(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    attempt: Attempt,
    known: Known,
) -> Result<Executed<RefundOutcome>, RefundError> {
    let Attempt { lease, request } = attempt;
    let finished = conn
        .transaction(async |conn| {
            // The record first, then the order, as in phase 1: no lock-order inversion.
            if !lease::hold(conn, &lease).await? {
                return Ok::<_, RefundError>(None);
            }
            // The order's row lock orders this write against the refund webhook, which takes
            // it too before it posts (see refund_request_accepted in migration 000009).
            Order::lock_for_merchant(conn, request.merchant_id, request.order_id).await?;
            let outcome = match &known {
                Known::Accepted(refund_id) => {
                    let status = RefundRequest::accepted(conn, request.id, refund_id)
                        .await?
                        .ok_or_else(|| corrupt("a held refund request was not processing"))?;
                    RefundOutcome::Accepted {
                        refund_request_id: request.id,
                        status,
                        provider_refund_id: refund_id.clone(),
                    }
                }
                Known::Declined(message) => {
                    RefundRequest::declined(conn, request.id, message).await?;
                    RefundOutcome::Refused(RefundRefusal {
                        kind: RefusalKind::ProviderDeclined,
                        message: message.clone(),
                        refund_request_id: Some(request.id),
                    })
                }
            };
            let response = finish(conn, refunds, &lease, &outcome).await?;
            Ok(Some(Executed::First {
                response,
                output: outcome,
            }))
        })
        .await?;
    finished.ok_or(RefundError::InFlight)
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
