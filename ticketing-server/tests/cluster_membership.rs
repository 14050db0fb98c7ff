//! Online membership change (docs/operating.md, "Growing and shrinking a
//! cluster"): a durable 3-node cluster grows to 5 through the admin API,
//! keeps granting with two nodes down, refuses a shrink that would lose the
//! majority, and shrinks back to 3 removing its own leader; tokens only go
//! up. A node restarted with `--bootstrap` while its domain is alive joins
//! it instead of exiting.

/// The `ticketing cluster` command's requests (its exit codes are tested in
/// its own crate).
#[path = "../../ticketing-client/src/cli_admin.rs"]
#[allow(dead_code)]
mod cli_admin;
mod cluster_common;
use cluster_common::{acquire_once, granted_token, node_data_dir, peer_token_args, secs, status, Cluster};
use serde_json::Value;
use std::time::{Duration, Instant};

/// `POST` a membership change to node `i`'s admin port: (status, JSON).
fn change(c: &Cluster, i: usize, path: &str, body: &str) -> (u16, Value) {
    let (code, text) = ticketing_testkit::http_post_json(c.nodes[i].admin, path, body, secs(60))
        .unwrap_or_else(|| panic!("no answer from node {i} to {path}"));
    (code, serde_json::from_str(&text).unwrap_or_else(|_| panic!("{code}: {text}")))
}

/// `ticketing cluster` against node `i`'s admin port.
fn cli(c: &Cluster, i: usize, change: cli_admin::Change) -> Result<Value, cli_admin::Failure> {
    let admin = format!("127.0.0.1:{}", c.nodes[i].admin);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(cli_admin::cluster(&admin, &change, None, None))
}

fn voters(c: &Cluster, i: usize) -> usize {
    status(c.nodes[i].admin)
        .and_then(|s| s["members"].as_array().map(|ms| ms.iter().filter(|m| m["voter"] == true).count()))
        .unwrap_or(0)
}

/// A grant of a fresh key on the serving leader: its token.
fn grant(c: &Cluster, key: &str) -> u64 {
    let leader = c.wait_serving(secs(30)).expect("a serving leader");
    let line = acquire_once(c.nodes[leader].client, key, "o", 5, 30);
    granted_token(&line).unwrap_or_else(|| panic!("{line}"))
}

fn peer(c: &Cluster, i: usize) -> String {
    format!("127.0.0.1:{}", c.nodes[i].peer)
}

#[test]
fn a_durable_cluster_grows_to_five_and_shrinks_back_to_three_under_its_own_leader() {
    let name = "membership";
    let mut c = Cluster::new(name, 5);
    let token = peer_token_args(name);
    let three = (0..3).map(|i| peer(&c, i)).collect::<Vec<_>>().join(",");
    for i in 0..5 {
        let data = node_data_dir(name, i).display().to_string();
        c.nodes[i].args = token.iter().cloned().chain(["--data-dir".into(), data]).collect();
        if i < 3 {
            c.nodes[i].peers = Some(three.clone());
        }
    }
    for i in 0..3 {
        c.start(i, i == 0);
    }
    let leader = c.wait_serving(secs(30)).expect("a leader");
    let t0 = grant(&c, "before-grow");

    // Refused before anything changes: a node that is not running, one address.
    let (code, v) =
        change(&c, leader, "/cluster/add", &format!(r#"{{"peers":["{}","{}"]}}"#, peer(&c, 3), peer(&c, 4)));
    assert_eq!(code, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("start the new node first"), "{v}");
    let (code, v) = change(&c, leader, "/cluster/add", &format!(r#"{{"peers":["{}"]}}"#, peer(&c, 3)));
    assert_eq!(code, 409, "{v}");
    assert!(v["error"].as_str().unwrap().contains("exactly two"), "{v}");

    // Grow: the new nodes know all five peers, the old ones keep their three.
    c.start(3, false);
    c.start(4, false);
    let follower = (0..3).find(|&i| i != leader).unwrap();
    let (code, v) = change(&c, follower, "/cluster/add", "{}");
    assert_eq!(code, 400, "a body without peers: {v}");
    let body = format!(r#"{{"peers":["{}","{}"]}}"#, peer(&c, 3), peer(&c, 4));
    let (code, v) = change(&c, follower, "/cluster/add", &body);
    assert_eq!(code, 503, "a follower names the leader's admin port: {v}");
    assert_eq!(v["leader_admin"], format!("127.0.0.1:{}", c.nodes[leader].admin), "{v}");
    // The CLI's request, asked of the follower, is followed to the leader.
    let v = match cli(&c, follower, cli_admin::Change::Add(vec![peer(&c, 3), peer(&c, 4)])) {
        Ok(v) => v,
        Err(cli_admin::Failure::Refused(m) | cli_admin::Failure::Unavailable(m)) => panic!("{m}"),
        Err(_) => panic!("add failed"),
    };
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.iter().filter(|m| m["voter"] == true).count(), 5, "{v}");
    for i in 0..5 {
        assert!(c.wait_voter(i, secs(15)), "node {i} a voter");
    }
    let (code, v) = change(&c, leader, "/cluster/add", &body);
    assert_eq!(code, 409, "5 voters grow no further: {v}");

    // Two nodes down (not the leader): 3 of 5 still grant.
    let down: Vec<usize> = (0..5).filter(|&i| i != leader).take(2).collect();
    for &i in &down {
        c.kill(i);
    }
    let t1 = grant(&c, "two-down");
    assert!(t1 > t0, "{t1} > {t0}");
    // Removing two live nodes now would leave 1 live voter of 3: refused.
    let live: Vec<usize> = (0..5).filter(|&i| i != leader && !down.contains(&i)).collect();
    match cli(&c, leader, cli_admin::Change::Remove(vec![peer(&c, live[0]), peer(&c, live[1])])) {
        Err(cli_admin::Failure::Refused(m)) => assert!(m.contains("lose the majority"), "{m}"),
        Ok(v) => panic!("removed: {v}"),
        Err(_) => panic!("not refused"),
    }
    assert_eq!(voters(&c, leader), 5);

    // Back up (durable: they rejoin as themselves), then remove the leader
    // and one more by NodeId.
    for &i in &down {
        c.start(i, i == 0);
    }
    for &i in &down {
        assert!(c.wait_voter(i, secs(30)), "node {i} rejoined");
    }
    let other = live[0];
    let other_id = status(c.nodes[other].admin).unwrap()["node_id"].as_u64().unwrap();
    let body = format!(r#"{{"nodes":["{}","{other_id}"]}}"#, peer(&c, leader));
    let (code, v) = change(&c, leader, "/cluster/remove", &body);
    assert_eq!(code, 200, "{v}");
    let stay: Vec<usize> = (0..5).filter(|&i| i != leader && i != other).collect();
    let end = Instant::now() + secs(30);
    let new_leader = loop {
        let serving: Vec<usize> =
            stay.iter().copied().filter(|&i| status(c.nodes[i].admin).is_some_and(|s| s["serving"] == true)).collect();
        if serving.len() == 1 && voters(&c, serving[0]) == 3 {
            break serving[0];
        }
        assert!(Instant::now() < end, "no leader among the three that stay");
        std::thread::sleep(Duration::from_millis(50));
    };
    let line = acquire_once(c.nodes[new_leader].client, "after-shrink", "o", 5, 30);
    let t2 = granted_token(&line).unwrap_or_else(|| panic!("{line}"));
    assert!(t2 > t1, "{t2} > {t1}");
    let (code, v) = change(
        &c,
        new_leader,
        "/cluster/remove",
        &format!(r#"{{"nodes":["{}","{}"]}}"#, peer(&c, stay[0]), peer(&c, stay[1])),
    );
    assert_eq!(code, 409, "3 voters shrink no further: {v}");
}

#[test]
fn a_memory_node_restarted_with_bootstrap_joins_its_live_domain() {
    let mut c = Cluster::new("bootstrap-rejoin", 3);
    let token = peer_token_args("bootstrap-rejoin");
    for n in &mut c.nodes {
        n.args = token.clone();
    }
    c.start_all();
    c.wait_serving(secs(30)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(15)), "node {i} a voter");
    }
    let before = grant(&c, "before");
    // The bootstrap node dies and its supervisor starts the same command line.
    c.kill(0);
    c.start(0, true);
    assert!(c.wait_voter(0, secs(30)), "the restarted bootstrap node joined as a voter:\n{}", c.log(0));
    assert!(c.try_exit(0).is_none(), "it did not exit");
    assert!(c.log(0).contains("joining it instead"), "{}", c.log(0));
    assert!(grant(&c, "after") > before);
}
