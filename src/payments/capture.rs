//! The one-statement first delivery of a capture (migration 000006): a `payment.succeeded`
//! for a pending order, the bulk of all callbacks, claimed, applied and acknowledged in one
//! round trip, while a redelivery of it costs one indexed read. Rust still decides: the plan is
//! computed here for the state the event expects (its order pending with the event's amount and
//! currency, no captured payment), and the SQL function only checks that the rows are in that
//! state while it writes them. When they are not, it writes nothing and the general path
//! decides from the real state.

use chrono::{DateTime, Utc};
use diesel::QueryResult;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{BigInt, Bytea, Int4, Nullable, Record, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::event::PaymentEvent;
use super::state::{OrderState, Plan, plan};
use super::{Outcome, ack};
use crate::idempotency::{IdempotentRequest, OneStatement, StoredResponse, existing};
use crate::ledger::{NewTransfer, TransferKind};
use crate::orders::OrderStatus;
use crate::providers::Provider;

/// COALESCE(the committed record's answer, the capture): a redelivery is answered by the
/// indexed read and the function (migration 000006) is never called; a first delivery runs it.
/// Written by hand so the whole statement is one prepared statement (diesel caches a query by
/// its static id; the statement text never changes).
struct CaptureStatement<'a> {
    op: &'a str,
    merchant_id: i64,
    idem_key: &'a str,
    provider: &'a str,
    event_id: &'a str,
    request_hash: &'a str,
    expires_at: DateTime<Utc>,
    body: &'a [u8],
    payment_id: &'a str,
    order_id: i64,
    currency: &'a str,
    amount_minor: i64,
    account_a: &'a str,
    amount_a: i64,
    account_b: &'a str,
    amount_b: i64,
    ack: &'a str,
}

impl QueryId for CaptureStatement<'_> {
    type QueryId = CaptureStatement<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl Query for CaptureStatement<'_> {
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

impl QueryFragment<Pg> for CaptureStatement<'_> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        out.push_sql(
            "SELECT COALESCE((SELECT ROW('existing'::TEXT, k.status, k.response_status, \
             k.response_body::TEXT, k.request_hash) FROM idempotency_keys k WHERE k.op = ",
        );
        out.push_bind_param::<Text, _>(&self.op)?;
        out.push_sql(" AND k.user_id = ");
        out.push_bind_param::<BigInt, _>(&self.merchant_id)?;
        out.push_sql(" AND k.idem_key = ");
        out.push_bind_param::<Text, _>(&self.idem_key)?;
        out.push_sql("), payment_capture_first_delivery(");
        out.push_bind_param::<BigInt, _>(&self.merchant_id)?;
        for text in [
            self.idem_key,
            self.provider,
            self.event_id,
            self.request_hash,
        ] {
            out.push_sql(", ");
            out.push_bind_param::<Text, _>(text)?;
        }
        out.push_sql(", ");
        out.push_bind_param::<Timestamptz, _>(&self.expires_at)?;
        out.push_sql(", ");
        out.push_bind_param::<Bytea, _>(&self.body)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.payment_id)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.order_id)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.currency)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.amount_minor)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.account_a)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.amount_a)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.account_b)?;
        out.push_sql(", ");
        out.push_bind_param::<BigInt, _>(&self.amount_b)?;
        out.push_sql(", ");
        out.push_bind_param::<Text, _>(&self.ack)?;
        out.push_sql("))");
        Ok(())
    }
}

type Row = (
    String,
    Option<String>,
    Option<i32>,
    Option<String>,
    Option<String>,
);

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

/// Runs the capture `plan` of one delivery in one statement.
pub async fn capture_in_one_statement(
    conn: &mut AsyncPgConnection,
    provider: &Provider,
    event_id: &str,
    body: &[u8],
    payment_id: &str,
    plan: &Plan,
    request: &IdempotentRequest,
) -> QueryResult<OneStatement> {
    let &Plan::Capture {
        order_id,
        amount_minor,
        currency,
    } = plan
    else {
        return Ok(OneStatement::Declined);
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
    // The function adds the transfer id it posts.
    let ack = ack(event_id, Outcome::Applied, None, None);
    let ack = ack.to_string();
    let (result, status, response_status, response_body, request_hash): Row = CaptureStatement {
        op: request.scope.op.as_str(),
        merchant_id: provider.merchant_id(),
        idem_key: &request.scope.key,
        provider: provider.name(),
        event_id,
        request_hash: request.fingerprint.as_str(),
        expires_at: request.expires_at,
        body,
        payment_id,
        order_id,
        currency: currency.code(),
        amount_minor,
        account_a: &account_a,
        amount_a,
        account_b: &account_b,
        amount_b,
        ack: &ack,
    }
    .get_result(conn)
    .await?;
    match result.as_str() {
        "applied" => Ok(OneStatement::Finished(StoredResponse {
            status: 200,
            body: response_body.unwrap_or_default(),
        })),
        "existing" => existing(status, response_status, response_body, request_hash)
            .map(OneStatement::Existing),
        "in_flight" => Ok(OneStatement::InFlight),
        "declined" => Ok(OneStatement::Declined),
        _ => Err(diesel::result::Error::DeserializationError(
            format!("unknown one-statement result {result:?}").into(),
        )),
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
