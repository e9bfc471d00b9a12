//! `payment.callback`: a verified provider event applied to the payment state machine, the
//! ledger and the order, inside the idempotency transaction.

pub mod batcher;
pub mod capture;
pub mod event;
pub mod model;
pub mod state;

use diesel_async::AsyncPgConnection;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use crate::deliveries;
use crate::error::{ApiError, error_body};
use crate::idempotency::{Completion, IdempotentRequest, IdempotentWork, OneStatement};
use crate::ledger::{NewTransfer, TransferKind};
use crate::orders::{Order, OrderStatus};
use crate::providers::Provider;

pub use event::{PayloadError, PaymentEvent, RefundAmount};
use model::{Payment, PaymentKey};
pub use state::{OrderState, PaymentState, PaymentStatus, Plan, plan};

/// How a first delivery ended, as its ack says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Ignored,
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Ignored => "ignored",
            Outcome::Rejected => "rejected",
        }
    }
}

/// The ack a provider gets (and gets again, byte for byte, on every redelivery).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Ack<'a> {
    pub received: bool,
    pub event_id: &'a str,
    /// applied, ignored or rejected
    pub outcome: &'static str,
    /// Why an event was ignored or rejected, e.g. amount_mismatch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    /// The ledger transfer an applied event posted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfer_id: Option<i64>,
}

pub fn ack(
    event_id: &str,
    outcome: Outcome,
    reason: Option<&str>,
    transfer_id: Option<i64>,
) -> serde_json::Value {
    serde_json::to_value(Ack {
        received: true,
        event_id,
        outcome: outcome.as_str(),
        reason,
        transfer_id,
    })
    .unwrap_or_default()
}

/// One verified delivery of a provider event.
pub struct ProcessCallback<'a> {
    pub provider: &'a Provider,
    /// The worker's queue for one-statement captures.
    pub batcher: &'a batcher::CaptureBatcher,
    pub event_id: &'a str,
    pub body: &'a [u8],
    /// How a first delivery ended (applied, ignored, rejected, invalid_payload), for the
    /// request's metrics and log line.
    pub outcome: std::sync::OnceLock<&'static str>,
}

impl IdempotentWork for ProcessCallback<'_> {
    fn run<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, Result<Completion, ApiError>> {
        self.process(conn).boxed()
    }

    /// A `payment.succeeded` goes through the one-statement capture first.
    fn run_in_one_statement<'c>(
        &'c self,
        request: &'c IdempotentRequest,
    ) -> Option<BoxFuture<'c, Result<OneStatement, ApiError>>> {
        // An invalid payload is answered (and stored) by the general path.
        let event = PaymentEvent::parse(self.provider.payload_format(), self.body).ok()?;
        let plan = capture::expected_capture(&event)?;
        let capture = capture::Capture::new(
            self.provider,
            self.event_id,
            self.body,
            event.payment_id(),
            &plan,
            request,
        )?;
        Some(
            async move {
                let attempt = self.batcher.run(capture).await?;
                if matches!(attempt, OneStatement::Finished(_)) {
                    let _ = self.outcome.set(Outcome::Applied.as_str());
                }
                Ok(attempt)
            }
            .boxed(),
        )
    }
}

impl ProcessCallback<'_> {
    #[tracing::instrument(skip_all, fields(provider = %self.provider.name(), event_id = %self.event_id, outcome))]
    async fn process(&self, conn: &mut AsyncPgConnection) -> Result<Completion, ApiError> {
        let merchant_id = self.provider.merchant_id();
        let provider = self.provider.name();
        // Shared from here on: independent statements are pipelined on the one connection
        // (sent together, executed in order, one round trip).
        let shared: &AsyncPgConnection = conn;
        let record_delivery =
            deliveries::record(shared, merchant_id, provider, self.event_id, self.body);

        let event = match PaymentEvent::parse(self.provider.payload_format(), self.body) {
            Ok(event) => event,
            Err(PayloadError(message)) => {
                record_delivery.await?;
                tracing::Span::current().record("outcome", "invalid_payload");
                let _ = self.outcome.set("invalid_payload");
                return Ok(Completion::failed(
                    400,
                    error_body("invalid_payload", &message),
                ));
            }
        };
        let key = PaymentKey {
            merchant_id,
            provider,
            payment_id: event.payment_id(),
        };

        // Locks are always taken order first, then payment, so two events of one order
        // (a payment and its refund) wait for each other instead of deadlocking. Pipelined
        // statements execute in the order they were sent, so that order holds.
        let order_id = match &event {
            PaymentEvent::Succeeded { order_id, .. } | PaymentEvent::Failed { order_id, .. } => {
                Some(*order_id)
            }
            PaymentEvent::Refunded { .. } => {
                Payment::find(shared, key, false).await?.map(|p| p.order_id)
            }
        };
        let lock_order = async {
            match order_id {
                Some(id) => Order::lock_for_merchant(shared, merchant_id, id).await,
                None => Ok(None),
            }
        };
        let ((), order, payment) = futures_util::try_join!(
            record_delivery,
            lock_order,
            Payment::find(shared, key, true)
        )?;

        let order_state = order.as_ref().and_then(|o| {
            Some(OrderState {
                id: o.id,
                amount_minor: o.amount_minor,
                currency: o.currency.clone(),
                status: OrderStatus::parse(&o.status)?,
            })
        });
        let payment_state = payment.as_ref().and_then(Payment::state);
        let plan = plan(&event, order_state.as_ref(), payment_state.as_ref());
        // The ledger transfer of this event, unique per (merchant, provider, event id).
        let transfer = |kind, order_id, currency, amount_minor| NewTransfer {
            merchant_id,
            provider,
            event_id: self.event_id,
            kind,
            order_id,
            payment_id: key.payment_id,
            currency,
            amount_minor,
        };

        let (outcome, reason, transfer_id) = match plan {
            Plan::Capture {
                order_id,
                amount_minor,
                currency,
            } => {
                match transfer(TransferKind::Payment, order_id, currency, amount_minor)
                    .post(shared)
                    .await?
                {
                    Some(id) => {
                        futures_util::try_join!(
                            Payment::upsert(
                                shared,
                                key,
                                order_id,
                                PaymentStatus::Succeeded,
                                amount_minor,
                                currency.code(),
                            ),
                            Order::set_status(shared, order_id, OrderStatus::Paid),
                        )?;
                        (Outcome::Applied, None, Some(id))
                    }
                    None => (Outcome::Ignored, Some("already_applied"), None),
                }
            }
            Plan::RecordFailure { order_id } => {
                let currency = order
                    .as_ref()
                    .map(|o| o.currency.as_str())
                    .unwrap_or_default();
                Payment::upsert(shared, key, order_id, PaymentStatus::Failed, 0, currency).await?;
                (Outcome::Applied, None, None)
            }
            Plan::Refund {
                order_id,
                amount_minor,
                refunded_total,
                fully_refunded,
                currency,
            } => {
                match transfer(TransferKind::Refund, order_id, currency, amount_minor)
                    .post(shared)
                    .await?
                {
                    Some(id) => {
                        let (payment_status, order_status) = if fully_refunded {
                            (PaymentStatus::Refunded, OrderStatus::Refunded)
                        } else {
                            (
                                PaymentStatus::PartiallyRefunded,
                                OrderStatus::PartiallyRefunded,
                            )
                        };
                        futures_util::try_join!(
                            Payment::record_refund(shared, key, refunded_total, payment_status),
                            Order::set_status(shared, order_id, order_status),
                        )?;
                        (Outcome::Applied, None, Some(id))
                    }
                    None => (Outcome::Ignored, Some("already_applied"), None),
                }
            }
            Plan::Ignore(reason) => (Outcome::Ignored, Some(reason), None),
            Plan::Reject(reason) => (Outcome::Rejected, Some(reason), None),
            Plan::OutOfOrder(reason) => {
                tracing::Span::current().record("outcome", "out_of_order");
                return Err(ApiError::OutOfOrder(reason));
            }
        };
        tracing::Span::current().record("outcome", outcome.as_str());
        let _ = self.outcome.set(outcome.as_str());
        Ok(Completion::succeeded(
            200,
            ack(self.event_id, outcome, reason, transfer_id),
        ))
    }
}
