//! Batched proposals in a 3-node cluster (docs/cluster-protocol.md, "Log
//! entries"): many concurrent acquires on distinct keys are committed in
//! fewer log entries than commands, while a hot key's waiters are still
//! granted in FIFO order with strictly increasing tokens; and a leader
//! killed with batches in flight grants nothing twice.

mod cluster_common;
use cluster_common::*;
use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::Duration;

const FLOOD_CONNS: usize = 4;
const FLOOD_PER_CONN: usize = 50;

/// The leader's last log index, from its admin `/status`.
fn last_log_index(admin: u16) -> u64 {
    status(admin).and_then(|s| s["last_log_index"].as_u64()).expect("leader /status with last_log_index")
}

/// Opens `FLOOD_CONNS` connections and writes, on each in one write,
/// `FLOOD_PER_CONN` acquires of distinct keys `<prefix><c>-<j>`.
fn flood(port: u16, prefix: &str, lease: u32) -> Vec<Client> {
    (0..FLOOD_CONNS)
        .map(|c| {
            let mut conn = hello(port).expect("connect");
            assert!(conn.ok.starts_with("OK leader"), "{}", conn.ok);
            let lines: String =
                (0..FLOOD_PER_CONN).map(|j| format!("A {} {prefix}{c}-{j} own{c} 0 {lease}\n", j + 1)).collect();
            use std::io::Write;
            conn.stream.write_all(lines.as_bytes()).expect("write the burst");
            conn
        })
        .collect()
}

/// Reads answers until `want` have arrived or the connection ends; every
/// `A` as `key → token`.
fn read_grants(conn: &mut Client, want: usize, limit: Duration) -> (HashMap<String, u64>, Vec<String>) {
    let mut grants = HashMap::new();
    let mut other = Vec::new();
    for _ in 0..want {
        let line = match conn.answer(limit) {
            Ok(l) if !l.is_empty() => l,
            _ => break,
        };
        match granted_token(&line) {
            Some(t) => {
                let key = line.split(' ').nth(2).unwrap_or_default().to_owned();
                grants.insert(key, t);
            }
            None => other.push(line),
        }
    }
    (grants, other)
}

#[test]
fn batched_acquires_keep_fifo_and_token_order() {
    let mut c = Cluster::new("batch-fifo", 3);
    c.start_all();
    let leader = c.wait_leader(secs(20)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(10)));
    }
    let (port, admin) = (c.nodes[leader].client, c.nodes[leader].admin);

    // The hot key: a holder, then 8 waiters queued in a known order.
    let mut holder = hello(port).unwrap();
    holder.send("A 1 hot holder 0 30").unwrap();
    let a = holder.answer(secs(5)).unwrap();
    let mut last = granted_token(&a).expect(&a);
    let mut waiters = Vec::new();
    for i in 0..8 {
        let mut w = hello(port).unwrap();
        w.send(&format!("A 1 hot w{i} 30 30")).unwrap();
        // The pong proves the leader has read (and queued) the acquire.
        w.send("P 9").unwrap();
        assert_eq!(w.answer(secs(5)).unwrap(), "P 9");
        waiters.push(w);
    }

    let before = last_log_index(admin);
    // 200 acquires of distinct keys arrive at once, while the hot key is
    // handed over 8 times.
    let conns = flood(port, "k", 30);
    let readers: Vec<_> = conns
        .into_iter()
        .map(|mut conn| thread::spawn(move || read_grants(&mut conn, FLOOD_PER_CONN, secs(10))))
        .collect();
    holder.send(&format!("R 2 hot holder {last}")).unwrap();
    assert_eq!(holder.answer(secs(5)).unwrap(), "R 2 hot");
    for (i, w) in waiters.iter_mut().enumerate() {
        let a = w.answer(secs(10)).unwrap();
        let t = granted_token(&a).unwrap_or_else(|| panic!("waiter {i}: {a}"));
        assert!(a.starts_with(&format!("A 1 hot w{i} ")), "waiter {i} is granted in FIFO order: {a}");
        assert!(t > last, "hot key token {t} after {last}");
        last = t;
        w.send(&format!("R 2 hot w{i} {t}")).unwrap();
        assert_eq!(w.answer(secs(5)).unwrap(), "R 2 hot");
    }

    let mut tokens = HashSet::new();
    for r in readers {
        let (grants, other) = r.join().unwrap();
        assert!(other.is_empty(), "only grants expected: {other:?}");
        assert_eq!(grants.len(), FLOOD_PER_CONN, "every distinct key is granted");
        for t in grants.values() {
            assert!(tokens.insert(*t), "token {t} issued twice");
        }
    }
    let commands = FLOOD_CONNS * FLOOD_PER_CONN + 2 * 8 + 1;
    let entries = last_log_index(admin) - before;
    println!("{commands} commands committed in {entries} log entries");
    assert!(entries < commands as u64, "{commands} commands in {entries} entries: not batched");
}

#[test]
fn leader_killed_with_batches_in_flight_grants_nothing_twice() {
    let mut c = Cluster::new("batch-kill", 3);
    c.start_all();
    let leader = c.wait_leader(secs(20)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(10)));
    }
    let mut conns = flood(c.nodes[leader].client, "d", 60);
    // Some answers are in: later batches are being committed when the leader dies.
    let (mut answered, other) = read_grants(&mut conns[0], 3, secs(10));
    assert!(other.is_empty(), "{other:?}");
    c.kill(leader);
    for conn in conns.iter_mut() {
        let (grants, _) = read_grants(conn, FLOOD_PER_CONN, secs(5));
        answered.extend(grants);
    }
    println!("{} of {} acquires answered A before the leader died", answered.len(), FLOOD_CONNS * FLOOD_PER_CONN);
    let max_seen = answered.values().copied().max().unwrap_or(0);

    let new = c.wait_leader(secs(20)).expect("a new leader");
    assert_ne!(new, leader);
    let mut q = hello(c.nodes[new].client).unwrap();
    let mut id = 0;
    for conn in 0..FLOOD_CONNS {
        for j in 0..FLOOD_PER_CONN {
            let key = format!("d{conn}-{j}");
            id += 1;
            q.send(&format!("Q {id} {key} own{conn}")).unwrap();
            let h = q.answer(secs(5)).unwrap();
            id += 1;
            q.send(&format!("A {id} {key} intruder 0 5")).unwrap();
            let a = q.answer(secs(5)).unwrap();
            if let Some(t) = answered.get(&key) {
                // Answered A before the kill: committed, so still held by
                // its owner with the same token, and not granted again.
                let held = format!("H {} {key} own{conn} {t} ", id - 1);
                assert!(h.starts_with(&held), "{key}: {h} (granted token {t})");
                assert_eq!(a, format!("T {id} {key}"), "{key} granted twice");
            } else if h.starts_with('H') {
                // Committed but unanswered (the answer was lost with the leader): still held.
                assert_eq!(a, format!("T {id} {key}"), "{key} granted twice");
            } else {
                assert_eq!(h, format!("N {} {key}", id - 1));
                let t = granted_token(&a).unwrap_or_else(|| panic!("{key}: {a}"));
                assert!(t > max_seen, "token {t} after {max_seen}");
            }
        }
    }
}
