//! Rules 3 to 6: the database's accepted writes in commit order, the
//! counter, acknowledged writes kept, stale writes refused.

use super::*;

/// 3: accepted writes in commit order, against what each is fenced by: an
/// exclusive write (slot `None`) every earlier write of its key, a counted
/// write the earlier exclusive writes of its key and those of its slot.
pub(super) fn accepted_in_commit_order(fin: &Final, r: &mut Report) {
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
pub(super) fn writes_kept_and_fenced(events: &[Event], fin: &Final, grants: &[Grant], r: &mut Report) {
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
