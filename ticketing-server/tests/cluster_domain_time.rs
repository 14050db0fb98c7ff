//! Domain time, `Q` and the admin waiter list on a real 3-node cluster
//! (docs/protocol.md "Domain time" and "Query"; docs/deployment.md "Admin
//! HTTP"). Every wait is bounded.

mod cluster_common;

use cluster_common::{hello, secs, Client, Cluster};
use std::time::{Duration, Instant};

const HOLDER: &str = "0123456789abcdef0123456789abcdef";

fn formed(name: &str) -> (Cluster, usize) {
    let mut c = Cluster::new(name, 3);
    c.start_all();
    let leader = c.wait_leader(secs(20)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(10)), "node {i} is not a voter");
    }
    (c, leader)
}

fn connect(port: u16) -> Client {
    let c = hello(port).expect("connect");
    assert!(c.ok.starts_with("OK "), "{}", c.ok);
    c
}

/// A raw admin GET: (status code, body), whatever the status.
fn admin_get(port: u16, path: &str) -> (u16, String) {
    ticketing_testkit::http_get_any(port, path).unwrap_or_else(|| panic!("GET {path}: no answer"))
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn a_lease_killed_with_its_leader_ends_no_later_than_tick_plus_failover_and_q_and_locks_say_who() {
    let (mut c, leader) = formed("domain-time");
    let mut holder = connect(c.nodes[leader].client);
    // Bound below: the grant commits after this instant, so its lease ends after t0 + 10 s.
    let t0 = Instant::now();
    holder.send(&format!("A 1 dt-key {HOLDER} 0 10")).unwrap();
    let a = holder.answer(secs(5)).unwrap();
    let token = cluster_common::granted_token(&a).unwrap_or_else(|| panic!("not granted: {a}"));

    // Q at the leader: H for the holder (remaining by domain time), N for anyone else.
    let mut q = connect(c.nodes[leader].client);
    q.send(&format!("Q 7 dt-key {HOLDER}")).unwrap();
    let h = q.answer(secs(5)).unwrap();
    let f: Vec<&str> = h.split(' ').collect();
    assert_eq!(&f[..5], ["H", "7", "dt-key", HOLDER, &token.to_string()], "{h}");
    let rem: u64 = f[5].parse().unwrap();
    assert!(rem <= 10_000 && rem > 5_000, "remaining {rem}");
    q.send("Q 8 dt-key someone-else").unwrap();
    assert_eq!(q.answer(secs(5)).unwrap(), "N 8 dt-key");
    q.send(&format!("Q 9 other-key {HOLDER}")).unwrap();
    assert_eq!(q.answer(secs(5)).unwrap(), "N 9 other-key");

    // A follower answers Q with M and closes; its /locks names the leader's admin address.
    let follower = (leader + 1) % 3;
    let mut fq = connect(c.nodes[follower].client);
    fq.send(&format!("Q 1 dt-key {HOLDER}")).unwrap();
    assert_eq!(fq.answer(secs(5)).unwrap(), format!("M {}", c.nodes[leader].client_addr()));
    let (code, body) = admin_get(c.nodes[follower].admin, "/locks/dt-key");
    assert_eq!(code, 503, "{body}");
    assert_eq!(json(&body)["leader_admin"], format!("127.0.0.1:{}", c.nodes[leader].admin), "{body}");

    // /locks at the leader: the holder by prefix, never the full owner.
    let (code, body) = admin_get(c.nodes[leader].admin, "/locks/dt-key");
    assert_eq!(code, 200, "{body}");
    assert!(!body.contains(HOLDER), "full owner shown: {body}");
    let v = json(&body);
    assert_eq!(v["holder"]["owner_prefix"], "01234567", "{body}");
    assert_eq!(v["holder"]["token"].as_u64(), Some(token));
    assert!(v["holder"]["granted_dt"].as_u64().is_some(), "{body}");

    // kill -9 of the leader six seconds after the grant.
    std::thread::sleep((t0 + secs(6)).saturating_duration_since(Instant::now()));
    drop(holder);
    c.kill(leader);
    let killed_at = t0.elapsed();
    let end = Instant::now() + secs(20);
    let new_leader = loop {
        let l: Vec<usize> = c.leaders();
        if l.len() == 1 {
            break l[0];
        }
        assert!(Instant::now() < end, "no new leader");
        std::thread::sleep(Duration::from_millis(20));
    };
    let elected_at = t0.elapsed();

    // The new leader still knows the holder, with what is left of its lease.
    let mut q = connect(c.nodes[new_leader].client);
    q.send(&format!("Q 1 dt-key {HOLDER}")).unwrap();
    let h = q.answer(secs(5)).unwrap();
    let f: Vec<&str> = h.split(' ').collect();
    assert_eq!(&f[..5], ["H", "1", "dt-key", HOLDER, &token.to_string()], "{h}");
    let rem: u64 = f[5].parse().unwrap();
    assert!(rem < 10_000 - 3_000, "the new leader restarted the lease: {rem} ms left");

    // Three waiters, in this order; /locks lists them in FIFO order, prefixes only.
    let owners =
        ["aaaaaaaa11111111aaaaaaaa11111111", "bbbbbbbb22222222bbbbbbbb22222222", "cccccccc33333333cccccccc33333333"];
    let mut waiters: Vec<Client> = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        let mut w = connect(c.nodes[new_leader].client);
        w.send(&format!("A {} dt-key {owner} 30 5", i + 1)).unwrap();
        waiters.push(w);
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, body) = admin_get(c.nodes[new_leader].admin, "/locks/dt-key");
    assert_eq!(code, 200, "{body}");
    for o in owners.iter().chain([&HOLDER]) {
        assert!(!body.contains(o), "full owner shown: {body}");
    }
    let v = json(&body);
    let listed: Vec<(String, String)> = v["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["owner_prefix"].as_str().unwrap().to_owned(), w["client"].as_str().unwrap().to_owned()))
        .collect();
    let expected: Vec<(String, String)> = owners
        .iter()
        .zip(&waiters)
        .map(|(o, w)| (o[..8].to_owned(), w.stream.local_addr().unwrap().to_string()))
        .collect();
    assert_eq!(listed, expected, "{body}");
    let first = &v["waiters"][0];
    assert!(first["waited_ms"].as_u64().unwrap() >= 100, "{body}");
    assert!(first["wait_left_ms"].as_u64().unwrap() <= 30_000, "{body}");

    // The head gets the key when the ORIGINAL lease ends by domain time: 10.0–14.0 s after the grant.
    let a = waiters[0].answer(secs(20)).unwrap();
    let regranted = t0.elapsed();
    assert!(cluster_common::granted_token(&a).is_some_and(|t| t > token), "{a}");
    println!(
        "10 s lease, kill -9 at {killed_at:?}, new leader at {elected_at:?}: re-granted {regranted:?} after the grant"
    );
    assert!(regranted >= secs(10), "earlier than the original end: {regranted:?}");
    assert!(regranted <= secs(14), "later than end + tick + failover: {regranted:?}");
}
