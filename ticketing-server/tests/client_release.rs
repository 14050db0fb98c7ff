//! Releasing through the real Rust client: dropped tickets, `close`, and
//! dropping every handle free their keys and connections.

mod client_common;
mod cluster_common;
mod common;

use client_common::{gauge, gauge_becomes, grab, ready_broker, wait_waiters};
use cluster_common::{ms, secs, within};
use common::Server;
use std::time::{Duration, Instant};
use ticketing_client::Error;

#[tokio::test]
async fn dropped_ticket_frees_the_key_quickly() {
    let s = Server::start();
    let a = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    let t = grab(&a, "drop", 0, 30).await;
    let token = t.token();
    drop(t);
    let start = Instant::now();
    let got = loop {
        let r = within(secs(5), "acquire", b.acquire("drop", Duration::ZERO, secs(5), Duration::ZERO)).await;
        match r {
            Ok(Some(t)) => break t,
            Ok(None) => {}
            Err(e) => panic!("acquire after drop: {e:?}"),
        }
        assert!(start.elapsed() < secs(30), "the dropped ticket's key is still held after {:?}", start.elapsed());
        tokio::time::sleep(ms(50)).await;
    };
    println!("dropped ticket's key free after {:?}", start.elapsed());
    assert!(got.token() > token);
    assert_eq!(got.release().await, Ok(true));
}

#[tokio::test]
async fn close_fails_later_calls_and_releases_live_tickets() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let b = ready_broker(&s.addr).await;
    let other = ready_broker(&s.addr).await;
    let live = grab(&b, "close-live", 0, 30).await;
    let blocker = grab(&other, "close-wait", 0, 30).await;
    let b2 = b.clone();
    let pending = tokio::spawn(async move { b2.acquire("close-wait", secs(20), secs(5), Duration::ZERO).await });
    wait_waiters(admin, "close-wait", 1).await;

    within(secs(8), "close", b.close()).await;
    let r = within(secs(5), "pending acquire", pending).await.unwrap();
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Closed));
    let r = within(secs(5), "acquire after close", b.acquire("x", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Closed));
    assert!(!within(secs(5), "wait_ready after close", b.wait_ready(secs(1))).await);
    assert!(within(secs(5), "status after close", b.status()).await.is_none());
    assert_eq!(within(secs(7), "release after close", live.release()).await, Err(Error::Closed));

    // close() released the live ticket best-effort: the key is free at once.
    let r = within(secs(5), "acquire", other.acquire("close-live", secs(1), secs(5), Duration::ZERO)).await;
    match r {
        Ok(Some(t)) => {
            assert!(t.token() > live.token());
            assert_eq!(t.release().await, Ok(true));
        }
        r => panic!("key of a ticket released by close(): {r:?}"),
    }
    assert_eq!(blocker.release().await, Ok(true));
    drop(live);
    other.close().await;
}

#[tokio::test]
async fn dropping_every_handle_releases_and_disconnects() {
    // No close(): when the last broker handle and the last ticket are gone,
    // the driver releases best-effort and closes its connections.
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let b = ready_broker(&s.addr).await;
    assert!(gauge_becomes(admin, "ticketing_connections", 2, secs(10)).await, "two connections");
    let t = grab(&b, "orphan", 0, 30).await;
    drop(b);
    // The ticket keeps the driver alive (an observation window, not a
    // synchronisation: a driver that stopped would close within it).
    tokio::time::sleep(ms(300)).await;
    assert_eq!(tokio::task::spawn_blocking(move || gauge(admin, "ticketing_connections")).await.unwrap(), Some(2));
    assert_eq!(tokio::task::spawn_blocking(move || gauge(admin, "ticketing_held_keys")).await.unwrap(), Some(1));
    drop(t);
    assert!(gauge_becomes(admin, "ticketing_held_keys", 0, secs(5)).await, "dropped ticket not released");
    assert!(gauge_becomes(admin, "ticketing_connections", 0, secs(8)).await, "connections left open");
}
