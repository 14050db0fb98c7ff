//! Granting and queueing through the real Rust client: round trip, `None` on
//! timeout, FIFO across brokers, `B` at the caps, pipelined acquires.

mod client_common;
mod cluster_common;
mod common;

use client_common::{grab, ready_broker, wait_waiters, waiters};
use cluster_common::{ms, secs, within};
use common::Server;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ticketing_client::Error;

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
    // The wait was honoured (a lower bound; `within` catches a hang).
    assert!(took >= ms(900), "T after {took:?}");

    // wait 0: one immediate attempt.
    let r = within(secs(5), "acquire wait 0", b.acquire("to", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Ok(None)), "{r:?}");

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
            // Holds the key a moment (not a synchronisation): the next waiter
            // must not be granted while this one holds it.
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
async fn busy_when_the_queue_is_full() {
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "1")], &[]);
    let h = ready_broker(&s.addr).await;
    let held = grab(&h, "busy", 0, 30).await;
    let w1 = ready_broker(&s.addr).await;
    let w2 = ready_broker(&s.addr).await;
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
async fn server_wide_caps_are_busy() {
    let admin = cluster_common::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let s = Server::with(
        &[("TICKETING_MAX_HELD_KEYS", "1"), ("TICKETING_MAX_WAITERS", "1")],
        &["--admin-listen", &admin_addr],
    );
    let a = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    let t = grab(&a, "cap1", 0, 30).await;
    // A second held key is over --max-held-keys.
    let r = within(secs(5), "second key", b.acquire("cap2", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Busy));
    // One waiter fits, the second is over --max-waiters.
    let b2 = b.clone();
    let queued = tokio::spawn(async move { b2.acquire("cap1", secs(10), secs(5), Duration::ZERO).await });
    wait_waiters(admin, "cap1", 1).await;
    // `B` at once, not after the 10 s wait (`within` is far shorter).
    let r = within(secs(5), "second waiter", a.acquire("cap1", secs(10), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Busy));
    assert_eq!(t.release().await, Ok(true));
    match within(secs(10), "queued", queued).await.unwrap() {
        Ok(Some(t)) => assert_eq!(t.release().await, Ok(true)),
        r => panic!("{r:?}"),
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
                // Holds the key a moment (not a synchronisation): widens the
                // window in which a second holder would be seen.
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
async fn many_in_flight_acquires_fill_both_connections() {
    // 2400 concurrent acquires from one broker on 4 held keys: more than the
    // 2 × 959 acquire slots of its two connections, close to the server's
    // 1024 in flight per connection; nothing may be refused or lost.
    const N: usize = 2400;
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
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
    // Both connections are full before the holders let go: the server queues
    // every acquire slot of both (max in flight minus the release lane's
    // slots and one, ticketing-proto/src/broker/route.rs); the rest wait in
    // the broker.
    let cfg = ticketing_proto::broker::BrokerConfig::new(Vec::new(), "");
    let slots = 2 * (cfg.max_pending_per_conn - cfg.lane_slots_per_conn - 1) as u64;
    let end = Instant::now() + secs(20);
    loop {
        let queued = tokio::task::spawn_blocking(move || {
            (0..4).filter_map(|k| waiters(admin, &format!("many{k}"))).sum::<u64>()
        });
        let queued = queued.await.unwrap();
        if queued == slots {
            break;
        }
        assert!(queued < slots && Instant::now() < end, "{queued} acquires queued at the server, expected {slots}");
        tokio::time::sleep(ms(20)).await;
    }
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
