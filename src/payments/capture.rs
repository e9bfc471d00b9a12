//! The one-statement first delivery of a capture (migration 000006): a `payment.succeeded`
//! for a pending order, the bulk of all callbacks, claimed, applied and acknowledged in one
//! statement, while a redelivery of it costs one indexed read. Rust still decides: the plan is
//! computed here for the state the event expects (its order pending with the event's amount and
//! currency, no captured payment), and the SQL function only checks that the rows are in that
//! state while it writes them. When they are not, it writes nothing and the general path
//! decides from the real state. Concurrent captures share one statement and one commit (see
//! [`super::batcher`]).

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, BigInt, Bytea, Int4, Nullable, Record, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::event::PaymentEvent;
use super::state::{OrderState, Plan, plan};
use super::{Outcome, ack};
use crate::idempotency::{IdempotentRequest, OneStatement, StoredResponse, existing};
use crate::ledger::{NewTransfer, TransferKind};
use crate::orders::OrderStatus;
use crate::providers::Provider;

/// How long an item of a batch may wait for a lock before it is sent down the general path.
pub const BATCH_LOCK_TIMEOUT: &str = "100ms";

/// The capture `event` plans against the state it expects, or `None` when the event is not a
/// capture (refunds and failures depend on state the gateway must read first).
pub fn expected_capture(event: &PaymentEvent) -> Option<Plan> {
    let PaymentEvent::Succeeded {
        order_id,
        amount,
        currency,
        ..
    } = event
    else {
        return None;
    };
    let expected_order = OrderState {
        id: *order_id,
        amount_minor: amount.get(),
        currency: currency.code().to_owned(),
        status: OrderStatus::PendingPayment,
    };
    match plan(event, Some(&expected_order), None) {
        capture @ Plan::Capture { .. } => Some(capture),
        _ => None,
    }
}

/// One delivery's capture: every value the statement binds, owned so it can wait in a batch.
#[derive(Debug)]
pub struct Capture {
    op: &'static str,
    merchant_id: i64,
    idem_key: String,
    provider: String,
    event_id: String,
    request_hash: String,
    expires_at: DateTime<Utc>,
    body: Vec<u8>,
    payment_id: String,
    order_id: i64,
    currency: &'static str,
    amount_minor: i64,
    account_a: String,
    amount_a: i64,
    account_b: String,
    amount_b: i64,
    /// The ack without its transfer id, which the function adds.
    ack: String,
}

impl Capture {
    /// The capture of one delivery whose `plan` is a capture; `None` for any other plan.
    pub fn new(
        provider: &Provider,
        event_id: &str,
        body: &[u8],
        payment_id: &str,
        plan: &Plan,
        request: &IdempotentRequest,
    ) -> Option<Self> {
        let &Plan::Capture {
            order_id,
            amount_minor,
            currency,
        } = plan
        else {
            return None;
        };
        let transfer = NewTransfer {
            merchant_id: provider.merchant_id(),
            provider: provider.name(),
            event_id,
            kind: TransferKind::Payment,
            order_id,
            payment_id,
            currency,
            amount_minor,
        };
        let [(account_a, amount_a), (account_b, amount_b)] = transfer.entries();
        Some(Self {
            op: request.scope.op.as_str(),
            merchant_id: provider.merchant_id(),
            idem_key: request.scope.key.clone(),
            provider: provider.name().to_owned(),
            event_id: event_id.to_owned(),
            request_hash: request.fingerprint.as_str().to_owned(),
            expires_at: request.expires_at,
            body: body.to_vec(),
            payment_id: payment_id.to_owned(),
            order_id,
            currency: currency.code(),
            amount_minor,
            account_a,
            amount_a,
            account_b,
            amount_b,
            ack: ack(event_id, Outcome::Applied, None, None).to_string(),
        })
    }

    /// Runs this capture alone: one statement.
    pub async fn run(&self, conn: &mut AsyncPgConnection) -> QueryResult<OneStatement> {
        let (result, status, response_status, response_body, request_hash): Row =
            Single(self).get_result(conn).await?;
        answer(result, status, response_status, response_body, request_hash)
    }
}

/// Runs several captures in one statement and one commit; the answers come in their order.
pub async fn run_batch(
    conn: &mut AsyncPgConnection,
    captures: &[&Capture],
) -> QueryResult<Vec<OneStatement>> {
    let rows: Vec<BatchRow> = Batch::new(captures).load(conn).await?;
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
    String,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

/// A batch answer: the item's position (from 1), then a [`Row`].
type BatchRow = (
    i32,
    String,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

fn answer(
    result: String,
    status: Option<String>,
    response_status: Option<i32>,
    response_body: Option<String>,
    request_hash: Option<String>,
) -> QueryResult<OneStatement> {
    match result.as_str() {
        "applied" => Ok(OneStatement::Finished(StoredResponse {
            status: 200,
            body: response_body.unwrap_or_default(),
        })),
        "existing" => existing(status, response_status, response_body, request_hash)
            .map(OneStatement::Existing),
        "in_flight" => Ok(OneStatement::InFlight),
        "declined" => Ok(OneStatement::Declined),
        _ => Err(corrupt(format!("unknown one-statement result {result:?}"))),
    }
}

fn corrupt(what: String) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}

/// COALESCE(the committed record's answer, the capture): a redelivery is answered by the
/// indexed read and the function is never called; a first delivery runs it. Written by hand so
/// the statement is prepared once per connection (diesel caches a query by its static id).
struct Single<'a>(&'a Capture);

impl QueryId for Single<'_> {
    type QueryId = Single<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for Single<'_> {
    /// (result, status, response status, response text, request hash), where result is
    /// applied, existing, in_flight or declined.
    type SqlType = Record<(
        Text,
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
            "SELECT COALESCE((SELECT ROW('existing'::TEXT, k.status, k.response_status, \
             k.response_body::TEXT, k.request_hash) FROM idempotency_keys k WHERE k.op = ",
        );
        out.push_bind_param::<Text, _>(&c.op)?;
        out.push_sql(" AND k.user_id = ");
        out.push_bind_param::<BigInt, _>(&c.merchant_id)?;
        out.push_sql(" AND k.idem_key = ");
        out.push_bind_param::<Text, _>(&c.idem_key)?;
        out.push_sql("), payment_capture_first_delivery(");
        out.push_bind_param::<BigInt, _>(&c.merchant_id)?;
        for text in [&c.idem_key, &c.provider, &c.event_id, &c.request_hash] {
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(text)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Timestamptz, _>(&c.expires_at)?;
        out.push_sql(", ");
        out.push_bind_param::<Bytea, _>(&c.body)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.payment_id)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&c.order_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.currency)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&c.amount_minor)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.account_a)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&c.amount_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.account_b)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&c.amount_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&c.ack)?;
        out.push_sql("))");
        Ok(())
    }
}

/// `payment_capture_batch(..)`: the captures' values as one array per parameter.
struct Batch<'a> {
    op: &'static str,
    merchant_id: Vec<i64>,
    idem_key: Vec<&'a str>,
    provider: Vec<&'a str>,
    event_id: Vec<&'a str>,
    request_hash: Vec<&'a str>,
    expires_at: Vec<DateTime<Utc>>,
    body: Vec<&'a [u8]>,
    payment_id: Vec<&'a str>,
    order_id: Vec<i64>,
    currency: Vec<&'a str>,
    amount_minor: Vec<i64>,
    account_a: Vec<&'a str>,
    amount_a: Vec<i64>,
    account_b: Vec<&'a str>,
    amount_b: Vec<i64>,
    ack: Vec<&'a str>,
}

impl<'a> Batch<'a> {
    fn new(captures: &[&'a Capture]) -> Self {
        fn column<'a, T>(captures: &[&'a Capture], f: impl Fn(&'a Capture) -> T) -> Vec<T> {
            captures.iter().map(|c| f(c)).collect()
        }
        Self {
            op: captures.first().map_or("", |c| c.op),
            merchant_id: column(captures, |c| c.merchant_id),
            idem_key: column(captures, |c| c.idem_key.as_str()),
            provider: column(captures, |c| c.provider.as_str()),
            event_id: column(captures, |c| c.event_id.as_str()),
            request_hash: column(captures, |c| c.request_hash.as_str()),
            expires_at: column(captures, |c| c.expires_at),
            body: column(captures, |c| c.body.as_slice()),
            payment_id: column(captures, |c| c.payment_id.as_str()),
            order_id: column(captures, |c| c.order_id),
            currency: column(captures, |c| c.currency),
            amount_minor: column(captures, |c| c.amount_minor),
            account_a: column(captures, |c| c.account_a.as_str()),
            amount_a: column(captures, |c| c.amount_a),
            account_b: column(captures, |c| c.account_b.as_str()),
            amount_b: column(captures, |c| c.amount_b),
            ack: column(captures, |c| c.ack.as_str()),
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
        Text,
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
             FROM payment_capture_batch(",
        );
        out.push_bind_param::<Text, _>(&self.op)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&BATCH_LOCK_TIMEOUT)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.merchant_id)?;
        for texts in [
            &self.idem_key,
            &self.provider,
            &self.event_id,
            &self.request_hash,
        ] {
            out.push_sql(", ");
            out.push_bind_param::<Array<Text>, _>(texts)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Array<Timestamptz>, _>(&self.expires_at)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Bytea>, _>(&self.body)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.payment_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.order_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.currency)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.amount_minor)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.account_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.amount_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.account_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<BigInt>, _>(&self.amount_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Array<Text>, _>(&self.ack)?;
        out.push_sql(")");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::{AmountMinor, Currency};

    #[test]
    fn a_payment_succeeded_expects_its_pending_order_and_captures_it() {
        let event = PaymentEvent::Succeeded {
            payment_id: "pi_1".into(),
            order_id: 7,
            amount: AmountMinor::parse(5000).unwrap(),
            currency: Currency::parse("EUR").unwrap(),
        };
        assert_eq!(
            expected_capture(&event),
            Some(Plan::Capture {
                order_id: 7,
                amount_minor: 5000,
                currency: Currency::parse("EUR").unwrap(),
            })
        );
    }

    #[test]
    fn failures_and_refunds_have_no_one_statement_path() {
        let failed = PaymentEvent::Failed {
            payment_id: "pi_1".into(),
            order_id: 7,
        };
        assert_eq!(expected_capture(&failed), None);
    }
}
