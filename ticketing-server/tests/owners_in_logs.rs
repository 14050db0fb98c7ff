//! docs/security.md, "Secrets": owner and token together release a lock,
//! so no log line at any level carries a full owner. With `RUST_LOG=trace`,
//! a standalone server and a 3-node cluster serve grants, hand-overs, `Q`,
//! releases and expiries; their whole logs hold no owner beyond its prefix.

mod cluster_common;
use cluster_common::{granted_token, hello, Client, Cluster};
use std::time::{Duration, Instant};

/// A fresh owner of 32 hex digits, as the client library makes them.
fn owner() -> String {
    let n = ticketing_proto::auth::nonce(&mut rand_core::OsRng);
    n.to_hex_string()[..32].to_owned()
}

fn line(c: &mut Client) -> String {
    c.answer(Duration::from_secs(10)).unwrap()
}

/// Grants, a hand-over, `Q` (held and not held), releases and an expiry on
/// the serving node at `port`; the owners used.
fn traffic(port: u16) -> Vec<String> {
    let owners: Vec<String> = (0..4).map(|_| owner()).collect();
    let (a, b, c, d) = (&owners[0], &owners[1], &owners[2], &owners[3]);
    let mut ca = hello(port).unwrap();
    let mut cb = hello(port).unwrap();
    assert!(ca.ok.starts_with("OK leader"), "{}", ca.ok);
    // A grant, a waiter, a query.
    ca.send(&format!("A 1 k1 {a} 5 30")).unwrap();
    let ta = granted_token(&line(&mut ca)).expect("grant");
    cb.send(&format!("A 2 k1 {b} 20 30")).unwrap();
    ca.send(&format!("Q 3 k1 {a}")).unwrap();
    assert!(line(&mut ca).starts_with("H 3 k1 "));
    ca.send(&format!("Q 4 k1 {b}")).unwrap();
    assert_eq!(line(&mut ca), "N 4 k1");
    // A release hands the key over to the waiter.
    ca.send(&format!("R 5 k1 {a} {ta}")).unwrap();
    assert_eq!(line(&mut ca), "R 5 k1");
    let tb = granted_token(&line(&mut cb)).expect("hand-over");
    cb.send(&format!("R 6 k1 {b} {tb}")).unwrap();
    assert_eq!(line(&mut cb), "R 6 k1");
    // An expiry hands over too: c's 1 s lease runs out, d waits for it.
    ca.send(&format!("A 7 k2 {c} 5 1")).unwrap();
    assert!(granted_token(&line(&mut ca)).is_some());
    cb.send(&format!("A 8 k2 {d} 20 30")).unwrap();
    let td = granted_token(&line(&mut cb)).expect("granted after the expiry");
    // A release with a wrong token (not the holder).
    cb.send(&format!("R 9 k2 {d} {}", td + 1000)).unwrap();
    assert!(!line(&mut cb).is_empty());
    owners
}

/// Fails if `log` holds any owner beyond its prefix (the first 8 characters).
fn assert_no_owner(what: &str, log: &str, owners: &[String]) {
    for o in owners {
        for (n, l) in log.lines().enumerate() {
            assert!(!l.contains(&o[8..]), "{what}, line {}: an owner beyond its prefix ({o}):\n{l}", n + 1);
        }
    }
}

#[test]
fn no_full_owner_in_trace_logs_standalone() {
    let mut cl = Cluster::new("owners-standalone", 1);
    cl.nodes[0].standalone = true;
    cl.nodes[0].env.push(("RUST_LOG".into(), "trace".into()));
    cl.start(0, false);
    let port = cl.nodes[0].client;
    let deadline = Instant::now() + Duration::from_secs(20);
    while hello(port).is_err() {
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let owners = traffic(port);
    cl.kill(0);
    let log = cl.log(0);
    assert!(log.contains("TRACE"), "trace logging was not captured:\n{log}");
    assert!(log.contains(&owners[0][..8]), "the log shows the owners' prefixes (the check can see owners)");
    assert_no_owner("standalone log", &log, &owners);
}

#[test]
fn no_full_owner_in_trace_logs_of_a_cluster() {
    let mut cl = Cluster::new("owners-cluster", 3);
    for n in &mut cl.nodes {
        n.env.push(("RUST_LOG".into(), "trace".into()));
    }
    cl.start_all();
    let leader = cl.wait_leader(Duration::from_secs(30)).expect("a leader");
    for i in 0..3 {
        assert!(cl.wait_voter(i, Duration::from_secs(30)), "node {i} joined");
    }
    let owners = traffic(cl.nodes[leader].client);
    // The followers applied every command (their logs saw the entries).
    let want = cluster_common::status(cl.nodes[leader].admin).unwrap()["commit_index"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 0..3 {
        while cluster_common::status(cl.nodes[i].admin).and_then(|s| s["applied_index"].as_u64()).unwrap_or(0) < want {
            assert!(Instant::now() < deadline, "node {i} did not apply up to {want}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    for i in 0..3 {
        cl.kill(i);
    }
    for i in 0..3 {
        let log = cl.log(i);
        // The leader logs every answer at trace; followers log Raft's entries at debug.
        let verbose = if i == leader { " TRACE " } else { " DEBUG " };
        assert!(log.contains(verbose), "node {i}: verbose logging was not captured");
        assert_no_owner(&format!("node {i}'s log"), &log, &owners);
    }
}
