//! Keeps this gateway's [`Directory`] in step with the endpoints made by API: their revision
//! read every [`REFRESH`] (a primary-key lookup), the endpoints reloaded when it moved. A change
//! made through any gateway reaches every other within about a second, with no restart and no
//! NOTIFY (which would take a database-wide lock at each commit).

use std::sync::Arc;
use std::time::Duration;

use super::directory::{ApiEndpoint, Directory};
use super::endpoints::{self, EndpointRow};
use crate::metrics::Metrics;
use crate::secret_box::Keyring;

/// How often a gateway reads the endpoints' revision.
pub const REFRESH: Duration = Duration::from_secs(1);

/// How soon a failed first read of the endpoints is tried again.
const FIRST_LOAD_RETRY: Duration = Duration::from_millis(50);

/// Keeps `directory` in step with the database: the revision every [`REFRESH`] (or at once
/// when `changed` is notified by this gateway's own change), the endpoints when it moved.
pub async fn watch(
    directory: Arc<Directory>,
    database_url: String,
    keys: Option<Keyring>,
    metrics: Metrics,
    changed: Arc<tokio::sync::Notify>,
) {
    let mut conn = None;
    loop {
        if conn.is_none() {
            match crate::db::connect_as(&database_url, "callback-gateway/endpoints").await {
                Ok(opened) => conn = Some(opened),
                Err(error) => {
                    tracing::warn!(%error, "merchant endpoints: no database connection; will retry");
                }
            }
        }
        if let Some(db) = conn.as_mut() {
            let loaded = async {
                let revision = endpoints::revision(db).await?;
                if directory.revision() != Some(revision) {
                    let (revision, rows) = endpoints::load_all(db).await?;
                    let (opened, unopened) = open_all(&rows, keys.as_ref());
                    metrics.record_endpoints_loaded(revision, opened.len(), unopened.len());
                    directory.replace(revision, opened, &unopened);
                }
                Ok::<_, diesel::result::Error>(())
            };
            if let Err(error) = loaded.await {
                tracing::warn!(%error, "merchant endpoints: reading them failed; will retry");
                conn = None;
            }
        }
        // Until the first load the gateway answers nothing (it cannot know who must be
        // notified), so a failed first read is tried again at once, not a REFRESH later.
        let wait = if directory.revision().is_none() {
            FIRST_LOAD_RETRY
        } else {
            REFRESH
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = changed.notified() => {}
        }
    }
}

/// The rows whose secrets `keys` open, ready to sign with, and the merchants of those they do
/// not open (another key sealed them, or the row is not the merchant's it was sealed for).
/// Those are logged and counted (`gateway_webhook_endpoints{state="unopened"}`); their
/// merchants' notifications are still staged and wait for a gateway that can sign them.
fn open_all(rows: &[EndpointRow], keys: Option<&Keyring>) -> (Vec<ApiEndpoint>, Vec<i64>) {
    let mut opened = Vec::with_capacity(rows.len());
    let mut unopened = Vec::new();
    for row in rows {
        let secrets = reqwest::Url::parse(&row.url)
            .ok()
            .zip(keys.and_then(|keys| row.open(keys)));
        let Some((url, secrets)) = secrets else {
            tracing::error!(
                endpoint_id = %row.id,
                merchant_id = row.merchant_id,
                "a merchant endpoint's secret does not open with [secrets] key or previous_keys; its notifications wait for a gateway that can open it"
            );
            unopened.push(row.merchant_id);
            continue;
        };
        opened.push(ApiEndpoint {
            merchant_id: row.merchant_id,
            id: row.id.clone(),
            url,
            current: secrets.current,
            previous: secrets.previous,
            rate_limit_per_sec: row
                .rate_limit_per_sec
                .and_then(|rate| u32::try_from(rate).ok()),
        });
    }
    (opened, unopened)
}
