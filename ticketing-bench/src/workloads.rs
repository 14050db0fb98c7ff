//! Workloads W1–W3, driven through any [`Backend`] (W4 is Ticketing only:
//! `crate::w4`; W5 and W6 are in `crate::grants`). Every loop ends at the run's deadline; an acquire waits at
//! most its own bound, so a run ends within deadline + that bound.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::holds::{self, Hold};
use crate::stats::Samples;
use crate::system::{Acq, Backend};

/// One output line: `system=… workload=… k=v …`.
pub struct Report {
    /// Fields in print order.
    pub fields: Vec<(String, String)>,
}

impl Report {
    /// A report for `system` / `workload`.
    pub fn new(system: &str, workload: &str) -> Report {
        Report { fields: vec![("system".into(), system.into()), ("workload".into(), workload.into())] }
    }

    /// Adds a field.
    pub fn set(&mut self, k: &str, v: impl ToString) -> &mut Report {
        self.fields.push((k.to_owned(), v.to_string()));
        self
    }

    /// The line.
    pub fn line(&self) -> String {
        self.fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
    }
}

/// Counters shared by a workload's clients.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) pairs: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) indeterminate: AtomicU64,
    pub(crate) not_granted: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Counters {
    /// Counts an acquire that was not granted (`T`, Indeterminate, or a
    /// failure, after which the client pauses 5 ms so a failover is not
    /// spun on); `true` when it may have been granted (Indeterminate).
    pub(crate) async fn missed(&self, acq: Acq) -> bool {
        match acq {
            Acq::Granted(_) => false,
            Acq::NotGranted => {
                self.not_granted.fetch_add(1, Ordering::Relaxed);
                false
            }
            Acq::Indeterminate => {
                self.indeterminate.fetch_add(1, Ordering::Relaxed);
                true
            }
            Acq::Failed(e) => {
                self.error(format!("acquire:{e}"));
                // No leader yet (failover): do not spin.
                tokio::time::sleep(Duration::from_millis(5)).await;
                false
            }
        }
    }

    pub(crate) fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut f = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(what);
        }
    }

    /// The counters and the verdict of the cross-client check of `holds`.
    pub(crate) fn put(&self, r: &mut Report, holds: Vec<Hold>) {
        let v = holds::check(holds);
        r.set("errors", self.errors.load(Ordering::Relaxed));
        r.set("not_granted", self.not_granted.load(Ordering::Relaxed));
        r.set("indeterminate", self.indeterminate.load(Ordering::Relaxed));
        r.set("dup_grants", v.duplicates());
        r.set("overlaps", v.overlaps);
        r.set("token_regressions", v.token_regressions);
        r.set("holds_checked", v.holds);
        r.set("shared_keys", v.shared_keys);
        if let Some(e) = self.first_error.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            r.set("first_error", e.replace(' ', "_"));
        }
    }
}

/// Acquire wait of W1/W3: a key is free at once unless another client holds
/// it for a moment, so the bound only matters while there is no leader; an
/// attempt stuck that long is given up (Indeterminate where the system may
/// still grant it) and the key retired, so W3's first grant is seen within
/// about a second.
const KEY_WAIT: Duration = Duration::from_secs(1);
/// Lease of W1–W3 (and W5, W6).
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// Events W3 watches: the kill instant and the first grant after it.
#[derive(Default)]
struct Failover {
    killed_at: Mutex<Option<Instant>>,
    first_grant: Mutex<Option<Instant>>,
}

/// The key space of W1/W3: `slots` keys shared by every client. A slot's
/// generation moves on when a hold on it may outlive its holder's view (an
/// Indeterminate acquire, a failed release): its key then stays held until
/// its lease ends, so every client moves to the slot's next key.
struct KeySpace {
    run: String,
    generations: Vec<AtomicU32>,
}

impl KeySpace {
    fn new(prefix: &str, slots: usize) -> KeySpace {
        KeySpace {
            run: format!("{prefix}-{}", std::process::id()),
            generations: (0..slots.max(1)).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// The key of `slot` now: its name and its id for the hold registry.
    fn key(&self, slot: usize) -> (String, u64, u32) {
        let g = self.generations[slot].load(Ordering::Relaxed);
        (format!("{}-{slot}-{g}", self.run), ((slot as u64) << 32) | u64::from(g), g)
    }

    /// Retires generation `g` of `slot` (no-op if another client already did).
    fn retire(&self, slot: usize, g: u32) {
        let _ = self.generations[slot].compare_exchange(g, g.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// W1 (and W3's load): `clients` clients acquire → release as fast as they
/// can until `deadline` on a key space of `key_space` keys shared by all of
/// them: client `c` takes slot `(c + n) % key_space` for its `n`-th pair, so
/// with `key_space` = `clients` the clients mostly move in step on distinct
/// keys, and every key is held by every client in turn; a smaller key
/// space makes them contend. Every hold is recorded for the cross-client
/// check; the holder yields to the runtime once while holding, so other
/// clients' answers (a grant of the same key, if the lock were broken) can
/// arrive inside its hold.
async fn shared_keys(
    backend: Arc<dyn Backend>,
    clients: usize,
    key_space: usize,
    deadline: Instant,
    prefix: &str,
    failover: Option<Arc<Failover>>,
) -> (Samples, Arc<Counters>, Vec<Hold>) {
    let counters = Arc::new(Counters::default());
    let keys = Arc::new(KeySpace::new(prefix, key_space));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let backend = backend.clone();
        let counters = counters.clone();
        let failover = failover.clone();
        let keys = keys.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Samples::default();
            let mut holds = Vec::new();
            let mut n = 0usize;
            while Instant::now() < deadline {
                let slot = (c + n) % keys.generations.len();
                n += 1;
                let (key, key_id, generation) = keys.key(slot);
                let t0 = Instant::now();
                match backend.acquire(c, &key, KEY_WAIT, LEASE).await {
                    Acq::Granted(held) => {
                        let now = Instant::now();
                        lat.add(now - t0);
                        let token = held.token;
                        if let Some(f) = &failover {
                            let killed = *f.killed_at.lock().unwrap_or_else(|p| p.into_inner());
                            if killed.is_some_and(|k| t0 > k) {
                                let mut fg = f.first_grant.lock().unwrap_or_else(|p| p.into_inner());
                                if fg.is_none() {
                                    *fg = Some(now);
                                }
                            }
                        }
                        tokio::task::yield_now().await;
                        holds.push(Hold {
                            key: key_id,
                            client: c as u32,
                            token,
                            granted: now,
                            released: Instant::now(),
                        });
                        match backend.release(c, held).await {
                            Ok(()) => {
                                if now < deadline {
                                    counters.pairs.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            Err(e) => {
                                counters.error(format!("release:{e}"));
                                keys.retire(slot, generation);
                            }
                        }
                    }
                    missed => {
                        if counters.missed(missed).await {
                            keys.retire(slot, generation);
                        }
                    }
                }
            }
            (lat, holds)
        }));
    }
    let mut all = Samples::default();
    let mut holds = Vec::new();
    for t in tasks {
        if let Ok((lat, h)) = t.await {
            all.merge(lat);
            holds.extend(h);
        }
    }
    (all, counters, holds)
}

/// W1: pairs/s and acquire latency of `clients` clients on a shared key
/// space of `key_space` keys.
pub async fn w1(
    system: &str,
    backend: Arc<dyn Backend>,
    clients: usize,
    key_space: usize,
    duration: Duration,
) -> Report {
    let start = Instant::now();
    let cpu = crate::stats::own_cpu();
    let (mut lat, counters, holds) = shared_keys(backend, clients, key_space, start + duration, "w1", None).await;
    let cpu = crate::stats::own_cpu().saturating_sub(cpu);
    let secs = duration.as_secs_f64();
    let pairs = counters.pairs.load(Ordering::Relaxed);
    let mut r = Report::new(system, "W1");
    r.set("clients", clients)
        .set("ops_s", format!("{:.0}", pairs as f64 / secs))
        .set("p50_us", lat.quantile(0.5))
        .set("p99_us", lat.quantile(0.99))
        .set("pairs", pairs)
        .set("samples", lat.len())
        .set("key_space", key_space)
        // The load generator's CPU per pair: the client library's cost (and
        // the bench's own bookkeeping, the same for every system).
        .set("client_cpu_us_per_pair", format!("{:.1}", cpu.as_secs_f64() * 1e6 / pairs.max(1) as f64));
    counters.put(&mut r, holds);
    r
}

/// W2: `clients` clients on ONE key, each acquire (long wait) → release →
/// acquire again. Hand-overs/s, release-to-next-grant latency (from the
/// moment the holder sends its release to the next grant's arrival), grants
/// per client (max/min: FIFO fairness), and mutual exclusion checked on the
/// holds of every client (grant answer received → release sent, the holder
/// yielding to the runtime once inside it) and their token order.
pub async fn w2(system: &str, backend: Arc<dyn Backend>, clients: usize, duration: Duration) -> Report {
    let start = Instant::now();
    let deadline = start + duration;
    let key = Arc::new(format!("w2-{}", std::process::id()));
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::default();
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (backend, key, last_release, counters, stop) =
            (backend.clone(), key.clone(), last_release.clone(), counters.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut handover = Samples::default();
            let mut grants = 0u64;
            let mut holds = Vec::new();
            while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                match backend.acquire(c, &key, Duration::from_secs(30), LEASE).await {
                    Acq::Granted(held) => {
                        let now = Instant::now();
                        if let Some(r) = last_release.lock().unwrap_or_else(|p| p.into_inner()).take() {
                            if now < deadline {
                                handover.add(now - r);
                            }
                        }
                        if now < deadline {
                            grants += 1;
                        }
                        tokio::task::yield_now().await;
                        let released = Instant::now();
                        holds.push(Hold { key: 0, client: c as u32, token: held.token, granted: now, released });
                        *last_release.lock().unwrap_or_else(|p| p.into_inner()) = Some(released);
                        if let Err(e) = backend.release(c, held).await {
                            counters.error(format!("release:{e}"));
                        }
                    }
                    missed => {
                        if counters.missed(missed).await {
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            (handover, grants, holds)
        }));
    }
    let mut lat = Samples::default();
    let mut per_client = Vec::new();
    let mut holds = Vec::new();
    for t in tasks {
        match t.await {
            Ok((h, g, hs)) => {
                lat.merge(h);
                per_client.push(g);
                holds.extend(hs);
            }
            Err(_) => per_client.push(0),
        }
    }
    let total: u64 = per_client.iter().sum();
    let max = per_client.iter().copied().max().unwrap_or(0);
    let min = per_client.iter().copied().min().unwrap_or(0);
    let mut r = Report::new(system, "W2");
    r.set("clients", clients)
        .set("ops_s", format!("{:.0}", total as f64 / duration.as_secs_f64()))
        .set("p50_us", lat.quantile(0.5))
        .set("p99_us", lat.quantile(0.99))
        .set("grants", total)
        .set("max_grants", max)
        .set("min_grants", min)
        .set("fairness", if min == 0 { "inf".to_owned() } else { format!("{:.3}", max as f64 / min as f64) });
    counters.put(&mut r, holds);
    r
}

/// How W3 kills the leader: the backend names the leader's index, `pids`
/// maps indexes to processes. Returns the killed index.
pub type Killer = Box<dyn FnMut(usize) + Send>;

/// Starts a killed node again and waits until every node is a voter (W3
/// with several kills).
pub type Restarter =
    Box<dyn FnMut(usize) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>> + Send>;

/// How W3 kills: the killer, how many times, and how a killed node comes
/// back between kills (without one, W3 kills once).
pub struct Kills {
    /// Kills node `i`.
    pub kill: Killer,
    /// How many kills.
    pub kills: usize,
    /// Starts a killed node again.
    pub restart: Option<Restarter>,
}

/// W3's time budget per kill when it kills more than once: the failover,
/// the restart of the killed node and its catch-up.
pub const W3_ROUND: Duration = Duration::from_secs(6);

/// W3: W1 with `clients` clients on `key_space` shared keys; after a third of the run, `kill -9` of the
/// leader. Time from the kill to a new leader (as the backend sees it) and
/// to the first grant of an acquire sent after the kill. With `restart`,
/// `kills` times: the killed node is started again and the next kill
/// waits until every node is a voter; the report adds the min, median and
/// max of the kill-to-first-grant times.
pub async fn w3(
    system: &str,
    backend: Arc<dyn Backend>,
    clients: usize,
    key_space: usize,
    duration: Duration,
    k: Kills,
) -> Report {
    let Kills { mut kill, kills, mut restart } = k;
    let kills = if restart.is_some() { kills.max(1) } else { 1 };
    let duration = if kills > 1 { duration.max(W3_ROUND * (kills as u32 + 1)) } else { duration };
    let start = Instant::now();
    let deadline = start + duration;
    let failover = Arc::new(Failover::default());
    let load = tokio::spawn(shared_keys(backend.clone(), clients, key_space, deadline, "w3", Some(failover.clone())));
    tokio::time::sleep(W3_ROUND.min(duration / 3)).await;
    let mut r = Report::new(system, "W3");
    r.set("clients", clients);
    let mut leaders = Vec::new();
    let mut firsts = Vec::new();
    for round in 0..kills {
        let Some(old) = backend.leader().await else {
            r.set("error", format!("no_leader_found_before_kill_{}", round + 1));
            break;
        };
        let killed_at = Instant::now();
        kill(old);
        // Only now, with the leader gone: a grant recorded before this
        // point belongs to the round before.
        *failover.killed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(killed_at);
        *failover.first_grant.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let mut new_leader = None;
        while Instant::now() < killed_at + Duration::from_secs(30) {
            if let Some(l) = backend.leader().await {
                if l != old {
                    new_leader = Some(killed_at.elapsed());
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        leaders.push(new_leader);
        // The first grant after this kill (the load records it).
        let wait_until = killed_at + Duration::from_secs(30);
        let first = loop {
            let f = *failover.first_grant.lock().unwrap_or_else(|p| p.into_inner());
            if f.is_some() || Instant::now() > wait_until || Instant::now() > deadline {
                break f;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        firsts.push(first.map(|f| f - killed_at));
        if let Some(restart) = restart.as_mut().filter(|_| round + 1 < kills) {
            if let Err(e) = restart(old).await {
                r.set("error", format!("restart_after_kill_{}: {e}", round + 1));
                break;
            }
        }
    }
    let (mut lat, counters, holds) = load.await.unwrap_or_default();
    let secs = |d: Option<Duration>| d.map_or("none".to_owned(), |d| format!("{:.3}", d.as_secs_f64()));
    r.set("ops_s", format!("{:.0}", counters.pairs.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()))
        .set("p50_us", lat.quantile(0.5))
        .set("p99_us", lat.quantile(0.99))
        .set("leader_s", secs(leaders.first().copied().flatten()))
        .set("first_grant_s", secs(firsts.first().copied().flatten()))
        .set("key_space", key_space);
    if kills > 1 {
        let mut got: Vec<Duration> = firsts.iter().flatten().copied().collect();
        got.sort();
        let each: Vec<String> = firsts.iter().map(|f| secs(*f)).collect();
        r.set("kills", kills).set("kills_granted", got.len()).set("first_grants_s", each.join(","));
        if !got.is_empty() {
            r.set("first_grant_min_s", secs(got.first().copied()))
                .set("first_grant_median_s", secs(Some(got[got.len() / 2])))
                .set("first_grant_max_s", secs(got.last().copied()));
        }
    }
    counters.put(&mut r, holds);
    r
}
