//! SIGHUP on every node of a mutual-TLS cluster rotates the peer token
//! (three steps: old sent + new accepted, new sent + old accepted, new only)
//! and the peer certificates and CA (new CA added, new certificates, old CA
//! removed) under a light client load that never fails. Afterwards new peer
//! handshakes use only the new material: a raw dial with the old token or an
//! old certificate is refused, and a killed leader's node rejoins.

mod cluster_common;
use cluster_common::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ticketing_client::TicketBroker;
use ticketing_server::cluster::wire::{self, HandshakeRefusal, RefusalCode, WireError};
use ticketing_server::tls::PeerTls;
use ticketing_testkit::Pki;
use tokio::io::BufReader;

fn reloads(admin: u16) -> u64 {
    ticketing_testkit::metric(admin, "ticketing_reloads_total{result=\"ok\"}").map_or(0, |v| v as u64)
}

fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// SIGHUP to every running node; waits until each counted reload number `n` as ok.
async fn hup_all(c: &Cluster, n: u64) {
    for i in 0..c.nodes.len() {
        if c.nodes[i].child.is_some() {
            c.signal(i, "HUP");
        }
    }
    let end = Instant::now() + Duration::from_secs(10);
    for i in 0..c.nodes.len() {
        while c.nodes[i].child.is_some() && reloads(c.nodes[i].admin) < n {
            assert!(Instant::now() < end, "node {i}: reload {n} not ok:\n{}", c.log(i));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A raw peer dial (TLS with `client`'s node1 certificate, then the peer handshake with `token`).
async fn dial(port: u16, client: &Pki, ca: &Path, token: &[u8]) -> Result<Vec<u8>, WireError> {
    let tls = PeerTls::load(&client.dir.join("node1.pem"), &client.dir.join("node1-key.pem"), ca).unwrap();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_name();
    let stream =
        tokio_rustls::TlsConnector::from(tls.client).connect(name, tcp).await.map_err(|e| WireError::Tls(e.into()))?;
    let served = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let (r, mut w) = tokio::io::split(stream);
    let mut r = BufReader::new(r);
    within(Duration::from_secs(8), "peer handshake", wire::dial_handshake(&mut r, &mut w, Some(token), None)).await?;
    Ok(served)
}

fn rustls_name() -> tokio_rustls::rustls::pki_types::ServerName<'static> {
    tokio_rustls::rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_rotates_peer_tokens_and_certificates_without_a_failed_request() {
    let (old, new) = (Pki::new(), Pki::new());
    let dir: PathBuf = log_dir().join("cluster-reload");
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("peer-ca.pem");
    write(&ca, &old.pem("ca.pem"));
    let mut c = Cluster::new("cluster-reload", 3);
    let files: Vec<(PathBuf, PathBuf, PathBuf)> = (0..3)
        .map(|i| (dir.join(format!("n{i}.pem")), dir.join(format!("n{i}-key.pem")), dir.join(format!("n{i}.token"))))
        .collect();
    let p = |p: &Path| p.to_str().unwrap().to_owned();
    for (i, (cert, key, token)) in files.iter().enumerate() {
        write(cert, &old.pem(&format!("node{}.pem", i + 1)));
        write(key, &old.pem(&format!("node{}-key.pem", i + 1)));
        write(token, "old-peer-token\n");
        c.nodes[i].args = vec![
            "--peer-tls-cert".into(),
            p(cert),
            "--peer-tls-key".into(),
            p(key),
            "--peer-tls-ca".into(),
            p(&ca),
            "--peer-token-file".into(),
            p(token),
        ];
    }
    c.start_all();
    let leader = c.wait_serving(Duration::from_secs(30)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(15)));
    }
    let addrs: Vec<String> = c.nodes.iter().map(|n| n.client_addr()).collect();
    let broker = TicketBroker::builder(addrs).build().unwrap();
    assert!(broker.wait_ready(Duration::from_secs(10)).await);
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (b, stop) = (broker.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut ok, mut failures) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                match b.acquire_secs("load", 2.0, 5.0, 0.0).await {
                    Ok(Some(t)) => match t.release().await {
                        Ok(true) => ok += 1,
                        other => failures.push(format!("release: {other:?}")),
                    },
                    other => failures.push(format!("acquire: {other:?}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (ok, failures)
        })
    };

    // Peer token rotation, every node at each step.
    for (n, text) in
        [(1, "old-peer-token\nnew-peer-token\n"), (2, "new-peer-token\nold-peer-token\n"), (3, "new-peer-token\n")]
    {
        for (_, _, token) in &files {
            write(token, text);
        }
        hup_all(&c, n).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Certificate rotation: add the new CA, switch every certificate, remove the old CA.
    write(&ca, &format!("{}{}", old.pem("ca.pem"), new.pem("ca.pem")));
    hup_all(&c, 4).await;
    for (i, (cert, key, _)) in files.iter().enumerate() {
        write(cert, &new.pem(&format!("node{}.pem", i + 1)));
        write(key, &new.pem(&format!("node{}-key.pem", i + 1)));
    }
    hup_all(&c, 5).await;
    write(&ca, &new.pem("ca.pem"));
    hup_all(&c, 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = load.await.unwrap();
    assert!(failures.is_empty() && ok > 0, "{ok} ok, failures {failures:?}");

    // New handshakes use only the new material.
    let port = c.nodes[leader].peer;
    let served = dial(port, &new, &ca, b"new-peer-token").await.expect("new certificate and token");
    assert_eq!(served, new.der(&format!("node{}.pem", leader + 1)));
    assert_eq!(
        dial(port, &new, &ca, b"old-peer-token").await,
        Err(WireError::Refused(HandshakeRefusal::ByPeer { code: RefusalCode::AuthFailed, detail: String::new() }))
    );
    let old_ca = dir.join("old-ca.pem");
    write(&old_ca, &old.pem("ca.pem"));
    assert!(matches!(dial(port, &old, &old_ca, b"new-peer-token").await, Err(WireError::Tls(_))), "old certificates");

    // Failover and rejoin: fresh peer connections everywhere, all with the new material.
    c.kill(leader);
    let new_leader = c.wait_serving(Duration::from_secs(20)).expect("a new leader");
    assert_ne!(new_leader, leader);
    c.start(leader, false);
    assert!(c.wait_voter(leader, Duration::from_secs(30)), "the restarted node joins with the new material");
    let t = broker.acquire_secs("after", 5.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert!(t.release().await.unwrap());
    broker.close().await;
    for i in 0..3 {
        assert!(!c.log(i).contains("peer-token\""), "a token in a log");
        assert!(!c.log(i).contains("old-peer-token") && !c.log(i).contains("new-peer-token"), "a token in a log");
    }
}
