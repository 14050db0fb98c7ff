//! First-attempt grace: a broker acquires right after it is built, and
//! `connect` resolves once the first connection attempts have settled.

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

#[tokio::test]
async fn connect_then_immediate_wait_zero_acquire_is_granted() {
    let fake = Fake::start(granting()).await;
    let b = TicketBroker::connect(&fake.addr).await.unwrap();
    let t = b.acquire("k", Duration::ZERO, secs(5.0), Duration::ZERO).await.unwrap().expect("granted");
    assert_eq!(t.token(), 31);
    assert_eq!(fake.requests()[0].f[4], "0", "wait 0 on the wire");
    assert!(t.release().await.unwrap());
    b.close().await;
}

#[tokio::test]
async fn build_then_immediate_wait_zero_acquire_is_granted() {
    // The bindings' pattern: construct (no await), acquire at once.
    let fake = Fake::start(granting()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).build().unwrap();
    let t = b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert_eq!(t.token(), 31);
    b.close().await;
}

#[tokio::test]
async fn slow_first_handshake_is_waited_for_beyond_the_budget() {
    // The server only greets after 700 ms; wait 0 still gets its one attempt.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let delayed = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        Fake::start_on(listener, granting())
    });
    let b = TicketBroker::builder([addr]).build().unwrap();
    let start = Instant::now();
    let t = b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert!(start.elapsed() >= Duration::from_millis(600), "{:?}", start.elapsed());
    assert_eq!(t.token(), 31);
    let _fake = delayed.await.unwrap();
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
    assert!(start.elapsed() < secs(2.0), "refused settles at once: {:?}", start.elapsed());
    let start = Instant::now();
    assert_eq!(b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap_err(), Error::Unavailable);
    assert!(start.elapsed() < secs(1.0), "dead address fails fast");
    b.close().await;
}
