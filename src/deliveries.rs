//! `callback_deliveries`: the raw verified body of each first delivery with what the gateway
//! did with it (type, outcome, reason, ack status, transfer), kept permanently so finance can
//! see, export and replay provider events. Its one write is `callback_record_delivery`
//! (migration 000010), which the one-statement capture calls too.

pub mod minutes;
pub mod read;

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bytea, Int4, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::payments::ack::CallbackOutcome;
use crate::schema::callback_deliveries;

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
}

/// Records a verified body and its outcome; a later first delivery of the same event (after
/// its idempotency record expired) keeps the original row.
pub async fn record(
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
    ))
    .execute(conn)
    .await
    .map(|_| ())
}

/// The verified body stored for `provider`'s event `event_id` (the newest, should a provider's
/// name have served two merchants), for the admin replay.
pub async fn stored_body(
    conn: &mut AsyncPgConnection,
    provider: &str,
    event_id: &str,
) -> QueryResult<Option<Vec<u8>>> {
    use callback_deliveries as d;
    d::table
        .filter(d::provider.eq(provider))
        .filter(d::event_id.eq(event_id))
        .order(d::id.desc())
        .select(d::body)
        .first(conn)
        .await
        .optional()
}
