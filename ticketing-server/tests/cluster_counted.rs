//! Counted and multi-key grants on a 3-node cluster (docs/protocol.md,
//! "Counted and multi-key grants"): replicated like every grant, so after a
//! `kill -9` of the leader the new leader keeps every counted holder (on its
//! slot) and every key of a basket, and its tokens continue above them.

mod cluster_common;
use cluster_common::*;
use std::time::Duration;

/// One request on a fresh connection to `port`: the answer line.
fn once(port: u16, line: &str) -> String {
    match hello(port) {
        Ok(mut c) if c.ok.starts_with("OK ") => {
            if c.send(line).is_err() {
                return String::new();
            }
            c.answer(Duration::from_secs(8)).unwrap_or_default()
        }
        Ok(c) => c.ok,
        Err(_) => String::new(),
    }
}

/// `G <id> <key> <owner> <token> <waited_ms> <slot>` → (token, slot).
fn g(line: &str) -> (u64, u16) {
    let f: Vec<&str> = line.split(' ').collect();
    assert!(f.len() == 7 && f[0] == "G", "expected G, got {line:?}");
    (f[4].parse().unwrap(), f[6].parse().unwrap())
}

/// `H <id> <key> <owner> <token> <remaining_ms>` → token.
fn h(line: &str) -> u64 {
    let f: Vec<&str> = line.split(' ').collect();
    assert!(f.len() == 6 && f[0] == "H", "expected H, got {line:?}");
    f[4].parse().unwrap()
}

#[test]
fn counted_holders_and_baskets_survive_a_failover() {
    let mut c = Cluster::new("counted", 3);
    c.start_all();
    let leader = c.wait_leader(secs(20)).expect("a leader");
    let port = c.nodes[leader].client;
    let (ta, slot_a) = g(&once(port, "S 1 sem ownera 0 60 2"));
    let (tb, slot_b) = g(&once(port, "S 1 sem ownerb 0 60 2"));
    assert_eq!((slot_a, slot_b), (0, 1));
    let tk = granted_token(&once(port, "K 1 ownerk 0 60 seat-1 seat-2 seat-3")).expect("basket granted");
    assert!(ta < tb && tb < tk, "{ta} {tb} {tk}");

    c.kill(leader);
    let new = c.wait_leader(secs(15)).expect("a new leader");
    let port = c.nodes[new].client;
    // Every holder is there, with its token.
    assert_eq!(h(&once(port, "Q 1 sem ownera")), ta);
    assert_eq!(h(&once(port, "Q 1 sem ownerb")), tb);
    for key in ["seat-1", "seat-2", "seat-3"] {
        assert_eq!(h(&once(port, &format!("Q 1 {key} ownerk"))), tk, "{key}");
    }
    // Still full for n = 2; a larger n takes the next slot with a larger token.
    assert_eq!(once(port, "S 1 sem ownerc 0 60 2"), "T 1 sem");
    let (tc, slot_c) = g(&once(port, "S 1 sem ownerc 0 60 3"));
    assert_eq!(slot_c, 2);
    assert!(tc > tk);
    // The basket's keys are exclusive: an overlapping basket or A waits.
    assert_eq!(once(port, "K 1 ownerz 0 60 seat-9 seat-2"), "T 1 seat-9");
    assert_eq!(once(port, &format!("R 1 seat-2 ownerk {tk}")), "R 1 seat-2");
    let tz = granted_token(&once(port, "K 1 ownerz 0 60 seat-9 seat-2")).expect("seat-2 was released alone");
    assert!(tz > tc);
    // A released slot is reused.
    assert_eq!(once(port, &format!("R 1 sem ownera {ta}")), "R 1 sem");
    assert_eq!(g(&once(port, "S 1 sem ownerd 0 60 3")).1, 0);
}
