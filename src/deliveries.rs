//! `callback_deliveries`: the raw verified body of each first delivery, kept so finance can
//! export and replay provider events. Its one write is `callback_record_delivery` (migration
//! 000007), which the one-statement capture calls too.

use diesel::QueryResult;
use diesel::sql_types::{BigInt, Bytea, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};

diesel::define_sql_function! {
    fn callback_record_delivery(merchant_id: BigInt, provider: Text, event_id: Text, body: Bytea);
}

/// Records a verified body; a later first delivery of the same event (after its idempotency
/// record expired) keeps the original. Takes a shared connection so it can be pipelined.
pub async fn record(
    mut conn: &AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    event_id: &str,
    body: &[u8],
) -> QueryResult<()> {
    diesel::select(callback_record_delivery(
        merchant_id,
        provider,
        event_id,
        body,
    ))
    .execute(&mut conn)
    .await
    .map(|_| ())
}
