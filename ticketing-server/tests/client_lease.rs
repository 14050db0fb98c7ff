//! Lease deadlines seen by the real Rust client: expiry and hand-over, the
//! conservative deadline, `waited_ms`, `min_remaining`.

mod client_common;
mod cluster_common;
mod common;

use client_common::{gauge_becomes, grab, ready_broker, wait_waiters, waiters};
use cluster_common::{ms, secs, within};
use common::Server;
use std::time::{Duration, Instant};
use ticketing_client::Error;

#[tokio::test]
async fn lease_expiry_hands_over_and_old_release_is_false() {
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let old = grab(&h, "lease", 0, 1).await;
    let start = Instant::now();
    let new = grab(&w, "lease", 5, 5).await;
    let took = start.elapsed();
    assert!(took >= ms(700) && took < secs(4), "hand-over after {took:?}");
    // Safety: the client's conservative deadline passed before the server handed the key over.
    assert!(old.is_expired(), "old ticket still reports {:?} left after the hand-over", old.remaining());
    assert_eq!(old.remaining(), Duration::ZERO);
    assert!(new.token() > old.token());
    assert_eq!(within(secs(7), "stale release", old.release()).await, Ok(false));
    assert_eq!(within(secs(7), "stale release again", old.release()).await, Ok(false));
    assert_eq!(within(secs(7), "release", new.release()).await, Ok(true));
}

#[tokio::test]
async fn expired_future_completes_at_the_conservative_deadline() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let b = ready_broker(&s.addr).await;
    let before = Instant::now();
    let t = grab(&b, "exp", 0, 2).await;
    let r0 = t.remaining();
    assert!(r0 <= ms(1998) && r0 > ms(1500), "remaining {r0:?}");
    assert!(t.deadline() >= before + ms(1998));
    // Lets time pass (the behaviour under test, not a synchronisation).
    tokio::time::sleep(ms(500)).await;
    let r1 = t.remaining();
    assert!(r1 < r0 && r1 <= ms(1500), "remaining does not fall: {r0:?} then {r1:?}");
    within(secs(4), "expired()", t.expired()).await;
    let at = Instant::now();
    assert!(at >= t.deadline(), "expired() completed before the deadline");
    assert!(at - t.deadline() < ms(500), "expired() completed {:?} late", at - t.deadline());
    assert!(at - before >= ms(1998), "expired after only {:?}", at - before);
    assert!(t.is_expired());
    assert_eq!(t.remaining(), Duration::ZERO);
    // On an expired ticket, expired() completes at once.
    within(ms(500), "expired() again", t.expired()).await;
    // The server expires the lease right after the conservative deadline.
    assert!(gauge_becomes(admin, "ticketing_held_keys", 0, secs(5)).await, "the server did not expire the lease");
    assert_eq!(within(secs(7), "release after expiry", t.release()).await, Ok(false));
}

#[tokio::test]
async fn waited_ms_extends_the_deadline_of_a_queued_grant() {
    // A waiter granted after ~2 s keeps (almost) its whole lease: the server's
    // waited_ms moves the conservative deadline (docs/client.md, "Acquire"), so a
    // budget of 4 s out of a 5 s lease is met.
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "waited", 0, 30).await;
    let start = Instant::now();
    let pending = tokio::spawn(async move { w.acquire("waited", secs(10), secs(5), secs(4)).await });
    wait_waiters(admin, "waited", 1).await;
    // Lets the waiter wait ~2 s (the behaviour under test, not a synchronisation).
    tokio::time::sleep_until((start + secs(2)).into()).await;
    assert_eq!(held.release().await, Ok(true));
    let r = within(secs(10), "queued acquire", pending).await.unwrap();
    let t = match r {
        Ok(Some(t)) => t,
        r => panic!("queued acquire with budget 4 of lease 5 after 2 s: {r:?}"),
    };
    let rem = t.remaining();
    assert!(rem > ms(4500) && rem <= ms(4995), "remaining {rem:?} after waiting {:?}", start.elapsed());
    assert!(t.deadline() >= start + ms(6500), "deadline does not count from the grant");
    assert_eq!(t.release().await, Ok(true));
}

#[tokio::test]
async fn insufficient_time_is_compensated_at_once() {
    let s = Server::start();
    let a = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    // budget = lease: a grant can never leave lease × 0.999 − rtt ≥ budget.
    let r = within(secs(8), "acquire", a.acquire("insuf", Duration::ZERO, secs(5), secs(5))).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::InsufficientTime));
    // The grant was released by the lane, long before its 5 s lease.
    let start = Instant::now();
    loop {
        let r = within(secs(5), "acquire", b.acquire("insuf", Duration::ZERO, secs(5), Duration::ZERO)).await;
        match r {
            Ok(Some(t)) => {
                assert_eq!(t.release().await, Ok(true));
                break;
            }
            Ok(None) => assert!(start.elapsed() < secs(30), "not compensated after {:?}", start.elapsed()),
            Err(e) => panic!("{e:?}"),
        }
        tokio::time::sleep(ms(50)).await;
    }
}

#[tokio::test]
async fn queued_grants_expire_on_the_client_before_the_server_hands_over() {
    // A chain of 1 s leases nobody releases: H → W1 → W2 by expiry. Each
    // ticket's conservative deadline (t_send + waited_ms + lease × 0.999)
    // must have passed when the next holder gets the key, also for W1,
    // whose grant came after queueing (waited_ms > 0).
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let h = ready_broker(&s.addr).await;
    let w1 = ready_broker(&s.addr).await;
    let w2 = ready_broker(&s.addr).await;
    let t0 = grab(&h, "chain", 0, 1).await;
    let a = tokio::spawn(async move { w1.acquire("chain", secs(10), secs(1), Duration::ZERO).await });
    // W1 is queued (or already granted, H's lease is short) before W2 asks.
    let end = Instant::now() + secs(10);
    while !a.is_finished() && tokio::task::spawn_blocking(move || waiters(admin, "chain")).await.unwrap() != Some(1) {
        assert!(Instant::now() < end, "W1 never queued");
        tokio::time::sleep(ms(10)).await;
    }
    let b = tokio::spawn(async move { w2.acquire("chain", secs(10), secs(1), Duration::ZERO).await });
    let t1 = match within(secs(10), "W1", a).await.unwrap() {
        Ok(Some(t)) => t,
        r => panic!("W1: {r:?}"),
    };
    assert!(t0.is_expired(), "H still has {:?} when W1 is granted", t0.remaining());
    assert!(t1.remaining() > ms(800), "W1's ticket lost its queue time: {:?} left", t1.remaining());
    let t2 = match within(secs(10), "W2", b).await.unwrap() {
        Ok(Some(t)) => t,
        r => panic!("W2: {r:?}"),
    };
    assert!(t1.is_expired(), "W1 still has {:?} when W2 is granted", t1.remaining());
    assert!(t0.token() < t1.token() && t1.token() < t2.token());
    assert_eq!(t1.release().await, Ok(false));
    assert_eq!(t2.release().await, Ok(true));
}
