//! A node that joins after the leader compacted its log gets the state as a
//! binary snapshot (docs/cluster-protocol.md "4. Snapshots",
//! docs/benchmarks.md "Optimizations: memory"): every holder, the token
//! counter and the domain time arrive, and the node serves them after a
//! failover.

mod cluster_common;
use cluster_common::*;
use std::time::Instant;

/// Held keys, granted WINDOW at a time (so they are committed in batches of
/// many commands per log entry).
const KEYS: u64 = 30_000;
const WINDOW: u64 = 500;
/// Then this many acquire/release pairs one at a time: one command per log
/// entry, so the log grows by about 2 × SINGLES entries. Each node builds a
/// snapshot every 5 000 commands, counted from its own last one (the nodes
/// are not in step), and keeps 2 000 entries behind it: 10 000 commands make
/// every node — the leader, and a later leader — build one past entry 5 000
/// and purge the entries a new node would need.
const SINGLES: u64 = 5_000;

#[test]
fn a_node_joining_after_compaction_installs_the_whole_state_from_a_snapshot() {
    let mut c = Cluster::new("snapshot", 3);
    c.start_all();
    let leader = c.wait_leader(secs(20)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(10)), "node {i} a voter");
    }

    // KEYS held keys through one connection, WINDOW requests in flight.
    let mut cl = hello(c.nodes[leader].client).unwrap();
    let end = Instant::now() + secs(300);
    let mut granted = 0u64;
    let mut next = 0u64;
    while next < KEYS && Instant::now() < end {
        let n = WINDOW.min(KEYS - next);
        for id in next..next + n {
            cl.send(&format!("A {} snap-{id} owner-{id} 0 250", id + 1)).unwrap();
        }
        for _ in 0..n {
            let a = cl.answer(secs(30)).unwrap();
            granted += u64::from(granted_token(&a).is_some());
        }
        next += n;
    }
    assert_eq!(granted, KEYS, "every key granted");
    for i in 0..SINGLES {
        cl.send(&format!("A {} side owner-side 0 250", KEYS + 1 + i)).unwrap();
        let a = cl.answer(secs(30)).unwrap();
        let token = granted_token(&a).unwrap_or_else(|| panic!("side key not granted: {a}"));
        cl.send(&format!("R {} side owner-side {token}", KEYS + 1 + i)).unwrap();
        let r = cl.answer(secs(30)).unwrap();
        assert!(r.starts_with("R "), "side key not released: {r}");
    }
    let leader_status = status(c.nodes[leader].admin).expect("leader status");
    assert_eq!(leader_status["held_keys"].as_u64(), Some(KEYS));
    let last_token = leader_status["last_token"].as_u64().expect("last_token");

    // A follower restarts empty (new NodeId) and rejoins.
    let f = (0..3).find(|&i| i != leader).unwrap();
    c.kill(f);
    c.start(f, false);
    assert!(c.wait_voter(f, secs(60)), "node {f} rejoined as a voter");
    let end = Instant::now() + secs(30);
    let mut seen = None;
    while Instant::now() < end {
        seen = status(c.nodes[f].admin).map(|s| (s["held_keys"].as_u64(), s["last_token"].as_u64()));
        if seen == Some((Some(KEYS), Some(last_token))) {
            break;
        }
        std::thread::sleep(ms(100));
    }
    assert_eq!(seen, Some((Some(KEYS), Some(last_token))), "the rejoined node has the whole state");
    assert!(c.log(f).contains("install_full_snapshot"), "the state came as a snapshot, not as entries");
    assert!(!c.log(f).contains("invalid lock-state snapshot"), "{}", c.log(f));

    // After a failover to it the holders are still held, and new tokens are above the counter.
    for i in (0..3).filter(|&i| i != f) {
        c.kill(i);
        c.start(i, false);
        assert!(c.wait_voter(i, secs(60)), "node {i} rejoined as a voter");
    }
    let leader = c.wait_leader(secs(20)).expect("a leader at the end");
    let held = acquire_once(c.nodes[leader].client, "snap-17", "someone-else", 0, 5);
    assert!(held.starts_with("T "), "a held key was granted again: {held}");
    let fresh = acquire_once(c.nodes[leader].client, "snap-new", "o", 0, 5);
    assert!(granted_token(&fresh).unwrap_or(0) > last_token, "{fresh}");
}
