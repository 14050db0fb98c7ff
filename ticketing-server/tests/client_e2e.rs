//! End to end: the real Rust client (`ticketing-client`) against the real
//! standalone server process. Every wait is bounded; leases are short.

mod cluster_common;
mod common;

use cluster_common::{ms, secs, within};
use common::{temp_file, Server};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ticketing_client::{Error, Ticket, TicketBroker};

/// A broker for `addr` that has a ready connection.
async fn ready_broker(addr: &str) -> TicketBroker {
    let b = within(secs(10), "connect", TicketBroker::connect(addr)).await.expect("connect");
    assert!(within(secs(10), "wait_ready", b.wait_ready(secs(5))).await, "broker not ready");
    b
}

/// Acquires and expects a ticket.
async fn grab(b: &TicketBroker, key: &str, wait: u64, lease: u64) -> Ticket {
    let r = within(secs(wait + 10), "acquire", b.acquire(key, secs(wait), secs(lease), Duration::ZERO)).await;
    match r {
        Ok(Some(t)) => t,
        other => panic!("acquire {key}: expected a ticket, got {other:?}"),
    }
}

/// Waiters queued on `key` according to the admin endpoint.
fn waiters(admin: u16, key: &str) -> Option<u64> {
    let body = cluster_common::http_get(admin, &format!("/locks/{key}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["waiters"].as_u64()
}

/// Polls the admin endpoint until `key` has `n` waiters (bounded).
async fn wait_waiters(admin: u16, key: &str, n: u64) {
    let end = Instant::now() + secs(10);
    loop {
        let a = admin;
        let k = key.to_owned();
        let got = tokio::task::spawn_blocking(move || waiters(a, &k)).await.unwrap();
        if got == Some(n) {
            return;
        }
        assert!(Instant::now() < end, "key {key}: {got:?} waiters, expected {n}");
        tokio::time::sleep(ms(20)).await;
    }
}

#[tokio::test]
async fn acquire_release_round_trip() {
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let before = Instant::now();
    let t = grab(&b, "rt", 1, 3).await;
    assert!(t.token() > 0 && t.token() < 1 << 63, "token {}", t.token());
    assert_eq!(t.key(), "rt");
    let rem = t.remaining();
    assert!(rem <= ms(2997) && rem > secs(2), "remaining {rem:?}");
    assert!(t.deadline() >= before + ms(2997), "deadline before t_send + lease × 0.999");
    assert!(!t.is_expired());
    assert_eq!(within(secs(7), "release", t.release()).await, Ok(true));
    // A second call returns the first definite result.
    assert_eq!(within(secs(7), "release again", t.release()).await, Ok(true));
    // The key is free again, and tokens strictly increase.
    let t2 = grab(&b, "rt", 0, 3).await;
    assert!(t2.token() > t.token(), "{} after {}", t2.token(), t.token());
    assert_eq!(t2.release().await, Ok(true));
    // Bad arguments never reach the server.
    assert!(matches!(b.acquire("bad key", secs(0), secs(3), secs(0)).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(b.acquire("k", secs(0), secs(0), secs(0)).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(b.acquire("k", secs(0), secs(3), secs(4)).await, Err(Error::InvalidArgument(_))));
    assert!(matches!(b.acquire_secs("k", f64::NAN, 3.0, 0.0).await, Err(Error::InvalidArgument(_))));
    b.close().await;
}

#[tokio::test]
async fn held_key_times_out_with_none() {
    let s = Server::start();
    let a = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    let held = grab(&a, "to", 0, 20).await;

    let start = Instant::now();
    let r = within(secs(8), "acquire wait 1", b.acquire("to", secs(1), secs(5), Duration::ZERO)).await;
    let took = start.elapsed();
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(took >= ms(900) && took < secs(4), "T after {took:?}");

    // wait 0: one immediate attempt.
    let start = Instant::now();
    let r = within(secs(5), "acquire wait 0", b.acquire("to", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(start.elapsed() < secs(2), "wait 0 took {:?}", start.elapsed());

    // A fractional wait rounds UP: 0.3 s is sent as 1 s.
    let start = Instant::now();
    let r = within(secs(8), "acquire wait 0.3", b.acquire_secs("to", 0.3, 5.0, 0.0)).await;
    assert!(matches!(r, Ok(None)), "{r:?}");
    assert!(start.elapsed() >= ms(900), "0.3 s was not rounded up: {:?}", start.elapsed());

    // Not reentrant: the holder's own broker queues like anyone else.
    let r = within(secs(5), "reentrant", a.acquire("to", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Ok(None)), "{r:?}");

    assert_eq!(held.release().await, Ok(true));
}

#[tokio::test]
async fn fifo_across_three_brokers() {
    let admin = cluster_common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let s = Server::with(&[], &["--admin-listen", &admin_addr]);
    let holder = ready_broker(&s.addr).await;
    let held = grab(&holder, "fifo", 0, 30).await;
    let order: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..3 {
        let b = ready_broker(&s.addr).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let t = grab(&b, "fifo", 20, 10).await;
            order.lock().unwrap().push((i, t.token()));
            tokio::time::sleep(ms(50)).await;
            assert_eq!(t.release().await, Ok(true));
            b.close().await;
        }));
        // The next request only once this one is in the queue: request order is known.
        wait_waiters(admin, "fifo", i as u64 + 1).await;
    }
    assert_eq!(held.release().await, Ok(true));
    for t in tasks {
        within(secs(30), "waiter", t).await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order.iter().map(|o| o.0).collect();
    assert_eq!(who, vec![0, 1, 2], "grant order {order:?}");
    let mut last = held.token();
    for (_, token) in order {
        assert!(token > last, "token {token} after {last}");
        last = token;
    }
}

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
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let before = Instant::now();
    let t = grab(&b, "exp", 0, 2).await;
    let r0 = t.remaining();
    assert!(r0 <= ms(1998) && r0 > ms(1500), "remaining {r0:?}");
    assert!(t.deadline() >= before + ms(1998));
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
    tokio::time::sleep(ms(300)).await;
    assert_eq!(within(secs(7), "release after expiry", t.release()).await, Ok(false));
}

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
        assert!(start.elapsed() < secs(3), "the dropped ticket's key is still held after {:?}", start.elapsed());
        tokio::time::sleep(ms(50)).await;
    };
    println!("dropped ticket's key free after {:?}", start.elapsed());
    assert!(got.token() > token);
    assert_eq!(got.release().await, Ok(true));
}

#[tokio::test]
async fn busy_when_the_queue_is_full() {
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "1")], &[]);
    let h = ready_broker(&s.addr).await;
    let held = grab(&h, "busy", 0, 30).await;
    let w1 = ready_broker(&s.addr).await;
    let w2 = ready_broker(&s.addr).await;
    let start = Instant::now();
    let mut a = tokio::spawn(async move { w1.acquire("busy", secs(10), secs(5), Duration::ZERO).await });
    let mut b = tokio::spawn(async move { w2.acquire("busy", secs(10), secs(5), Duration::ZERO).await });
    // One of the two is queued, the other is refused at once (while the key is still held).
    let (first, other) = within(secs(5), "first answer", async {
        tokio::select! {
            r = &mut a => (r.unwrap(), b),
            r = &mut b => (r.unwrap(), a),
        }
    })
    .await;
    assert!(matches!(first, Err(Error::Busy)), "{first:?}");
    assert!(start.elapsed() < secs(3), "Busy after {:?}", start.elapsed());
    assert_eq!(held.release().await, Ok(true));
    let second = within(secs(10), "queued waiter", other).await.unwrap();
    match second {
        Ok(Some(t)) => {
            assert!(t.token() > held.token());
            assert_eq!(t.release().await, Ok(true));
        }
        r => panic!("queued waiter: {r:?}"),
    }
}

#[tokio::test]
async fn pipelined_acquires_keep_mutual_exclusion() {
    const KEYS: usize = 4;
    const TASKS: usize = 20;
    const CYCLES: usize = 10;
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let last: Arc<Vec<AtomicU64>> = Arc::new((0..KEYS).map(|_| AtomicU64::new(0)).collect());
    let grants = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (b, busy, last, grants) = (b.clone(), busy.clone(), last.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..CYCLES {
                let k = (task * 7 + i) % KEYS;
                let key = format!("pipe{k}");
                let t = match b.acquire(&key, secs(20), secs(10), Duration::ZERO).await {
                    Ok(Some(t)) => t,
                    other => panic!("task {task} cycle {i}: {other:?}"),
                };
                assert!(!busy[k].swap(true, Ordering::SeqCst), "{key} granted twice at once");
                let prev = last[k].swap(t.token(), Ordering::SeqCst);
                assert!(t.token() > prev, "{key}: token {} after {prev}", t.token());
                grants.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(ms(1)).await;
                busy[k].store(false, Ordering::SeqCst);
                assert_eq!(t.release().await, Ok(true), "{key} release");
            }
        }));
    }
    within(secs(40), "pipelined workload", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert_eq!(grants.load(Ordering::SeqCst), (TASKS * CYCLES) as u64);
    b.close().await;
}

#[tokio::test]
async fn auth_right_wrong_and_missing_token() {
    let tokens = temp_file("s3cret\nrotated\n");
    let s = Server::with(&[], &["--client-tokens-file", tokens.to_str().unwrap()]);

    for token in ["s3cret", "rotated"] {
        let b = TicketBroker::builder([s.addr.clone()]).token(token).build().unwrap();
        assert!(within(secs(10), "wait_ready", b.wait_ready(secs(5))).await, "token {token}");
        let t = grab(&b, "auth", 0, 5).await;
        assert_eq!(t.release().await, Ok(true));
        b.close().await;
    }

    // Wrong token: AuthFailed promptly, well before the 5 s wait budget.
    let bad = TicketBroker::builder([s.addr.clone()]).token("wrong").build().unwrap();
    let start = Instant::now();
    let r = within(secs(10), "acquire wrong token", bad.acquire("auth", secs(5), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    assert!(start.elapsed() < secs(4), "AuthFailed after {:?}", start.elapsed());
    assert!(!within(secs(5), "wait_ready", bad.wait_ready(secs(1))).await);
    // Still AuthFailed later (after the first attempts), and at once.
    let start = Instant::now();
    let r = within(secs(10), "acquire wrong token again", bad.acquire("auth", secs(5), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    assert!(start.elapsed() < secs(4), "second AuthFailed after {:?}", start.elapsed());
    bad.close().await;

    // No token at all.
    let none = within(secs(10), "connect", TicketBroker::connect(&s.addr)).await.unwrap();
    let start = Instant::now();
    let r = within(secs(10), "acquire no token", none.acquire("auth", secs(5), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    assert!(start.elapsed() < secs(4), "AuthFailed after {:?}", start.elapsed());
    none.close().await;
}

#[tokio::test]
async fn token_against_an_auth_off_server_fails_the_server_proof() {
    // Auth off: the server accepts any cmac but proves itself with the empty
    // token (SPEC §3.1), so a client holding a token cannot verify it.
    let s = Server::start();
    let b = TicketBroker::builder([s.addr.clone()]).token("s3cret").build().unwrap();
    let r = within(secs(10), "acquire", b.acquire("k", secs(2), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    b.close().await;
}

#[tokio::test]
async fn sigterm_fails_a_pending_acquire_without_hanging() {
    let mut s = Server::start();
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "term", 0, 30).await;
    let pending = tokio::spawn(async move { w.acquire("term", secs(20), secs(5), Duration::ZERO).await });
    tokio::time::sleep(ms(300)).await;
    s.sigterm();
    let start = Instant::now();
    let r = within(secs(10), "pending acquire after SIGTERM", pending).await.unwrap();
    println!("pending acquire after SIGTERM: {r:?} after {:?}", start.elapsed());
    assert!(matches!(r, Err(Error::Indeterminate) | Err(Error::Unavailable)), "{r:?}");
    let status = tokio::task::spawn_blocking(move || s.wait_exit(secs(15))).await.unwrap();
    assert!(status.success(), "exit {status:?}");
    // Nobody answers any more: the release is an error, never an assumed success.
    let start = Instant::now();
    let r = within(secs(10), "release without a server", held.release()).await;
    assert_eq!(r, Err(Error::ReleaseUnconfirmed));
    assert!(start.elapsed() >= ms(4500), "ReleaseUnconfirmed after only {:?}", start.elapsed());
    // New acquires: nothing to talk to, definitely not acquired.
    let r = within(secs(10), "acquire without a server", h.acquire("term", secs(1), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
    // close() with an unconfirmed ticket and no server: bounded by the lane's 5 s.
    within(secs(8), "close without a server", h.close()).await;
    drop(held);
}

#[tokio::test]
async fn broker_recovers_after_a_server_restart_on_the_same_port() {
    let s = Server::start();
    let addr = s.addr.clone();
    let b = ready_broker(&addr).await;
    let t = grab(&b, "restart", 0, 5).await;
    assert_eq!(t.release().await, Ok(true));
    drop(s); // kill -9

    // Both connections notice the dead server; meanwhile nothing is sent.
    let end = Instant::now() + secs(6);
    loop {
        let st = within(secs(5), "status", b.status()).await.expect("broker open");
        if !st.ready {
            break;
        }
        assert!(Instant::now() < end, "broker still reports ready with the server dead");
        tokio::time::sleep(ms(20)).await;
    }
    let start = Instant::now();
    let r = within(secs(5), "acquire while down", b.acquire("restart", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
    assert!(start.elapsed() < secs(2), "Unavailable after {:?}", start.elapsed());
    tokio::time::sleep(ms(500)).await;

    let s2 = Server::at(&addr, &[], &[]);
    assert_eq!(s2.addr, addr);
    let start = Instant::now();
    assert!(within(secs(15), "wait_ready after restart", b.wait_ready(secs(10))).await, "no reconnect");
    println!("reconnected {:?} after the restart", start.elapsed());
    let t = grab(&b, "restart", 2, 5).await;
    assert_eq!(t.release().await, Ok(true));
    b.close().await;
}

#[tokio::test]
async fn close_fails_later_calls_and_releases_live_tickets() {
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let other = ready_broker(&s.addr).await;
    let live = grab(&b, "close-live", 0, 30).await;
    let blocker = grab(&other, "close-wait", 0, 30).await;
    let b2 = b.clone();
    let pending = tokio::spawn(async move { b2.acquire("close-wait", secs(20), secs(5), Duration::ZERO).await });
    tokio::time::sleep(ms(300)).await;

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
async fn waited_ms_extends_the_deadline_of_a_queued_grant() {
    // A waiter granted after ~2 s keeps (almost) its whole lease: the server's
    // waited_ms moves the conservative deadline (SPEC §6.3 step 4), so a
    // budget of 4 s out of a 5 s lease is met.
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "waited", 0, 30).await;
    let start = Instant::now();
    let pending = tokio::spawn(async move { w.acquire("waited", secs(10), secs(5), secs(4)).await });
    tokio::time::sleep(secs(2)).await;
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
            Ok(None) => assert!(start.elapsed() < secs(2), "not compensated after {:?}", start.elapsed()),
            Err(e) => panic!("{e:?}"),
        }
        tokio::time::sleep(ms(50)).await;
    }
}

#[tokio::test]
async fn cancelled_waiter_leaves_the_queue() {
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let c = ready_broker(&s.addr).await;
    let x = ready_broker(&s.addr).await;
    let held = grab(&h, "cancel", 0, 30).await;
    // c queues, then gives up (drops the future) after 300 ms.
    let r = tokio::time::timeout(ms(300), c.acquire("cancel", secs(20), secs(5), Duration::ZERO)).await;
    assert!(r.is_err(), "acquire should still be waiting: {r:?}");
    // x queues behind it; the hand-over must reach x, not the cancelled waiter.
    let x2 = x.clone();
    let pending = tokio::spawn(async move { x2.acquire("cancel", secs(20), secs(5), Duration::ZERO).await });
    tokio::time::sleep(ms(300)).await;
    assert_eq!(held.release().await, Ok(true));
    let start = Instant::now();
    let r = within(secs(5), "x after the cancel", pending).await.unwrap();
    let t = match r {
        Ok(Some(t)) => t,
        r => panic!("waiter behind a cancelled one: {r:?}"),
    };
    assert!(start.elapsed() < secs(2), "hand-over after {:?}", start.elapsed());
    assert_eq!(t.release().await, Ok(true));
    // The cancelling broker still works.
    let t = grab(&c, "cancel", 5, 5).await;
    assert_eq!(t.release().await, Ok(true));
}

#[tokio::test]
async fn a_long_queued_acquire_survives_keepalive() {
    // 6 s in the server's queue: pings flow on the same connection (1 s of
    // silence → P), the session must not be declared dead (4 s).
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "idle", 0, 30).await;
    let w2 = w.clone();
    let pending = tokio::spawn(async move { w2.acquire("idle", secs(15), secs(5), Duration::ZERO).await });
    tokio::time::sleep(secs(6)).await;
    assert!(within(secs(5), "status", w.status()).await.unwrap().ready);
    // The holder's broker was idle for 6 s too; its release goes through.
    assert_eq!(within(secs(7), "release after idling", held.release()).await, Ok(true));
    let r = within(secs(5), "long waiter", pending).await.unwrap();
    match r {
        Ok(Some(t)) => assert_eq!(t.release().await, Ok(true)),
        r => panic!("waiter queued for 6 s: {r:?}"),
    }
}

#[tokio::test]
async fn many_in_flight_acquires_fill_both_connections() {
    // 2400 concurrent acquires from one broker on 4 held keys: more than the
    // 2 × 959 acquire slots of its two connections, close to the server's
    // 1024 in flight per connection; nothing may be refused or lost.
    const N: usize = 2400;
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    let mut held = Vec::new();
    for k in 0..4 {
        held.push(grab(&h, &format!("many{k}"), 0, 30).await);
    }
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..4).map(|_| AtomicBool::new(false)).collect());
    let mut tasks = Vec::new();
    for i in 0..N {
        let (b, busy) = (b.clone(), busy.clone());
        tasks.push(tokio::spawn(async move {
            let k = i % 4;
            match b.acquire(&format!("many{k}"), secs(30), secs(10), Duration::ZERO).await {
                Ok(Some(t)) => {
                    assert!(!busy[k].swap(true, Ordering::SeqCst), "double grant");
                    busy[k].store(false, Ordering::SeqCst);
                    t.release().await
                }
                other => panic!("acquire {i}: {other:?}"),
            }
        }));
    }
    tokio::time::sleep(secs(1)).await;
    for t in &held {
        assert_eq!(t.release().await, Ok(true));
    }
    within(secs(40), "all acquires", async {
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(true));
        }
    })
    .await;
}

#[tokio::test]
async fn hostname_address_and_edge_values() {
    // The broker is given "localhost:PORT"; the server announces
    // "127.0.0.1:PORT" in L, which is not configured and must be ignored.
    let s = Server::start();
    let port = s.addr.rsplit(':').next().unwrap();
    let b = ready_broker(&format!("localhost:{port}")).await;
    // Longest key, every visible ASCII byte; the widest wait and lease.
    let visible: String = (0x21u8..=0x7e).map(char::from).collect();
    let key: String = visible.chars().cycle().take(250).collect();
    let t = match within(secs(10), "acquire", b.acquire(&key, secs(255), secs(250), secs(250) - secs(1))).await {
        Ok(Some(t)) => t,
        r => panic!("{r:?}"),
    };
    assert_eq!(t.key(), key);
    assert!(t.remaining() > secs(248));
    assert_eq!(t.release().await, Ok(true));
    // A key of 251 bytes is refused before anything is sent.
    let long: String = "k".repeat(251);
    assert!(matches!(b.acquire(&long, secs(0), secs(5), secs(0)).await, Err(Error::InvalidArgument(_))));
    b.close().await;
}

#[test]
fn blocking_use_from_a_plain_thread_and_drop_there() {
    // No test runtime: block on the client's own runtime from plain threads,
    // and drop a ticket on a thread that never saw tokio.
    let s = Server::start();
    let rt = ticketing_client::runtime();
    let addr = s.addr.clone();
    let (b, t) = std::thread::spawn(move || {
        rt.block_on(async {
            let b = ready_broker(&addr).await;
            let t = grab(&b, "plain", 0, 30).await;
            (b, t)
        })
    })
    .join()
    .unwrap();
    let token = t.token();
    std::thread::spawn(move || drop(t)).join().unwrap();
    let rt = ticketing_client::runtime();
    std::thread::spawn(move || {
        rt.block_on(async {
            let start = Instant::now();
            loop {
                match b.acquire("plain", Duration::ZERO, secs(5), Duration::ZERO).await {
                    Ok(Some(t2)) => {
                        assert!(t2.token() > token);
                        assert_eq!(t2.release().await, Ok(true));
                        break;
                    }
                    Ok(None) => assert!(start.elapsed() < secs(3), "dropped ticket not released"),
                    Err(e) => panic!("{e:?}"),
                }
                tokio::time::sleep(ms(50)).await;
            }
            b.close().await;
        })
    })
    .join()
    .unwrap();
}

#[tokio::test]
async fn connection_limit_gives_unavailable_not_a_hang() {
    let s = Server::with(&[("TICKETING_MAX_CONNECTIONS", "2")], &[]);
    let first = ready_broker(&s.addr).await;
    let second = within(secs(10), "connect", TicketBroker::connect(&s.addr)).await.unwrap();
    let start = Instant::now();
    let r = within(secs(10), "acquire over the limit", second.acquire("lim", secs(1), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
    assert!(start.elapsed() < secs(4), "Unavailable after {:?}", start.elapsed());
    // Once the first broker goes away, the second one gets in by itself.
    first.close().await;
    assert!(within(secs(15), "wait_ready", second.wait_ready(secs(10))).await);
    let t = grab(&second, "lim", 0, 5).await;
    assert_eq!(t.release().await, Ok(true));
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test]
async fn frozen_server_is_detected_by_keepalive() {
    // SIGSTOP: the TCP connections stay open but nothing answers. The
    // keepalive (1 s of silence → P, dead 3 s later) must end the session,
    // so a queued acquire becomes Indeterminate well before wait + 5 s.
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "frozen", 0, 30).await;
    let w2 = w.clone();
    let pending = tokio::spawn(async move { w2.acquire("frozen", secs(20), secs(5), Duration::ZERO).await });
    tokio::time::sleep(ms(300)).await;
    signal(s.pid(), "-STOP");
    let stopped = Instant::now();
    let r = within(secs(15), "acquire on a frozen server", pending).await.unwrap();
    let took = stopped.elapsed();
    println!("queued acquire on a frozen server: {r:?} after {took:?}");
    signal(s.pid(), "-CONT");
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Indeterminate));
    assert!(took < secs(8), "dead session detected only after {took:?}");

    // The server runs again: both brokers recover by themselves.
    assert!(within(secs(20), "wait_ready", w.wait_ready(secs(15))).await);
    assert!(within(secs(20), "wait_ready", h.wait_ready(secs(15))).await);
    let t = grab(&w, "after-frozen", 0, 5).await;
    assert_eq!(t.release().await, Ok(true));
    assert_eq!(within(secs(7), "release", held.release()).await, Ok(true));
}

#[tokio::test]
async fn queued_grants_expire_on_the_client_before_the_server_hands_over() {
    // A chain of 1 s leases nobody releases: H → W1 → W2 by expiry. Each
    // ticket's conservative deadline (t_send + waited_ms + lease × 0.999)
    // must have passed when the next holder gets the key, also for W1,
    // whose grant came after queueing (waited_ms > 0).
    let s = Server::start();
    let h = ready_broker(&s.addr).await;
    let w1 = ready_broker(&s.addr).await;
    let w2 = ready_broker(&s.addr).await;
    let t0 = grab(&h, "chain", 0, 1).await;
    let a = tokio::spawn(async move { w1.acquire("chain", secs(10), secs(1), Duration::ZERO).await });
    tokio::time::sleep(ms(200)).await;
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

/// A gauge from the admin `/metrics` text.
fn gauge(admin: u16, name: &str) -> Option<i64> {
    let body = cluster_common::http_get(admin, "/metrics")?;
    body.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Polls a gauge until it equals `want` (bounded); false on timeout.
async fn gauge_becomes(admin: u16, name: &'static str, want: i64, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    loop {
        if tokio::task::spawn_blocking(move || gauge(admin, name)).await.unwrap() == Some(want) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(ms(50)).await;
    }
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
    // The ticket keeps the driver alive.
    tokio::time::sleep(ms(300)).await;
    assert_eq!(tokio::task::spawn_blocking(move || gauge(admin, "ticketing_connections")).await.unwrap(), Some(2));
    assert_eq!(tokio::task::spawn_blocking(move || gauge(admin, "ticketing_held_keys")).await.unwrap(), Some(1));
    drop(t);
    assert!(gauge_becomes(admin, "ticketing_held_keys", 0, secs(5)).await, "dropped ticket not released");
    assert!(gauge_becomes(admin, "ticketing_connections", 0, secs(8)).await, "connections left open");
}

#[tokio::test]
async fn ipv6_loopback_address() {
    let s = Server::at("[::1]:0", &[], &[]);
    assert!(s.addr.starts_with("[::1]:"), "{}", s.addr);
    let b = ready_broker(&s.addr).await;
    let st = within(secs(5), "status", b.status()).await.unwrap();
    assert_eq!(st.leader.as_deref(), Some(s.addr.as_str()), "L names the configured address: {st:?}");
    let t = grab(&b, "v6", 0, 5).await;
    assert_eq!(t.release().await, Ok(true));
    b.close().await;
}

#[tokio::test]
async fn cancellation_storm_keeps_exclusion_and_leaks_nothing() {
    // Many acquires dropped at random moments (SPEC §6.3 step 7) mixed with
    // normal cycles: never two holders, no hang, and afterwards every key is
    // free again within its lease.
    const KEYS: usize = 3;
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
    let outcomes: Arc<Mutex<std::collections::BTreeMap<&'static str, u64>>> = Arc::default();
    let mut tasks = Vec::new();
    for task in 0..8u64 {
        let (b, busy, outcomes) = (b.clone(), busy.clone(), outcomes.clone());
        tasks.push(tokio::spawn(async move {
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (task + 1);
            for i in 0..30 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let k = (x % KEYS as u64) as usize;
                let cancel_after = ms(x % 30);
                let key = format!("storm{k}");
                let fut = b.acquire(&key, secs(2), secs(2), Duration::ZERO);
                let what = match tokio::time::timeout(cancel_after, fut).await {
                    Err(_) => "cancelled",
                    Ok(Ok(Some(t))) => {
                        assert!(!busy[k].swap(true, Ordering::SeqCst), "storm{k} granted twice at once");
                        tokio::time::sleep(ms(2)).await;
                        busy[k].store(false, Ordering::SeqCst);
                        match t.release().await {
                            Ok(true) => "ticket",
                            // A cancel closed the session the R was written on; the R took
                            // effect and the lane's resend got N (SPEC §6.4 "released by an
                            // earlier attempt"; see release_of_a_live_ticket_is_true_…).
                            Ok(false) if !t.is_expired() => "ticket, release false",
                            r => panic!("task {task} cycle {i}: release {r:?} of token {} key {key}", t.token()),
                        }
                    }
                    Ok(Ok(None)) => "none",
                    Ok(Err(Error::Indeterminate)) => "indeterminate",
                    Ok(Err(e)) => panic!("task {task} cycle {i}: {e:?}"),
                };
                *outcomes.lock().unwrap().entry(what).or_default() += 1;
            }
        }));
    }
    within(secs(30), "storm", async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    println!("storm outcomes: {:?}", outcomes.lock().unwrap());
    // Leaked grants (answers nobody received) end with their 2 s lease.
    for k in 0..KEYS {
        let t = grab(&b, &format!("storm{k}"), 5, 5).await;
        assert_eq!(t.release().await, Ok(true));
    }
    b.close().await;
}

#[tokio::test]
async fn release_racing_a_cancel_on_its_session_frees_the_key() {
    // A live ticket (lease 30 s, released after a few ms) is released; at the
    // same moment another acquire of the same broker is cancelled, which
    // closes the session the R was written on (SPEC §6.3 step 7). The server
    // executes that R; its answer is lost with the session; the lane resends
    // on the other connection and gets N. The ticket cannot have expired (its
    // conservative deadline is far away), so N can only mean "released by the
    // earlier attempt". SPEC §6.4 maps N to false in both cases (docs/client.md,
    // "release after a lost session"); what must hold is a definite answer and a
    // free key.
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let other = ready_broker(&s.addr).await;
    let blocker = grab(&other, "rel-blocker", 0, 60).await;
    let mut falses = 0;
    for trial in 0..40 {
        let t = Arc::new(grab(&b, "rel-live", 2, 30).await);
        let b2 = b.clone();
        let mut pending = Box::pin(async move { b2.acquire("rel-blocker", secs(20), secs(5), Duration::ZERO).await });
        // Let the acquire be written, then release and, right after, cancel it.
        assert!(tokio::time::timeout(ms(20), &mut pending).await.is_err());
        let t2 = t.clone();
        let release = tokio::spawn(async move { t2.release().await });
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        drop(pending);
        let r = within(secs(8), "release", release).await.unwrap();
        assert!(!t.is_expired());
        match r {
            Ok(true) => {}
            Ok(false) => {
                falses += 1;
                println!("trial {trial}: release of a live ticket -> false");
            }
            Err(e) => panic!("trial {trial}: {e:?}"),
        }
        // The key must be free either way.
        let again = grab(&other, "rel-live", 2, 5).await;
        assert_eq!(again.release().await, Ok(true));
    }
    assert_eq!(blocker.release().await, Ok(true));
    println!("{falses} of 40 releases answered N after their first attempt's session closed");
}

#[tokio::test]
async fn server_wide_caps_are_busy() {
    let s = Server::with(&[("TICKETING_MAX_HELD_KEYS", "1"), ("TICKETING_MAX_WAITERS", "1")], &[]);
    let a = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    let t = grab(&a, "cap1", 0, 30).await;
    // A second held key is over --max-held-keys.
    let r = within(secs(5), "second key", b.acquire("cap2", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Busy));
    // One waiter fits, the second is over --max-waiters.
    let b2 = b.clone();
    let queued = tokio::spawn(async move { b2.acquire("cap1", secs(10), secs(5), Duration::ZERO).await });
    tokio::time::sleep(ms(300)).await;
    let start = Instant::now();
    let r = within(secs(5), "second waiter", a.acquire("cap1", secs(10), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Busy));
    assert!(start.elapsed() < secs(2));
    assert_eq!(t.release().await, Ok(true));
    match within(secs(10), "queued", queued).await.unwrap() {
        Ok(Some(t)) => assert_eq!(t.release().await, Ok(true)),
        r => panic!("{r:?}"),
    }
}
