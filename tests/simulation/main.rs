//! The provider simulator (docs/simulation.md): it owns each provider's truth, drives the real
//! gateway binary on a real PostgreSQL through histories of payments, refunds and chargebacks
//! with faults in between, and checks at quiescence that the books equal what the provider
//! holds. `scripts/simulate` runs it; run by `cargo test` without arguments it replays every
//! case kept in `tests/simulation/cases/`.
//!
//! ```text
//! scripts/simulate [--provider NAME|all] [--seed N] [--histories N] [--faults LIST]
//!                  [--case FILE] [--ci] [--gateway PATH]
//! ```

// A failed unwrap in the simulator is a failure of the simulator, reported with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

mod case;
mod models;
mod oracle;
mod runner;
mod truth;
mod world;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use futures_util::StreamExt;

use case::{Case, FaultKind, Palette};
use models::Model;
use runner::{Report, Runner};
use world::{Binary, World};

#[derive(Debug, Parser)]
#[command(name = "simulate", about = "Books that equal each provider's truth")]
struct Args {
    /// A provider's name (stripe, adyen, paypal, square, razorpay, checkout, paddle, mollie,
    /// gocardless, mercadopago, braintree, acme, plain) or `all` (the default).
    #[arg(long)]
    provider: Option<String>,
    /// The run's seed (each history's is derived from it); a fresh one when left out.
    #[arg(long)]
    seed: Option<u64>,
    /// Histories per provider (50 when left out).
    #[arg(long)]
    histories: Option<u64>,
    /// The faults to inject: `all` (the default), `none`, or a list of duplicates, order,
    /// concurrency, retries, expiry, replays, export, archive, kill, cut.
    #[arg(long)]
    faults: Option<String>,
    /// Replays one kept case.
    #[arg(long)]
    case: Option<PathBuf>,
    /// Replays every case in this folder (the default when nothing else is asked).
    #[arg(long)]
    cases: Option<PathBuf>,
    /// CI's budget: the kept cases, then 50 histories per provider with fixed seeds, then one
    /// fresh seed's 10 histories per provider.
    #[arg(long)]
    ci: bool,
    /// The gateway binary to drive (an older build, to find what it gets wrong); it migrates
    /// an empty database itself.
    #[arg(long)]
    gateway: Option<PathBuf>,
    /// Histories run at once in one world.
    #[arg(long, default_value_t = 6)]
    concurrency: usize,
    /// Where a violation's shrunk case is written.
    #[arg(long)]
    keep: Option<PathBuf>,
    /// Report violations without shrinking them.
    #[arg(long)]
    no_shrink: bool,
    /// Larger histories (more payments and steps each).
    #[arg(long)]
    size: Option<usize>,
    /// Shrinks this case file (a violation kept with `--no-shrink`) and writes the result
    /// beside the others.
    #[arg(long)]
    shrink: Option<PathBuf>,
    /// The violation kind shrinking keeps (`reinstated+`: more reinstated than the provider
    /// gave back); by default the first one found.
    #[arg(long)]
    shrink_for: Option<String>,
    /// Prints each generated history (JSON) before it runs.
    #[arg(long)]
    print_cases: bool,
    /// A note for the case files written (the commit the gateway was built from).
    #[arg(long)]
    found_on: Option<String>,
}

fn main() -> ExitCode {
    // `cargo test` passes libtest's flags (and a name filter) to every test binary: a
    // command line that is not the simulator's is one of those, and the kept cases run.
    let args = Args::try_parse().unwrap_or_else(|error| {
        if matches!(
            error.kind(),
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
        ) {
            error.exit();
        }
        Args::parse_from(["simulate"])
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("simulate: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Per provider: what ran and what it found.
#[derive(Debug, Default, Clone, serde::Serialize)]
struct Tally {
    histories: u64,
    deliveries: u64,
    faults: u64,
    violations: u64,
    wall_s: f64,
}

async fn run(args: Args) -> anyhow::Result<bool> {
    // Histories are generated when the command line asks for them; otherwise the kept cases
    // run (a case file, a folder, or the kept ones).
    let generate = args.ci
        || args.provider.is_some()
        || args.seed.is_some()
        || args.histories.is_some()
        || args.faults.is_some()
        || args.size.is_some();
    let provider = args.provider.clone().unwrap_or_else(|| "all".to_owned());
    let binary = match &args.gateway {
        Some(path) => Binary {
            path: path.clone(),
            foreign: true,
        },
        None => Binary::this_build(),
    };
    let faults =
        FaultKind::parse(args.faults.as_deref().unwrap_or("all")).map_err(anyhow::Error::msg)?;
    let all = models::all();
    let chosen: Vec<&dyn Model> = all
        .iter()
        .map(Box::as_ref)
        .filter(|m| provider == "all" || m.provider() == provider)
        .collect();
    if chosen.is_empty() {
        anyhow::bail!("no provider {provider:?}");
    }
    let keep = args
        .keep
        .clone()
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/simulation/cases"));
    let mut tallies: Vec<(String, Tally)> = Vec::new();
    let mut clean = true;
    let mut seeds: Vec<u64> = Vec::new();

    if let Some(file) = &args.shrink {
        let case: Case = serde_json::from_str(&std::fs::read_to_string(file)?)?;
        let Some(model) = all.iter().find(|m| m.provider() == case.provider) else {
            anyhow::bail!("{}: no provider {:?}", file.display(), case.provider);
        };
        let seed = case.seed;
        let mut shrunk = shrink(model.as_ref(), case, &binary, args.shrink_for.as_deref()).await;
        shrunk.found_on = args.found_on.clone();
        let out = keep.join(format!("{}-{seed}.json", shrunk.provider));
        std::fs::create_dir_all(&keep)?;
        std::fs::write(&out, serde_json::to_string_pretty(&shrunk)? + "\n")?;
        println!(
            "shrunk to {} steps: {}\n  {}",
            shrunk.steps.len(),
            out.display(),
            shrunk.violation.as_deref().unwrap_or_default()
        );
        return Ok(true);
    }

    // Kept cases: one file, a folder, or by default (and in CI) every kept one.
    if let Some(file) = &args.case {
        let case: Case = serde_json::from_str(&std::fs::read_to_string(file)?)?;
        clean &= replay_cases(vec![(file.clone(), case)], &all, &binary, &mut tallies).await?;
    } else if !generate || args.cases.is_some() || args.ci {
        let dir = args.cases.clone().unwrap_or_else(|| keep.clone());
        let mut cases = Vec::new();
        if dir.exists() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            files.sort();
            for file in files {
                let case: Case = serde_json::from_str(&std::fs::read_to_string(&file)?)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                if provider == "all" || case.provider == provider {
                    cases.push((file, case));
                }
            }
        }
        clean &= replay_cases(cases, &all, &binary, &mut tallies).await?;
    }

    // Generated histories.
    if generate && args.case.is_none() && args.cases.is_none() {
        if args.ci {
            seeds.push(0x005e_edc1);
            seeds.push(rand::random::<u64>() >> 16);
        } else {
            seeds.push(args.seed.unwrap_or_else(|| rand::random::<u64>() >> 16));
        }
        for (i, seed) in seeds.iter().enumerate() {
            let histories = match (args.ci, i) {
                (true, 0) => 50,
                (true, _) => 10,
                _ => args.histories.unwrap_or(50),
            };
            println!("seed {seed}: {histories} histories per provider");
            for model in &chosen {
                let (tally, found) =
                    run_provider(*model, *seed, histories, &faults, &binary, &args).await?;
                println!(
                    "provider={} histories={} deliveries={} faults={} violations={} wall_s={:.1}",
                    model.provider(),
                    tally.histories,
                    tally.deliveries,
                    tally.faults,
                    tally.violations,
                    tally.wall_s
                );
                for mut case in found {
                    clean = false;
                    if !args.no_shrink {
                        case = shrink(*model, case, &binary, args.shrink_for.as_deref()).await;
                    }
                    case.found_on = args.found_on.clone();
                    let file = keep.join(format!("{}-{}.json", case.provider, case.seed));
                    std::fs::create_dir_all(&keep)?;
                    std::fs::write(&file, serde_json::to_string_pretty(&case)? + "\n")?;
                    println!(
                        "VIOLATION provider={} seed={} case={}\n  {}",
                        case.provider,
                        case.seed,
                        file.display(),
                        case.violation.as_deref().unwrap_or_default()
                    );
                }
                tallies.push((model.provider().to_owned(), tally));
            }
        }
    }

    let mut by_provider = serde_json::Map::new();
    let (mut histories, mut violations) = (0, 0);
    for (provider, tally) in &tallies {
        histories += tally.histories;
        violations += tally.violations;
        let entry = by_provider
            .entry(provider.clone())
            .or_insert_with(|| serde_json::to_value(Tally::default()).unwrap());
        for key in ["histories", "deliveries", "faults", "violations"] {
            let sum = entry[key].as_u64().unwrap_or(0)
                + serde_json::to_value(tally).unwrap()[key]
                    .as_u64()
                    .unwrap_or(0);
            entry[key] = sum.into();
        }
        let wall = entry["wall_s"].as_f64().unwrap_or(0.0) + tally.wall_s;
        entry["wall_s"] = ((wall * 10.0).round() / 10.0).into();
    }
    println!(
        "SIMULATE {}",
        serde_json::json!({"seeds": seeds, "histories": histories, "violations": violations,
                           "providers": by_provider})
    );
    // libtest's closing line, so `scripts/test`'s summary counts the kept cases too.
    println!(
        "test result: {}. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out",
        if clean { "ok" } else { "FAILED" },
        histories - violations,
        violations
    );
    Ok(clean)
}

/// The palette of `model` with `faults`.
fn palette<'a>(model: &'a dyn Model, faults: &'a [FaultKind], size: usize) -> Palette<'a> {
    Palette {
        model,
        faults,
        size,
    }
}

/// Runs `histories` histories of `model` from `seed`, `concurrency` at a time in one world;
/// the violating ones come back as cases.
async fn run_provider(
    model: &dyn Model,
    seed: u64,
    histories: u64,
    faults: &[FaultKind],
    binary: &Binary,
    args: &Args,
) -> anyhow::Result<(Tally, Vec<Case>)> {
    let started = Instant::now();
    let world = Arc::new(World::start(model, binary).await?);
    let palette = palette(model, faults, args.size.unwrap_or(0));
    let cases: Vec<Case> = (0..histories)
        .map(|i| {
            let history_seed = history_seed(seed, model.provider(), i);
            case::generate(model.provider(), history_seed, &palette)
        })
        .collect();
    if args.print_cases {
        for case in &cases {
            println!("{}", serde_json::to_string(case)?);
        }
    }
    let reports: Vec<(Case, Report)> = futures_util::stream::iter(cases.into_iter().enumerate())
        .map(|(i, case)| {
            let world = &world;
            async move {
                let report = Runner::new(world, model, i as u64 + 1, case.clone())
                    .run()
                    .await;
                (case, report)
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let mut tally = Tally {
        histories,
        ..Tally::default()
    };
    let mut found = Vec::new();
    for (mut case, report) in reports {
        tally.deliveries += report.deliveries;
        tally.faults += report.faults as u64;
        if !report.violations.is_empty() {
            tally.violations += 1;
            case.violation = Some(report.violations.join("\n  "));
            found.push(case);
        }
    }
    if !found.is_empty() && std::env::var_os("SIMULATE_LOG").is_some() {
        eprintln!("{}", world::tail(&world.log()));
    }
    tally.wall_s = started.elapsed().as_secs_f64();
    Ok((tally, found))
}

/// A history's seed: the run's, the provider and the history's number, mixed.
fn history_seed(seed: u64, provider: &str, i: u64) -> u64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{seed}:{provider}:{i}").as_bytes());
    u64::from_be_bytes(digest[..8].try_into().unwrap()) >> 16
}

/// Runs `case` alone in a fresh world: its violations.
async fn run_alone(model: &dyn Model, case: &Case, binary: &Binary) -> Vec<String> {
    match World::start(model, binary).await {
        Ok(world) => {
            let world = Arc::new(world);
            Runner::new(&world, model, 1, case.clone())
                .run()
                .await
                .violations
        }
        Err(error) => vec![format!("the world did not start: {error:#}")],
    }
}

/// What kind of violation a message is, so shrinking keeps the one it started from rather
/// than wandering to a simpler one: the part of the books and which way it is off
/// (`reinstated+`: more booked than the provider holds; `withdrawn-0`: none of it booked,
/// `withdrawn-`: a part missing), or the message's first words.
fn kinds(violations: &[String]) -> Vec<String> {
    let mut kinds = Vec::new();
    for violation in violations {
        let Some((_, books)) = violation.split_once("the books hold ") else {
            kinds.push(violation.chars().take(48).collect());
            continue;
        };
        for part in books.split(", ") {
            let words: Vec<&str> = part.split_whitespace().collect();
            if let [name, booked, "where", "the", "provider", "holds", truth, ..] = words[..]
                && let (Ok(booked), Ok(truth)) = (booked.parse::<i64>(), truth.parse::<i64>())
            {
                // Missing entirely (`withdrawn-0`) is another bug than missing a part.
                let off = match (booked > truth, booked == 0) {
                    (true, _) => "+",
                    (false, true) => "-0",
                    (false, false) => "-",
                };
                kinds.push(format!("{name}{off}"));
            }
        }
    }
    kinds
}

/// The smallest case found (within a bounded number of runs) that still violates in the same
/// way.
async fn shrink(model: &dyn Model, mut case: Case, binary: &Binary, kind: Option<&str>) -> Case {
    let mut runs = 0;
    let violation = run_alone(model, &case, binary).await;
    if violation.is_empty() {
        // Not reproducible alone (it needed another history's faults): kept as found.
        return case;
    }
    // The same kinds of violation, or (`--shrink-for`) at least the one asked for.
    let mut original = kinds(&violation);
    original.sort();
    original.dedup();
    let same = |found: &[String]| {
        let mut found = found.to_vec();
        found.sort();
        found.dedup();
        match kind {
            Some(kind) => found.iter().any(|k| k == kind),
            None => found == original,
        }
    };
    case.violation = Some(violation.join("\n  "));
    'smaller: while runs < 80 {
        for candidate in case.shrink_candidates() {
            runs += 1;
            let found = run_alone(model, &candidate, binary).await;
            if same(&kinds(&found)) {
                case = Case {
                    violation: Some(found.join("\n  ")),
                    ..candidate
                };
                continue 'smaller;
            }
            if runs >= 80 {
                break;
            }
        }
        break;
    }
    case
}

/// Replays kept cases, each alone in a fresh world.
async fn replay_cases(
    cases: Vec<(PathBuf, Case)>,
    all: &[Box<dyn Model>],
    binary: &Binary,
    tallies: &mut Vec<(String, Tally)>,
) -> anyhow::Result<bool> {
    let mut clean = true;
    for (file, case) in cases {
        let Some(model) = all.iter().find(|m| m.provider() == case.provider) else {
            anyhow::bail!("{}: no provider {:?}", file.display(), case.provider);
        };
        let started = Instant::now();
        let violations = run_alone(model.as_ref(), &case, binary).await;
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if violations.is_empty() {
            println!("case {name}: ok");
        } else {
            clean = false;
            println!("case {name}: VIOLATION\n  {}", violations.join("\n  "));
        }
        tallies.push((
            case.provider.clone(),
            Tally {
                histories: 1,
                deliveries: 0,
                faults: case.faults() as u64,
                violations: u64::from(!violations.is_empty()),
                wall_s: started.elapsed().as_secs_f64(),
            },
        ));
    }
    Ok(clean)
}
