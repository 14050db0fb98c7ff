//! Every node of a durable 3-node cluster killed with `kill -9` right after
//! an answer (within a millisecond of it), then restarted on its data dirs,
//! round after round: every answered grant is still held by its owner with
//! its token, every answered release stays released (docs/deployment.md,
//! "Durability"). A leader that came back as the leader of its old term
//! without an election served from a state that lacked its last answers.

mod cluster_common;
use cluster_common::*;

/// Rounds of (answers, whole-cluster kill, restart): the last answer before
/// the kill is a grant in even rounds and a release in odd ones.
const ROUNDS: usize = 6;

#[test]
fn a_whole_cluster_killed_right_after_an_answer_keeps_that_answer() {
    let name = "durable-kill-after-answer";
    let (mut c, mut leader) = durable_cluster(name, 3, |i| node_data_dir(name, i));
    // (key, owner, token) answered granted, and keys answered released.
    let mut held: Vec<(String, String, u64)> = Vec::new();
    let mut released: Vec<(String, String)> = Vec::new();
    let mut last_token = 0;
    for round in 0..ROUNDS {
        let mut conn = hello(c.nodes[leader].client).expect("connect to the leader");
        assert!(conn.ok.starts_with("OK leader"), "round {round}: {}", conn.ok);
        let mut ask = |line: String| -> String {
            conn.send(&line).expect("send");
            conn.answer(secs(10)).unwrap_or_else(|e| panic!("round {round}: no answer to {line}: {e}"))
        };
        let kept = format!("kept{round}");
        let freed = format!("freed{round}");
        let t = granted_token(&ask(format!("A 1 {kept} o{round} 0 120"))).expect("granted");
        held.push((kept.clone(), format!("o{round}"), t));
        let f = granted_token(&ask(format!("A 2 {freed} o{round} 0 120"))).expect("granted");
        if round % 2 == 0 {
            // Release first, then end on a grant.
            assert_eq!(ask(format!("R 3 {freed} o{round} {f}")), format!("R 3 {freed}"));
            released.push((freed, format!("o{round}")));
            let last = format!("last{round}");
            let t = granted_token(&ask(format!("A 4 {last} o{round} 0 120"))).expect("granted");
            held.push((last, format!("o{round}"), t));
            last_token = t;
        } else {
            // End on a release.
            assert_eq!(ask(format!("R 3 {freed} o{round} {f}")), format!("R 3 {freed}"));
            released.push((freed, format!("o{round}")));
            last_token = f;
        }
        kill_all(&mut c);

        for i in 0..3 {
            c.start(i, i == 0);
        }
        leader = c.wait_serving(secs(30)).unwrap_or_else(|| panic!("round {round}: no leader after the restart"));
        let port = c.nodes[leader].client;
        for (key, owner, token) in &held {
            let q = query_once(port, key, owner);
            assert!(q.starts_with(&format!("H 1 {key} {owner} {token} ")), "round {round}: {key} lost: {q}");
        }
        for (key, owner) in &released {
            assert_eq!(query_once(port, key, owner), format!("N 1 {key}"), "round {round}: {key} held again");
        }
    }
    let port = c.nodes[leader].client;
    let t = granted_token(&acquire_once(port, "after", "o", 0, 5)).expect("granted");
    assert!(t > last_token, "tokens keep increasing: {t} after {last_token}");
}

/// SIGKILL to every node first, then reaps them: the kills land within a
/// millisecond of each other and of the last answer.
fn kill_all(c: &mut Cluster) {
    for n in &mut c.nodes {
        if let Some(child) = n.child.as_mut() {
            let _ = child.kill();
        }
    }
    for i in 0..c.nodes.len() {
        c.kill(i);
    }
}
