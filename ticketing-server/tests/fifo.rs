//! docs/protocol.md §6: waiters are granted in arrival order with strictly increasing
//! tokens, on one connection and across several.

mod common;
use common::*;

const N: u64 = 6;

#[tokio::test]
async fn fifo_on_one_connection() {
    let s = Server::start();
    let mut h = s.client().await;
    let first = owner();
    let mut token = h.grab(100, "f1", &first, 30).await;
    let mut c = s.client().await;
    let owners: Vec<String> = (0..N).map(|_| owner()).collect();
    for (i, o) in owners.iter().enumerate() {
        c.acquire(i as u64, "f1", o, 30, 30).await;
    }
    c.send(b"P 99\n").await;
    c.expect("P 99").await;
    h.release(101, "f1", &first, token).await;
    h.expect("R 101 f1").await;
    for (i, o) in owners.iter().enumerate() {
        let (t, _) = c.expect_grant(i as u64, "f1", o).await;
        assert!(t > token, "tokens strictly increase");
        token = t;
        c.release(1000 + i as u64, "f1", o, t).await;
        c.expect(&format!("R {} f1", 1000 + i)).await;
    }
}

#[tokio::test]
async fn fifo_across_connections() {
    let s = Server::start();
    let mut h = s.client().await;
    let first = owner();
    let mut token = h.grab(1, "f2", &first, 30).await;
    let mut waiters = Vec::new();
    for i in 0..N {
        let mut c = s.client().await;
        let o = owner();
        c.acquire(i, "f2", &o, 30, 30).await;
        // The pong proves the server has read (and queued) the acquire.
        c.send(b"P 999\n").await;
        c.expect("P 999").await;
        waiters.push((c, o, i));
    }
    h.release(2, "f2", &first, token).await;
    h.expect("R 2 f2").await;
    for (c, o, i) in waiters.iter_mut() {
        let (t, _) = c.expect_grant(*i, "f2", o).await;
        assert!(t > token);
        token = t;
        c.release(1000, "f2", o, t).await;
        c.expect("R 1000 f2").await;
    }
}

#[tokio::test]
async fn tokens_increase_across_keys_and_follow_the_wall_clock() {
    let s = Server::start();
    let mut c = s.client().await;
    let mut last = 0;
    for i in 0..20u64 {
        let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as u64;
        let t = c.grab(i, &format!("tk{i}"), &owner(), 5).await;
        assert!(t > last, "strictly increasing");
        // docs/protocol.md §6: token = max(last + 1, the leader's wall clock in µs).
        assert!(t + 10_000_000 >= before && t < before + 60_000_000, "token {t} vs clock {before}");
        last = t;
    }
}
