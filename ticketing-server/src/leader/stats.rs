//! What the leader counts, as plain numbers. The pure core keeps no metrics
//! registry: its driver takes these after every pass
//! ([`super::Leader::take_stats`]) and adds them to the server's metrics
//! (`Metrics::record_leader`, docs/metrics.md), and a test or a simulation
//! reads them the same way.

use std::collections::BTreeMap;

/// Counts since the last [`super::Leader::take_stats`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Acquires answered `T` (their wait ran out).
    pub timeouts: u64,
    /// Requests answered `B` (a bound was reached).
    pub busy: u64,
    /// `Q` queries answered.
    pub queries: u64,
    /// `Tick` commands committed.
    pub ticks: u64,
    /// Releases that freed what they named.
    pub releases_released: u64,
    /// Leases that ended while held.
    pub expiries: u64,
    /// Releases of what the caller did not hold.
    pub releases_not_holder: u64,
    /// Proposals that failed (not committed, or not known to be).
    pub proposal_errors: u64,
    /// Committed grants by kind, in `GrantKind::NAMES` order.
    pub grants_by_kind: [u64; 3],
    /// How long each committed grant waited since its `A` was read, ms (one
    /// entry per grant, oldest first).
    pub grant_waits_ms: Vec<u32>,
    /// Requests answered `B` by a principal's own cap, by principal.
    pub principal_busy: BTreeMap<String, u64>,
}
