//! A 3-node cluster forms with exactly one leader; followers announce the
//! leader with `L` and redirect with `M <leader client addr>`; a second
//! `--bootstrap` against a formed domain is refused; admin HTTP answers.

mod cluster_common;
use cluster_common::*;
use std::time::{Duration, Instant};

#[test]
fn three_nodes_one_leader_followers_redirect() {
    let mut c = Cluster::new("forms", 3);
    let t0 = Instant::now();
    c.start_all();
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader within 20 s");
    println!("cluster formed, leader node {leader} after {:?}", t0.elapsed());
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(10)), "node {i} is a voter");
    }
    // Exactly one leader, stable (an observation window, not a synchronisation).
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(c.leaders(), vec![leader]);
    let leader_addr = c.nodes[leader].client_addr();

    // Grants on the leader, tokens increase.
    let a = acquire_once(c.nodes[leader].client, "k1", "o1", 0, 5);
    let b = acquire_once(c.nodes[leader].client, "k2", "o2", 0, 5);
    let (ta, tb) = (granted_token(&a).expect(&a), granted_token(&b).expect(&b));
    assert!(tb > ta);
    // The same key again: T at once.
    assert_eq!(acquire_once(c.nodes[leader].client, "k1", "o3", 0, 5), "T 1 k1");

    for i in (0..3).filter(|&i| i != leader) {
        let mut f = hello(c.nodes[i].client).unwrap();
        assert!(f.ok.starts_with("OK follower "), "{}", f.ok);
        let mut l = String::new();
        std::io::BufRead::read_line(&mut f.reader, &mut l).unwrap();
        assert_eq!(l.trim_end(), format!("L {leader_addr}"));
        f.send("A 1 k9 o9 0 5").unwrap();
        assert_eq!(f.answer(Duration::from_secs(3)).unwrap(), format!("M {leader_addr}"));
        assert_eq!(f.answer(Duration::from_secs(3)).unwrap(), "", "closed after M");
    }

    // Admin: status, metrics, locks.
    let s = status(c.nodes[leader].admin).unwrap();
    assert_eq!(s["role"], "leader");
    assert_eq!(s["members"].as_array().unwrap().len(), 3);
    assert!(s["domain"].as_str().unwrap().len() == 32);
    let m = http_get(c.nodes[leader].admin, "/metrics").unwrap();
    assert!(m.contains("ticketing_grants_total 2"), "{m}");
    assert!(m.contains("ticketing_raft_is_leader 1"), "{m}");
    assert!(m.contains("ticketing_grant_wait_seconds_count 2"), "{m}");
    assert!(m.contains("ticketing_releases_total{result=\"released\"} 0"), "{m}");
    assert!(m.trim_end().ends_with("# EOF"), "{m}");
    let l = http_get(c.nodes[leader].admin, "/locks/k1").unwrap();
    let l: serde_json::Value = serde_json::from_str(&l).unwrap();
    assert_eq!(l["holder"]["token"].as_u64(), Some(ta));
    assert_eq!(http_get(c.nodes[leader].admin, "/healthz").as_deref(), Some("ok\n"));

    // A second bootstrap while the domain exists creates no domain: the
    // node joins the live one (docs/deployment.md, "A 3-node cluster").
    let domain = s["domain"].as_str().unwrap().to_owned();
    let other = (leader + 1) % 3;
    c.kill(other);
    c.start(other, true);
    assert!(c.wait_voter(other, Duration::from_secs(20)), "the node joined:\n{}", c.log(other));
    assert!(c.try_exit(other).is_none(), "it runs");
    assert_eq!(status(c.nodes[other].admin).unwrap()["domain"].as_str(), Some(domain.as_str()));
}

#[test]
fn five_nodes_form_and_fail_over() {
    let mut c = Cluster::new("five", 5);
    c.start_all();
    let leader = c.wait_leader(Duration::from_secs(20)).expect("a leader of five");
    for i in 0..5 {
        assert!(c.wait_voter(i, Duration::from_secs(10)), "node {i} is a voter");
    }
    let t1 = granted_token(&acquire_once(c.nodes[leader].client, "k", "o", 0, 5)).unwrap();
    let killed = Instant::now();
    c.kill(leader);
    let new = c.wait_leader(Duration::from_secs(15)).expect("a new leader of five");
    println!("five nodes: kill -9 of the leader -> new leader after {:.3} s", killed.elapsed().as_secs_f64());
    let t2 = granted_token(&acquire_once(c.nodes[new].client, "k2", "o", 0, 5)).unwrap();
    assert!(t2 > t1);
    c.start(leader, false);
    assert!(c.wait_voter(leader, Duration::from_secs(20)), "the restarted node replaces its old self");
    let s = status(c.nodes[new].admin).unwrap();
    assert_eq!(s["members"].as_array().unwrap().len(), 5, "{s}");
}
