//! A whole durable 3-node cluster killed with `kill -9` and restarted on its
//! data dirs (with the same command lines, `--bootstrap` included) keeps its
//! domain, every node its NodeId, every holder its token and lease, and
//! issues tokens above every earlier one (docs/deployment.md, "Durability").

mod cluster_common;
use cluster_common::*;

#[test]
fn kill_9_of_every_node_keeps_the_domain_holders_and_tokens() {
    let name = "durable-restart";
    let (mut c, leader) = durable_cluster(name, 3, |i| node_data_dir(name, i));
    let ids: Vec<(u64, String)> = (0..3).map(|i| identity(&c, i, secs(5)).expect("identity")).collect();
    let port = c.nodes[leader].client;
    let t1 = granted_token(&acquire_once(port, "k1", "o1", 0, 120)).expect("k1 granted");
    let t2 = granted_token(&acquire_once(port, "k2", "o2", 0, 120)).expect("k2 granted");

    for i in 0..3 {
        c.kill(i);
    }
    for i in 0..3 {
        c.start(i, i == 0);
    }
    let leader = c.wait_serving(secs(30)).expect("a leader after the restart of every node");
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(identity(&c, i, secs(10)).as_ref(), Some(id), "node {i} kept its NodeId and domain");
        assert!(!c.log(i).contains("bootstrapped a new fencing domain"), "node {i}: {}", c.log(i));
    }
    let port = c.nodes[leader].client;
    let held = query_once(port, "k1", "o1");
    let f: Vec<&str> = held.split(' ').collect();
    assert!(f.len() == 6 && f[0] == "H" && f[4] == t1.to_string(), "k1 held by o1 with its token: {held}");
    let remaining: u64 = f[5].parse().unwrap();
    assert!(remaining > 60_000 && remaining <= 120_000, "lease end kept in domain time: {held}");
    assert!(query_once(port, "k2", "o2").starts_with(&format!("H 1 k2 o2 {t2} ")));
    let busy = acquire_once(port, "k1", "o3", 0, 5);
    assert_eq!(busy, "T 1 k1", "k1 is still held");
    let t3 = granted_token(&acquire_once(port, "k3", "o3", 0, 5)).expect("k3 granted");
    assert!(t3 > t2 && t2 > t1, "tokens keep increasing: {t1} {t2} {t3}");
}
