//! Balances from checkpoints: a background job (one gateway at a time, elected like the expiry
//! cleaner) records each merchant's balances as of a ledger position, and a balance read adds
//! only the entries after it, so the read no longer grows with the ledger. Nothing on the
//! callback path writes here; a merchant with no checkpoint is summed from the start, so the
//! checkpoint is a cache whose deletion changes no answer.
//!
//! Entries commit out of id order, so "every entry up to id P" is only final once no
//! transaction that could still insert an id <= P is running. A pass therefore notes the
//! highest visible entry id together with the transactions writing `ledger_entries` at that
//! moment (each holds its row-exclusive lock on the table until it ends); a later pass
//! finishes the checkpoint at that id once all of them have ended. Ids come from a sequence
//! without a cache, so an id handed out after the note is above P, and an id at or below P was
//! handed out by a transaction that was writing (or had ended) when the note was taken.

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::sql_types::{BigInt, Bool, Jsonb, Nullable, Text};
use diesel::{OptionalExtension, QueryResult};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::Balance;
use crate::db;

/// Arbitrary but fixed: the advisory lock that elects one checkpointer among many gateways.
pub const CHECKPOINTER_LOCK_KEY: i64 = 0x6367_775f_636b_7074; // "cgw_ckpt"

#[derive(diesel::QueryableByName)]
struct State {
    #[diesel(sql_type = BigInt)]
    through_entry_id: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    pending_entry_id: Option<i64>,
    /// Whether every transaction that was writing entries when the position was noted has
    /// ended.
    #[diesel(sql_type = Bool)]
    pending_settled: bool,
}

#[derive(diesel::QueryableByName)]
struct SumRow {
    #[diesel(sql_type = BigInt)]
    merchant_id: i64,
    #[diesel(sql_type = Text)]
    account: String,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = Text)]
    sum: String,
}

#[derive(diesel::QueryableByName)]
struct CheckpointRow {
    #[diesel(sql_type = BigInt)]
    through_entry_id: i64,
    #[diesel(sql_type = Jsonb)]
    balances: serde_json::Value,
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pass {
    /// The position the checkpoints were moved to, if they moved.
    pub finished_at: Option<i64>,
    /// Merchants whose checkpoint was written.
    pub merchants: usize,
}

/// One pass in the caller's connection: finish the pending position if it has settled, then
/// note a new one.
pub async fn pass(conn: &mut AsyncPgConnection) -> QueryResult<Pass> {
    let state: State = diesel::sql_query(
        "SELECT through_entry_id, pending_entry_id, \
                NOT EXISTS (SELECT 1 FROM pg_locks \
                            WHERE virtualtransaction = ANY (coalesce(pending_writers, '{}'))) \
                    AS pending_settled \
         FROM ledger_checkpoint_state",
    )
    .get_result(conn)
    .await?;
    let mut done = Pass::default();
    if let (Some(position), true) = (state.pending_entry_id, state.pending_settled) {
        done = finish(conn, state.through_entry_id, position).await?;
    }
    // The highest id visible to this statement's snapshot, then (read after that snapshot)
    // the transactions still holding their write lock on the entries.
    diesel::sql_query(
        "UPDATE ledger_checkpoint_state \
         SET pending_entry_id = (SELECT max(id) FROM ledger_entries), \
             pending_writers = ARRAY(SELECT virtualtransaction FROM pg_locks \
                 WHERE locktype = 'relation' AND relation = 'ledger_entries'::regclass \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                   AND mode = 'RowExclusiveLock' AND pid <> pg_backend_pid())",
    )
    .execute(conn)
    .await?;
    Ok(done)
}

/// Moves every merchant's checkpoint from `from` to `to` in one transaction: the entries in
/// between are added to checkpoints at `from`; a merchant whose checkpoint is elsewhere (or
/// gone) is summed again up to `to`.
async fn finish(conn: &mut AsyncPgConnection, from: i64, to: i64) -> QueryResult<Pass> {
    if to <= from {
        return Ok(Pass::default());
    }
    conn.transaction(async |conn| {
        let deltas: Vec<SumRow> = diesel::sql_query(
            "SELECT merchant_id, account, currency, sum(amount_minor)::TEXT AS sum \
             FROM ledger_entries WHERE id > $1 AND id <= $2 \
             GROUP BY merchant_id, account, currency",
        )
        .bind::<BigInt, _>(from)
        .bind::<BigInt, _>(to)
        .load(conn)
        .await?;
        let mut by_merchant: BTreeMap<i64, Vec<SumRow>> = BTreeMap::new();
        for row in deltas {
            by_merchant.entry(row.merchant_id).or_default().push(row);
        }
        let mut merchants = 0;
        for (merchant_id, rows) in by_merchant {
            let balances = match checkpoint_of(conn, merchant_id).await? {
                Some((through, mut balances)) if through == from => {
                    for row in rows {
                        add(&mut balances, &row.account, &row.currency, &row.sum)?;
                    }
                    balances
                }
                // Moved by hand or deleted: summed again, once.
                _ => sums(conn, merchant_id, None, Some(to)).await?,
            };
            write(conn, merchant_id, to, &balances).await?;
            merchants += 1;
        }
        // Merchants with no entry in the range keep their checkpoint's balances at the new
        // position (nothing of theirs lies in between).
        diesel::sql_query(
            "UPDATE ledger_balance_checkpoints SET through_entry_id = $2, taken_at = now() \
             WHERE through_entry_id = $1",
        )
        .bind::<BigInt, _>(from)
        .bind::<BigInt, _>(to)
        .execute(conn)
        .await?;
        diesel::sql_query(
            "UPDATE ledger_checkpoint_state \
             SET through_entry_id = $1, pending_entry_id = NULL, pending_writers = NULL",
        )
        .bind::<BigInt, _>(to)
        .execute(conn)
        .await?;
        Ok(Pass {
            finished_at: Some(to),
            merchants,
        })
    })
    .await
}

type Sums = BTreeMap<(String, String), i128>;

async fn checkpoint_of(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
) -> QueryResult<Option<(i64, Sums)>> {
    let row: Option<CheckpointRow> = diesel::sql_query(
        "SELECT through_entry_id, balances FROM ledger_balance_checkpoints WHERE merchant_id = $1",
    )
    .bind::<BigInt, _>(merchant_id)
    .get_result(conn)
    .await
    .optional()?;
    let Some(row) = row else { return Ok(None) };
    let mut sums = Sums::new();
    let serde_json::Value::Object(map) = row.balances else {
        return Err(corrupt("a balance checkpoint that is not an object"));
    };
    for (key, value) in map {
        let (account, currency) = key
            .split_once('\t')
            .ok_or_else(|| corrupt("a balance checkpoint key without a tab"))?;
        let amount = value
            .as_str()
            .and_then(|v| v.parse::<i128>().ok())
            .ok_or_else(|| corrupt("a balance checkpoint amount that is not an integer"))?;
        sums.insert((account.to_owned(), currency.to_owned()), amount);
    }
    Ok(Some((row.through_entry_id, sums)))
}

async fn write(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    through: i64,
    balances: &Sums,
) -> QueryResult<()> {
    let json: serde_json::Map<String, serde_json::Value> = balances
        .iter()
        .map(|((account, currency), amount)| {
            (
                format!("{account}\t{currency}"),
                serde_json::Value::String(amount.to_string()),
            )
        })
        .collect();
    diesel::sql_query(
        "INSERT INTO ledger_balance_checkpoints (merchant_id, through_entry_id, balances) \
         VALUES ($1, $2, $3) \
         ON CONFLICT (merchant_id) DO UPDATE \
         SET through_entry_id = EXCLUDED.through_entry_id, balances = EXCLUDED.balances, \
             taken_at = now()",
    )
    .bind::<BigInt, _>(merchant_id)
    .bind::<BigInt, _>(through)
    .bind::<Jsonb, _>(serde_json::Value::Object(json))
    .execute(conn)
    .await?;
    Ok(())
}

/// A merchant's sums per (account, currency) over an id range ($1 merchant, $2 after, $3
/// through or NULL): an index-only range scan of `idx_ledger_entries_merchant_tail`.
pub const SUMS_SQL: &str = "SELECT merchant_id, account, currency, sum(amount_minor)::TEXT AS sum \
     FROM ledger_entries \
     WHERE merchant_id = $1 AND id > $2 AND ($3::BIGINT IS NULL OR id <= $3) \
     GROUP BY merchant_id, account, currency";

/// The sums of `merchant_id`'s entries per (account, currency) with `after < id <= through`.
async fn sums(
    conn: &mut AsyncPgConnection,
    merchant_id: i64,
    after: Option<i64>,
    through: Option<i64>,
) -> QueryResult<Sums> {
    let rows: Vec<SumRow> = diesel::sql_query(SUMS_SQL)
        .bind::<BigInt, _>(merchant_id)
        .bind::<BigInt, _>(after.unwrap_or(0))
        .bind::<Nullable<BigInt>, _>(through)
        .load(conn)
        .await?;
    let mut sums = Sums::new();
    for row in rows {
        add(&mut sums, &row.account, &row.currency, &row.sum)?;
    }
    Ok(sums)
}

/// Adds a sum PostgreSQL rendered as text (NUMERIC: exact beyond BIGINT).
fn add(sums: &mut Sums, account: &str, currency: &str, sum: &str) -> QueryResult<()> {
    let amount = sum
        .parse::<i128>()
        .map_err(|_| corrupt("a sum of entries that is not an integer"))?;
    add_amount(sums, (account.to_owned(), currency.to_owned()), amount)
}

fn add_amount(sums: &mut Sums, key: (String, String), amount: i128) -> QueryResult<()> {
    let slot = sums.entry(key).or_insert(0);
    *slot = slot
        .checked_add(amount)
        .ok_or_else(|| corrupt("a balance beyond i128"))?;
    Ok(())
}

/// A merchant's balances per account and currency, in account order; they sum to zero per
/// currency. Its checkpoint plus the entries after it (or every entry when it has none), read
/// in one snapshot.
pub async fn balances(conn: &mut AsyncPgConnection, merchant_id: i64) -> QueryResult<Vec<Balance>> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| {
            let (after, mut total) = match checkpoint_of(conn, merchant_id).await? {
                Some((through, balances)) => (Some(through), balances),
                None => (None, Sums::new()),
            };
            for (key, amount) in sums(conn, merchant_id, after, None).await? {
                add_amount(&mut total, key, amount)?;
            }
            Ok(total
                .into_iter()
                .map(|((account, currency), balance_minor)| Balance {
                    account,
                    currency,
                    balance_minor,
                })
                .collect())
        })
        .await
}

/// A pass on a connection of its own if no other gateway holds the checkpointer lock; `None`
/// when another instance checkpoints. The lock dies with the connection.
pub async fn run_exclusive_pass(database_url: &str) -> anyhow::Result<Option<Pass>> {
    let Some(mut conn) = db::connect_holding_lock(database_url, CHECKPOINTER_LOCK_KEY).await?
    else {
        return Ok(None);
    };
    Ok(Some(pass(&mut conn).await?))
}

/// The background checkpointer inside `serve`: a pass every `interval`, forever.
pub async fn run_periodically(database_url: String, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match run_exclusive_pass(&database_url).await {
            Ok(Some(pass)) => {
                if let Some(position) = pass.finished_at {
                    tracing::debug!(
                        position,
                        merchants = pass.merchants,
                        "balance checkpoints moved"
                    );
                }
            }
            Ok(None) => tracing::debug!("another gateway holds the checkpointer lock"),
            Err(error) => {
                tracing::warn!(error = %error, "balance checkpoint pass failed; will retry")
            }
        }
    }
}

fn corrupt(what: &'static str) -> diesel::result::Error {
    diesel::result::Error::DeserializationError(what.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_add_exactly_beyond_the_range_of_an_entry() {
        let mut sums = Sums::new();
        add(&mut sums, "merchant_payable", "USD", &i64::MAX.to_string()).unwrap();
        add(&mut sums, "merchant_payable", "USD", &i64::MAX.to_string()).unwrap();
        assert_eq!(
            sums[&("merchant_payable".to_owned(), "USD".to_owned())],
            2 * i128::from(i64::MAX)
        );
        assert!(add(&mut sums, "x", "USD", "1.5").is_err());
    }
}
