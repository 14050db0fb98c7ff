//! Counted and multi-key grants through the real Rust client against a
//! standalone server: a semaphore's slots, read/write locks, all keys at once
//! with one token, a multi-key release, and argument errors.

mod client_common;
mod cluster_common;
mod common;

use client_common::{gauge, gauge_becomes, ready_broker, wait_waiters};
use cluster_common::{secs, within};
use common::Server;
use std::time::Duration;
use ticketing_client::{Error, Ticket, TicketBroker};

async fn shared(b: &TicketBroker, key: &str, n: u16, wait: u64) -> Option<Ticket> {
    within(secs(wait + 10), "acquire_shared", b.acquire_shared(key, n, secs(wait), secs(20), Duration::ZERO))
        .await
        .expect("acquire_shared")
}

#[tokio::test]
async fn a_semaphore_grants_n_holders_distinct_slots_and_frees_a_slot_on_release() {
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let t1 = shared(&b, "sem", 2, 0).await.expect("first permit");
    let t2 = shared(&b, "sem", 2, 0).await.expect("second permit");
    let mut slots = [t1.slot().unwrap(), t2.slot().unwrap()];
    slots.sort();
    assert_eq!(slots, [0, 1], "distinct slots below n");
    assert!(t2.token() > t1.token(), "one token per grant, increasing");
    assert!(shared(&b, "sem", 2, 0).await.is_none(), "a third holder is refused at once with wait 0");
    let freed = t1.slot();
    assert_eq!(within(secs(7), "release", t1.release()).await, Ok(true));
    let t3 = shared(&b, "sem", 2, 5).await.expect("the freed permit");
    assert_eq!(t3.slot(), freed, "the lowest free slot");
    assert!(t3.token() > t2.token());
    assert_eq!(t3.keys(), ["sem"]);
    b.close().await;
}

#[tokio::test]
async fn readers_share_a_writer_waits_for_them() {
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let r1 = within(secs(10), "read", b.read_lock("doc", secs(0), secs(20), secs(0))).await.unwrap().unwrap();
    let r2 = within(secs(10), "read", b.read_lock("doc", secs(0), secs(20), secs(0))).await.unwrap().unwrap();
    assert!(r1.slot().is_some() && r2.slot().is_some() && r1.slot() != r2.slot());
    let none = within(secs(10), "write", b.write_lock("doc", secs(0), secs(20), secs(0))).await.unwrap();
    assert!(none.is_none(), "a writer is not granted beside readers");
    assert_eq!(r1.release().await, Ok(true));
    assert_eq!(r2.release().await, Ok(true));
    let w = within(secs(10), "write", b.write_lock("doc", secs(5), secs(20), secs(0))).await.unwrap().unwrap();
    assert_eq!(w.slot(), None);
    assert!(w.token() > r2.token().max(r1.token()));
    let none = within(secs(10), "read", b.read_lock("doc", secs(0), secs(20), secs(0))).await.unwrap();
    assert!(none.is_none(), "no reader beside a writer");
    assert_eq!(w.release().await, Ok(true));
    b.close().await;
}

#[tokio::test]
async fn all_keys_at_once_with_one_token_released_key_by_key() {
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    let t = within(secs(10), "acquire_all", b.acquire_all(&["acct-2", "acct-1"], secs(0), secs(20), secs(0)))
        .await
        .unwrap()
        .expect("both keys are free");
    assert_eq!(t.keys(), ["acct-2", "acct-1"]);
    assert_eq!((t.key(), t.slot()), ("acct-2", None));
    for key in ["acct-1", "acct-2"] {
        let r = within(secs(10), "acquire", b.acquire(key, secs(0), secs(5), secs(0))).await.unwrap();
        assert!(r.is_none(), "{key} is held by the multi-key ticket");
    }
    assert_eq!(within(secs(7), "release", t.release()).await, Ok(true), "every key answered R");
    for key in ["acct-1", "acct-2"] {
        let r = within(secs(10), "acquire", b.acquire(key, secs(0), secs(5), secs(0))).await.unwrap();
        let got = r.unwrap_or_else(|| panic!("{key} is free again"));
        assert!(got.token() > t.token(), "{key}: fenced above the multi-key token");
        assert_eq!(got.release().await, Ok(true));
    }
    b.close().await;
}

#[tokio::test]
async fn a_multi_key_acquire_waits_for_a_held_key_and_a_writer_is_not_overtaken() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let a = ready_broker(&s.addr).await;
    let b = ready_broker(&s.addr).await;
    let held = within(secs(10), "acquire", a.acquire("y", secs(0), secs(20), secs(0))).await.unwrap().unwrap();
    let b2 = b.clone();
    let all = tokio::spawn(async move {
        within(secs(20), "acquire_all", b2.acquire_all(&["x", "y"], secs(15), secs(20), secs(0))).await
    });
    // The K queues on both keys behind the holder of y (x is free, but not granted alone).
    wait_waiters(admin, "y", 1).await;
    wait_waiters(admin, "x", 1).await;
    assert_eq!(held.release().await, Ok(true));
    let t = within(secs(20), "join", all).await.unwrap().unwrap().expect("granted once y was released");
    assert!(t.token() > held.token());
    assert_eq!(t.keys(), ["x", "y"]);

    // A reader, then a writer queues, then a second reader: the reader waits behind the writer.
    let r1 = within(secs(10), "read", a.read_lock("rw", secs(0), secs(20), secs(0))).await.unwrap().unwrap();
    let a2 = a.clone();
    let writer =
        tokio::spawn(async move { within(secs(20), "write", a2.write_lock("rw", secs(15), secs(20), secs(0))).await });
    wait_waiters(admin, "rw", 1).await;
    let late = within(secs(10), "read", b.read_lock("rw", secs(0), secs(20), secs(0))).await.unwrap();
    assert!(late.is_none(), "no reader overtakes a waiting writer");
    assert_eq!(r1.release().await, Ok(true));
    let w = within(secs(20), "join", writer).await.unwrap().unwrap().expect("the writer is granted");
    assert_eq!(w.slot(), None);
    assert_eq!(w.release().await, Ok(true));
    assert_eq!(t.release().await, Ok(true));
    b.close().await;
    a.close().await;
}

#[tokio::test]
async fn bad_counts_and_key_lists_never_reach_the_server() {
    let s = Server::start();
    let b = ready_broker(&s.addr).await;
    for n in [0, 65536] {
        let r = b.acquire_shared_secs("k", n, 0.0, 5.0, 0.0).await;
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "n {n}: {r:?}");
    }
    for keys in [&["one"][..], &["a", "a"], &["a", "b c"]] {
        let r = b.acquire_all(keys, secs(0), secs(5), secs(0)).await;
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{keys:?}: {r:?}");
    }
    // The connection is still good.
    let t = within(secs(10), "acquire", b.acquire("k", secs(0), secs(5), secs(0))).await.unwrap().unwrap();
    assert_eq!(t.release().await, Ok(true));
    b.close().await;
}

#[tokio::test]
async fn insufficient_time_on_a_multi_key_grant_releases_every_key_at_once() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--admin-listen", &format!("127.0.0.1:{admin}")]);
    let b = ready_broker(&s.addr).await;
    // lease 2 s, budget 2 s: the conservative deadline (1.998 s) never leaves 2 s.
    let r = within(secs(10), "acquire_all", b.acquire_all(&["p", "q", "r"], secs(0), secs(2), secs(2))).await;
    assert_eq!(r.unwrap_err(), Error::InsufficientTime);
    // The client releases every key with the grant's token (R), before the lease could end.
    let released = r#"ticketing_releases_total{result="released"}"#;
    assert!(gauge_becomes(admin, released, 3, secs(10)).await, "one R per key freed it");
    let expiries = tokio::task::spawn_blocking(move || gauge(admin, "ticketing_expiries_total")).await.unwrap();
    assert_eq!(expiries, Some(0), "freed by the releases, not by expiry");
    b.close().await;
}
