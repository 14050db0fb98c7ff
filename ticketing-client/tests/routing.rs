//! Connection-level scenarios of docs/client.md, Connections, Response matching and Release lane against scripted fake servers.

mod support;

use std::time::{Duration, Instant};
use support::*;
use ticketing_client::{Error, TicketBroker};

fn grant_all(token: u64) -> Behavior {
    Behavior::script(move |r| match r.op() {
        "A" => vec![grant(r, token, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    })
}

#[tokio::test]
async fn l_keeps_the_connection() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 11, 0), line("L 127.0.0.1:1")],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    for _ in 0..4 {
        let t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
        assert!(t.release().await.unwrap());
    }
    // An observation window, not a synchronisation: a close would be seen within it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(fake.eofs().is_empty(), "L never closes a connection");
    assert_eq!(fake.accepted().len(), 2, "no reconnect");
    b.close().await;
}

#[tokio::test]
async fn l_naming_own_address_keeps_it_leader() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let fake = Fake::start_on(listener, Behavior { after_ok: vec![format!("L {addr}")], ..grant_all(12) });
    let b = broker(&addr).await;
    assert_eq!(b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap().token(), 12);
    assert!(fake.eofs().is_empty());
    b.close().await;
}

#[tokio::test]
async fn follower_only_is_never_used_and_unavailable() {
    let fake = Fake::start(Behavior { role: "follower", ..grant_all(1) }).await;
    let b = TicketBroker::connect(&fake.addr).await.unwrap();
    assert!(!b.wait_ready(secs(0.5)).await);
    assert_eq!(b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap_err(), Error::Unavailable);
    assert_eq!(fake.count("A"), 0);
    b.close().await;
}

#[tokio::test]
async fn m_to_an_unlisted_address_is_ignored() {
    // The first A is answered with M to an address nobody configured, then the node serves.
    let first = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let x = {
        let first = first.clone();
        Fake::start(Behavior::script(move |r| {
            match (r.op(), first.fetch_add(1, std::sync::atomic::Ordering::SeqCst)) {
                ("A", 0) => vec![line("M 10.9.9.9:5225"), Step::Close],
                ("A", _) => vec![grant(r, 100, 0)],
                // The lane asks about the Indeterminate acquire: it holds nothing.
                ("Q", _) => vec![line(format!("N {} {}", r.id(), r.key()))],
                _ => vec![line(format!("R {} {}", r.id(), r.key()))],
            }
        }))
        .await
    };
    let b = broker(&x.addr).await;
    assert_eq!(b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap_err(), Error::Indeterminate, "M closes");
    let conn = x.requests()[0].conn;
    assert!(x.wait_for(secs(2.0), |f| f.eofs().contains(&conn)).await);
    // Still served by the configured node (the other connection, then the reconnected one).
    for _ in 0..3 {
        let t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
        assert_eq!(t.token(), 100);
        assert!(t.release().await.unwrap());
    }
    assert_eq!(x.count("A"), 4, "the M'd acquire was not resent");
    let queries = x.rec.lock().unwrap().lines.iter().filter(|(_, l)| l.starts_with("Q ")).count();
    assert_eq!(queries, 1, "the Indeterminate acquire was queried once");
    b.close().await;
}

#[tokio::test]
async fn release_n_is_false() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 5, 0)],
        _ => vec![line(format!("N {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
    assert!(!t.release().await.unwrap());
    assert!(!t.release().await.unwrap());
    assert_eq!(fake.count("R"), 1);
    b.close().await;
}

#[tokio::test]
async fn unanswered_release_is_release_unconfirmed_after_5s() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 6, 0)],
        _ => vec![],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
    let start = Instant::now();
    assert_eq!(t.release().await.unwrap_err(), Error::ReleaseUnconfirmed);
    let took = start.elapsed();
    assert!(took >= secs(4.9) && took < secs(6.5), "{took:?}");
    assert!(fake.count("R") >= 1);
    // (no close(): it would wait another 5 s for the dropped ticket's best-effort release)
    drop(t);
    drop(b);
}

#[tokio::test]
async fn reconnect_backoff_doubles() {
    // Accepts and hangs up at once: every attempt fails after connect.
    let fake = Fake::start(Behavior { hang_up_at_once: true, ..Behavior::default() }).await;
    let other = Fake::start(Behavior { hang_up_at_once: true, ..Behavior::default() }).await;
    let b = TicketBroker::builder([fake.addr.clone(), other.addr.clone()]).build().unwrap();
    assert!(fake.wait_for(secs(6.0), |f| f.accepted().len() >= 6).await);
    let t = fake.accepted();
    let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
    for (gap, nominal) in gaps.iter().zip([0.1, 0.2, 0.4, 0.8, 1.6]) {
        assert!(*gap >= nominal - 0.01 && *gap < nominal + 0.25, "gaps {gaps:?}");
    }
    b.close().await;
}

#[tokio::test]
async fn dropped_ticket_is_released_best_effort() {
    let fake = Fake::start(grant_all(77)).await;
    let b = broker(&fake.addr).await;
    let t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
    drop(t);
    assert!(fake.wait_for(secs(2.0), |f| f.count("R") == 1).await);
    assert_eq!(fake.requests()[1].f[4], "77");
    b.close().await;
}

#[tokio::test]
async fn expired_future_completes_at_the_deadline() {
    let fake = Fake::start(grant_all(8)).await;
    let b = broker(&fake.addr).await;
    // lease 1 s → conservative deadline 0.999 s after the send
    let t = b.acquire("k", secs(0.0), secs(1.0), secs(0.0)).await.unwrap().unwrap();
    assert!(!t.is_expired());
    tokio::time::timeout(secs(60.0), t.expired()).await.expect("expired() completes (hang bound)");
    assert!(Instant::now() >= t.deadline(), "completed before the deadline");
    assert!(t.is_expired());
    assert_eq!(t.remaining(), Duration::ZERO);
    assert!(t.release().await.unwrap());
    b.close().await;
}

#[test]
fn works_from_a_plain_thread_without_a_runtime() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let fake = rt.block_on(Fake::start(grant_all(9)));
    let fake_addr = fake.addr.clone();
    let handle = std::thread::spawn(move || {
        let b = TicketBroker::builder([fake_addr]).build().unwrap();
        let rt = ticketing_client::runtime();
        assert!(rt.block_on(b.wait_ready(secs(5.0))));
        let t = rt.block_on(b.acquire("k", secs(1.0), secs(5.0), secs(0.0))).unwrap().unwrap();
        assert_eq!(t.token(), 9);
        assert!(rt.block_on(t.release()).unwrap());
        rt.block_on(b.close());
    });
    // Keep the fake's runtime turning while the thread works.
    rt.block_on(async {
        while !handle.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    handle.join().unwrap();
}
