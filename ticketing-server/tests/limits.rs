//! docs/configuration.md, "Limits": waiter caps and the held-keys cap answer `B`; the connection
//! limit answers `E overloaded`.

mod client_common;
mod cluster_common;
mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn per_key_waiter_cap() {
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "2")], &[]);
    let mut h = s.client().await;
    let me = owner();
    let t = h.grab(1, "pk", &me, 30).await;
    let mut c = s.client().await;
    let (o1, o2) = (owner(), owner());
    c.acquire(1, "pk", &o1, 30, 5).await;
    c.acquire(2, "pk", &o2, 30, 5).await;
    c.acquire(3, "pk", &owner(), 30, 5).await;
    c.expect("B 3 pk").await;
    // wait = 0 on a held key is T, not B.
    c.acquire(4, "pk", &owner(), 0, 5).await;
    c.expect("T 4 pk").await;
    // Another key is unaffected.
    h.grab(2, "pk2", &owner(), 30).await;
    c.acquire(5, "pk2", &owner(), 30, 5).await;
    c.silent(Duration::from_millis(100)).await;
    // The queued ones are still served in order.
    h.release(3, "pk", &me, t).await;
    h.expect("R 3 pk").await;
    c.expect_grant(1, "pk", &o1).await;
}

#[tokio::test]
async fn server_wide_waiter_cap() {
    let admin = cluster_common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let s = Server::with(&[("TICKETING_MAX_WAITERS", "2")], &["--admin-listen", &admin_addr]);
    let mut h = s.client().await;
    for k in ["sw1", "sw2", "sw3"] {
        h.grab(1, k, &owner(), 30).await;
    }
    let mut c = s.client().await;
    c.acquire(1, "sw1", &owner(), 30, 5).await;
    c.acquire(2, "sw2", &owner(), 30, 5).await;
    c.acquire(3, "sw3", &owner(), 30, 5).await;
    c.expect("B 3 sw3").await;
    // A waiter that leaves frees a slot.
    let mut d = s.client().await;
    d.acquire(1, "sw1", &owner(), 1, 5).await;
    d.expect("B 1 sw1").await;
    drop(c);
    // Its two waiters leave the queues once the server saw the close.
    client_common::wait_waiters(admin, "sw1", 0).await;
    client_common::wait_waiters(admin, "sw2", 0).await;
    d.acquire(2, "sw3", &owner(), 1, 5).await;
    d.expect("T 2 sw3").await;
}

#[tokio::test]
async fn held_keys_cap() {
    let s = Server::with(&[("TICKETING_MAX_HELD_KEYS", "2")], &[]);
    let mut c = s.client().await;
    let a = owner();
    let ta = c.grab(1, "hk1", &a, 30).await;
    c.grab(2, "hk2", &owner(), 30).await;
    c.acquire(3, "hk3", &owner(), 0, 5).await;
    c.expect("B 3 hk3").await;
    c.acquire(4, "hk3", &owner(), 5, 5).await;
    c.expect("B 4 hk3").await;
    // Queuing on a held key is not a new held key.
    let w = owner();
    c.acquire(5, "hk1", &w, 10, 5).await;
    c.release(6, "hk1", &a, ta).await;
    let mut lines = [c.line().await, c.line().await];
    lines.sort();
    assert_eq!(lines[1], "R 6 hk1");
    let (tw, _) = parse_grant(&lines[0], 5, "hk1", &w);
    c.release(7, "hk1", &w, tw).await;
    c.expect("R 7 hk1").await;
    let o = owner();
    c.acquire(8, "hk3", &o, 0, 5).await;
    c.expect_grant(8, "hk3", &o).await;
}

#[tokio::test]
async fn connection_limit_is_overloaded() {
    let s = Server::with(&[("TICKETING_MAX_CONNECTIONS", "1")], &[]);
    let mut first = s.client().await;
    let mut second = Client::raw(&s.addr).await;
    // No greeting: the refusal comes instead.
    second.expect_error("overloaded").await;
    first.send(b"P 1\n").await;
    first.expect("P 1").await;
    drop(first);
    // The slot comes back once the first connection is gone.
    let mut ok = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut c = Client::raw(&s.addr).await;
        let line = c.line().await;
        if line.starts_with("TICKETING 1 ") {
            ok = true;
            break;
        }
        assert_eq!(line, "E overloaded");
    }
    assert!(ok, "slot was not freed");
}
