//! One seed: a cluster of real nodes and a host of real clients on
//! turmoil's simulated network and clock, faults drawn from the seed, and
//! the fault suite's checker over the history.
//!
//! Every node runs the server's own assembly (`server::Builder` with the
//! simulated client port and peer network). In memory mode a crashed node
//! comes back as a new node that replaces the old one, as a restarted
//! memory-mode process does. In durable mode each node has a data dir whose
//! journal is on a simulated disk ([`crate::disk`]): a crash is a power
//! loss that takes what was not fsynced, and the node comes back from what
//! is left, with its NodeId; one fault takes the power of a majority or of
//! every node at once. The clients run the client library
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

use crate::disk::SimDisk;
use crate::net;
use ticketing_server::durable::{DataDir, Mode};

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
    /// Durable mode: data dirs with their journals on simulated disks.
    pub durable: bool,
}

impl Plan {
    /// The plan the seeds run by default: 3 nodes for even seeds, 5 for odd
    /// ones; memory mode for seeds 0 and 1 modulo 4, durable for 2 and 3.
    pub fn for_seed(seed: u64, duration: Duration) -> Plan {
        Plan {
            seed,
            nodes: if seed.is_multiple_of(2) { 3 } else { 5 },
            clients: 4,
            keys: 5,
            duration,
            durable: seed % 4 >= 2,
        }
    }
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

impl Outcome {
    /// The outcome of a seed whose simulation panicked.
    pub fn panicked(why: String) -> Outcome {
        Outcome { report: Report::default(), faults: Vec::new(), error: Some(why), digest: String::new() }
    }
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
    /// Clients that heard of a grant in the step a crash or power loss
    /// struck: each holds that grant long (durable mode).
    stretch: std::collections::BTreeSet<u32>,
}

fn host(i: usize) -> String {
    format!("n{i}")
}

/// Node `i`'s configuration, as its command line would give it, with its
/// election timeout `election_ms` (openraft draws one per start in the
/// configured range; here the seed draws it, and the range is that one value).
fn config(
    i: usize,
    n: usize,
    dir: &Path,
    data: Option<&Path>,
    bootstrap: bool,
    election_ms: u64,
) -> anyhow::Result<Config> {
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
    if let Some(data) = data {
        args.push("--data-dir".into());
        args.push(data.display().to_string());
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
    // Durable mode: each node's disk (its own seed: memory-mode seeds draw
    // what they drew before disks existed).
    let data_root = dir.join("data");
    if data_root.exists() {
        std::fs::remove_dir_all(&data_root)?;
    }
    let mut disk_seeds = Rng::new(plan.seed ^ 0x5eed_d15c);
    let disks: Vec<Option<SimDisk>> =
        (0..plan.nodes).map(|_| plan.durable.then(|| SimDisk::new(disk_seeds.next_u64()))).collect();
    let mut sim = turmoil::Builder::new()
        .rng_seed(rng.next_u64())
        .simulation_duration(plan.duration + Duration::from_secs(120))
        .tick_duration(Duration::from_millis(1))
        .epoch(std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000))
        .min_message_latency(Duration::from_micros(100))
        .max_message_latency(Duration::from_millis(2 + rng.range(0, 20)))
        .build();
    for (i, disk) in disks.iter().enumerate() {
        let starts = Arc::new(AtomicU32::new(0));
        let (n, dir, timing) = (plan.nodes, dir.to_owned(), rng.next_u64());
        let (disk, data) = (disk.clone(), data_root.join(host(i)));
        sim.host(host(i), move || {
            let (starts, dir, disk, data) = (starts.clone(), dir.clone(), disk.clone(), data.clone());
            async move {
                let start = starts.fetch_add(1, Ordering::SeqCst);
                // The defaults' range (docs/deployment.md, "Failover timing").
                let election_ms = Rng::new(timing.wrapping_add(u64::from(start))).range(1160, 1200);
                let data = disk.as_ref().map(|_| data.as_path());
                let config = config(i, n, &dir, data, i == 0 && start == 0, election_ms).map_err(|e| e.to_string())?;
                // Durable: the data dir with its journal on the node's disk.
                let opened = match (&disk, data) {
                    (Some(disk), Some(path)) => {
                        let dir = DataDir::open(path, Mode::Cluster, || ticketing_server::cluster::random_node_id().0)
                            .map_err(|e| e.to_string())?;
                        let disk = disk.clone();
                        Some(Arc::new(dir.on_log_store(Arc::new(move || disk.open()))))
                    }
                    _ => None,
                };
                let listener = net::Listener(turmoil::net::TcpListener::bind(("0.0.0.0", CLIENT_PORT)).await?);
                ticketing_server::server::Builder::new(config)
                    .data(opened)
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
    // Durable mode: in one seed in two, one node's links to the others are
    // slow for the whole run (5–20 ms each way, inside the supported round
    // trip: docs/deployment.md, "Failover timing"): the leader commits
    // with the others, and that node is the one a majority without the
    // newest entries can be made of.
    let mut slow = None;
    if plan.durable && disk_seeds.index(2) == 0 {
        let (v, ms) = (disk_seeds.index(plan.nodes), disk_seeds.range(5, 20));
        for j in (0..plan.nodes).filter(|&j| j != v) {
            sim.set_link_latency(host(v), host(j), Duration::from_millis(ms));
        }
        slow = Some(format!("slow links of node {v}: {ms} ms"));
    }
    let faults = faults(&mut sim, plan, &mut rng, &shared, &disks);
    let error = faults.as_ref().err().map(|e| e.to_string());
    let faults = slow.into_iter().chain(faults.unwrap_or_default()).collect();
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

/// One fault: what, on which nodes, each node back when, started when.
struct Fault {
    name: &'static str,
    victims: Vec<usize>,
    /// When each victim comes back (restarts, or its links heal); `None`
    /// once it has.
    back: Vec<Option<Duration>>,
    start: Duration,
    /// Writes lost at its power losses.
    lost: u64,
}

/// Steps the simulation, doing the faults drawn from `rng` as simulated
/// time passes, until the clients are done. `disks`: each node's disk in
/// durable mode (a crash is a power loss on it).
///
/// In durable mode half of the crashes and power losses wait (up to 2 s)
/// for a step in which a client hears of a grant while a victim's disk
/// holds writes not yet fsynced: the moment a lost write would be a lost
/// grant, if anything answered before its fsync. The victims of a power
/// loss come back one by one, each after its own time.
fn faults(
    sim: &mut turmoil::Sim<'_>,
    plan: &Plan,
    rng: &mut Rng,
    shared: &Mutex<Shared>,
    disks: &[Option<SimDisk>],
) -> anyhow::Result<Vec<String>> {
    let mut done = Vec::new();
    // The cluster forms and the clients start writing first.
    let mut next = Duration::from_secs(5 + rng.range(0, 3));
    let mut current: Option<Fault> = None;
    // The fault drawn, waiting for a grant (until the given time).
    let mut armed: Option<(&'static str, Vec<usize>, Vec<Duration>, Duration)> = None;
    let mut seen = 0;
    loop {
        if sim.step().map_err(|e| anyhow::anyhow!("{e}"))? {
            return Ok(done);
        }
        let now = sim.elapsed();
        // The clients that heard of a grant in this step.
        let granted: Vec<u32> = {
            let s = shared.lock().unwrap_or_else(|p| p.into_inner());
            let fresh = s.events[seen..]
                .iter()
                .filter_map(|e| if let Event::Grant { client, .. } = e { Some(*client) } else { None })
                .collect();
            seen = s.events.len();
            fresh
        };
        if let Some(f) = &mut current {
            for (k, &v) in f.victims.iter().enumerate() {
                if f.back[k].is_none_or(|at| at > now) {
                    continue;
                }
                f.back[k] = None;
                match f.name {
                    "partition" => {
                        for j in (0..plan.nodes).filter(|&j| j != v) {
                            sim.release(host(v), host(j));
                        }
                    }
                    _ => sim.bounce(host(v)),
                }
            }
            if f.back.iter().all(Option::is_none) {
                let nodes: Vec<String> = f.victims.iter().map(|v| v.to_string()).collect();
                let what = if nodes.len() == 1 { "node" } else { "nodes" };
                let mut line = format!(
                    "{} {what} {} at {:.3} s, healed at {:.3} s",
                    f.name,
                    nodes.join(","),
                    f.start.as_secs_f64(),
                    now.as_secs_f64()
                );
                if plan.durable && f.name != "partition" {
                    line.push_str(&format!(" ({} unsynced writes lost)", f.lost));
                }
                let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
                s.events.push(Event::Fault {
                    name: f.name.to_owned(),
                    nodes: plan.nodes as u32,
                    start: f.start.as_nanos() as u64,
                    heal: now.as_nanos() as u64,
                    detail: line.clone(),
                });
                seen = s.events.len();
                done.push(line);
                current = None;
                next = now + Duration::from_millis(2000 + rng.range(0, 3000));
            }
        } else {
            if armed.is_none() && now >= next && now + Duration::from_secs(6) < plan.duration {
                // Durable mode: one fault in three takes the power of a majority
                // or more (every node, at times) at the same instant.
                let (name, victims, holds) = if plan.durable && rng.index(3) == 0 {
                    let k = rng.range(plan.nodes as u64 / 2 + 1, plan.nodes as u64) as usize;
                    let mut all: Vec<usize> = (0..plan.nodes).collect();
                    let mut victims = Vec::new();
                    for _ in 0..k {
                        victims.push(all.remove(rng.index(all.len())));
                    }
                    victims.sort_unstable();
                    let holds = victims.iter().map(|_| Duration::from_millis(500 + rng.range(0, 3000))).collect();
                    ("power-loss", victims, holds)
                } else {
                    let victim = rng.index(plan.nodes);
                    let hold = Duration::from_millis(500 + rng.range(0, 3000));
                    (if rng.index(2) == 0 { "crash" } else { "partition" }, vec![victim], vec![hold])
                };
                // Now, or at the next grant a client hears of while a
                // victim has unsynced writes.
                let wait = plan.durable && name != "partition" && rng.index(2) == 0;
                let until = if wait { now + Duration::from_secs(2) } else { now };
                armed = Some((name, victims, holds, until));
            }
            let unsynced =
                |victims: &[usize]| victims.iter().any(|&v| disks[v].as_ref().is_some_and(|d| d.unsynced() > 0));
            let struck = !granted.is_empty() && armed.as_ref().is_some_and(|a| unsynced(&a.1));
            if let Some((name, victims, holds, _)) = armed.take_if(|a| struck || now >= a.3) {
                if struck && name != "partition" {
                    shared.lock().unwrap_or_else(|p| p.into_inner()).stretch.extend(granted);
                }
                let mut lost = 0;
                for &v in &victims {
                    match name {
                        // TCP's view of a partition: nothing crosses it, and what
                        // was sent arrives once it heals (retransmitted), in order;
                        // a connection is never silently missing bytes.
                        "partition" => {
                            for j in (0..plan.nodes).filter(|&j| j != v) {
                                sim.hold(host(v), host(j));
                            }
                        }
                        _ => {
                            sim.crash(host(v));
                            if let Some(disk) = &disks[v] {
                                lost += disk.power_loss();
                            }
                        }
                    }
                }
                let back = holds.iter().map(|h| Some(now + *h)).collect();
                current = Some(Fault { name, victims, back, start: now, lost });
            }
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
        let (keys, shared, durable) = (keys.clone(), shared.clone(), plan.durable);
        let end = start + plan.duration;
        let seed = seed.wrapping_add(c as u64);
        tasks.push(tokio::task::spawn_local(async move {
            client(c as u32, broker, &keys, seed, (start, end), durable, &shared).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// One client's loop from `span.0` to `span.1`. In durable mode one lease
/// in four is long (10–60 s), and a client that heard of a grant in the
/// step a crash or power loss struck holds it for 3–8 s if its lease is
/// long: past the fault and the recovery after it, so a grant the cluster
/// lost would be granted again while its holder still holds it.
async fn client(
    id: u32,
    broker: TicketBroker,
    keys: &[String],
    seed: u64,
    span: (tokio::time::Instant, tokio::time::Instant),
    durable: bool,
    shared: &Mutex<Shared>,
) {
    let (start, end) = span;
    let mut rng = Rng::new(seed);
    let start_std = start.into_std();
    let record = |e: Event| shared.lock().unwrap_or_else(|p| p.into_inner()).events.push(e);
    while tokio::time::Instant::now() < end {
        let key = keys[rng.index(keys.len())].clone();
        let call = ns_since(start, tokio::time::Instant::now());
        // Leases of 1–6 s, now and then 30 s (durable mode: 1 in 4 of
        // 10–60 s, 1 in 20 of 30–250 s).
        let long = durable && rng.index(4) == 0;
        let lease = Duration::from_secs(if long {
            rng.range(10, 60)
        } else if rng.chance(50) {
            if durable {
                rng.range(30, 250)
            } else {
                30
            }
        } else {
            rng.range(1, 6)
        });
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
        let stretch = if durable {
            // The fault loop marks this grant's client in the step it was heard.
            tokio::time::sleep(Duration::from_millis(1)).await;
            shared.lock().unwrap_or_else(|p| p.into_inner()).stretch.remove(&id)
        } else {
            false
        };
        let work = if long && stretch {
            rng.range(3000, 8000)
        } else if rng.chance(60) {
            rng.range(500, 6000)
        } else {
            rng.range(10, 120)
        };
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
