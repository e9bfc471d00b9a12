//! `payment.callback`: one verified delivery, parsed once, applied inside the idempotency
//! transaction. The general path reads the state (order first, then payment, under locks),
//! plans in Rust, and applies the plan's [`Effect`](super::effect::Effect); the one-statement path sends the effect
//! of the plan a capture expects. Both write through the same guarded routines.

use diesel::QueryResult;
use diesel_async::AsyncPgConnection;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::ack::{ACK_STATUS, CallbackOutcome};
use super::apply::{Applied, apply};
use super::batcher::{BatchItem, Batcher};
use super::capture::{Capture, run_batch};
use super::delivery::{Delivery, record_delivery};
use super::dispute::{Dispute, DisputeKey, DisputeState};
use super::effect::Source;
use super::event::{Parsed, PaymentEvent, PaymentSnapshot, Reading, SnapshotStatus};
use super::model::PaymentState;
use super::model::{Payment, PaymentKey};
use super::snapshot::{self, Stage};
use super::state::{Disputes, NoWrites, OrderState, Plan, expected_capture, plan};
use crate::idempotency::error::IdempotencyError;
use crate::idempotency::record::{Fingerprint, IdempotentRequest, OneStatement};
use crate::idempotency::{IdempotentWork, Respond};
use crate::ledger::{self, EventPosting};
use crate::orders::model::Order;

/// How many times a plan is made again when its guarded writes found the state changed
/// between the read and the write (a concurrent first capture of the same payment id).
const MAX_PLANS: usize = 3;

/// One verified delivery of a provider event.
pub struct ProcessCallback<'a> {
    source: Source<'a>,
    /// The worker's queue for one-statement captures.
    batcher: &'a Batcher<Capture>,
    event_id: &'a str,
    body: &'a [u8],
    /// The body's `type` as sent, for the event log.
    event_type: Option<String>,
    parsed: Parsed,
    /// The trace the delivery is received in, kept with it in the event log.
    trace_id: Option<&'a str>,
}

impl<'a> ProcessCallback<'a> {
    /// `reading` is `body` read once, in its provider's format.
    pub fn new(
        source: Source<'a>,
        reading: Reading,
        batcher: &'a Batcher<Capture>,
        event_id: &'a str,
        body: &'a [u8],
    ) -> Self {
        Self {
            source,
            batcher,
            event_id,
            body,
            event_type: reading.event_type,
            parsed: reading.parsed,
            trace_id: None,
        }
    }

    /// Keeps `trace_id` with the delivery in the event log.
    pub fn traced(self, trace_id: Option<&'a str>) -> Self {
        Self { trace_id, ..self }
    }
}

impl IdempotentWork for ProcessCallback<'_> {
    type Output = CallbackOutcome;

    fn run<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, Result<CallbackOutcome, IdempotencyError>> {
        self.process(conn).boxed()
    }

    /// A capture of a named order goes through the one-statement path first.
    fn run_in_one_statement<'c>(
        &'c self,
        request: &'c IdempotentRequest,
        respond: Respond<'c, CallbackOutcome>,
    ) -> Option<BoxFuture<'c, Result<OneStatement<CallbackOutcome>, IdempotencyError>>> {
        let capture;
        let event = match &self.parsed {
            Parsed::Event(event) => event,
            // A provider's state that is only a capture (nothing refunded or charged back) is
            // that capture, and takes its one-statement path.
            Parsed::Snapshot(s) => match s.status {
                SnapshotStatus::Captured(amount)
                    if s.refunded_total == 0 && s.charged_back_total == 0 =>
                {
                    capture = PaymentEvent::Succeeded {
                        payment_id: s.payment_id.clone(),
                        order_id: s.order_id,
                        amount,
                        currency: s.currency,
                    };
                    &capture
                }
                _ => return None,
            },
            Parsed::Ignored(_) | Parsed::Rejected { .. } => return None,
        };
        let plan = expected_capture(event)?;
        let outcome = plan.outcome(None);
        let completion = respond(&outcome);
        let effect = plan
            .effect(self.source, self.event_id, event.payment_id(), None)
            .ok()?;
        let capture = Capture::new(
            effect,
            self.body,
            self.event_type.as_deref(),
            &outcome,
            request,
            &completion,
        )?
        .traced(self.trace_id);
        Some(self.batcher.run(capture).boxed())
    }
}

impl ProcessCallback<'_> {
    /// Decides the outcome, then records the delivery with it, in the same transaction.
    #[tracing::instrument(skip_all, fields(provider = %self.source.provider, event_id = %self.event_id))]
    async fn process(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<CallbackOutcome, IdempotencyError> {
        let Decision { outcome, logged_as } = self.decide(conn).await?;
        let delivery = Delivery {
            merchant_id: self.source.merchant_id,
            provider: self.source.provider,
            event_id: logged_as.as_deref().unwrap_or(self.event_id),
            body: self.body,
            event_type: self.event_type.as_deref(),
            trace_id: self.trace_id,
        };
        record_delivery(conn, delivery, &outcome, ACK_STATUS).await?;
        Ok(outcome)
    }

    async fn decide(&self, conn: &mut AsyncPgConnection) -> Result<Decision, IdempotencyError> {
        let event = match &self.parsed {
            Parsed::Event(event) => event,
            Parsed::Snapshot(snapshot) => return self.decide_snapshot(conn, snapshot).await,
            Parsed::Ignored(reason) => return Ok(CallbackOutcome::ignored(reason).into()),
            Parsed::Rejected { reason, detail } => {
                return Ok(CallbackOutcome::rejected(reason, Some(detail.clone())).into());
            }
        };
        let mut state = self.read_state(conn, event).await?;
        for _ in 0..MAX_PLANS {
            let plan = plan(
                event,
                state.order.as_ref(),
                state.payment.as_ref(),
                state.disputes(),
            );
            match self.apply_plan(conn, event, &plan).await? {
                Some(outcome) => return Ok(outcome),
                // Another first capture of this payment id committed between the read and the
                // write: decide again from what is there now.
                None => state = self.read_state(conn, event).await?,
            }
        }
        Err(IdempotencyError::NotYet("state_kept_changing"))
    }

    /// Brings the books to a provider's whole state of a payment, stage by stage in this
    /// transaction (the capture, then refunds, then chargebacks, each the ordinary event the
    /// books still miss, planned as any other). The first transfer is posted under the event
    /// id, later ones under `{event id}#2`, `#3`. Waiting cannot help a snapshot (its state is
    /// all there is under its event id), so a stage that would wait is rejected instead.
    async fn decide_snapshot(
        &self,
        conn: &mut AsyncPgConnection,
        snapshot: &PaymentSnapshot,
    ) -> Result<Decision, IdempotencyError> {
        let key = PaymentKey {
            merchant_id: self.source.merchant_id,
            provider: self.source.provider,
            payment_id: &snapshot.payment_id,
        };
        let mut outcomes = Vec::new();
        let mut known = false;
        for stage in Stage::ALL {
            let mut decided = false;
            for _ in 0..MAX_PLANS {
                // Unlocked: the locks are taken by `read_state`, order first, and the plan is
                // made from what it read; this read only says whether the stage has work.
                let payment = Payment::find(conn, key, false)
                    .await?
                    .map(|p| p.state())
                    .transpose()?;
                known |= payment.is_some();
                let Some(event) = snapshot::step(snapshot, stage, payment.as_ref()) else {
                    decided = true;
                    break;
                };
                let state = self.read_state(conn, &event).await?;
                let plan = plan(
                    &event,
                    state.order.as_ref(),
                    state.payment.as_ref(),
                    state.disputes(),
                );
                let posted = outcomes
                    .iter()
                    .filter(|o: &&CallbackOutcome| o.transfer_id.is_some())
                    .count();
                let ledger_id = match posted {
                    0 => self.event_id.to_owned(),
                    n => format!("{}#{}", self.event_id, n + 1),
                };
                match self.write(conn, &event, &plan, &ledger_id).await {
                    Ok(Written::Answered(outcome)) => outcomes.push(outcome),
                    Ok(Written::StateChanged) => continue,
                    // Under an id derived from this event's: this part of the same state is
                    // in the books.
                    Ok(Written::AlreadyPosted) => {
                        outcomes.push(CallbackOutcome::ignored("already_applied"));
                    }
                    Err(IdempotencyError::NotYet(reason)) => {
                        outcomes.push(CallbackOutcome::rejected(
                            reason,
                            Some("the provider's state of the payment cannot be applied".into()),
                        ))
                    }
                    Err(error) => return Err(error),
                }
                decided = true;
                break;
            }
            if !decided {
                return Err(IdempotencyError::NotYet("state_kept_changing"));
            }
        }
        Ok(snapshot::combined(outcomes, snapshot, known).into())
    }

    /// Reads the event's order and payment, locked, order first then payment, so two events of
    /// one order (a payment and its refund or dispute) wait for each other instead of
    /// deadlocking; then, for a dispute event, its dispute (every event of a dispute holds its
    /// payment's lock by then). Pipelined statements execute in the order they were sent, so
    /// that order holds.
    async fn read_state(
        &self,
        shared: &AsyncPgConnection,
        event: &PaymentEvent,
    ) -> Result<State, IdempotencyError> {
        let key = PaymentKey {
            merchant_id: self.source.merchant_id,
            provider: self.source.provider,
            payment_id: event.payment_id(),
        };
        let order_id = match event {
            PaymentEvent::Succeeded { order_id, .. } | PaymentEvent::Failed { order_id, .. } => {
                *order_id
            }
            PaymentEvent::Refunded { .. } | PaymentEvent::Dispute { .. } => {
                Payment::find(shared, key, false)
                    .await?
                    .and_then(|p| p.order_id)
            }
        };
        let lock_order = async {
            match order_id {
                Some(id) => Order::lock_for_merchant(shared, self.source.merchant_id, id).await,
                None => Ok(None),
            }
        };
        let read_disputes = async {
            match event {
                PaymentEvent::Dispute {
                    dispute_id,
                    payment_id,
                    ..
                } => {
                    let key = DisputeKey {
                        merchant_id: self.source.merchant_id,
                        provider: self.source.provider,
                        dispute_id,
                    };
                    Dispute::for_event(shared, key, payment_id).await
                }
                _ => Ok(Vec::new()),
            }
        };
        let (mut order, payment, disputes) =
            futures_util::try_join!(lock_order, Payment::find(shared, key, true), read_disputes)?;
        // A refund's or a dispute's order is the one its payment names, read before any lock.
        // When the payment's capture committed between that read and the locked one, the
        // order was not locked (nor read): lock it now, or the plan would move the payment and
        // leave its order behind (a payment disputed, its order still paid). The payment's own
        // lock is held by now, so its order id cannot change again.
        if let Some(found) = &payment
            && found.order_id != order_id
            && let Some(id) = found.order_id
        {
            order = Order::lock_for_merchant(shared, self.source.merchant_id, id).await?;
        }
        Ok(State {
            order: order.as_ref().map(order_state).transpose()?,
            payment: payment.map(|p| p.state()).transpose()?,
            disputes: disputes
                .iter()
                .map(Dispute::state)
                .collect::<QueryResult<_>>()?,
        })
    }

    /// Applies `plan`: the decision, or `None` when the state changed under it.
    async fn apply_plan(
        &self,
        conn: &mut AsyncPgConnection,
        event: &PaymentEvent,
        plan: &Plan,
    ) -> Result<Option<Decision>, IdempotencyError> {
        Ok(match self.write(conn, event, plan, self.event_id).await? {
            Written::Answered(outcome) => Some(outcome.into()),
            Written::StateChanged => None,
            Written::AlreadyPosted => self.already_posted(conn, event, plan).await?,
        })
    }

    /// The event id, or the event's refund id, posted before. The same body again is a late
    /// redelivery and posts nothing. Another body under a posted event id is another event
    /// (the provider reused the id after the gateway's record of the first one expired): its
    /// plan for a reused id is written under a ledger id of its own, derived from the event id
    /// and the body, so its money is in the books and a redelivery of it cannot post twice
    /// either; the event log lists it under that id. Only this branch pays for the extra read.
    async fn already_posted(
        &self,
        conn: &mut AsyncPgConnection,
        event: &PaymentEvent,
        plan: &Plan,
    ) -> Result<Option<Decision>, IdempotencyError> {
        let posting = ledger::event_posting(
            conn,
            self.source.merchant_id,
            self.source.provider,
            self.event_id,
            self.body,
        )
        .await?;
        if posting != EventPosting::AnotherBody {
            return Ok(Some(CallbackOutcome::ignored("already_applied").into()));
        }
        let ledger_id = reused_event_id(self.event_id, self.body);
        let outcome = match self
            .write(conn, event, &plan.for_reused_event_id(), &ledger_id)
            .await?
        {
            Written::Answered(outcome) => outcome,
            Written::StateChanged => return Ok(None),
            Written::AlreadyPosted => CallbackOutcome::ignored("already_applied"),
        };
        Ok(Some(Decision {
            outcome,
            logged_as: Some(ledger_id),
        }))
    }

    /// Writes `plan`'s effect with its transfer under `ledger_event_id`.
    async fn write(
        &self,
        conn: &mut AsyncPgConnection,
        event: &PaymentEvent,
        plan: &Plan,
        ledger_event_id: &str,
    ) -> Result<Written, IdempotencyError> {
        let refund_id = match event {
            PaymentEvent::Refunded { refund_id, .. } => refund_id.as_deref(),
            _ => None,
        };
        let effect = match plan.effect(self.source, ledger_event_id, event.payment_id(), refund_id)
        {
            Ok(effect) => effect,
            Err(NoWrites::Ignore(reason)) => {
                return Ok(Written::Answered(CallbackOutcome::ignored(reason)));
            }
            Err(NoWrites::Reject(reason)) => {
                return Ok(Written::Answered(CallbackOutcome::rejected(reason, None)));
            }
            Err(NoWrites::Wait(reason)) => return Err(IdempotencyError::NotYet(reason)),
        };
        Ok(match apply(conn, &effect).await? {
            Applied::Done(transfer_id) => Written::Answered(plan.outcome(transfer_id)),
            Applied::AlreadyPosted => Written::AlreadyPosted,
            Applied::StateChanged => Written::StateChanged,
        })
    }
}

/// What the general path read for an event.
struct State {
    order: Option<OrderState>,
    payment: Option<PaymentState>,
    /// For a dispute event: the dispute it names and every dispute of its payment.
    disputes: Vec<DisputeState>,
}

impl State {
    fn disputes(&self) -> Disputes<'_> {
        Disputes(&self.disputes)
    }
}

/// What the general path decided for a delivery.
struct Decision {
    outcome: CallbackOutcome,
    /// The id the event log records the delivery under, when it is not the event id.
    logged_as: Option<String>,
}

impl From<CallbackOutcome> for Decision {
    fn from(outcome: CallbackOutcome) -> Self {
        Decision {
            outcome,
            logged_as: None,
        }
    }
}

/// What writing a plan found.
enum Written {
    Answered(CallbackOutcome),
    StateChanged,
    /// Its transfer's event id (or refund id) was posted before; nothing was written.
    AlreadyPosted,
}

/// The ledger and event-log id of a delivery whose event id posted another body:
/// `{event id}~{SHA-256 of the body, hex}`, the same for every redelivery of that body. Its
/// transfer is still unique per (merchant, provider, id) like any other.
fn reused_event_id(event_id: &str, body: &[u8]) -> String {
    format!("{event_id}~{}", Fingerprint::of(body).as_str())
}

// Here rather than in `capture.rs`, so the statements need not know the batcher.
impl BatchItem for Capture {
    type Output = CallbackOutcome;

    fn run_alone<'c>(
        &'c self,
        conn: &'c mut AsyncPgConnection,
    ) -> BoxFuture<'c, QueryResult<OneStatement<CallbackOutcome>>> {
        self.run(conn).boxed()
    }

    fn run_batch<'c>(
        conn: &'c mut AsyncPgConnection,
        items: &'c [&'c Self],
    ) -> BoxFuture<'c, QueryResult<Vec<OneStatement<CallbackOutcome>>>> {
        run_batch(conn, items).boxed()
    }
}

/// The order as the state machine needs it.
fn order_state(order: &Order) -> diesel::QueryResult<OrderState> {
    Ok(OrderState {
        id: order.id,
        amount_minor: order.amount_minor,
        currency: order.currency.clone(),
        status: order.status()?,
    })
}
