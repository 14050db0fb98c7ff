//! Counted (`S`/`G`) and multi-key (`K`) grants of docs/protocol.md, "Counted and multi-key grants"
//! against a scripted fake server: the frames sent, the tickets made, the
//! release of every key, the argument rules, and Indeterminate per key.

mod support;

use std::time::Duration;
use support::*;
use ticketing_client::{ArgumentError, Error, ParamError};

/// S → G (slot 2), K → A, R → R, Q → N.
fn granting() -> Behavior {
    Behavior::script(|r| match r.op() {
        "S" => vec![grant_shared(r, 500, 0, 2)],
        "K" => vec![grant_all(r, 600, 0)],
        "A" => vec![grant(r, 700, 0)],
        "R" => vec![line(format!("R {} {}", r.id(), r.key()))],
        "Q" => vec![line(format!("N {} {}", r.id(), r.key()))],
        _ => vec![],
    })
}

fn releases(fake: &Fake) -> Vec<(String, String, String)> {
    let mut v: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.op() == "R")
        .map(|r| (r.key().to_owned(), r.owner().to_owned(), r.f[4].clone()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn a_counted_acquire_sends_s_and_its_ticket_has_the_slot() {
    let fake = Fake::start(granting()).await;
    let b = broker(&fake.addr).await;
    let t = b.acquire_shared("pool", 5, secs(2.0), secs(30.0), secs(1.0)).await.unwrap().unwrap();
    assert_eq!((t.token(), t.slot(), t.key()), (500, Some(2), "pool"));
    assert_eq!(t.keys(), ["pool"]);
    assert!(t.remaining() > secs(29.0) && t.remaining() <= secs(29.97));
    let s = &fake.requests()[0];
    assert_eq!((s.op(), s.key(), &s.f[4][..], &s.f[5][..], &s.f[6][..]), ("S", "pool", "2", "30", "5"));
    assert_eq!(s.owner().len(), 32, "fresh 128-bit hex owner");
    assert!(t.release().await.unwrap());
    assert_eq!(releases(&fake), [("pool".to_owned(), s.owner().to_owned(), "500".to_owned())]);
    b.close().await;
}

#[tokio::test]
async fn a_multi_key_acquire_sends_k_and_release_frees_every_key() {
    let fake = Fake::start(granting()).await;
    let b = broker(&fake.addr).await;
    let t = b.acquire_all(&["b", "a", "c"], secs(2.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    assert_eq!((t.token(), t.slot(), t.key()), (600, None, "b"));
    assert_eq!(t.keys(), ["b", "a", "c"]);
    let k = &fake.requests()[0];
    assert_eq!(k.f, ["K", k.id(), k.owner(), "2", "30", "b", "a", "c"]);
    assert!(t.release().await.unwrap(), "every key answered R");
    let o = k.owner().to_owned();
    let want: Vec<_> = ["a", "b", "c"].iter().map(|key| (key.to_string(), o.clone(), "600".to_owned())).collect();
    assert_eq!(releases(&fake), want, "one R per key with the one token");
    assert!(t.release().await.unwrap(), "a second call returns the first result");
    assert_eq!(fake.count("R"), 3, "and sends nothing");
    b.close().await;
}

#[tokio::test]
async fn a_multi_key_release_with_an_n_is_false() {
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "K" => vec![grant_all(r, 601, 0)],
        "R" if r.key() == "b" => vec![line(format!("N {} b", r.id()))],
        "R" => vec![line(format!("R {} {}", r.id(), r.key()))],
        _ => vec![],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let t = b.acquire_all(&["a", "b"], secs(2.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    assert!(!t.release().await.unwrap(), "b was no longer held");
    assert_eq!(fake.count("R"), 2, "a was still released");
    b.close().await;
}

#[tokio::test]
async fn dropping_a_multi_key_ticket_releases_every_key() {
    let fake = Fake::start(granting()).await;
    let b = broker(&fake.addr).await;
    let t = b.acquire_all(&["x", "y"], secs(2.0), secs(30.0), secs(0.0)).await.unwrap().unwrap();
    drop(t);
    assert!(fake.wait_for(secs(5.0), |f| f.count("R") == 2).await, "best-effort R for each key");
    let keys: Vec<String> = releases(&fake).into_iter().map(|r| r.0).collect();
    assert_eq!(keys, ["x", "y"]);
    b.close().await;
}

#[tokio::test]
async fn read_lock_is_s_65535_and_write_lock_is_a() {
    let fake = Fake::start(granting()).await;
    let b = broker(&fake.addr).await;
    let r = b.read_lock("doc", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
    let w = b.write_lock_secs("doc2", 1.0, 10.0, 0.0).await.unwrap().unwrap();
    let r2 = b.read_lock_secs("doc3", 1.0, 10.0, 0.0).await.unwrap().unwrap();
    assert_eq!((r.slot(), w.slot(), r2.slot()), (Some(2), None, Some(2)));
    let reqs = fake.requests();
    assert_eq!((reqs[0].op(), reqs[0].key(), &reqs[0].f[6][..]), ("S", "doc", "65535"));
    assert_eq!((reqs[1].op(), reqs[1].key()), ("A", "doc2"));
    assert_eq!((reqs[2].op(), reqs[2].key(), &reqs[2].f[6][..]), ("S", "doc3", "65535"));
    b.close().await;
}

fn param(e: Error) -> ParamError {
    match e {
        Error::InvalidArgument(ArgumentError::Param(p)) => p,
        other => panic!("expected an argument error, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_counts_and_key_lists_are_argument_errors_and_send_nothing() {
    let fake = Fake::start(granting()).await;
    let b = broker(&fake.addr).await;
    for n in [0, -1, 65536, i64::MAX] {
        let e = b.acquire_shared_secs("k", n, 1.0, 10.0, 0.0).await.unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
        assert_eq!(param(e), ParamError::Permits { value: n });
    }
    assert!(matches!(
        param(b.acquire_shared("k", 0, secs(1.0), secs(10.0), secs(0.0)).await.unwrap_err()),
        ParamError::Permits { value: 0 }
    ));
    let long = ["x".repeat(250), "y".repeat(250)];
    let seventeen: Vec<String> = (0..17).map(|i| format!("k{i}")).collect();
    let bad: [&[String]; 5] = [
        &["only".to_owned()],
        &seventeen,
        &["a".to_owned(), "a".to_owned()],
        &["a".to_owned(), "b c".to_owned()],
        &long,
    ];
    for keys in bad {
        let e = b.acquire_all_secs(keys, 1.0, 10.0, 0.0).await.unwrap_err();
        assert!(matches!(param(e.clone()), ParamError::Keys { .. }), "{keys:?}: {e:?}");
        assert!(e.to_string().starts_with("invalid argument: keys: "), "{e}");
    }
    assert!(matches!(
        param(b.acquire_all(&[], secs(1.0), secs(10.0), secs(0.0)).await.unwrap_err()),
        ParamError::Keys { .. }
    ));
    // Nothing of the above reached the server: the next request is the first it reads.
    let t = b.acquire("k", secs(1.0), secs(10.0), secs(0.0)).await.unwrap().unwrap();
    assert_eq!(t.token(), 700);
    let reqs = fake.requests();
    assert_eq!((reqs.len(), reqs[0].op()), (1, "A"), "{reqs:?}");
    b.close().await;
}

#[tokio::test]
async fn an_indeterminate_multi_key_acquire_asks_about_every_key() {
    // The first K is read and the connection dropped; every Q is answered N.
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "K" => vec![Step::Close],
        "Q" => vec![line(format!("N {} {}", r.id(), r.key()))],
        _ => vec![],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let e = b.acquire_all(&["a", "b", "c"], secs(2.0), secs(10.0), secs(0.0)).await.unwrap_err();
    assert_eq!(e, Error::Indeterminate);
    let owner = fake.requests()[0].owner().to_owned();
    assert!(fake.wait_for(secs(5.0), |f| f.lines_of("Q").len() == 3).await, "one Q per key");
    let mut q: Vec<(String, String)> =
        fake.lines_of("Q").iter().map(|r| (r.key().to_owned(), r.owner().to_owned())).collect();
    q.sort();
    let want: Vec<_> = ["a", "b", "c"].iter().map(|k| (k.to_string(), owner.clone())).collect();
    assert_eq!(q, want);
    assert_eq!(fake.count("K"), 1, "never resent");
    assert_eq!(fake.count("R"), 0, "N: nothing to release");
    b.close().await;
}

#[tokio::test]
async fn insufficient_time_on_a_multi_key_grant_releases_every_key() {
    // lease 2 s, budget 1 s: a grant read 1.2 s after the send leaves 0.798 s.
    let fake = Fake::start(Behavior::script(|r| match r.op() {
        "K" => vec![Step::Sleep(secs(1.2)), grant_all(r, 41, 0)],
        "R" => vec![line(format!("R {} {}", r.id(), r.key()))],
        _ => vec![],
    }))
    .await;
    let b = broker(&fake.addr).await;
    let e = b.acquire_all(&["a", "b"], secs(5.0), secs(2.0), secs(1.0)).await.unwrap_err();
    assert_eq!(e, Error::InsufficientTime);
    assert!(fake.wait_for(secs(5.0), |f| f.count("R") == 2).await, "a compensating R per key");
    let o = fake.requests()[0].owner().to_owned();
    assert_eq!(releases(&fake), [("a".into(), o.clone(), "41".into()), ("b".into(), o, "41".into())]);
    b.close().await;
}

#[tokio::test]
async fn t_is_none_for_counted_and_multi_key_acquires() {
    let fake = Fake::start(Behavior::script(|r| vec![line(format!("T {} {}", r.id(), r.keys()[0]))])).await;
    let b = broker(&fake.addr).await;
    assert!(b.acquire_shared("k", 3, secs(0.0), secs(5.0), secs(0.0)).await.unwrap().is_none());
    assert!(b.acquire_all(&["k", "j"], secs(0.0), secs(5.0), secs(0.0)).await.unwrap().is_none());
    assert!(b.wait_ready(Duration::from_secs(1)).await, "T is no protocol error: the connections stay");
    assert!(fake.eofs().is_empty());
    b.close().await;
}

#[tokio::test]
async fn an_unsolicited_counted_grant_is_released_with_its_exact_token() {
    let fake = Fake::start(Behavior {
        after_first_ok: vec!["G 999 orphan-pool feedface 778 0 3".into()],
        ..Behavior::script(|r| match r.op() {
            "R" => vec![line(format!("R {} {}", r.id(), r.key()))],
            _ => vec![],
        })
    })
    .await;
    let b = ticketing_client::TicketBroker::connect(&fake.addr).await.unwrap();
    assert!(fake.wait_for(secs(5.0), |f| f.count("R") == 1).await, "exact-token R within 5 s");
    let r = &fake.requests()[0];
    assert_eq!((r.key(), r.owner(), r.f[4].as_str()), ("orphan-pool", "feedface", "778"));
    assert!(fake.eofs().contains(&0), "the session that got it was closed");
    b.close().await;
}
