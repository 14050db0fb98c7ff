//! Memory-mode and durable nodes in one domain: a restarted memory-mode node
//! comes back as a new node and is replaced (rolling learner replacement);
//! two durable nodes killed together (a majority) come back as themselves and
//! the domain lives on with its holders (docs/deployment.md, "Durability").

mod cluster_common;
use cluster_common::*;

#[test]
fn memory_node_is_replaced_durable_nodes_are_kept() {
    let name = "durable-mixed";
    let mut c = Cluster::new(name, 3);
    let token_args = peer_token_args(name);
    for i in 0..3 {
        c.nodes[i].args = token_args.clone();
        if i < 2 {
            let dir = node_data_dir(name, i);
            c.nodes[i].args.extend(["--data-dir".into(), dir.display().to_string()]);
        }
    }
    c.start_all();
    let leader = c.wait_serving(secs(30)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(15)), "node {i} a voter");
    }
    let ids: Vec<(u64, String)> = (0..3).map(|i| identity(&c, i, secs(5)).expect("identity")).collect();
    let t1 = granted_token(&acquire_once(c.nodes[leader].client, "k", "o1", 0, 120)).expect("granted");

    // The memory-mode node: a new NodeId, replaced as a voter.
    c.kill(2);
    c.start(2, false);
    assert!(c.wait_voter(2, secs(30)), "the restarted memory-mode node rejoins as a voter");
    let (id2, domain2) = identity(&c, 2, secs(5)).unwrap();
    assert_ne!(id2, ids[2].0, "a memory-mode node restarts as a new node");
    assert_eq!(domain2, ids[2].1);

    // Both durable nodes at once: a majority, kept by their data dirs.
    c.kill(0);
    c.kill(1);
    c.start(0, true);
    c.start(1, false);
    let leader = c.wait_serving(secs(30)).expect("the domain survives losing two durable nodes' processes");
    for (i, id) in ids.iter().enumerate().take(2) {
        assert_eq!(identity(&c, i, secs(10)).as_ref(), Some(id), "durable node {i} kept its identity");
    }
    let held = query_once(c.nodes[leader].client, "k", "o1");
    assert!(held.starts_with(&format!("H 1 k o1 {t1} ")), "the holder survives: {held}");
}
