//! `callback_deliveries`: the raw verified body of each first delivery, kept so finance can
//! export and replay provider events.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::schema::callback_deliveries;

/// Records a verified body; a later first delivery of the same event (after its idempotency
/// record expired) keeps the original. Takes a shared connection so it can be pipelined.
pub async fn record(
    mut conn: &AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    event_id: &str,
    body: &[u8],
) -> QueryResult<()> {
    diesel::insert_into(callback_deliveries::table)
        .values((
            callback_deliveries::merchant_id.eq(merchant_id),
            callback_deliveries::provider.eq(provider),
            callback_deliveries::event_id.eq(event_id),
            callback_deliveries::body.eq(body),
        ))
        .on_conflict_do_nothing()
        .execute(&mut conn)
        .await
        .map(|_| ())
}
