//! Balances from checkpoints: a background job (one gateway at a time, elected like the expiry
//! cleaner) records each merchant's balances as of a ledger position, and a balance read adds
//! only the entries after it, so the read no longer grows with the ledger. Nothing on the
//! callback path writes here; a merchant with no checkpoint is summed from the start, so the
//! checkpoint is a cache whose deletion changes no answer.
//!
//! Entries commit out of id order, so a pass notes a position and a later pass moves the
//! checkpoints to it once nothing at or below it can still commit (`crate::settled`).

use std::collections::BTreeMap;

use diesel::sql_types::{BigInt, Jsonb, Nullable, Text};
use diesel::{OptionalExtension, QueryResult};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::Balance;
use crate::db::one_row::CommittedResult;
use crate::settled::Tracker;

/// Where the checkpoints stand (`ledger_checkpoint_state`).
const POSITION: Tracker = Tracker {
    state_table: "ledger_checkpoint_state",
    through: "through_entry_id",
    pending: "pending_entry_id",
    source: "ledger_entries",
};

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
    let noted = POSITION.read(conn).await?;
    let mut done = Pass::default();
    if let Some(position) = noted.final_position() {
        done = finish(conn, noted.through, position).await?;
    }
    POSITION.note(conn).await?;
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
        POSITION.advance(conn, to).await?;
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
    .committed_result(conn)
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
