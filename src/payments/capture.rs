//! The one-statement first delivery (migration 000007's `callback_first_delivery`): a
//! `payment.succeeded` for a pending order, the bulk of all callbacks, claimed, applied and
//! acknowledged in one statement, while a redelivery of it costs one indexed read. Rust still
//! decides: the plan is made (`expected_capture` in [`super::state`]) for the state the event expects (its order pending with the
//! event's amount and currency, no captured payment), and the database applies that plan's
//! [`Effect`] through the same guarded writes as the general path. When a row is not in the
//! expected state, nothing is written and the general path decides from the real state.
//! Concurrent captures share one statement and one commit (see [`super::batcher`]).

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::pg::{Pg, PgValue};
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{
    Array, BigInt, Bool, Bytea, Int4, Nullable, Record, SqlType, Text, Timestamptz,
};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::ack::CallbackOutcome;
use super::effect::Effect;
use crate::db::one_row::CommittedResult;
use crate::idempotency::record::{
    Completion, IdempotentRequest, OneStatement, RecordStatus, Scope, StoredResponse, existing,
    walk_scope,
};

/// How long an item of a batch may wait for a lock before it is sent down the general path.
pub const BATCH_LOCK_TIMEOUT: &str = "100ms";

/// The database type `first_delivery_result`.
#[derive(Debug, Clone, Copy, SqlType, QueryId)]
#[diesel(postgres_type(name = "first_delivery_result"))]
pub struct FirstDeliveryResultSql;

/// What `callback_first_delivery` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromSqlRow)]
pub enum FirstDelivery {
    /// Claimed, applied and finished: committed with the statement.
    Finished,
    /// A record committed by an earlier delivery.
    Existing,
    /// Another delivery holds the key past the lock timeout.
    InFlight,
    /// A row was not in the expected state; nothing was written.
    Declined,
}

impl FromSql<FirstDeliveryResultSql, Pg> for FirstDelivery {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        match value.as_bytes() {
            b"finished" => Ok(FirstDelivery::Finished),
            b"existing" => Ok(FirstDelivery::Existing),
            b"in_flight" => Ok(FirstDelivery::InFlight),
            b"declined" => Ok(FirstDelivery::Declined),
            other => Err(format!(
                "unknown first_delivery_result {:?}",
                String::from_utf8_lossy(other)
            )
            .into()),
        }
    }
}

/// One delivery's first-delivery attempt: every value the statement binds, owned so it can
/// wait in a batch.
#[derive(Debug)]
pub struct Capture {
    scope: Scope,
    request_hash: String,
    expires_at: DateTime<Utc>,
    body: Vec<u8>,
    effect: Effect,
    /// The ack without its transfer id, which the database adds.
    ack: String,
    /// For the event log: the body's type, the outcome and its reason.
    event_type: Option<String>,
    outcome: &'static str,
    reason: Option<&'static str>,
    /// The trace the delivery was received in, for the event log.
    trace_id: Option<String>,
}

impl Capture {
    /// The attempt for one delivery whose expected plan writes `effect`; `None` when its
    /// answer would not be a stored 200 (the statement only ever stores that).
    pub fn new(
        effect: Effect,
        body: &[u8],
        event_type: Option<&str>,
        outcome: &CallbackOutcome,
        request: &IdempotentRequest,
        completion: &Completion,
    ) -> Option<Self> {
        if completion.record_status != RecordStatus::Succeeded || completion.http_status != 200 {
            return None;
        }
        Some(Self {
            scope: request.scope.clone(),
            request_hash: request.fingerprint.as_str().to_owned(),
            expires_at: request.expires_at,
            body: body.to_vec(),
            effect,
            ack: completion.body.to_string(),
            event_type: event_type.map(str::to_owned),
            outcome: outcome.outcome.as_str(),
            reason: outcome.reason,
            trace_id: None,
        })
    }

    /// Keeps `trace_id` with the delivery in the event log.
    pub fn traced(self, trace_id: Option<&str>) -> Self {
        Self {
            trace_id: trace_id.map(str::to_owned),
            ..self
        }
    }

    /// Runs this attempt alone: one statement.
    pub async fn run(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> QueryResult<OneStatement<CallbackOutcome>> {
        // Outside a transaction: answered only after the commit's outcome.
        let (result, status, response_status, response_body, request_hash): Row =
            Single(self).committed_result(conn).await?;
        answer(result, status, response_status, response_body, request_hash)
    }
}

/// Runs several attempts in one statement and one commit; the answers come in their order.
pub async fn run_batch(
    conn: &mut AsyncPgConnection,
    captures: &[&Capture],
) -> QueryResult<Vec<OneStatement<CallbackOutcome>>> {
    let mut rows: Vec<BatchRow> = Batch::new(captures).load(conn).await?;
    // Redeliveries are answered first, then the new items: match answers by item number.
    rows.sort_unstable_by_key(|row| row.0);
    if rows.len() != captures.len() {
        return Err(corrupt(format!(
            "{} answers for a batch of {}",
            rows.len(),
            captures.len()
        )));
    }
    rows.into_iter()
        .enumerate()
        .map(
            |(i, (item, result, status, response_status, response_body, request_hash))| {
                if usize::try_from(item).ok() != Some(i + 1) {
                    return Err(corrupt(format!("batch answer {item} out of order")));
                }
                answer(result, status, response_status, response_body, request_hash)
            },
        )
        .collect()
}

type Row = (
    FirstDelivery,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

/// A batch answer: the item's position (from 1), then a [`Row`].
type BatchRow = (
    i32,
    FirstDelivery,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

fn answer(
    result: FirstDelivery,
    status: Option<String>,
    response_status: Option<i32>,
    response_body: Option<String>,
    request_hash: Option<String>,
) -> QueryResult<OneStatement<CallbackOutcome>> {
    match result {
        FirstDelivery::Finished => Ok(OneStatement::Finished(
            StoredResponse {
                status: 200,
                body: response_body
                    .ok_or_else(|| corrupt("a finished delivery without its ack".into()))?,
            },
            CallbackOutcome::applied(None),
        )),
        FirstDelivery::Existing => existing(status, response_status, response_body, request_hash)
            .map(OneStatement::Existing),
        FirstDelivery::InFlight => Ok(OneStatement::InFlight),
        FirstDelivery::Declined => Ok(OneStatement::Declined),
    }
}

fn corrupt(what: String) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}

/// COALESCE(the committed record's answer, the first delivery): a redelivery is answered by
/// the indexed read and the function is never called; a first delivery runs it. Written by
/// hand so the statement is prepared once per connection (diesel caches a query by its static
/// id).
struct Single<'a>(&'a Capture);

impl QueryId for Single<'_> {
    type QueryId = Single<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for Single<'_> {
    /// (result, status, response status, response text, request hash).
    type SqlType = Record<(
        FirstDeliveryResultSql,
        Nullable<Text>,
        Nullable<Int4>,
        Nullable<Text>,
        Nullable<Text>,
    )>;
}

impl QueryFragment<Pg> for Single<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let c = self.0;
        out.push_sql(
            "SELECT COALESCE((SELECT ROW('existing'::first_delivery_result, r.status, \
             r.response_status, r.response_body, r.request_hash) FROM idempotency_record(",
        );
        walk_scope(&c.scope, &mut out)?;
        out.push_sql(") r), callback_first_delivery(");
        out.push_bind_param::<Text, _>(c.scope.op.as_str_ref())?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.scope.key)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.request_hash)?;
        out.push_sql(", ");
        out.push_bind_param::<Timestamptz, _>(&c.expires_at)?;
        out.push_sql(", ");
        out.push_bind_param::<Bytea, _>(&c.body)?;
        out.push_sql(", ");
        c.effect.walk_params(&mut out)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.ack)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&c.event_type)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.outcome)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&c.reason)?;
        out.push_sql(", ");
        out.push_bind_param::<Bool, _>(&c.effect.notify)?;
        out.push_sql(", ");
        out.push_bind_param::<Nullable<Text>, _>(&c.trace_id)?;
        out.push_sql("))");
        Ok(())
    }
}

/// `callback_first_delivery_batch(..)`: the attempts' values as one array per parameter.
struct Batch<'a> {
    op: &'static &'static str,
    idem_key: Vec<&'a str>,
    request_hash: Vec<&'a str>,
    expires_at: Vec<DateTime<Utc>>,
    body: Vec<&'a [u8]>,
    merchant_id: Vec<i64>,
    provider: Vec<&'a str>,
    event_id: Vec<&'a str>,
    payment_id: Vec<&'a str>,
    order_id: Vec<Option<i64>>,
    order_from: Vec<Option<&'static str>>,
    order_to: Vec<Option<&'static str>>,
    payment_status: Vec<&'static str>,
    amount_minor: Vec<i64>,
    currency: Vec<&'a str>,
    refunded_from: Vec<Option<i64>>,
    refunded_to: Vec<Option<i64>>,
    kind: Vec<Option<&'static str>>,
    refund_id: Vec<Option<&'a str>>,
    account_a: Vec<Option<&'a str>>,
    amount_a: Vec<Option<i64>>,
    account_b: Vec<Option<&'a str>>,
    amount_b: Vec<Option<i64>>,
    ack: Vec<&'a str>,
    event_type: Vec<Option<&'a str>>,
    outcome: Vec<&'static str>,
    reason: Vec<Option<&'static str>>,
    notify: Vec<bool>,
    trace_id: Vec<Option<&'a str>>,
}

impl<'a> Batch<'a> {
    fn new(captures: &[&'a Capture]) -> Self {
        fn column<'a, T>(captures: &[&'a Capture], f: impl Fn(&'a Capture) -> T) -> Vec<T> {
            captures.iter().map(|c| f(c)).collect()
        }
        Self {
            op: captures.first().map_or(&"", |c| c.scope.op.as_str_ref()),
            idem_key: column(captures, |c| c.scope.key.as_str()),
            request_hash: column(captures, |c| c.request_hash.as_str()),
            expires_at: column(captures, |c| c.expires_at),
            body: column(captures, |c| c.body.as_slice()),
            merchant_id: column(captures, |c| c.effect.merchant_id),
            provider: column(captures, |c| c.effect.provider.as_str()),
            event_id: column(captures, |c| c.effect.event_id.as_str()),
            payment_id: column(captures, |c| c.effect.payment_id.as_str()),
            order_id: column(captures, |c| c.effect.order_id),
            order_from: column(captures, |c| c.effect.order_from),
            order_to: column(captures, |c| c.effect.order_to),
            payment_status: column(captures, |c| c.effect.payment_status),
            amount_minor: column(captures, |c| c.effect.amount_minor),
            currency: column(captures, |c| c.effect.currency.as_str()),
            refunded_from: column(captures, |c| c.effect.refunded_from),
            refunded_to: column(captures, |c| c.effect.refunded_to),
            kind: column(captures, |c| c.effect.kind),
            refund_id: column(captures, |c| c.effect.refund_id.as_deref()),
            account_a: column(captures, |c| c.effect.account_a.as_deref()),
            amount_a: column(captures, |c| c.effect.amount_a),
            account_b: column(captures, |c| c.effect.account_b.as_deref()),
            amount_b: column(captures, |c| c.effect.amount_b),
            ack: column(captures, |c| c.ack.as_str()),
            event_type: column(captures, |c| c.event_type.as_deref()),
            outcome: column(captures, |c| c.outcome),
            reason: column(captures, |c| c.reason),
            notify: column(captures, |c| c.effect.notify),
            trace_id: column(captures, |c| c.trace_id.as_deref()),
        }
    }
}

impl QueryId for Batch<'_> {
    type QueryId = Batch<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for Batch<'_> {
    /// (item, result, status, response status, response text, request hash).
    type SqlType = (
        Int4,
        FirstDeliveryResultSql,
        Nullable<Text>,
        Nullable<Int4>,
        Nullable<Text>,
        Nullable<Text>,
    );
}

impl QueryFragment<Pg> for Batch<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(
            "SELECT item, result, status, response_status, response_body, request_hash \
             FROM callback_first_delivery_batch(",
        );
        out.push_bind_param::<Text, _>(self.op)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&BATCH_LOCK_TIMEOUT)?;
        for texts in [&self.idem_key, &self.request_hash] {
            out.push_sql(", ");
            out.push_bind_param::<Array<Text>, _>(texts)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Timestamptz>, _>(&self.expires_at)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Bytea>, _>(&self.body)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.merchant_id)?;
        for texts in [&self.provider, &self.event_id, &self.payment_id] {
            out.push_sql(", ");
            out.push_bind_param::<Array<Text>, _>(texts)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.order_id)?;
        for statuses in [&self.order_from, &self.order_to] {
            out.push_sql(", ");
            out.push_bind_param::<Array<Nullable<Text>>, _>(statuses)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.payment_status)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.amount_minor)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.currency)?;
        for amounts in [&self.refunded_from, &self.refunded_to] {
            out.push_sql(", ");
            out.push_bind_param::<Array<Nullable<BigInt>>, _>(amounts)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.kind)?;
        for texts in [&self.refund_id, &self.account_a] {
            out.push_sql(", ");
            out.push_bind_param::<Array<Nullable<Text>>, _>(texts)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.amount_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.account_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<BigInt>>, _>(&self.amount_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.ack)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.event_type)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.outcome)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.reason)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Bool>, _>(&self.notify)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.trace_id)?;
        out.push_sql(")");
        Ok(())
    }
}
