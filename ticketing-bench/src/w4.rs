//! W4 (Ticketing only): memory and capacity. Fill `keys` held keys (wait 0,
//! lease 250 s, never released), report the grant rate, the latency of the
//! granted acquires (`p50_us`/`p99_us`) and the RSS of every node; then
//! queue `waiters` acquires on held keys, then hold `conns` client
//! connections. The sandbox this was written in refuses new loopback
//! connections past a few hundred at a time, so connections are opened one
//! broker at a time with a pause, and the report gives what was reached.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ticketing_client::TicketBroker;

use crate::procs::{self, Servers};
use crate::stats::Samples;
use crate::workloads::Report;

/// Acquires queued per broker: below the 1024 requests a connection may
/// have pending (docs/protocol.md).
const WAITERS_PER_BROKER: usize = 1000;

/// Held keys filled through one broker: a large fill uses several brokers
/// (in this sandbox a single client connection ended after ~345 000 grants
/// with the same server build either way; see docs/benchmarks.md, W4).
const KEYS_PER_BROKER: u64 = 200_000;

/// W4 parameters.
pub struct W4 {
    /// Held keys to fill.
    pub keys: u64,
    /// Waiters to queue.
    pub waiters: usize,
    /// Client connections to hold.
    pub conns: usize,
    /// Concurrent fillers.
    pub clients: usize,
}

/// The server flags W4 needs (limits above its targets).
pub fn server_flags(p: &W4) -> Vec<String> {
    vec![
        "--max-held-keys".into(),
        (p.keys + 1000).to_string(),
        "--max-waiters".into(),
        (p.waiters + 1000).to_string(),
        "--max-connections".into(),
        (p.conns + p.waiters / WAITERS_PER_BROKER * 2 + 100).to_string(),
    ]
}

fn rss_list(servers: &Servers) -> String {
    servers
        .pids()
        .iter()
        .map(|&pid| procs::rss_bytes(pid).map_or("?".to_owned(), |b| format!("{:.1}", b as f64 / 1048576.0)))
        .collect::<Vec<_>>()
        .join("/")
}

/// Runs W4 against running `servers` through `broker`.
pub async fn w4(system: &str, servers: &Servers, broker: &TicketBroker, p: &W4) -> Report {
    let mut r = Report::new(system, "W4");
    let leader = servers.leader().await.unwrap_or(0);
    let run = std::process::id();

    // Fill.
    let next = Arc::new(AtomicU64::new(0));
    let granted = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let mut fill_brokers = vec![broker.clone()];
    while (fill_brokers.len() as u64) < p.keys.div_ceil(KEYS_PER_BROKER) {
        let Ok(b) = TicketBroker::builder(servers.client_addrs()).build() else { break };
        if !b.wait_ready(Duration::from_secs(5)).await {
            break;
        }
        fill_brokers.push(b);
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..p.clients {
        let broker = fill_brokers[c % fill_brokers.len()].clone();
        let (next, granted, failed) = (next.clone(), granted.clone(), failed.clone());
        let first_error = first_error.clone();
        let keys = p.keys;
        tasks.push(tokio::spawn(async move {
            let mut lat = Samples::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                // A leader change under load makes a few acquires
                // Indeterminate: counted, and the fill goes on unless they pile up.
                if i >= keys || failed.load(Ordering::Relaxed) > (keys / 100).max(100) {
                    break;
                }
                let key = format!("w4-{run}-{i}");
                let t0 = Instant::now();
                let got = broker.acquire(&key, Duration::ZERO, Duration::from_secs(250), Duration::ZERO).await;
                if matches!(got, Ok(Some(_))) {
                    lat.add(t0.elapsed());
                }
                match got {
                    Ok(Some(t)) => {
                        granted.fetch_add(1, Ordering::Relaxed);
                        // Held until its lease ends: dropping would release it.
                        std::mem::forget(t);
                    }
                    other => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let why = match other {
                            Err(e) => format!("key {i}: {e}"),
                            _ => format!("key {i}: not granted"),
                        };
                        first_error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(why);
                    }
                }
            }
            lat
        }));
    }
    let mut lat = Samples::default();
    for t in tasks {
        if let Ok(l) = t.await {
            lat.merge(l);
        }
    }
    let fill = start.elapsed();
    let held = granted.load(Ordering::Relaxed);
    r.set("ops_s", format!("{:.0}", held as f64 / fill.as_secs_f64()))
        .set("p50_us", lat.quantile(0.5))
        .set("p99_us", lat.quantile(0.99))
        .set("held_keys", held)
        .set("fill_failures", failed.load(Ordering::Relaxed))
        .set("fill_brokers", fill_brokers.len())
        .set("fill_s", format!("{:.1}", fill.as_secs_f64()))
        .set("rss_mb_after_fill", rss_list(servers));

    // Waiters: on held keys, spread over brokers of at most 1000 each, at
    // the leader of now (it may have changed during the fill).
    let leader = servers.leader().await.unwrap_or(leader);
    let admin = servers.nodes[leader].admin;
    r.set("leader_node", leader);
    let addr = servers.client_addrs()[leader].clone();
    let mut brokers = Vec::new();
    let mut waiting = Vec::new();
    let mut queued = 0usize;
    while queued < p.waiters && held > 0 {
        let Ok(b) = TicketBroker::builder([addr.clone()]).build() else { break };
        if !b.wait_ready(Duration::from_secs(5)).await {
            break;
        }
        let n = WAITERS_PER_BROKER.min(p.waiters - queued);
        for j in 0..n {
            let b = b.clone();
            let key = format!("w4-{run}-{}", (queued + j) as u64 % held);
            waiting.push(tokio::spawn(async move {
                let _ = b.acquire(&key, Duration::from_secs(250), Duration::from_secs(1), Duration::ZERO).await;
            }));
        }
        queued += n;
        brokers.push(b);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut seen = 0.0;
    let end = Instant::now() + Duration::from_secs(30);
    while Instant::now() < end {
        seen = procs::metric(admin, "ticketing_waiters").await.unwrap_or(0.0);
        if seen as usize >= queued {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    r.set("waiters", seen as u64).set("rss_mb_with_waiters", rss_list(servers));

    // Connections: one broker (two connections to one address) at a time.
    let mut extra = Vec::new();
    let mut refused = 0;
    let target_brokers = p.conns.div_ceil(2);
    while extra.len() < target_brokers && refused < 3 {
        let Ok(b) = TicketBroker::builder([addr.clone()]).build() else { break };
        if b.wait_ready(Duration::from_secs(3)).await {
            extra.push(b);
            refused = 0;
        } else {
            refused += 1;
            b.close().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if extra.len() % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let conns = procs::metric(admin, "ticketing_connections").await.unwrap_or(0.0);
    r.set("connections", conns as u64).set("conns_target", p.conns).set("rss_mb_with_conns", rss_list(servers));
    for w in waiting {
        w.abort();
    }
    for b in brokers.iter().chain(extra.iter()) {
        b.close().await;
    }
    if let Some(why) = first_error.lock().unwrap_or_else(|p| p.into_inner()).take() {
        r.set("first_fill_error", why.replace(' ', "_"));
    }
    r
}
