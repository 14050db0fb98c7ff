//! The console's rates (`/ui/api/series`, docs/operating.md "Rates"): once a
//! second a sampler reads the metrics registry as `/metrics` would encode it
//! and keeps the per-second deltas in a bounded ring (the last
//! [`CAPACITY`] seconds). Reading the encoded text keeps the sampler to the
//! metric names `/metrics` exports, the same names the dashboard and the
//! alert rules use.

use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Samples kept: five minutes at one a second.
pub const CAPACITY: usize = 300;
/// Time between samples.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// One scrape of the registry: every series (name with labels) and its value.
pub type Scrape = HashMap<String, f64>;

/// Parses OpenMetrics text into its series; comments and unparsable lines are skipped.
pub fn parse(text: &str) -> Scrape {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_owned(), value.parse::<f64>().ok()?))
        })
        .collect()
}

/// One second of the console's charts. Rates are per second over the
/// interval; percentiles are of the grants committed in the interval
/// (`None` without any).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sample {
    /// When it was taken, Unix milliseconds.
    pub t_ms: u64,
    /// Grants committed per second.
    pub grants: f64,
    /// Releases answered `R` per second.
    pub releases: f64,
    /// Leases that ended per second.
    pub expiries: f64,
    /// Acquires answered `T` per second.
    pub timeouts: f64,
    /// Acquires answered `B` per second.
    pub busy: f64,
    /// Median acquire-to-grant time of the interval's grants, ms.
    pub wait_p50_ms: Option<f64>,
    /// Its 90th percentile, ms.
    pub wait_p90_ms: Option<f64>,
    /// Its 99th percentile, ms.
    pub wait_p99_ms: Option<f64>,
    /// Waiters queued.
    pub waiters: f64,
    /// Keys held.
    pub held_keys: f64,
    /// Client connections.
    pub connections: f64,
    /// Raft log entries committed per second (cluster mode).
    pub raft_commits: Option<f64>,
    /// Median time to commit a proposed batch through Raft in the interval, ms (the leader).
    pub commit_p50_ms: Option<f64>,
    /// Its 99th percentile, ms.
    pub commit_p99_ms: Option<f64>,
}

const WAIT_BUCKET: &str = "ticketing_grant_wait_seconds_bucket{le=\"";
const COMMIT_BUCKET: &str = "ticketing_raft_commit_seconds_bucket{le=\"";

/// The `q` quantile (ms) of the histogram observations between two scrapes,
/// interpolated linearly inside a bucket as Prometheus' `histogram_quantile`;
/// an observation above the last finite bound counts as that bound.
fn quantile_ms(prev: &Scrape, cur: &Scrape, bucket: &str, q: f64) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = cur
        .iter()
        .filter_map(|(name, v)| {
            let le = name.strip_prefix(bucket)?.strip_suffix("\"}")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, (v - prev.get(name).copied().unwrap_or(0.0)).max(0.0)))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = (0.0, 0.0);
    for &(le, count) in &buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower.0 * 1000.0);
            }
            let width = count - lower.1;
            let frac = if width > 0.0 { (rank - lower.1) / width } else { 1.0 };
            return Some((lower.0 + (le - lower.0) * frac) * 1000.0);
        }
        lower = (le, count);
    }
    Some(lower.0 * 1000.0)
}

impl Sample {
    /// The sample of the `secs` seconds between two scrapes.
    pub fn between(prev: &Scrape, cur: &Scrape, secs: f64, t_ms: u64) -> Sample {
        let rate = |name: &str| {
            let d = cur.get(name).copied().unwrap_or(0.0) - prev.get(name).copied().unwrap_or(0.0);
            if secs > 0.0 {
                d.max(0.0) / secs
            } else {
                0.0
            }
        };
        let gauge = |name: &str| cur.get(name).copied().unwrap_or(0.0);
        Sample {
            t_ms,
            grants: rate("ticketing_grants_total"),
            releases: rate("ticketing_releases_total{result=\"released\"}"),
            expiries: rate("ticketing_expiries_total"),
            timeouts: rate("ticketing_timeouts_total"),
            busy: rate("ticketing_busy_total"),
            wait_p50_ms: quantile_ms(prev, cur, WAIT_BUCKET, 0.5),
            wait_p90_ms: quantile_ms(prev, cur, WAIT_BUCKET, 0.9),
            wait_p99_ms: quantile_ms(prev, cur, WAIT_BUCKET, 0.99),
            waiters: gauge("ticketing_waiters"),
            held_keys: gauge("ticketing_held_keys"),
            connections: gauge("ticketing_connections"),
            raft_commits: cur.contains_key("ticketing_raft_commit_index").then(|| rate("ticketing_raft_commit_index")),
            commit_p50_ms: quantile_ms(prev, cur, COMMIT_BUCKET, 0.5),
            commit_p99_ms: quantile_ms(prev, cur, COMMIT_BUCKET, 0.99),
        }
    }
}

/// The body of `/ui/api/series`.
#[derive(Debug, Serialize)]
pub struct SeriesBody {
    /// Milliseconds between samples.
    pub interval_ms: u64,
    /// Most samples kept.
    pub capacity: usize,
    /// Oldest first.
    pub samples: Vec<Sample>,
}

/// The ring of samples and the last scrape.
#[derive(Debug, Default)]
pub struct Series {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ring: VecDeque<Sample>,
    last: Option<(std::time::Instant, Scrape)>,
}

impl Series {
    /// Adds a scrape taken at `at`: a sample against the previous one (none for the first).
    pub fn record(&self, at: std::time::Instant, scrape: Scrape) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((prev_at, prev)) = &g.last {
            let secs = at.saturating_duration_since(*prev_at).as_secs_f64();
            let t_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
            let sample = Sample::between(prev, &scrape, secs, t_ms);
            if g.ring.len() == CAPACITY {
                g.ring.pop_front();
            }
            g.ring.push_back(sample);
        }
        g.last = Some((at, scrape));
    }

    /// Every sample kept, oldest first.
    pub fn snapshot(&self) -> SeriesBody {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        SeriesBody {
            interval_ms: INTERVAL.as_millis() as u64,
            capacity: CAPACITY,
            samples: g.ring.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn rates_and_percentiles_from_two_scrapes_of_the_registry() {
        let m = Metrics::new(true);
        m.observe_grant(1);
        let prev = parse(&m.encode().unwrap());
        for _ in 0..8 {
            m.observe_grant(3); // bucket (0.001, 0.005]
        }
        m.observe_grant(200); // (0.1, 0.25]
        m.observe_grant(200);
        m.releases_released.inc();
        m.releases_not_holder.inc();
        m.busy.inc_by(4);
        m.waiters.set(7);
        m.raft.as_ref().unwrap().commit_index.set(20);
        m.raft.as_ref().unwrap().commit.observe(0.003); // (2ms, 5ms]
        let cur = parse(&m.encode().unwrap());
        let s = Sample::between(&prev, &cur, 2.0, 5);
        assert_eq!((s.grants, s.releases, s.busy, s.timeouts), (5.0, 0.5, 2.0, 0.0));
        assert_eq!((s.waiters, s.raft_commits), (7.0, Some(10.0)));
        assert!((s.commit_p50_ms.unwrap() - 3.5).abs() < 1e-9, "{s:?}");
        // 10 grants: rank 5 is inside (1ms, 5ms]: 1 + 4 * 5/8 = 3.5 ms.
        assert!((s.wait_p50_ms.unwrap() - 3.5).abs() < 1e-9, "{s:?}");
        // rank 9.9 is inside (100ms, 250ms]: 100 + 150 * 1.9/2.
        assert!((s.wait_p99_ms.unwrap() - 242.5).abs() < 1e-9, "{s:?}");
        let idle = Sample::between(&cur, &cur, 1.0, 6);
        assert_eq!((idle.grants, idle.wait_p50_ms), (0.0, None));
        let standalone = parse(&Metrics::new(false).encode().unwrap());
        assert_eq!(Sample::between(&standalone, &standalone, 1.0, 0).raft_commits, None);
    }

    #[test]
    fn ring_is_bounded_and_oldest_first() {
        let s = Series::default();
        let t0 = std::time::Instant::now();
        for i in 0..(CAPACITY as u64 + 10) {
            let scrape = Scrape::from([("ticketing_grants_total".to_owned(), (i * i) as f64)]);
            s.record(t0 + Duration::from_secs(i), scrape);
        }
        let body = s.snapshot();
        assert_eq!(body.samples.len(), CAPACITY);
        // The newest sample is between i-1 and i = CAPACITY + 9: (i² - (i-1)²) per second.
        let i = CAPACITY as f64 + 9.0;
        assert_eq!(body.samples.last().unwrap().grants, i * i - (i - 1.0) * (i - 1.0));
        assert!(body.samples.first().unwrap().grants < body.samples.last().unwrap().grants);
    }

    #[test]
    fn parse_skips_comments_and_junk() {
        let p = parse("# TYPE x counter\nx_total 3\ny{a=\"b c\"} 4.5\nbroken\nz NaNx\n# EOF\n");
        assert_eq!(p.len(), 2);
        assert_eq!(p["y{a=\"b c\"}"], 4.5);
    }
}
