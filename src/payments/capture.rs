//! The one-statement first delivery of a capture (migration 000006): a `payment.succeeded`
//! for a pending order, the bulk of all callbacks, claimed, applied and acknowledged in one
//! round trip. Rust still decides: the plan is computed here for the state the event expects
//! (its order pending with the event's amount and currency, no captured payment), and the
//! SQL function only checks that the rows are in that state while it writes them. When they are
//! not, it writes nothing and the general path decides from the real state.

use diesel::QueryResult;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::event::PaymentEvent;
use super::state::{OrderState, Plan, plan};
use super::{Outcome, ack};
use crate::idempotency::{IdempotentRequest, OneStatement, StoredResponse, existing};
use crate::ledger::{NewTransfer, TransferKind};
use crate::orders::OrderStatus;
use crate::providers::Provider;

#[expect(
    clippy::too_many_arguments,
    reason = "the call mirrors the SQL function's parameters, one per value written"
)]
mod sql {
    use diesel::sql_types::{BigInt, Bytea, Jsonb, Text, Timestamptz};

    diesel::define_sql_function! {
        /// (result, status, response status, response text, request hash), where
        /// result is applied, existing, in_flight or declined.
        fn payment_capture_first_delivery(
            merchant_id: BigInt,
            idem_key: Text,
            provider: Text,
            event_id: Text,
            request_hash: Text,
            expires_at: Timestamptz,
            body: Bytea,
            payment_id: Text,
            order_id: BigInt,
            currency: Text,
            amount_minor: BigInt,
            account_a: Text,
            amount_a: BigInt,
            account_b: Text,
            amount_b: BigInt,
            ack: Jsonb,
        ) -> Record<(Text, Nullable<Text>, Nullable<Int4>, Nullable<Text>, Nullable<Text>)>;
    }
}
use sql::payment_capture_first_delivery;

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
    let (result, status, response_status, response_body, request_hash): Row =
        diesel::select(payment_capture_first_delivery(
            provider.merchant_id(),
            &request.scope.key,
            provider.name(),
            event_id,
            request.fingerprint.as_str(),
            request.expires_at,
            body,
            payment_id,
            order_id,
            currency.code(),
            amount_minor,
            account_a,
            amount_a,
            account_b,
            amount_b,
            ack,
        ))
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
