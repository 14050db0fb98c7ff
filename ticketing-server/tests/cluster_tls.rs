//! A 3-node cluster with mutual TLS everywhere: between peers
//! (`--peer-tls-cert/key/ca`), on the client port with client certificates
//! required (`--tls-client-ca`) and client and peer tokens. It forms, serves
//! a TLS client, fails over when the leader is killed, keeps serving, and
//! the killed node rejoins over TLS.

mod cluster_common;
use cluster_common::*;
use std::time::Duration;
use ticketing_client::{TicketBroker, Tls};
use ticketing_testkit::Pki;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_cluster_forms_fails_over_and_keeps_serving() {
    let pki = Pki::new();
    let dir = log_dir();
    let peer_token = dir.join("cluster-tls-peer.token");
    let client_tokens = dir.join("cluster-tls-client.tokens");
    std::fs::write(&peer_token, "peer-secret-1\n").unwrap();
    std::fs::write(&client_tokens, "client-secret-1\n").unwrap();
    let mut c = Cluster::new("cluster-tls", 3);
    for i in 0..3 {
        let mut args = pki.peer_args(i + 1, &pki.path("ca.pem"));
        args.extend([
            "--tls-cert".into(),
            pki.path(&format!("node{}.pem", i + 1)),
            "--tls-key".into(),
            pki.path(&format!("node{}-key.pem", i + 1)),
            "--tls-client-ca".into(),
            pki.path("ca.pem"),
            "--peer-token-file".into(),
            peer_token.to_str().unwrap().into(),
            "--client-tokens-file".into(),
            client_tokens.to_str().unwrap().into(),
        ]);
        c.nodes[i].args = args;
    }
    c.start_all();
    let leader = c.wait_serving(Duration::from_secs(30)).expect("a leader over mutual TLS");
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(15)), "node {i} is a voter");
    }
    for i in 0..3 {
        assert!(c.log(i).contains("peer_tls=true"), "node {i} runs peer TLS");
        assert!(!c.log(i).contains("peer refused"), "node {i}: {}", c.log(i));
    }

    let addrs: Vec<String> = c.nodes.iter().map(|n| n.client_addr()).collect();
    let broker = TicketBroker::builder(addrs.clone())
        .token("client-secret-1")
        .tls(Tls::CaFile(pki.path("ca.pem").into()))
        .tls_client_cert(pki.path("client.pem"))
        .tls_client_key(pki.path("client-key.pem"))
        .build()
        .unwrap();
    assert!(broker.wait_ready(Duration::from_secs(15)).await, "{:?}", broker.status().await);
    let mut last = 0;
    for i in 0..5 {
        let t = broker.acquire_secs(&format!("k{i}"), 1.0, 10.0, 0.0).await.unwrap().expect("granted");
        assert!(t.token() > last);
        last = t.token();
        assert!(t.release().await.unwrap());
    }

    c.kill(leader);
    let new = c.wait_serving(Duration::from_secs(20)).expect("a new leader after the kill");
    assert_ne!(new, leader);
    assert!(broker.wait_ready(Duration::from_secs(15)).await, "the client follows the new leader");
    for i in 0..5 {
        let t = within(
            Duration::from_secs(20),
            "acquire after failover",
            broker.acquire_secs(&format!("f{i}"), 5.0, 10.0, 0.0),
        )
        .await
        .unwrap()
        .expect("granted by the new leader");
        assert!(t.token() > last, "tokens keep increasing across the failover");
        last = t.token();
        assert!(t.release().await.unwrap());
    }

    // The killed node comes back (a new process, new NodeId) and rejoins over TLS.
    c.start(leader, false);
    assert!(c.wait_voter(leader, Duration::from_secs(30)), "restarted node rejoins over mutual TLS");
    broker.close().await;
}
