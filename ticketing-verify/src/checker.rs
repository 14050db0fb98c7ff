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
mod indeterminate;
use fifo::fifo as fifo_order;
pub use fifo::{FIFO_ORDER_MARGIN_NS, FIFO_SETTLE_NS};
use indeterminate::indeterminate_grants;

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

/// 1 and 2, per key: only compatible holders at once; tokens increase in grant order.
fn holders_and_token_order(grants: &[Grant], r: &mut Report) {
    for (key, gs) in &by_key(grants) {
        let mut active: Vec<&Grant> = Vec::new();
        // The largest token so far of any grant, and of an exclusive one.
        let mut max_any: Option<&Grant> = None;
        let mut max_excl: Option<&Grant> = None;
        for g in gs {
            active.retain(|h| h.end > g.ans);
            let ms = g.ans / 1_000_000;
            match g.n {
                None => {
                    for h in &active {
                        let v = if h.n.is_none() {
                            format!(
                                "two owners of {key}: token {} (client {}) held until {} ms, token {} (client {}) granted at {ms} ms",
                                h.token,
                                h.client,
                                h.end / 1_000_000,
                                g.token,
                                g.client
                            )
                        } else {
                            format!(
                                "exclusive and counted holders of {key} at once: {} held until {} ms, exclusive {} granted at {ms} ms",
                                h.what(),
                                h.end / 1_000_000,
                                g.what()
                            )
                        };
                        r.violations.push(v);
                    }
                }
                Some(n) => {
                    for h in active.iter().filter(|h| h.n.is_none()) {
                        r.violations.push(format!(
                            "exclusive and counted holders of {key} at once: exclusive {} held until {} ms, {} granted at {ms} ms",
                            h.what(),
                            h.end / 1_000_000,
                            g.what()
                        ));
                    }
                    let counted: Vec<&&Grant> = active.iter().filter(|h| h.n.is_some()).collect();
                    let holders = counted.len() + 1;
                    if holders > usize::from(n) {
                        let tokens: Vec<String> =
                            counted.iter().map(|h| h.token.to_string()).chain([g.token.to_string()]).collect();
                        r.violations.push(format!(
                            "more counted holders of {key} than n: {holders} at {ms} ms (tokens {}), the last granted {} asked for n = {n}",
                            tokens.join(","),
                            g.what()
                        ));
                    }
                    match g.slot {
                        Some(s) if s >= n => r
                            .violations
                            .push(format!("slot {s} of {key} outside 0..{n}: {} granted at {ms} ms", g.what())),
                        Some(s) => {
                            for h in counted.iter().filter(|h| h.slot == Some(s)) {
                                r.violations.push(format!(
                                    "slot {s} of {key} held twice: {} held until {} ms, {} granted at {ms} ms",
                                    h.what(),
                                    h.end / 1_000_000,
                                    g.what()
                                ));
                            }
                        }
                        None => r.violations.push(format!("counted grant of {key} without a slot: {}", g.what())),
                    }
                }
            }
            // Answer order is token order whenever one of the two is exclusive.
            let before = if g.n.is_none() { max_any } else { max_excl };
            if let Some(p) = before {
                if g.token <= p.token {
                    r.violations.push(format!(
                        "token order on {key}: token {} (client {}) granted after token {} (client {})",
                        g.token, g.client, p.token, p.client
                    ));
                }
            }
            if !matches!(max_any, Some(x) if x.token >= g.token) {
                max_any = Some(g);
            }
            if g.n.is_none() && !matches!(max_excl, Some(x) if x.token >= g.token) {
                max_excl = Some(g);
            }
            active.push(g);
        }
    }
}

/// 2, across keys and leader changes: the domain has one counter, so a
/// grant called after another was answered has a larger token.
fn one_token_counter(grants: &[Grant], r: &mut Report) {
    let mut prefix_max = Vec::with_capacity(grants.len());
    let mut m: Option<&Grant> = None;
    for g in grants {
        if !matches!(m, Some(x) if g.token <= x.token) {
            m = Some(g);
        }
        prefix_max.push(m);
    }
    for g in grants {
        let before = grants.partition_point(|x| x.ans < g.call);
        if before > 0 {
            if let Some(x) = prefix_max[before - 1] {
                if x.token >= g.token {
                    r.violations.push(format!(
                        "token decrease: token {} on {} (called at {} ms) is not above token {} on {} (answered at {} ms)",
                        g.token,
                        g.key(),
                        g.call / 1_000_000,
                        x.token,
                        x.key(),
                        x.ans / 1_000_000
                    ));
                }
            }
        }
    }
}

/// 2: one token per grant. The same token twice is only the same grant
/// seen again (one client, the same keys: the owner asked again while the
/// server still had it as holder).
fn one_token_per_grant(grants: &[Grant], r: &mut Report) {
    let mut seen: HashMap<u64, &Grant> = HashMap::new();
    for g in grants {
        match seen.get(&g.token) {
            Some(p) if p.client != g.client || p.keys != g.keys || p.n != g.n => r.violations.push(format!(
                "one token on two grants: {} on {} and {} on {}",
                p.what(),
                p.keys.join(","),
                g.what(),
                g.keys.join(",")
            )),
            Some(_) => {}
            None => {
                seen.insert(g.token, g);
            }
        }
    }
}

/// 8: a multi-key ticket holds exactly the keys asked for, each once.
fn whole_baskets(grants: &[Grant], r: &mut Report) {
    for g in grants.iter().filter(|g| !g.want.is_empty()) {
        let want: BTreeSet<&str> = g.want.iter().map(String::as_str).collect();
        let got: BTreeSet<&str> = g.keys.iter().map(String::as_str).collect();
        if want != got || got.len() != g.keys.len() {
            r.violations.push(format!(
                "partial basket: client {} asked for {} and was granted {} with token {}",
                g.client,
                g.want.join(","),
                g.keys.join(","),
                g.token
            ));
        }
    }
}

/// 3: accepted writes in commit order, against what each is fenced by: an
/// exclusive write (slot `None`) every earlier write of its key, a counted
/// write the earlier exclusive writes of its key and those of its slot.
fn accepted_in_commit_order(fin: &Final, r: &mut Report) {
    let mut last_any: HashMap<&str, u64> = HashMap::new();
    let mut last_excl: HashMap<&str, u64> = HashMap::new();
    let mut last_slot: HashMap<(&str, u16), u64> = HashMap::new();
    for (key, token, client, slot) in &fin.writes {
        let k = key.as_str();
        let p = match slot {
            None => last_any.get(k).copied(),
            Some(s) => last_excl.get(k).copied().max(last_slot.get(&(k, *s)).copied()),
        };
        if let Some(p) = p {
            if *token <= p {
                let at = slot.map_or(String::new(), |s| format!(" slot {s}"));
                r.violations.push(format!(
                    "accepted write on {key}{at} with token {token} (client {client}) after an accepted token {p}"
                ));
            }
        }
        let up = |m: &mut HashMap<_, u64>, at| {
            let e = m.entry(at).or_insert(*token);
            *e = (*e).max(*token);
        };
        up(&mut last_any, k);
        match slot {
            None => up(&mut last_excl, k),
            Some(s) => {
                let e = last_slot.entry((k, *s)).or_insert(*token);
                *e = (*e).max(*token);
            }
        }
    }
}

/// 4, 5 and 6: no acknowledged write lost, no stale write accepted, no
/// write with a token never granted; the counters match the writes. A
/// multi-key write is one transaction over every key of its ticket.
fn writes_kept_and_fenced(events: &[Event], fin: &Final, grants: &[Grant], r: &mut Report) {
    let mut grant_of: HashMap<(u32, &str, u64), &Grant> = HashMap::new();
    for g in grants {
        for k in &g.keys {
            grant_of.insert((g.client, k.as_str(), g.token), g);
        }
    }
    let mut accepted_per_key: BTreeMap<String, u64> = BTreeMap::new();
    let in_db: std::collections::HashSet<(&str, u64, u32)> =
        fin.writes.iter().map(|(k, t, c, _)| (k.as_str(), *t, *c)).collect();
    for e in events {
        let Event::Write { client, key, token, issued, result, keys, .. } = e else { continue };
        match result.as_str() {
            "accepted" => {
                r.accepted += 1;
                for key in keys_of(key, keys) {
                    *accepted_per_key.entry(key.to_owned()).or_default() += 1;
                    if !in_db.contains(&(key, *token, *client)) {
                        r.violations.push(format!("acknowledged write lost: {key} token {token} (client {client})"));
                    }
                    match grant_of.get(&(*client, key, *token)) {
                        Some(g) if *issued > g.dl => r.violations.push(format!(
                            "stale write accepted: {key} token {token} (client {client}) issued {} ms after its deadline",
                            (issued - g.dl) / 1_000_000
                        )),
                        Some(_) => {}
                        None => r
                            .violations
                            .push(format!("write on {key} with token {token} that client {client} was never granted")),
                    }
                }
            }
            "refused" => r.fence_refusals += 1,
            _ => {}
        }
    }
    let mut db_per_key: BTreeMap<String, u64> = BTreeMap::new();
    for (k, _, _, _) in &fin.writes {
        *db_per_key.entry(k.clone()).or_default() += 1;
    }
    for (key, n) in &fin.counters {
        let acc = accepted_per_key.get(key).copied().unwrap_or(0);
        let rows = db_per_key.get(key).copied().unwrap_or(0);
        if *n != acc || *n != rows {
            r.violations.push(format!("counter of {key} is {n}, accepted writes recorded {acc}, write rows {rows}"));
        }
    }
}

/// 9: per key, a stretch longer than the bound with no grant of the key,
/// no fault active (from a fault's start to its heal; after a heal rule 7
/// gives the cluster the bound too) and an acquire of the key waiting from
/// its start: the earliest waiting request did not progress.
fn stalls(events: &[Event], grants: &[Grant], bound_ns: u64, begin: u64, end: u64, r: &mut Report) {
    let mut faults: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault { start, heal, .. } => Some((*start, (*heal).max(*start))),
            _ => None,
        })
        .collect();
    faults.sort_unstable();
    // Every acquire's [call, answer], per key.
    let mut waits: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for e in events {
        match e {
            Event::Acquire { key, keys, call, ans, .. } => {
                for k in keys_of(key, keys) {
                    waits.entry(k).or_default().push((*call, *ans));
                }
            }
            Event::Grant { key, keys, call, ans, .. } => {
                for k in keys_of(key, keys) {
                    waits.entry(k).or_default().push((*call, *ans));
                }
            }
            _ => {}
        }
    }
    let per_key = by_key(grants);
    for (key, ws) in &waits {
        let mut points: Vec<u64> = vec![begin];
        points.extend(per_key.get(key).into_iter().flatten().map(|g| g.ans).filter(|&t| t > begin && t < end));
        points.push(end);
        points.sort_unstable();
        for w in points.windows(2) {
            let (p, q) = (w[0], w[1]);
            if q.saturating_sub(p) <= bound_ns {
                continue;
            }
            // The fault-free pieces of (p, q).
            let mut pieces = Vec::new();
            let mut a = p;
            for &(fs, fh) in &faults {
                if fh <= a || fs >= q {
                    continue;
                }
                if fs > a {
                    pieces.push((a, fs));
                }
                a = a.max(fh);
            }
            if a < q {
                pieces.push((a, q));
            }
            for (a, b) in pieces {
                // From the first moment an acquire of the key waited.
                let Some(from) = ws.iter().filter(|(c, x)| *x > a && *c < b).map(|(c, _)| (*c).max(a)).min() else {
                    continue;
                };
                if b.saturating_sub(from) > bound_ns {
                    let n = ws.iter().filter(|(c, x)| *x > from && *c < b).count();
                    r.violations.push(format!(
                        "stall on {key}: no grant of it for {} ms ({} ms to {} ms, no fault active) while {n} acquires of it waited",
                        (b - from) / 1_000_000,
                        from / 1_000_000,
                        b / 1_000_000
                    ));
                }
            }
        }
    }
}

/// 7 and the table: one row per fault window, and a grant within the
/// failover bound after each heal.
fn fault_table(events: &[Event], grants: &[Grant], bound_ns: u64, begin: u64, end: u64, r: &mut Report) {
    let faults: Vec<(&str, u64, u64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fault { name, start, heal, .. } => Some((name.as_str(), *start, *heal)),
            _ => None,
        })
        .collect();
    r.faults = faults.len() as u64;
    let mut bounds: Vec<(String, u64, u64, Option<u64>)> = Vec::new();
    let first = faults.first().map_or(end, |f| f.1);
    bounds.push(("baseline".into(), begin, first, None));
    for (i, (name, start, heal)) in faults.iter().enumerate() {
        let to = faults.get(i + 1).map_or(end, |f| f.1);
        bounds.push(((*name).to_owned(), *start, to, Some(*heal)));
    }
    for (name, from, to, heal) in bounds {
        let mut row = Row { fault: name.clone(), ..Row::default() };
        let in_win = |t: u64| t >= from && t < to;
        let mut times: Vec<u64> = vec![from];
        for g in grants.iter().filter(|g| in_win(g.ans)) {
            row.grants += 1;
            times.push(g.ans);
        }
        times.push(to);
        row.longest_gap_ms = times.windows(2).map(|w| w[1].saturating_sub(w[0])).max().unwrap_or(0) / 1_000_000;
        for e in events {
            match e {
                Event::Acquire { ans, result, .. } if in_win(*ans) => match result.as_str() {
                    "indeterminate" => row.indeterminate += 1,
                    "busy" => row.busy += 1,
                    "timeout" => row.timeouts += 1,
                    _ => row.unavailable += 1,
                },
                Event::Write { done, result, .. } if in_win(*done) && result == "refused" => row.fence_refusals += 1,
                _ => {}
            }
        }
        if let Some(heal) = heal {
            let next = grants.iter().find(|g| g.ans >= heal);
            row.recovery_ms = next.map(|g| (g.ans - heal) / 1_000_000);
            let late = match next {
                Some(g) => g.ans - heal > bound_ns,
                None => end.saturating_sub(heal) > bound_ns,
            };
            if late {
                r.violations.push(format!(
                    "no grant within the failover bound ({} ms) after {name} healed (first grant after it: {})",
                    bound_ns / 1_000_000,
                    row.recovery_ms.map_or("none".to_owned(), |m| format!("{m} ms"))
                ));
            }
        }
        r.rows.push(row);
    }
}

/// The table as Markdown.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| fault | grants | Indeterminate | Busy | timeouts (T) | unavailable/other | fence refusals | recovery ms | longest gap ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let rec = r.recovery_ms.map_or("—".to_owned(), |m| m.to_string());
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.fault,
            r.grants,
            r.indeterminate,
            r.busy,
            r.timeouts,
            r.unavailable,
            r.fence_refusals,
            rec,
            r.longest_gap_ms
        );
    }
    s
}

/// The rows summed per fault kind (count, sums; worst recovery and gap),
/// in order of first appearance: the soak's summary.
pub fn by_fault(rows: &[Row]) -> String {
    let mut kinds: Vec<(String, u64, Row)> = Vec::new();
    for r in rows {
        let i = match kinds.iter().position(|(k, _, _)| *k == r.fault) {
            Some(i) => i,
            None => {
                kinds.push((r.fault.clone(), 0, Row { fault: r.fault.clone(), ..Row::default() }));
                kinds.len() - 1
            }
        };
        let (_, n, a) = &mut kinds[i];
        *n += 1;
        a.grants += r.grants;
        a.indeterminate += r.indeterminate;
        a.busy += r.busy;
        a.timeouts += r.timeouts;
        a.unavailable += r.unavailable;
        a.fence_refusals += r.fence_refusals;
        a.recovery_ms = a.recovery_ms.max(r.recovery_ms);
        a.longest_gap_ms = a.longest_gap_ms.max(r.longest_gap_ms);
    }
    let mut s = String::from(
        "| fault | times | grants | Indeterminate | Busy | timeouts (T) | unavailable/other | fence refusals | worst recovery ms | longest gap ms |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (k, n, a) in kinds {
        let rec = a.recovery_ms.map_or("—".to_owned(), |m| m.to_string());
        let _ = writeln!(
            s,
            "| {k} | {n} | {} | {} | {} | {} | {} | {} | {rec} | {} |",
            a.grants, a.indeterminate, a.busy, a.timeouts, a.unavailable, a.fence_refusals, a.longest_gap_ms
        );
    }
    s
}

/// The checker's last line, exactly.
pub fn last_line(violations: u64, grants: u64, faults: u64, fence_refusals: u64, indeterminate_held: u64) -> String {
    format!(
        "violations={violations} grants={grants} faults={faults} fence_refusals={fence_refusals} \
         indeterminate_held={indeterminate_held}"
    )
}

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
