//! The sender inside `serve`: claims due notifications (`FOR UPDATE SKIP LOCKED`, so several
//! gateways drain one table and never wait for each other), posts each to its merchant's
//! endpoint signed as Standard Webhooks, and stores what came back.
//!
//! Two kinds of task share one [`Work`] (behind a mutex held only to count, never across an
//! await): the owner, which alone talks to the database, and the attempts, one task each. An
//! attempt that ends notes its result and starts its endpoint's next claimed row at once, so
//! how fast an endpoint is served depends on the endpoint, not on the owner's rounds; the owner
//! stores the results and claims more in rounds at least [`LINGER`] apart, so under load one
//! statement claims many rows and one stores many results. Bounds: at most `concurrency`
//! attempts in flight, at most `per_merchant_concurrency` of one endpoint, and a claim asks
//! each endpoint only for the room it has, so a slow or failing endpoint holds its own slots and
//! never the others'. An endpoint with a `rate_limit_per_sec` holds at most a second's worth of
//! rows, and each attempt waits for its turn under the endpoint's limiter (evenly spaced, no
//! burst): a backlog is held to the rate, never dropped. Memory is bounded by the same numbers (a claimed row, its body, its
//! result). A commit that staged a notification in this process wakes the owner at once, others
//! are found by the poll.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::Utc;
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::Wake;
use super::body::{render, webhook_id};
use super::directory::{Directory, Target};
use super::model::{self, EndpointKey, Notification, Recorded};
use super::schedule::{self, Answer, Failure, Next};
use crate::config::Settings;
use crate::config::merchants::MerchantSettings;
use crate::config::notifications::NotificationSettings;
use crate::metrics::Metrics;
use crate::outbound::{self, Outbound};

/// The shortest time between two rounds of the sender's statements.
pub const LINGER: Duration = Duration::from_millis(10);

/// The callback path is saturated while at least this many deliveries wait in the capture
/// queues for a statement (a batch's worth is queued behind the statements in flight; at a
/// moderate load arrivals find a statement free or join a small batch).
const BUSY_QUEUE: i64 = 8;

/// While the callback path is saturated, rounds are this far apart and claim at most
/// [`BUSY_CLAIM`] rows: at most 160 notifications a second per gateway, about 1% of this 2-core
/// machine, so the backlog still moves (docs/notifications.md, "Callbacks first").
const BUSY_LINGER: Duration = Duration::from_millis(100);
const BUSY_CLAIM: usize = 16;

/// How often the backlog gauges are read from the database.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// An endpoint may hold this many times its attempts' bound in claimed rows waiting for a slot,
/// so a fast endpoint is kept busy between two claims (8 in flight and 64 queued: up to about
/// 7,000 a second for one endpoint at [`LINGER`]). An endpoint whose queued rows had to be
/// released (its answers are slow) gets no queue room for a lease's time.
const QUEUE_FACTOR: usize = 8;

/// At most this much of an endpoint's answer is read (so the connection can be reused); the
/// status alone decides.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// The sender of one gateway.
pub struct Sender {
    database_url: String,
    statement_timeout: Duration,
    /// Where the claim order starts among the endpoints (moved on each claim, so no endpoint is
    /// always asked last when rooms exceed the free slots).
    rotation: usize,
    shared: Arc<Shared>,
    wake: Wake,
}

/// What the owner and the attempts share.
struct Shared {
    settings: NotificationSettings,
    /// Where each merchant's notifications go now (the configuration file's endpoints and
    /// those made by API, kept in step by `directory::watch`).
    directory: Arc<Directory>,
    /// The clients of the attempts: each merchant's requests held to the address rules, but
    /// for the origins granted to that merchant (crate::outbound).
    outbound: Outbound<i64>,
    metrics: Metrics,
    work: Mutex<Work>,
    /// An attempt ended: a result waits to be stored, and its endpoint has room to claim into.
    progress: Notify,
}

impl Shared {
    fn work(&self) -> MutexGuard<'_, Work> {
        // The counts stay consistent whatever panicked: every change of them is one statement.
        self.work.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an attempt's end and turns its answer into the result to store.
    fn result_of(&self, notification: &Notification, answer: &Answer) -> Recorded {
        self.metrics.record_notification_attempt(answer.label());
        let next = schedule::next(
            answer,
            notification.attempts,
            &self.settings.retry_delays,
            rand::random::<f64>(),
        );
        if next == Next::Delivered {
            let waited = (Utc::now() - notification.created_at)
                .to_std()
                .unwrap_or_default();
            self.metrics.record_notification_delivered(waited);
        } else {
            tracing::debug!(
                notification = notification.id,
                merchant_id = notification.merchant_id,
                attempt = notification.attempts,
                result = answer.label(),
                "notification attempt failed"
            );
        }
        Recorded {
            id: notification.id,
            attempt: notification.attempts,
            delivered: next == Next::Delivered,
            gone: next == Next::WaitForEnable,
            retry_ms: match next {
                Next::RetryAfter(wait) => Some(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
                _ => None,
            },
            status_code: answer.status().map(i32::from),
            error: answer.error(),
        }
    }
}

impl Sender {
    /// The sender of the endpoints `directory` holds, now and as they change.
    pub fn new(
        settings: &Settings,
        directory: Arc<Directory>,
        metrics: Metrics,
        wake: Wake,
    ) -> anyhow::Result<Self> {
        let notifications = settings.notifications.clone();
        let attempt_timeout = notifications.attempt_timeout;
        let pool = notifications.per_merchant_concurrency;
        // A notification goes to the configured URL only, never where an answer points, nor
        // through a proxy; every name is resolved and its addresses checked (crate::outbound).
        let outbound = Outbound::new(
            MerchantSettings::grants(&settings.merchants),
            notifications.allow_http,
            |builder| {
                builder
                    .timeout(attempt_timeout)
                    .connect_timeout(attempt_timeout.min(Duration::from_secs(5)))
                    .pool_max_idle_per_host(pool)
                    .user_agent(concat!("callback-gateway/", env!("CARGO_PKG_VERSION")))
            },
        )?;
        let shared = Arc::new(Shared {
            work: Mutex::new(Work::new(&notifications)),
            settings: notifications,
            directory,
            outbound,
            metrics,
            progress: Notify::new(),
        });
        Ok(Self {
            database_url: settings.database_url()?.to_owned(),
            statement_timeout: settings.database.statement_timeout,
            rotation: 0,
            shared,
            wake,
        })
    }

    /// Sends forever (until the task is aborted).
    pub async fn run(mut self) {
        let shared = self.shared.clone();
        let mut conn: Option<AsyncPgConnection> = None;
        let mut last_round = Instant::now();
        let mut next_backlog = Instant::now();
        // The last claim filled some merchant's room: more may be due, so claim again soon.
        let mut more_due = true;
        // The last round found the callback path saturated.
        let mut busy = false;
        loop {
            if !more_due || shared.work().claimable() == 0 {
                tokio::select! {
                    () = self.wake.woken() => {}
                    () = tokio::time::sleep(shared.settings.poll_interval) => {}
                    () = shared.progress.notified() => {}
                }
            }
            tokio::time::sleep_until(last_round + if busy { BUSY_LINGER } else { LINGER }).await;
            last_round = Instant::now();
            shared.metrics.record_notification_sender_round();
            let mut order = shared.directory.endpoints();
            let idle = order.is_empty() && {
                let work = shared.work();
                work.results.is_empty() && work.released.is_empty()
            };
            if idle {
                // No endpoint anywhere: nothing to claim, no connection held.
                conn = None;
                more_due = false;
                continue;
            }

            let Some(db) = self.connection(&mut conn).await else {
                more_due = false;
                continue;
            };
            let results = std::mem::take(&mut shared.work().results);
            if !results.is_empty() {
                match model::record(db, &results).await {
                    Ok(disabled) => {
                        for endpoint in disabled {
                            tracing::warn!(
                                merchant_id = endpoint.merchant_id,
                                endpoint_id = %endpoint.endpoint_id,
                                reason = endpoint.disabled_reason.as_deref().unwrap_or(""),
                                "notification endpoint disabled; POST /admin/merchants/{{id}}/endpoint/enable sends its notifications again"
                            );
                        }
                    }
                    Err(error) => {
                        // Kept for the next round: at most one per attempt, and no claim happens
                        // without a connection, so this stays bounded.
                        tracing::warn!(%error, results = results.len(), "storing notification attempts failed; will retry");
                        shared.work().results.extend(results);
                        conn = None;
                        more_due = false;
                        continue;
                    }
                }
            }
            let released = std::mem::take(&mut shared.work().released);
            if !released.is_empty()
                && let Err(error) = model::release(db, &released).await
            {
                // Kept for the next round, as results are.
                tracing::warn!(%error, rows = released.len(), "releasing unsent notifications failed; will retry");
                shared.work().released.extend(released);
                conn = None;
                more_due = false;
                continue;
            }
            if Instant::now() >= next_backlog {
                next_backlog = Instant::now() + BACKLOG_EVERY;
                match model::backlog(db).await {
                    Ok(backlog) => shared.metrics.record_notification_backlog(
                        backlog.pending,
                        backlog.estimated,
                        backlog.oldest_secs,
                    ),
                    Err(error) => {
                        tracing::warn!(%error, "reading the notification backlog failed");
                        conn = None;
                        continue;
                    }
                }
            }
            if !order.is_empty() {
                self.rotation = self.rotation.wrapping_add(1);
                let start = self.rotation % order.len();
                order.rotate_left(start);
            }
            let (endpoints, rooms, limit) = {
                let work = shared.work();
                let (endpoints, rooms) = work.rooms(&order, &shared.directory);
                (endpoints, rooms, work.claimable())
            };
            // Callbacks first: while deliveries queue for a capture statement, the callback path
            // is saturated and every notification sent takes CPU from it, so rounds are rare and
            // claim a few rows; the backlog drains at full speed once the callbacks leave room.
            busy = shared.metrics.captures_waiting() >= BUSY_QUEUE;
            let limit = if busy { limit.min(BUSY_CLAIM) } else { limit };
            if endpoints.is_empty() {
                more_due = false;
                continue;
            }
            let claimed = match model::claim(
                db,
                &endpoints,
                &rooms,
                i64::try_from(limit).unwrap_or(i64::MAX),
                shared.settings.claim_lease(),
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
            more_due = claimed.len() >= limit || filled_a_room(&claimed, &endpoints, &rooms);
            shared.work().claimed(claimed, &shared);
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

/// An endpoint's limiter: evenly spaced attempts at its rate, no burst.
type Limiter = governor::DefaultDirectRateLimiter;

/// What the sender holds: per endpoint, the attempts in flight and the claimed rows waiting for
/// a slot, and the results waiting to be stored. An endpoint's next row goes out the moment one
/// of its attempts ends, without waiting for a round; a claim asks each endpoint for what its
/// slots and its queue have room for.
struct Work {
    concurrency: usize,
    per_endpoint: usize,
    /// The most attempts one merchant's endpoints have in flight together: half the sender's,
    /// so a merchant with many slow endpoints never holds every slot, while one slow endpoint
    /// never holds its siblings back.
    per_merchant: usize,
    /// Claimed rows an endpoint may hold beyond its attempts in flight.
    queue_depth: usize,
    attempt_timeout: Duration,
    lease: Duration,
    in_flight: HashMap<EndpointKey, usize>,
    merchant_in_flight: HashMap<i64, usize>,
    total_in_flight: usize,
    queued: HashMap<EndpointKey, VecDeque<(Notification, Instant)>>,
    total_queued: usize,
    /// Ended attempts' results, for the owner's next round.
    results: Vec<Recorded>,
    /// Claimed rows never sent (id, the attempt their claim counted): the next round gives the
    /// attempt back and makes them due at once.
    released: Vec<(i64, i32)>,
    /// Endpoints that had a row released, until when they get no queue room.
    slow_until: HashMap<EndpointKey, Instant>,
    /// The limiters of the endpoints with a rate, and the rate each was made for.
    limiters: HashMap<EndpointKey, (u32, Arc<Limiter>)>,
}

impl Work {
    fn new(settings: &NotificationSettings) -> Self {
        Self {
            concurrency: settings.concurrency,
            per_endpoint: settings.per_merchant_concurrency,
            per_merchant: settings
                .per_merchant_concurrency
                .max(settings.concurrency / 2),
            queue_depth: settings.per_merchant_concurrency * QUEUE_FACTOR,
            attempt_timeout: settings.attempt_timeout,
            lease: settings.claim_lease(),
            in_flight: HashMap::new(),
            merchant_in_flight: HashMap::new(),
            total_in_flight: 0,
            queued: HashMap::new(),
            total_queued: 0,
            results: Vec::new(),
            released: Vec::new(),
            slow_until: HashMap::new(),
            limiters: HashMap::new(),
        }
    }

    /// How many more rows the sender may claim now: its in-flight bound, plus as many queued.
    fn claimable(&self) -> usize {
        (self.concurrency * (1 + QUEUE_FACTOR))
            .saturating_sub(self.total_in_flight + self.total_queued)
    }

    /// Rows `endpoint` holds: in flight and queued.
    fn held(&self, endpoint: &EndpointKey) -> usize {
        self.in_flight.get(endpoint).copied().unwrap_or(0)
            + self.queued.get(endpoint).map_or(0, VecDeque::len)
    }

    /// The endpoints to ask, in `order`, and the room of each. One with a rate holds at most a
    /// second's worth of rows, so none waits under its limiter long enough to lose its claim;
    /// one merchant's endpoints together hold at most its share ([`Work::per_merchant`] times
    /// the queue's factor), given out in `order`.
    fn rooms(&self, order: &[EndpointKey], directory: &Directory) -> (Vec<EndpointKey>, Vec<i32>) {
        let free = self.claimable();
        if free == 0 {
            return (Vec::new(), Vec::new());
        }
        let now = Instant::now();
        let mut merchant_held: HashMap<i64, usize> = HashMap::new();
        for (endpoint, count) in &self.in_flight {
            *merchant_held.entry(endpoint.merchant_id).or_default() += count;
        }
        for (endpoint, queue) in &self.queued {
            *merchant_held.entry(endpoint.merchant_id).or_default() += queue.len();
        }
        let merchant_holds = self.per_merchant * (1 + QUEUE_FACTOR);
        let mut endpoints = Vec::new();
        let mut rooms = Vec::new();
        for e in order {
            let queue = match self.slow_until.get(e) {
                Some(until) if *until > now => 0,
                _ => self.queue_depth,
            };
            let mut holds = self.per_endpoint + queue;
            if let Some(rate) = directory.target(e).and_then(|t| t.rate_limit_per_sec) {
                holds = holds.min(rate as usize);
            }
            let merchant = merchant_held.entry(e.merchant_id).or_default();
            let room = holds
                .saturating_sub(self.held(e))
                .min(merchant_holds.saturating_sub(*merchant))
                .min(free);
            if room > 0 {
                *merchant += room;
                endpoints.push(e.clone());
                rooms.push(i32::try_from(room).unwrap_or(i32::MAX));
            }
        }
        (endpoints, rooms)
    }

    /// The limiter of `endpoint` at `rate`, made anew when its rate changed.
    fn limiter(&mut self, endpoint: &EndpointKey, rate: u32) -> Arc<Limiter> {
        match self.limiters.get(endpoint) {
            Some((made_for, limiter)) if *made_for == rate => limiter.clone(),
            _ => {
                let per_sec = NonZeroU32::new(rate).unwrap_or(NonZeroU32::MIN);
                let quota = governor::Quota::per_second(per_sec).allow_burst(NonZeroU32::MIN);
                let limiter = Arc::new(governor::RateLimiter::direct(quota));
                self.limiters
                    .insert(endpoint.clone(), (rate, limiter.clone()));
                limiter
            }
        }
    }

    /// Queues freshly claimed rows and starts what the slots allow.
    fn claimed(&mut self, rows: Vec<Notification>, shared: &Arc<Shared>) {
        let now = Instant::now();
        let mut endpoints = Vec::new();
        for row in rows {
            let endpoint = EndpointKey::of(&row);
            endpoints.push(endpoint.clone());
            self.queued
                .entry(endpoint)
                .or_default()
                .push_back((row, now));
            self.total_queued += 1;
        }
        endpoints.sort_unstable();
        endpoints.dedup();
        for endpoint in endpoints {
            self.start(&endpoint, shared);
        }
    }

    /// An attempt for `endpoint` ended with `result`: its next row may go.
    fn finished(&mut self, endpoint: &EndpointKey, result: Recorded, shared: &Arc<Shared>) {
        self.results.push(result);
        if let Some(count) = self.in_flight.get_mut(endpoint) {
            *count = count.saturating_sub(1);
        }
        let merchant_was_full = self
            .merchant_in_flight
            .get(&endpoint.merchant_id)
            .is_some_and(|n| *n >= self.per_merchant);
        if let Some(count) = self.merchant_in_flight.get_mut(&endpoint.merchant_id) {
            *count = count.saturating_sub(1);
        }
        self.total_in_flight = self.total_in_flight.saturating_sub(1);
        self.start(endpoint, shared);
        // A slot of the merchant freed: its other endpoints' queues may be waiting for one.
        if merchant_was_full {
            let siblings: Vec<EndpointKey> = self
                .queued
                .iter()
                .filter(|(e, q)| e.merchant_id == endpoint.merchant_id && !q.is_empty())
                .map(|(e, _)| e.clone())
                .collect();
            for sibling in siblings {
                self.start(&sibling, shared);
            }
        }
        // A global slot freed: another endpoint's queue may be waiting for one.
        if self.total_in_flight + 1 == self.concurrency {
            let waiting: Vec<EndpointKey> = self
                .queued
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(e, _)| e.clone())
                .collect();
            for endpoint in waiting {
                self.start(&endpoint, shared);
            }
        }
    }

    /// Starts `endpoint`'s queued rows while it, its merchant and the sender have slots. A row
    /// claimed so long ago that its lease could pass during its attempt (its turn under the
    /// endpoint's limiter included: at most a second, as an endpoint with a rate holds a
    /// second's worth) is not sent but released, for the next claim (by any sender), so a row
    /// is only ever sent under a live claim.
    fn start(&mut self, endpoint: &EndpointKey, shared: &Arc<Shared>) {
        let target = shared.directory.target(endpoint);
        let limiter = target
            .as_ref()
            .and_then(|t| t.rate_limit_per_sec)
            .map(|rate| self.limiter(endpoint, rate));
        let Some(queue) = self.queued.get_mut(endpoint) else {
            return;
        };
        let turn = if limiter.is_some() {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        };
        let busy = self.in_flight.entry(endpoint.clone()).or_default();
        let merchant_busy = self
            .merchant_in_flight
            .entry(endpoint.merchant_id)
            .or_default();
        while *busy < self.per_endpoint
            && *merchant_busy < self.per_merchant
            && self.total_in_flight < self.concurrency
        {
            let Some((row, claimed_at)) = queue.pop_front() else {
                break;
            };
            self.total_queued -= 1;
            if claimed_at.elapsed() + turn + self.attempt_timeout > self.lease {
                self.released.push((row.id, row.attempts));
                self.slow_until
                    .insert(endpoint.clone(), Instant::now() + self.lease);
                continue;
            }
            let Some(target) = target.clone() else {
                // Its endpoint was deleted since the claim: the row waits (or was failed
                // with the deletion) and its claim passes.
                continue;
            };
            *busy += 1;
            *merchant_busy += 1;
            self.total_in_flight += 1;
            tokio::spawn(attempt(shared.clone(), target, limiter.clone(), row));
        }
    }
}

/// Whether some endpoint got as many rows as it had room for.
fn filled_a_room(claimed: &[Notification], endpoints: &[EndpointKey], rooms: &[i32]) -> bool {
    endpoints.iter().zip(rooms).any(|(endpoint, room)| {
        let got = claimed
            .iter()
            .filter(|n| {
                n.merchant_id == endpoint.merchant_id && n.endpoint_id == endpoint.endpoint_id
            })
            .count();
        i32::try_from(got).is_ok_and(|got| got >= *room)
    })
}

async fn open(url: &str, statement_timeout: Duration) -> anyhow::Result<AsyncPgConnection> {
    let mut conn = crate::db::connect_as(url, "callback-gateway/notifications").await?;
    // Every statement of the sender walks an index; a plan cached while the table was young
    // must not keep a scan of it (as for the payment writers). One generic plan per statement:
    // left to choose, PostgreSQL planned the claim and the store again on every call (their
    // array parameters make the generic plan look dearer), about 0.3 ms of planning each, a
    // round's largest cost at low rates (docs/notifications.md).
    conn.batch_execute(&format!(
        "SET statement_timeout = {}; SET lock_timeout = {}; SET enable_seqscan = off; \
         SET plan_cache_mode = force_generic_plan",
        statement_timeout.as_millis().max(1),
        statement_timeout.as_millis().max(1),
    ))
    .await?;
    Ok(conn)
}

/// One attempt: its turn under the endpoint's limiter, if it has a rate, then the body as
/// staged, signed now, posted once; its result is noted in the shared work, which starts its
/// endpoint's next row.
async fn attempt(
    shared: Arc<Shared>,
    target: Arc<Target>,
    limiter: Option<Arc<Limiter>>,
    notification: Notification,
) {
    if let Some(limiter) = limiter {
        limiter.until_ready().await;
    }
    // Each attempt is a trace of its own (the capture that staged it committed long before);
    // the merchant's endpoint gets its `traceparent`.
    let span = tracing::info_span!(
        target: crate::trace_switch::TRACE,
        "notification_attempt",
        otel.kind = "client",
        merchant_id = notification.merchant_id,
        endpoint_id = %notification.endpoint_id,
        notification_id = notification.id,
        event_type = %notification.kind,
    );
    let answer = post(&shared.outbound, &target, &notification)
        .instrument(span)
        .await;
    let result = shared.result_of(&notification, &answer);
    shared
        .work()
        .finished(&EndpointKey::of(&notification), result, &shared);
    shared.progress.notify_one();
}

/// Posts `notification` to `target` once, through the client `outbound` gives its merchant for
/// the URL: a scheme or an IP literal the rules refuse is refused before any connection, a
/// name's addresses as it resolves, unless the origin was granted to this merchant.
async fn post(outbound: &Outbound<i64>, target: &Target, notification: &Notification) -> Answer {
    let merchant = notification.merchant_id;
    let http = match outbound.client(&merchant, &target.url) {
        Ok(http) => http,
        Err(refused) => {
            tracing::warn!(merchant_id = merchant, %refused, "notification not sent: the endpoint is not allowed");
            return Answer::Failure(Failure::AddressNotAllowed);
        }
    };
    let body = render(notification);
    let id = webhook_id(notification.id);
    let mut request = http
        .post(target.url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    for (name, value) in target.sign_headers(&id, &body, Utc::now()) {
        request = request.header(name, value);
    }
    let request = crate::telemetry::propagation::carry_current(request);
    match request.body(body).send().await {
        Ok(response) => {
            let answer = Answer::of_status(response.status().as_u16());
            let answer = match answer {
                Answer::Failure(Failure::Redirect(_))
                    if redirects_to_refused(outbound, merchant, &response).await =>
                {
                    Answer::Failure(Failure::AddressNotAllowed)
                }
                answer => answer,
            };
            drain(response).await;
            answer
        }
        Err(error) if error.is_timeout() => Answer::Failure(Failure::Timeout),
        Err(error) if outbound::refused_address(&error) => {
            tracing::warn!(
                merchant_id = merchant,
                "notification not sent: the endpoint's host resolves only to addresses the gateway may not call"
            );
            Answer::Failure(Failure::AddressNotAllowed)
        }
        Err(error) => {
            // Without the URL: its query may carry the merchant's token.
            tracing::debug!(error = %error.without_url(), "notification attempt: no answer");
            Answer::Failure(Failure::Connection)
        }
    }
}

/// Whether a redirect (never followed) points at what the rules refuse this merchant: an
/// attempt to use the endpoint as a hop to an internal address is named as such.
async fn redirects_to_refused(
    outbound: &Outbound<i64>,
    merchant: i64,
    response: &reqwest::Response,
) -> bool {
    let Some(location) = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| response.url().join(v).ok())
    else {
        return false;
    };
    outbound.refuses(&merchant, &location).await
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

/// Starts the sender of `directory`'s endpoints on the current runtime. With no endpoint it
/// holds no connection and claims nothing; one made by API is picked up as it appears.
pub fn spawn(
    settings: &Settings,
    directory: Arc<Directory>,
    metrics: Metrics,
    wake: Wake,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let sender = Sender::new(settings, directory, metrics, wake)?;
    Ok(tokio::spawn(sender.run()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_endpoint_holding_its_slots_and_queue_is_not_asked_and_rooms_never_exceed_the_free_slots()
     {
        let settings = NotificationSettings {
            concurrency: 10,
            per_merchant_concurrency: 4,
            ..Settings::from_toml("", &crate::config::ProcessEnv)
                .unwrap()
                .notifications
        };
        let directory = Directory::new(&[]);
        let (one, two) = (EndpointKey::file(1), EndpointKey::file(2));
        let both = [one.clone(), two.clone()];
        let mut work = Work::new(&settings);
        assert_eq!(work.claimable(), 90);
        // Each endpoint may hold 4 in flight and 32 queued.
        work.in_flight.insert(one.clone(), 4);
        work.in_flight.insert(two.clone(), 1);
        work.total_in_flight = 5;
        assert_eq!(work.rooms(&both, &directory), (both.to_vec(), vec![32, 35]));
        // An endpoint whose rows had to be released gets its free slots only.
        work.slow_until
            .insert(two.clone(), Instant::now() + Duration::from_secs(60));
        assert_eq!(work.rooms(&both, &directory), (both.to_vec(), vec![32, 3]));
        work.slow_until.clear();
        // The sender's own bound caps every room.
        work.total_queued = 80;
        let reversed = [two.clone(), one.clone()];
        assert_eq!(
            work.rooms(&reversed, &directory),
            (reversed.to_vec(), vec![5, 5])
        );
        work.total_queued = 85;
        assert_eq!(work.rooms(&both, &directory), (vec![], vec![]));
    }

    #[tokio::test]
    async fn one_merchants_endpoints_together_hold_at_most_half_the_sender() {
        let settings = NotificationSettings {
            concurrency: 10,
            per_merchant_concurrency: 4,
            ..Settings::from_toml("", &crate::config::ProcessEnv)
                .unwrap()
                .notifications
        };
        let directory = Directory::new(&[]);
        let mut work = Work::new(&settings);
        // Half the sender's 10: 5 in flight for the merchant, 45 held with the queues.
        assert_eq!(work.per_merchant, 5);
        let (a, b, c) = (
            EndpointKey::new(1, "ep_a"),
            EndpointKey::new(1, "ep_b"),
            EndpointKey::new(1, "ep_c"),
        );
        work.in_flight.insert(a.clone(), 4);
        work.in_flight.insert(b.clone(), 1);
        work.merchant_in_flight.insert(1, 5);
        work.total_in_flight = 5;
        let other = EndpointKey::file(2);
        let order = [a.clone(), b.clone(), c.clone(), other.clone()];
        // Each endpoint's own room (32 and 35) within what is left of the merchant's 45 (40):
        // the first takes 32, the second 8, the third nothing; another merchant its own 36.
        assert_eq!(
            work.rooms(&order, &directory),
            (vec![a, b, other], vec![32, 8, 36])
        );
    }

    #[tokio::test]
    async fn a_limiter_spaces_attempts_evenly_at_its_rate_and_is_made_anew_when_the_rate_changes() {
        let settings = Settings::from_toml("", &crate::config::ProcessEnv)
            .unwrap()
            .notifications;
        let mut work = Work::new(&settings);
        let endpoint = EndpointKey::new(1, "ep_1");
        let limiter = work.limiter(&endpoint, 2);
        assert!(limiter.check().is_ok());
        // No burst: the second attempt of this second waits its turn.
        assert!(limiter.check().is_err());
        assert!(Arc::ptr_eq(&limiter, &work.limiter(&endpoint, 2)));
        let faster = work.limiter(&endpoint, 50);
        assert!(!Arc::ptr_eq(&limiter, &faster));
        assert!(faster.check().is_ok());
    }
}
