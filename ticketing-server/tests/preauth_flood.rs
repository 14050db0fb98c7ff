//! Unauthenticated connections have their own budget per source address and
//! in total (docs/security.md, "Unauthenticated connections"): idle
//! connections that never authenticate push each other out and never keep
//! a peer or a client with the right token out.

mod cluster_common;
mod common;
use cluster_common::{peer_token_args, secs, Cluster};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Opens `n` idle connections to `port` (once it accepts) and keeps them.
fn flood(port: u16, n: usize) -> Vec<TcpStream> {
    let end = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "port {port} never accepted");
        std::thread::sleep(Duration::from_millis(20));
    }
    (0..n).filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok()).collect()
}

fn metric(admin: u16, name: &str) -> u64 {
    ticketing_testkit::metric(admin, name).map_or(0, |v| v as u64)
}

/// The two nodes that do not bootstrap start first and their peer ports are
/// flooded with 200 idle connections each, held for a minute (the
/// handshake timeout is raised so nothing but the budget frees a slot);
/// then the bootstrap node starts and must reach both through the floods.
#[test]
fn a_cluster_forms_while_its_peer_ports_are_flooded_with_idle_connections() {
    let mut c = Cluster::new("preauth-flood", 3);
    let token = peer_token_args("preauth-flood");
    for n in &mut c.nodes {
        n.args = token.iter().cloned().chain(["--peer-handshake-timeout".into(), "60".into()]).collect();
    }
    c.start(1, false);
    c.start(2, false);
    let mut held = flood(c.nodes[1].peer, 200);
    held.extend(flood(c.nodes[2].peer, 200));
    assert!(held.len() >= 300, "only {} idle connections opened", held.len());
    c.start(0, true);
    let leader = c.wait_serving(secs(30)).expect("the cluster formed through the floods");
    for i in 0..3 {
        assert!(c.wait_voter(i, secs(15)), "node {i} a voter");
    }
    // The floods pushed themselves out (the default share of one address is
    // 16): each flood connection beyond it was evicted, or refused while the
    // slots were still held by evicted ones closing.
    for i in [1, 2] {
        let admin = c.nodes[i].admin;
        let evicted = metric(admin, "ticketing_peer_preauth_evicted_total");
        let refused = metric(admin, "ticketing_peer_connections_refused_total");
        assert!(evicted > 0 && evicted + refused >= 150, "node {i}: {evicted} evicted, {refused} refused");
    }
    let line = cluster_common::acquire_once(c.nodes[leader].client, "after-the-flood", "o", 0, 5);
    assert!(cluster_common::granted_token(&line).is_some(), "{line}");
    drop(held);
}

#[tokio::test]
async fn a_client_with_its_token_connects_through_a_flood_of_idle_connections() {
    let admin = cluster_common::free_port();
    let tokens = common::temp_file("flood-token\n");
    // 50 slots: without the budget 200 idle connections would take them all
    // until the (raised) handshake timeout.
    let s = common::Server::with(
        &[],
        &[
            "--client-tokens-file",
            tokens.to_str().unwrap(),
            "--max-connections",
            "50",
            "--max-preauth-per-address",
            "8",
            "--handshake-timeout",
            "60",
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ],
    );
    let port: u16 = s.addr.rsplit(':').next().unwrap().parse().unwrap();
    let held = tokio::task::spawn_blocking(move || flood(port, 200)).await.unwrap();
    assert!(held.len() >= 150, "only {} idle connections opened", held.len());
    // Once the server has accepted every flood connection (each one beyond
    // the address's share of 8 evicted an older one or was refused) and the
    // evicted ones are closed (their slots free), the client is served.
    let flooded = held.len() as u64;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let (open, seen) = tokio::task::spawn_blocking(move || {
            let seen = metric(admin, "ticketing_client_preauth_evicted_total")
                + metric(admin, "ticketing_client_connections_refused_total");
            (metric(admin, "ticketing_connections"), seen)
        })
        .await
        .unwrap();
        if open <= 20 && seen + 8 >= flooded {
            break;
        }
        assert!(Instant::now() < end, "{open} connections still open, {seen} of {flooded} flood connections seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut c = common::Client::connect(&s.addr, b"flood-token").await;
    c.grab(1, "k", "o", 5).await;
    let (evicted, refused) = tokio::task::spawn_blocking(move || {
        (
            metric(admin, "ticketing_client_preauth_evicted_total"),
            metric(admin, "ticketing_client_connections_refused_total"),
        )
    })
    .await
    .unwrap();
    assert!(evicted > 0 && evicted + refused >= 150, "{evicted} evicted, {refused} refused");
    drop(held);
}
