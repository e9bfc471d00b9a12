//! A payment provider as the gateway meets it in production: it signs each event with its
//! provider's scheme (by default "acme": Standard Webhooks, canonical payloads, merchant 42), sends some events twice at
//! once to different gateway instances, and retries every delivery with backoff until it gets
//! a 2xx, re-signing each attempt with a fresh timestamp. 409, 408, 429, 5xx and connection
//! errors are retried; `Retry-After` is honoured but capped so tests stay fast. Any other
//! answer (401, 422, ..) is a bug a retry cannot fix, and is reported as a failure at once.
//! Every 2xx ack is recorded per event, so a test can compare them byte for byte.
//!
//! A provider that must be asked (Mollie, GoCardless, Mercado Pago) keeps its truth in its API:
//! the simulator then also runs that API ([`Simulator::with_api`], an HTTPS [`Emulator`]) and
//! delivers [`Step`]s, each putting what the API answers from then on before its webhook is
//! sent, so the gateway's fetch sees the state the provider is in when it sends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::emulator::{Emulator, Scripted};
use super::{ACME, sign};

/// One provider event: its provider, its id (the `webhook-id`), its canonical body and the
/// amount it pays.
#[derive(Debug, Clone)]
pub struct Event {
    pub provider: &'static str,
    pub id: String,
    pub body: String,
    pub amount_minor: i64,
}

impl Event {
    /// A `payment.succeeded` for `order_id` paying `amount_minor` USD.
    pub fn payment(id: &str, order_id: i64, amount_minor: i64) -> Self {
        let body = format!(
            r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"pay_{id}","order_id":{order_id},"amount_minor":{amount_minor},"currency":"USD"}}}}"#
        );
        Self {
            provider: ACME,
            id: id.to_owned(),
            body,
            amount_minor,
        }
    }
}

/// One thing a provider does: its API answers `api` (path, JSON) from now on, its next fetch
/// of any delivery is answered 503 once when `api_unavailable_once`, then it sends `event`.
#[derive(Debug, Clone)]
pub struct Step {
    pub api: Vec<(String, String)>,
    pub api_unavailable_once: bool,
    pub event: Event,
}

impl Step {
    /// A delivery that needs nothing of the API beyond what it answers already.
    pub fn event(event: Event) -> Self {
        Self {
            api: Vec::new(),
            api_unavailable_once: false,
            event,
        }
    }
}

/// A 2xx answer the provider got for an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    pub status: u16,
    pub replayed: bool,
    pub body: String,
}

/// How the attempts that were not acks ended, summed over all events.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    pub attempts: u64,
    pub acks: u64,
    pub in_flight_409: u64,
    pub unavailable_503: u64,
    pub other_retryable: u64,
    pub connection_errors: u64,
    /// Refusals (non-2xx answers) that said nothing about when to retry.
    pub refusals_without_retry_after: u64,
    /// The first few answers counted in `other_retryable` and the first few connection
    /// errors, as `status body` or the client's error, so a failing test says what they were.
    pub unexpected: Vec<String>,
}

/// How many unexpected answers a tally keeps.
const UNEXPECTED_KEPT: usize = 20;

/// One attempt as the provider saw it: when it was answered, the event, and the status
/// (0: no answer, a connection error).
#[derive(Debug, Clone)]
pub struct Attempt {
    pub at: Instant,
    pub event_id: String,
    pub status: u16,
}

pub struct Simulator {
    client: reqwest::Client,
    targets: Vec<String>,
    /// Upper bound of any wait between two attempts (backoff and Retry-After alike).
    max_wait: Duration,
    /// A delivery that has no 2xx after this long is a failure.
    give_up_after: Duration,
    acks: Mutex<HashMap<String, Vec<Ack>>>,
    failures: Mutex<Vec<String>>,
    tally: Mutex<Tally>,
    attempts: Mutex<Vec<Attempt>>,
    /// The provider's API, for the steps of a provider that must be asked.
    api: Option<Arc<Emulator>>,
}

impl Simulator {
    /// A provider delivering to the gateways at `targets` (base URLs such as `http://127.0.0.1:8080`).
    pub fn new(targets: Vec<String>) -> Self {
        Self {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()
                .unwrap(),
            targets,
            max_wait: Duration::from_millis(50),
            give_up_after: Duration::from_secs(90),
            acks: Mutex::new(HashMap::new()),
            failures: Mutex::new(Vec::new()),
            tally: Mutex::new(Tally::default()),
            attempts: Mutex::new(Vec::new()),
            api: None,
        }
    }

    /// The provider's API the gateways ask, which [`Step`]s update.
    pub fn with_api(mut self, api: Arc<Emulator>) -> Self {
        self.api = Some(api);
        self
    }

    /// Every attempt so far, in the order they were answered.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }

    fn note(&self, event: &Event, status: u16) {
        self.attempts.lock().unwrap().push(Attempt {
            at: Instant::now(),
            event_id: event.id.clone(),
            status,
        });
    }

    /// Delivers `event` to target `target` until it is acknowledged; records the ack.
    pub async fn deliver(&self, event: &Event, target: usize) -> Option<Ack> {
        self.deliver_to(event, &[target]).await
    }

    /// Like [`Self::deliver`], each attempt to the next of `targets` in turn (a provider
    /// behind a load balancer that spreads retries over the gateways).
    pub async fn deliver_to(&self, event: &Event, targets: &[usize]) -> Option<Ack> {
        let target = targets[0];
        let mut attempt = 0usize;
        let started = Instant::now();
        let mut backoff = Duration::from_millis(5);
        let mut last = String::new();
        while started.elapsed() < self.give_up_after {
            let delivery = sign::delivery_now(event.provider, &event.id, &event.body);
            let to = targets[attempt % targets.len()];
            let url = format!("{}{}", self.targets[to], delivery.path(event.provider));
            attempt += 1;
            let mut request = self
                .client
                .post(&url)
                .header("Content-Type", delivery.content_type)
                .body(delivery.body);
            for (name, value) in &delivery.headers {
                request = request.header(name, value);
            }
            self.count(|t| t.attempts += 1);
            let mut wait = backoff;
            match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let replayed = response
                        .headers()
                        .get("Idempotent-Replayed")
                        .is_some_and(|v| v == "true");
                    let retry_after = response
                        .headers()
                        .get("Retry-After")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let body = response.text().await.unwrap_or_default();
                    self.note(event, status);
                    if !(200..=299).contains(&status) && retry_after.is_none() {
                        self.count(|t| t.refusals_without_retry_after += 1);
                    }
                    match status {
                        200..=299 => {
                            self.count(|t| t.acks += 1);
                            let ack = Ack {
                                status,
                                replayed,
                                body,
                            };
                            self.acks
                                .lock()
                                .unwrap()
                                .entry(event.id.clone())
                                .or_default()
                                .push(ack.clone());
                            return Some(ack);
                        }
                        409 => self.count(|t| t.in_flight_409 += 1),
                        503 => self.count(|t| t.unavailable_503 += 1),
                        408 | 429 | 500..=599 => self.count(|t| {
                            t.other_retryable += 1;
                            if t.unexpected.len() < UNEXPECTED_KEPT {
                                t.unexpected.push(format!(
                                    "{status} (Retry-After {retry_after:?}) from target {to}: {body}"
                                ));
                            }
                        }),
                        _ => {
                            self.fail(format!(
                                "event {} got {status} from target {target}, which no retry can fix: {body}",
                                event.id
                            ));
                            return None;
                        }
                    }
                    if let Some(retry_after) = retry_after {
                        wait = retry_after;
                    }
                    last = format!("{status} {body}");
                }
                Err(error) => {
                    self.note(event, 0);
                    last = format!("connection error: {error:?}");
                    self.count(|t| {
                        t.connection_errors += 1;
                        if t.unexpected.len() < UNEXPECTED_KEPT {
                            t.unexpected.push(last.clone());
                        }
                    });
                }
            }
            // Waiting between attempts is the provider's behaviour under test, not a
            // synchronisation: correctness never depends on how long it is.
            tokio::time::sleep(wait.min(self.max_wait)).await;
            backoff = (backoff * 2).min(self.max_wait);
        }
        self.fail(format!(
            "event {} was never acknowledged by target {target} within {:?}; last answer: {last}",
            event.id, self.give_up_after
        ));
        None
    }

    /// Delivers `event` to two targets at the same time, as a provider that retries a delivery
    /// it thought was lost while the first one is still being processed.
    pub async fn deliver_twice(&self, event: &Event, first: usize, second: usize) {
        tokio::join!(self.deliver(event, first), self.deliver(event, second));
    }

    /// Delivers every event twice at once, event `i` to targets `i` and `i + 1` (mod the
    /// number of targets), with at most `concurrency` events in flight.
    pub async fn deliver_all_twice(&self, events: &[Event], concurrency: usize) {
        let n = self.targets.len();
        futures_util::stream::iter(events.iter().enumerate())
            .for_each_concurrent(concurrency, |(i, event)| async move {
                self.deliver_twice(event, i % n, (i + 1) % n).await;
            })
            .await;
    }

    /// Runs every sequence of steps, sequence `i`'s to targets `i` and `i + 1` (mod the number
    /// of targets), at most `concurrency` sequences at a time. The steps of one sequence (one
    /// payment's life at the provider) run in order: each puts its API state, then delivers its
    /// event twice at once, and the next starts once both are acknowledged, as the provider
    /// changes a payment only after it told about the change before (or, in a step that puts
    /// two states, changes it twice in between).
    pub async fn deliver_steps_twice(&self, sequences: &[Vec<Step>], concurrency: usize) {
        let n = self.targets.len();
        futures_util::stream::iter(sequences.iter().enumerate())
            .for_each_concurrent(concurrency, |(i, steps)| async move {
                for step in steps {
                    if !step.api.is_empty() || step.api_unavailable_once {
                        let api = self
                            .api
                            .as_ref()
                            .expect("a step that changes the API needs Simulator::with_api");
                        for (path, body) in &step.api {
                            api.put(path, body);
                        }
                        if step.api_unavailable_once {
                            api.script(&[Scripted::Status(503)]);
                        }
                    }
                    self.deliver_twice(&step.event, i % n, (i + 1) % n).await;
                }
            })
            .await;
    }

    /// Sets how long one delivery keeps retrying before it counts as a failure.
    pub fn give_up_after(mut self, limit: Duration) -> Self {
        self.give_up_after = limit;
        self
    }

    /// Every ack recorded so far, by event id.
    pub fn acks(&self) -> HashMap<String, Vec<Ack>> {
        self.acks.lock().unwrap().clone()
    }

    /// Deliveries that failed (an unfixable answer, or no ack before giving up).
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap().clone()
    }

    pub fn tally(&self) -> Tally {
        self.tally.lock().unwrap().clone()
    }

    fn count(&self, f: impl FnOnce(&mut Tally)) {
        f(&mut self.tally.lock().unwrap());
    }

    fn fail(&self, message: String) {
        self.failures.lock().unwrap().push(message);
    }
}
