//! The sender inside `serve`: claims due notifications (`FOR UPDATE SKIP LOCKED`, so several
//! gateways drain one table and never wait for each other), posts each to its merchant's
//! endpoint signed as Standard Webhooks, and stores what came back.
//!
//! One task owns the database connection and the counts of attempts in flight; each attempt
//! runs in a task of its own and reports back. Bounds: at most `concurrency` attempts in flight,
//! at most `per_merchant_concurrency` of one merchant, and a claim asks each merchant only for
//! the room it has, so a slow or failing endpoint holds its own slots and never the others'.
//! Memory is bounded by the same numbers (a claimed row, its body, its result). Rounds (store
//! results, claim) are at least [`LINGER`] apart, so under load one statement claims many rows
//! and one stores many results; a commit that staged a notification in this process wakes the
//! sender at once, others are found by the poll.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::Wake;
use super::body::{render, webhook_id};
use super::model::{self, Notification, Recorded};
use super::schedule::{self, Answer, Failure, Next};
use crate::config::{NotificationSettings, Settings};
use crate::metrics::Metrics;
use crate::signature::scheme::SignatureScheme;
use crate::signature::standard_webhooks::StandardWebhooks;

/// The shortest time between two rounds of the sender's statements.
pub const LINGER: Duration = Duration::from_millis(10);

/// How often the backlog gauges are read from the database.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// At most this much of an endpoint's answer is read (so the connection can be reused); the
/// status alone decides.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A merchant's endpoint, ready to sign for.
struct Target {
    url: reqwest::Url,
    signer: StandardWebhooks,
}

/// The sender of one gateway.
pub struct Sender {
    database_url: String,
    statement_timeout: Duration,
    settings: NotificationSettings,
    targets: HashMap<i64, Arc<Target>>,
    /// The merchants in the order the next claim asks them (rotated each claim, so no merchant
    /// is always asked last when rooms exceed the free slots).
    merchants: Vec<i64>,
    http: reqwest::Client,
    metrics: Metrics,
    wake: Wake,
}

/// What one attempt did.
struct Done {
    id: i64,
    merchant_id: i64,
    attempt: i32,
    staged_at: chrono::DateTime<Utc>,
    answer: Answer,
}

impl Sender {
    /// The sender for `settings`' endpoints; `None` when no merchant has one.
    pub fn new(settings: &Settings, metrics: Metrics, wake: Wake) -> anyhow::Result<Option<Self>> {
        let targets: HashMap<i64, Arc<Target>> =
            NotificationSettings::endpoints(&settings.merchants)
                .map(|(id, endpoint)| {
                    let signer = StandardWebhooks::new(std::slice::from_ref(&endpoint.secret), 0);
                    (
                        id,
                        Arc::new(Target {
                            url: endpoint.url.clone(),
                            signer,
                        }),
                    )
                })
                .collect();
        if targets.is_empty() {
            return Ok(None);
        }
        let notifications = settings.notifications.clone();
        let http = reqwest::Client::builder()
            .timeout(notifications.attempt_timeout)
            .connect_timeout(notifications.attempt_timeout.min(Duration::from_secs(5)))
            // A notification goes to the configured URL only, never where an answer points.
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(notifications.per_merchant_concurrency)
            .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let mut merchants: Vec<i64> = targets.keys().copied().collect();
        merchants.sort_unstable();
        Ok(Some(Self {
            database_url: settings.database_url()?.to_owned(),
            statement_timeout: settings.database.statement_timeout,
            settings: notifications,
            targets,
            merchants,
            http,
            metrics,
            wake,
        }))
    }

    /// Sends forever (until the task is aborted).
    pub async fn run(mut self) {
        let concurrency = self.settings.concurrency;
        let (done_tx, mut done_rx) = mpsc::channel::<Done>(concurrency);
        let mut in_flight: HashMap<i64, usize> = HashMap::new();
        let mut total = 0usize;
        let mut results: Vec<Recorded> = Vec::new();
        let mut conn: Option<AsyncPgConnection> = None;
        let mut last_round = Instant::now();
        let mut next_backlog = Instant::now();
        // The last claim filled some merchant's room: more may be due, so claim again soon.
        let mut more_due = true;
        loop {
            if !more_due || total >= concurrency {
                tokio::select! {
                    () = self.wake.woken() => {}
                    () = tokio::time::sleep(self.settings.poll_interval) => {}
                    Some(done) = done_rx.recv() => {
                        total -= 1;
                        results.push(self.finished(done, &mut in_flight));
                    }
                }
            }
            tokio::time::sleep_until(last_round + LINGER).await;
            while let Ok(done) = done_rx.try_recv() {
                total -= 1;
                results.push(self.finished(done, &mut in_flight));
            }
            last_round = Instant::now();
            self.metrics.record_notification_sender_round();

            let Some(db) = self.connection(&mut conn).await else {
                more_due = false;
                continue;
            };
            if !results.is_empty() {
                match model::record(db, &results).await {
                    Ok(disabled) => {
                        results.clear();
                        for endpoint in disabled {
                            tracing::warn!(
                                merchant_id = endpoint.merchant_id,
                                reason = endpoint.disabled_reason.as_deref().unwrap_or(""),
                                "notification endpoint disabled; POST /admin/merchants/{{id}}/endpoint/enable sends its notifications again"
                            );
                        }
                    }
                    Err(error) => {
                        // Kept for the next round: at most one per attempt, and no claim happens
                        // without a connection, so this stays bounded by the concurrency.
                        tracing::warn!(%error, results = results.len(), "storing notification attempts failed; will retry");
                        conn = None;
                        more_due = false;
                        continue;
                    }
                }
            }
            if Instant::now() >= next_backlog {
                next_backlog = Instant::now() + BACKLOG_EVERY;
                match model::backlog(db).await {
                    Ok(backlog) => self
                        .metrics
                        .record_notification_backlog(backlog.pending, backlog.oldest_secs),
                    Err(error) => {
                        tracing::warn!(%error, "reading the notification backlog failed");
                        conn = None;
                        continue;
                    }
                }
            }
            let free = concurrency.saturating_sub(total);
            let (merchants, rooms) = self.rooms(&in_flight, free);
            if merchants.is_empty() {
                more_due = false;
                continue;
            }
            let claimed = match model::claim(
                db,
                &merchants,
                &rooms,
                i64::try_from(free).unwrap_or(i64::MAX),
                self.settings.claim_lease(),
            )
            .await
            {
                Ok(claimed) => claimed,
                Err(error) => {
                    tracing::warn!(%error, "claiming notifications failed; will retry");
                    conn = None;
                    more_due = false;
                    continue;
                }
            };
            more_due = claimed.len() >= free || filled_a_room(&claimed, &merchants, &rooms);
            for notification in claimed {
                let Some(target) = self.targets.get(&notification.merchant_id).cloned() else {
                    continue;
                };
                *in_flight.entry(notification.merchant_id).or_default() += 1;
                total += 1;
                tokio::spawn(attempt(
                    self.http.clone(),
                    target,
                    notification,
                    done_tx.clone(),
                ));
            }
        }
    }

    /// The merchants to ask and the room of each: free per-merchant slots, starting one further
    /// along the list each claim.
    fn rooms(&mut self, in_flight: &HashMap<i64, usize>, free: usize) -> (Vec<i64>, Vec<i32>) {
        if free == 0 {
            return (Vec::new(), Vec::new());
        }
        self.merchants.rotate_left(1);
        let per_merchant = self.settings.per_merchant_concurrency;
        self.merchants
            .iter()
            .filter_map(|m| {
                let busy = in_flight.get(m).copied().unwrap_or(0);
                let room = per_merchant.saturating_sub(busy).min(free);
                (room > 0).then(|| (*m, i32::try_from(room).unwrap_or(i32::MAX)))
            })
            .unzip()
    }

    /// Counts an attempt's end and turns its answer into the result to store.
    fn finished(&self, done: Done, in_flight: &mut HashMap<i64, usize>) -> Recorded {
        if let Some(count) = in_flight.get_mut(&done.merchant_id) {
            *count = count.saturating_sub(1);
        }
        self.metrics
            .record_notification_attempt(done.answer.label());
        let next = schedule::next(
            &done.answer,
            done.attempt,
            &self.settings.retry_delays,
            rand::random::<f64>(),
        );
        if next == Next::Delivered {
            let waited = (Utc::now() - done.staged_at).to_std().unwrap_or_default();
            self.metrics.record_notification_delivered(waited);
        } else {
            tracing::debug!(
                notification = done.id,
                merchant_id = done.merchant_id,
                attempt = done.attempt,
                result = done.answer.label(),
                "notification attempt failed"
            );
        }
        Recorded {
            id: done.id,
            attempt: done.attempt,
            delivered: next == Next::Delivered,
            gone: next == Next::WaitForEnable,
            retry_ms: match next {
                Next::RetryAfter(wait) => Some(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
                _ => None,
            },
            status_code: done.answer.status().map(i32::from),
            error: done.answer.error(),
        }
    }

    /// The sender's own connection, opened when there is none.
    async fn connection<'c>(
        &self,
        conn: &'c mut Option<AsyncPgConnection>,
    ) -> Option<&'c mut AsyncPgConnection> {
        if conn.is_none() {
            match open(&self.database_url, self.statement_timeout).await {
                Ok(opened) => *conn = Some(opened),
                Err(error) => {
                    tracing::warn!(%error, "notification sender: no database connection; will retry");
                    return None;
                }
            }
        }
        conn.as_mut()
    }
}

/// Whether some merchant got as many rows as it had room for.
fn filled_a_room(claimed: &[Notification], merchants: &[i64], rooms: &[i32]) -> bool {
    merchants.iter().zip(rooms).any(|(merchant, room)| {
        let got = claimed
            .iter()
            .filter(|n| n.merchant_id == *merchant)
            .count();
        i32::try_from(got).is_ok_and(|got| got >= *room)
    })
}

async fn open(url: &str, statement_timeout: Duration) -> anyhow::Result<AsyncPgConnection> {
    let mut conn = AsyncPgConnection::establish(url).await?;
    // Every statement of the sender walks an index; a plan cached while the table was young
    // must not keep a scan of it (as for the payment writers).
    conn.batch_execute(&format!(
        "SET statement_timeout = {}; SET lock_timeout = {}; SET enable_seqscan = off",
        statement_timeout.as_millis().max(1),
        statement_timeout.as_millis().max(1),
    ))
    .await?;
    Ok(conn)
}

/// One attempt: the body as staged, signed now, posted once; what came back goes to `done`.
async fn attempt(
    http: reqwest::Client,
    target: Arc<Target>,
    notification: Notification,
    done: mpsc::Sender<Done>,
) {
    let body = render(&notification);
    let id = webhook_id(notification.id);
    let mut request = http
        .post(target.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    for (name, value) in target.signer.sign(&id, &body, Utc::now().timestamp()) {
        request = request.header(name, value);
    }
    let answer = match request.body(body).send().await {
        Ok(response) => {
            let answer = Answer::of_status(response.status().as_u16());
            drain(response).await;
            answer
        }
        Err(error) if error.is_timeout() => Answer::Failure(Failure::Timeout),
        Err(error) => {
            // Without the URL: its query may carry the merchant's token.
            tracing::debug!(error = %error.without_url(), "notification attempt: no answer");
            Answer::Failure(Failure::Connection)
        }
    };
    // The owner holds a receiver as long as it runs; a send fails only at shutdown.
    let _ = done
        .send(Done {
            id: notification.id,
            merchant_id: notification.merchant_id,
            attempt: notification.attempts,
            staged_at: notification.created_at,
            answer,
        })
        .await;
}

/// Reads the answer's body up to [`MAX_ANSWER_BYTES`], so its connection goes back to the
/// pool; a larger or broken one is dropped with its connection.
async fn drain(mut response: reqwest::Response) {
    let mut read = 0;
    while let Ok(Some(chunk)) = response.chunk().await {
        read += chunk.len();
        if read > MAX_ANSWER_BYTES {
            return;
        }
    }
}

/// Starts the sender of `settings` on the current runtime, if any merchant has an endpoint.
pub fn spawn(
    settings: &Settings,
    metrics: Metrics,
    wake: Wake,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    Ok(Sender::new(settings, metrics, wake)?.map(|sender| tokio::spawn(sender.run())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merchant_at_its_bound_is_not_asked_and_rooms_never_exceed_the_free_slots() {
        let settings = Settings::from_toml(
            "[database]\nurl = \"postgres://u@h/db\"\n\
             [notifications]\nconcurrency = 10\nper_merchant_concurrency = 4\n\
             [[merchants]]\nid = 1\nnotify_url = \"https://a.example/h\"\nnotify_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n\
             [[merchants]]\nid = 2\nnotify_url = \"https://b.example/h\"\nnotify_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n",
            &crate::config::ProcessEnv,
        )
        .unwrap();
        let mut sender = Sender::new(&settings, Metrics::new(), Wake::default())
            .unwrap()
            .unwrap();
        let busy = HashMap::from([(1, 4), (2, 1)]);
        assert_eq!(sender.rooms(&busy, 5), (vec![2], vec![3]));
        assert_eq!(sender.rooms(&HashMap::new(), 2).1, vec![2, 2]);
        assert_eq!(sender.rooms(&HashMap::new(), 0), (vec![], vec![]));
    }
}
