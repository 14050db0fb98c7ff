//! Rules 7 and 9: a grant within the failover bound after each heal, no
//! stall while acquires wait; the per-fault table.

use super::*;

/// 9: per key, a stretch longer than the bound with no grant of the key,
/// no fault active (from a fault's start to its heal; after a heal rule 7
/// gives the cluster the bound too) and an acquire of the key waiting from
/// its start: the earliest waiting request did not progress.
pub(super) fn stalls(events: &[Event], grants: &[Grant], bound_ns: u64, begin: u64, end: u64, r: &mut Report) {
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
pub(super) fn fault_table(events: &[Event], grants: &[Grant], bound_ns: u64, begin: u64, end: u64, r: &mut Report) {
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
