//! Load generator for the benchmarks: signed callbacks sent with fixed concurrency. Prints one
//! JSON object with throughput and latency percentiles.
//!
//!   loadgen --config gateway.toml --provider acme --url http://127.0.0.1:8080 \
//!           --mode first --first-order 1 --count 20000 --concurrency 64
//!
//! Modes: `first` (one unique payment.succeeded per order id, amount = 1000 + id % 1000, as
//! scripts/bench creates them), `replay` (the same events again: every answer is a replay),
//! `storm` (`count` concurrent deliveries of one event). With `--count` these build and sign
//! every request before the clock starts, so signing does not compete with the gateway for CPU.
//! Another provider's event is its own capture sample (an Adyen AUTHORISATION, ...), except
//! Mollie's: its webhook is a form naming the payment alone, `id=tr_{n}` for order n, and the
//! gateway asks Mollie's API about it (scripts/bench runs an emulated one, bench/mollie_api.py,
//! which answers payment `tr_{n}` as paid for order n).
//!
//! The scale benchmark (`scripts/bench --scale`) runs for a time instead (`--duration SECS`) and
//! builds each request as it sends it:
//!   `first --duration D --orders K`  first deliveries for the pending orders
//!                                     first_order .. first_order + K - 1;
//!   `cold-replay --history RANGES`    redeliveries of stored events picked uniformly at random
//!                                     over RANGES (`1-1000000,1200000-1300000`, or `N` for 1-N);
//!   `mix --history RANGES --orders K --redelivery-percent 5`
//!                                     first deliveries, and that share of redeliveries of
//!                                     stored events.
//! Those modes send realistic bodies (`--body realistic`, the default for cold-replay and mix): a
//! 2-4 KiB Standard-Webhooks `payment.succeeded` event that is a pure function of its event
//! number n, which is also its order id. The history loader (bench/scale/history.sql) writes the
//! same bytes through SQL functions this program prints (`--emit-sql`), so a redelivery of any
//! stored event carries the stored body, and the gateway answers it with the stored ack.
//!
//! With `--notify-listen HOST:PORT --notify-secret whsec_..` a counted `first` run is also the
//! merchant's notification endpoint (one thread of its own): it verifies each notification,
//! waits for every applied event's, and reports `notify_eps` and the lag from each ack to its
//! notification. Several endpoints of one merchant may share the listener, each on a path of
//! its own with its own secret (`--notify-secret /e1=whsec_.. --notify-secret /e2=whsec_..`):
//! each notification is verified with its path's secret, counted once per path, and
//! `--notify-expect` says how many to wait for (every event's, once per endpoint).
//!
//! It is as light as pgbench is in the anchor runs, since it shares the cores with the gateway:
//! one thread, one keep-alive HTTP/1.1 connection per client (hyper's bare connection API, no
//! pool), every connection opened before the clock starts, as pgbench excludes its connection
//! time.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use callback_gateway::config::{PayloadFormat, ProcessEnv, Settings};
use callback_gateway::idempotency::REPLAYED_HEADER;
use callback_gateway::providers::{self, Provider, Sample as EventSample};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    First,
    Replay,
    Storm,
    ColdReplay,
    Mix,
}

/// The shape of the events' bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BodyKind {
    /// The minimal canonical event (about 150 bytes), event id `{tag}_{order}`.
    Short,
    /// A 2-4 KiB Standard-Webhooks payment event, a pure function of the event number.
    Realistic,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, required_unless_present = "print_body")]
    config: Option<PathBuf>,
    #[arg(long, required_unless_present = "print_body")]
    provider: Option<String>,
    /// The gateway, http://host:port
    #[arg(long, required_unless_present_any = ["emit_sql", "print_body"])]
    url: Option<String>,
    #[arg(long, value_enum, required_unless_present_any = ["emit_sql", "print_body"])]
    mode: Option<Mode>,
    /// First order id; events go to orders first_order .. first_order + count (first, replay,
    /// storm), or first_order .. first_order + orders (first and mix with --duration).
    #[arg(long, default_value_t = 1)]
    first_order: i64,
    /// Requests to send. With --duration, an upper bound.
    #[arg(long)]
    count: Option<u64>,
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Distinguishes the event ids of separate runs over the same orders (short bodies).
    #[arg(long, default_value = "bench")]
    tag: String,
    /// Send for this many seconds, building and signing each request as it is sent
    /// (first, cold-replay, mix).
    #[arg(long)]
    duration: Option<f64>,
    /// How many pending orders from --first-order new events may pay (first and mix with
    /// --duration); the run stops early, reporting `exhausted`, when they run out.
    #[arg(long)]
    orders: Option<u64>,
    /// The stored events redeliveries pick from, uniformly: `a-b` ranges of event numbers,
    /// comma-separated, or `N` for 1-N (cold-replay, mix).
    #[arg(long)]
    history: Option<String>,
    /// The share of a mix's requests that redeliver a stored event.
    #[arg(long, default_value_t = 5)]
    redelivery_percent: u32,
    /// Default: short for first, replay and storm; realistic for cold-replay and mix.
    #[arg(long, value_enum)]
    body: Option<BodyKind>,
    /// Seed of the redelivery picks (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Print the SQL the history loader needs (psql variables and pg_temp functions that build
    /// the realistic events and the gateway's row values), then exit.
    #[arg(long)]
    emit_sql: bool,
    /// Print the realistic body of event number N, then exit.
    #[arg(long)]
    print_body: Option<i64>,
    /// Also be the merchant's notification endpoint on this host:port (a counted `first` run):
    /// verify each notification, wait for every applied event's, and report `notify_eps`,
    /// `notify_lag_p50_ms` and `notify_lag_p99_ms` (ack to notification).
    #[arg(long)]
    notify_listen: Option<String>,
    /// The merchant's Standard Webhooks secret, to verify the notifications with: `whsec_..`
    /// for any path, or `/PATH=whsec_..` for the endpoint on that path alone (repeatable).
    #[arg(long)]
    notify_secret: Vec<String>,
    /// How many notifications to wait for (default: one per applied event); several endpoints
    /// each receive every event's.
    #[arg(long)]
    notify_expect: Option<usize>,
    /// How long to wait for the notifications after the last ack, in seconds.
    #[arg(long, default_value_t = 60.0)]
    notify_wait: f64,
}

type Call = Request<Full<Bytes>>;

fn amount_of(order_id: i64) -> i64 {
    1000 + order_id % 1000
}

/// One event as a provider would send it: its id (the `webhook-id`) and its raw body.
struct Event {
    id: String,
    body: Vec<u8>,
}

/// Builds the events of a run.
struct Events {
    kind: BodyKind,
    tag: String,
    realistic: body::Template,
}

impl Events {
    fn new(kind: BodyKind, tag: &str) -> anyhow::Result<Self> {
        Ok(Self {
            kind,
            tag: tag.to_owned(),
            realistic: body::Template::realistic()?,
        })
    }

    /// Event number `n`, which pays order `n`, in `provider`'s format.
    fn event_for(&self, provider: &Provider, n: i64) -> Event {
        if provider.settings().payload == PayloadFormat::Mollie {
            // What Mollie posts: the payment id and nothing else. The payment is named after
            // its order, so the emulated API answers it from the id alone.
            let id = format!("tr_{n}");
            return Event {
                body: format!("id={id}").into_bytes(),
                id,
            };
        }
        if self.kind == BodyKind::Short && provider.settings().payload != PayloadFormat::Canonical {
            // Another provider's payment capture (an Adyen AUTHORISATION, ...): its own sample.
            let id = format!("{}_{n}", self.tag);
            let sample = EventSample {
                event_id: id.clone(),
                payment_id: format!("pay_{id}"),
                order_id: Some(n),
                amount_minor: amount_of(n),
                currency: "USD".to_owned(),
            };
            return Event {
                body: provider
                    .sample_body("payment.succeeded", &sample)
                    .into_bytes(),
                id,
            };
        }
        self.event(n)
    }

    /// Event number `n`, which pays order `n`.
    fn event(&self, n: i64) -> Event {
        match self.kind {
            BodyKind::Short => {
                let id = format!("{}_{n}", self.tag);
                let body = format!(
                    r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"pay_{id}","order_id":{n},"amount_minor":{},"currency":"USD"}}}}"#,
                    amount_of(n)
                );
                Event {
                    id,
                    body: body.into_bytes(),
                }
            }
            BodyKind::Realistic => {
                let rendered = self.realistic.render(n);
                Event {
                    id: rendered.event_id,
                    body: rendered.body.into_bytes(),
                }
            }
        }
    }
}

/// Signs `event` at unix time `now` and builds its request.
fn request(
    provider: &Provider,
    path: &str,
    authority: &str,
    event: Event,
    now: i64,
) -> anyhow::Result<Call> {
    let signed = provider
        .sign(&event.id, &event.body, now)
        .map_err(|e| anyhow::anyhow!("provider {}: {e}", provider.name()))?;
    // As the provider posts it: Mercado Pago signs a query string, Mollie and Braintree post
    // forms.
    let path = match &signed.query {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    let mut request = Request::post(path)
        .header("host", authority)
        .header("content-type", signed.content_type);
    for (name, value) in signed.headers {
        request = request.header(name, value);
    }
    // Adyen's signatures travel in the body: the signed body is what is sent.
    let body = signed.body.unwrap_or(event.body);
    Ok(request.body(Full::new(Bytes::from(body)))?)
}

/// Every request of a counted run (first, replay, storm), signed and built.
fn prepare(
    mode: Mode,
    count: u64,
    first_order: i64,
    events: &Events,
    target: &Target,
) -> anyhow::Result<Vec<Call>> {
    let now = chrono::Utc::now().timestamp();
    let event = |n: i64| {
        request(
            &target.provider,
            &target.path,
            &target.authority,
            events.event_for(&target.provider, n),
            now,
        )
    };
    match mode {
        Mode::Storm => {
            let one = event(first_order)?;
            Ok((0..count)
                .map(|_| {
                    let mut copy = Request::new(one.body().clone());
                    *copy.method_mut() = one.method().clone();
                    *copy.uri_mut() = one.uri().clone();
                    *copy.headers_mut() = one.headers().clone();
                    copy
                })
                .collect())
        }
        _ => (0..count as i64).map(|i| event(first_order + i)).collect(),
    }
}

/// Where requests go and who signs them.
struct Target {
    provider: Arc<Provider>,
    path: String,
    authority: Arc<str>,
}

/// One answered request.
#[derive(Debug, Clone, Copy)]
struct Sample {
    status: u16,
    /// The answer carried the replay header.
    replayed: bool,
    /// The request redelivered a stored event (live runs).
    redelivery: bool,
    latency: Duration,
    /// When its answer came (a committed first delivery's notification is due from then).
    answered_at: Instant,
}

/// One client of a counted run: its own connection, its share of the requests in order.
async fn client(
    authority: Arc<str>,
    calls: Vec<Call>,
    start: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<Vec<(Sample, Option<String>)>> {
    let mut sender = connect(&authority).await?;
    start.wait().await;
    let mut results = Vec::with_capacity(calls.len());
    for call in calls {
        // The event id (Standard Webhooks' header), to match the event's notification.
        let event_id = call
            .headers()
            .get("webhook-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        results.push((timed(&mut sender, &authority, call, false).await?, event_id));
    }
    Ok(results)
}

/// What every client of a live run shares.
struct Live {
    target: Target,
    events: Events,
    first_order: i64,
    orders: Option<u64>,
    /// New events handed out so far.
    new_events: AtomicU64,
    exhausted: AtomicBool,
    history: Option<History>,
    redelivery_percent: u32,
    duration: Option<Duration>,
    max_requests: Option<u64>,
    issued: AtomicU64,
}

impl Live {
    /// The next request's event number and whether it redelivers a stored event; `None` when
    /// the run is over.
    fn next(&self, rng: &mut SplitMix64, deadline: Option<Instant>) -> Option<(i64, bool)> {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        if let Some(max) = self.max_requests
            && self.issued.fetch_add(1, Ordering::Relaxed) >= max
        {
            return None;
        }
        if let Some(history) = &self.history
            && rng.below(100) < u64::from(self.redelivery_percent)
        {
            return Some((history.pick(rng), true));
        }
        let k = self.new_events.fetch_add(1, Ordering::Relaxed);
        if self.orders.is_some_and(|orders| k >= orders) {
            self.exhausted.store(true, Ordering::Relaxed);
            return None;
        }
        Some((self.first_order + k as i64, false))
    }
}

/// One client of a live run: builds each request when it is its turn. Signing at send time
/// keeps every signature's timestamp fresh, within the gateway's tolerance however long the run;
/// it costs one HMAC-SHA256 over the body per request, as the gateway's own check does.
async fn live_client(
    live: Arc<Live>,
    seed: u64,
    start: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<Vec<Sample>> {
    let authority = live.target.authority.clone();
    let mut sender = connect(&authority).await?;
    let mut rng = SplitMix64(seed);
    start.wait().await;
    let deadline = live.duration.map(|d| Instant::now() + d);
    let mut results = Vec::new();
    while let Some((n, redelivery)) = live.next(&mut rng, deadline) {
        let call = request(
            &live.target.provider,
            &live.target.path,
            &authority,
            live.events.event_for(&live.target.provider, n),
            chrono::Utc::now().timestamp(),
        )?;
        results.push(timed(&mut sender, &authority, call, redelivery).await?);
    }
    Ok(results)
}

/// Sends one request and times it. A broken connection counts as a failed request (status 0)
/// and is replaced, so the next request has a connection.
async fn timed(
    sender: &mut http1::SendRequest<Full<Bytes>>,
    authority: &str,
    call: Call,
    redelivery: bool,
) -> anyhow::Result<Sample> {
    let sent = Instant::now();
    let (status, replayed) = match send(sender, call).await {
        Ok(answer) => answer,
        Err(_) => {
            *sender = connect(authority).await?;
            (0, false)
        }
    };
    Ok(Sample {
        status,
        replayed,
        redelivery,
        latency: sent.elapsed(),
        answered_at: Instant::now(),
    })
}

async fn connect(authority: &str) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

/// Sends one request: its status, and whether the answer was a replay.
async fn send(
    sender: &mut http1::SendRequest<Full<Bytes>>,
    call: Call,
) -> anyhow::Result<(u16, bool)> {
    sender.ready().await?;
    let response = sender.send_request(call).await?;
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key(REPLAYED_HEADER);
    response.into_body().collect().await?;
    Ok((status, replayed))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

/// Event numbers a redelivery may pick: inclusive ranges, picked uniformly over their union.
#[derive(Debug, Clone, PartialEq, Eq)]
struct History {
    ranges: Vec<(i64, i64)>,
    total: u64,
}

impl History {
    /// `a-b,c-d` or `N` (1-N); empty ranges (b < a) are skipped.
    fn parse(spec: &str) -> anyhow::Result<Self> {
        let mut ranges = Vec::new();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse::<i64>()?, b.trim().parse::<i64>()?),
                None => (1, part.parse::<i64>()?),
            };
            if a < 1 {
                anyhow::bail!("--history: event numbers start at 1, got {part:?}");
            }
            if b >= a {
                ranges.push((a, b));
            }
        }
        let total = ranges.iter().map(|(a, b)| (b - a + 1) as u64).sum();
        if total == 0 {
            anyhow::bail!("--history {spec:?} names no event");
        }
        Ok(Self { ranges, total })
    }

    fn pick(&self, rng: &mut SplitMix64) -> i64 {
        let mut k = rng.below(self.total);
        for &(a, b) in &self.ranges {
            let size = (b - a + 1) as u64;
            if k < size {
                return a + k as i64;
            }
            k -= size;
        }
        // Unreachable: k < total, the sum of the sizes.
        self.ranges[self.ranges.len() - 1].1
    }
}

/// A small, fast generator for the picks (the load generator must stay light).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in 0..bound (bound > 0), by multiply-shift (bias below 2^-32 for our bounds).
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(Args::parse()))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(n) = args.print_body {
        use std::io::Write;
        let rendered = body::Template::realistic()?.render(n);
        std::io::stdout().write_all(rendered.body.as_bytes())?;
        return Ok(());
    }
    let (Some(config), Some(provider_name)) = (&args.config, &args.provider) else {
        anyhow::bail!("--config and --provider are required");
    };
    let settings = Settings::load(Some(config), &ProcessEnv)?;
    let providers = providers::configure_all(&settings.providers);
    let provider = providers
        .get(provider_name)
        .ok_or_else(|| anyhow::anyhow!("provider {provider_name} is not configured"))?;
    if args.emit_sql {
        print!("{}", body::history_sql(&provider)?);
        return Ok(());
    }
    let (Some(url), Some(mode)) = (&args.url, args.mode) else {
        anyhow::bail!("--url and --mode are required");
    };
    let authority: Arc<str> = url
        .trim_end_matches('/')
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("--url must be http://host:port"))?
        .into();
    let target = Target {
        path: format!("/v1/callbacks/{provider_name}"),
        provider,
        authority,
    };
    let kind = args.body.unwrap_or(match mode {
        Mode::First | Mode::Replay | Mode::Storm => BodyKind::Short,
        Mode::ColdReplay | Mode::Mix => BodyKind::Realistic,
    });
    let events = Events::new(kind, &args.tag)?;
    let live = args.duration.is_some() || matches!(mode, Mode::ColdReplay | Mode::Mix);

    let started;
    let mut samples = Vec::new();
    let mut extra = serde_json::Map::new();
    // (event id, when its ack came, its status) of a counted run's requests.
    let mut answered: Vec<(String, Instant, u16)> = Vec::new();
    let receiver = match &args.notify_listen {
        Some(listen) => Some(notify::Receiver::start(listen, &args.notify_secret)?),
        None => None,
    };
    if live {
        let history = match mode {
            Mode::ColdReplay | Mode::Mix => {
                let spec = args
                    .history
                    .as_deref()
                    .ok_or_else(|| anyhow::anyhow!("--mode cold-replay and mix need --history"))?;
                Some(History::parse(spec)?)
            }
            Mode::First => None,
            Mode::Replay | Mode::Storm => {
                anyhow::bail!("--duration is for first, cold-replay and mix")
            }
        };
        if args.duration.is_none() && args.count.is_none() {
            anyhow::bail!("give --duration or --count");
        }
        let redelivery_percent = match mode {
            Mode::ColdReplay => 100,
            Mode::Mix => args.redelivery_percent.min(100),
            _ => 0,
        };
        let live = Arc::new(Live {
            target,
            events,
            first_order: args.first_order,
            orders: args.orders,
            new_events: AtomicU64::new(0),
            exhausted: AtomicBool::new(false),
            history,
            redelivery_percent,
            duration: args.duration.map(Duration::from_secs_f64),
            max_requests: args.count,
            issued: AtomicU64::new(0),
        });
        let clients = args.concurrency.max(1);
        let seed = args
            .seed
            .unwrap_or_else(|| chrono::Utc::now().timestamp_nanos_opt().unwrap_or(0) as u64);
        let start = Arc::new(tokio::sync::Barrier::new(clients + 1));
        let tasks: Vec<_> = (0..clients as u64)
            .map(|i| {
                let client_seed = seed ^ i.wrapping_mul(0xA076_1D64_78BD_642F);
                tokio::spawn(live_client(live.clone(), client_seed, start.clone()))
            })
            .collect();
        start.wait().await;
        started = Instant::now();
        for task in tasks {
            samples.extend(task.await??);
        }
        let new_events = samples.iter().filter(|s| !s.redelivery).count() as u64;
        extra.insert("new_events".into(), new_events.into());
        extra.insert(
            "redeliveries".into(),
            samples.iter().filter(|s| s.redelivery).count().into(),
        );
        extra.insert(
            "next_order".into(),
            (args.first_order + new_events as i64).into(),
        );
        extra.insert(
            "exhausted".into(),
            live.exhausted.load(Ordering::Relaxed).into(),
        );
    } else {
        let count = args
            .count
            .ok_or_else(|| anyhow::anyhow!("--mode {mode:?} needs --count"))?;
        let calls = prepare(mode, count, args.first_order, &events, &target)?;
        let total = calls.len();
        let clients = match mode {
            Mode::Storm => total,
            _ => args.concurrency.clamp(1, total.max(1)),
        };
        // Client i sends calls i, i + clients, i + 2 * clients, ...
        let mut shares: Vec<Vec<Call>> = (0..clients).map(|_| Vec::new()).collect();
        for (i, call) in calls.into_iter().enumerate() {
            shares[i % clients].push(call);
        }
        // Every client connects, then all start together (the storm's deliveries are concurrent).
        let start = Arc::new(tokio::sync::Barrier::new(clients + 1));
        let tasks: Vec<_> = shares
            .into_iter()
            .map(|share| tokio::spawn(client(target.authority.clone(), share, start.clone())))
            .collect();
        start.wait().await;
        started = Instant::now();
        for task in tasks {
            for (sample, event_id) in task.await?? {
                if let Some(event_id) = event_id {
                    answered.push((event_id, sample.answered_at, sample.status));
                }
                samples.push(sample);
            }
        }
    }
    let elapsed = started.elapsed();
    let total = samples.len();
    let mut statuses = BTreeMap::<u16, usize>::new();
    for sample in &samples {
        *statuses.entry(sample.status).or_default() += 1;
    }
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    latencies.sort();
    let ok = statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum::<usize>();
    let mut report = serde_json::json!({
        "mode": mode.to_possible_value().map(|v| v.get_name().to_owned()),
        "requests": total,
        "ok": ok,
        "statuses": statuses.iter().map(|(s, n)| (s.to_string(), *n)).collect::<BTreeMap<_, _>>(),
        "seconds": elapsed.as_secs_f64(),
        "rps": total as f64 / elapsed.as_secs_f64(),
        "p50_ms": percentile(&latencies, 0.50),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": percentile(&latencies, 1.0),
        "replayed": samples.iter().filter(|s| s.replayed).count(),
    });
    if let Some(receiver) = receiver {
        let expected = args.notify_expect.unwrap_or_else(|| {
            answered
                .iter()
                .filter(|(_, _, status)| (200..300).contains(status))
                .count()
        });
        let wait = Duration::from_secs_f64(args.notify_wait);
        extra.extend(receiver.report(&answered, expected, started, wait).await);
    }
    if let Some(object) = report.as_object_mut() {
        object.extend(extra);
    }
    println!("{report}");
    Ok(())
}

/// The merchant side of the notification benchmark: an endpoint on `--notify-listen` that
/// verifies each notification as a merchant would and notes when it came, so the run can report
/// notifications per second and the lag from each capture's ack to its notification. Several
/// endpoints may share it, one per path, each verified with its own secret.
mod notify {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};

    use callback_gateway::providers::standard_webhooks::StandardWebhooks;
    use callback_gateway::secret::Secret;

    #[derive(Default)]
    struct Seen {
        /// The first arrival of each event's notification, per path (endpoint).
        first: HashMap<(String, String), Instant>,
        deliveries: usize,
        unverified: usize,
    }

    /// The secrets to verify with: one per path, and one for any other path.
    struct Schemes {
        by_path: HashMap<String, StandardWebhooks>,
        any_path: Option<StandardWebhooks>,
    }

    impl Schemes {
        /// `whsec_..` (any path) or `/PATH=whsec_..` (that path), each given once.
        fn parse(secrets: &[String]) -> anyhow::Result<Self> {
            let scheme = |secret: &str| StandardWebhooks::new(&[Secret::new(secret)], 300);
            let mut schemes = Self {
                by_path: HashMap::new(),
                any_path: None,
            };
            for given in secrets {
                let fresh = match given.split_once('=').filter(|_| given.starts_with('/')) {
                    Some((path, secret)) => schemes
                        .by_path
                        .insert(path.to_owned(), scheme(secret))
                        .is_none(),
                    None => schemes.any_path.replace(scheme(given)).is_none(),
                };
                if !fresh {
                    anyhow::bail!("--notify-secret: a path has two secrets");
                }
            }
            Ok(schemes)
        }

        fn for_path(&self, path: &str) -> Option<&StandardWebhooks> {
            self.by_path.get(path).or(self.any_path.as_ref())
        }
    }

    struct Shared {
        schemes: Schemes,
        seen: Mutex<Seen>,
    }

    pub struct Receiver {
        shared: Arc<Shared>,
        handle: actix_web::dev::ServerHandle,
    }

    impl Receiver {
        /// Listens on `listen` (host:port) with one worker thread of its own.
        pub fn start(listen: &str, secrets: &[String]) -> anyhow::Result<Self> {
            let shared = Arc::new(Shared {
                schemes: Schemes::parse(secrets)?,
                seen: Mutex::new(Seen::default()),
            });
            let data = web::Data::from(shared.clone());
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(data.clone())
                    .default_service(web::to(receive))
            })
            .workers(1)
            .bind(listen)?
            .run();
            let handle = server.handle();
            tokio::spawn(server);
            Ok(Self { shared, handle })
        }

        /// Waits (at most `wait` after the last ack) until `expected` notifications (each
        /// event's once per path) came; then the keys of the report.
        pub async fn report(
            self,
            answered: &[(String, Instant, u16)],
            expected: usize,
            started: Instant,
            wait: Duration,
        ) -> serde_json::Map<String, serde_json::Value> {
            let deadline = Instant::now() + wait;
            while self.seen().first.len() < expected && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let seen = std::mem::take(&mut *self.seen());
            self.handle.stop(false).await;
            let acked: HashMap<&str, Instant> = answered
                .iter()
                .map(|(event_id, acked, _)| (event_id.as_str(), *acked))
                .collect();
            let mut lags: Vec<Duration> = Vec::with_capacity(seen.first.len());
            let mut by_path = BTreeMap::<&str, usize>::new();
            for ((path, event_id), arrived) in &seen.first {
                *by_path.entry(path).or_default() += 1;
                if let Some(acked) = acked.get(event_id.as_str()) {
                    lags.push(arrived.saturating_duration_since(*acked));
                }
            }
            lags.sort();
            let last = seen.first.values().max().copied().unwrap_or(started);
            let span = last.saturating_duration_since(started).as_secs_f64();
            let received = seen.first.len();
            let mut out = serde_json::Map::new();
            out.insert("notify_expected".into(), expected.into());
            out.insert("notify_received".into(), received.into());
            out.insert("notify_received_by_path".into(), serde_json::json!(by_path));
            out.insert(
                "notify_duplicates".into(),
                seen.deliveries
                    .saturating_sub(received + seen.unverified)
                    .into(),
            );
            out.insert("notify_unverified".into(), seen.unverified.into());
            out.insert(
                "notify_eps".into(),
                if span > 0.0 {
                    received as f64 / span
                } else {
                    0.0
                }
                .into(),
            );
            out.insert(
                "notify_lag_p50_ms".into(),
                super::percentile(&lags, 0.50).into(),
            );
            out.insert(
                "notify_lag_p99_ms".into(),
                super::percentile(&lags, 0.99).into(),
            );
            out
        }

        fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
            self.shared.seen.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    async fn receive(
        request: HttpRequest,
        body: web::Bytes,
        shared: web::Data<Shared>,
    ) -> HttpResponse {
        let arrived = Instant::now();
        let path = request.path();
        let verified = shared.schemes.for_path(path).is_some_and(|scheme| {
            scheme
                .check(request.headers(), &body, chrono::Utc::now().timestamp())
                .is_ok()
        });
        let event_id = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["data"]["event_id"].as_str().map(str::to_owned));
        let mut seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.deliveries += 1;
        if !verified {
            seen.unverified += 1;
            return HttpResponse::Unauthorized().finish();
        }
        if let Some(event_id) = event_id {
            seen.first
                .entry((path.to_owned(), event_id))
                .or_insert(arrived);
        }
        HttpResponse::NoContent().finish()
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use callback_gateway::signature::standard_webhooks::Signer;

        const E1: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        const E2: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

        fn verifies(schemes: &Schemes, path: &str, signed_with: &str) -> bool {
            let now = chrono::Utc::now().timestamp();
            let headers =
                Signer::new(&[Secret::new(signed_with)]).sign_headers("ntf_1", b"{}", now);
            schemes
                .for_path(path)
                .is_some_and(|scheme| scheme.check(&headers, b"{}", now).is_ok())
        }

        #[test]
        fn a_path_s_notifications_are_verified_with_its_own_secret_alone() {
            let given = [format!("/e1={E1}"), format!("/e2={E2}")];
            let schemes = Schemes::parse(&given).unwrap();
            assert!(verifies(&schemes, "/e1", E1));
            assert!(verifies(&schemes, "/e2", E2));
            assert!(!verifies(&schemes, "/e1", E2), "/e1 took /e2's signature");
            assert!(
                !verifies(&schemes, "/e3", E1),
                "a path without a secret verified"
            );
        }

        #[test]
        fn a_secret_without_a_path_verifies_every_other_path() {
            let given = [E1.to_owned(), format!("/e2={E2}")];
            let schemes = Schemes::parse(&given).unwrap();
            assert!(verifies(&schemes, "/hooks", E1));
            assert!(verifies(&schemes, "/e2", E2));
            assert!(!verifies(&schemes, "/e2", E1));
        }

        #[test]
        fn a_path_given_two_secrets_is_refused() {
            let given = [format!("/e1={E1}"), format!("/e1={E2}")];
            assert!(Schemes::parse(&given).is_err());
        }
    }
}

/// The realistic event: one template, rendered here for the requests and compiled to SQL for
/// the history loader, so the two cannot drift apart.
mod body {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use sha2::{Digest, Sha256};

    use callback_gateway::idempotency::record::{Operation, RecordStatus};
    use callback_gateway::ledger::{Entries, MerchantAccount, TransferKind};
    use callback_gateway::orders::model::OrderStatus;
    use callback_gateway::payments::ack::{ACK_STATUS, CallbackOutcome};
    use callback_gateway::payments::model::PaymentStatus;
    use callback_gateway::providers::Provider;

    /// Unix time of event number 0's `created`; event n is n seconds later.
    const CREATED_BASE: i64 = 1_790_000_000;
    /// SHA-256 blocks of pseudo-random bytes per event: `sha256("cg-scale/{n}/{k}")`, k = 0..
    const BLOCKS: usize = 10;
    const RANDOM_BYTES: usize = BLOCKS * 32;

    /// The event, pretty-printed as Stripe sends its events; `{{name}}` are the slots below.
    const TEMPLATE: &str = r#"{
  "id": "{{event_id}}",
  "type": "payment.succeeded",
  "timestamp": "{{timestamp}}",
  "api_version": "2026-06-01",
  "data": {
    "object": "payment",
    "payment_id": "{{payment_id}}",
    "order_id": {{order_id}},
    "amount_minor": {{amount}},
    "amount_received": {{amount}},
    "amount_refunded": 0,
    "currency": "{{currency}}",
    "status": "succeeded",
    "created": {{created}},
    "captured_at": {{captured}},
    "livemode": true,
    "capture_method": "automatic",
    "description": "Order {{reference}} at {{descriptor}}",
    "statement_descriptor": "{{descriptor}}",
    "charge_id": "{{charge_id}}",
    "balance_transaction": "{{txn_id}}",
    "customer": {
      "id": "{{customer_id}}",
      "email": "{{email}}",
      "name": "{{name}}",
      "phone": "+1 {{phone}}"
    },
    "payment_method": {
      "id": "{{pm_id}}",
      "type": "card",
      "card": {
        "brand": "{{brand}}",
        "last4": "{{last4}}",
        "exp_month": {{exp_month}},
        "exp_year": {{exp_year}},
        "fingerprint": "{{fingerprint}}",
        "funding": "{{funding}}",
        "country": "US",
        "network_transaction_id": "{{ntid}}",
        "authorization_code": "{{auth_code}}",
        "checks": {
          "address_line1_check": "pass",
          "address_postal_code_check": "{{postal_check}}",
          "cvc_check": "pass"
        },
        "wallet": null
      }
    },
    "outcome": {
      "network_status": "approved_by_network",
      "reason": null,
      "risk_level": "{{risk_level}}",
      "risk_score": {{risk_score}},
      "seller_message": "Payment complete.",
      "type": "authorized"
    },
    "line_items": [{{items}}
    ],
    "metadata": {
      "order_id": "{{order_id}}",
      "cart_id": "{{reference}}",
      "checkout_session": "{{session}}",
      "channel": "{{channel}}",
      "customer_note": "{{note}}"
    },
    "client": {
      "ip": "{{ip}}",
      "user_agent": "{{user_agent}}"
    },
    "shipping": {
      "address": {
        "line1": "{{street_no}} {{street}}",
        "line2": null,
        "city": "{{city}}",
        "postal_code": "{{postal}}",
        "state": "{{state}}",
        "country": "US"
      },
      "carrier": null,
      "name": "{{name}}",
      "phone": null,
      "tracking_number": null
    },
    "application": null,
    "dispute": null,
    "failure_code": null,
    "review": null,
    "transfer_data": null,
    "refunds": {
      "object": "list",
      "data": [],
      "has_more": false,
      "total_count": 0,
      "url": "/v1/charges/{{charge_id}}/refunds"
    },
    "receipt_url": "https://pay.acme.example/receipts/{{receipt}}",
    "request": {
      "id": "{{request_id}}",
      "idempotency_key": "{{idempotency_key}}"
    }
  }
}"#;

    /// One line item; the event has 1 to 3 of them.
    const ITEM: &str = r#"
      {
        "id": "{{item_id}}",
        "sku": "{{sku}}",
        "description": "{{product}}",
        "quantity": {{quantity}},
        "unit_amount": {{unit_amount}},
        "tax_rate": "{{tax_rate}}"
      }"#;

    const FIRST_NAMES: &[&str] = &[
        "Ada",
        "Grace",
        "Alan",
        "Edsger",
        "Barbara",
        "Donald",
        "Frances",
        "Ken",
        "Margaret",
        "Dennis",
        "Radia",
        "Leslie",
        "Katherine",
        "Tim",
        "Hedy",
        "John",
        "Sophie",
        "Niklaus",
        "Adele",
        "Bjarne",
        "Shafi",
        "Guido",
        "Lynn",
        "James",
        "Mary",
        "Robert",
        "Anita",
        "Vint",
        "Evelyn",
        "Larry",
        "Jean",
        "Yukihiro",
    ];
    const LAST_NAMES: &[&str] = &[
        "Lovelace",
        "Hopper",
        "Turing",
        "Dijkstra",
        "Liskov",
        "Knuth",
        "Allen",
        "Thompson",
        "Hamilton",
        "Ritchie",
        "Perlman",
        "Lamport",
        "Johnson",
        "Berners-Lee",
        "Lamarr",
        "Backus",
        "Wilson",
        "Wirth",
        "Goldberg",
        "Stroustrup",
        "Goldwasser",
        "Rossum",
        "Conway",
        "Gosling",
        "Keller",
        "Tarjan",
        "Borg",
        "Cerf",
        "Berezin",
        "Page",
        "Sammet",
        "Matsumoto",
    ];
    const STREETS: &[&str] = &[
        "Market Street",
        "Townsend St",
        "Mission Street",
        "Valencia St",
        "Broadway",
        "Elm Avenue",
        "Oak Street",
        "Maple Drive",
        "Cedar Lane",
        "Pine Street",
        "Main Street",
        "Sunset Blvd",
        "Lakeview Terrace",
        "Harbor Road",
        "Hillside Ave",
        "Park Place",
    ];
    const CITIES: &[&str] = &[
        "San Francisco",
        "Oakland",
        "Portland",
        "Seattle",
        "Austin",
        "Denver",
        "Chicago",
        "Boston",
        "New York",
        "Brooklyn",
        "Atlanta",
        "Miami",
        "Phoenix",
        "Minneapolis",
        "Pittsburgh",
        "Raleigh",
    ];
    const STATES: &[&str] = &[
        "CA", "OR", "WA", "TX", "CO", "IL", "MA", "NY", "GA", "FL", "AZ", "MN", "PA", "NC", "UT",
        "OH",
    ];
    const PRODUCTS: &[&str] = &[
        "Organic cotton T-shirt, size M",
        "Stainless steel water bottle 750 ml",
        "Wireless earbuds with charging case",
        "Ceramic pour-over coffee dripper",
        "Recycled paper notebook, dotted, A5",
        "Merino wool hiking socks (2 pairs)",
        "USB-C to USB-C cable, 2 m, braided",
        "Bamboo cutting board, large",
        "Cast iron skillet 26 cm",
        "Linen pillow case set",
        "Mechanical keyboard switch tester",
        "Reusable beeswax food wraps (3 pack)",
        "Espresso beans, single origin, 1 kg",
        "Yoga mat with alignment lines",
        "LED desk lamp with dimmer",
        "Running cap, reflective",
        "Gift card",
        "Leather card holder",
        "Hardcover: The Art of Computer Programming, Vol. 1",
        "Sourdough starter kit",
        "Waterproof phone pouch",
        "Scented soy candle, cedar",
        "Kids' watercolor paint set",
        "Express shipping",
    ];
    const DESCRIPTORS: &[&str] = &[
        "ACME*STORE",
        "ACME*MARKET",
        "ACME*SUBSCRIPTION",
        "ACME*GIFTS",
        "ACME*OUTLET",
        "ACME*BOOKS",
        "ACME*COFFEE",
        "ACME*KIDS",
    ];
    const BRANDS: &[&str] = &[
        "visa",
        "visa",
        "visa",
        "mastercard",
        "mastercard",
        "amex",
        "discover",
        "jcb",
    ];
    const FUNDING: &[&str] = &["credit", "credit", "debit", "prepaid"];
    const CURRENCIES: &[&str] = &[
        "USD", "USD", "USD", "USD", "USD", "USD", "USD", "EUR", "EUR", "GBP",
    ];
    const CHANNELS: &[&str] = &["web", "web", "ios", "android", "pos", "phone"];
    const RISK_LEVELS: &[&str] = &["normal", "normal", "normal", "normal", "elevated", "normal"];
    const POSTAL_CHECKS: &[&str] = &["pass", "pass", "pass", "unavailable"];
    const TAX_RATES: &[&str] = &["0.00", "7.25", "8.875", "10.25", "20.00", "19.00"];
    const USER_AGENTS: &[&str] = &[
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.6478.71 Mobile Safari/537.36",
        "Mozilla/5.0 (X11; Linux x86_64; rv:127.0) Gecko/20100101 Firefox/127.0",
        "AcmeShop/4.12.0 (iOS 17.5; iPhone15,3)",
    ];
    /// The customer's note is a slice of this, 0 to 127 characters long.
    const NOTE: &str = "Please leave the parcel with the concierge if nobody answers the door. \
        This is a birthday present, so no invoice in the box, thank you! Ring twice, the bell is \
        quiet. Deliver after 5 pm on weekdays; weekends any time. The side entrance on the left \
        is open until 8. Call me on arrival if the gate code does not work: it changed last \
        week. Fragile items inside, handle with care and keep upright.";

    /// A value computed from the event number n and its random bytes.
    #[derive(Debug, Clone)]
    enum Val {
        /// n plus a constant, in decimal.
        N(i64),
        /// n as 8 lower-case hex digits: ids that sort by n, as time-ordered ids
        /// (Standard-Webhooks msg ids are KSUIDs, Stripe's ids start with a time part) do.
        Hex8N,
        /// `len` random bytes (a multiple of 3) in base64 with `+` and `/` as `x` and `Z`.
        Id {
            off: usize,
            len: usize,
        },
        Hex {
            off: usize,
            len: usize,
        },
        /// A big-endian number of `bytes` random bytes, modulo `modulo`, plus `add`, padded
        /// with zeros to `width` digits.
        Num {
            off: usize,
            bytes: usize,
            modulo: u32,
            add: u32,
            width: usize,
        },
        Pick {
            off: usize,
            list: &'static [&'static str],
        },
        /// `CREATED_BASE + n` seconds as `YYYY-MM-DDTHH:MM:SS` (UTC).
        Iso,
        /// A slice of NOTE: start `byte % 64`, length `byte % 128`.
        Note {
            off: usize,
        },
    }

    #[derive(Debug, Clone)]
    enum Piece {
        Lit(String),
        Val(Val),
        /// `body` when the random byte at `off` modulo `modulo` is at least `min`.
        When {
            off: usize,
            modulo: u32,
            min: u32,
            body: Vec<Piece>,
        },
    }

    /// Hands out the random bytes, each to one value.
    struct Bytes(usize);

    impl Bytes {
        fn take(&mut self, len: usize) -> usize {
            let off = self.0;
            self.0 += len;
            off
        }
    }

    /// A rendered event.
    pub struct Rendered {
        pub event_id: String,
        pub body: String,
    }

    /// The realistic event, and the slots the history loader needs on their own.
    pub struct Template {
        body: Vec<Piece>,
        event_id: Vec<Piece>,
        payment_id: Vec<Piece>,
        amount: Vec<Piece>,
        currency: Vec<Piece>,
        reference: Vec<Piece>,
    }

    fn lit(s: &str) -> Piece {
        Piece::Lit(s.to_owned())
    }

    fn val(v: Val) -> Vec<Piece> {
        vec![Piece::Val(v)]
    }

    fn num(bytes: &mut Bytes, width: usize, modulo: u32, add: u32) -> Vec<Piece> {
        let n = if modulo <= 256 {
            1
        } else if modulo <= 65_536 {
            2
        } else {
            3
        };
        val(Val::Num {
            off: bytes.take(n),
            bytes: n,
            modulo,
            add,
            width,
        })
    }

    fn pick(bytes: &mut Bytes, list: &'static [&'static str]) -> Vec<Piece> {
        val(Val::Pick {
            off: bytes.take(1),
            list,
        })
    }

    fn id(bytes: &mut Bytes, prefix: &str, len: usize) -> Vec<Piece> {
        vec![
            lit(prefix),
            Piece::Val(Val::Id {
                off: bytes.take(len),
                len,
            }),
        ]
    }

    fn uuid(bytes: &mut Bytes) -> Vec<Piece> {
        let mut pieces = Vec::new();
        for (i, len) in [4, 2, 2, 2, 6].into_iter().enumerate() {
            if i > 0 {
                pieces.push(lit("-"));
            }
            pieces.push(Piece::Val(Val::Hex {
                off: bytes.take(len),
                len,
            }));
        }
        pieces
    }

    /// `text` with each `{{name}}` replaced by `slot(name)`.
    fn fill(
        text: &str,
        slot: &mut dyn FnMut(&str) -> anyhow::Result<Vec<Piece>>,
    ) -> anyhow::Result<Vec<Piece>> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            pieces.push(lit(&rest[..open]));
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| anyhow::anyhow!("unclosed slot in the event template"))?;
            pieces.extend(slot(&after[..close])?);
            rest = &after[close + 2..];
        }
        pieces.push(lit(rest));
        Ok(pieces)
    }

    impl Template {
        pub fn realistic() -> anyhow::Result<Self> {
            let mut b = Bytes(0);
            let event_id = {
                let mut p = vec![lit("msg_"), Piece::Val(Val::Hex8N)];
                p.extend(id(&mut b, "", 15));
                p
            };
            let payment_id = {
                let mut p = vec![lit("pay_"), Piece::Val(Val::Hex8N)];
                p.extend(id(&mut b, "", 12));
                p
            };
            let amount = num(&mut b, 0, 99_500, 500);
            let currency = pick(&mut b, CURRENCIES);
            let reference = {
                let mut p = vec![lit("cart-"), Piece::Val(Val::N(0))];
                p.push(lit("-"));
                p.extend(num(&mut b, 4, 10_000, 0));
                p
            };
            // Line items: the first always, the others when the count byte says so.
            let count_byte = b.take(1);
            let mut items = Vec::new();
            for i in 0..3u32 {
                let item = fill(ITEM, &mut |name| {
                    Ok(match name {
                        "item_id" => id(&mut b, "li_", 12),
                        "sku" => {
                            let mut p = vec![lit("SKU-")];
                            p.extend(num(&mut b, 6, 1_000_000, 0));
                            p
                        }
                        "product" => pick(&mut b, PRODUCTS),
                        "quantity" => num(&mut b, 0, 4, 1),
                        "unit_amount" => num(&mut b, 0, 20_000, 99),
                        "tax_rate" => pick(&mut b, TAX_RATES),
                        other => anyhow::bail!("unknown item slot {other:?}"),
                    })
                })?;
                let mut item_pieces = Vec::new();
                if i > 0 {
                    item_pieces.push(lit(","));
                }
                item_pieces.extend(item);
                if i == 0 {
                    items.extend(item_pieces);
                } else {
                    items.push(Piece::When {
                        off: count_byte,
                        modulo: 3,
                        min: i,
                        body: item_pieces,
                    });
                }
            }
            let (first, last) = (b.take(1), b.take(1));
            let name_of = |first, last| {
                vec![
                    Piece::Val(Val::Pick {
                        off: first,
                        list: FIRST_NAMES,
                    }),
                    lit(" "),
                    Piece::Val(Val::Pick {
                        off: last,
                        list: LAST_NAMES,
                    }),
                ]
            };
            let full_name = name_of(first, last);
            let email = {
                let mut p = name_of(first, last);
                p[1] = lit(".");
                p.extend(num(&mut b, 0, 1000, 1));
                p.push(lit("@example.com"));
                p
            };
            let descriptor = pick(&mut b, DESCRIPTORS);
            let charge_id = id(&mut b, "ch_", 18);
            let street_no = num(&mut b, 0, 9_999, 1);
            let street = pick(&mut b, STREETS);
            let city = pick(&mut b, CITIES);
            let postal = num(&mut b, 5, 100_000, 0);
            let state = pick(&mut b, STATES);
            let brand = pick(&mut b, BRANDS);
            let mut slots = |name: &str| -> anyhow::Result<Vec<Piece>> {
                Ok(match name {
                    "event_id" => event_id.clone(),
                    "payment_id" => payment_id.clone(),
                    "order_id" => val(Val::N(0)),
                    "amount" => amount.clone(),
                    "currency" => currency.clone(),
                    "reference" => reference.clone(),
                    "timestamp" => {
                        let mut p = vec![Piece::Val(Val::Iso), lit(".")];
                        p.extend(num(&mut b, 6, 1_000_000, 0));
                        p.push(lit("Z"));
                        p
                    }
                    "created" => val(Val::N(CREATED_BASE - 2)),
                    "captured" => val(Val::N(CREATED_BASE)),
                    "descriptor" => descriptor.clone(),
                    "charge_id" => charge_id.clone(),
                    "txn_id" => id(&mut b, "txn_", 18),
                    "customer_id" => id(&mut b, "cus_", 12),
                    "email" => email.clone(),
                    "name" => full_name.clone(),
                    "phone" => {
                        let mut p = num(&mut b, 3, 800, 200);
                        p.push(lit("-555-"));
                        p.extend(num(&mut b, 4, 10_000, 0));
                        p
                    }
                    "street_no" => street_no.clone(),
                    "street" => street.clone(),
                    "city" => city.clone(),
                    "postal" => postal.clone(),
                    "state" => state.clone(),
                    "pm_id" => id(&mut b, "pm_", 18),
                    "brand" => brand.clone(),
                    "last4" => num(&mut b, 4, 10_000, 0),
                    "exp_month" => num(&mut b, 0, 12, 1),
                    "exp_year" => num(&mut b, 0, 8, 2027),
                    "fingerprint" => id(&mut b, "", 12),
                    "funding" => pick(&mut b, FUNDING),
                    "ntid" => {
                        let mut p = num(&mut b, 7, 10_000_000, 0);
                        p.extend(num(&mut b, 8, 10_000_000, 0));
                        p
                    }
                    "auth_code" => num(&mut b, 6, 1_000_000, 0),
                    "postal_check" => pick(&mut b, POSTAL_CHECKS),
                    "risk_level" => pick(&mut b, RISK_LEVELS),
                    "risk_score" => num(&mut b, 0, 100, 0),
                    "items" => items.clone(),
                    "session" => {
                        let mut p = vec![lit("cs_")];
                        p.extend(uuid(&mut b));
                        p
                    }
                    "channel" => pick(&mut b, CHANNELS),
                    "note" => val(Val::Note { off: b.take(2) }),
                    "ip" => {
                        let mut p = num(&mut b, 0, 223, 1);
                        for _ in 0..3 {
                            p.push(lit("."));
                            p.extend(num(&mut b, 0, 256, 0));
                        }
                        p
                    }
                    "user_agent" => pick(&mut b, USER_AGENTS),
                    "receipt" => id(&mut b, "", 24),
                    "request_id" => id(&mut b, "req_", 9),
                    "idempotency_key" => uuid(&mut b),
                    other => anyhow::bail!("unknown slot {other:?} in the event template"),
                })
            };
            let body = fill(TEMPLATE, &mut slots)?;
            if b.0 > RANDOM_BYTES {
                anyhow::bail!(
                    "the template uses {} random bytes, above {RANDOM_BYTES}",
                    b.0
                );
            }
            Ok(Self {
                body,
                event_id: event_id.clone(),
                payment_id: payment_id.clone(),
                amount: amount.clone(),
                currency: currency.clone(),
                reference: reference.clone(),
            })
        }

        pub fn render(&self, n: i64) -> Rendered {
            let bytes = random_bytes(n);
            let mut body = String::with_capacity(4096);
            render(&self.body, n, &bytes, &mut body);
            let mut event_id = String::with_capacity(32);
            render(&self.event_id, n, &bytes, &mut event_id);
            Rendered { event_id, body }
        }

        #[cfg(test)]
        pub fn slot(&self, name: &str, n: i64) -> String {
            let pieces = match name {
                "payment_id" => &self.payment_id,
                "amount" => &self.amount,
                "currency" => &self.currency,
                _ => &self.reference,
            };
            let mut out = String::new();
            render(pieces, n, &random_bytes(n), &mut out);
            out
        }
    }

    fn random_bytes(n: i64) -> [u8; RANDOM_BYTES] {
        let mut bytes = [0u8; RANDOM_BYTES];
        for (k, block) in bytes.chunks_mut(32).enumerate() {
            block.copy_from_slice(&Sha256::digest(format!("cg-scale/{n}/{k}").as_bytes()));
        }
        bytes
    }

    fn number(bytes: &[u8], off: usize, len: usize) -> u32 {
        bytes[off..off + len]
            .iter()
            .fold(0u32, |acc, b| (acc << 8) | u32::from(*b))
    }

    fn render(pieces: &[Piece], n: i64, bytes: &[u8], out: &mut String) {
        use std::fmt::Write;
        for piece in pieces {
            // Writing to a String cannot fail.
            let _ = match piece {
                Piece::Lit(s) => {
                    out.push_str(s);
                    Ok(())
                }
                Piece::Val(Val::N(add)) => write!(out, "{}", n + add),
                Piece::Val(Val::Hex8N) => write!(out, "{n:08x}"),
                Piece::Val(Val::Id { off, len }) => {
                    let encoded = STANDARD.encode(&bytes[*off..off + len]);
                    out.extend(encoded.chars().map(|c| match c {
                        '+' => 'x',
                        '/' => 'Z',
                        c => c,
                    }));
                    Ok(())
                }
                Piece::Val(Val::Hex { off, len }) => {
                    out.push_str(&hex::encode(&bytes[*off..off + len]));
                    Ok(())
                }
                Piece::Val(Val::Num {
                    off,
                    bytes: len,
                    modulo,
                    add,
                    width,
                }) => write!(
                    out,
                    "{:0width$}",
                    number(bytes, *off, *len) % modulo + add,
                    width = width
                ),
                Piece::Val(Val::Pick { off, list }) => {
                    out.push_str(list[usize::from(bytes[*off]) % list.len()]);
                    Ok(())
                }
                Piece::Val(Val::Iso) => {
                    let at =
                        chrono::DateTime::from_timestamp(CREATED_BASE + n, 0).unwrap_or_default();
                    write!(out, "{}", at.format("%Y-%m-%dT%H:%M:%S"))
                }
                Piece::Val(Val::Note { off }) => {
                    let start = usize::from(bytes[*off]) % 64;
                    let len = usize::from(bytes[off + 1] % 128);
                    out.push_str(&NOTE[start..start + len]);
                    Ok(())
                }
                Piece::When {
                    off,
                    modulo,
                    min,
                    body,
                } => {
                    if u32::from(bytes[*off]) % modulo >= *min {
                        render(body, n, bytes, out);
                    }
                    Ok(())
                }
            };
        }
    }

    /// How many of the random bytes `pieces` read (the end of the last one).
    fn bytes_used(pieces: &[Piece]) -> usize {
        pieces
            .iter()
            .map(|piece| match piece {
                Piece::Lit(_) | Piece::Val(Val::N(_) | Val::Hex8N | Val::Iso) => 0,
                Piece::Val(Val::Id { off, len } | Val::Hex { off, len }) => off + len,
                Piece::Val(Val::Num { off, bytes, .. }) => off + bytes,
                Piece::Val(Val::Pick { off, .. }) => off + 1,
                Piece::Val(Val::Note { off }) => off + 2,
                Piece::When { off, body, .. } => (off + 1).max(bytes_used(body)),
            })
            .max()
            .unwrap_or(0)
    }

    /// A SQL string literal.
    fn quote(s: &str) -> String {
        format!("'{}'", s.replace('\'', "''"))
    }

    /// The SQL byte at `off` of `hb` (the event's random bytes).
    fn byte(off: usize) -> String {
        format!("get_byte(hb, {off})")
    }

    /// The pieces as one SQL text expression over `n` (bigint) and `hb` (bytea).
    fn sql(pieces: &[Piece]) -> String {
        let terms: Vec<String> = pieces
            .iter()
            .filter(|p| !matches!(p, Piece::Lit(s) if s.is_empty()))
            .map(|piece| match piece {
                Piece::Lit(s) => quote(s),
                Piece::Val(Val::N(add)) => format!("(n + {add})::text"),
                Piece::Val(Val::Hex8N) => "lpad(to_hex(n), 8, '0')".to_owned(),
                Piece::Val(Val::Id { off, len }) => format!(
                    "translate(encode(substring(hb from {} for {len}), 'base64'), '+/', 'xZ')",
                    off + 1
                ),
                Piece::Val(Val::Hex { off, len }) => {
                    format!("encode(substring(hb from {} for {len}), 'hex')", off + 1)
                }
                Piece::Val(Val::Num {
                    off,
                    bytes,
                    modulo,
                    add,
                    width,
                }) => {
                    let value = (0..*bytes)
                        .map(|i| format!("{} * {}", byte(off + i), 1u32 << (8 * (bytes - 1 - i))))
                        .collect::<Vec<_>>()
                        .join(" + ");
                    let number = format!("(({value}) % {modulo} + {add})::text");
                    if *width > 0 {
                        format!("lpad({number}, {width}, '0')")
                    } else {
                        number
                    }
                }
                Piece::Val(Val::Pick { off, list }) => format!(
                    "(ARRAY[{}])[1 + {} % {}]",
                    list.iter().map(|s| quote(s)).collect::<Vec<_>>().join(", "),
                    byte(*off),
                    list.len()
                ),
                Piece::Val(Val::Iso) => format!(
                    "to_char(to_timestamp({CREATED_BASE} + n) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS')"
                ),
                Piece::Val(Val::Note { off }) => format!(
                    "substr({}, 1 + {} % 64, {} % 128)",
                    quote(NOTE),
                    byte(*off),
                    byte(off + 1)
                ),
                Piece::When {
                    off,
                    modulo,
                    min,
                    body,
                } => format!(
                    "CASE WHEN {} % {modulo} >= {min} THEN {} ELSE '' END",
                    byte(*off),
                    sql(body)
                ),
            })
            .collect();
        // One concatenation of all the parts (a chain of || would copy the growing text at
        // every step).
        match terms.as_slice() {
            [one] => one.clone(),
            _ => format!(
                "array_to_string(ARRAY[\n{}]::text[], '')",
                terms.join(",\n")
            ),
        }
    }

    /// psql variables with the gateway's own values for one provider's captured events, and
    /// the pg_temp functions that build event n's values exactly as `render` does.
    pub fn history_sql(provider: &Provider) -> anyhow::Result<String> {
        let template = Template::realistic()?;
        let name = provider.name();
        let sample = template.render(1);
        // The gateway's own builders, so the rows hold what it would have written.
        let key_prefix = provider
            .idempotent_request("", sample.body.as_bytes(), chrono::Utc::now())
            .scope
            .key;
        let event_type = provider
            .read_event(sample.body.as_bytes())
            .event_type
            .ok_or_else(|| anyhow::anyhow!("the template has no type"))?;
        let entries = Entries::of(TransferKind::Payment, name, MerchantAccount::Payable, 1);
        let ack = CallbackOutcome::applied(None).ack("");
        let mut out = String::new();
        let vars = [
            ("merchant_id", provider.merchant_id().to_string()),
            ("provider", name.to_owned()),
            ("op", Operation::PaymentCallback.as_str().to_owned()),
            ("idem_key_prefix", key_prefix),
            ("ttl_secs", provider.settings().ttl.as_secs().to_string()),
            ("event_type", event_type),
            (
                "outcome",
                CallbackOutcome::applied(None).outcome.as_str().to_owned(),
            ),
            ("ack_status", ACK_STATUS.to_string()),
            ("record_status", RecordStatus::Succeeded.as_str().to_owned()),
            ("ack", ack.to_string()),
            ("kind", TransferKind::Payment.as_str().to_owned()),
            ("account_a", entries.account_a),
            ("account_b", entries.account_b),
            // Entries::of with amount 1: the sign of each entry.
            ("sign_a", entries.amount_a.to_string()),
            ("sign_b", entries.amount_b.to_string()),
            (
                "payment_status",
                PaymentStatus::Succeeded.as_str().to_owned(),
            ),
            ("order_paid", OrderStatus::Paid.as_str().to_owned()),
            (
                "order_pending",
                OrderStatus::PendingPayment.as_str().to_owned(),
            ),
        ];
        out.push_str(
            "-- Generated by `loadgen --emit-sql`: the gateway's values for these rows, and\n",
        );
        out.push_str("-- event n's values as the load generator renders them.\n");
        for (var, value) in vars {
            if value.contains(['\'', '\n', '\\']) {
                anyhow::bail!("{var}: value {value:?} cannot be a psql variable");
            }
            out.push_str(&format!("\\set {var} '{value}'\n"));
        }
        let blocks = |count: usize| {
            (0..count)
                .map(|k| format!("sha256(convert_to('cg-scale/' || n || '/{k}', 'UTF8'))"))
                .collect::<Vec<_>>()
                .join(" || ")
        };
        // The body needs all the random bytes; the other values only the first blocks, which
        // cost a fifth as much to compute.
        let head = [
            &template.event_id,
            &template.payment_id,
            &template.amount,
            &template.currency,
            &template.reference,
        ]
        .into_iter()
        .map(|pieces| bytes_used(pieces))
        .max()
        .unwrap_or(0);
        let head_blocks = head.div_ceil(32);
        out.push_str(&format!(
            "CREATE FUNCTION pg_temp.scale_hb(n bigint) RETURNS bytea LANGUAGE sql STABLE AS $f$ SELECT {} $f$;\n",
            blocks(BLOCKS)
        ));
        out.push_str(&format!(
            "CREATE FUNCTION pg_temp.scale_hb_head(n bigint) RETURNS bytea LANGUAGE sql STABLE AS $f$ SELECT {} $f$;\n",
            blocks(head_blocks)
        ));
        let functions = [
            ("scale_event_id", "text", sql(&template.event_id)),
            ("scale_payment_id", "text", sql(&template.payment_id)),
            (
                "scale_amount",
                "bigint",
                format!("{}::bigint", sql(&template.amount)),
            ),
            ("scale_currency", "text", sql(&template.currency)),
            ("scale_reference", "text", sql(&template.reference)),
            (
                "scale_body",
                "bytea",
                format!("convert_to({}, 'UTF8')", sql(&template.body)),
            ),
        ];
        for (function, returns, expression) in functions {
            // STABLE (to_char is), single expression: the planner inlines these.
            out.push_str(&format!(
                "CREATE FUNCTION pg_temp.{function}(n bigint, hb bytea) RETURNS {returns} LANGUAGE sql STABLE AS $f$ SELECT {expression} $f$;\n"
            ));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use callback_gateway::payments::event::{Parsed, PaymentEvent};
    use callback_gateway::payments::state::expected_capture;
    use callback_gateway::providers::canonical;

    fn event_type(body: &[u8]) -> Option<String> {
        canonical::read(body).event_type
    }

    fn template() -> body::Template {
        body::Template::realistic().unwrap()
    }

    #[test]
    fn a_realistic_event_is_a_capture_of_its_order_between_2_and_4_kib() {
        let template = template();
        for n in [1, 2, 3, 77, 1_000, 999_999, 10_000_000, 12_345_678] {
            let rendered = template.render(n);
            let len = rendered.body.len();
            assert!((2048..=4096).contains(&len), "event {n}: {len} bytes");
            let json: serde_json::Value = serde_json::from_str(&rendered.body).unwrap();
            assert_eq!(json["id"], rendered.event_id.as_str());
            assert_eq!(
                event_type(rendered.body.as_bytes()).as_deref(),
                Some("payment.succeeded")
            );
            let Parsed::Event(event) = canonical::read(rendered.body.as_bytes()).parsed else {
                panic!("event {n} does not parse: {}", rendered.body);
            };
            let PaymentEvent::Succeeded {
                payment_id,
                order_id,
                amount,
                currency,
            } = &event
            else {
                panic!("event {n} is not a capture: {event:?}");
            };
            assert_eq!(*order_id, Some(n));
            assert_eq!(payment_id, &template.slot("payment_id", n));
            assert_eq!(amount.get().to_string(), template.slot("amount", n));
            assert_eq!(currency.code(), template.slot("currency", n));
            // The gateway's one-statement capture takes it, as it takes the bench's events.
            assert!(expected_capture(&event).is_some(), "event {n}");
        }
    }

    #[test]
    fn realistic_events_are_deterministic_and_differ_per_number() {
        let template = template();
        assert_eq!(template.render(42).body, template.render(42).body);
        assert_ne!(template.render(42).body, template.render(43).body);
        // Ids sort by event number, as time-ordered provider ids do.
        assert!(template.render(9).event_id < template.render(10).event_id);
        assert!(template.render(255).event_id < template.render(256).event_id);
    }

    #[test]
    fn realistic_events_vary_in_size() {
        let template = template();
        let sizes: Vec<usize> = (1..200).map(|n| template.render(n).body.len()).collect();
        let (min, max) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
        assert!(max - min > 500, "sizes {min}..{max}");
    }

    #[test]
    fn the_history_sql_names_every_function_the_loader_calls() {
        let settings = Settings::from_toml(
            "[[providers]]\nname = \"acme\"\nscheme = \"standard-webhooks\"\nmerchant_id = 42\n\
             secrets = [\"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD\"]\n",
            &ProcessEnv,
        )
        .unwrap();
        let providers = providers::configure_all(&settings.providers);
        let sql = body::history_sql(&providers.get("acme").unwrap()).unwrap();
        for needle in [
            "\\set idem_key_prefix 'acme:'",
            "\\set account_a 'psp_clearing:acme'",
            "\\set account_b 'merchant_payable'",
            "\\set op 'payment.callback'",
            "\\set ack '{\"event_id\":\"\",\"outcome\":\"applied\",\"received\":true}'",
            "pg_temp.scale_hb(",
            "pg_temp.scale_body(",
            "pg_temp.scale_event_id(",
            "pg_temp.scale_payment_id(",
            "pg_temp.scale_amount(",
            "pg_temp.scale_currency(",
            "pg_temp.scale_reference(",
        ] {
            assert!(sql.contains(needle), "{needle} missing from:\n{sql}");
        }
    }

    #[test]
    fn a_history_picks_only_its_ranges_and_all_of_them() {
        let history = History::parse("5-7, 100-100,9-8").unwrap();
        assert_eq!(history.ranges, vec![(5, 7), (100, 100)]);
        let mut rng = SplitMix64(1);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            seen.insert(history.pick(&mut rng));
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![5, 6, 7, 100]);
        assert_eq!(History::parse("3").unwrap().ranges, vec![(1, 3)]);
        assert!(History::parse("0-5").is_err());
        assert!(History::parse("9-8").is_err());
    }
}
