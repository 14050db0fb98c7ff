//! The answer `F` (docs/protocol.md, "The answer F") against a scripted fake server: every
//! request kind it answers ends with `Error::Forbidden` naming the key, at once, never
//! retried, and the connection stays.

mod support;

use std::time::Instant;
use support::*;
use ticketing_client::Error;

/// Keys under `payments/` are forbidden (`F`); everything else is granted and released.
/// A `K` is answered `F` with its first forbidden key.
fn orders_only() -> Behavior {
    Behavior::script(|r| {
        let forbidden = r.keys().into_iter().find(|k| k.starts_with("payments/"));
        match (r.op(), forbidden) {
            (_, Some(key)) => vec![line(format!("F {} {key}", r.id()))],
            ("A", None) => vec![grant(r, 700, 0)],
            ("K", None) => vec![grant_all(r, 800, 0)],
            ("R", None) => vec![line(format!("R {} {}", r.id(), r.key()))],
            _ => vec![],
        }
    })
}

fn forbidden(key: &str) -> Error {
    Error::Forbidden { key: key.to_owned() }
}

#[tokio::test]
async fn an_acquire_answered_f_is_forbidden_at_once_and_the_connection_stays() {
    let fake = Fake::start(orders_only()).await;
    let b = broker(&fake.addr).await;
    let start = Instant::now();
    let e = b.acquire("payments/1", secs(10.0), secs(30.0), secs(0.0)).await.unwrap_err();
    assert_eq!(e, forbidden("payments/1"));
    assert_eq!(e.code(), "forbidden");
    assert_eq!(e.to_string(), "forbidden: this client's principal may not use the key payments/1");
    assert!(start.elapsed() < secs(5.0), "at once, not after the 10 s wait");
    // The next acquire works; F closed nothing and nothing was retried.
    let t = b.acquire("orders/1", secs(1.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    assert_eq!(t.token(), 700);
    assert!(t.release().await.unwrap());
    assert_eq!(fake.count("A"), 2, "no internal retry after F");
    assert!(fake.eofs().is_empty(), "no connection was closed");
    b.close().await;
}

#[tokio::test]
async fn a_multi_key_acquire_answered_f_names_its_first_forbidden_key() {
    let fake = Fake::start(orders_only()).await;
    let b = broker(&fake.addr).await;
    let e = b.acquire_all(&["orders/1", "payments/2", "payments/3"], secs(2.0), secs(30.0), secs(0.0)).await;
    assert_eq!(e.unwrap_err(), forbidden("payments/2"));
    let e = b.acquire_shared("payments/pool", 3, secs(2.0), secs(30.0), secs(0.0)).await;
    assert_eq!(e.unwrap_err(), forbidden("payments/pool"));
    assert_eq!((fake.count("K"), fake.count("S"), fake.count("R")), (1, 1, 0), "no retry, nothing to release");
    assert!(fake.eofs().is_empty());
    b.close().await;
}

#[tokio::test]
async fn a_release_answered_f_is_forbidden_once_and_never_sent_again() {
    // The grant is made; the server then answers the release F (the
    // principal's keys were narrowed in between).
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 701, 0)],
        "R" => vec![line(format!("F {} {}", r.id(), r.key()))],
        _ => vec![],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let t = b.acquire("orders/1", secs(1.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    assert_eq!(t.release().await.unwrap_err(), forbidden("orders/1"));
    assert_eq!(t.release().await.unwrap_err(), forbidden("orders/1"), "the first definite result again");
    drop(t);
    // The drop sends nothing either: the next request on the wire is this acquire.
    let _ = b.acquire("orders/2", secs(1.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    let ops: Vec<String> = fake.requests().iter().map(|r| format!("{} {}", r.op(), r.key())).collect();
    assert_eq!(ops, ["A orders/1", "R orders/1", "A orders/2"]);
    b.close().await;
}

#[tokio::test]
async fn the_query_of_an_indeterminate_acquire_answered_f_is_asked_once() {
    // The acquire is read and its connection dropped (Indeterminate). The
    // lane's Q about it is answered F and then that connection is closed
    // too: a Q without a final answer would be asked again on another
    // connection; F is final, so it is not, and nothing is released.
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" if r.key() == "payments/1" => vec![Step::Close],
        "A" => vec![grant(r, 702, 0)],
        "Q" => vec![line(format!("F {} {}", r.id(), r.key())), Step::Close],
        _ => vec![],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let e = b.acquire("payments/1", secs(2.0), secs(10.0), secs(0.0)).await.unwrap_err();
    assert_eq!(e, Error::Indeterminate);
    assert!(fake.wait_for(secs(5.0), |f| f.lines_of("Q").len() == 1).await, "the lane asks");
    let q = fake.lines_of("Q")[0].clone();
    // The client read the F, then the end of that stream, and closed its side.
    assert!(fake.wait_for(secs(5.0), |f| f.eofs().contains(&q.conn)).await);
    assert!(b.wait_ready(secs(5.0)).await);
    let _ = b.acquire("orders/1", secs(1.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    assert_eq!(fake.lines_of("Q").len(), 1, "not asked again");
    assert_eq!(fake.count("R"), 0, "nothing to release");
    b.close().await;
}
