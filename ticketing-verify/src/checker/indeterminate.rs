//! Rule 11: an acquire that ended Indeterminate but was granted keeps
//! mutual exclusion and token order with every other grant.

use super::*;

/// An Indeterminate acquire found granted (one key of it).
struct Held<'a> {
    client: u32,
    key: &'a str,
    token: u64,
    call: u64,
    at: u64,
    exclusive: bool,
}

impl Held<'_> {
    fn what(&self) -> String {
        let kind = if self.exclusive { "" } else { ", counted" };
        format!(
            "token {} (client {}{kind}, Indeterminate: called at {} ms, found held before {} ms)",
            self.token,
            self.client,
            self.call / MS,
            self.at / MS
        )
    }
}

/// 11: an acquire that ended Indeterminate but was granted holds its key
/// with token `t` at some instant after its call and before `at` (its
/// commit came after the call; the lane's `H` came before `at`). Then:
/// - `t` is on no other grant (a basket's keys share it);
/// - `t` is above every grant answered before its call, and below every
///   grant called after `at` (one counter; rule 2);
/// - no other holder of the key that it may not hold beside (rule 1) and
///   with a smaller token — granted before it — still held at `at` (by its
///   conservative window): at the commit of `t` both held.
///
/// (Where in that span it held is unknown: the client library does not
/// tell its owner, so the workload cannot ask `Q` at a moment of its own.)
pub(super) fn indeterminate_grants(events: &[Event], grants: &[Grant], r: &mut Report) {
    let mut helds: Vec<Held<'_>> = Vec::new();
    let mut not_held: BTreeSet<(u32, u64)> = BTreeSet::new();
    let mut unresolved: BTreeSet<(u32, u64)> = BTreeSet::new();
    for e in events {
        match e {
            Event::IndeterminateHeld { client, key, token, call, at, n, .. } => {
                helds.push(Held { client: *client, key, token: *token, call: *call, at: *at, exclusive: n.is_none() });
            }
            Event::IndeterminateNotHeld { client, call, result, .. } => {
                if result == "not_held" {
                    not_held.insert((*client, *call));
                } else {
                    unresolved.insert((*client, *call));
                }
            }
            _ => {}
        }
    }
    let grant_ids: BTreeSet<(u32, u64, u64)> = helds.iter().map(|h| (h.client, h.call, h.token)).collect();
    let found: BTreeSet<(u32, u64)> = grant_ids.iter().map(|(c, call, _)| (*c, *call)).collect();
    r.indeterminate_held = grant_ids.len() as u64;
    r.indeterminate_not_held = not_held.difference(&found).count() as u64;
    r.indeterminate_unresolved = unresolved.difference(&found).filter(|x| !not_held.contains(x)).count() as u64;
    if helds.is_empty() {
        return;
    }
    // One token per grant.
    let by_token: HashMap<u64, &Grant> = grants.iter().map(|g| (g.token, g)).collect();
    let mut held_token: HashMap<u64, (u32, u64)> = HashMap::new();
    for h in &helds {
        if let Some(g) = by_token.get(&h.token) {
            r.violations.push(format!(
                "one token on two grants: {} on {} and {} on {}",
                g.what(),
                g.keys.join(","),
                h.what(),
                h.key
            ));
        }
        match held_token.get(&h.token) {
            Some(&(c, call)) if (c, call) != (h.client, h.call) => r.violations.push(format!(
                "one token on two grants: token {} on two Indeterminate acquires (client {c} called at {} ms, {})",
                h.token,
                call / MS,
                h.what()
            )),
            Some(_) => {}
            None => {
                held_token.insert(h.token, (h.client, h.call));
            }
        }
    }
    // One counter: against the grants answered before its call and called after `at`.
    let mut by_call: Vec<&Grant> = grants.iter().collect();
    by_call.sort_by_key(|g| g.call);
    let mut suffix_min: Vec<Option<&Grant>> = vec![None; by_call.len() + 1];
    for i in (0..by_call.len()).rev() {
        let g = by_call[i];
        suffix_min[i] = match suffix_min[i + 1] {
            Some(m) if m.token <= g.token => Some(m),
            _ => Some(g),
        };
    }
    let mut prefix_max: Vec<&Grant> = Vec::with_capacity(grants.len());
    for g in grants {
        match prefix_max.last() {
            Some(m) if m.token >= g.token => prefix_max.push(m),
            _ => prefix_max.push(g),
        }
    }
    let mut reported: BTreeSet<(u64, u64)> = BTreeSet::new();
    for h in &helds {
        let before = grants.partition_point(|g| g.ans < h.call);
        if let Some(x) = before.checked_sub(1).map(|i| prefix_max[i]) {
            if x.token >= h.token && reported.insert((x.token, h.token)) {
                r.violations.push(format!(
                    "token decrease: {} on {} is not above token {} on {} (answered at {} ms)",
                    h.what(),
                    h.key,
                    x.token,
                    x.key(),
                    x.ans / MS
                ));
            }
        }
        let after = by_call.partition_point(|g| g.call <= h.at);
        if let Some(y) = suffix_min[after] {
            if y.token <= h.token && reported.insert((h.token, y.token)) {
                r.violations.push(format!(
                    "token decrease: token {} on {} (called at {} ms) is not above {} on {}",
                    y.token,
                    y.key(),
                    y.call / MS,
                    h.what(),
                    h.key
                ));
            }
        }
    }
    // Two Indeterminate grants: the later call after the earlier one's `at`.
    let mut hs: Vec<&Held<'_>> = helds.iter().collect();
    hs.sort_by_key(|h| h.at);
    for y in &helds {
        for x in hs.iter().take_while(|x| x.at < y.call) {
            if x.token >= y.token && reported.insert((x.token, y.token)) {
                r.violations.push(format!(
                    "token decrease: {} on {} is not above {} on {}",
                    y.what(),
                    y.key,
                    x.what(),
                    x.key
                ));
            }
        }
    }
    // Holders at once.
    let per_key = by_key(grants);
    for h in &helds {
        for g in per_key.get(h.key).into_iter().flatten() {
            if g.token < h.token && g.end >= h.at && (g.n.is_none() || h.exclusive) {
                r.violations.push(format!(
                    "two holders of {} at once: {} held until {} ms, and {}, granted after it",
                    h.key,
                    g.what(),
                    g.end / MS,
                    h.what()
                ));
            }
        }
    }
}
