//! `payment.callback`: one verified delivery, parsed once, applied inside the idempotency
//! transaction ([`execute`], which the callback route and a person's [`replay`] of a stored
//! event both call). The general path reads the state (order first, then payment, under locks),
//! plans in Rust, and applies the plan's [`Effect`](super::effect::Effect); the one-statement path sends the effect
//! of the plan a capture expects. Both write through the same guarded routines.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel_async::AsyncPgConnection;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;

use super::ack::{ACK_STATUS, CallbackOutcome, Outcome};
use super::apply::{Applied, apply};
use super::batcher::{BatchItem, Batcher};
use super::capture::{Capture, run_batch};
use super::delivery::{Delivery, record_delivery, stored_body};
use super::dispute::{Dispute, DisputeKey, DisputeState};
use super::effect::{Effect, Source};
use super::event::{
    Parsed, PaymentEvent, PaymentSnapshot, Reading, SnapshotRefunds, SnapshotStatus,
};
use super::model::PaymentState;
use super::model::{Payment, PaymentKey};
use super::reader::{AskedEvent, EventReader};
use super::snapshot::{self, Stage};
use super::state::{Disputes, NoWrites, OrderState, Plan, expected_capture, plan};
use crate::access::audit::{self, Action, Entry};
use crate::db::pool::PgPool;
use crate::db::replication::Replication;
use crate::idempotency::audited::Audited;
use crate::idempotency::error::IdempotencyError;
use crate::idempotency::record::{Completion, Fingerprint, IdempotentRequest, OneStatement};
use crate::idempotency::{self, Executed, IdempotentWork, Respond};
use crate::ledger::{self, BookedRefund};
use crate::notifications::Notifying;
use crate::orders::model::Order;
use crate::payouts;

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

/// What one worker runs provider callbacks with: its callback pool, the replay barrier, its
/// queue of one-statement captures, and the merchants it sends notifications to.
#[derive(Clone, Copy)]
pub struct Worker<'a> {
    pub pool: &'a PgPool,
    pub replication: &'a Replication,
    pub batcher: &'a Batcher<Capture>,
    pub notifying: &'a Notifying,
}

/// Claims, applies and acknowledges the event `event_id` of a verified delivery in one
/// transaction; `replayed_by`: a person's replay of a stored event, whose audit row joins that
/// transaction.
pub async fn execute(
    worker: Worker<'_>,
    provider: &dyn EventReader,
    (event_id, body): (&str, &[u8]),
    now: DateTime<Utc>,
    trace_id: Option<&str>,
    replayed_by: Option<&audit::Context>,
) -> Result<Executed<CallbackOutcome>, IdempotencyError> {
    let idempotent = provider.idempotent_request(event_id, body, now);
    let work = ProcessCallback::new(
        Source {
            merchant_id: provider.merchant_id(),
            provider: provider.name(),
            // Decided now, from this gateway's view of the merchant's endpoint (an endpoint made
            // by API reaches it within a second): a lookup in memory, nothing on the database.
            notify: worker.notifying.wants(provider.merchant_id()),
        },
        provider.read_event(body),
        worker.batcher,
        event_id,
        body,
    )
    .traced(trace_id);
    let respond =
        |outcome: &CallbackOutcome| Completion::succeeded(ACK_STATUS, outcome.ack(event_id));
    let (pool, replication) = (worker.pool, worker.replication);
    let executed = match replayed_by {
        None => idempotency::execute(pool, replication, &idempotent, &work, &respond).await?,
        Some(context) => {
            let name = provider.name();
            let entry =
                |outcome: &CallbackOutcome| replay_entry(name, event_id, outcome.outcome.as_str());
            let audited = Audited::new(&work, context, entry);
            idempotency::execute(pool, replication, &idempotent, &audited, &respond).await?
        }
    };
    if let Executed::First { output, .. } = &executed
        && matches!(output.outcome, Outcome::Applied | Outcome::Held)
    {
        // Committed: the sender finds what the change staged now rather than at its next poll.
        worker.notifying.committed(provider.merchant_id());
    }
    Ok(executed)
}

/// A person's replay of `provider`'s stored event `event_id` (the admin route's and the
/// console's): its stored verified body runs through the callback path again, as a redelivery
/// of it would (no signature: it was verified when it was stored). For a provider that must be
/// asked, the stored state is not run again: the provider's API is asked now and what it
/// answers runs, so an older state can never be re-applied over newer books, and an event
/// stored `unknown_resource` (a key of the wrong mode) is recovered once the key is right. Its
/// audit row commits in the event's transaction when the event runs, or is written alone when
/// the stored answer is sent again (nothing ran). `None`: no such event is stored.
pub async fn replay(
    worker: Worker<'_>,
    api_pool: &PgPool,
    provider: &dyn EventReader,
    event_id: &str,
    audit: &audit::Context,
    trace_id: Option<&str>,
) -> Result<Option<Executed<CallbackOutcome>>, IdempotencyError> {
    let (merchant_id, body) = {
        let mut conn = api_pool.get().await?;
        match stored_body(&mut conn, provider.name(), event_id).await? {
            Some(stored) => stored,
            None => return Ok(None),
        }
    };
    // The books the event moved, whatever merchant the provider's configuration names today.
    let provider = &OfMerchant {
        provider,
        merchant_id,
    };
    let now = Utc::now();
    let asked = match provider.ask_again(event_id, &body, now) {
        Some(asking) => Some(asking.await.map_err(|why| {
            tracing::warn!(error = %why, "replay: the provider's API could not be asked");
            IdempotencyError::ProviderUnavailable
        })?),
        None => None,
    };
    let events = asked.unwrap_or_else(|| vec![(event_id.to_owned(), body)]);
    let mut first = None;
    for (id, body) in &events {
        let executed = execute(worker, provider, (id, body), now, trace_id, Some(audit)).await?;
        if let Executed::Replayed(_) = &executed {
            // Answered from the stored record: nothing ran, so no transaction to join; the
            // replay itself is still on the record.
            let mut conn = api_pool.get().await?;
            let entry = replay_entry(provider.name(), id, "replayed");
            audit::record(&mut conn, audit, entry).await?;
        }
        first.get_or_insert(executed);
    }
    Ok(first)
}

/// A provider as the books of one merchant read it: a stored event is replayed for the
/// merchant it was stored for.
struct OfMerchant<'a> {
    provider: &'a dyn EventReader,
    merchant_id: i64,
}

impl EventReader for OfMerchant<'_> {
    fn merchant_id(&self) -> i64 {
        self.merchant_id
    }

    fn name(&self) -> &str {
        self.provider.name()
    }

    fn idempotent_request(
        &self,
        event_id: &str,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> IdempotentRequest {
        let mut request = self.provider.idempotent_request(event_id, body, now);
        request.scope.user_id = self.merchant_id;
        request
    }

    fn read_event(&self, body: &[u8]) -> Reading {
        self.provider.read_event(body)
    }

    fn ask_again<'a>(
        &'a self,
        event_id: &'a str,
        body: &'a [u8],
        now: DateTime<Utc>,
    ) -> Option<BoxFuture<'a, Result<Vec<AskedEvent>, String>>> {
        self.provider.ask_again(event_id, body, now)
    }
}

/// The audit row of a person's replay of a stored event: `outcome` is what the event did now,
/// or `replayed` when the stored answer was sent again.
fn replay_entry(provider: &str, event_id: &str, outcome: &str) -> Entry {
    Entry::new(
        Action::EventReplay,
        Some(format!("event:{provider}/{event_id}")),
        outcome,
    )
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
                SnapshotStatus::Captured(amount) if s.is_capture_only() => {
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
            Parsed::Payout(_) | Parsed::Ignored(_) | Parsed::Rejected { .. } => return None,
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
            Parsed::Payout(payout) => {
                let outcome = payouts::decide(conn, self.source, self.event_id, payout).await?;
                return Ok(outcome.into());
            }
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
                state.refund,
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
    /// transaction (the capture, then each refund and chargeback the books still miss or hold
    /// wrongly, each the ordinary event planned as any other; [`snapshot::next`]). The first
    /// transfer is posted under the event id, later ones under `{event id}#2`, `#3`. Waiting
    /// cannot help a snapshot (its state is all there is under its event id), so a step that
    /// would wait is rejected instead.
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
        // Each step changes the books, so the next one reads them again; a snapshot has at
        // most a step per refund and two per chargeback, and a few for its status.
        let steps = 8 + 2 * (snapshot_refunds(snapshot) + snapshot.chargebacks.len());
        for stage in Stage::ALL {
            let mut done = false;
            for _ in 0..steps {
                // Unlocked: the locks are taken by `read_state`, order first, and the plan is
                // made from what it read; this read only says what the stage still has to do.
                let (payment, disputes, refunds) = self.snapshot_books(conn, key, snapshot).await?;
                known |= payment.is_some();
                let books = snapshot::Books {
                    payment: payment.as_ref(),
                    refunds: &refunds,
                    disputes: &disputes,
                };
                let Some(event) = snapshot::next(snapshot, stage, books) else {
                    done = true;
                    break;
                };
                let state = self.read_state(conn, &event).await?;
                let plan = plan(
                    &event,
                    state.order.as_ref(),
                    state.payment.as_ref(),
                    state.disputes(),
                    state.refund,
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
                    Ok(Written::Answered(outcome)) => {
                        let moved = outcome.transfer_id.is_some();
                        outcomes.push(outcome);
                        if !moved {
                            // Planned and answered without a transfer (ignored, rejected): the
                            // books will not change, so the stage has nothing more it can do.
                            done = true;
                            break;
                        }
                    }
                    Ok(Written::StateChanged) => continue,
                    // Under an id derived from this event's: this part of the same state is
                    // in the books.
                    Ok(Written::AlreadyPosted) => {
                        outcomes.push(CallbackOutcome::ignored("already_applied"));
                        done = true;
                        break;
                    }
                    Err(IdempotencyError::NotYet(reason)) => {
                        outcomes.push(CallbackOutcome::rejected(
                            reason,
                            Some("the provider's state of the payment cannot be applied".into()),
                        ));
                        done = true;
                        break;
                    }
                    Err(error) => return Err(error),
                }
            }
            if !done {
                return Err(IdempotencyError::NotYet("state_kept_changing"));
            }
        }
        Ok(snapshot::combined(outcomes, snapshot, known).into())
    }

    /// What the books hold for a snapshot's payment: the payment, its disputes, and each
    /// refund id the snapshot lists.
    async fn snapshot_books(
        &self,
        conn: &mut AsyncPgConnection,
        key: PaymentKey<'_>,
        snapshot: &PaymentSnapshot,
    ) -> Result<
        (
            Option<PaymentState>,
            Vec<DisputeState>,
            HashMap<String, BookedRefund>,
        ),
        IdempotencyError,
    > {
        let payment = Payment::find(conn, key, false)
            .await?
            .map(|p| p.state())
            .transpose()?;
        let disputes = Dispute::of_payment(conn, key.merchant_id, key.provider, key.payment_id)
            .await?
            .iter()
            .map(Dispute::state)
            .collect::<QueryResult<Vec<_>>>()?;
        let mut refunds = HashMap::new();
        if let SnapshotRefunds::Listed(list) = &snapshot.refunds {
            for refund in list {
                let booked =
                    ledger::booked_refund(conn, key.merchant_id, key.provider, &refund.id).await?;
                refunds.insert(refund.id.clone(), booked);
            }
        }
        Ok((payment, disputes, refunds))
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
            PaymentEvent::Refunded { .. }
            | PaymentEvent::RefundReturned { .. }
            | PaymentEvent::Dispute { .. } => Payment::find(shared, key, false)
                .await?
                .and_then(|p| p.order_id),
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
        let read_refund = async {
            match event {
                PaymentEvent::RefundReturned { refund_id, .. } => ledger::booked_refund(
                    shared,
                    self.source.merchant_id,
                    self.source.provider,
                    refund_id,
                )
                .await
                .map(Some),
                _ => Ok(None),
            }
        };
        let (mut order, payment, disputes, refund) = futures_util::try_join!(
            lock_order,
            Payment::find(shared, key, true),
            read_disputes,
            read_refund
        )?;
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
            refund,
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

    /// The event id, or the event's refund or dispute id, posted before. The same event again
    /// (its transfer would be the one the event id posted: the same kind, payment, refund id
    /// and amount) is a late redelivery and posts nothing, whatever months of the
    /// event log are still there. Another event under a posted event id (the provider reused
    /// the id after the gateway's record of the first one expired) is written under a ledger
    /// id of its own, derived from the event id and the body, so its money is in the books and
    /// a redelivery of it cannot post twice either; the event log lists it under that id. Only
    /// this branch pays for the extra read.
    async fn already_posted(
        &self,
        conn: &mut AsyncPgConnection,
        event: &PaymentEvent,
        plan: &Plan,
    ) -> Result<Option<Decision>, IdempotencyError> {
        let posted = ledger::posted_transfer(
            conn,
            self.source.merchant_id,
            self.source.provider,
            self.event_id,
        )
        .await?;
        let same_event = match &posted {
            // The conflict was on the refund or dispute id: that refund or dispute is booked.
            None => true,
            Some(posted) => self.would_post(event, plan).is_some_and(|effect| {
                let clearing = ledger::psp_clearing(self.source.provider);
                let moved = [
                    (&effect.account_a, effect.amount_a),
                    (&effect.account_b, effect.amount_b),
                    (&effect.account_c, effect.amount_c),
                ]
                .into_iter()
                .filter(|(account, _)| account.as_deref() == Some(clearing.as_str()))
                .filter_map(|(_, amount)| amount)
                .sum::<i64>();
                // Not the dispute id: older versions keyed some disputes otherwise (by the
                // payment, by a running total), and a redelivery of such an event is the same
                // event all the same.
                effect.kind == Some(posted.kind.as_str())
                    && effect.payment_id == posted.payment_id
                    && effect.refund_id == posted.refund_id
                    && moved == posted.clearing_minor
            }),
        };
        if same_event {
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

    /// The effect `plan` writes for `event` under its own event id, if it writes one.
    fn would_post(&self, event: &PaymentEvent, plan: &Plan) -> Option<Effect> {
        plan.effect(
            self.source,
            self.event_id,
            event.payment_id(),
            refund_id_of(event),
        )
        .ok()
    }

    /// Writes `plan`'s effect with its transfer under `ledger_event_id`.
    async fn write(
        &self,
        conn: &mut AsyncPgConnection,
        event: &PaymentEvent,
        plan: &Plan,
        ledger_event_id: &str,
    ) -> Result<Written, IdempotencyError> {
        let effect = match plan.effect(
            self.source,
            ledger_event_id,
            event.payment_id(),
            refund_id_of(event),
        ) {
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

/// How many refunds a snapshot names.
fn snapshot_refunds(snapshot: &PaymentSnapshot) -> usize {
    match &snapshot.refunds {
        SnapshotRefunds::Total(_) => 1,
        SnapshotRefunds::Listed(list) => list.len(),
    }
}

/// The refund id an event's transfer carries.
fn refund_id_of(event: &PaymentEvent) -> Option<&str> {
    match event {
        PaymentEvent::Refunded { refund_id, .. } => refund_id.as_deref(),
        PaymentEvent::RefundReturned { refund_id, .. } => Some(refund_id.as_str()),
        _ => None,
    }
}

/// What the general path read for an event.
struct State {
    order: Option<OrderState>,
    payment: Option<PaymentState>,
    /// For a dispute event: the dispute it names and every dispute of its payment.
    disputes: Vec<DisputeState>,
    /// For a returned refund: what the books hold for it.
    refund: Option<BookedRefund>,
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
