//! The audit log's hash chain (migration 000061): each row's `row_hash` is SHA-256 over the
//! previous row's hash and the row's own fields, so a row deleted, changed or moved breaks the
//! chain at the first row after it, and the head (`audit_log_chain`) names the newest row.
//! The database computes the hashes as rows are written; this file computes the same bytes on
//! its own, so a verifier trusts no routine of the database it checks (an owner could replace
//! one). `callback-gateway audit verify` walks the whole chain; `serve` checks the newest rows
//! at start.

use chrono::{DateTime, Utc};
use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use sha2::{Digest, Sha256};

use crate::db::one_row::CommittedResult;

/// The `prev_hash` of the first row.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Rows read per query while walking.
const PAGE: i64 = 1000;

/// One row as the chain hashes it.
#[derive(Debug, Clone, QueryableByName)]
pub struct ChainRow {
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
    #[diesel(sql_type = Text)]
    pub actor: String,
    #[diesel(sql_type = Text)]
    pub role: String,
    #[diesel(sql_type = Text)]
    pub action: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub target: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub request_id: Option<String>,
    #[diesel(sql_type = Text)]
    pub outcome: String,
    /// jsonb's own text of `changes`: one text for one value, whatever the JSON was written as.
    #[diesel(sql_type = Text)]
    pub changes: String,
    #[diesel(sql_type = Text)]
    pub prev_hash: String,
    #[diesel(sql_type = Text)]
    pub row_hash: String,
}

impl ChainRow {
    /// The hash this row's fields give after `prev_hash` (what migration 000061's
    /// `audit_log_row_hash` computes).
    pub fn expected_hash(&self, prev_hash: &str) -> String {
        let mut text = String::new();
        text.push_str(prev_hash);
        text.push('\n');
        text.push_str(&self.id.to_string());
        text.push('\n');
        text.push_str(&self.at.timestamp_micros().to_string());
        text.push('\n');
        for field in [
            Some(self.actor.as_str()),
            Some(self.role.as_str()),
            Some(self.action.as_str()),
            self.target.as_deref(),
            self.request_id.as_deref(),
            Some(self.outcome.as_str()),
            Some(self.changes.as_str()),
        ] {
            match field {
                Some(value) => {
                    text.push_str(&value.len().to_string());
                    text.push(':');
                    text.push_str(value);
                }
                None => text.push('-'),
            }
            text.push('\n');
        }
        hex::encode(Sha256::digest(text.as_bytes()))
    }
}

/// Where the chain breaks first, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Break {
    /// The row's fields do not give its `row_hash`: it was changed (or its id moved).
    Changed { id: i64 },
    /// The row does not follow the row before it: rows between were deleted, or rows moved.
    Unlinked { id: i64, previous_id: Option<i64> },
    /// The head names a row the table does not end with: the newest rows were deleted (or
    /// the head was changed).
    Head {
        head_id: i64,
        newest_id: Option<i64>,
    },
}

impl std::fmt::Display for Break {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Break::Changed { id } => write!(
                f,
                "row {id}: its fields do not give its row_hash (the row was changed)"
            ),
            Break::Unlinked {
                id,
                previous_id: Some(previous),
            } => write!(
                f,
                "row {id}: its prev_hash is not the row_hash of row {previous} before it (rows between them were deleted, or rows were moved)"
            ),
            Break::Unlinked {
                id,
                previous_id: None,
            } => write!(
                f,
                "row {id}: the first row, but its prev_hash is not the chain's start (rows before it were deleted)"
            ),
            Break::Head {
                head_id,
                newest_id: Some(newest),
            } => write!(
                f,
                "the chain's head names row {head_id}, but the newest row is {newest} (the newest rows were deleted)"
            ),
            Break::Head {
                head_id,
                newest_id: None,
            } => write!(
                f,
                "the chain's head names row {head_id}, but the log is empty (its rows were deleted)"
            ),
        }
    }
}

/// What a walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Rows checked.
    pub rows: u64,
    /// The newest row checked: its id and hash, to keep outside the database (a chain
    /// rewritten from the start would give another).
    pub newest: Option<(i64, String)>,
    pub broken: Option<Break>,
}

#[derive(QueryableByName)]
struct Head {
    #[diesel(sql_type = BigInt)]
    last_id: i64,
    #[diesel(sql_type = Text)]
    last_hash: String,
}

const COLUMNS: &str = "id, at, actor, role, action, target, request_id, outcome, \
                       changes::TEXT AS changes, prev_hash, row_hash";

/// Walks the whole chain, oldest first, in pages of one snapshot (a row written meanwhile
/// would otherwise move the head past the rows read).
pub async fn verify_all(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Verdict> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| walk_all(conn).await)
        .await
}

/// The newest `limit` rows: their links and hashes, and the head (what `serve` checks at
/// start: a break among the rows of days past is `audit verify`'s to find).
pub async fn verify_newest(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> diesel::QueryResult<Verdict> {
    conn.build_transaction()
        .read_only()
        .repeatable_read()
        .run(async |conn| walk_newest(conn, limit).await)
        .await
}

async fn walk_all(conn: &mut AsyncPgConnection) -> diesel::QueryResult<Verdict> {
    let mut walk = Walk::new(Some(GENESIS.to_owned()));
    let mut after = 0_i64;
    loop {
        let page: Vec<ChainRow> = diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM audit_log WHERE id > $1 ORDER BY id LIMIT {PAGE}"
        ))
        .bind::<BigInt, _>(after)
        .load(conn)
        .await?;
        let Some(last) = page.last() else { break };
        after = last.id;
        let full = page.len() as i64 == PAGE;
        if walk.rows_of(&page) {
            return Ok(walk.verdict());
        }
        if !full {
            break;
        }
    }
    walk.head(conn).await
}

async fn walk_newest(conn: &mut AsyncPgConnection, limit: i64) -> diesel::QueryResult<Verdict> {
    let mut page: Vec<ChainRow> = diesel::sql_query(format!(
        "SELECT {COLUMNS} FROM audit_log ORDER BY id DESC LIMIT $1"
    ))
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?;
    page.reverse();
    // The oldest row read links to one not read: only its own hash is checked.
    let mut walk = Walk::new(None);
    if walk.rows_of(&page) {
        return Ok(walk.verdict());
    }
    walk.head(conn).await
}

/// A walk in id order: the previous row's id and hash, and the first break.
struct Walk {
    previous: Option<(i64, String)>,
    /// What the next row's `prev_hash` must be; `None`: unknown (the first of a partial walk).
    expected_prev: Option<String>,
    rows: u64,
    broken: Option<Break>,
}

impl Walk {
    fn new(expected_prev: Option<String>) -> Self {
        Self {
            previous: None,
            expected_prev,
            rows: 0,
            broken: None,
        }
    }

    /// Checks `rows` (the next ones in id order); true at the first break.
    fn rows_of(&mut self, rows: &[ChainRow]) -> bool {
        for row in rows {
            self.rows += 1;
            if let Some(expected) = &self.expected_prev
                && &row.prev_hash != expected
            {
                self.broken = Some(Break::Unlinked {
                    id: row.id,
                    previous_id: self.previous.as_ref().map(|(id, _)| *id),
                });
                return true;
            }
            if row.expected_hash(&row.prev_hash) != row.row_hash {
                self.broken = Some(Break::Changed { id: row.id });
                return true;
            }
            self.expected_prev = Some(row.row_hash.clone());
            self.previous = Some((row.id, row.row_hash.clone()));
        }
        false
    }

    /// The head must name the newest row and its hash.
    async fn head(mut self, conn: &mut AsyncPgConnection) -> diesel::QueryResult<Verdict> {
        let head: Head = diesel::sql_query("SELECT last_id, last_hash FROM audit_log_chain")
            .committed_result(conn)
            .await?;
        let newest_id = self.previous.as_ref().map(|(id, _)| *id);
        let matches = match &self.previous {
            Some((id, hash)) => head.last_id == *id && &head.last_hash == hash,
            None => head.last_id == 0 && head.last_hash == GENESIS,
        };
        if !matches {
            self.broken = Some(Break::Head {
                head_id: head.last_id,
                newest_id,
            });
        }
        Ok(self.verdict())
    }

    fn verdict(self) -> Verdict {
        Verdict {
            rows: self.rows,
            newest: self.previous,
            broken: self.broken,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> ChainRow {
        ChainRow {
            id: 7,
            at: DateTime::parse_from_rfc3339("2026-12-05T10:00:00.123456Z")
                .unwrap()
                .with_timezone(&Utc),
            actor: "alice".into(),
            role: "admin".into(),
            action: "operator.add".into(),
            target: Some("operator:bob".into()),
            request_id: None,
            outcome: "added".into(),
            changes: r#"{"role": "finance"}"#.into(),
            prev_hash: GENESIS.into(),
            row_hash: String::new(),
        }
    }

    #[test]
    fn a_row_hashes_its_fields_after_the_previous_hash() {
        // The same bytes as migration 000061's audit_log_row_hash (the integration tests
        // compare the two on rows the database wrote).
        let text = format!(
            "{GENESIS}\n7\n1796464800123456\n5:alice\n5:admin\n12:operator.add\n12:operator:bob\n-\n5:added\n19:{{\"role\": \"finance\"}}\n"
        );
        assert_eq!(
            row().expected_hash(GENESIS),
            hex::encode(Sha256::digest(text.as_bytes()))
        );
    }

    #[test]
    fn text_moved_between_fields_changes_the_hash() {
        let mut moved = row();
        moved.actor = "alic".into();
        moved.role = "eadmin".into();
        assert_ne!(moved.expected_hash(GENESIS), row().expected_hash(GENESIS));
        let mut absent = row();
        absent.target = None;
        let mut empty = row();
        empty.target = Some(String::new());
        assert_ne!(
            absent.expected_hash(GENESIS),
            empty.expected_hash(GENESIS),
            "NULL and an empty text differ"
        );
    }

    #[test]
    fn a_walk_names_the_first_row_that_does_not_follow_or_does_not_hash() {
        let mut first = row();
        first.row_hash = first.expected_hash(GENESIS);
        let mut second = row();
        second.id = 8;
        second.prev_hash = first.row_hash.clone();
        second.row_hash = second.expected_hash(&second.prev_hash);
        let mut walk = Walk::new(Some(GENESIS.into()));
        assert!(!walk.rows_of(&[first.clone(), second.clone()]));

        let mut changed = second.clone();
        changed.outcome = "refused".into();
        let mut walk = Walk::new(Some(GENESIS.into()));
        assert!(walk.rows_of(&[first.clone(), changed]));
        assert_eq!(walk.broken, Some(Break::Changed { id: 8 }));

        let mut walk = Walk::new(Some(GENESIS.into()));
        assert!(walk.rows_of(&[second]));
        assert_eq!(
            walk.broken,
            Some(Break::Unlinked {
                id: 8,
                previous_id: None
            })
        );
    }
}
