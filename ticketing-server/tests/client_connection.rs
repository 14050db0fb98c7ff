//! The real Rust client's connections to a standalone server: shutdown,
//! restart, keepalive, the connection limit, addresses, blocking use.

mod client_common;
mod cluster_common;
mod common;

use client_common::{grab, ready_broker, signal, wait_waiters};
use cluster_common::{ms, secs, within};
use common::Server;
use std::time::{Duration, Instant};
use ticketing_client::{Error, TicketBroker};

#[tokio::test]
async fn sigterm_fails_a_pending_acquire_without_hanging() {
    let admin = cluster_common::free_port();
    let mut s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "term", 0, 30).await;
    let pending = tokio::spawn(async move { w.acquire("term", secs(20), secs(5), Duration::ZERO).await });
    wait_waiters(admin, "term", 1).await;
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
    let r = within(secs(5), "acquire while down", b.acquire("restart", Duration::ZERO, secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
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
async fn connection_limit_gives_unavailable_not_a_hang() {
    let s = Server::with(&[("TICKETING_MAX_CONNECTIONS", "2")], &[]);
    let first = ready_broker(&s.addr).await;
    let second = within(secs(10), "connect", TicketBroker::connect(&s.addr)).await.unwrap();
    let r = within(secs(10), "acquire over the limit", second.acquire("lim", secs(1), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
    // Once the first broker goes away, the second one gets in by itself.
    first.close().await;
    assert!(within(secs(15), "wait_ready", second.wait_ready(secs(10))).await);
    let t = grab(&second, "lim", 0, 5).await;
    assert_eq!(t.release().await, Ok(true));
}

#[tokio::test]
async fn frozen_server_is_detected_by_keepalive() {
    // SIGSTOP: the TCP connections stay open but nothing answers. The
    // keepalive (1 s of silence → P, dead 3 s later) must end the session,
    // so a queued acquire becomes Indeterminate well before wait + 5 s.
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let h = ready_broker(&s.addr).await;
    let w = ready_broker(&s.addr).await;
    let held = grab(&h, "frozen", 0, 30).await;
    let w2 = w.clone();
    let pending = tokio::spawn(async move { w2.acquire("frozen", secs(20), secs(5), Duration::ZERO).await });
    wait_waiters(admin, "frozen", 1).await;
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
                    Ok(None) => assert!(start.elapsed() < secs(30), "dropped ticket not released"),
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
