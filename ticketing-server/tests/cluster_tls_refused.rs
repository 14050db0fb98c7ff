//! Mutual TLS between peers refuses, with a clear log line and before Raft,
//! a node whose certificate another CA signed, a plain-TCP node, and a node
//! with the right certificate but the wrong peer token; a raw plain-TCP
//! connection to the peer port gets no greeting in clear. The replaced node
//! with the right certificate and token then joins (the setup is sound).

mod cluster_common;
use cluster_common::*;
use std::io::{Read, Write};
use std::time::{Duration, Instant};
use ticketing_testkit::Pki;

/// Ids of the members in the admin `/status` of node `i`.
fn member_ids(c: &Cluster, i: usize) -> Vec<u64> {
    status(c.nodes[i].admin)
        .and_then(|s| s["members"].as_array().map(|ms| ms.iter().filter_map(|m| m["id"].as_u64()).collect()))
        .unwrap_or_default()
}

/// Node `i` runs for `d` and never gets a domain or membership; the others never list it.
fn never_joins(c: &Cluster, i: usize, others: &[usize], d: Duration) {
    let end = Instant::now() + d;
    let mut me = None;
    while Instant::now() < end {
        if let Some(s) = status(c.nodes[i].admin) {
            assert!(s["domain"].is_null(), "the refused node got a domain: {s}");
            me = s["node_id"].as_u64();
        }
        for &o in others {
            if let Some(id) = me {
                assert!(!member_ids(c, o).contains(&id), "node {o} lists the refused node as a member");
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(me.is_some(), "the refused node's admin port answered");
}

#[test]
fn foreign_ca_plain_tcp_and_wrong_token_are_refused() {
    let pki = Pki::new();
    let foreign = Pki::new();
    let dir = log_dir();
    let token = dir.join("refused-peer.token");
    let wrong = dir.join("refused-wrong.token");
    std::fs::write(&token, "right-peer-token\n").unwrap();
    std::fs::write(&wrong, "wrong-peer-token\n").unwrap();
    let token_args = |f: &std::path::Path| vec!["--peer-token-file".to_owned(), f.to_str().unwrap().to_owned()];
    let mut c = Cluster::new("tls-refused", 3);
    for i in 0..3 {
        c.nodes[i].args = [pki.peer_args(i + 1, &pki.path("ca.pem")), token_args(&token)].concat();
    }
    c.start_all();
    let leader = c.wait_serving(Duration::from_secs(30)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(15)));
    }
    let victim = (leader + 1) % 3;
    let others: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    let members_before = member_ids(&c, leader);

    // A raw plain-TCP connection to a TLS peer port: no greeting in clear.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", c.nodes[leader].peer)).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let _ = raw.write_all(b"AUTH 00 00\n");
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).unwrap_or(0);
    assert!(!buf[..n].starts_with(b"TICKETING-PEER"), "{:?}", &buf[..n]);

    // 1. A certificate signed by another CA (that node trusts only its own CA).
    c.kill(victim);
    c.nodes[victim].args = [foreign.peer_args(victim + 1, &foreign.path("ca.pem")), token_args(&token)].concat();
    c.start(victim, false);
    never_joins(&c, victim, &others, Duration::from_secs(4));
    assert!(c.log(victim).contains("cannot join peer"), "{}", c.log(victim));
    assert!(c.log(victim).contains("TLS handshake failed"), "{}", c.log(victim));

    // 2. The foreign certificate, but trusting our CA: our nodes refuse its certificate.
    c.kill(victim);
    c.nodes[victim].args = [foreign.peer_args(victim + 1, &pki.path("ca.pem")), token_args(&token)].concat();
    c.start(victim, false);
    never_joins(&c, victim, &others, Duration::from_secs(4));
    let refused_cert = others.iter().any(|&o| {
        c.log(o)
            .lines()
            .any(|l| l.contains("peer refused: TLS handshake failed") && l.contains("invalid peer certificate"))
    });
    assert!(refused_cert, "a member logs the refused certificate:\n{}", c.log(others[0]));

    // 3. A plain-TCP node.
    c.kill(victim);
    c.nodes[victim].args = token_args(&token);
    c.start(victim, false);
    never_joins(&c, victim, &others, Duration::from_secs(4));
    assert!(c.log(victim).contains("a TLS ClientHello"), "{}", c.log(victim));

    // 4. The right certificate, the wrong peer token.
    c.kill(victim);
    c.nodes[victim].args = [pki.peer_args(victim + 1, &pki.path("ca.pem")), token_args(&wrong)].concat();
    c.start(victim, false);
    never_joins(&c, victim, &others, Duration::from_secs(4));
    let refused_token = others.iter().any(|&o| c.log(o).contains("peer refused: wrong peer token"));
    assert!(refused_token, "a member logs the wrong token:\n{}", c.log(others[0]));
    for &o in &others {
        assert!(!c.log(o).contains("right-peer-token") && !c.log(o).contains("wrong-peer-token"), "a token in a log");
    }
    assert!(!c.log(victim).contains("wrong-peer-token"), "a token in a log");

    // The membership never changed; the node with the right material joins.
    assert_eq!(member_ids(&c, leader), members_before);
    c.kill(victim);
    c.nodes[victim].args = [pki.peer_args(victim + 1, &pki.path("ca.pem")), token_args(&token)].concat();
    c.start(victim, false);
    assert!(c.wait_voter(victim, Duration::from_secs(30)), "the right certificate and token join");
}
