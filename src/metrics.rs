//! Prometheus metrics, one registry per application (no global state, so parallel test apps
//! stay apart): requests by route, status and outcome, latency per route, pool state, cleanup
//! counts, each provider's timestamp skew, the size of capture batches, and the writes the
//! database refused for lack of disk (with the [`WriteHealth`] `/readyz` reads).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::db::cannot_write::{CannotWrite, WriteHealth};
use crate::db::pool::PgPool;

/// How a request ended, for the `outcome` label. Handlers attach it to their response;
/// errors derive it from their code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutcomeLabel(pub &'static str);

/// Marks a response whose write committed now (a first answer, not a replay): proof that the
/// database writes again after a cannot-write failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteCommitted;

/// The `limit` labels of `gateway_rate_limited_total`.
pub const RATE_LIMITS: [&str; 4] = [
    "unknown_key",
    "failed_sign_in",
    "endpoint_change",
    "unsigned_delivery",
];

#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    skew: HistogramVec,
    cleanup_deleted: IntCounter,
    pool: IntGaugeVec,
    capture_batch: Histogram,
    capture_queue: IntGauge,
    capture_refused: IntCounter,
    cleanup_last_run: IntGauge,
    refund_recoverer_last_run: IntGauge,
    refunds_needing_review: IntGauge,
    notifications_pending: IntGauge,
    notifications_oldest_pending: prometheus::Gauge,
    notification_attempts: IntCounterVec,
    notification_delivery: Histogram,
    notification_sender_last_run: IntGauge,
    notifications_deleted: IntCounter,
    notifications_dropped: IntCounter,
    webhook_endpoints: IntGaugeVec,
    webhook_endpoints_revision: IntGauge,
    notifications_pending_estimated: IntGauge,
    provider_fetches: IntCounterVec,
    history: HistoryMetrics,
    database_write_failures: IntCounterVec,
    database_cannot_write_last: IntGauge,
    audit_chain_broken: IntGauge,
    write_health: Arc<WriteHealth>,
    rate_limited: IntCounterVec,
}

/// Retention of the event log (`history::pass`).
#[derive(Clone)]
struct HistoryMetrics {
    months_dropped: IntCounter,
    rows_dropped: IntCounter,
    failures: IntCounter,
    last_pass: IntGauge,
}

impl HistoryMetrics {
    fn new(registry: &Registry) -> Self {
        let counter = |name: &str, help: &str| {
            register(
                registry,
                IntCounter::new(name, help).unwrap_or_else(|e| unreachable!("{e}")),
            )
        };
        Self {
            months_dropped: counter(
                "gateway_history_months_dropped_total",
                "Event-log partitions archived, verified and dropped",
            ),
            rows_dropped: counter(
                "gateway_history_rows_dropped_total",
                "Event-log rows dropped after their month was archived and verified",
            ),
            failures: counter(
                "gateway_history_failures_total",
                "History passes that failed (an archive not written or not verified, a detach refused): the month stays in the database",
            ),
            last_pass: register(
                registry,
                IntGauge::new(
                    "gateway_history_last_pass_timestamp_seconds",
                    "Unix time of this process's last completed history pass (0: none yet)",
                )
                .unwrap_or_else(|e| unreachable!("{e}")),
            ),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

// Registration only fails for a duplicate or malformed name, fixed at compile time here.
fn register<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: T,
) -> T {
    registry
        .register(Box::new(collector.clone()))
        .unwrap_or_else(|e| unreachable!("metric registration: {e}"));
    collector
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        register(&registry, crate::telemetry::counter::span_counter().clone());
        let requests = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gateway_http_requests_total",
                    "HTTP requests by route, status and outcome",
                ),
                &["route", "status", "outcome"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let latency = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "gateway_http_request_duration_seconds",
                    "Request latency by route",
                )
                .buckets(vec![
                    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                ]),
                &["route"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let skew = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "gateway_provider_timestamp_skew_seconds",
                    "Signed timestamp minus server time, per provider (verified deliveries)",
                )
                .buckets(vec![
                    -300.0, -60.0, -10.0, -1.0, 0.0, 1.0, 10.0, 60.0, 300.0,
                ]),
                &["provider"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let cleanup_deleted = register(
            &registry,
            IntCounter::new(
                "gateway_cleanup_deleted_total",
                "Expired idempotency records deleted",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let pool = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "gateway_db_pool",
                    "Database pool: max size, open, idle and waiting requests",
                ),
                &["state"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let capture_batch = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "gateway_capture_batch_size",
                    "One-statement captures sent together in one statement and commit",
                )
                .buckets(vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]),
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let capture_queue = register(
            &registry,
            IntGauge::new(
                "gateway_capture_queue_length",
                "One-statement captures waiting for a connection",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let capture_refused = register(
            &registry,
            IntCounter::new(
                "gateway_capture_refused_total",
                "Deliveries refused with 503 because the capture queue was full",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        // Liveness of the background loops, for the "not running" alerts in deploy/alerts.yml.
        let cleanup_last_run = register(
            &registry,
            IntGauge::new(
                "gateway_cleanup_last_run_timestamp_seconds",
                "Unix time of this process's last completed expiry pass (0: none yet)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let refund_recoverer_last_run = register(
            &registry,
            IntGauge::new(
                "gateway_refund_recoverer_last_run_timestamp_seconds",
                "Unix time of the refund recoverer's start or last completed pass (0: not running in this process)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let refunds_needing_review = register(
            &registry,
            IntGauge::new(
                "gateway_refund_requests_needing_review",
                "Refund requests whose automatic retries stopped, waiting for a person (as counted by this process's last recoverer pass)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notifications_pending = register(
            &registry,
            IntGauge::new(
                "gateway_notifications_pending",
                "Merchant notifications not delivered yet (due, waiting for a retry or for a disabled endpoint), as this process's sender last read them",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notifications_oldest_pending = register(
            &registry,
            prometheus::Gauge::new(
                "gateway_notifications_oldest_pending_age_seconds",
                "How long the oldest pending merchant notification has waited since it was staged (0: none)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notification_attempts = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gateway_notification_attempts_total",
                    "Merchant notification attempts by result: delivered, http_error, redirect, timeout, connection, gone",
                ),
                &["result"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        // Every result from the start, so a rate over them exists before the first failure.
        for result in [
            "delivered",
            "http_error",
            "redirect",
            "timeout",
            "connection",
            "gone",
        ] {
            notification_attempts.with_label_values(&[result]);
        }
        let notification_delivery = register(
            &registry,
            Histogram::with_opts(
                HistogramOpts::new(
                    "gateway_notification_delivery_seconds",
                    "From staging (the change's transaction) to the merchant's 2xx",
                )
                .buckets(vec![
                    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0, 1800.0,
                    7200.0, 86400.0,
                ]),
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notification_sender_last_run = register(
            &registry,
            IntGauge::new(
                "gateway_notification_sender_last_run_timestamp_seconds",
                "Unix time of the notification sender's last round (0: no sender in this process)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notifications_deleted = register(
            &registry,
            IntCounter::new(
                "gateway_notifications_deleted_total",
                "Delivered and failed merchant notifications deleted after their retention",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notifications_dropped = register(
            &registry,
            IntCounter::new(
                "gateway_notifications_dropped_total",
                "Pending notifications of disabled endpoints deleted beyond [notifications] disabled_keep",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let notifications_pending_estimated = register(
            &registry,
            IntGauge::new(
                "gateway_notifications_pending_estimated",
                "1 when gateway_notifications_pending is the due index's estimate (over 10,000 pending), 0 when it was counted",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let webhook_endpoints = register(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "gateway_webhook_endpoints",
                    "Merchant endpoints made by API this gateway loaded (state loaded), and those whose secret neither [secrets] key nor previous_keys opens (state unopened: their notifications are staged and wait for a gateway that can sign them)",
                ),
                &["state"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let webhook_endpoints_revision = register(
            &registry,
            IntGauge::new(
                "gateway_webhook_endpoints_revision",
                "The revision of the merchant endpoints made by API this gateway holds (every gateway reaches the database's within about a second)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let provider_fetches = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gateway_provider_fetches_total",
                    "Answers of fetch-verified providers' APIs by result: found, not_found, unavailable (timeout, 5xx, 429, network) and key_refused (401 or 403: the api_key)",
                ),
                &["provider", "result"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let history = HistoryMetrics::new(&registry);
        let database_write_failures = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gateway_database_write_failures_total",
                    "Requests refused 503 database_cannot_write because the database could not write, by reason: disk_full (SQLSTATE 53100, a quota), read_only_file_system, io_error (58030)",
                ),
                &["reason"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        // Every reason from the start, so the alert's increase() sees the first failure.
        for reason in CannotWrite::ALL {
            database_write_failures.with_label_values(&[reason.as_str()]);
        }
        let database_cannot_write_last = register(
            &registry,
            IntGauge::new(
                "gateway_database_cannot_write_last_timestamp_seconds",
                "Unix time of the newest request the database could not write (0: none since start)",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        let rate_limited = register(
            &registry,
            IntCounterVec::new(
                Opts::new(
                    "gateway_rate_limited_total",
                    "Requests answered 429 by an abuse limit ([limits]): unknown_key, failed_sign_in (per source address), endpoint_change (per merchant), unsigned_delivery (per source address)",
                ),
                &["limit"],
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        // Every limit's series from the start, so an alert sees the first increase.
        for limit in RATE_LIMITS {
            rate_limited.with_label_values(&[limit]);
        }

        let audit_chain_broken = register(
            &registry,
            IntGauge::new(
                "gateway_audit_chain_broken",
                "1 when serve's start-up check found the audit log's hash chain broken among its newest rows (a row deleted, changed or moved); 0 when whole or not checked",
            )
            .unwrap_or_else(|e| unreachable!("{e}")),
        );
        Self {
            rate_limited,
            history,
            audit_chain_broken,
            database_write_failures,
            database_cannot_write_last,
            write_health: Arc::default(),
            webhook_endpoints,
            webhook_endpoints_revision,
            provider_fetches,
            notifications_pending,
            notifications_oldest_pending,
            notification_attempts,
            notification_delivery,
            notification_sender_last_run,
            notifications_deleted,
            notifications_dropped,
            notifications_pending_estimated,
            registry,
            requests,
            latency,
            skew,
            cleanup_deleted,
            pool,
            capture_batch,
            capture_queue,
            capture_refused,
            cleanup_last_run,
            refund_recoverer_last_run,
            refunds_needing_review,
        }
    }

    pub fn observe_request(&self, route: &str, status: u16, outcome: &str, elapsed: Duration) {
        self.requests
            .with_label_values(&[route, &status.to_string(), outcome])
            .inc();
        self.latency
            .with_label_values(&[route])
            .observe(elapsed.as_secs_f64());
    }

    /// A request was refused because the database could not write.
    pub fn record_cannot_write(&self, reason: CannotWrite) {
        self.database_write_failures
            .with_label_values(&[reason.as_str()])
            .inc();
        self.database_cannot_write_last
            .set(chrono::Utc::now().timestamp());
        self.write_health.failed(reason);
    }

    /// A request's write committed (its first answer).
    pub fn record_write_committed(&self) {
        self.write_health.committed();
    }

    /// The newest cannot-write failure against the newest committed write, for `/readyz`.
    pub fn write_health(&self) -> &WriteHealth {
        &self.write_health
    }

    /// The counter fetch-verified providers count their API's answers in.
    pub fn provider_fetches(&self) -> &IntCounterVec {
        &self.provider_fetches
    }

    pub fn observe_skew(&self, provider: &str, skew_secs: i64) {
        self.skew
            .with_label_values(&[provider])
            .observe(skew_secs as f64);
    }

    /// A statement took `size` deliveries out of the capture queue, after `taken` left it (the
    /// batch and those that stopped waiting, answered already).
    pub fn observe_capture_batch(&self, size: usize, taken: usize) {
        if size > 0 {
            self.capture_batch.observe(size as f64);
        }
        self.capture_queue
            .sub(i64::try_from(taken).unwrap_or(i64::MAX));
    }

    /// Deliveries waiting in the capture queues now: the callback path has more than its
    /// statements take at once.
    pub fn captures_waiting(&self) -> i64 {
        self.capture_queue.get()
    }

    pub fn capture_queued(&self) {
        self.capture_queue.inc();
    }

    /// A capture counted as queued did not enter the queue (full, or the batcher stopped).
    pub fn capture_refused(&self) {
        self.capture_queue.dec();
        self.capture_refused.inc();
    }

    /// What serve's start-up check of the audit log's hash chain found.
    pub fn record_audit_chain(&self, broken: bool) {
        self.audit_chain_broken.set(i64::from(broken));
    }

    /// A history pass finished: the months and rows it dropped, and when.
    pub fn record_history_pass(&self, months: u64, rows: u64) {
        self.history.months_dropped.inc_by(months);
        self.history.rows_dropped.inc_by(rows);
        self.history.last_pass.set(chrono::Utc::now().timestamp());
    }

    /// A history pass failed: the months it would have dropped stay in the database.
    pub fn record_history_failure(&self) {
        self.history.failures.inc();
    }

    /// An expiry pass finished: its count, and when, so an alert can tell a stalled cleaner.
    pub fn record_cleanup(&self, deleted: u64) {
        self.cleanup_deleted.inc_by(deleted);
        self.cleanup_last_run.set(chrono::Utc::now().timestamp());
    }

    /// The refund recoverer started or finished a pass. Call it at start too: 0 tells the
    /// alert that this process runs no recoverer, so it must not stay 0 once one runs.
    pub fn record_refund_recoverer_pass(&self) {
        self.refund_recoverer_last_run
            .set(chrono::Utc::now().timestamp());
    }

    /// How many refund requests wait for a person, as the recoverer's pass counted them.
    pub fn record_refunds_needing_review(&self, count: i64) {
        self.refunds_needing_review.set(count);
    }

    /// The sender's reading of the backlog: pending notifications and the oldest one's wait.
    pub fn record_notification_backlog(
        &self,
        pending: i64,
        estimated: bool,
        oldest_secs: Option<f64>,
    ) {
        self.notifications_pending.set(pending);
        self.notifications_pending_estimated
            .set(i64::from(estimated));
        self.notifications_oldest_pending
            .set(oldest_secs.unwrap_or(0.0).max(0.0));
    }

    /// One notification attempt ended with `result` (a `schedule::Answer` label).
    pub fn record_notification_attempt(&self, result: &str) {
        self.notification_attempts
            .with_label_values(&[result])
            .inc();
    }

    /// A notification was delivered `waited` after it was staged.
    pub fn record_notification_delivered(&self, waited: Duration) {
        self.notification_delivery.observe(waited.as_secs_f64());
    }

    /// The sender ran a round (its liveness).
    pub fn record_notification_sender_round(&self) {
        self.notification_sender_last_run
            .set(chrono::Utc::now().timestamp());
    }

    pub fn record_notifications_deleted(&self, deleted: u64) {
        self.notifications_deleted.inc_by(deleted);
    }

    /// After this gateway loaded the merchant endpoints made by API.
    pub fn record_endpoints_loaded(&self, revision: i64, loaded: usize, unopened: usize) {
        self.webhook_endpoints_revision.set(revision);
        let gauge = |state: &str, n: usize| {
            self.webhook_endpoints
                .with_label_values(&[state])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        gauge("loaded", loaded);
        gauge("unopened", unopened);
    }

    /// A request answered 429 by the limit `limit`.
    pub fn record_rate_limited(&self, limit: &str) {
        self.rate_limited.with_label_values(&[limit]).inc();
    }

    /// Pending notifications of disabled endpoints deleted beyond what they keep.
    pub fn record_notifications_dropped(&self, dropped: u64) {
        self.notifications_dropped.inc_by(dropped);
    }

    /// The Prometheus text exposition, with the pool gauges (summed over the workers' pools)
    /// read now.
    pub fn render(&self, pools: &Mutex<Vec<PgPool>>, pool_size: u32) -> String {
        let (mut open, mut idle, mut waiting, mut timed_out, mut broken) =
            (0u64, 0u64, 0u64, 0u64, 0u64);
        if let Ok(pools) = pools.lock() {
            for pool in pools.iter() {
                let state = pool.state();
                let stats = &state.statistics;
                let finished = stats.get_direct + stats.get_waited + stats.get_timed_out;
                open += u64::from(state.connections);
                idle += u64::from(state.idle_connections);
                waiting += stats.get_started.saturating_sub(finished);
                timed_out += stats.get_timed_out;
                broken += stats.connections_closed_broken;
            }
        }
        for (label, value) in [
            ("max", u64::from(pool_size)),
            ("open", open),
            ("idle", idle),
            ("waiting", waiting),
            ("timed_out_total", timed_out),
            ("closed_broken_total", broken),
        ] {
            self.pool
                .with_label_values(&[label])
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        let mut out = Vec::new();
        // Encoding our own registry into a Vec cannot fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}
