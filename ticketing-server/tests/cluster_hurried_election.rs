//! A follower that refuses a candidate for the candidate's shorter log, once
//! the leader has been silent for `election_timeout_max`, campaigns at once
//! instead of waiting for its own election timer (docs/deployment.md,
//! "Failover timing"). The candidate is played by the test on the peer port,
//! with a later term and an empty log.

mod cluster_common;
use cluster_common::*;
use openraft::raft::VoteRequest;
use openraft::Vote;
use std::time::{Duration, Instant};
use ticketing_server::cluster::types::{DomainId, NodeId};
use ticketing_server::cluster::wire::{Body, Envelope, VERSION};

/// openraft's leader lease: `--election-timeout-max-ms`.
const MAX_MS: u64 = 1600;
/// A follower's own timer fires no earlier than lease + this after the last heartbeat.
const MIN_MS: u64 = 1500;

fn metric(admin: u16, name: &str) -> Option<u64> {
    ticketing_testkit::metric(admin, name).map(|v| v as u64)
}

#[test]
fn a_follower_with_the_longer_log_campaigns_at_once() {
    let mut c = Cluster::new("hurry", 3);
    let timing = ["--heartbeat-ms", "50", "--election-timeout-min-ms", "1500", "--election-timeout-max-ms", "1600"];
    for n in &mut c.nodes {
        n.args = timing.iter().map(|s| s.to_string()).collect();
    }
    c.start_all();
    let leader = c.wait_leader(Duration::from_secs(30)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(20)), "node {i} a voter");
    }
    // Something in the log, on every node.
    assert!(granted_token(&acquire_once(c.nodes[leader].client, "k", "o", 0, 30)).is_some());
    let b = (0..3).find(|&i| i != leader).unwrap();
    let st = status(c.nodes[b].admin).expect("status");
    let b_id = NodeId(st["node_id"].as_u64().expect("node_id"));
    let domain = DomainId::parse(st["domain"].as_str().expect("domain")).expect("a domain id");
    let term = metric(c.nodes[b].admin, "ticketing_raft_term").expect("raft term");
    assert_eq!(metric(c.nodes[b].admin, "ticketing_raft_hurried_campaigns_total"), Some(0));

    c.kill(leader);
    let killed = Instant::now();
    // The time under test: past the followers' leader lease (MAX_MS after the
    // last heartbeat), well before their own timers (MAX_MS + MIN_MS).
    std::thread::sleep(Duration::from_millis(MAX_MS + 300));

    let mut link = peer_link(c.nodes[b].peer);
    let candidate = Vote::new(term + 1, NodeId(7));
    let env = Envelope {
        v: VERSION,
        id: 1,
        to: b_id,
        domain: Some(domain),
        body: Body::VoteReq(VoteRequest::new(candidate, None)),
    };
    link.send(&env);
    let asked = Instant::now();
    match link.read().body {
        Body::VoteResp(Ok(resp)) => assert!(!resp.vote_granted, "a candidate with an empty log is refused: {resp:?}"),
        other => panic!("not a vote answer: {other:?}"),
    }

    // B campaigned at once (counted), and the cluster has a leader again.
    let end = Instant::now() + Duration::from_secs(20);
    while metric(c.nodes[b].admin, "ticketing_raft_hurried_campaigns_total").unwrap_or(0) == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        metric(c.nodes[b].admin, "ticketing_raft_hurried_campaigns_total").unwrap_or(0) >= 1,
        "the follower did not campaign at once:\n{}",
        c.log(b)
    );
    let new = c.wait_leader(Duration::from_secs(20)).expect("a new leader");
    assert_ne!(new, leader);
    println!(
        "vote refused {:.3} s after the kill; new leader {:.3} s after the refusal (own timers: >= {:.1} s after the kill)",
        asked.duration_since(killed).as_secs_f64(),
        asked.elapsed().as_secs_f64(),
        (MAX_MS + MIN_MS) as f64 / 1000.0
    );
    // Tokens go on above the old leader's.
    let t = granted_token(&acquire_once(c.nodes[new].client, "k2", "o", 0, 30)).expect("a grant on the new leader");
    assert!(t > 0);
}
