//! W7 (Ticketing only): leader memory under churn. `clients` clients each
//! acquire and release one key of their own, with 250 s leases, until
//! `pairs` grant/release pairs are done; the leader's RSS is sampled after a
//! warm-up and every tenth of the run. With timers that leave with their
//! holder (docs/benchmarks.md, "W7") the RSS stays flat; a timer heap that
//! keeps every released grant's lease timer until it falls due grows with
//! every pair for 250 s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::procs::{self, Servers};
use crate::system::{Acq, Backend};
use crate::workloads::Report;

/// The longest lease: a released grant's timer would otherwise stay this long.
const LEASE: Duration = Duration::from_secs(250);
/// Pairs before the first RSS sample (allocator and queues warmed up).
const WARMUP: u64 = 20_000;

fn mib(b: u64) -> f64 {
    b as f64 / 1_048_576.0
}

/// Runs W7 against `servers` (the leader's RSS is measured: node 0 when standalone).
pub async fn w7(system: &str, servers: &Servers, backend: Arc<dyn Backend>, clients: usize, pairs: u64) -> Report {
    let leader = backend.leader().await.unwrap_or(0);
    let pid = servers.pids()[leader];
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (backend, done, errors) = (backend.clone(), done.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let key = format!("w7-{}-{c}", std::process::id());
            while done.load(Ordering::Relaxed) < pairs {
                match backend.acquire(c, &key, Duration::from_secs(5), LEASE).await {
                    Acq::Granted(held) => match backend.release(c, held).await {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
        }));
    }
    let mut samples = Vec::new();
    let mut next = WARMUP.min(pairs);
    while done.load(Ordering::Relaxed) < pairs && !tasks.iter().all(|t| t.is_finished()) {
        if done.load(Ordering::Relaxed) >= next {
            if let Some(b) = procs::rss_bytes(pid) {
                samples.push(b);
            }
            next += (pairs / 10).max(1);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for t in tasks {
        let _ = t.await;
    }
    if let Some(b) = procs::rss_bytes(pid) {
        samples.push(b);
    }
    let first = samples.first().copied().unwrap_or(0);
    let max = samples.iter().copied().max().unwrap_or(0);
    let last = samples.last().copied().unwrap_or(0);
    let secs = start.elapsed().as_secs_f64();
    let mut r = Report::new(system, "W7");
    r.set("clients", clients)
        .set("pairs", done.load(Ordering::Relaxed))
        .set("lease_s", LEASE.as_secs())
        .set("ops_s", format!("{:.0}", done.load(Ordering::Relaxed) as f64 / secs))
        .set("rss_first_mib", format!("{:.1}", mib(first)))
        .set("rss_max_mib", format!("{:.1}", mib(max)))
        .set("rss_last_mib", format!("{:.1}", mib(last)))
        .set("rss_growth_mib", format!("{:.1}", mib(max.saturating_sub(first))))
        .set("rss_samples", samples.iter().map(|b| format!("{:.1}", mib(*b))).collect::<Vec<_>>().join("/"))
        .set("errors", errors.load(Ordering::Relaxed));
    r
}
