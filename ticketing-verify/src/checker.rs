//! The checker: reads a run's history and final database and finds
//! violations of the lock's promises (docs/protocol.md §5, §8, §11, and the
//! counted and multi-key grants of docs/protocol.md):
//!
//! 1. holders of a key that cannot hold it together, with overlapping
//!    `[grant answer, conservative deadline]` windows (a window ends early
//!    when its holder calls release): two owners (exclusive holders, `A` or a
//!    key of a `K`), an exclusive holder beside a counted one, a counted
//!    grant given while `n` or more counted holders held the key (`n` of its
//!    own request: requests with different `n` on one key are each granted
//!    by their own, docs/protocol.md "A key's holders"), two holders of one
//!    `(key, slot)`, a slot outside `0..n`;
//! 2. a token not strictly above an earlier grant's on its key (in answer
//!    order, for every pair of grants of which one is exclusive: two counted
//!    grants of one commit may be answered in either order), a token decrease
//!    across leader changes (a grant whose acquire was called after another
//!    grant was answered must carry a larger token: one counter per domain),
//!    or one token on two different grants;
//! 3. an accepted write whose token is not above every earlier accepted one
//!    it is fenced against (commit order of the database: an exclusive write
//!    against every earlier write of its key, a counted write against the
//!    earlier exclusive writes of its key and those of its `(key, slot)`);
//! 4. counter ≠ accepted writes;
//! 5. an acknowledged write lost;
//! 6. a stale write (issued after its client's conservative deadline) accepted;
//! 7. no grant within the failover bound after a fault heals;
//! 8. a multi-key ticket that does not hold exactly the keys asked for (a
//!    partial basket);
//! 9. a stall: a key not granted for longer than the failover bound while
//!    acquires of it were waiting and no fault was active (a deadlock of
//!    multi-key requests shows as one);
//! 10. FIFO overtaking: an acquire granted while an earlier request on one
//!     of its keys still waited at the same leader (`fifo`);
//! 11. an acquire that ended Indeterminate but was granted (the client's
//!     release lane found it held, `IndeterminateHeld`) and breaks rule 1
//!     or 2 (`indeterminate_grants`).
//!
//! Every comparison is between timestamps of the one system-wide monotonic
//! clock: no wall clock, no clock skew assumption.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use crate::db::Final;
use crate::history::{keys_of, Event};

mod fifo;
mod holders;
mod indeterminate;
mod liveness;
mod report;
mod writes;
use fifo::fifo as fifo_order;
pub use fifo::{FIFO_ORDER_MARGIN_NS, FIFO_SETTLE_NS};
use holders::{holders_and_token_order, one_token_counter, one_token_per_grant, whole_baskets};
use indeterminate::indeterminate_grants;
use liveness::{fault_table, stalls};
pub use report::{by_fault, last_line, table};
use writes::{accepted_in_commit_order, writes_kept_and_fenced};

/// One row of the table: what happened while a fault ran and until the next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// The fault (`baseline` before the first).
    pub fault: String,
    /// Grants answered in the window.
    pub grants: u64,
    /// Acquires that ended Indeterminate.
    pub indeterminate: u64,
    /// Acquires that ended Busy.
    pub busy: u64,
    /// Acquires not granted within their wait (`T`).
    pub timeouts: u64,
    /// Acquires with no routable connection, or other errors.
    pub unavailable: u64,
    /// Writes refused by the fence.
    pub fence_refusals: u64,
    /// From the heal to the first grant, ms (None: none).
    pub recovery_ms: Option<u64>,
    /// The longest time without any grant inside the window, ms.
    pub longest_gap_ms: u64,
}

/// The checker's verdict.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every violation, in words.
    pub violations: Vec<String>,
    /// The table rows.
    pub rows: Vec<Row>,
    /// Grants in the history (a multi-key grant counts once).
    pub grants: u64,
    /// Counted grants among them.
    pub counted: u64,
    /// Multi-key grants among them.
    pub baskets: u64,
    /// Faults injected.
    pub faults: u64,
    /// Writes refused by the fence (a multi-key write counts once).
    pub fence_refusals: u64,
    /// Writes accepted (a multi-key write counts once).
    pub accepted: u64,
    /// Acquires that ended Indeterminate and were found granted (one per
    /// grant, whatever its number of keys).
    pub indeterminate_held: u64,
    /// Acquires that ended Indeterminate and were found not held (`Q` answered `N`).
    pub indeterminate_not_held: u64,
    /// Acquires that ended Indeterminate with nothing learnt about them.
    pub indeterminate_unresolved: u64,
    /// Pairs of requests on a common key whose arrival order the FIFO rule
    /// could prove, outside the faults that reach the servers and the
    /// disturbances: the pairs it checked.
    pub fifo_pairs: u64,
}

#[derive(Debug, Clone)]
struct Grant {
    client: u32,
    /// Every key it holds (one unless multi-key).
    keys: Vec<String>,
    /// Multi-key: the keys asked for.
    want: Vec<String>,
    token: u64,
    call: u64,
    ans: u64,
    dl: u64,
    end: u64,
    /// Counted: its `n`.
    n: Option<u16>,
    slot: Option<u16>,
}

impl Grant {
    fn key(&self) -> &str {
        &self.keys[0]
    }

    fn what(&self) -> String {
        match (self.n, self.slot) {
            (Some(n), Some(s)) => format!("token {} (client {}, counted n={n} slot {s})", self.token, self.client),
            (Some(n), None) => format!("token {} (client {}, counted n={n} no slot)", self.token, self.client),
            _ if self.keys.len() > 1 => {
                format!("token {} (client {}, all of {})", self.token, self.client, self.keys.join(","))
            }
            _ => format!("token {} (client {})", self.token, self.client),
        }
    }
}

/// Checks one run. `bound_ns`: the failover bound after a heal (and the
/// longest a waited-for key may go without a grant); `begin`, `end`: when
/// the workload started and stopped (a fault healed less than the bound
/// before it is only checked if a grant came).
pub fn check(events: &[Event], fin: &Final, bound_ns: u64, begin: u64, end: u64) -> Report {
    let mut r = Report::default();
    let grants = grants_of(events);
    r.grants = grants.len() as u64;
    r.counted = grants.iter().filter(|g| g.n.is_some()).count() as u64;
    r.baskets = grants.iter().filter(|g| !g.want.is_empty()).count() as u64;
    holders_and_token_order(&grants, &mut r);
    one_token_counter(&grants, &mut r);
    one_token_per_grant(&grants, &mut r);
    whole_baskets(&grants, &mut r);
    accepted_in_commit_order(fin, &mut r);
    writes_kept_and_fenced(events, fin, &grants, &mut r);
    fault_table(events, &grants, bound_ns, begin, end, &mut r);
    stalls(events, &grants, bound_ns, begin, end, &mut r);
    fifo_order(events, &mut r);
    indeterminate_grants(events, &grants, &mut r);
    r
}

/// Every grant with the end of its ownership (its release or its
/// deadline), in answer order.
fn grants_of(events: &[Event]) -> Vec<Grant> {
    let mut releases: HashMap<(u32, String, u64), u64> = HashMap::new();
    for e in events {
        if let Event::Release { client, key, token, start, .. } = e {
            releases.insert((*client, key.clone(), *token), *start);
        }
    }
    let mut grants: Vec<Grant> = events
        .iter()
        .filter_map(|e| match e {
            Event::Grant { client, key, token, call, ans, dl, keys, want, n, slot, .. } => {
                let end = releases.get(&(*client, key.clone(), *token)).map_or(*dl, |s| (*s).min(*dl));
                let mut all: Vec<String> = keys_of(key, keys).into_iter().map(str::to_owned).collect();
                // `key` is the first key whatever `keys` says.
                if all[0] != *key {
                    all.insert(0, key.clone());
                }
                Some(Grant {
                    client: *client,
                    keys: all,
                    want: want.clone(),
                    token: *token,
                    call: *call,
                    ans: *ans,
                    dl: *dl,
                    end,
                    n: *n,
                    slot: *slot,
                })
            }
            _ => None,
        })
        .collect();
    grants.sort_by_key(|g| (g.ans, g.token));
    grants
}

/// The grants of each key (a multi-key grant under each of its keys), in answer order.
fn by_key(grants: &[Grant]) -> BTreeMap<&str, Vec<&Grant>> {
    let mut m: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        let mut seen = BTreeSet::new();
        for k in &g.keys {
            if seen.insert(k.as_str()) {
                m.entry(k.as_str()).or_default().push(g);
            }
        }
    }
    m
}

/// Nanoseconds in a millisecond and in a second (history timestamps are ns).
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
