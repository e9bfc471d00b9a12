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

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use futures_util::StreamExt;

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

struct Prepared {
    headers: Vec<(String, String)>,
    body: Arc<str>,
}

fn amount_of(order_id: i64) -> i64 {
    1000 + order_id % 1000
}

fn prepare(args: &Args, settings: &Settings) -> anyhow::Result<Vec<Prepared>> {
    let providers = Providers::from_settings(&settings.providers);
    let provider = providers
        .get(&args.provider)
        .ok_or_else(|| anyhow::anyhow!("provider {} is not configured", args.provider))?;
    let now = chrono::Utc::now().timestamp();
    let event = |order_id: i64| {
        let id = format!("{}_{order_id}", args.tag);
        let body = format!(
            r#"{{"id":"{id}","type":"payment.succeeded","data":{{"payment_id":"pay_{id}","order_id":{order_id},"amount_minor":{},"currency":"USD"}}}}"#,
            amount_of(order_id)
        );
        let headers = provider.scheme().sign(&id, body.as_bytes(), now);
        Prepared {
            headers,
            body: body.into(),
        }
    };
    Ok(match args.mode {
        Mode::First | Mode::Replay => (0..args.count as i64)
            .map(|i| event(args.first_order + i))
            .collect(),
        Mode::Storm => {
            let one = event(args.first_order);
            (0..args.count)
                .map(|_| Prepared {
                    headers: one.headers.clone(),
                    body: one.body.clone(),
                })
                .collect()
        }
    })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let settings = Settings::load(Some(&args.config), &ProcessEnv)?;
    let requests = prepare(&args, &settings)?;
    let url = format!(
        "{}/v1/callbacks/{}",
        args.url.trim_end_matches('/'),
        args.provider
    );
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(60))
        .build()?;
    let concurrency = match args.mode {
        Mode::Storm => requests.len(),
        _ => args.concurrency,
    };

    let started = Instant::now();
    let mut results = futures_util::stream::iter(requests.iter())
        .map(|request| {
            let client = &client;
            let url = &url;
            async move {
                let sent = Instant::now();
                let mut builder = client
                    .post(url)
                    .header("Content-Type", "application/json")
                    .body(request.body.to_string());
                for (name, value) in &request.headers {
                    builder = builder.header(name, value);
                }
                let status = match builder.send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        let _ = response.bytes().await;
                        status
                    }
                    Err(_) => 0,
                };
                (status, sent.elapsed())
            }
        })
        .buffer_unordered(concurrency);
    let mut latencies = Vec::with_capacity(requests.len());
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    while let Some((status, latency)) = results.next().await {
        *statuses.entry(status).or_default() += 1;
        latencies.push(latency);
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
        "requests": requests.len(),
        "ok": ok,
        "statuses": statuses.iter().map(|(s, n)| (s.to_string(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
        "seconds": elapsed.as_secs_f64(),
        "rps": requests.len() as f64 / elapsed.as_secs_f64(),
        "p50_ms": percentile(&latencies, 0.50),
        "p99_ms": percentile(&latencies, 0.99),
        "max_ms": percentile(&latencies, 1.0),
    });
    println!("{report}");
    Ok(())
}
