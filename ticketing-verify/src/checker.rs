//! The checker: reads a run's history and final database and finds
//! violations of the lock's promises (docs/protocol.md §5, §8, §11):
//!
//! 1. two owners of a key with overlapping `[grant answer, conservative
//!    deadline]` windows (a window ends early when its holder calls release);
//! 2. a token not strictly above the previous grant's on its key, or a token
//!    decrease across leader changes (a grant whose acquire was called after
//!    another grant was answered must carry a larger token: one counter per
//!    domain);
//! 3. an accepted write whose token is not above every earlier accepted one
//!    on its key (commit order of the database);
//! 4. counter ≠ accepted writes;
//! 5. an acknowledged write lost;
//! 6. a stale write (issued after its client's conservative deadline) accepted;
//! 7. no grant within the failover bound after a fault heals.
//!
//! Every comparison is between timestamps of the one system-wide monotonic
//! clock: no wall clock, no clock skew assumption.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::db::Final;
use crate::history::Event;

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
    /// Grants in the history.
    pub grants: u64,
    /// Faults injected.
    pub faults: u64,
    /// Writes refused by the fence.
    pub fence_refusals: u64,
    /// Writes accepted.
    pub accepted: u64,
}

#[derive(Debug, Clone)]
struct Grant {
    client: u32,
    key: String,
    token: u64,
    call: u64,
    ans: u64,
    dl: u64,
    end: u64,
}

/// Checks one run. `bound_ns`: the failover bound after a heal; `begin`,
/// `end`: when the workload started and stopped (a fault healed less than the bound before it
/// is only checked if a grant came).
pub fn check(events: &[Event], fin: &Final, bound_ns: u64, begin: u64, end: u64) -> Report {
    let mut r = Report::default();
    let grants = grants_of(events);
    r.grants = grants.len() as u64;
    one_owner_and_token_order(&grants, &mut r);
    one_token_counter(&grants, &mut r);
    accepted_in_commit_order(fin, &mut r);
    writes_kept_and_fenced(events, fin, &grants, &mut r);
    fault_table(events, &grants, bound_ns, begin, end, &mut r);
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
            Event::Grant { client, key, token, call, ans, dl } => {
                let end = releases.get(&(*client, key.clone(), *token)).map_or(*dl, |s| (*s).min(*dl));
                Some(Grant { client: *client, key: key.clone(), token: *token, call: *call, ans: *ans, dl: *dl, end })
            }
            _ => None,
        })
        .collect();
    grants.sort_by_key(|g| (g.ans, g.token));
    grants
}

/// 1 and 2, per key: never two owners at once; tokens increase in grant order.
fn one_owner_and_token_order(grants: &[Grant], r: &mut Report) {
    let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        by_key.entry(&g.key).or_default().push(g);
    }
    for (key, gs) in &by_key {
        let mut holder: Option<&Grant> = None;
        let mut prev: Option<&Grant> = None;
        for g in gs {
            if let Some(h) = holder {
                if g.ans < h.end {
                    r.violations.push(format!(
                        "two owners of {key}: token {} (client {}) held until {} ms, token {} (client {}) granted at {} ms",
                        h.token,
                        h.client,
                        h.end / 1_000_000,
                        g.token,
                        g.client,
                        g.ans / 1_000_000
                    ));
                }
            }
            if let Some(p) = prev {
                if g.token <= p.token {
                    r.violations.push(format!(
                        "token order on {key}: token {} (client {}) granted after token {} (client {})",
                        g.token, g.client, p.token, p.client
                    ));
                }
            }
            prev = Some(g);
            if !matches!(holder, Some(h) if g.end <= h.end) {
                holder = Some(g);
            }
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
                        g.key,
                        g.call / 1_000_000,
                        x.token,
                        x.key,
                        x.ans / 1_000_000
                    ));
                }
            }
        }
    }
}

/// 3: accepted writes in commit order, per key.
fn accepted_in_commit_order(fin: &Final, r: &mut Report) {
    let mut last: HashMap<&str, u64> = HashMap::new();
    for (key, token, client) in &fin.writes {
        if let Some(&p) = last.get(key.as_str()) {
            if *token <= p {
                r.violations.push(format!(
                    "accepted write on {key} with token {token} (client {client}) after an accepted token {p}"
                ));
            }
        }
        last.insert(key, *token);
    }
}

/// 4, 5 and 6: no acknowledged write lost, no stale write accepted, no
/// write with a token never granted; the counters match the writes.
fn writes_kept_and_fenced(events: &[Event], fin: &Final, grants: &[Grant], r: &mut Report) {
    let grant_of: HashMap<(u32, &str, u64), &Grant> =
        grants.iter().map(|g| ((g.client, g.key.as_str(), g.token), g)).collect();
    let mut accepted_per_key: BTreeMap<String, u64> = BTreeMap::new();
    let in_db: std::collections::HashSet<(&str, u64, u32)> =
        fin.writes.iter().map(|(k, t, c)| (k.as_str(), *t, *c)).collect();
    for e in events {
        let Event::Write { client, key, token, issued, result, .. } = e else { continue };
        match result.as_str() {
            "accepted" => {
                r.accepted += 1;
                *accepted_per_key.entry(key.clone()).or_default() += 1;
                if !in_db.contains(&(key.as_str(), *token, *client)) {
                    r.violations.push(format!("acknowledged write lost: {key} token {token} (client {client})"));
                }
                match grant_of.get(&(*client, key.as_str(), *token)) {
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
            "refused" => r.fence_refusals += 1,
            _ => {}
        }
    }
    let mut db_per_key: BTreeMap<String, u64> = BTreeMap::new();
    for (k, _, _) in &fin.writes {
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
pub fn last_line(violations: u64, grants: u64, faults: u64, fence_refusals: u64) -> String {
    format!("violations={violations} grants={grants} faults={faults} fence_refusals={fence_refusals}")
}
