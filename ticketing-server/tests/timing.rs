//! Lease expiry (with hand-over) and wait timers, with generous bounds.

mod common;
use common::*;
use std::time::{Duration, Instant};

#[tokio::test]
async fn lease_end_hands_over_to_the_queue_head() {
    let s = Server::start();
    let mut h = s.client().await;
    let first = owner();
    let t1 = h.grab(1, "le", &first, 1).await;
    let start = Instant::now();
    let mut w = s.client().await;
    let next = owner();
    w.acquire(1, "le", &next, 10, 5).await;
    let (t2, waited) = w.expect_grant(1, "le", &next).await;
    let took = start.elapsed();
    assert!(t2 > t1);
    assert!(took >= Duration::from_millis(800) && took < Duration::from_secs(4), "{took:?}");
    assert!((700..4000).contains(&waited), "waited_ms {waited}");
    // The expired grant can no longer be released.
    h.release(2, "le", &first, t1).await;
    h.expect("N 2 le").await;
}

#[tokio::test]
async fn lease_end_frees_the_key() {
    let s = Server::start();
    let mut h = s.client().await;
    let first = owner();
    let t1 = h.grab(1, "lf", &first, 1).await;
    // Lets the 1 s lease run out (the behaviour under test, not a synchronisation).
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let mut c = s.client().await;
    let o = owner();
    c.acquire(1, "lf", &o, 0, 5).await;
    let (t2, _) = c.expect_grant(1, "lf", &o).await;
    assert!(t2 > t1);
    h.release(2, "lf", &first, t1).await;
    h.expect("N 2 lf").await;
}

#[tokio::test]
async fn wait_timer_gives_t() {
    let s = Server::start();
    let mut h = s.client().await;
    h.grab(1, "wt", &owner(), 30).await;
    let mut w = s.client().await;
    let start = Instant::now();
    w.acquire(9, "wt", &owner(), 1, 5).await;
    w.expect("T 9 wt").await;
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(4), "{took:?}");
}

#[tokio::test]
async fn timed_out_waiter_is_skipped_at_hand_over() {
    let s = Server::start();
    let mut h = s.client().await;
    let first = owner();
    let t1 = h.grab(1, "sk", &first, 30).await;
    let mut short = s.client().await;
    short.acquire(1, "sk", &owner(), 1, 5).await;
    let mut long = s.client().await;
    let lo = owner();
    long.acquire(1, "sk", &lo, 20, 5).await;
    short.expect("T 1 sk").await;
    h.release(2, "sk", &first, t1).await;
    h.expect("R 2 sk").await;
    long.expect_grant(1, "sk", &lo).await;
}
