//! Broker tests: the answer `F` (docs/protocol.md, "The answer F"; docs/client.md, Response
//! matching). `F` is final for whatever it answers (an acquire of any kind, a release, a
//! query): nothing is retried, the connection stays. The harness is `broker_support`.

mod broker_support;

use broker_support::*;
use std::time::Duration;
use ticketing_proto::broker::Failure;
use ticketing_proto::frame::Key;
use ticketing_proto::lane::{Outcome, Purpose};

fn forbidden(key: &str) -> Failure {
    Failure::Forbidden(Key::new(key.to_owned()).unwrap())
}

#[test]
fn an_acquire_answered_f_fails_forbidden_at_once_and_is_never_resent() {
    let mut w = one_leader();
    let op = w.acquire("payments/1", 5.0, 10.0, 0.0);
    let (conn, id, ..) = w.last_acquire();
    w.send(conn, &format!("F {id} payments/1\n"));
    assert_eq!(w.result(op), Some(Err(forbidden("payments/1"))));
    assert!(w.conns[&conn].open, "the connection stays");
    assert!(w.ended.is_empty(), "no session ended: {:?}", w.ended);
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.acquires_seen(), 1, "no internal retry after F");
    assert!(w.queries_seen().is_empty() && w.releases_seen().is_empty(), "nothing to resolve or release");
    // The same connection serves the next acquire.
    let op = w.acquire("orders/1", 5.0, 10.0, 0.0);
    let (c2, id2, _, owner) = w.last_acquire();
    w.send(c2, &format!("A {id2} orders/1 {owner} 9 0\n"));
    assert!(matches!(w.result(op), Some(Ok(Some(_)))));
    assert_eq!(w.open_conns().len(), 2);
}

#[test]
fn a_shared_acquire_answered_f_fails_forbidden() {
    let mut w = one_leader();
    let op = w.acquire_shared("payments/pool", 3, 5.0, 10.0, 0.0);
    let (conn, id, ..) = w.last_shared();
    w.send(conn, &format!("F {id} payments/pool\n"));
    assert_eq!(w.result(op), Some(Err(forbidden("payments/pool"))));
    assert!(w.conns[&conn].open);
}

#[test]
fn a_multi_key_acquire_answered_f_names_the_key_the_server_named() {
    let mut w = one_leader();
    let op = w.acquire_all(&["orders/1", "payments/1", "payments/2"], 5.0, 10.0, 0.0);
    let (conn, id, ..) = w.last_all();
    // Not the first key: the first one the principal may not use.
    w.send(conn, &format!("F {id} payments/1\n"));
    assert_eq!(w.result(op), Some(Err(forbidden("payments/1"))));
    assert!(w.conns[&conn].open);
    w.run_for(Duration::from_secs(10));
    assert!(w.releases_seen().is_empty(), "nothing was granted, nothing to release");
}

#[test]
fn an_explicit_release_answered_f_fails_forbidden_and_is_not_retried() {
    let mut w = one_leader();
    let g = ticket(&mut w);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let (c, id, ..) = w.releases_seen()[0].clone();
    w.send(c, &format!("F {id} k\n"));
    assert_eq!(w.released.get(&op), Some(&Err(forbidden("k"))));
    assert!(w.conns[&c].open);
    // Not retried on the other connection, not after its 5 s either.
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.releases_seen().len(), 1);
}

#[test]
fn a_multi_key_release_with_one_key_answered_f_fails_forbidden_with_that_key() {
    let mut w = one_leader();
    let g = multi_ticket(&mut w, &["a", "b", "c"], 70);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 3);
    for (c, id, key, ..) in rel {
        let answer = if key == "b" { "F" } else { "R" };
        w.send(c, &format!("{answer} {id} {key}\n"));
    }
    assert_eq!(w.released.get(&op), Some(&Err(forbidden("b"))));
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.releases_seen().len(), 3, "no key is sent again");
}

#[test]
fn a_compensation_answered_f_is_done_not_retried() {
    let mut w = one_leader();
    // lease 3, budget 2: a grant read 1.5 s after the send is not enough.
    let op = w.acquire("k", 5.0, 3.0, 2.0);
    let (conn, id, _, owner) = w.last_acquire();
    w.run_for(ms(1500));
    w.send(conn, &format!("A {id} k {owner} 555 0\n"));
    assert_eq!(w.result(op), Some(Err(Failure::InsufficientTime)));
    let (rconn, rid, ..) = w.releases_seen()[0].clone();
    w.send(rconn, &format!("F {rid} k\n"));
    assert_eq!(w.lane_done, vec![(Purpose::Compensation, Outcome::Forbidden, 555)]);
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.releases_seen().len(), 1, "the lane gave the entry up at once");
    assert_eq!(w.lane_done.len(), 1);
}

#[test]
fn a_best_effort_release_answered_f_is_done_not_retried() {
    let mut w = one_leader();
    let g = ticket(&mut w);
    w.b.release(w.now, &g, Purpose::BestEffort).unwrap();
    w.step();
    let (c, id, ..) = w.releases_seen()[0].clone();
    w.send(c, &format!("F {id} k\n"));
    assert_eq!(w.lane_done, vec![(Purpose::BestEffort, Outcome::Forbidden, g.token.get())]);
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.releases_seen().len(), 1);
}

#[test]
fn the_query_of_an_indeterminate_acquire_answered_f_ends_its_resolution() {
    let mut w = one_leader();
    let (qconn, qid) = indeterminate_query(&mut w);
    w.send(qconn, &format!("F {qid} k\n"));
    assert_eq!(w.resolved, vec![("k".to_owned(), Outcome::Forbidden, None)]);
    assert!(w.conns[&qconn].open);
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.queries_seen().len(), 1, "not asked again");
    assert!(w.releases_seen().is_empty());
}

#[test]
fn an_f_naming_another_key_ends_the_session() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, id, ..) = w.last_acquire();
    w.send(conn, &format!("F {id} other\n"));
    assert!(!w.conns[&conn].open, "a mismatch is session-fatal");
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
}
