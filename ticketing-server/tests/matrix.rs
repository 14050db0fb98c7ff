//! docs/protocol.md §6: every row of the request × key state matrix (standalone leader).

mod client_common;
mod cluster_common;
mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn acquire_wait0_free_grants() {
    let s = Server::start();
    let mut c = s.client().await;
    let me = owner();
    c.acquire(1, "free0", &me, 0, 5).await;
    let (token, waited) = c.expect_grant(1, "free0", &me).await;
    assert!(token >= 1);
    assert!(waited < 1000, "{waited}");
}

#[tokio::test]
async fn acquire_wait_free_grants() {
    let s = Server::start();
    let mut c = s.client().await;
    let me = owner();
    c.acquire(1, "freew", &me, 9, 5).await;
    c.expect_grant(1, "freew", &me).await;
}

#[tokio::test]
async fn acquire_wait0_held_is_t_at_once_and_never_queued() {
    let s = Server::start();
    let mut h = s.client().await;
    let me = owner();
    let token = h.grab(1, "held0", &me, 30).await;
    let mut c = s.client().await;
    c.acquire(1, "held0", &owner(), 0, 5).await;
    c.expect("T 1 held0").await;
    // Not queued: after the release the key is free, nobody got it.
    h.release(2, "held0", &me, token).await;
    h.expect("R 2 held0").await;
    c.silent(Duration::from_millis(200)).await;
    let o2 = owner();
    c.acquire(2, "held0", &o2, 0, 5).await;
    c.expect_grant(2, "held0", &o2).await;
}

#[tokio::test]
async fn acquire_wait_held_queues_and_release_hands_over_in_one_step() {
    let s = Server::start();
    let mut h = s.client().await;
    let me = owner();
    let t1 = h.grab(1, "hq", &me, 30).await;
    let mut w = s.client().await;
    let next = owner();
    w.acquire(7, "hq", &next, 10, 5).await;
    w.silent(Duration::from_millis(200)).await;
    h.release(2, "hq", &me, t1).await;
    h.expect("R 2 hq").await;
    let (t2, waited) = w.expect_grant(7, "hq", &next).await;
    assert!(t2 > t1);
    assert!((150..5000).contains(&waited), "waited_ms {waited}");
    // No gap, no contest: a wait=0 acquire right after finds the key held.
    let mut third = s.client().await;
    third.acquire(1, "hq", &owner(), 0, 5).await;
    third.expect("T 1 hq").await;
}

#[tokio::test]
async fn waiters_wait_ends_with_t() {
    let s = Server::start();
    let mut h = s.client().await;
    h.grab(1, "wt", &owner(), 30).await;
    let mut w = s.client().await;
    w.acquire(3, "wt", &owner(), 1, 5).await;
    w.expect("T 3 wt").await;
}

#[tokio::test]
async fn release_not_matching_is_n() {
    let s = Server::start();
    let mut c = s.client().await;
    let me = owner();
    // Free key.
    c.release(1, "nm", &me, 5).await;
    c.expect("N 1 nm").await;
    let token = c.grab(2, "nm", &me, 30).await;
    // Wrong owner, wrong token, wrong key.
    c.release(3, "nm", &owner(), token).await;
    c.expect("N 3 nm").await;
    c.release(4, "nm", &me, token + 1).await;
    c.expect("N 4 nm").await;
    c.release(5, "nm2", &me, token).await;
    c.expect("N 5 nm2").await;
    // Still held by the real grant.
    let mut d = s.client().await;
    d.acquire(1, "nm", &owner(), 0, 5).await;
    d.expect("T 1 nm").await;
    // Matching release, then the same release again.
    c.release(6, "nm", &me, token).await;
    c.expect("R 6 nm").await;
    c.release(7, "nm", &me, token).await;
    c.expect("N 7 nm").await;
}

#[tokio::test]
async fn wrong_release_does_not_disturb_the_queue() {
    let s = Server::start();
    let mut h = s.client().await;
    let me = owner();
    let t1 = h.grab(1, "wq", &me, 30).await;
    let mut w = s.client().await;
    let wo = owner();
    w.acquire(1, "wq", &wo, 10, 5).await;
    w.silent(Duration::from_millis(100)).await;
    h.release(2, "wq", &me, t1 + 1).await;
    h.expect("N 2 wq").await;
    w.silent(Duration::from_millis(100)).await;
    h.release(3, "wq", &me, t1).await;
    h.expect("R 3 wq").await;
    w.expect_grant(1, "wq", &wo).await;
}

#[tokio::test]
async fn closing_connection_leaves_the_queue_but_its_grant_stays() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let mut h = s.client().await;
    let me = owner();
    let t1 = h.grab(1, "cc", &me, 30).await;
    // A waiter that goes away...
    let mut dead = s.client().await;
    dead.acquire(1, "cc", &owner(), 30, 5).await;
    dead.send(b"P 2\n").await;
    dead.expect("P 2").await;
    // ...and one behind it.
    let mut live = s.client().await;
    let lo = owner();
    live.acquire(1, "cc", &lo, 30, 5).await;
    live.send(b"P 2\n").await;
    live.expect("P 2").await;
    client_common::wait_waiters(admin, "cc", 2).await;
    drop(dead);
    // The dead waiter has left the queue once the server saw the close.
    client_common::wait_waiters(admin, "cc", 1).await;
    h.release(2, "cc", &me, t1).await;
    h.expect("R 2 cc").await;
    let (t2, _) = live.expect_grant(1, "cc", &lo).await;

    // The grant of a closed connection stays until released.
    drop(live);
    // Once the server has seen the close (only `h` is left connected), the
    // grant is still there.
    let closed = client_common::gauge_becomes(admin, "ticketing_connections", 1, Duration::from_secs(10)).await;
    assert!(closed, "the server did not see the waiters' connections close");
    let mut c = s.client().await;
    c.acquire(1, "cc", &owner(), 0, 5).await;
    c.expect("T 1 cc").await;
    c.release(2, "cc", &lo, t2).await;
    c.expect("R 2 cc").await;
}

#[tokio::test]
async fn same_owner_and_connection_is_not_reentrant() {
    let s = Server::start();
    let mut c = s.client().await;
    let me = owner();
    let t1 = c.grab(1, "re", &me, 30).await;
    c.acquire(2, "re", &me, 0, 5).await;
    c.expect("T 2 re").await;
    // It queues behind itself like anyone else and gets the key on release.
    c.acquire(3, "re", &me, 10, 5).await;
    c.silent(Duration::from_millis(150)).await;
    c.release(4, "re", &me, t1).await;
    let first = c.line().await;
    let second = c.line().await;
    let (grant, rel) = if first.starts_with("A ") { (first, second) } else { (second, first) };
    assert_eq!(rel, "R 4 re");
    let (t2, _) = parse_grant(&grant, 3, "re", &me);
    assert!(t2 > t1);
}

/// A free key stays free while the no-op release of a non-matching `R` is
/// committed: an `A` pipelined right behind it is granted (even with wait 0
/// and a waiter cap of 0), a second one behind that first one is `T`.
#[tokio::test]
async fn acquire_right_after_a_release_of_a_free_key_is_granted() {
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "0"), ("TICKETING_MAX_WAITERS", "0")], &[]);
    let mut c = s.client().await;
    let (o1, o2, o3) = (owner(), owner(), owner());
    for (i, key) in ["nf0", "nf1", "nf2"].into_iter().enumerate() {
        let base = 10 * i as u64;
        let wait = if i == 1 { 5 } else { 0 };
        let frames =
            format!("R {} {key} {o1} 5\nA {} {key} {o2} {wait} 5\nA {} {key} {o3} 0 5\n", base + 1, base + 2, base + 3);
        c.send(frames.as_bytes()).await;
        let mut lines = vec![c.line().await, c.line().await, c.line().await];
        let grant = lines.iter().position(|l| l.starts_with("A ")).unwrap_or_else(|| panic!("no grant: {lines:?}"));
        let grant = lines.remove(grant);
        parse_grant(&grant, base + 2, key, &o2);
        lines.sort();
        assert_eq!(lines, vec![format!("N {} {key}", base + 1), format!("T {} {key}", base + 3)]);
    }
}

#[tokio::test]
async fn half_close_answers_what_is_committing_and_drops_waiters() {
    // Decision 7: after EOF, answers to requests already being committed are
    // written, the connection's waiters leave their queues, then it closes.
    let s = Server::start();
    let mut h = s.client().await;
    let holder = owner();
    let token = h.grab(1, "hc-held", &holder, 30).await;
    let mut c = s.client().await;
    let me = owner();
    c.send(format!("A 1 hc-free {me} 0 5\nA 2 hc-held {me} 30 5\nP 3\n").as_bytes()).await;
    c.shut_write().await;
    let mut lines = vec![c.line().await, c.line().await];
    lines.sort();
    assert!(lines[0].starts_with(&format!("A 1 hc-free {me} ")), "{lines:?}");
    assert_eq!(lines[1], "P 3");
    c.expect_closed().await;
    // The half-closed client's waiter left the queue: the release frees the key.
    h.release(2, "hc-held", &holder, token).await;
    h.expect("R 2 hc-held").await;
    let mut d = s.client().await;
    d.acquire(1, "hc-held", &owner(), 0, 5).await;
    let grant = d.line().await;
    assert!(grant.starts_with("A 1 hc-held "), "{grant}");
}
