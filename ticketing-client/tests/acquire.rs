//! Acquire scenarios of docs/client.md, Response matching and Acquire against scripted fake servers.

mod support;

use std::time::{Duration, Instant};
use support::*;
use ticketing_client::{Error, TicketBroker};

#[tokio::test]
async fn grant_then_release_with_the_exact_token() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 4242, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let t = b.acquire("seat-1", secs(5.0), secs(30.0), secs(2.0)).await.unwrap().unwrap();
    assert_eq!((t.token(), t.key()), (4242, "seat-1"));
    assert!(t.remaining() > secs(29.0) && t.remaining() <= secs(29.97));
    assert!(!t.is_expired());
    let a = &fake.requests()[0];
    assert_eq!((a.op(), a.key(), a.f[4].as_str(), a.f[5].as_str()), ("A", "seat-1", "5", "30"));
    assert_eq!(a.owner().len(), 32, "fresh 128-bit hex owner");
    assert!(t.release().await.unwrap());
    assert!(t.release().await.unwrap(), "a second call returns the first definite result");
    let rs: Vec<_> = fake.requests().into_iter().filter(|r| r.op() == "R").collect();
    assert_eq!(rs.len(), 1, "no second R");
    assert_eq!((rs[0].key(), rs[0].owner(), rs[0].f[4].as_str()), ("seat-1", a.owner(), "4242"));
    drop(t);
    // An observation window, not a synchronisation: a drop's R would arrive within it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fake.count("R"), 1, "a released ticket's drop sends nothing");
    b.close().await;
}

#[tokio::test]
async fn token_never_on_the_wire() {
    let fake = Fake::start(Behavior {
        token: b"very-secret-123".to_vec(),
        smac_token: b"very-secret-123".to_vec(),
        ..Behavior::script(|r| match r.op() {
            "A" => vec![grant(r, 7, 0)],
            _ => vec![line(format!("R {} {}", r.id(), r.key()))],
        })
    })
    .await;
    let b = TicketBroker::builder([fake.addr.clone()]).token("very-secret-123").build().unwrap();
    assert!(b.wait_ready(secs(5.0)).await);
    let t = b.acquire("k", secs(1.0), secs(5.0), secs(0.0)).await.unwrap().unwrap();
    assert_eq!(t.token(), 7);
    let raw = String::from_utf8_lossy(&fake.raw()).into_owned();
    assert!(raw.contains("AUTH "));
    assert!(!raw.contains("very-secret-123"));
    b.close().await;
}

#[tokio::test]
async fn t_is_none() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("T {} {}", r.id(), r.key()))])).await;
    let b = broker(&fake.addr).await;
    assert!(b.acquire("k", secs(0.0), secs(5.0), secs(0.0)).await.unwrap().is_none());
    b.close().await;
}

#[tokio::test]
async fn b_is_busy_at_once_one_frame() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("B {} {}", r.id(), r.key()))])).await;
    let b = broker(&fake.addr).await;
    let start = Instant::now();
    assert_eq!(b.acquire("k", secs(10.0), secs(5.0), secs(0.0)).await.unwrap_err(), Error::Busy);
    assert!(start.elapsed() < secs(9.0), "at once, not after the 10 s wait");
    // An observation window, not a synchronisation: a retry would arrive within it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.count("A"), 1, "no internal retry");
    b.close().await;
}

#[tokio::test]
async fn server_closes_after_reading_a_is_indeterminate_never_resent() {
    let fake = Fake::start(Behavior::script(|_| vec![Step::Close])).await;
    let b = broker(&fake.addr).await;
    assert_eq!(b.acquire("k", secs(5.0), secs(10.0), secs(0.0)).await.unwrap_err(), Error::Indeterminate);
    // An observation window, not a synchronisation: a resend would arrive within it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.count("A"), 1, "a possibly-sent acquire is never resent");
    assert!(b.wait_ready(secs(2.0)).await, "the broker recovers");
    b.close().await;
}

#[tokio::test]
async fn answer_with_a_wrong_key_closes_the_session_indeterminate() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("A {} other {} 5 0", r.id(), r.owner()))])).await;
    let b = broker(&fake.addr).await;
    assert_eq!(b.acquire("k", secs(5.0), secs(10.0), secs(0.0)).await.unwrap_err(), Error::Indeterminate);
    let conn = fake.requests()[0].conn;
    assert!(fake.wait_for(secs(2.0), |f| f.eofs().contains(&conn)).await, "the client closed that connection");
    assert_eq!(fake.count("A"), 1);
    b.close().await;
}

#[tokio::test]
async fn unsolicited_grant_is_released_with_its_exact_token() {
    let fake = Fake::start(Behavior {
        after_first_ok: vec!["A 999 orphan-key feedface 777 0".into()],
        ..Behavior::script(|r| match r.op() {
            "R" => vec![line(format!("R {} {}", r.id(), r.key()))],
            _ => vec![],
        })
    })
    .await;
    let b = TicketBroker::connect(&fake.addr).await.unwrap();
    assert!(fake.wait_for(secs(5.0), |f| f.count("R") == 1).await, "exact-token R within 5 s");
    let r = &fake.requests()[0];
    assert_eq!((r.key(), r.owner(), r.f[4].as_str()), ("orphan-key", "feedface", "777"));
    assert!(fake.eofs().contains(&0), "the session that got it was closed");
    b.close().await;
}

#[tokio::test]
async fn late_grant_with_waited_ms_zero_is_insufficient_time_and_compensated() {
    // lease 2 s, budget 1 s: a grant read 1.2 s after the send leaves 0.798 s.
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![Step::Sleep(secs(1.2)), grant(r, 31, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let err = b.acquire("k", secs(5.0), secs(2.0), secs(1.0)).await.unwrap_err();
    assert_eq!(err, Error::InsufficientTime);
    assert!(fake.wait_for(secs(5.0), |f| f.count("R") == 1).await, "compensating R");
    let (a, r) = (&fake.requests()[0], &fake.requests()[1]);
    assert_eq!((r.key(), r.owner(), r.f[4].as_str()), ("k", a.owner(), "31"));
    b.close().await;
}

#[tokio::test]
async fn late_grant_whose_waited_ms_covers_the_delay_is_a_ticket() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![Step::Sleep(secs(1.2)), grant(r, 32, 1200)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let t_call = Instant::now();
    let t = b.acquire("k", secs(5.0), secs(2.0), secs(1.0)).await.unwrap().unwrap();
    // remaining counts from t_send + waited_ms: deadline ≈ t_send + 1.2 + 1.998
    let deadline = t.deadline();
    assert!(deadline >= t_call + secs(3.19) && deadline <= t_call + secs(3.25), "{:?}", deadline - t_call);
    assert!(t.remaining() > secs(1.9));
    assert_eq!(fake.count("R"), 0);
    drop(t);
    assert!(fake.wait_for(secs(2.0), |f| f.count("R") == 1).await, "drop = best-effort release");
    b.close().await;
}

#[tokio::test]
async fn nothing_listening_is_unavailable_within_the_wait_budget() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let b = TicketBroker::connect(&addr).await.unwrap();
    let start = Instant::now();
    assert_eq!(b.acquire("k", secs(1.0), secs(5.0), secs(0.0)).await.unwrap_err(), Error::Unavailable);
    let took = start.elapsed();
    assert!(took >= secs(0.95) && took < secs(3.0), "{took:?}");
    assert!(!b.wait_ready(secs(0.2)).await);
    b.close().await;
}

#[tokio::test]
async fn wrong_smac_is_auth_failed_and_no_a_is_sent() {
    let fake =
        Fake::start(Behavior { smac_token: b"i-am-a-fake".to_vec(), ..Behavior::script(|r| vec![grant(r, 1, 0)]) })
            .await;
    let b = TicketBroker::connect(&fake.addr).await.unwrap();
    assert_eq!(b.acquire("k", secs(3.0), secs(5.0), secs(0.0)).await.unwrap_err(), Error::AuthFailed);
    assert_eq!(fake.count("A"), 0);
    assert!(fake.rec.lock().unwrap().lines.iter().all(|(_, l)| l.starts_with("AUTH ")));
    b.close().await;
}

#[tokio::test]
async fn server_auth_failed_is_auth_failed() {
    let fake =
        Fake::start(Behavior { token: b"right".to_vec(), smac_token: b"right".to_vec(), ..Behavior::default() }).await;
    let b = TicketBroker::builder([fake.addr.clone()]).token("wrong").build().unwrap();
    assert_eq!(b.acquire("k", secs(3.0), secs(5.0), secs(0.0)).await.unwrap_err(), Error::AuthFailed);
    assert_eq!(fake.count("A"), 0);
    b.close().await;
}

#[tokio::test]
async fn cancel_after_send_closes_that_connection() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![Step::Sleep(secs(2.0)), grant(r, 55, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let b2 = b.clone();
    let pending = tokio::spawn(async move { b2.acquire("k", secs(5.0), secs(10.0), secs(0.0)).await });
    // Cancel once the A is on the wire (the fake answers 2 s later).
    assert!(fake.wait_for(secs(5.0), |f| f.count("A") == 1).await, "the A never arrived");
    pending.abort();
    let cancelled = pending.await;
    assert!(cancelled.as_ref().is_err_and(|e| e.is_cancelled()), "{cancelled:?}");
    assert_eq!(fake.count("A"), 1);
    let conn = fake.requests()[0].conn;
    assert!(fake.wait_for(secs(2.0), |f| f.eofs().contains(&conn)).await, "possibly sent → session closed");
    // An observation window, not a synchronisation: a resend would arrive within it.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(fake.count("A"), 1, "never resent");
    b.close().await;
}

#[tokio::test]
async fn dropping_the_broker_handles_does_not_hang_and_close_is_final() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 9, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let _t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
    b.close().await;
    assert_eq!(fake.count("R"), 1, "close releases live tickets before it returns");
    assert_eq!(b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap_err(), Error::Closed);
    assert_eq!(_t.release().await.unwrap_err(), Error::Closed);
}
