//! The event log's write: each first delivery's raw verified body with what the gateway did
//! with it (type, outcome, reason, ack status, transfer) goes into `callback_deliveries`
//! through `callback_record_delivery` (migration 000010), which the one-statement capture
//! calls too; and the stored body that a person's replay runs again ([`stored_body`]). The
//! log's other reads are [`crate::deliveries`].

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::ack::CallbackOutcome;
use crate::schema_partitioned::callback_deliveries;

diesel::define_sql_function! {
    #[allow(clippy::too_many_arguments)]
    fn callback_record_delivery(
        merchant_id: BigInt,
        provider: Text,
        event_id: Text,
        body: Bytea,
        event_type: Nullable<Text>,
        outcome: Text,
        reason: Nullable<Text>,
        ack_status: Int4,
        transfer_id: Nullable<BigInt>,
        trace_id: Nullable<Text>,
    ) -> diesel::sql_types::Bool;
}

/// One first delivery as the event log keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    pub merchant_id: i64,
    pub provider: &'a str,
    pub event_id: &'a str,
    pub body: &'a [u8],
    /// The body's `type` as the provider sent it.
    pub event_type: Option<&'a str>,
    /// The trace the delivery was received in, when traces are exported.
    pub trace_id: Option<&'a str>,
}

/// Records a verified body and its outcome; a later first delivery of the same event (after
/// its idempotency record expired) keeps the original row.
pub async fn record_delivery(
    conn: &mut AsyncPgConnection,
    delivery: Delivery<'_>,
    outcome: &CallbackOutcome,
    ack_status: u16,
) -> QueryResult<()> {
    diesel::select(callback_record_delivery(
        delivery.merchant_id,
        delivery.provider,
        delivery.event_id,
        delivery.body,
        delivery.event_type,
        outcome.outcome.as_str(),
        outcome.reason,
        i32::from(ack_status),
        outcome.transfer_id,
        delivery.trace_id,
    ))
    .execute(conn)
    .await
    .map(|_| ())
}

/// The verified body stored for `provider`'s event `event_id`, with the merchant whose books
/// it moved (the newest delivery, should a provider's name have served two merchants), for a
/// person's replay of it.
pub async fn stored_body(
    conn: &mut AsyncPgConnection,
    provider: &str,
    event_id: &str,
) -> QueryResult<Option<(i64, Vec<u8>)>> {
    use callback_deliveries as d;
    d::table
        .filter(d::provider.eq(provider))
        .filter(d::event_id.eq(event_id))
        .order(d::id.desc())
        .select((d::merchant_id, d::body))
        .first(conn)
        .await
        .optional()
}
