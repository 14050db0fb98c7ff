//! Broker tests: counted (`S`/`G`) and multi-key (`K`) grants. The harness is `broker_support`.

mod broker_support;

use broker_support::*;
use ticketing_proto::broker::{BrokerConfig, Failure};
use ticketing_proto::frame::ClientFrame;
use ticketing_proto::lane::{Outcome, Purpose};
use ticketing_proto::session::CloseReason;

// ---------------------------------------------------------------- counted (S/G) and multi-key (K) grants

#[test]
fn a_counted_grant_is_a_ticket_with_its_slot_and_the_conservative_deadline() {
    let mut w = one_leader();
    let op = w.acquire_shared("pool", 5, 5.0, 10.0, 2.0);
    let (conn, id, key, owner, n) = w.last_shared();
    assert_eq!((key.as_str(), n), ("pool", 5));
    let t_send = w.now;
    w.run_for(ms(300));
    w.send(conn, &format!("G {id} pool {owner} 42 100 3\n"));
    let g = w.result(op).unwrap().unwrap().unwrap();
    assert_eq!((g.token.get(), g.slot, g.key.as_str()), (42, Some(3), "pool"));
    assert_eq!(g.keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["pool"]);
    assert_eq!(g.deadline, t_send + ms(100) + ms(9990));
    assert_eq!(w.b.live_tickets(), 1);
    assert!(String::from_utf8_lossy(&w.wire).contains(&format!("S {id} pool {owner} 5 10 5\n")));
    // An exclusive grant has no slot.
    let g = ticket(&mut w);
    assert_eq!((g.slot, g.keys.len()), (None, 1));
}

#[test]
fn a_multi_key_grant_is_one_ticket_with_every_key_and_one_token() {
    let mut w = one_leader();
    let op = w.acquire_all(&["b", "a", "c"], 5.0, 10.0, 0.0);
    let (conn, id, keys, owner) = w.last_all();
    assert_eq!(keys, ["b", "a", "c"], "sent in the order given");
    w.send(conn, &format!("A {id} b {owner} 77 0\n"));
    let g = w.result(op).unwrap().unwrap().unwrap();
    assert_eq!((g.key.as_str(), g.token.get(), g.slot), ("b", 77, None));
    assert_eq!(g.keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["b", "a", "c"]);
    assert_eq!(w.b.live_tickets(), 1);
}

#[test]
fn t_and_b_end_counted_and_multi_key_acquires_like_exclusive_ones() {
    let mut w = one_leader();
    let s = w.acquire_shared("pool", 2, 5.0, 10.0, 0.0);
    let (sc, sid, ..) = w.last_shared();
    let k = w.acquire_all(&["x", "y"], 5.0, 10.0, 0.0);
    let (kc, kid, ..) = w.last_all();
    w.send(sc, &format!("T {sid} pool\n"));
    w.send(kc, &format!("B {kid} x\n"));
    assert_eq!(w.result(s), Some(Ok(None)));
    assert_eq!(w.result(k), Some(Err(Failure::Busy)));
    assert!(w.ended.is_empty(), "no session ended");
}

#[test]
fn a_k_answered_with_another_key_is_fatal_and_every_key_is_resolved() {
    let mut w = one_leader();
    let op = w.acquire_all(&["a", "b"], 5.0, 10.0, 0.0);
    let (conn, id, _, owner) = w.last_all();
    w.send(conn, &format!("A {id} b {owner} 5 0\n"));
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    assert_eq!(w.ended, vec![CloseReason::Protocol("grant does not match its request")]);
    w.run_for(ms(10));
    let mut q: Vec<(String, String)> = w.queries_seen().into_iter().map(|(_, _, k, o)| (k, o)).collect();
    q.sort();
    assert_eq!(q, [("a".to_owned(), owner.clone()), ("b".to_owned(), owner)], "one Q per key");
}

#[test]
fn insufficient_time_on_a_multi_key_grant_releases_every_key() {
    let mut w = one_leader();
    let op = w.acquire_all(&["a", "b", "c"], 5.0, 3.0, 2.0);
    let (conn, id, _, owner) = w.last_all();
    w.run_for(ms(1500));
    w.send(conn, &format!("A {id} a {owner} 555 0\n"));
    assert_eq!(w.result(op), Some(Err(Failure::InsufficientTime)));
    let want: Vec<_> = ["a", "b", "c"].iter().map(|k| (k.to_string(), owner.clone(), 555)).collect();
    assert_eq!(w.released_keys(), want, "every key, with the one token");
    w.answer_releases(0, &[]);
    assert_eq!(w.lane_done.len(), 3);
    assert!(w.lane_done.iter().all(|d| *d == (Purpose::Compensation, Outcome::Released, 555)));
    assert_eq!(w.b.live_tickets(), 0);
}

#[test]
fn insufficient_time_on_a_counted_grant_releases_its_key() {
    let mut w = one_leader();
    let op = w.acquire_shared("pool", 3, 5.0, 3.0, 2.0);
    let (conn, id, _, owner, _) = w.last_shared();
    w.run_for(ms(1500));
    w.send(conn, &format!("G {id} pool {owner} 556 0 1\n"));
    assert_eq!(w.result(op), Some(Err(Failure::InsufficientTime)));
    assert_eq!(w.released_keys(), [("pool".to_owned(), owner, 556)]);
}

#[test]
fn an_indeterminate_multi_key_acquire_is_queried_and_released_key_by_key() {
    let mut w = one_leader();
    let op = w.acquire_all(&["a", "b", "c"], 5.0, 10.0, 0.0);
    let (conn, _, _, owner) = w.last_all();
    w.hang_up(conn);
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    w.run_for(ms(10));
    let q = w.queries_seen();
    assert_eq!(q.len(), 3, "one Q per key: {q:?}");
    assert!(q.iter().all(|(c, _, _, o)| *c != conn && *o == owner));
    let mut keys: Vec<&str> = q.iter().map(|(_, _, k, _)| k.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b", "c"]);
    // a and b are held (the one token), c is not (expired already, say).
    for (qc, qid, key, _) in q {
        let line = if key == "c" { format!("N {qid} c\n") } else { format!("H {qid} {key} {owner} 900 8000\n") };
        w.send(qc, &line);
    }
    let want: Vec<_> = ["a", "b"].iter().map(|k| (k.to_string(), owner.clone(), 900)).collect();
    assert_eq!(w.released_keys(), want, "H → the exact R of that key");
    w.answer_releases(0, &[]);
    let mut resolved = w.resolved.clone();
    resolved.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        resolved,
        vec![
            ("a".to_owned(), Outcome::Released, Some(900)),
            ("b".to_owned(), Outcome::Released, Some(900)),
            ("c".to_owned(), Outcome::NotHolder, None),
        ]
    );
    assert_eq!(w.log.iter().filter(|(_, f)| matches!(f, ClientFrame::AcquireAll { .. })).count(), 1, "never resent");
}

#[test]
fn an_indeterminate_counted_acquire_is_queried_once() {
    let mut w = one_leader();
    let op = w.acquire_shared("pool", 4, 5.0, 10.0, 0.0);
    let (conn, _, _, owner, _) = w.last_shared();
    w.hang_up(conn);
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    w.run_for(ms(10));
    let q = w.queries_seen();
    assert_eq!(q.len(), 1);
    let (qc, qid, key, qowner) = q[0].clone();
    assert_eq!((key.as_str(), qowner.as_str()), ("pool", owner.as_str()));
    w.send(qc, &format!("H {qid} pool {owner} 31 8000\n"));
    assert_eq!(w.released_keys(), [("pool".to_owned(), owner, 31)]);
}

#[test]
fn a_cancelled_possibly_sent_multi_key_acquire_is_resolved_for_every_key() {
    let mut w = one_leader();
    let op = w.acquire_all(&["a", "b"], 5.0, 10.0, 0.0);
    w.b.cancel(w.now, op);
    w.step();
    w.run_for(ms(10));
    assert_eq!(w.result(op), None, "no event for a cancelled acquire");
    assert_eq!(w.queries_seen().len(), 2);
}

#[test]
fn releasing_a_multi_key_ticket_is_one_r_per_key_true_iff_all_r() {
    let mut w = one_leader();
    let g = multi_ticket(&mut w, &["a", "b", "c"], 70);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let owner = g.owner.as_str().to_owned();
    let want: Vec<_> = ["a", "b", "c"].iter().map(|k| (k.to_string(), owner.clone(), 70)).collect();
    assert_eq!(w.released_keys(), want);
    assert_eq!(w.b.live_tickets(), 0);
    // Two of three answered: no result yet.
    let rel = w.releases_seen();
    for (c, id, key, ..) in &rel[..2] {
        w.send(*c, &format!("R {id} {key}\n"));
    }
    assert_eq!(w.released.get(&op), None, "one result, once every key has answered");
    let (c, id, key, ..) = rel[2].clone();
    w.send(c, &format!("R {id} {key}\n"));
    assert_eq!(w.released.get(&op), Some(&Ok(true)));
    assert_eq!(w.released.len(), 1, "exactly one result for the ticket");

    // One N → false.
    let g = multi_ticket(&mut w, &["a", "b"], 71);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    w.answer_releases(3, &["b"]);
    assert_eq!(w.released.get(&op), Some(&Ok(false)));
}

#[test]
fn a_multi_key_release_with_an_unanswered_key_is_unconfirmed_after_5s() {
    let mut w = one_leader();
    let g = multi_ticket(&mut w, &["a", "b"], 80);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let rel = w.releases_seen();
    let (c, id, key, ..) = rel.iter().find(|r| r.2 == "a").cloned().unwrap();
    w.send(c, &format!("R {id} {key}\n"));
    w.run_for(ms(4999));
    assert_eq!(w.released.get(&op), None);
    w.run_for(ms(1));
    assert_eq!(w.released.get(&op), Some(&Err(Failure::ReleaseUnconfirmed)));
    // An N with an unanswered key is still false: the ticket was not fully current.
    let g = multi_ticket(&mut w, &["a", "b"], 81);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let (c, id, key, ..) = w.releases_seen().into_iter().skip(2).find(|r| r.2 == "b").unwrap();
    w.send(c, &format!("N {id} {key}\n"));
    w.run_for(ms(5000));
    assert_eq!(w.released.get(&op), Some(&Ok(false)));
}

#[test]
fn a_lane_without_room_for_every_key_fails_a_multi_key_release_at_once() {
    let mut config = BrokerConfig::new(vec![A.to_string()], TOKEN);
    config.lane_capacity = 2;
    let mut w = World::with_config(config, &[(A, serve("leader"))]);
    let one = ticket(&mut w);
    let g = multi_ticket(&mut w, &["a", "b"], 90);
    w.b.release(w.now, &one, Purpose::BestEffort).unwrap();
    w.step();
    let before = w.releases_seen().len();
    assert_eq!(w.b.release(w.now, &g, Purpose::Explicit), Err(Failure::ReleaseUnconfirmed));
    w.step();
    assert_eq!(w.releases_seen().len(), before, "nothing enqueued");
}

#[test]
fn a_compensated_or_closed_multi_key_ticket_releases_every_key() {
    let mut w = one_leader();
    let g = multi_ticket(&mut w, &["a", "b"], 60);
    w.b.compensate(w.now, &g);
    w.step();
    let owner = g.owner.as_str().to_owned();
    assert_eq!(w.released_keys(), [("a".to_owned(), owner.clone(), 60), ("b".to_owned(), owner, 60)]);

    let mut w = one_leader();
    let g = multi_ticket(&mut w, &["a", "b"], 61);
    // A K still pending when the broker closes, granted afterwards: every key is compensated.
    let pending = w.acquire_all(&["x", "y", "z"], 5.0, 10.0, 0.0);
    let (pc, pid, _, powner) = w.last_all();
    w.b.close(w.now);
    w.step();
    assert_eq!(w.result(pending), Some(Err(Failure::Closed)));
    let o = g.owner.as_str().to_owned();
    assert_eq!(w.released_keys(), [("a".to_owned(), o.clone(), 61), ("b".to_owned(), o, 61)], "best-effort, each key");
    w.send(pc, &format!("A {pid} x {powner} 62 0\n"));
    let late: Vec<_> = w.released_keys().into_iter().filter(|r| r.2 == 62).collect();
    let want: Vec<_> = ["x", "y", "z"].iter().map(|k| (k.to_string(), powner.clone(), 62)).collect();
    assert_eq!(late, want);
    w.answer_releases(0, &[]);
    assert!(w.closed);
}
