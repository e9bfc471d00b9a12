//! Runs one history in a world: creates its orders, applies its operations to the provider's
//! truth (the API emulator answers it from then on), delivers the webhooks as the provider
//! does (signed at each attempt, retried with its backoff until a 2xx, parked behind later
//! steps while the gateway asks for a retry), injects the faults, and at quiescence hands the
//! truth and every answer to the oracle.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::case::{Case, Fault, OrderSpec, Step, WebhookRef};
use crate::models::{Model, Webhook};
use crate::oracle;
use crate::support::emulator::Scripted;
use crate::support::{MERCHANT, sign};
use crate::truth::{Op, OpKind, Payment};

/// The op ids of the end-of-month payouts (one per payment), above any step's.
const SWEEP_OPS: u32 = 1_000_000;
use crate::world::World;

/// What one history did and what it broke.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub deliveries: u64,
    pub faults: usize,
    pub violations: Vec<String>,
}

/// A 2xx the provider got.
#[derive(Debug, Clone)]
pub struct Ack {
    pub webhook: WebhookRef,
    /// Which lifetime of the history's idempotency records it was answered in.
    pub epoch: u32,
    pub status: u16,
    pub body: String,
}

impl Ack {
    /// The event the answer is about: its `event_id` (a fetched state for the providers that
    /// must be asked), or the webhook itself for a fixed answer (Adyen's, GoCardless's).
    pub fn event_key(&self) -> String {
        serde_json::from_str::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|v| v["event_id"].as_str().map(str::to_owned))
            .unwrap_or_else(|| format!("webhook {}.{}", self.webhook.op, self.webhook.n))
    }
}

/// A delivery waiting for the provider's next attempt, due at minute `due` of the
/// history's clock.
#[derive(Debug, Clone)]
struct Parked {
    webhook: WebhookRef,
    attempts: u32,
    due: u64,
    /// When its last attempt was answered: a cut since then may have left the gateway a dead
    /// pooled connection that this attempt takes.
    last_sent: Instant,
}

enum Attempted {
    Acked,
    Retry(String),
    Refused(String),
}

pub struct Runner<'w> {
    world: &'w Arc<World>,
    model: &'w dyn Model,
    /// Unique in the world: payment ids and event ids are made from it.
    history: u64,
    case: Case,
    payments: Vec<Payment>,
    webhooks: BTreeMap<WebhookRef, Webhook>,
    /// Webhooks a step told to be delivered.
    delivered: BTreeSet<WebhookRef>,
    parked: Vec<Parked>,
    pub acks: Vec<Ack>,
    epoch: u32,
    /// Event ids the gateway answered for this history (its records, its log rows).
    event_ids: BTreeSet<String>,
    report: Report,
    /// The history's report was settled (twice, both agreeing with the books).
    settled: bool,
    seq: u64,
    /// The history's clock, in minutes: each step takes one; the provider's backoff says
    /// when a parked delivery is tried again. Nothing waits for it: it orders attempts.
    now: u64,
    /// The periods (RFC 3339, `since` and `until`) that hold this history's event-log rows:
    /// from its start to now, and where ageing moved them. Finance exports a period, and a
    /// whole provider's log grows with every history of the run.
    periods: Vec<(String, Option<String>)>,
}

impl<'w> Runner<'w> {
    pub fn new(world: &'w Arc<World>, model: &'w dyn Model, history: u64, case: Case) -> Self {
        Self {
            world,
            model,
            history,
            case,
            payments: Vec::new(),
            webhooks: BTreeMap::new(),
            delivered: BTreeSet::new(),
            parked: Vec::new(),
            acks: Vec::new(),
            epoch: 0,
            event_ids: BTreeSet::new(),
            report: Report::default(),
            settled: false,
            seq: history * 10_000,
            now: 0,
            periods: vec![(
                (chrono::Utc::now() - chrono::Duration::seconds(1)).to_rfc3339(),
                None,
            )],
        }
    }

    pub async fn run(mut self) -> Report {
        if let Err(error) = self.run_steps().await {
            self.report
                .violations
                .push(format!("the simulation itself failed: {error:#}"));
            return self.report;
        }
        match oracle::check(
            self.world,
            self.model,
            &self.payments,
            &self.acks,
            &self.case,
            self.settled,
        )
        .await
        {
            Ok(found) => self.report.violations.extend(found),
            Err(error) => self
                .report
                .violations
                .push(format!("the oracle could not read the books: {error:#}")),
        }
        self.report
    }

    async fn run_steps(&mut self) -> anyhow::Result<()> {
        self.open_payments().await?;
        let steps = self.case.steps.clone();
        for step in &steps {
            match step {
                Step::Op { id, op } => self.operate(*id, op),
                Step::Deliver { webhooks } => self.deliver_together(webhooks).await,
                Step::Fault { fault } => {
                    self.report.faults += 1;
                    self.inject(fault).await?;
                }
            }
            self.now += 1;
            self.retry_due().await;
            if !self.report.violations.is_empty() {
                return Ok(());
            }
        }
        self.drain().await;
        if self.model.ops().contains(&OpKind::Payout) && self.report.violations.is_empty() {
            self.pay_out_and_settle().await?;
        }
        Ok(())
    }

    /// The provider's first attempts of what no step delivered, then its retries of what is
    /// parked, until each is acknowledged or its schedule is spent.
    async fn drain(&mut self) {
        let rest: Vec<WebhookRef> = self
            .webhooks
            .keys()
            .filter(|w| !self.delivered.contains(w))
            .copied()
            .collect();
        for webhook in rest {
            self.deliver_together(&[webhook]).await;
        }
        while let Some(next) = self.parked.iter().map(|p| p.due).min() {
            if !self.report.violations.is_empty() {
                break;
            }
            self.now = self.now.max(next);
            self.retry_due().await;
        }
    }

    /// The end of the month: the provider pays out what each payment's balance still holds,
    /// then finance settles the history's report twice. Each run must agree with the books
    /// (exit 0); the second must book nothing. The fees it booked are checked by the oracle.
    async fn pay_out_and_settle(&mut self) -> anyhow::Result<()> {
        for payment in 0..self.payments.len() {
            self.operate(SWEEP_OPS + payment as u32, &Op::Payout { payment });
        }
        self.drain().await;
        let Some(report) = self.model.settlement_report(&self.payments) else {
            return Ok(());
        };
        if report.lines().count() <= 1 {
            return Ok(());
        }
        let path = self
            .world
            .dir
            .join(format!("settlement-{}.csv", self.history));
        std::fs::write(&path, &report)?;
        let args = vec![
            "settle".to_owned(),
            "--provider".to_owned(),
            self.model.provider().to_owned(),
            path.display().to_string(),
        ];
        for (run, booked_now) in [("first", None), ("second", Some(0))] {
            match self.world.command_async_tries(args.clone(), 1).await {
                Err(error) => {
                    self.report.violations.push(format!(
                        "the {run} settlement of the history's report differs from the books: \
                         {error:#}\nreport:\n{report}"
                    ));
                    return Ok(());
                }
                Ok(out) => {
                    let booked = out
                        .lines()
                        .next()
                        .and_then(|l| l.split(" fees of which ").nth(1))
                        .and_then(|l| l.split_whitespace().next())
                        .and_then(|n| n.parse::<u64>().ok());
                    if booked_now.is_some() && booked != booked_now {
                        self.report
                            .violations
                            .push(format!("the {run} settlement booked fees again: {out}"));
                    }
                }
            }
        }
        std::fs::remove_file(&path)?;
        self.settled = self.report.violations.is_empty();
        Ok(())
    }

    /// The merchant's orders and the provider's payments.
    async fn open_payments(&mut self) -> anyhow::Result<()> {
        let mut previous: Option<i64> = None;
        for (index, spec) in self.case.payments.clone().iter().enumerate() {
            let currency: &'static str = self
                .model
                .currencies()
                .iter()
                .find(|c| **c == spec.currency)
                .copied()
                .unwrap_or(self.model.currencies()[0]);
            let order = match spec.order {
                OrderSpec::None => None,
                OrderSpec::SameAsPrevious if previous.is_some() => previous,
                OrderSpec::OtherAmount => {
                    Some(self.world.create_order(spec.amount + 1, currency).await?)
                }
                _ => Some(self.world.create_order(spec.amount, currency).await?),
            };
            previous = order.or(previous);
            let id = self.model.payment_id(self.history, index);
            self.payments
                .push(Payment::new(index, id, order, spec.amount, currency));
        }
        for payment in &self.payments {
            self.put_api(payment);
        }
        Ok(())
    }

    fn put_api(&self, payment: &Payment) {
        if let Some(api) = &self.world.api {
            for (path, body) in self.model.api(payment) {
                api.put(&path, &body);
            }
        }
    }

    /// The provider changes a payment and sends its webhooks (held until delivered).
    fn operate(&mut self, id: u32, op: &crate::truth::Op) {
        let rules = self.model.rules();
        let Some(payment) = self.payments.get_mut(op.payment()) else {
            return;
        };
        let Some(change) = payment.apply(op, &rules) else {
            return;
        };
        let payment = payment.clone();
        self.put_api(&payment);
        self.seq += 1;
        for (n, webhook) in self
            .model
            .webhooks(&payment, &change, self.seq)
            .into_iter()
            .enumerate()
        {
            self.webhooks
                .insert(WebhookRef { op: id, n: n as u8 }, webhook);
        }
    }

    /// Delivers `refs` at once. A provider that batches (Adyen's items, GoCardless's
    /// events) sends two different ones as one request.
    async fn deliver_together(&mut self, refs: &[WebhookRef]) {
        let present: Vec<WebhookRef> = refs
            .iter()
            .filter(|r| self.webhooks.contains_key(r))
            .copied()
            .collect();
        if present.is_empty() {
            return;
        }
        self.delivered.extend(present.iter().copied());
        if let [a, b] = present[..]
            && a != b
            && let Some(batch) = self.model.merge(&self.webhooks[&a], &self.webhooks[&b])
        {
            let (result, acks) = self.attempt_body(a, &batch, None).await;
            let second = match &result {
                Attempted::Acked => Attempted::Acked,
                Attempted::Retry(last) => Attempted::Retry(last.clone()),
                Attempted::Refused(answer) => Attempted::Refused(answer.clone()),
            };
            self.record(a, 1, result, acks);
            self.record(b, 1, second, Vec::new());
            return;
        }
        let attempts = present.iter().map(|r| self.attempt(*r));
        let results = join_all(attempts).await;
        for (webhook, (result, acks)) in present.into_iter().zip(results) {
            self.record(webhook, 1, result, acks);
        }
    }

    /// The provider's next attempts of the parked deliveries that are due.
    async fn retry_due(&mut self) {
        let now = self.now;
        let (due, later): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|p| p.due <= now);
        self.parked = later;
        if due.is_empty() {
            return;
        }
        let attempts = due
            .iter()
            .map(|p| self.attempt_since(p.webhook, Some(p.last_sent)));
        let results = join_all(attempts).await;
        for (p, (result, acks)) in due.into_iter().zip(results) {
            self.record(p.webhook, p.attempts + 1, result, acks);
        }
    }

    fn record(&mut self, webhook: WebhookRef, attempts: u32, result: Attempted, acks: Vec<Ack>) {
        self.report.deliveries += 1;
        for ack in &acks {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&ack.body)
                && let Some(id) = v["event_id"].as_str()
            {
                self.event_ids.insert(id.to_owned());
            }
        }
        self.acks.extend(acks);
        let label = self
            .webhooks
            .get(&webhook)
            .map_or_else(String::new, |w| w.label.clone());
        match result {
            Attempted::Acked => {}
            Attempted::Refused(answer) => self.report.violations.push(format!(
                "webhook {}.{} ({label}) got {answer}, which no retry can fix",
                webhook.op, webhook.n
            )),
            Attempted::Retry(last) => match self.model.schedule().get(attempts as usize - 1) {
                Some(wait) => self.parked.push(Parked {
                    webhook,
                    attempts,
                    due: self.now + wait.max(&1),
                    last_sent: Instant::now(),
                }),
                None => self.report.violations.push(format!(
                    "webhook {}.{} ({label}) was never acknowledged in the provider's {attempts} \
                     attempts; the last answer: {last}",
                    webhook.op, webhook.n
                )),
            },
        }
    }

    /// One attempt of the provider's, signed now. A gateway that is not there (killed, not
    /// yet restarted) is tried again at once: its provider would retry within its schedule,
    /// which outlasts any restart.
    async fn attempt(&self, webhook: WebhookRef) -> (Attempted, Vec<Ack>) {
        self.attempt_since(webhook, None).await
    }

    /// [`Self::attempt`], the webhook's previous attempt sent at `previous`.
    async fn attempt_since(
        &self,
        webhook: WebhookRef,
        previous: Option<Instant>,
    ) -> (Attempted, Vec<Ack>) {
        let Some(hook) = self.webhooks.get(&webhook) else {
            return (Attempted::Acked, Vec::new());
        };
        self.attempt_body(webhook, hook, previous).await
    }

    /// One attempt of `hook`, answered as `webhook`'s.
    async fn attempt_body(
        &self,
        webhook: WebhookRef,
        hook: &Webhook,
        previous: Option<Instant>,
    ) -> (Attempted, Vec<Ack>) {
        let provider = self.model.provider();
        let started = Instant::now();
        let mut outage_answers = 0;
        loop {
            let sent = Instant::now();
            let start = self.world.start_state();
            let api_outages = self.world.api_outages();
            let delivery = sign::delivery_now(provider, &hook.id, &hook.body);
            let mut request = self
                .world
                .client
                .post(self.world.url(&delivery.path(provider)))
                .header("Content-Type", delivery.content_type)
                .body(delivery.body);
            for (name, value) in &delivery.headers {
                request = request.header(name, value);
            }
            match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let body = response.text().await.unwrap_or_default();
                    if status == 503 && self.world.started_since(start) {
                        // A gateway restarting answers 503 `unavailable` until its first read
                        // of the endpoints: from outside, a restart like a refused connection.
                        // The provider's next attempt comes minutes later, when the start is
                        // long over, so it is not an attempt spent.
                        if let Err(error) = self.world.wait_ready().await {
                            return (Attempted::Retry(error.to_string()), Vec::new());
                        }
                        continue;
                    }
                    let outage = self.world.cut_since(previous.unwrap_or(sent).min(sent))
                        || self.world.api_outages() != api_outages;
                    if status == 503 && outage && outage_answers < 1000 {
                        // A 503 of a passing outage: a cut (the connections it killed each
                        // fail the request that takes it next) or the provider's API answering
                        // a scripted 503 to this fetch. The provider's next attempt comes
                        // minutes later, when the outage is long over, so it is not an attempt
                        // spent; the attempts here run back to back, and with other histories
                        // cutting and scripting outages they would otherwise all meet one, as
                        // no provider's attempts hours apart do.
                        outage_answers += 1;
                        continue;
                    }
                    return match status {
                        200..=299 => (
                            Attempted::Acked,
                            vec![Ack {
                                webhook,
                                epoch: self.epoch,
                                status,
                                body,
                            }],
                        ),
                        409 | 408 | 429 | 500..=599 => {
                            (Attempted::Retry(format!("{status} {body}")), Vec::new())
                        }
                        _ => (Attempted::Refused(format!("{status} {body}")), Vec::new()),
                    };
                }
                Err(error) => {
                    let _ = self.world.ensure_running().await;
                    if started.elapsed() > Duration::from_secs(120) {
                        return (
                            Attempted::Retry(format!("no answer for 120 s: {error}")),
                            Vec::new(),
                        );
                    }
                    // The gateway is restarting: polling for it, not timing anything.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    async fn inject(&mut self, fault: &Fault) -> anyhow::Result<()> {
        match fault {
            Fault::ExpireRecords => self.expire_records().await,
            Fault::AgeMonths { months } => {
                let _exclusive = self.world.exclusive.lock().await;
                self.age(i32::from(*months)).await;
                Ok(())
            }
            Fault::ArchiveAndDrop => {
                // Rows move into a past month only while no pass runs: a pass between a
                // month's archive and its drop would find rows its archive lacks and keep the
                // month for a person (docs/history.md), which no production delivery can cause.
                let _exclusive = self.world.exclusive.lock().await;
                self.age(14).await;
                self.world
                    .command_async(vec!["history".into(), "archive".into()])
                    .await
                    .map(|_| ())
            }
            Fault::ReplayArchive => self.replay_archive().await,
            Fault::ExportAndReplay => self.export_and_replay().await,
            Fault::AdminReplay { webhook } => {
                self.admin_replay(*webhook).await;
                Ok(())
            }
            Fault::KillAndRestart => {
                let _exclusive = self.world.exclusive.lock().await;
                self.world.kill_and_restart().await
            }
            Fault::CutConnections => self.world.cut_connections().await,
            Fault::ApiUnavailable { count } => {
                if let Some(api) = &self.world.api {
                    api.script(&vec![Scripted::Status(503); usize::from(*count)]);
                }
                Ok(())
            }
        }
    }

    /// Every id this history's events may be stored under: answered event ids, the
    /// webhooks' own, and the ledger's for its payments.
    async fn known_ids(&self) -> anyhow::Result<Vec<String>> {
        let mut ids: BTreeSet<String> = self.event_ids.clone();
        for hook in self.webhooks.values() {
            ids.insert(hook.id.clone());
            ids.extend(crate::models::keys(self.model, hook));
        }
        let payments: Vec<String> = self.payments.iter().map(|p| p.id.clone()).collect();
        for row in self
            .world
            .db
            .query(
                "SELECT event_id FROM ledger_transfers WHERE merchant_id = $1 AND provider = $2 \
                 AND payment_id = ANY($3)",
                &[&MERCHANT, &self.model.provider(), &payments],
            )
            .await?
        {
            ids.insert(row.get(0));
        }
        Ok(ids.into_iter().collect())
    }

    /// Days pass: this history's idempotency records expire, and the cleaner removes them.
    async fn expire_records(&mut self) -> anyhow::Result<()> {
        let keys: Vec<String> = self
            .known_ids()
            .await?
            .iter()
            .map(|id| format!("{}:{id}", self.model.provider()))
            .collect();
        self.world
            .db
            .execute(
                "UPDATE idempotency_keys SET expires_at = now() - interval '1 second' \
                 WHERE user_id = $1 AND op = 'payment.callback' AND idem_key = ANY($2) \
                 AND status <> 'processing'",
                &[&MERCHANT, &keys],
            )
            .await?;
        self.epoch += 1;
        // `cleanup` skips rows another cleaner has locked (`SKIP LOCKED`); when that cleaner
        // dies before its commit (serve's own pass at a restart, killed or cut by another
        // history), an expired record outlives this cleanup, answers its old ack for a while,
        // and is gone after the next one: both are right once the TTL has passed, but the
        // oracle compares answers per lifetime. Days passing means the records are gone, so
        // the operator runs `cleanup` until none of them is left.
        for _ in 0..50 {
            self.world.command_async(vec!["cleanup".into()]).await?;
            let left: i64 = self
                .world
                .db
                .query_one(
                    "SELECT count(*) FROM idempotency_keys WHERE user_id = $1 \
                     AND op = 'payment.callback' AND idem_key = ANY($2) AND expires_at < now()",
                    &[&MERCHANT, &keys],
                )
                .await?
                .get(0);
            if left == 0 {
                return Ok(());
            }
        }
        anyhow::bail!("expired records of this history outlived 50 runs of cleanup")
    }

    /// This history's event-log rows move `months` back, as if received then.
    async fn age(&mut self, months: i32) {
        let Ok(ids) = self.known_ids().await else {
            return;
        };
        // Rows of one event in two months can collide on their way; such a move is skipped
        // (the fault then did not happen), never forced.
        let Ok(moved) = self
            .world
            .db
            .query(
                "WITH moved AS ( \
                   UPDATE callback_deliveries \
                   SET received_at = received_at - make_interval(months => $1) \
                   WHERE merchant_id = $2 AND provider = $3 \
                   AND (event_id = ANY($4) \
                        OR split_part(split_part(event_id, '~', 1), '#', 1) = ANY($4)) \
                   RETURNING received_at) \
                 SELECT to_char(min(received_at) AT TIME ZONE 'UTC', \
                                'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), \
                        to_char((max(received_at) + interval '1 microsecond') AT TIME ZONE 'UTC', \
                                'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') \
                 FROM moved GROUP BY date_trunc('day', received_at)",
                &[&months, &MERCHANT, &self.model.provider(), &ids],
            )
            .await
        else {
            return;
        };
        for row in moved {
            self.periods.push((row.get(0), Some(row.get(1))));
        }
    }

    /// Finance replays the lines of `lines` that are this history's.
    async fn replay_lines(&self, lines: Vec<String>, what: &str) -> anyhow::Result<()> {
        let ids: BTreeSet<String> = self.known_ids().await?.into_iter().collect();
        let mine: Vec<&String> = lines
            .iter()
            .filter(|line| {
                serde_json::from_str::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(|id| ids.contains(id)))
                    .unwrap_or(false)
            })
            .collect();
        if mine.is_empty() {
            return Ok(());
        }
        let file = self.world.dir.join(format!(
            "replay-{}-{}.jsonl",
            self.history,
            uuid::Uuid::new_v4().simple()
        ));
        let mut out = std::fs::File::create(&file)?;
        for line in mine {
            writeln!(out, "{line}")?;
        }
        drop(out);
        let url = self.world.url("");
        let result = self
            .world
            .command_async(vec![
                "replay".into(),
                file.display().to_string(),
                "--url".into(),
                url,
                "--retries".into(),
                "20".into(),
                "--max-backoff-ms".into(),
                "200".into(),
            ])
            .await;
        // PayPal's events cannot be signed by anyone but PayPal: replay counts them failed,
        // as documented; the admin replay is theirs.
        if let Err(error) = result
            && self.model.provider() != crate::support::PAYPAL
        {
            anyhow::bail!("{what}: {error:#}");
        }
        Ok(())
    }

    /// Finance exports the periods that hold this history's rows and replays them.
    async fn export_and_replay(&mut self) -> anyhow::Result<()> {
        let mut periods = self.periods.clone();
        periods.sort();
        let mut lines: Vec<String> = Vec::new();
        for (since, until) in periods {
            let mut args = vec![
                "export".to_owned(),
                "--provider".into(),
                self.model.provider().into(),
                "--since".into(),
                since,
            ];
            if let Some(until) = until {
                args.extend(["--until".into(), until]);
            }
            let exported = self.world.command_async(args).await?;
            for line in exported.lines() {
                if !lines.iter().any(|seen| seen == line) {
                    lines.push(line.to_owned());
                }
            }
        }
        self.replay_lines(lines, "replay of an export")
            .await
            .or_else(|e| {
                self.report.violations.push(format!("{e:#}"));
                Ok(())
            })
    }

    async fn replay_archive(&mut self) -> anyhow::Result<()> {
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(self.world.archive_dir())? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "gz") {
                let file = std::fs::File::open(&path)?;
                let reader = std::io::BufReader::new(flate2::read::GzDecoder::new(file));
                for line in reader.lines() {
                    lines.push(line?);
                }
            }
        }
        self.replay_lines(lines, "replay of an archive")
            .await
            .or_else(|e| {
                self.report.violations.push(format!("{e:#}"));
                Ok(())
            })
    }

    /// An operator replays the stored event a webhook was answered for.
    async fn admin_replay(&mut self, webhook: WebhookRef) {
        let Some(hook) = self.webhooks.get(&webhook) else {
            return;
        };
        let mut ids: Vec<String> = self
            .acks
            .iter()
            .filter(|a| a.webhook == webhook)
            .filter_map(|a| {
                serde_json::from_str::<serde_json::Value>(&a.body)
                    .ok()
                    .and_then(|v| v["event_id"].as_str().map(str::to_owned))
            })
            .collect();
        if ids.is_empty() {
            ids = crate::models::keys(self.model, hook);
        }
        let Some(event_id) = ids.first().cloned() else {
            return;
        };
        let mut last = String::new();
        for _ in 0..20 {
            let start = self.world.start_state();
            match self
                .world
                .admin_replay(self.model.provider(), &event_id)
                .await
            {
                // Replayed, or not stored (not delivered yet, or its month was dropped), or
                // waiting for another event: what an operator may see.
                Ok((200 | 404 | 409, _)) => return,
                Ok((status, body)) if status == 503 && self.world.started_since(start) => {
                    // A restart, not a failure: wait for it as an operator would.
                    last = format!("{status} {body}");
                    if self.world.wait_ready().await.is_err() {
                        break;
                    }
                    continue;
                }
                Ok((status, body)) if status >= 500 => last = format!("{status} {body}"),
                Ok((status, body)) => {
                    self.report.violations.push(format!(
                        "the admin replay of {event_id} answered {status} {body}"
                    ));
                    return;
                }
                Err(error) => last = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.report.violations.push(format!(
            "the admin replay of {event_id} kept failing: {last}"
        ));
    }
}

/// Acks grouped by event and record lifetime, for the byte-identical check.
pub fn ack_groups(acks: &[Ack]) -> HashMap<(String, u32), Vec<&Ack>> {
    let mut groups: HashMap<(String, u32), Vec<&Ack>> = HashMap::new();
    for ack in acks {
        groups
            .entry((ack.event_key(), ack.epoch))
            .or_default()
            .push(ack);
    }
    groups
}
