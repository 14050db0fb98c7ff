//! The release lane resolves an Indeterminate acquire (docs/client.md,
//! "Release lane"): `Q`, then the exact `R` on `H`, so a grant whose answer
//! was lost is freed in about a failover instead of at its lease end.
//! Real Rust client, real servers; every wait is bounded.

mod client_common;
mod cluster_common;
mod common;

use client_common::ready_broker;
use cluster_common::{ms, secs, within, Cluster};
use common::Server;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ticketing_client::{Error, TicketBroker};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// A loopback proxy to `server` that, while `cut` is set, swallows the first
/// grant line (`A …`) it sees from the server and drops that connection: the
/// grant is committed, its answer is lost, the client's acquire ends Indeterminate.
async fn cutting_proxy(server: String, cut: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = TcpStream::connect(&server).await else { continue };
            let cut = cut.clone();
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (ur, mut uw) = upstream.into_split();
                let up = tokio::spawn(async move { tokio::io::copy(&mut cr, &mut uw).await });
                let mut lines = BufReader::new(ur).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if line.starts_with("A ") && cut.swap(false, Ordering::SeqCst) {
                        break; // swallow the grant, drop both sides
                    }
                    if cw.write_all(format!("{line}\n").as_bytes()).await.is_err() {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_grant_whose_answer_was_lost_is_queried_and_released() {
    let s = Server::start();
    let cut = Arc::new(AtomicBool::new(true));
    let proxy = cutting_proxy(s.addr.clone(), cut.clone()).await;
    let b = ready_broker(&proxy).await;
    let other = ready_broker(&s.addr).await;
    let r = within(secs(10), "acquire", b.acquire("resolve", secs(5), secs(60), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Indeterminate), "the caller still gets Indeterminate");
    assert!(!cut.load(Ordering::SeqCst), "the grant was committed and its answer swallowed");
    let lost_at = Instant::now();
    // Without the lane the key would stay held for its whole 60 s lease.
    let t = match within(secs(20), "acquire after", other.acquire("resolve", secs(10), secs(5), Duration::ZERO)).await {
        Ok(Some(t)) => t,
        r => panic!("{r:?}"),
    };
    let freed = lost_at.elapsed();
    println!("Indeterminate grant freed {freed:?} after the acquire ended");
    assert!(freed < secs(10), "freed only after {freed:?}");
    assert_eq!(t.release().await, Ok(true));
    b.close().await;
    other.close().await;
}

/// W3-style: 8 clients take turns on ONE key with 5 s leases; the leader is
/// killed with kill -9 in the middle. Checks exclusion and that the key comes
/// back, and prints how long the key was unavailable.
#[tokio::test]
async fn eight_clients_on_one_key_through_a_leader_kill() {
    let (mut c, leader) = tokio::task::spawn_blocking(|| {
        let mut c = Cluster::new("resolve-w3", 3);
        c.start_all();
        let leader = c.wait_leader(secs(20)).expect("a leader");
        for i in 0..3 {
            assert!(c.wait_voter(i, secs(10)), "node {i} is not a voter");
        }
        (c, leader)
    })
    .await
    .unwrap();
    let addrs: Vec<String> = (0..3).map(|i| c.nodes[i].client_addr()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicU64::new(0));
    let grants: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
    let outcomes: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let b = TicketBroker::builder(addrs.clone()).build().unwrap();
        assert!(within(secs(15), "wait_ready", b.wait_ready(secs(10))).await);
        let (stop, inside, grants, outcomes) = (stop.clone(), inside.clone(), grants.clone(), outcomes.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..200 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match b.acquire("w3", secs(10), secs(5), Duration::ZERO).await {
                    Ok(Some(t)) => {
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                        grants.lock().unwrap().push((Instant::now(), t.token()));
                        tokio::time::sleep(ms(20)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        let r = t.release().await;
                        outcomes.lock().unwrap().push(format!("release {r:?}"));
                    }
                    Ok(None) => outcomes.lock().unwrap().push("timeout".into()),
                    Err(e) => {
                        outcomes.lock().unwrap().push(format!("{e:?}"));
                        tokio::time::sleep(ms(50)).await;
                    }
                }
            }
            b.close().await;
        }));
    }
    // Grants counted since `since` reach `n`, or `limit` passes.
    let granted_since = |since: Instant, n: usize, limit: Duration| {
        let grants = grants.clone();
        async move {
            let end = Instant::now() + limit;
            while grants.lock().unwrap().iter().filter(|(at, _)| *at > since).count() < n && Instant::now() < end {
                tokio::time::sleep(ms(10)).await;
            }
        }
    };
    // The clients hand the key around before the kill.
    granted_since(Instant::now(), 20, secs(20)).await;
    let killed_at = Instant::now();
    c = tokio::task::spawn_blocking(move || {
        c.kill(leader);
        c
    })
    .await
    .unwrap();
    // The key comes back after the kill and goes around again.
    granted_since(killed_at, 20, secs(30)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        within(secs(30), "client task", t).await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let before = grants.iter().filter(|(at, _)| *at < killed_at).count();
    let first_after = grants.iter().find(|(at, _)| *at > killed_at).map(|(at, _)| at.duration_since(killed_at));
    let tokens: Vec<u64> = grants.iter().map(|(_, t)| *t).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens strictly increase in grant order");
    let outcomes = outcomes.lock().unwrap().clone();
    let indeterminate = outcomes.iter().filter(|o| o.contains("Indeterminate")).count();
    println!(
        "w3: {before} grants before the kill, {} after; key back {first_after:?} after kill -9; \
         {indeterminate} Indeterminate acquires",
        grants.len() - before
    );
    assert!(before > 0, "no grants before the kill");
    assert!(first_after.is_some(), "the key never came back after the kill");
    drop(c);
}
