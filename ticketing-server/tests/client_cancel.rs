//! Cancelling acquires through the real Rust client: a dropped acquire leaves
//! the queue, a storm of cancels keeps exclusion, a release racing a cancel.

mod client_common;
mod cluster_common;
mod common;

use client_common::{grab, ready_broker, wait_waiters};
use cluster_common::{ms, secs, within};
use common::Server;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use ticketing_client::Error;

#[tokio::test]
async fn cancelled_waiter_leaves_the_queue() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let h = ready_broker(&s.addr).await;
    let c = ready_broker(&s.addr).await;
    let x = ready_broker(&s.addr).await;
    let held = grab(&h, "cancel", 0, 30).await;
    // c queues (the server lists it as a waiter), then gives up: dropping the
    // future of a written acquire closes its session, which leaves the queue.
    let c2 = c.clone();
    let cancelled = tokio::spawn(async move { c2.acquire("cancel", secs(20), secs(5), Duration::ZERO).await });
    wait_waiters(admin, "cancel", 1).await;
    cancelled.abort();
    let r = cancelled.await;
    assert!(r.as_ref().is_err_and(|e| e.is_cancelled()), "acquire should still have been waiting: {r:?}");
    wait_waiters(admin, "cancel", 0).await;
    // x queues behind it; the hand-over must reach x, not the cancelled waiter.
    let x2 = x.clone();
    let pending = tokio::spawn(async move { x2.acquire("cancel", secs(20), secs(5), Duration::ZERO).await });
    wait_waiters(admin, "cancel", 1).await;
    assert_eq!(held.release().await, Ok(true));
    let r = within(secs(5), "x after the cancel", pending).await.unwrap();
    let t = match r {
        Ok(Some(t)) => t,
        r => panic!("waiter behind a cancelled one: {r:?}"),
    };
    assert_eq!(t.release().await, Ok(true));
    // The cancelling broker still works.
    let t = grab(&c, "cancel", 5, 5).await;
    assert_eq!(t.release().await, Ok(true));
}

#[tokio::test]
async fn cancellation_storm_keeps_exclusion_and_leaks_nothing() {
    // Many acquires dropped at random moments (docs/client.md, "Acquire") mixed with
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
                        // Holds the key a moment (not a synchronisation): widens the
                        // window in which a second holder would be seen.
                        tokio::time::sleep(ms(2)).await;
                        busy[k].store(false, Ordering::SeqCst);
                        match t.release().await {
                            Ok(true) => "ticket",
                            // A cancel closed the session the R was written on; the R took
                            // effect and the lane's resend got N (docs/client.md, "Release lane": "released by an
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
    // closes the session the R was written on (docs/client.md, "Acquire"). The server
    // executes that R; its answer is lost with the session; the lane resends
    // on the other connection and gets N. The ticket cannot have expired (its
    // conservative deadline is far away), so N can only mean "released by the
    // earlier attempt". docs/client.md ("Release lane") maps N to false in both cases (docs/client.md,
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
