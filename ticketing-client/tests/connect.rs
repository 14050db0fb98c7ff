//! The caller's `wait` is a hard bound on finding a connection, and
//! `connect` resolves at the first usable connection (docs/client.md,
//! "Connecting" and "Acquire" step 2) — against scripted fake servers.

mod support;

use std::time::{Duration, Instant};
use support::*;
use ticketing_client::{Error, TicketBroker};

fn granting() -> Behavior {
    Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 31, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    })
}

fn silent() -> Behavior {
    Behavior { silent_from: Some(0), ..Behavior::default() }
}

#[tokio::test]
async fn hung_handshake_and_wait_one_is_unavailable_after_one_second() {
    let fake = Fake::start(silent()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).build().unwrap();
    let start = Instant::now();
    assert_eq!(b.acquire_secs("k", 1.0, 10.0, 0.0).await.unwrap_err(), Error::Unavailable);
    let took = start.elapsed();
    assert!(took >= secs(0.95) && took < secs(1.8), "wait 1 bounds the connection wait: {took:?}");
    assert_eq!(fake.requests().len(), 0, "nothing sent");
    b.close().await;
}

#[tokio::test]
async fn wait_zero_right_after_build_is_unavailable_at_once() {
    let fake = Fake::start(silent()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).build().unwrap();
    let start = Instant::now();
    assert_eq!(b.acquire_secs("k", 0.0, 10.0, 0.0).await.unwrap_err(), Error::Unavailable);
    // One immediate attempt: not after the 5 s handshake limit of the silent server.
    assert!(start.elapsed() < secs(4.5), "one immediate attempt: {:?}", start.elapsed());
    b.close().await;
}

#[tokio::test]
async fn connect_resolves_at_the_first_ready_connection_while_the_other_hangs() {
    // Two connections to one address: the first is served, the second never greeted.
    let fake = Fake::start(Behavior { silent_from: Some(1), ..granting() }).await;
    let start = Instant::now();
    let b = TicketBroker::connect(&fake.addr).await.unwrap();
    assert!(start.elapsed() < secs(4.5), "not the 5 s handshake limit of the hung one: {:?}", start.elapsed());
    let status = b.status().await.unwrap();
    assert!(status.ready && !status.settled, "{status:?}");
    // wait 0 straight after connect is one attempt at the lock.
    let t = b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert_eq!(t.token(), 31);
    assert_eq!(fake.requests()[0].f[4], "0", "wait 0 on the wire");
    assert!(t.release().await.unwrap());
    b.close().await;
}

#[tokio::test]
async fn connect_to_a_silent_server_returns_the_broker_at_the_handshake_limit() {
    let fake = Fake::start(silent()).await;
    let start = Instant::now();
    let b = TicketBroker::connect(&fake.addr).await.expect("a hung node never breaks the broker");
    let took = start.elapsed();
    assert!(took >= secs(4.5) && took < secs(8.0), "bounded by the 5 s handshake limit: {took:?}");
    assert!(!b.wait_ready(Duration::ZERO).await);
    b.close().await;
}

#[tokio::test]
async fn connect_wait_ready_acquire() {
    let fake = Fake::start(granting()).await;
    let b = TicketBroker::connect(&fake.addr).await.unwrap();
    assert!(b.wait_ready(secs(5.0)).await);
    let t = b.acquire("key", secs(5.0), secs(30.0), secs(2.0)).await.unwrap().expect("granted");
    assert_eq!(fake.requests()[0].f[4], "5");
    assert!(t.release().await.unwrap());
    b.close().await;
}

#[tokio::test]
async fn build_then_wait_ready_then_wait_zero_is_granted() {
    let fake = Fake::start(granting()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).build().unwrap();
    assert!(b.wait_ready(secs(5.0)).await);
    let t = b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert_eq!(t.token(), 31);
    b.close().await;
}

#[tokio::test]
async fn connect_to_a_dead_address_resolves_fast_and_the_broker_stays_usable() {
    // Bind, then drop: nothing listens on that port any more (refused at once).
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let start = Instant::now();
    let b = TicketBroker::connect(&addr).await.expect("a dead connection never breaks the broker");
    assert!(start.elapsed() < secs(4.5), "refused settles at once, not at the 5 s limit: {:?}", start.elapsed());
    let start = Instant::now();
    assert_eq!(b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap_err(), Error::Unavailable);
    assert!(start.elapsed() < secs(4.5), "dead address fails fast, not at the 5 s limit");
    b.close().await;
}

#[tokio::test]
async fn connect_takes_a_comma_separated_list_as_ticketing_addr_gives_it() {
    let fake = Fake::start(granting()).await;
    // A dead address first: the broker connects to both and routes to the live one.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let list = format!("{dead}, {},", fake.addr);
    let b = TicketBroker::connect(&list).await.unwrap();
    assert_eq!(b.addrs(), [dead.clone(), fake.addr.clone()]);
    assert!(b.wait_ready(secs(5.0)).await);
    let t = b.acquire("key", secs(5.0), secs(30.0), secs(2.0)).await.unwrap().expect("granted");
    assert!(t.release().await.unwrap());
    b.close().await;
    // The builder takes the same list, as one string or split.
    let split = TicketBroker::builder([dead.as_str(), fake.addr.as_str()]).build().unwrap();
    assert_eq!(split.addrs(), b.addrs());
    split.close().await;
}

/// A network whose connections never open, counting the dials.
#[derive(Debug, Default)]
struct Unreachable(std::sync::atomic::AtomicUsize);

impl ticketing_client::Connect for Unreachable {
    fn connect<'a>(
        &'a self,
        _addr: &'a str,
    ) -> ticketing_client::BoxFuture<'a, std::io::Result<Box<dyn ticketing_client::Stream>>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_broker_on_another_network_runs_on_the_callers_runtime_and_its_clock() {
    let net = std::sync::Arc::new(Unreachable::default());
    let b = TicketBroker::builder(["10.0.0.1:5225"]).connector(net.clone()).build().unwrap();
    let (real, paused) = (Instant::now(), tokio::time::Instant::now());
    // No connection ever opens: `wait` runs out on the test's paused clock,
    // which moves on as soon as every task waits, far sooner than 30 real seconds.
    assert_eq!(b.acquire_secs("k", 30.0, 10.0, 0.0).await.unwrap_err(), Error::Unavailable);
    assert!(paused.elapsed() >= secs(30.0), "{:?}", paused.elapsed());
    assert!(real.elapsed() < secs(30.0), "the driver waited on the real clock: {:?}", real.elapsed());
    // Two connections to the one address, each dialled again after every
    // 5 s handshake limit (on the paused clock too).
    let dials = net.0.load(std::sync::atomic::Ordering::SeqCst);
    assert!(dials >= 4, "{dials} dials");
    b.close().await;
}
