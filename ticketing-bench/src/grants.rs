//! W5 and W6: counted and multi-key grants (docs/benchmarks.md, "Workloads
//! and fields"). Both record every hold for the cross-client check of
//! `crate::holds`: W5 per slot of the semaphore (two holders on one slot at
//! once is a duplicate grant), W6 per key of the baskets.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::holds::Hold;
use crate::stats::Samples;
use crate::system::{Acq, Backend};
use crate::workloads::{Counters, Report, LEASE};

/// W5: permits of the semaphore.
pub const PERMITS: u16 = 4;
/// W6: keys the baskets are drawn from.
pub const BASKET_KEYS: usize = 64;
/// W6: keys per basket.
pub const BASKET: usize = 4;
/// W5/W6 acquire wait: far longer than a turn in the queue takes.
const WAIT: Duration = Duration::from_secs(10);
/// W6: no grant for this long while requests wait is a stall.
pub const STALL_WINDOW: Duration = Duration::from_secs(3);

/// Grants per client: `max_grants`, `min_grants` and `fairness` (= max/min), as W2 reports them.
fn fairness(r: &mut Report, per_client: &[u64]) {
    let max = per_client.iter().copied().max().unwrap_or(0);
    let min = per_client.iter().copied().min().unwrap_or(0);
    r.set("max_grants", max)
        .set("min_grants", min)
        .set("fairness", if min == 0 { "inf".to_owned() } else { format!("{:.3}", max as f64 / min as f64) });
}

/// The most holds that overlap at one instant.
fn max_concurrent(holds: &[Hold]) -> usize {
    // Ends sort before starts at the same instant: back-to-back holds do not overlap.
    let mut edges: Vec<(Instant, i8)> = holds.iter().flat_map(|h| [(h.granted, 1), (h.released, -1)]).collect();
    edges.sort_unstable();
    let (mut now, mut max) = (0i64, 0i64);
    for (_, d) in edges {
        now += i64::from(d);
        max = max.max(now);
    }
    max as usize
}

/// W5: `clients` clients on ONE key, a semaphore of [`PERMITS`] permits:
/// each acquires a permit (`S … 4`), yields to the runtime once, releases,
/// and acquires again. `ops_s` = grants/s, `p50_us`/`p99_us` = acquire
/// latency; grants per client (fairness, as W2); grants per slot; the
/// cross-client check on the holds of each slot (every slot in `0..4`
/// used, never two holders on one slot at once, tokens rising per slot) and
/// the most holds seen at once (at most 4).
pub async fn w5(system: &str, backend: Arc<dyn Backend>, clients: usize, duration: Duration) -> Report {
    let start = Instant::now();
    let deadline = start + duration;
    let key = Arc::new(format!("w5-{}", std::process::id()));
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let out_of_range = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (backend, key, counters, stop, out_of_range) =
            (backend.clone(), key.clone(), counters.clone(), stop.clone(), out_of_range.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Samples::default();
            let mut grants = 0u64;
            let mut per_slot = [0u64; PERMITS as usize];
            let mut holds = Vec::new();
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                match backend.acquire_shared(c, &key, PERMITS, WAIT, LEASE).await {
                    Acq::Granted(held) => {
                        let now = Instant::now();
                        if now < deadline {
                            lat.add(now - t0);
                            grants += 1;
                        }
                        tokio::task::yield_now().await;
                        match held.slot.filter(|s| *s < PERMITS) {
                            Some(s) => {
                                per_slot[usize::from(s)] += 1;
                                let released = Instant::now();
                                holds.push(Hold {
                                    key: u64::from(s),
                                    client: c as u32,
                                    token: held.token,
                                    granted: now,
                                    released,
                                });
                            }
                            None => {
                                out_of_range.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        if let Err(e) = backend.release(c, held).await {
                            counters.error(format!("release:{e}"));
                        }
                    }
                    missed => {
                        // An Indeterminate permit may stay held until its lease ends: the
                        // fairness and slot figures would no longer compare.
                        if counters.missed(missed).await {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            (lat, grants, per_slot, holds)
        }));
    }
    let mut lat = Samples::default();
    let mut per_client = Vec::new();
    let mut per_slot = [0u64; PERMITS as usize];
    let mut holds = Vec::new();
    for t in tasks {
        match t.await {
            Ok((l, g, s, h)) => {
                lat.merge(l);
                per_client.push(g);
                for (a, b) in per_slot.iter_mut().zip(s) {
                    *a += b;
                }
                holds.extend(h);
            }
            Err(_) => per_client.push(0),
        }
    }
    let total: u64 = per_client.iter().sum();
    let mut r = Report::new(system, "W5");
    r.set("clients", clients)
        .set("permits", PERMITS)
        .set("ops_s", format!("{:.0}", total as f64 / duration.as_secs_f64()))
        .set("p50_us", lat.quantile(0.5))
        .set("p99_us", lat.quantile(0.99))
        .set("grants", total);
    fairness(&mut r, &per_client);
    r.set("slots_used", per_slot.iter().filter(|&&g| g > 0).count())
        .set("slot_grants", per_slot.iter().map(u64::to_string).collect::<Vec<_>>().join("/"))
        .set("slot_out_of_range", out_of_range.load(Ordering::Relaxed))
        .set("max_holders", max_concurrent(&holds));
    counters.put(&mut r, holds);
    r
}

/// A small deterministic generator for the baskets (xorshift64*): the
/// bench needs spread, not quality.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }

    /// `k` distinct indexes of `0..n`, in random order.
    fn basket(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k {
            let j = i + self.below(n - i);
            all.swap(i, j);
        }
        all.truncate(k);
        all
    }
}

/// What W6's stall detector watches.
#[derive(Default)]
struct Progress {
    /// Requests sent and not yet answered.
    waiting: AtomicUsize,
    /// Grants so far.
    grants: AtomicU64,
}

/// W6: `clients` clients, each acquiring baskets of [`BASKET`] keys out of
/// [`BASKET_KEYS`] (`K`, keys drawn at random and sent in random order),
/// yielding once, releasing, and drawing the next basket. `ops_s` =
/// grants/s, `p50_us`/`p99_us` = acquire latency; the cross-client check on
/// the holds of every key; and a stall detector: a window of
/// [`STALL_WINDOW`] without a grant while requests wait is a stall
/// (`stalls`, `longest_gap_ms`). Baskets in random order on locks taken one
/// key at a time deadlock; here the earliest waiting request always
/// progresses, so a correct server shows 0 stalls.
pub async fn w6(system: &str, backend: Arc<dyn Backend>, clients: usize, duration: Duration) -> Report {
    let start = Instant::now();
    let deadline = start + duration;
    let run = std::process::id();
    let names: Arc<Vec<String>> = Arc::new((0..BASKET_KEYS).map(|k| format!("w6-{run}-{k}")).collect());
    let counters = Arc::new(Counters::default());
    let progress = Arc::new(Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (backend, names, counters, progress, stop) =
            (backend.clone(), names.clone(), counters.clone(), progress.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(u64::from(run) << 20 | c as u64);
            let mut lat = Samples::default();
            let mut grants = 0u64;
            let mut holds = Vec::new();
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                let basket = rng.basket(BASKET_KEYS, BASKET);
                let keys: Vec<String> = basket.iter().map(|&k| names[k].clone()).collect();
                progress.waiting.fetch_add(1, Ordering::SeqCst);
                let t0 = Instant::now();
                let got = backend.acquire_all(c, &keys, WAIT, LEASE).await;
                progress.waiting.fetch_sub(1, Ordering::SeqCst);
                match got {
                    Acq::Granted(held) => {
                        let now = Instant::now();
                        progress.grants.fetch_add(1, Ordering::SeqCst);
                        if now < deadline {
                            lat.add(now - t0);
                            grants += 1;
                        }
                        tokio::task::yield_now().await;
                        let released = Instant::now();
                        for &k in &basket {
                            holds.push(Hold {
                                key: k as u64,
                                client: c as u32,
                                token: held.token,
                                granted: now,
                                released,
                            });
                        }
                        if let Err(e) = backend.release(c, held).await {
                            counters.error(format!("release:{e}"));
                        }
                    }
                    missed => {
                        // An Indeterminate basket may hold its keys until the lease ends, which
                        // the stall detector would take for a stall.
                        if counters.missed(missed).await {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            (lat, grants, holds)
        }));
    }
    // The stall detector: sampled every 20 ms until every client is done
    // (a request still waiting at the deadline is watched to its answer).
    let (mut stalls, mut longest, mut in_stall) = (0u64, Duration::ZERO, false);
    let (mut last_grants, mut since) = (0u64, Instant::now());
    while !tasks.iter().all(|t| t.is_finished()) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = Instant::now();
        let g = progress.grants.load(Ordering::SeqCst);
        if g != last_grants || progress.waiting.load(Ordering::SeqCst) == 0 {
            // Progress, or nobody waiting: no gap.
            last_grants = g;
            since = now;
            in_stall = false;
            continue;
        }
        let gap = now - since;
        longest = longest.max(gap);
        if gap >= STALL_WINDOW && !in_stall {
            stalls += 1;
            in_stall = true;
        }
    }
    let mut lat = Samples::default();
    let mut per_client = Vec::new();
    let mut holds = Vec::new();
    for t in tasks {
        match t.await {
            Ok((l, g, h)) => {
                lat.merge(l);
                per_client.push(g);
                holds.extend(h);
            }
            Err(_) => per_client.push(0),
        }
    }
    let total: u64 = per_client.iter().sum();
    let mut r = Report::new(system, "W6");
    r.set("clients", clients)
        .set("basket", BASKET)
        .set("basket_keys", BASKET_KEYS)
        .set("ops_s", format!("{:.0}", total as f64 / duration.as_secs_f64()))
        .set("p50_us", lat.quantile(0.5))
        .set("p99_us", lat.quantile(0.99))
        .set("grants", total);
    fairness(&mut r, &per_client);
    r.set("stalls", stalls).set("longest_gap_ms", longest.as_millis()).set("stall_window_ms", STALL_WINDOW.as_millis());
    counters.put(&mut r, holds);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baskets_are_distinct_keys_in_range_and_vary() {
        let mut rng = Rng::new(7);
        let mut firsts = std::collections::HashSet::new();
        for _ in 0..200 {
            let b = rng.basket(BASKET_KEYS, BASKET);
            assert_eq!(b.len(), BASKET);
            assert!(b.iter().all(|&k| k < BASKET_KEYS));
            let mut d = b.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(d.len(), BASKET, "{b:?}");
            firsts.insert(b[0]);
        }
        // Random order: many different first keys, not a sorted prefix.
        assert!(firsts.len() > 20, "{firsts:?}");
    }

    #[test]
    fn max_concurrent_counts_overlaps_not_back_to_back_holds() {
        let t = Instant::now();
        let h = |from: u64, to: u64| Hold {
            key: 0,
            client: 0,
            token: 1,
            granted: t + Duration::from_micros(from),
            released: t + Duration::from_micros(to),
        };
        assert_eq!(max_concurrent(&[h(0, 10), h(10, 20), h(20, 30)]), 1);
        assert_eq!(max_concurrent(&[h(0, 10), h(5, 20), h(6, 7), h(15, 30)]), 3);
        assert_eq!(max_concurrent(&[]), 0);
    }
}
