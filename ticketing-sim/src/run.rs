//! One seed: a cluster of real nodes and a host of real clients on
//! turmoil's simulated network and clock, faults drawn from the seed, and
//! the fault suite's checker over the history.
//!
//! Every node runs the server's own assembly (`server::Builder` with the
//! simulated client port and peer network), in memory mode: a crashed node
//! comes back as a new node that replaces the old one, as a restarted
//! memory-mode process does. The clients run the client library
//! (`Builder::connector`) on one host, so every timestamp of the history
//! is read on one clock. Each holder writes through a token fence (an
//! exclusive holder's write is accepted only above every token accepted
//! before on its key), as the fault suite's SQLite fence does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use ticketing_client::TicketBroker;
use ticketing_server::config::{Cli, Config};
use ticketing_verify::checker::{self, Report};
use ticketing_verify::db::Final;
use ticketing_verify::history::Event;
use ticketing_verify::rng::Rng;

use crate::net;

/// The client port of every node.
const CLIENT_PORT: u16 = 5225;
/// The peer port of every node.
const PEER_PORT: u16 = 7000;
/// The client token (the nodes' tokens file holds it).
const CLIENT_TOKEN: &str = "sim-client-token-0123456789abcdef";
/// The peer token.
const PEER_TOKEN: &str = "sim-peer-token-0123456789abcdef0123";
/// What every acquire asks for.
const WAIT: Duration = Duration::from_secs(4);
const BUDGET: Duration = Duration::from_secs(1);
/// A holder writes only while at least this much of its deadline is left.
const WRITE_MARGIN: Duration = Duration::from_millis(50);
/// After a heal, some key must be granted again within this (simulated) time.
const BOUND: Duration = Duration::from_secs(15);

/// What one seed runs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Every choice: faults, their times, link latencies, client keys and work times.
    pub seed: u64,
    /// 3 or 5.
    pub nodes: usize,
    /// Client brokers (all on one host).
    pub clients: usize,
    /// Keys the clients share.
    pub keys: usize,
    /// Simulated time the clients run for.
    pub duration: Duration,
}

/// What one seed found.
#[derive(Debug)]
pub struct Outcome {
    /// The checker's report.
    pub report: Report,
    /// Every fault, as done.
    pub faults: Vec<String>,
    /// The simulation itself failed (a host's software returned an error).
    pub error: Option<String>,
    /// SHA-256 of the whole history (first 16 hex digits): a replay of the
    /// seed must give the same.
    pub digest: String,
}

/// The history and the fence, shared by the clients and the fault loop.
#[derive(Default)]
struct Shared {
    events: Vec<Event>,
    /// Per key: the highest token accepted.
    fence: BTreeMap<String, u64>,
    /// Per key: accepted writes.
    counters: BTreeMap<String, u64>,
    /// Accepted writes in order: (key, token, client, slot).
    writes: Vec<(String, u64, u32, Option<u16>)>,
}

fn host(i: usize) -> String {
    format!("n{i}")
}

/// Node `i`'s configuration, as its command line would give it, with its
/// election timeout `election_ms` (openraft draws one per start in the
/// configured range; here the seed draws it, and the range is that one value).
fn config(i: usize, n: usize, dir: &Path, bootstrap: bool, election_ms: u64) -> anyhow::Result<Config> {
    let peers: Vec<String> = (0..n).map(|j| format!("{}:{PEER_PORT}", host(j))).collect();
    let mut args = vec![
        "ticketing-server".to_owned(),
        "--listen".into(),
        format!("0.0.0.0:{CLIENT_PORT}"),
        "--advertise".into(),
        format!("{}:{CLIENT_PORT}", host(i)),
        "--peer-listen".into(),
        format!("0.0.0.0:{PEER_PORT}"),
        "--peers".into(),
        peers.join(","),
        "--peer-token-file".into(),
        dir.join("peer.token").display().to_string(),
        "--client-tokens-file".into(),
        dir.join("client.tokens").display().to_string(),
        "--election-timeout-min-ms".into(),
        election_ms.to_string(),
        "--election-timeout-max-ms".into(),
        (election_ms + 1).to_string(),
    ];
    if bootstrap {
        args.push("--bootstrap".into());
    }
    Ok(Config::resolve(Cli::try_parse_from(args)?)?)
}

/// The simulation's wall clock, µs since the Unix epoch (the simulation's
/// epoch is fixed, so tokens start at the same value in every replay).
fn sim_wall() -> u64 {
    turmoil::since_epoch().map_or(0, |d| d.as_micros() as u64)
}

/// Simulated nanoseconds since the clients' host started.
fn ns_since(start: tokio::time::Instant, at: tokio::time::Instant) -> u64 {
    at.saturating_duration_since(start).as_nanos() as u64
}

/// Runs `plan`; `dir` holds the token files.
pub fn run(plan: &Plan, dir: &Path) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("peer.token"), format!("{PEER_TOKEN}\n"))?;
    std::fs::write(dir.join("client.tokens"), format!("{CLIENT_TOKEN}\n"))?;
    let mut rng = Rng::new(plan.seed);
    // Every random choice the nodes and clients make on this thread (node
    // ids, domain ids, nonces) comes from the seed.
    ticketing_proto::entropy::seed_thread(Some(rng.next_u64()));
    let mut sim = turmoil::Builder::new()
        .rng_seed(rng.next_u64())
        .simulation_duration(plan.duration + Duration::from_secs(120))
        .tick_duration(Duration::from_millis(1))
        .epoch(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(Duration::from_millis(2 + rng.range(0, 20)))
        .build();
    for i in 0..plan.nodes {
        let starts = Arc::new(AtomicU32::new(0));
        let (n, dir, timing) = (plan.nodes, dir.to_owned(), rng.next_u64());
        sim.host(host(i), move || {
            let (starts, dir) = (starts.clone(), dir.clone());
            async move {
                let start = starts.fetch_add(1, Ordering::SeqCst);
                // The defaults' range (docs/deployment.md, "Failover timing").
                let election_ms = Rng::new(timing.wrapping_add(u64::from(start))).range(1160, 1200);
                let config = config(i, n, &dir, i == 0 && start == 0, election_ms).map_err(|e| e.to_string())?;
                let listener = net::Listener(turmoil::net::TcpListener::bind(("0.0.0.0", CLIENT_PORT)).await?);
                ticketing_server::server::Builder::new(config)
                    .net(Arc::new(net::Net))
                    .wall_clock(Arc::new(sim_wall))
                    .run(listener, std::future::pending::<()>())
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
        });
    }
    let shared = Arc::new(Mutex::new(Shared::default()));
    let addrs: Vec<String> = (0..plan.nodes).map(|i| format!("{}:{CLIENT_PORT}", host(i))).collect();
    {
        let (shared, plan, seed) = (shared.clone(), plan.clone(), rng.next_u64());
        sim.client("clients", async move {
            clients(&plan, seed, &addrs, &shared).await;
            Ok(())
        });
    }
    let faults = faults(&mut sim, plan, &mut rng, &shared);
    let error = faults.as_ref().err().map(|e| e.to_string());
    let faults = faults.unwrap_or_default();
    let s = shared.lock().unwrap_or_else(|p| p.into_inner());
    let fin = Final { counters: s.counters.iter().map(|(k, n)| (k.clone(), *n)).collect(), writes: s.writes.clone() };
    let end = s.events.iter().map(end_of).max().unwrap_or(0);
    let report = checker::check(&s.events, &fin, BOUND.as_nanos() as u64, 0, end);
    let digest = {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for e in &s.events {
            h.update(serde_json::to_vec(e)?);
            h.update(b"\n");
        }
        h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
    };
    Ok(Outcome { report, faults, error, digest })
}

/// When an event ended (its last timestamp).
fn end_of(e: &Event) -> u64 {
    match e {
        Event::Grant { ans, .. } | Event::Acquire { ans, .. } => *ans,
        Event::IndeterminateHeld { at, .. } => *at,
        Event::Write { done, .. } => *done,
        Event::Release { end, .. } => *end,
        Event::Fault { heal, .. } => *heal,
        _ => 0,
    }
}

/// Steps the simulation, doing the faults drawn from `rng` as simulated
/// time passes, until the clients are done.
fn faults(
    sim: &mut turmoil::Sim<'_>,
    plan: &Plan,
    rng: &mut Rng,
    shared: &Mutex<Shared>,
) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    // The cluster forms and the clients start writing first.
    let mut next = Duration::from_secs(5 + rng.range(0, 3));
    // What runs now: (name, victim, heal at, started at).
    let mut current: Option<(&'static str, usize, Duration, Duration)> = None;
    loop {
        if sim.step().map_err(|e| anyhow::anyhow!("{e}"))? {
            return Ok(done);
        }
        let now = sim.elapsed();
        if let Some((name, victim, heal, start)) = current {
            if now >= heal {
                match name {
                    "crash" => sim.bounce(host(victim)),
                    _ => {
                        for j in (0..plan.nodes).filter(|&j| j != victim) {
                            sim.release(host(victim), host(j));
                        }
                    }
                }
                let line = format!(
                    "{name} node {victim} at {:.3} s, healed at {:.3} s",
                    start.as_secs_f64(),
                    now.as_secs_f64()
                );
                let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
                s.events.push(Event::Fault {
                    name: name.to_owned(),
                    nodes: plan.nodes as u32,
                    start: start.as_nanos() as u64,
                    heal: now.as_nanos() as u64,
                    detail: line.clone(),
                });
                done.push(line);
                current = None;
                next = now + Duration::from_millis(2000 + rng.range(0, 3000));
            }
        } else if now >= next && now + Duration::from_secs(6) < plan.duration {
            let victim = rng.index(plan.nodes);
            let hold = Duration::from_millis(500 + rng.range(0, 3000));
            let name = if rng.index(2) == 0 { "crash" } else { "partition" };
            match name {
                "crash" => sim.crash(host(victim)),
                // TCP's view of a partition: nothing crosses it, and what
                // was sent arrives once it heals (retransmitted), in order;
                // a connection is never silently missing bytes.
                _ => {
                    for j in (0..plan.nodes).filter(|&j| j != victim) {
                        sim.hold(host(victim), host(j));
                    }
                }
            }
            current = Some((name, victim, now + hold, now));
        }
    }
}

/// The clients: each loops acquire → work → fenced write → release on a
/// key drawn from the seed, until `plan.duration` has passed.
async fn clients(plan: &Plan, seed: u64, addrs: &[String], shared: &Arc<Mutex<Shared>>) {
    let start = tokio::time::Instant::now();
    let keys: Vec<String> = (0..plan.keys).map(|k| format!("sim-key-{k}")).collect();
    let mut tasks = Vec::new();
    for c in 0..plan.clients {
        let broker = TicketBroker::builder(addrs.to_vec())
            .token(CLIENT_TOKEN)
            .connector(Arc::new(net::Net))
            .build()
            .expect("the addresses are valid");
        let (keys, shared) = (keys.clone(), shared.clone());
        let end = start + plan.duration;
        let seed = seed.wrapping_add(c as u64);
        tasks.push(tokio::task::spawn_local(async move {
            client(c as u32, broker, &keys, seed, start, end, &shared).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn client(
    id: u32,
    broker: TicketBroker,
    keys: &[String],
    seed: u64,
    start: tokio::time::Instant,
    end: tokio::time::Instant,
    shared: &Mutex<Shared>,
) {
    let mut rng = Rng::new(seed);
    let start_std = start.into_std();
    let record = |e: Event| shared.lock().unwrap_or_else(|p| p.into_inner()).events.push(e);
    while tokio::time::Instant::now() < end {
        let key = keys[rng.index(keys.len())].clone();
        let call = ns_since(start, tokio::time::Instant::now());
        // Leases of 1–5 s, now and then 30 s.
        let lease = Duration::from_secs(if rng.chance(50) { 30 } else { rng.range(1, 6) });
        let got = broker.acquire(&key, WAIT, lease, BUDGET).await;
        let ans = ns_since(start, tokio::time::Instant::now());
        let ticket = match got {
            Ok(Some(t)) => t,
            Ok(None) | Err(_) => {
                let result = match got {
                    Ok(_) => "timeout".to_owned(),
                    Err(e) => e.code().to_owned(),
                };
                record(Event::Acquire {
                    client: id,
                    key,
                    call,
                    ans,
                    result,
                    keys: Vec::new(),
                    n: None,
                    sent: None,
                    wait_ms: None,
                    lease_ms: None,
                });
                tokio::time::sleep(Duration::from_millis(20 + rng.range(0, 80))).await;
                continue;
            }
        };
        let token = ticket.token();
        let dl = ticket.deadline().saturating_duration_since(start_std).as_nanos() as u64;
        record(Event::Grant {
            client: id,
            key: key.clone(),
            token,
            call,
            ans,
            dl,
            keys: Vec::new(),
            want: Vec::new(),
            n: None,
            slot: None,
            sent: None,
            wait_ms: None,
            lease_ms: None,
        });
        // The work while holding: mostly short; one hold in sixteen runs
        // for 0.5–6 s, often past its lease (its write is then skipped).
        let work = if rng.chance(60) { rng.range(500, 6000) } else { rng.range(10, 120) };
        tokio::time::sleep(Duration::from_millis(work)).await;
        let issued = ns_since(start, tokio::time::Instant::now());
        let result = if issued + WRITE_MARGIN.as_nanos() as u64 > dl {
            "skipped"
        } else {
            let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
            let high = s.fence.entry(key.clone()).or_insert(0);
            if *high < token {
                *high = token;
                *s.counters.entry(key.clone()).or_insert(0) += 1;
                s.writes.push((key.clone(), token, id, None));
                "accepted"
            } else {
                "refused"
            }
        };
        let done = ns_since(start, tokio::time::Instant::now());
        record(Event::Write {
            client: id,
            key: key.clone(),
            token,
            issued,
            done,
            result: result.to_owned(),
            keys: Vec::new(),
            slot: None,
        });
        let rstart = ns_since(start, tokio::time::Instant::now());
        let released = ticket.release().await;
        let rend = ns_since(start, tokio::time::Instant::now());
        let result = match released {
            Ok(true) => "released".to_owned(),
            Ok(false) => "not_held".to_owned(),
            Err(e) => e.code().to_owned(),
        };
        record(Event::Release { client: id, key, token, start: rstart, end: rend, result });
    }
    broker.close().await;
}

/// Where a seed's files go.
pub fn run_dir(base: Option<&Path>, seed: u64) -> PathBuf {
    match base {
        Some(b) => b.join(format!("seed-{seed}")),
        None => std::env::temp_dir().join(format!("ticketing-sim-{}", std::process::id())).join(format!("seed-{seed}")),
    }
}
