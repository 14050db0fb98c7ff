//! The server's metrics, registered once in one `prometheus-client`
//! [`Registry`] (prefix `ticketing_`) and encoded by `/metrics` as they are.
//! The manager counts answers and keeps the gauges in step with its
//! projection; the listener counts connections; `/metrics` sets the
//! leadership and Raft gauges just before encoding.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A gauge of seconds.
pub type Seconds = Gauge<f64, AtomicU64>;

/// Upper bounds (seconds) of the Raft commit histogram `ticketing_raft_commit_seconds`.
pub const RAFT_COMMIT_BUCKETS: [f64; 12] = [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0];

/// Upper bounds (seconds) of the acquire-to-grant histogram `ticketing_grant_wait_seconds`.
pub const GRANT_WAIT_BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 120.0];

/// The Raft gauges (cluster mode only).
#[derive(Debug)]
pub struct RaftGauges {
    /// Current Raft term.
    pub term: Gauge,
    /// Committed log index.
    pub commit_index: Gauge,
    /// Applied log index.
    pub applied_index: Gauge,
    /// 1 if this node is the Raft leader.
    pub is_leader: Gauge,
    /// Voters in the membership.
    pub voters: Gauge,
    /// On the leader: seconds since a quorum last acknowledged it (0 elsewhere).
    pub quorum_ack_age: Seconds,
    /// `--election-timeout-max-ms` in seconds: past this quorum-ack age the leader stops serving.
    pub election_timeout: Seconds,
    /// Time to commit one proposed batch through Raft (leader).
    pub commit: Histogram,
    /// Campaigns started at once after refusing a candidate with a shorter
    /// log (docs/deployment.md, "Failover timing").
    pub hurried_campaigns: Counter,
}

/// The abuse-limit counters (docs/configuration.md, "Limits"): what each limit refused or closed.
/// Cheap to clone (every metric is shared); the peer port gets a clone.
#[derive(Debug, Clone, Default)]
pub struct LimitMetrics {
    /// Client connections closed for not completing AUTH in `--handshake-timeout`.
    pub client_handshake_timeouts: Counter,
    /// Client connections refused for `--max-connections` (`E overloaded`).
    pub client_connections_refused: Counter,
    /// Client connections closed because `--max-write-buffer-bytes` of answers piled up unread.
    pub write_buffer_overflows: Counter,
    /// Unauthenticated client connections closed to admit a newer one (`--max-preauth-*`).
    pub client_preauth_evicted: Counter,
    /// Unauthenticated peer-port connections closed to admit a newer one (`--max-peer-preauth-*`).
    pub peer_preauth_evicted: Counter,
    /// Snapshot chunks refused for `--max-snapshot-bytes`.
    pub snapshot_refused: Counter,
    /// Admin connections refused for `--admin-max-connections` (in all or from one address).
    pub admin_connections_refused: Counter,
    /// Admin connections closed before their request head to admit a newer one.
    pub admin_preauth_evicted: Counter,
    /// Open connections on the peer port (handshaking included).
    pub peer_connections: Gauge,
    /// Peer connections refused for `--max-peer-connections`.
    pub peer_connections_refused: Counter,
    /// Peer connections closed for not completing the handshake in `--peer-handshake-timeout`.
    pub peer_handshake_timeouts: Counter,
    /// Peer connections closed for a bad frame: out of range, not finished within `--peer-frame-timeout`, or not a message.
    pub peer_bad_frames: Counter,
    /// Peer connections closed for holding more request bytes in flight than
    /// `--max-peer-in-flight-bytes-per-conn` or, with every other peer
    /// connection, `--max-peer-in-flight-bytes`.
    pub peer_budget_closed: Counter,
    /// Request bytes in flight on all accepted peer connections (started
    /// frames and requests being served; `--max-peer-in-flight-bytes`).
    pub peer_in_flight_bytes: Gauge,
}

impl LimitMetrics {
    fn register(&self, registry: &mut Registry) {
        let c = |r: &mut Registry, name: &str, help: &str, m: &Counter| r.register(name, help, m.clone());
        c(
            registry,
            "client_handshake_timeouts",
            "Client connections closed by --handshake-timeout",
            &self.client_handshake_timeouts,
        );
        c(
            registry,
            "client_connections_refused",
            "Client connections refused by --max-connections",
            &self.client_connections_refused,
        );
        c(
            registry,
            "write_buffer_overflows",
            "Client connections closed because --max-write-buffer-bytes of answers were unread",
            &self.write_buffer_overflows,
        );
        c(
            registry,
            "client_preauth_evicted",
            "Unauthenticated client connections closed to admit a newer one (--max-preauth-*)",
            &self.client_preauth_evicted,
        );
        c(
            registry,
            "peer_preauth_evicted",
            "Unauthenticated peer-port connections closed to admit a newer one (--max-peer-preauth-*)",
            &self.peer_preauth_evicted,
        );
        c(
            registry,
            "admin_connections_refused",
            "Admin connections refused: --admin-max-connections in all, or a quarter of it from one address",
            &self.admin_connections_refused,
        );
        c(
            registry,
            "admin_preauth_evicted",
            "Admin connections without a request head yet closed to admit a newer one (--admin-max-connections)",
            &self.admin_preauth_evicted,
        );
        c(
            registry,
            "snapshot_refused",
            "Snapshot chunks refused: they would take the snapshot beyond --max-snapshot-bytes",
            &self.snapshot_refused,
        );
        registry.register("peer_connections", "Open peer-port connections", self.peer_connections.clone());
        c(
            registry,
            "peer_connections_refused",
            "Peer connections refused by --max-peer-connections",
            &self.peer_connections_refused,
        );
        c(
            registry,
            "peer_handshake_timeouts",
            "Peer connections closed by --peer-handshake-timeout",
            &self.peer_handshake_timeouts,
        );
        c(
            registry,
            "peer_bad_frames",
            "Peer connections closed for an oversized, unfinished (--peer-frame-timeout) or malformed frame",
            &self.peer_bad_frames,
        );
        c(
            registry,
            "peer_budget_closed",
            "Peer connections closed for request bytes in flight over --max-peer-in-flight-bytes(-per-conn)",
            &self.peer_budget_closed,
        );
        registry.register(
            "peer_in_flight_bytes",
            "Request bytes in flight on the accepted peer connections (--max-peer-in-flight-bytes)",
            self.peer_in_flight_bytes.clone(),
        );
    }
}

/// Every metric of the server, each registered once in [`Metrics::encode`]'s registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Grants committed (direct and hand-over): `ticketing_grants_total`.
    pub grants: Counter,
    /// Grants by kind: `ticketing_grants_by_kind_total{kind="exclusive"|"shared"|"all"}`
    /// (`A`, `S`, `K`; a multi-key grant counts once).
    pub grants_by_kind: [Counter; 3],
    /// Releases answered `R`: `ticketing_releases_total{result="released"}`.
    pub releases_released: Counter,
    /// Releases answered `N`: `ticketing_releases_total{result="not_holder"}`.
    pub releases_not_holder: Counter,
    /// Leases that ended (expiries committed).
    pub expiries: Counter,
    /// Acquires answered `T`.
    pub timeouts: Counter,
    /// Acquires answered `B`.
    pub busy: Counter,
    /// Proposals that failed (not leader, unknown outcome, shutdown).
    pub proposal_errors: Counter,
    /// `Q` queries answered (`H` or `N`).
    pub queries: Counter,
    /// `Tick` commands committed (domain time).
    pub ticks: Counter,
    /// Sum of `waited_ms` over all grants (`ticketing_grant_wait_ms_sum_total`).
    pub grant_wait_ms_sum: Counter,
    /// Time from reading an acquire to committing its grant (`ticketing_grant_wait_seconds`).
    pub grant_wait: Histogram,
    /// Waiters now queued.
    pub waiters: Gauge,
    /// Keys now held, grants in flight included.
    pub held_keys: Gauge,
    /// Authenticated or handshaking client connections.
    pub connections: Gauge,
    /// 1 if this node serves clients.
    pub serving: Gauge,
    /// 1 if `/readyz` answers 200 (docs/deployment.md, "Health").
    pub ready: Gauge,
    /// When this process started, in seconds since the Unix epoch: a change
    /// is a restart (a crash, a fail-stop on a disk error, a deploy).
    pub start_time: Seconds,
    /// The `--max-waiters` limit (waiters queued at once, all keys).
    pub max_waiters: Gauge,
    /// Raft state; `Some` in cluster mode.
    pub raft: Option<RaftGauges>,
    /// What the abuse limits refused or closed.
    pub limits: LimitMetrics,
    /// Reloads (SIGHUP) that replaced everything: `ticketing_reloads_total{result="ok"}`.
    pub reloads_ok: Counter,
    /// Reloads that kept some old material (a file did not read): `ticketing_reloads_total{result="failed"}`.
    pub reloads_failed: Counter,
    /// Requests answered `F`, by principal: `ticketing_forbidden_total{principal}`.
    pub forbidden: Family<Vec<(String, String)>, Counter>,
    /// Acquires answered `B` for their principal's `max_waiters` or
    /// `max_held_keys`: `ticketing_principal_busy_total{principal}`.
    pub principal_busy: Family<Vec<(String, String)>, Counter>,
}

impl Default for Metrics {
    /// The metrics of a standalone server.
    fn default() -> Metrics {
        Metrics::new(false)
    }
}

impl Metrics {
    /// Creates and registers every metric; the Raft gauges only with `cluster`.
    pub fn new(cluster: bool) -> Metrics {
        let mut registry = Registry::with_prefix("ticketing");
        let grants = Counter::default();
        registry.register("grants", "Grants committed (direct and hand-over)", grants.clone());
        let by_kind = Family::<Vec<(String, String)>, Counter>::default();
        let kind = |k: &str| by_kind.get_or_create(&vec![("kind".to_owned(), k.to_owned())]).clone();
        let grants_by_kind = crate::locks::GrantKind::NAMES.map(kind);
        registry.register(
            "grants_by_kind",
            "Grants committed by kind: exclusive (A), shared (S, counted), all (K, multi-key)",
            by_kind,
        );
        let releases = Family::<Vec<(String, String)>, Counter>::default();
        let result = |r: &str| vec![("result".to_owned(), r.to_owned())];
        let releases_released = releases.get_or_create(&result("released")).clone();
        let releases_not_holder = releases.get_or_create(&result("not_holder")).clone();
        registry.register("releases", "Releases by result", releases);
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let expiries = counter(&mut registry, "expiries", "Leases that ended");
        let timeouts = counter(&mut registry, "timeouts", "Acquires answered T");
        let busy = counter(&mut registry, "busy", "Acquires answered B");
        let proposal_errors = counter(&mut registry, "proposal_errors", "Proposals that failed");
        let queries = counter(&mut registry, "queries", "Q queries answered (H or N)");
        let ticks = counter(&mut registry, "ticks", "Tick commands committed (domain time)");
        let grant_wait_ms_sum =
            counter(&mut registry, "grant_wait_ms_sum", "Sum of waited_ms over all grants (acquire to grant)");
        let grant_wait = Histogram::new(GRANT_WAIT_BUCKETS.into_iter());
        registry.register(
            "grant_wait_seconds",
            "Time from reading an acquire to committing its grant",
            grant_wait.clone(),
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let waiters = gauge(&mut registry, "waiters", "Waiters queued");
        let held_keys = gauge(&mut registry, "held_keys", "Keys held");
        let connections = gauge(&mut registry, "connections", "Client connections");
        let serving = gauge(&mut registry, "serving", "1 if this node serves clients");
        let ready = gauge(
            &mut registry,
            "ready",
            "1 if this node is ready (/readyz): it serves, or as a follower it hears a leader",
        );
        let start_time = Seconds::default();
        start_time
            .set(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()));
        registry.register(
            "start_time_seconds",
            "When this process started (Unix time): a change is a restart",
            start_time.clone(),
        );
        let max_waiters = gauge(&mut registry, "max_waiters", "The --max-waiters limit");
        let reloads = Family::<Vec<(String, String)>, Counter>::default();
        let reloads_ok = reloads.get_or_create(&result("ok")).clone();
        let reloads_failed = reloads.get_or_create(&result("failed")).clone();
        registry.register("reloads", "Reloads of tokens and certificates (SIGHUP) by result", reloads);
        let forbidden = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "forbidden",
            "Requests answered F (the principal may not use the key), by principal",
            forbidden.clone(),
        );
        let principal_busy = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "principal_busy",
            "Acquires answered B because their principal was at its max_waiters or max_held_keys, by principal",
            principal_busy.clone(),
        );
        let raft = cluster.then(|| RaftGauges {
            term: gauge(&mut registry, "raft_term", "Current Raft term"),
            commit_index: gauge(&mut registry, "raft_commit_index", "Committed log index"),
            applied_index: gauge(&mut registry, "raft_applied_index", "Applied log index"),
            is_leader: gauge(&mut registry, "raft_is_leader", "1 if this node is the Raft leader"),
            voters: gauge(&mut registry, "raft_voters", "Voters in the membership"),
            quorum_ack_age: {
                let g = Seconds::default();
                let help = "On the leader: seconds since a quorum last acknowledged it (0 elsewhere)";
                registry.register("raft_quorum_ack_age_seconds", help, g.clone());
                g
            },
            election_timeout: {
                let g = Seconds::default();
                let help = "--election-timeout-max-ms in seconds (the leader stops serving past this quorum-ack age)";
                registry.register("raft_election_timeout_seconds", help, g.clone());
                g
            },
            commit: {
                let h = Histogram::new(RAFT_COMMIT_BUCKETS.into_iter());
                registry.register("raft_commit_seconds", "Time to commit one proposed batch through Raft", h.clone());
                h
            },
            hurried_campaigns: counter(
                &mut registry,
                "raft_hurried_campaigns",
                "Elections this node started at once after refusing a candidate with a shorter log",
            ),
        });
        let limits = LimitMetrics::default();
        limits.register(&mut registry);
        Metrics {
            registry,
            grants,
            grants_by_kind,
            releases_released,
            releases_not_holder,
            expiries,
            timeouts,
            busy,
            proposal_errors,
            queries,
            ticks,
            grant_wait_ms_sum,
            grant_wait,
            waiters,
            held_keys,
            connections,
            serving,
            ready,
            start_time,
            max_waiters,
            raft,
            limits,
            reloads_ok,
            reloads_failed,
            forbidden,
            principal_busy,
        }
    }

    /// Counts one request of `principal` answered `F`.
    pub fn forbidden(&self, principal: &str) {
        self.forbidden.get_or_create(&vec![("principal".to_owned(), principal.to_owned())]).inc();
    }

    /// Counts one reload: `ok` when every file was re-read.
    pub fn count_reload(&self, ok: bool) {
        if ok {
            self.reloads_ok.inc();
        } else {
            self.reloads_failed.inc();
        }
    }

    /// Counts one committed grant that waited `waited_ms` since its `A` was read.
    pub fn observe_grant(&self, waited_ms: u32) {
        self.grants.inc();
        self.grant_wait_ms_sum.inc_by(u64::from(waited_ms));
        self.grant_wait.observe(f64::from(waited_ms) / 1000.0);
    }

    /// Adds what the leader counted (its [`crate::leader::stats::Stats`]
    /// since the last call).
    pub fn record_leader(&self, s: crate::leader::stats::Stats) {
        self.timeouts.inc_by(s.timeouts);
        self.busy.inc_by(s.busy);
        self.queries.inc_by(s.queries);
        self.ticks.inc_by(s.ticks);
        self.releases_released.inc_by(s.releases_released);
        self.expiries.inc_by(s.expiries);
        self.releases_not_holder.inc_by(s.releases_not_holder);
        self.proposal_errors.inc_by(s.proposal_errors);
        for (c, n) in self.grants_by_kind.iter().zip(s.grants_by_kind) {
            c.inc_by(n);
        }
        for waited_ms in s.grant_waits_ms {
            self.observe_grant(waited_ms);
        }
        for (principal, n) in s.principal_busy {
            self.principal_busy.get_or_create(&vec![("principal".to_owned(), principal)]).inc_by(n);
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Converts a count to a gauge value (saturating).
pub fn gauge_value(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_once_with_a_real_histogram() {
        let m = Metrics::new(true);
        m.observe_grant(3);
        m.observe_grant(2000);
        m.releases_released.inc();
        m.held_keys.set(4);
        let text = m.encode().unwrap();
        for line in [
            "ticketing_grants_total 2",
            "ticketing_grant_wait_ms_sum_total 2003",
            "ticketing_releases_total{result=\"released\"} 1",
            "ticketing_releases_total{result=\"not_holder\"} 0",
            "ticketing_grant_wait_seconds_count 2",
            "ticketing_grant_wait_seconds_bucket{le=\"0.005\"} 1",
            "ticketing_grant_wait_seconds_bucket{le=\"5.0\"} 2",
            "ticketing_held_keys 4",
            "ticketing_raft_term 0",
            "ticketing_write_buffer_overflows_total 0",
            "ticketing_peer_connections 0",
            "ticketing_peer_bad_frames_total 0",
            "ticketing_raft_quorum_ack_age_seconds 0.0",
            "ticketing_raft_commit_seconds_count 0",
            "ticketing_raft_hurried_campaigns_total 0",
            "ticketing_max_waiters 0",
            "ticketing_peer_budget_closed_total 0",
            "ticketing_peer_in_flight_bytes 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
        }
        assert_eq!(text.matches("# TYPE ticketing_grants counter").count(), 1);
        assert!(text.ends_with("# EOF\n"));
        assert!(!Metrics::new(false).encode().unwrap().contains("raft"));
    }
}
