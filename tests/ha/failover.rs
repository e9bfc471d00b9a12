//! Each scenario: a provider simulator sends events to two gateways, each event retried until
//! it gets a 2xx; something happens to the database nodes mid-load; at the end the new
//! primary's ledger is compared with every 2xx the simulator ever got.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::support::gateway::GatewayProcess;
use crate::support::ha::HaCluster;
use crate::support::simulator::{Attempt, Event, Simulator};
use crate::support::{ACME, ADMIN_TOKEN, config_with, connect, insert_orders, sign};

/// Small pools and short bounds: a capture answers within 1 s of statement plus 1.5 s of
/// commit, so a stalled standby shows as 503s well inside Patroni's ttl of 10 s.
const HA_TUNING: &str = "[server]\nworkers = 2\nacquire_timeout_ms = 2000\n\
    [database]\npool_size = 8\napi_pool_size = 2\nstatement_timeout_ms = 1000\ncommit_timeout_ms = 1500\n";

struct Setup {
    cluster: HaCluster,
    url: String,
    gateways: Vec<GatewayProcess>,
}

async fn setup(synchronous: bool, extra: &str) -> Setup {
    let cluster = tokio::task::spawn_blocking(move || HaCluster::start(synchronous))
        .await
        .unwrap();
    let url = cluster.url();
    callback_gateway::db::run_migrations(&url).await.unwrap();
    let config = config_with(&url, &format!("{HA_TUNING}{extra}"));
    let mut gateways = Vec::new();
    for _ in 0..2 {
        gateways.push(GatewayProcess::spawn_on(&url, &config).await);
    }
    Setup {
        cluster,
        url,
        gateways,
    }
}

/// One payment per new order, ids unique to this run.
async fn events(url: &str, n: i64) -> Vec<Event> {
    let db = connect(url).await;
    let run = uuid::Uuid::new_v4().simple().to_string();
    insert_orders(&db, n)
        .await
        .into_iter()
        .map(|(order, amount)| Event::payment(&format!("evt_{run}_{order}"), order, amount))
        .collect()
}

/// Every event delivered until acknowledged, attempts alternating between the gateways.
fn deliver_all(
    simulator: &Arc<Simulator>,
    events: &Arc<Vec<Event>>,
    concurrency: usize,
) -> tokio::task::JoinHandle<()> {
    let (simulator, events) = (simulator.clone(), events.clone());
    tokio::spawn(async move {
        futures_util::stream::iter(events.iter().enumerate())
            .for_each_concurrent(concurrency, |(i, event)| {
                let simulator = simulator.clone();
                async move {
                    simulator.deliver_to(event, &[i % 2, (i + 1) % 2]).await;
                }
            })
            .await;
    })
}

async fn scalar(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.unwrap().get::<_, i64>(0)
}

/// Polls `sql` (a count) on `url` until it reaches `at_least`.
async fn until_count(url: &str, sql: &str, at_least: i64, limit: Duration) {
    let db = connect(url).await;
    let started = Instant::now();
    while scalar(&db, sql).await < at_least {
        assert!(
            started.elapsed() < limit,
            "{sql} did not reach {at_least} within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The acknowledged events missing from `url`'s ledger, after checking that none is there
/// twice and that the books balance.
async fn acknowledged_but_missing(
    url: &str,
    simulator: &Simulator,
    events: &[Event],
) -> Vec<String> {
    let db = connect(url).await;
    let posted: HashMap<String, i64> = db
        .query(
            "SELECT event_id, count(*) FROM ledger_transfers WHERE provider = 'acme' GROUP BY event_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(
        posted.values().all(|&n| n == 1),
        "an event was posted more than once"
    );
    assert_eq!(
        scalar(
            &db,
            "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries"
        )
        .await,
        0,
        "the ledger must balance"
    );
    let acks = simulator.acks();
    events
        .iter()
        .filter(|event| acks.contains_key(&event.id) && !posted.contains_key(&event.id))
        .map(|event| event.id.clone())
        .collect()
}

/// Every event acknowledged, each exactly once in `url`'s ledger, and the books equal to what
/// the simulator sent.
async fn assert_books_equal_the_simulators_truth(
    url: &str,
    simulator: &Simulator,
    events: &[Event],
) {
    let failures = simulator.failures();
    assert!(
        failures.is_empty(),
        "{} deliveries failed:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
    let missing = acknowledged_but_missing(url, simulator, events).await;
    assert!(
        missing.is_empty(),
        "{} acknowledged events are not in the new primary's ledger: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    let acks = simulator.acks();
    let unacked = events.iter().filter(|e| !acks.contains_key(&e.id)).count();
    assert_eq!(unacked, 0, "every event must eventually get a 2xx");
    let db = connect(url).await;
    assert_eq!(
        scalar(&db, "SELECT count(*) FROM ledger_transfers").await,
        events.len() as i64,
        "one transfer per event, no more"
    );
    let expected: i64 = events.iter().map(|e| e.amount_minor).sum();
    assert_eq!(
        scalar(
            &db,
            "SELECT coalesce(sum(amount_minor), 0)::bigint FROM ledger_entries WHERE account = 'psp_clearing:acme'"
        )
        .await,
        expected,
        "psp_clearing:acme must hold exactly what the provider moved"
    );
    assert_eq!(
        scalar(&db, "SELECT count(*) FROM orders WHERE status <> 'paid'").await,
        0,
        "every order must be paid once"
    );
}

/// From the first refused attempt after `since` to the first 2xx after that refusal.
fn refusal_window(attempts: &[Attempt], since: Instant) -> Option<(Duration, usize)> {
    let first_refusal = attempts
        .iter()
        .filter(|a| a.at >= since && !(200..300).contains(&a.status))
        .map(|a| a.at)
        .min()?;
    let first_ack = attempts
        .iter()
        .filter(|a| a.at > first_refusal && (200..300).contains(&a.status))
        .map(|a| a.at)
        .min()?;
    let refused = attempts
        .iter()
        .filter(|a| a.at >= first_refusal && a.at <= first_ack && !(200..300).contains(&a.status))
        .count();
    Some((first_ack - first_refusal, refused))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_node_killed_mid_load_loses_no_acknowledged_event_of_3000() {
    let _serial = crate::SERIAL.lock().await;
    let started = Instant::now();
    let setup = setup(true, "").await;
    let events = Arc::new(events(&setup.url, 3000).await);
    let simulator = Arc::new(
        Simulator::new(setup.gateways.iter().map(|g| g.address()).collect())
            .give_up_after(Duration::from_secs(240)),
    );
    let primary = setup.cluster.primary();
    let standby = HaCluster::other(&primary);
    let load = deliver_all(&simulator, &events, 32);
    until_count(
        &setup.cluster.node_url(&primary),
        "SELECT count(*) FROM ledger_transfers",
        1000,
        Duration::from_secs(120),
    )
    .await;

    let killed = Instant::now();
    setup.cluster.run(&["kill-node", &primary]);
    let promoted = setup
        .cluster
        .wait_for(standby, "/primary", Duration::from_secs(60))
        .await;
    // Two nodes in strict mode: the new primary takes no write until the old node rejoins.
    setup.cluster.run(&["start-node", &primary]);
    let rejoined = setup
        .cluster
        .wait_for(&primary, "/sync", Duration::from_secs(120))
        .await;
    tokio::time::timeout(Duration::from_secs(300), load)
        .await
        .expect("the simulator did not finish within 300 s after the kill")
        .unwrap();

    let new_primary = setup.cluster.node_url(standby);
    assert_books_equal_the_simulators_truth(&new_primary, &simulator, &events).await;
    let tally = simulator.tally();
    let causes: Vec<String> = setup
        .gateways
        .iter()
        .flat_map(|g| g.error_causes())
        .collect();
    assert_eq!(
        (tally.connection_errors, tally.other_retryable),
        (0, 0),
        "every attempt got an answer, and every refusal was a 503 or 409: {tally:?}\n{}",
        causes.join("\n")
    );
    assert_eq!(
        tally.refusals_without_retry_after, 0,
        "every refusal says when to retry: {tally:?}"
    );
    let (window, refused) = refusal_window(&simulator.attempts(), killed)
        .expect("the kill refused no callback: it came after the load");
    eprintln!(
        "HA failover: {} events; primary {primary} killed; {standby} promoted {:.1} s after, \
         {primary} rejoined as synchronous standby {:.1} s after; {:.1} s from the first \
         refused callback to the first 2xx after it ({refused} refused attempts, all 503/409 \
         with Retry-After); none lost, none doubled; {tally:?}; test took {:.0} s",
        events.len(),
        promoted.as_secs_f64(),
        (promoted + rejoined).as_secs_f64(),
        window.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// A stalled standby (its PostgreSQL stopped with SIGSTOP, which also freezes its Patroni):
/// commits wait, callbacks get 503 after the bound, none gets a 2xx. Then the primary dies
/// while the standby's member key still lives, the standby resumes and is promoted, and
/// nothing acknowledged is missing. `synchronous: false` is the control run: the same with
/// asynchronous replication, where the replication connection is also cut (WAL already in
/// the stopped standby's socket would otherwise arrive when it resumes); it must lose
/// acknowledged events.
async fn stalled_standby_then_the_primary_dies(synchronous: bool) -> usize {
    let setup = setup(synchronous, "").await;
    let warm_up = Arc::new(events(&setup.url, 200).await);
    let stalled_events = Arc::new(events(&setup.url, 300).await);
    let simulator = Arc::new(
        Simulator::new(setup.gateways.iter().map(|g| g.address()).collect())
            .give_up_after(Duration::from_secs(240)),
    );
    deliver_all(&simulator, &warm_up, 16).await.unwrap();
    assert!(
        simulator.failures().is_empty(),
        "{:?}",
        simulator.failures()
    );

    let primary = setup.cluster.primary();
    let standby = HaCluster::other(&primary);
    if !synchronous {
        // An asynchronous standby starts streaming a few seconds after `ha-cluster start`
        // returns (about 5 s on an idle machine, where the warm-up is over sooner): the
        // walreceiver cut below must exist before the node is stopped.
        crate::support::until("the standby's walreceiver", async || {
            setup.cluster.walreceiver_pid(standby).is_some()
        })
        .await;
        // It must also have replayed the warm-up: a standby still catching up on the
        // gateway's database (its creation, its migrations) is promoted without it, and the
        // gateways then have no database at all instead of one missing the stalled events.
        let written: String = connect(&setup.cluster.node_url(&primary))
            .await
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .await
            .unwrap()
            .get(0);
        let standby_db = connect(
            &setup
                .cluster
                .node_url(standby)
                .replace("/gateway", "/postgres"),
        )
        .await;
        let replayed =
            format!("SELECT coalesce(pg_last_wal_replay_lsn() >= '{written}'::pg_lsn, false)");
        crate::support::until("the standby's replay of the warm-up", async || {
            standby_db
                .query_one(&replayed, &[])
                .await
                .is_ok_and(|row| row.get::<_, bool>(0))
        })
        .await;
    }
    let stalled_at = Instant::now();
    setup.cluster.run(&["stall-node", standby]);
    if !synchronous {
        // The walreceiver dies with what its socket held; the standby restarts from its own
        // WAL when it resumes.
        let walreceiver = setup
            .cluster
            .walreceiver_pid(standby)
            .expect("the standby has a walreceiver");
        assert!(
            std::process::Command::new("kill")
                .args(["-KILL", &walreceiver.to_string()])
                .status()
                .unwrap()
                .success()
        );
    }
    let load = deliver_all(&simulator, &stalled_events, 16);
    let during_stall = if synchronous {
        // 503s after the bound, well before the standby's member key (ttl 10 s) expires.
        let started = Instant::now();
        while simulator.tally().unavailable_503 < 16 {
            assert!(
                started.elapsed() < Duration::from_secs(6),
                "callbacks did not get 503 while the standby was stalled: {:?}",
                simulator.tally()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        simulator.tally()
    } else {
        let started = Instant::now();
        while simulator.acks().len() < 200 + 100 {
            assert!(
                started.elapsed() < Duration::from_secs(6),
                "asynchronous commits did not answer"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        simulator.tally()
    };
    setup.cluster.run(&["kill-node", &primary]);
    let resumed_at = Instant::now();
    setup.cluster.run(&["resume-node", standby]);
    let acked_during_stall = simulator
        .attempts()
        .iter()
        .filter(|a| a.at >= stalled_at && a.at <= resumed_at && (200..300).contains(&a.status))
        .count();
    let promoted = setup
        .cluster
        .wait_for(standby, "/primary", Duration::from_secs(90))
        .await;
    if synchronous {
        assert_eq!(
            acked_during_stall, 0,
            "no callback may get a 2xx while the synchronous standby is stalled"
        );
        setup.cluster.run(&["start-node", &primary]);
        setup
            .cluster
            .wait_for(&primary, "/sync", Duration::from_secs(120))
            .await;
    }
    tokio::time::timeout(Duration::from_secs(300), load)
        .await
        .unwrap_or_else(|_| {
            for gateway in &setup.gateways {
                let log = gateway.log();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                eprintln!("gateway log, newest first:\n{}", tail.join("\n"));
            }
            panic!("the simulator did not finish: {:?}", simulator.tally())
        })
        .unwrap();
    let all: Vec<Event> = warm_up
        .iter()
        .chain(stalled_events.iter())
        .cloned()
        .collect();
    let new_primary = setup.cluster.node_url(standby);
    let lost = acknowledged_but_missing(&new_primary, &simulator, &all).await;
    if synchronous {
        assert_books_equal_the_simulators_truth(&new_primary, &simulator, &all).await;
    }
    eprintln!(
        "HA stalled standby (synchronous: {synchronous}): {} 2xx while the standby was stopped \
         ({:.1} s); during the stall {during_stall:?}; {standby} promoted {:.1} s after the \
         primary died; {} acknowledged events missing from the new primary",
        acked_during_stall,
        (resumed_at - stalled_at).as_secs_f64(),
        promoted.as_secs_f64(),
        lost.len()
    );
    lost.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_synchronous_standby_gets_no_2xx_and_after_the_primary_dies_nothing_acknowledged_is_missing()
 {
    let _serial = crate::SERIAL.lock().await;
    assert_eq!(stalled_standby_then_the_primary_dies(true).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_run_with_asynchronous_replication_loses_acknowledged_events() {
    let _serial = crate::SERIAL.lock().await;
    let lost = stalled_standby_then_the_primary_dies(false).await;
    assert!(
        lost > 0,
        "the control run must lose acknowledged events, or the synchronous run proves nothing"
    );
}

/// p99 of `n` first deliveries sent 16 at a time to the gateways.
async fn callback_p99(gateways: &[GatewayProcess], events: &[Event]) -> Duration {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut latencies: Vec<Duration> = futures_util::stream::iter(events.iter().enumerate())
        .map(|(i, event)| {
            let client = client.clone();
            let url = format!(
                "{}/v1/callbacks/{ACME}",
                gateways[i % gateways.len()].address()
            );
            async move {
                let mut request = client
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .body(event.body.clone());
                for (name, value) in sign::sign_now(ACME, &event.id, &event.body) {
                    request = request.header(name, value);
                }
                let started = Instant::now();
                let status = request.send().await.unwrap().status().as_u16();
                assert_eq!(status, 200, "callback {}", event.id);
                started.elapsed()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    latencies.sort();
    latencies[(latencies.len() * 99).div_ceil(100) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_and_export_read_from_the_replica_during_a_load_run() {
    let _serial = crate::SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| HaCluster::start(true))
        .await
        .unwrap();
    let url = cluster.url();
    callback_gateway::db::run_migrations(&url).await.unwrap();
    let primary = cluster.primary();
    let standby = HaCluster::other(&primary);
    let replica_url = cluster.node_url(standby);
    let config = config_with(
        &url,
        &format!("{HA_TUNING}replica_url = \"{replica_url}\"\n"),
    );
    let mut gateways = Vec::new();
    for _ in 0..2 {
        gateways.push(GatewayProcess::spawn_on(&url, &config).await);
    }
    let quiet = events(&url, 2000).await;
    let busy = events(&url, 2000).await;
    let quiet_p99 = callback_p99(&gateways, &quiet).await;

    let reading = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let base = gateways[i].address();
            let reading = reading.clone();
            tokio::spawn(async move {
                // The sign-in answers 303 with the cookie: read it there, not after the redirect.
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(20))
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .unwrap();
                let signed_in =
                    crate::support::console_sign_in(&client, &base, Some(ADMIN_TOKEN)).await;
                assert_eq!(signed_in.status(), 303, "the console sign-in");
                let cookie = signed_in.headers()["set-cookie"]
                    .to_str()
                    .unwrap()
                    .split(';')
                    .next()
                    .unwrap()
                    .to_owned();
                let mut reads = 0u64;
                let mut exported = 0usize;
                while reading.load(std::sync::atomic::Ordering::Relaxed) {
                    for page in ["/console/events", "/console/attention", "/console/balances"] {
                        let page = client
                            .get(format!("{base}{page}"))
                            .header("Cookie", &cookie)
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(page.status(), 200);
                        reads += 1;
                    }
                    let export = client
                        .get(format!("{base}/admin/events.jsonl?provider={ACME}"))
                        .bearer_auth(ADMIN_TOKEN)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(export.status(), 200);
                    let text = export.text().await.unwrap();
                    assert!(text.contains("\"trailer\""), "the export was cut");
                    exported = exported.max(text.lines().count() - 1);
                    reads += 1;
                }
                (reads, exported)
            })
        })
        .collect();
    let busy_p99 = callback_p99(&gateways, &busy).await;
    // The reads ran on the standby, under the read pool's name, and not on the primary.
    let read_sessions = |node_url: String| async move {
        let db = connect(&node_url).await;
        scalar(
            &db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'callback-gateway/read'",
        )
        .await
    };
    let on_standby = read_sessions(cluster.node_url(standby)).await;
    let on_primary = read_sessions(cluster.node_url(&primary)).await;
    reading.store(false, std::sync::atomic::Ordering::Relaxed);
    let mut reads = 0;
    let mut exported = 0;
    for reader in readers {
        let (r, e) = reader.await.unwrap();
        reads += r;
        exported = exported.max(e);
    }
    assert!(
        on_standby > 0,
        "the read pool has no session on the standby"
    );
    assert_eq!(
        on_primary, 0,
        "the read pool must not read from the primary"
    );
    assert!(exported > 0, "the export from the replica held no event");
    eprintln!(
        "HA replica reads: callback p99 {quiet_p99:?} alone, {busy_p99:?} with {reads} console \
         pages and exports from the replica (largest export {exported} events)"
    );
}
