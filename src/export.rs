//! `export`: the stored verified callbacks of one provider as replayable JSONL, oldest first,
//! streamed row by row so memory stays constant whatever the volume.

use std::io::Write;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use futures_util::TryStreamExt;
use serde::Serialize;

use crate::schema::callback_deliveries;

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

/// One line of a replay file.
#[derive(Debug, Serialize)]
pub struct ReplayLine<'a> {
    pub provider: &'a str,
    pub id: &'a str,
    pub body: &'a str,
}

/// How many lines were written, and how many bodies could not be (not UTF-8).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExportCount {
    pub written: u64,
    pub skipped: u64,
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
