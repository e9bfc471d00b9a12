//! Load generator for the benchmarks: signed callbacks, prepared before the clock starts (so
//! signing does not compete with the gateway for CPU), sent with fixed concurrency. Prints one
//! JSON object with throughput and latency percentiles.
//!
//!   loadgen --config gateway.toml --provider acme --url http://127.0.0.1:8080 \
//!           --mode first --first-order 1 --count 20000 --concurrency 64
//!
//! Modes: `first` (one unique payment.succeeded per order id, amount = 1000 + id % 1000, as
//! scripts/bench creates them), `replay` (the same events again: every answer is a replay),
//! `storm` (`count` concurrent deliveries of one event).
//!
//! It is as light as pgbench is in the anchor runs, since it shares the cores with the gateway:
//! one thread, one keep-alive HTTP/1.1 connection per client (hyper's bare connection API, no
//! pool), each request built completely before the clock starts and every connection opened
//! before it too, as pgbench excludes its connection time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use callback_gateway::config::{ProcessEnv, Settings};
use callback_gateway::providers::Providers;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    First,
    Replay,
    Storm,
}

#[derive(Debug, Parser)]
struct Args {
    #[arg(long)]
    config: std::path::PathBuf,
    #[arg(long)]
    provider: String,
    /// The gateway, http://host:port
    #[arg(long)]
    url: String,
    #[arg(long, value_enum)]
    mode: Mode,
    /// First order id; events go to orders first_order .. first_order + count.
    #[arg(long, default_value_t = 1)]
    first_order: i64,
    #[arg(long)]
    count: usize,
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Distinguishes the event ids of separate runs over the same orders.
    #[arg(long, default_value = "bench")]
    tag: String,
}

type Call = Request<Full<Bytes>>;

fn amount_of(order_id: i64) -> i64 {
    1000 + order_id % 1000
}

/// Every request of the run, signed and built.
fn prepare(args: &Args, settings: &Settings, authority: &str) -> anyhow::Result<Vec<Call>> {
    let providers = Providers::from_settings(&settings.providers);
    let provider = providers
        .get(&args.provider)
        .ok_or_else(|| anyhow::anyhow!("provider {} is not configured", args.provider))?;
    let path = format!("/v1/callbacks/{}", args.provider);
    let now = chrono::Utc::now().timestamp();
    let event = |order_id: i64| -> anyhow::Result<Call> {
        let id = format!("{}_{order_id}", args.tag);
        let body = format!(
            r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"pay_{id}","order_id":{order_id},"amount_minor":{},"currency":"USD"}}}}"#,
            amount_of(order_id)
        );
        let mut request = Request::post(&path)
            .header("host", authority)
            .header("content-type", "application/json");
        for (name, value) in provider.scheme().sign(&id, body.as_bytes(), now) {
            request = request.header(name, value);
        }
        Ok(request.body(Full::new(Bytes::from(body)))?)
    };
    match args.mode {
        Mode::First | Mode::Replay => (0..args.count as i64)
            .map(|i| event(args.first_order + i))
            .collect(),
        Mode::Storm => {
            let one = event(args.first_order)?;
            Ok((0..args.count)
                .map(|_| {
                    let mut copy = Request::new(one.body().clone());
                    *copy.method_mut() = one.method().clone();
                    *copy.uri_mut() = one.uri().clone();
                    *copy.headers_mut() = one.headers().clone();
                    copy
                })
                .collect())
        }
    }
}

/// One client: its own connection, its share of the requests in order.
async fn client(
    authority: Arc<str>,
    calls: Vec<Call>,
    start: Arc<tokio::sync::Barrier>,
) -> anyhow::Result<Vec<(u16, Duration)>> {
    let mut sender = connect(&authority).await?;
    start.wait().await;
    let mut results = Vec::with_capacity(calls.len());
    for call in calls {
        let sent = Instant::now();
        let status = match send(&mut sender, call).await {
            Ok(status) => status,
            Err(_) => {
                // A broken connection counts as a failed request; the next one reconnects.
                sender = connect(&authority).await?;
                0
            }
        };
        results.push((status, sent.elapsed()));
    }
    Ok(results)
}

async fn connect(authority: &str) -> anyhow::Result<http1::SendRequest<Full<Bytes>>> {
    let stream = TcpStream::connect(authority).await?;
    stream.set_nodelay(true)?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn send(sender: &mut http1::SendRequest<Full<Bytes>>, call: Call) -> anyhow::Result<u16> {
    sender.ready().await?;
    let response = sender.send_request(call).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(Args::parse()))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let settings = Settings::load(Some(&args.config), &ProcessEnv)?;
    let authority: Arc<str> = args
        .url
        .trim_end_matches('/')
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("--url must be http://host:port"))?
        .into();
    let calls = prepare(&args, &settings, &authority)?;
    let total = calls.len();
    let clients = match args.mode {
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
        .map(|share| tokio::spawn(client(authority.clone(), share, start.clone())))
        .collect();
    start.wait().await;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(total);
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for task in tasks {
        for (status, latency) in task.await?? {
            *statuses.entry(status).or_default() += 1;
            latencies.push(latency);
        }
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let ok = statuses
        .iter()
        .filter(|(s, _)| (200..300).contains(*s))
        .map(|(_, n)| n)
        .sum::<usize>();
    let report = serde_json::json!({
        "mode": format!("{:?}", args.mode).to_lowercase(),
        "requests": total,
        "ok": ok,
        "statuses": statuses.iter().map(|(s, n)| (s.to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
        "seconds": elapsed.as_secs_f64(),
        "rps": total as f64 / elapsed.as_secs_f64(),
        "p50_ms": percentile(&latencies, 0.50),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": percentile(&latencies, 1.0),
    });
    println!("{report}");
    Ok(())
}
