//! Keeps this gateway's [`Directory`] in step with the endpoints made by API: their revision
//! read every [`REFRESH`] (a primary-key lookup), the endpoints reloaded when it moved. A change
//! made through any gateway reaches every other within about a second, with no restart and no
//! NOTIFY (which would take a database-wide lock at each commit).

use std::sync::Arc;
use std::time::Duration;

use super::directory::{ApiEndpoint, Directory};
use super::endpoints::{self, EndpointRow};
use crate::metrics::Metrics;
use crate::secret_box::SecretsKey;

/// How often a gateway reads the endpoints' revision.
pub const REFRESH: Duration = Duration::from_secs(1);

/// Keeps `directory` in step with the database: the revision every [`REFRESH`] (or at once
/// when `changed` is notified by this gateway's own change), the endpoints when it moved.
pub async fn watch(
    directory: Arc<Directory>,
    database_url: String,
    key: Option<SecretsKey>,
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
                    let opened = open_all(&rows, key.as_ref());
                    let unopened = rows.len() - opened.len();
                    metrics.record_endpoints_loaded(revision, opened.len(), unopened);
                    directory.replace(revision, opened);
                }
                Ok::<_, diesel::result::Error>(())
            };
            if let Err(error) = loaded.await {
                tracing::warn!(%error, "merchant endpoints: reading them failed; will retry");
                conn = None;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(REFRESH) => {}
            () = changed.notified() => {}
        }
    }
}

/// The rows whose secrets `key` opens, ready to sign with. A row it does not open (another key
/// sealed it) is left out and logged: its merchant falls back to the configuration file's
/// endpoint, or gets none, and `gateway_webhook_endpoints{state="unopened"}` counts it.
fn open_all(rows: &[EndpointRow], key: Option<&SecretsKey>) -> Vec<ApiEndpoint> {
    rows.iter()
        .filter_map(|row| {
            let opened = reqwest::Url::parse(&row.url)
                .ok()
                .zip(key.and_then(|key| row.open(key)));
            let Some((url, secrets)) = opened else {
                tracing::error!(
                    endpoint_id = %row.id,
                    merchant_id = row.merchant_id,
                    "a merchant endpoint's secret does not open with [secrets] key; its notifications are not sent"
                );
                return None;
            };
            Some(ApiEndpoint {
                merchant_id: row.merchant_id,
                id: row.id.clone(),
                url,
                current: secrets.current,
                previous: secrets.previous,
            })
        })
        .collect()
}
