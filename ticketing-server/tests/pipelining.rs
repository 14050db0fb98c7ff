//! docs/protocol.md §4–5 and §7: pipelined requests answered out of order; duplicate ids; the
//! in-flight limit.

mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn queued_acquire_is_answered_after_later_requests() {
    let s = Server::start();
    let mut h = s.client().await;
    let me = owner();
    let token = h.grab(1, "po", &me, 30).await;
    let mut c = s.client().await;
    let (o1, o2) = (owner(), owner());
    c.send(format!("A 1 po {o1} 10 5\nA 2 po-other {o2} 0 5\nP 3\n").as_bytes()).await;
    // Both later requests are answered (in either order) while the first still waits.
    let mut lines = [c.line().await, c.line().await];
    lines.sort();
    parse_grant(&lines[0], 2, "po-other", &o2);
    assert_eq!(lines[1], "P 3");
    c.silent(std::time::Duration::from_millis(100)).await;
    h.release(2, "po", &me, token).await;
    h.expect("R 2 po").await;
    c.expect_grant(1, "po", &o1).await;
}

#[tokio::test]
async fn duplicate_in_flight_id_is_fatal() {
    let s = Server::start();
    let mut h = s.client().await;
    h.grab(1, "dup", &owner(), 30).await;
    // Same id as a queued acquire (even on a ping).
    let mut c = s.client().await;
    c.acquire(5, "dup", &owner(), 10, 5).await;
    c.send(b"P 5\n").await;
    c.expect_error("duplicate_id").await;
    let mut c = s.client().await;
    c.acquire(5, "dup", &owner(), 10, 5).await;
    c.acquire(5, "dup-b", &owner(), 0, 5).await;
    c.expect_error("duplicate_id").await;
}

#[tokio::test]
async fn answered_ids_may_be_reused() {
    let s = Server::start();
    let mut c = s.client().await;
    let me = owner();
    let token = c.grab(1, "reuse", &me, 30).await;
    c.release(1, "reuse", &me, token).await;
    c.expect("R 1 reuse").await;
    c.send(b"P 1\nP 1\n").await;
    c.expect("P 1").await;
    c.expect("P 1").await;
}

#[tokio::test]
async fn too_many_pending() {
    let s = Server::with(&[("TICKETING_MAX_PENDING_PER_CONN", "2")], &[]);
    let mut h = s.client().await;
    h.grab(1, "tmp", &owner(), 30).await;
    let mut c = s.client().await;
    c.acquire(1, "tmp", &owner(), 10, 5).await;
    c.acquire(2, "tmp", &owner(), 10, 5).await;
    // Pings are answered at once and do not count.
    c.send(b"P 3\n").await;
    c.expect("P 3").await;
    c.silent(Duration::from_millis(100)).await;
    // The third concurrent acquire is one too many.
    c.acquire(4, "tmp-other", &owner(), 0, 5).await;
    c.expect_error("too_many_pending").await;

    // Two in flight at a time is fine.
    let mut d = s.client().await;
    for i in 0..6u64 {
        let o = owner();
        d.acquire(i, &format!("tmp-k{i}"), &o, 0, 5).await;
        d.expect_grant(i, &format!("tmp-k{i}"), &o).await;
    }
}
