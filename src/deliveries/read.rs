//! The event log, read: `callback_deliveries` newest first with keyset paging over the indexes
//! of migration 000010 (one per filter, never OFFSET), an event with its ledger transfer,
//! payment and order, what needs attention, and callbacks per minute. Each query reads a
//! bounded number of rows: a page, one event's rows, or one hour.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use diesel::dsl::sql;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use crate::export::ExportRow;
use crate::payments::dispute::{self, DisputeView};
use crate::schema::{idempotency_keys, ledger_entries, ledger_transfers};
use crate::schema::{orders, payments};
use crate::schema_partitioned::callback_deliveries;

/// The largest page a caller may ask for.
pub const MAX_LIMIT: i64 = 200;
/// The page size when none is asked for.
pub const DEFAULT_LIMIT: i64 = 50;

/// An event's stored outcome (`callback_deliveries.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventOutcome {
    Applied,
    Held,
    Ignored,
    Rejected,
}

impl EventOutcome {
    pub const ALL: [EventOutcome; 4] = [
        EventOutcome::Applied,
        EventOutcome::Held,
        EventOutcome::Ignored,
        EventOutcome::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventOutcome::Applied => "applied",
            EventOutcome::Held => "held",
            EventOutcome::Ignored => "ignored",
            EventOutcome::Rejected => "rejected",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// The filters of `GET /admin/events` (all optional, combined with AND).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub provider: Option<String>,
    pub merchant_id: Option<i64>,
    pub outcome: Option<EventOutcome>,
    pub event_type: Option<String>,
    /// Received at or after.
    pub since: Option<DateTime<Utc>>,
    /// Received before.
    pub until: Option<DateTime<Utc>>,
    pub event_id: Option<String>,
}

/// Where a page ends: the last row's (received_at, id). Opaque to callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub received_at: DateTime<Utc>,
    pub id: i64,
}

impl Cursor {
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!(
            "{}.{}",
            self.received_at.timestamp_micros(),
            self.id
        ))
    }

    /// `None` for anything [`Cursor::encode`] did not produce.
    pub fn decode(text: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
        let text = std::str::from_utf8(&bytes).ok()?;
        let (micros, id) = text.split_once('.')?;
        Some(Self {
            received_at: DateTime::from_timestamp_micros(micros.parse().ok()?)?,
            id: id.parse().ok()?,
        })
    }
}

/// One event as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Queryable, Selectable, utoipa::ToSchema)]
#[diesel(table_name = callback_deliveries)]
pub struct EventRow {
    #[serde(skip)]
    pub id: i64,
    pub provider: String,
    pub event_id: String,
    pub merchant_id: i64,
    #[serde(rename = "type")]
    #[diesel(column_name = event_type)]
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    /// applied, held, ignored or rejected (null: recorded before the event log existed).
    pub outcome: Option<String>,
    pub reason: Option<String>,
    /// The ack's HTTP status.
    #[diesel(column_name = ack_status)]
    pub status: Option<i32>,
    pub transfer_id: Option<i64>,
    /// The trace the delivery was received in (32 hex digits), when traces were exported.
    pub trace_id: Option<String>,
}

/// A page of events, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventPage {
    pub events: Vec<EventRow>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

type Boxed<'a> = callback_deliveries::BoxedQuery<'a, diesel::pg::Pg>;

fn filtered(filter: &EventFilter) -> Boxed<'_> {
    use callback_deliveries as d;
    let mut query = d::table.into_boxed();
    if let Some(provider) = &filter.provider {
        query = query.filter(d::provider.eq(provider));
    }
    if let Some(merchant_id) = filter.merchant_id {
        query = query.filter(d::merchant_id.eq(merchant_id));
    }
    if let Some(outcome) = filter.outcome {
        query = query.filter(d::outcome.eq(outcome.as_str()));
    }
    if let Some(event_type) = &filter.event_type {
        query = query.filter(d::event_type.eq(event_type));
    }
    if let Some(since) = filter.since {
        query = query.filter(d::received_at.ge(since));
    }
    if let Some(until) = filter.until {
        query = query.filter(d::received_at.lt(until));
    }
    if let Some(event_id) = &filter.event_id {
        query = query.filter(d::event_id.eq(event_id));
    }
    query
}

/// The page query: `limit + 1` rows (the extra one says whether a next page exists).
fn page_query(filter: &EventFilter, cursor: Option<Cursor>, limit: i64) -> Boxed<'_> {
    use callback_deliveries as d;
    let mut query = filtered(filter);
    if let Some(cursor) = cursor {
        // A row comparison: the index serves it as one range condition.
        query = query.filter(
            sql::<Bool>("(callback_deliveries.received_at, callback_deliveries.id) < (")
                .bind::<Timestamptz, _>(cursor.received_at)
                .sql(", ")
                .bind::<BigInt, _>(cursor.id)
                .sql(")"),
        );
    }
    query
        .order((d::received_at.desc(), d::id.desc()))
        .limit(limit + 1)
}

/// One page of events matching `filter`, newest first, after `cursor`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    filter: &EventFilter,
    cursor: Option<Cursor>,
    limit: i64,
) -> QueryResult<EventPage> {
    let limit = limit.clamp(1, MAX_LIMIT);
    let mut events: Vec<EventRow> = page_query(filter, cursor, limit)
        .select(EventRow::as_select())
        .load(conn)
        .await?;
    let more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    let next_cursor = more.then(|| events.last()).flatten().map(|last| {
        Cursor {
            received_at: last.received_at,
            id: last.id,
        }
        .encode()
    });
    Ok(EventPage {
        events,
        next_cursor,
    })
}

/// The plan PostgreSQL chooses for the page query [`list`] runs (EXPLAIN, one line a row), so
/// tests and docs show the plan of the real statement.
pub async fn explain_list(
    conn: &mut AsyncPgConnection,
    filter: &EventFilter,
    cursor: Option<Cursor>,
    limit: i64,
) -> QueryResult<String> {
    let query = page_query(filter, cursor, limit.clamp(1, MAX_LIMIT)).select(EventRow::as_select());
    let lines: Vec<String> = Explain(query).load(conn).await?;
    Ok(lines.join("\n"))
}

/// `EXPLAIN <query>`, with the query's own binds.
struct Explain<Q>(Q);

impl<Q> diesel::query_builder::QueryId for Explain<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q> diesel::query_builder::Query for Explain<Q> {
    type SqlType = diesel::sql_types::Text;
}

impl<Q: diesel::query_builder::QueryFragment<diesel::pg::Pg>>
    diesel::query_builder::QueryFragment<diesel::pg::Pg> for Explain<Q>
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> QueryResult<()> {
        out.push_sql("EXPLAIN ");
        self.0.walk_ast(out.reborrow())
    }
}

/// How large one export batch may be: at most `rows` events and, past its first event,
/// `bytes` of bodies (a body may be up to the body limit; the first one always fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimit {
    pub rows: i64,
    pub bytes: i64,
}

/// The next batch of the events matching `filter`, oldest first (the export's order, so a
/// replay posts them as they came), after `after`. Two short statements on the keyset indexes
/// of [`list`], ascending: the sizes of the next `rows` bodies (their length is read from the
/// TOAST pointer, not the body), then the bodies of those that fit in `bytes`. An export is a
/// loop of these, so no statement lasts as long as the download (statement_timeout would cut
/// it) and memory is bounded by the batch, whatever the number of events.
pub async fn export_batch(
    conn: &mut AsyncPgConnection,
    filter: &EventFilter,
    after: Option<Cursor>,
    limit: BatchLimit,
) -> QueryResult<Vec<ExportRow<Cursor>>> {
    use callback_deliveries as d;
    let mut query = filtered(filter);
    if let Some(after) = after {
        query = query.filter(
            sql::<Bool>("(callback_deliveries.received_at, callback_deliveries.id) > (")
                .bind::<Timestamptz, _>(after.received_at)
                .sql(", ")
                .bind::<BigInt, _>(after.id)
                .sql(")"),
        );
    }
    let sizes: Vec<(i64, i32)> = query
        .order((d::received_at.asc(), d::id.asc()))
        .select((
            d::id,
            sql::<diesel::sql_types::Int4>("octet_length(callback_deliveries.body)"),
        ))
        .limit(limit.rows.max(1))
        .load(conn)
        .await?;
    let mut ids = Vec::with_capacity(sizes.len());
    let mut bytes = 0i64;
    for (id, size) in sizes {
        bytes += i64::from(size);
        if !ids.is_empty() && bytes > limit.bytes {
            break;
        }
        ids.push(id);
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<ExportColumns> = d::table
        .filter(d::id.eq_any(&ids))
        .order((d::received_at.asc(), d::id.asc()))
        .select(ExportColumns::as_select())
        .load(conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| ExportRow {
            cursor: Cursor {
                received_at: row.received_at,
                id: row.id,
            },
            provider: row.provider,
            event_id: row.event_id,
            body: row.body,
        })
        .collect())
}

/// The columns of an [`ExportRow`], as stored.
#[derive(Queryable, Selectable)]
#[diesel(table_name = callback_deliveries)]
struct ExportColumns {
    id: i64,
    received_at: DateTime<Utc>,
    provider: String,
    event_id: String,
    body: Vec<u8>,
}

/// A ledger entry of a transfer.
#[derive(Debug, Clone, Serialize, Queryable, Selectable, utoipa::ToSchema)]
#[diesel(table_name = ledger_entries)]
pub struct EntryView {
    pub account: String,
    pub currency: String,
    pub amount_minor: i64,
}

/// The ledger transfer an event posted.
#[derive(Debug, Clone, Serialize, Queryable, Selectable, utoipa::ToSchema)]
#[diesel(table_name = ledger_transfers)]
pub struct TransferView {
    pub id: i64,
    pub kind: String,
    pub order_id: Option<i64>,
    pub payment_id: String,
    pub refund_id: Option<String>,
    /// A chargeback's or its reversal's dispute id.
    pub dispute_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TransferWithEntries {
    #[serde(flatten)]
    pub transfer: TransferView,
    pub entries: Vec<EntryView>,
}

#[derive(Debug, Clone, Serialize, Queryable, Selectable, utoipa::ToSchema)]
#[diesel(table_name = payments)]
pub struct PaymentView {
    pub payment_id: String,
    pub order_id: Option<i64>,
    pub status: String,
    pub amount_minor: i64,
    pub currency: String,
    pub refunded_minor: i64,
    /// What disputes hold back of it (withdrawn minus reinstated).
    pub disputed_minor: i64,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Queryable, Selectable, utoipa::ToSchema)]
#[diesel(table_name = orders)]
pub struct OrderView {
    pub id: i64,
    pub amount_minor: i64,
    pub currency: String,
    pub reference: Option<String>,
    pub status: String,
    pub created_at: DateTime<Utc>,
}

/// One event with everything the gateway did with it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventDetail {
    #[serde(flatten)]
    pub event: EventRow,
    /// The verified body exactly as received (lossy only if it is not UTF-8).
    pub raw_body: String,
    /// The stored ack, while its idempotency record lives (null once it expired).
    #[schema(value_type = Option<Object>)]
    pub ack: Option<serde_json::Value>,
    pub transfer: Option<TransferWithEntries>,
    pub payment: Option<PaymentView>,
    /// The disputes of the payment, oldest first.
    pub disputes: Vec<DisputeView>,
    pub order: Option<OrderView>,
}

/// One of a merchant's own events, as `/v1/events` shows it: what the gateway answered and
/// what it did, without the operator's fields (the raw body, the trace).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MerchantEvent {
    pub provider: String,
    pub event_id: String,
    #[serde(rename = "type")]
    pub event_type: Option<String>,
    pub received_at: DateTime<Utc>,
    /// applied, held, ignored or rejected
    pub outcome: Option<String>,
    pub reason: Option<String>,
    /// The ack's HTTP status.
    pub status: Option<i32>,
    /// The ledger transfer it posted, if it moved money.
    pub transfer_id: Option<i64>,
}

impl From<EventRow> for MerchantEvent {
    fn from(row: EventRow) -> Self {
        Self {
            provider: row.provider,
            event_id: row.event_id,
            event_type: row.event_type,
            received_at: row.received_at,
            outcome: row.outcome,
            reason: row.reason,
            status: row.status,
            transfer_id: row.transfer_id,
        }
    }
}

/// A page of a merchant's events, newest first.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MerchantEventPage {
    pub events: Vec<MerchantEvent>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl From<EventPage> for MerchantEventPage {
    fn from(page: EventPage) -> Self {
        Self {
            events: page.events.into_iter().map(MerchantEvent::from).collect(),
            next_cursor: page.next_cursor,
        }
    }
}

/// One of a merchant's events with its ack and its ledger transfer.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MerchantEventDetail {
    #[serde(flatten)]
    pub event: MerchantEvent,
    /// The ack as stored, while its idempotency record lives (null once it expired).
    #[schema(value_type = Option<Object>)]
    pub ack: Option<serde_json::Value>,
    pub transfer: Option<TransferWithEntries>,
}

/// The event `event_id` of `provider` if it is `merchant_id`'s (`None` for another merchant's,
/// looked up by the same unique key, so the answer cannot tell the two apart).
pub async fn merchant_detail(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    provider: &str,
    event_id: &str,
) -> QueryResult<Option<MerchantEventDetail>> {
    use callback_deliveries as d;
    // An event delivered in two months (its record expired between) has a row in each: the
    // newest, as the admin's detail shows.
    let found: Option<EventRow> = d::table
        .filter(d::merchant_id.eq(merchant_id))
        .filter(d::provider.eq(provider))
        .filter(d::event_id.eq(event_id))
        .order(d::id.desc())
        .select(EventRow::as_select())
        .first(conn)
        .await
        .optional()?;
    let Some(event) = found else {
        return Ok(None);
    };
    let ack: Option<serde_json::Value> =
        detail_sql::ack(merchant_id, format!("{provider}:{event_id}"))
            .first::<Option<serde_json::Value>>(conn)
            .await
            .optional()?
            .flatten();
    let transfer: Option<TransferView> = detail_sql::transfer(merchant_id, provider, event_id)
        .first(conn)
        .await
        .optional()?;
    let transfer = match transfer {
        Some(transfer) => {
            let entries = detail_sql::entries(transfer.id).load(conn).await?;
            Some(TransferWithEntries { transfer, entries })
        }
        None => None,
    };
    Ok(Some(MerchantEventDetail {
        event: event.into(),
        ack,
        transfer,
    }))
}

/// The statements of an event's detail, each one lookup of a unique key (or of
/// `idx_callback_deliveries_event_id`, which an event id matches at most once per merchant), so
/// the page costs the same at any size of the history. Built in one place for [`detail`] and
/// for [`explain_detail`], so the plans shown are those of the statements run.
mod detail_sql {
    use super::*;
    use diesel::dsl::AsSelect as SelectBy;
    use diesel::pg::Pg;
    use diesel::sql_types::{Binary, Jsonb, Nullable};

    pub type Delivery<'a> =
        callback_deliveries::BoxedQuery<'a, Pg, (SelectBy<EventRow, Pg>, Binary)>;
    pub type Ack<'a> = idempotency_keys::BoxedQuery<'a, Pg, Nullable<Jsonb>>;
    pub type Transfer<'a> = ledger_transfers::BoxedQuery<'a, Pg, SelectBy<TransferView, Pg>>;
    pub type Entries<'a> = ledger_entries::BoxedQuery<'a, Pg, SelectBy<EntryView, Pg>>;
    pub type Payment<'a> = payments::BoxedQuery<'a, Pg, SelectBy<PaymentView, Pg>>;
    pub type Disputes<'a> =
        crate::schema::payment_disputes::BoxedQuery<'a, Pg, SelectBy<DisputeView, Pg>>;
    pub type Order<'a> = orders::BoxedQuery<'a, Pg, SelectBy<OrderView, Pg>>;

    pub fn delivery<'a>(provider: &'a str, event_id: &'a str) -> Delivery<'a> {
        use callback_deliveries as d;
        d::table
            .filter(d::provider.eq(provider))
            .filter(d::event_id.eq(event_id))
            .order(d::id.desc())
            .select((EventRow::as_select(), d::body))
            .limit(1)
            .into_boxed()
    }

    pub fn ack<'a>(merchant_id: i64, key: String) -> Ack<'a> {
        idempotency_keys::table
            .filter(idempotency_keys::user_id.eq(merchant_id))
            .filter(idempotency_keys::op.eq("payment.callback"))
            .filter(idempotency_keys::idem_key.eq(key))
            .select(idempotency_keys::response_body)
            .limit(1)
            .into_boxed()
    }

    pub fn transfer<'a>(merchant_id: i64, provider: &'a str, event_id: &'a str) -> Transfer<'a> {
        ledger_transfers::table
            .filter(ledger_transfers::merchant_id.eq(merchant_id))
            .filter(ledger_transfers::provider.eq(provider))
            .filter(ledger_transfers::event_id.eq(event_id))
            .select(TransferView::as_select())
            .limit(1)
            .into_boxed()
    }

    pub fn entries<'a>(transfer_id: i64) -> Entries<'a> {
        ledger_entries::table
            .filter(ledger_entries::transfer_id.eq(transfer_id))
            .order(ledger_entries::id.asc())
            .select(EntryView::as_select())
            .into_boxed()
    }

    pub fn payment<'a>(merchant_id: i64, provider: &'a str, payment_id: String) -> Payment<'a> {
        payments::table
            .filter(payments::merchant_id.eq(merchant_id))
            .filter(payments::provider.eq(provider))
            .filter(payments::payment_id.eq(payment_id))
            .select(PaymentView::as_select())
            .limit(1)
            .into_boxed()
    }

    pub fn disputes<'a>(merchant_id: i64, provider: &'a str, payment_id: &'a str) -> Disputes<'a> {
        dispute::of_payment_query(merchant_id, provider, payment_id)
    }

    pub fn order<'a>(order_id: i64, merchant_id: i64) -> Order<'a> {
        orders::table
            .filter(orders::id.eq(order_id))
            .filter(orders::user_id.eq(merchant_id))
            .select(OrderView::as_select())
            .limit(1)
            .into_boxed()
    }
}

/// The event `event_id` of `provider`; `payment_id_of` reads the payment id from a body (in
/// the provider's format) when the event posted no transfer that names it.
pub async fn detail(
    conn: &mut AsyncPgConnection,
    provider: &str,
    event_id: &str,
    payment_id_of: impl FnOnce(&[u8]) -> Option<String>,
) -> QueryResult<Option<EventDetail>> {
    let found: Option<(EventRow, Vec<u8>)> = detail_sql::delivery(provider, event_id)
        .first(conn)
        .await
        .optional()?;
    let Some((event, body)) = found else {
        return Ok(None);
    };
    let merchant_id = event.merchant_id;
    let ack: Option<serde_json::Value> =
        detail_sql::ack(merchant_id, format!("{provider}:{event_id}"))
            .first::<Option<serde_json::Value>>(conn)
            .await
            .optional()?
            .flatten();
    let transfer: Option<TransferView> = detail_sql::transfer(merchant_id, provider, event_id)
        .first(conn)
        .await
        .optional()?;
    let transfer = match transfer {
        Some(transfer) => {
            let entries = detail_sql::entries(transfer.id).load(conn).await?;
            Some(TransferWithEntries { transfer, entries })
        }
        None => None,
    };
    let payment_id = match &transfer {
        Some(t) => Some(t.transfer.payment_id.clone()),
        None => payment_id_of(&body),
    };
    let payment: Option<PaymentView> = match payment_id {
        Some(payment_id) => detail_sql::payment(merchant_id, provider, payment_id)
            .first(conn)
            .await
            .optional()?,
        None => None,
    };
    let disputes: Vec<DisputeView> = match &payment {
        Some(p) => {
            detail_sql::disputes(merchant_id, provider, &p.payment_id)
                .load(conn)
                .await?
        }
        None => Vec::new(),
    };
    let order_id = payment
        .as_ref()
        .and_then(|p| p.order_id)
        .or_else(|| transfer.as_ref().and_then(|t| t.transfer.order_id));
    let order: Option<OrderView> = match order_id {
        Some(order_id) => detail_sql::order(order_id, merchant_id)
            .first(conn)
            .await
            .optional()?,
        None => None,
    };
    Ok(Some(EventDetail {
        event,
        raw_body: String::from_utf8_lossy(&body).into_owned(),
        ack,
        transfer,
        payment,
        disputes,
        order,
    }))
}

/// The plans of the statements [`detail`] runs for an event of `merchant_id` with
/// `transfer_id`, `payment_id` and `order_id` (EXPLAIN, one line a row; statements apart by a
/// line `--`), so tests show that each is an index lookup.
pub async fn explain_detail(
    conn: &mut AsyncPgConnection,
    (provider, event_id): (&str, &str),
    merchant_id: i64,
    (transfer_id, payment_id, order_id): (i64, &str, i64),
) -> QueryResult<String> {
    let plans = [
        Explain(detail_sql::delivery(provider, event_id))
            .load::<String>(conn)
            .await?,
        Explain(detail_sql::ack(
            merchant_id,
            format!("{provider}:{event_id}"),
        ))
        .load(conn)
        .await?,
        Explain(detail_sql::transfer(merchant_id, provider, event_id))
            .load(conn)
            .await?,
        Explain(detail_sql::entries(transfer_id)).load(conn).await?,
        Explain(detail_sql::payment(
            merchant_id,
            provider,
            payment_id.to_owned(),
        ))
        .load(conn)
        .await?,
        Explain(detail_sql::disputes(merchant_id, provider, payment_id))
            .load(conn)
            .await?,
        Explain(detail_sql::order(order_id, merchant_id))
            .load(conn)
            .await?,
    ];
    Ok(plans.map(|lines| lines.join("\n")).join("\n--\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_as_itself() {
        let cursor = Cursor {
            received_at: DateTime::from_timestamp_micros(1_764_489_600_123_456).unwrap(),
            id: 42,
        };
        assert_eq!(Cursor::decode(&cursor.encode()), Some(cursor));
    }

    #[test]
    fn a_cursor_that_was_not_issued_is_refused() {
        assert_eq!(Cursor::decode("not-a-cursor"), None);
        assert_eq!(Cursor::decode(&URL_SAFE_NO_PAD.encode("12.x")), None);
    }
}
