//! Rules 1, 2 and 8: who may hold a key together, token order, one token
//! counter per domain and one token per grant, whole baskets.

use super::*;

/// 1 and 2, per key: only compatible holders at once; tokens increase in grant order.
pub(super) fn holders_and_token_order(grants: &[Grant], r: &mut Report) {
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
pub(super) fn one_token_counter(grants: &[Grant], r: &mut Report) {
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
pub(super) fn one_token_per_grant(grants: &[Grant], r: &mut Report) {
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
pub(super) fn whole_baskets(grants: &[Grant], r: &mut Report) {
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
