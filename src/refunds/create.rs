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

use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection};
use rand::RngCore;

use super::error::RefundError;
use super::model::{NewRefundRequest, RefundRequest, RefundStatus};
use super::provider::{ProviderAnswer, RefundCall, RefundClients};
use super::request::{RefundRefusal, RefusalKind, ValidRefund};
use crate::db::PgPool;
use crate::idempotency::Executed;
use crate::idempotency::lease::{self, Abandoned, Claimed, Lease};
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

/// What every attempt needs: the provider clients, the lease, the rendering of outcomes.
#[derive(Clone)]
pub struct Refunds {
    pub clients: RefundClients,
    pub lease: Duration,
    pub render: RenderRefund,
}

/// A refund request held by this attempt, to be sent to the provider.
struct Attempt {
    lease: Lease,
    request: RefundRequest,
}

/// A provider answer whose outcome is known: stored in phase 3.
enum Known {
    Accepted(String),
    Declined(u16, String),
}

enum Started {
    Done(Executed<RefundOutcome>),
    Call(Box<Attempt>),
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
    };
    let answer = call_provider(&refunds.clients, &attempt.request).await;
    let mut conn = pool.get().await?;
    settle(&mut conn, refunds, attempt, answer).await
}

/// Takes an abandoned record over and finishes it (the recoverer). False when another attempt
/// holds it now.
pub async fn recover(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    abandoned: &Abandoned,
) -> Result<bool, RefundError> {
    let attempt = conn
        .transaction(async |conn| {
            let lease = lease::take_over(
                conn,
                abandoned.record_id,
                abandoned.lease_token.as_deref(),
                refunds.lease,
            )
            .await?;
            let Some(lease) = lease else {
                return Ok::<_, RefundError>(None);
            };
            let request = request_of(conn, &lease).await?;
            Ok(Some(Attempt { lease, request }))
        })
        .await?;
    let Some(attempt) = attempt else {
        return Ok(false);
    };
    let answer = call_provider(&refunds.clients, &attempt.request).await;
    match settle(conn, refunds, attempt, answer).await {
        Ok(_) => Ok(true),
        Err(RefundError::InFlight) => Ok(false),
        Err(error) => Err(error),
    }
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
                let request = request_of(conn, &lease).await?;
                Ok(Started::Call(Box::new(Attempt { lease, request })))
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

/// Phase 3: stores the provider's answer and finishes the key in one transaction, if this
/// attempt still holds the lease (else 409: the holder that took over answers). An unknown
/// outcome releases the lease and leaves the record processing.
async fn settle(
    conn: &mut AsyncPgConnection,
    refunds: &Refunds,
    attempt: Attempt,
    answer: ProviderAnswer,
) -> Result<Executed<RefundOutcome>, RefundError> {
    let Attempt { lease, request } = attempt;
    let known = match answer {
        ProviderAnswer::Accepted { refund_id } => Known::Accepted(refund_id),
        ProviderAnswer::Declined { status, message } => Known::Declined(status, message),
        ProviderAnswer::Unavailable(why) => {
            lease::release(conn, &lease).await?;
            return Err(RefundError::ProviderUnavailable(why));
        }
    };
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
                Known::Declined(status, message) => {
                    RefundRequest::declined(conn, request.id, message).await?;
                    RefundOutcome::Refused(RefundRefusal {
                        kind: RefusalKind::ProviderDeclined,
                        message: format!("the provider declined the refund ({status}): {message}"),
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
