//! `export`: the stored verified callbacks of one provider as replayable JSONL, oldest first,
//! streamed row by row so memory stays constant whatever the volume. Also the replay file's
//! trailer, which the HTTP exports end with (see docs/console.md), and the batch loop that
//! writes them.

use std::io::Write;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::TryStreamExt;
use serde::{Deserialize, Serialize};

use crate::schema_partitioned::callback_deliveries;

#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The provider whose callbacks to export.
    #[arg(long)]
    pub provider: String,
    /// Only callbacks received at or after this time (RFC 3339).
    #[arg(long)]
    pub since: Option<DateTime<Utc>>,
    /// Only callbacks received before this time (RFC 3339).
    #[arg(long)]
    pub until: Option<DateTime<Utc>>,
}

/// One stored callback to export, with the position it was read at (the next batch starts
/// after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportRow<C> {
    pub cursor: C,
    pub provider: String,
    pub event_id: String,
    pub body: Vec<u8>,
}

/// One line of a replay file.
#[derive(Debug, Serialize)]
pub struct ReplayLine<'a> {
    pub provider: &'a str,
    pub id: &'a str,
    pub body: &'a str,
}

/// How many lines were written, and how many bodies could not be (not UTF-8).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ExportCount {
    pub written: u64,
    pub skipped: u64,
}

/// The last line of a complete HTTP export: `{"trailer":{"events":N,"skipped_non_utf8":M}}`.
/// A download without it was cut; `replay` checks that N is the number of event lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trailer {
    /// Event lines written before the trailer.
    pub events: u64,
    /// Events left out because their body is not UTF-8 (a JSON string cannot carry it).
    pub skipped_non_utf8: u64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrailerLine {
    trailer: Trailer,
}

impl Trailer {
    /// The trailer `line` is, or `None` for any other line (an event, or garbage).
    pub fn parse(line: &str) -> Option<Self> {
        serde_json::from_str::<TrailerLine>(line)
            .ok()
            .map(|t| t.trailer)
    }

    /// The line, newline included.
    pub fn to_line(self) -> Vec<u8> {
        let mut line = serde_json::to_vec(&TrailerLine { trailer: self }).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// The replay lines of `rows` (one chunk, one line each); bodies that are not UTF-8 are
/// counted in `count.skipped` and left out.
fn lines_of<C>(rows: &[ExportRow<C>], count: &mut ExportCount) -> Vec<u8> {
    let mut chunk = Vec::with_capacity(rows.iter().map(|r| r.body.len() + 64).sum());
    for row in rows {
        let Ok(body) = std::str::from_utf8(&row.body) else {
            tracing::warn!(
                provider = row.provider,
                event_id = row.event_id,
                "skipped a callback whose body is not UTF-8"
            );
            count.skipped += 1;
            continue;
        };
        let line = ReplayLine {
            provider: &row.provider,
            id: &row.event_id,
            body,
        };
        // Serializing three strings into a Vec cannot fail.
        if serde_json::to_writer(&mut chunk, &line).is_ok() {
            chunk.push(b'\n');
            count.written += 1;
        }
    }
    chunk
}

/// How an export by batches ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Streamed<E> {
    /// Every batch was sent, then the trailer.
    Complete(ExportCount),
    /// The receiver went away (the client closed the download).
    Abandoned,
    /// A batch could not be read: no trailer was sent, so the output is recognisably cut.
    Failed(E),
}

/// Exports by batches: `fetch(after)` reads the batch after a cursor (an empty one ends it),
/// `send` passes one chunk of lines on and says whether anyone still listens. The trailer is
/// sent only after the last batch, so any failure leaves a file without it.
pub async fn by_batches<C: Copy, E>(
    mut fetch: impl AsyncFnMut(Option<C>) -> Result<Vec<ExportRow<C>>, E>,
    mut send: impl AsyncFnMut(Vec<u8>) -> bool,
) -> Streamed<E> {
    let mut count = ExportCount::default();
    let mut after = None;
    loop {
        let rows = match fetch(after).await {
            Ok(rows) => rows,
            Err(error) => return Streamed::Failed(error),
        };
        let Some(last) = rows.last() else { break };
        after = Some(last.cursor);
        let chunk = lines_of(&rows, &mut count);
        drop(rows);
        if !chunk.is_empty() && !send(chunk).await {
            return Streamed::Abandoned;
        }
    }
    let trailer = Trailer {
        events: count.written,
        skipped_non_utf8: count.skipped,
    };
    if send(trailer.to_line()).await {
        Streamed::Complete(count)
    } else {
        Streamed::Abandoned
    }
}

pub async fn run(
    conn: &mut AsyncPgConnection,
    args: &ExportArgs,
    out: &mut dyn Write,
) -> anyhow::Result<ExportCount> {
    let mut query = callback_deliveries::table
        .filter(callback_deliveries::provider.eq(&args.provider))
        .order((
            callback_deliveries::received_at.asc(),
            callback_deliveries::id.asc(),
        ))
        .select((callback_deliveries::event_id, callback_deliveries::body))
        .into_boxed();
    if let Some(since) = args.since {
        query = query.filter(callback_deliveries::received_at.ge(since));
    }
    if let Some(until) = args.until {
        query = query.filter(callback_deliveries::received_at.lt(until));
    }
    let mut rows = query.load_stream::<(String, Vec<u8>)>(conn).await?;
    let mut count = ExportCount::default();
    while let Some((event_id, body)) = rows.try_next().await? {
        // A replay file carries bodies as JSON strings; a body that is not UTF-8 cannot be one.
        let Ok(body) = std::str::from_utf8(&body) else {
            tracing::warn!(event_id, "skipped a callback whose body is not UTF-8");
            count.skipped += 1;
            continue;
        };
        serde_json::to_writer(
            &mut *out,
            &ReplayLine {
                provider: &args.provider,
                id: &event_id,
                body,
            },
        )?;
        out.write_all(b"\n")?;
        count.written += 1;
    }
    out.flush()?;
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, body: &[u8]) -> ExportRow<i64> {
        ExportRow {
            cursor: id,
            provider: "acme".into(),
            event_id: format!("evt_{id}"),
            body: body.to_vec(),
        }
    }

    /// Runs [`by_batches`] over `batches` (each `Ok` a batch, `Err` a failed read) and returns
    /// how it ended with the text it sent.
    async fn export(
        batches: Vec<Result<Vec<ExportRow<i64>>, &'static str>>,
    ) -> (Streamed<&'static str>, String) {
        let mut batches = batches.into_iter();
        let mut out = Vec::new();
        let streamed = by_batches(
            async |_after| batches.next().unwrap_or(Ok(Vec::new())),
            async |chunk: Vec<u8>| {
                out.extend_from_slice(&chunk);
                true
            },
        )
        .await;
        (streamed, String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn a_complete_export_ends_with_a_trailer_counting_lines_and_skipped_bodies() {
        let (streamed, text) = export(vec![
            Ok(vec![row(1, b"{}"), row(2, b"\xff")]),
            Ok(vec![row(3, b"{}")]),
        ])
        .await;
        assert_eq!(
            streamed,
            Streamed::Complete(ExportCount {
                written: 2,
                skipped: 1
            })
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[2], r#"{"trailer":{"events":2,"skipped_non_utf8":1}}"#);
        assert_eq!(
            Trailer::parse(lines[2]),
            Some(Trailer {
                events: 2,
                skipped_non_utf8: 1
            })
        );
        assert_eq!(Trailer::parse(lines[0]), None, "an event is no trailer");
    }

    #[tokio::test]
    async fn an_export_that_fails_mid_way_sends_what_it_had_and_no_trailer() {
        let (streamed, text) = export(vec![
            Ok(vec![row(1, b"{}"), row(2, b"{}")]),
            Err("statement timeout"),
            Ok(vec![row(3, b"{}")]),
        ])
        .await;
        assert_eq!(streamed, Streamed::Failed("statement timeout"));
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.contains("trailer"), "{text}");
    }

    #[tokio::test]
    async fn an_empty_export_is_its_trailer_alone() {
        let (streamed, text) = export(vec![]).await;
        assert_eq!(streamed, Streamed::Complete(ExportCount::default()));
        assert_eq!(
            text,
            "{\"trailer\":{\"events\":0,\"skipped_non_utf8\":0}}\n"
        );
    }
}
