//! Broker tests: the release lane, close, and resolving Indeterminate acquires (docs/client.md,
//! Release lane). The harness is `broker_support`.

mod broker_support;

use broker_support::*;
use std::time::{Duration, Instant};
use ticketing_proto::broker::{Broker, BrokerConfig, Failure, Grant, OpId};
use ticketing_proto::lane::{Outcome, Purpose};

// ---------------------------------------------------------------- docs/client.md, Release lane lane

#[test]
fn release_r_is_true_n_is_false() {
    let mut w = one_leader();
    let g = ticket(&mut w);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let (c, id, key, owner, token) = w.releases_seen()[0].clone();
    assert_eq!((key, owner, token), ("k".to_string(), g.owner.as_str().to_owned(), g.token.get()));
    w.send(c, &format!("R {id} k\n"));
    assert_eq!(w.released.get(&op), Some(&Ok(true)));

    let g = ticket(&mut w);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let (c, id, ..) = w.releases_seen()[1].clone();
    w.send(c, &format!("N {id} k\n"));
    assert_eq!(w.released.get(&op), Some(&Ok(false)));
}

#[test]
fn acquires_round_robin_over_both_connections_even_with_releases_in_between() {
    // docs/client.md, Connections: with one address, two connections, round-robin. The lane's
    // releases must not shift the acquires' rotation: acquire → release in a
    // loop (a `with lock:` loop) spreads the acquires over both connections.
    let mut w = one_leader();
    let mut acquire_conns = Vec::new();
    let mut release_conns = Vec::new();
    for _ in 0..4 {
        let g = ticket(&mut w);
        acquire_conns.push(w.last_acquire().0);
        let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
        w.step();
        let (c, id, ..) = w.releases_seen().last().cloned().unwrap();
        release_conns.push(c);
        w.send(c, &format!("R {id} k\n"));
        assert_eq!(w.released.get(&op), Some(&Ok(true)));
    }
    for conns in [&acquire_conns, &release_conns] {
        assert!(conns.windows(2).all(|p| p[0] != p[1]), "strict alternation: {conns:?}");
    }
}

#[test]
fn unanswered_release_is_unconfirmed_after_exactly_5s_and_retried_elsewhere() {
    let mut w = one_leader();
    let g = ticket(&mut w);
    let op = w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    let (c, ..) = w.releases_seen()[0].clone();
    w.run_for(ms(1000));
    // Its session dies: the release is retried on the other connection.
    w.hang_up(c);
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 2);
    assert_ne!(rel[1].0, c);
    assert_eq!(rel[1].4, g.token.get());
    w.run_for(ms(3999));
    assert_eq!(w.released.get(&op), None);
    w.run_for(ms(1));
    assert_eq!(w.released.get(&op), Some(&Err(Failure::ReleaseUnconfirmed)));
    // A late answer is harmless.
    let (c2, id2, ..) = rel[1].clone();
    w.send(c2, &format!("R {id2} k\n"));
    assert!(w.conns[&c2].open);
}

#[test]
fn full_lane_fails_an_explicit_release_at_once() {
    let mut config = BrokerConfig::new(vec![A.to_string()], TOKEN);
    config.lane_capacity = 2;
    let mut w = World::with_config(config, &[(A, serve("leader"))]);
    let gs: Vec<Grant> = (0..3).map(|_| ticket(&mut w)).collect();
    w.b.release(w.now, &gs[0], Purpose::Explicit).unwrap();
    w.b.release(w.now, &gs[1], Purpose::BestEffort).unwrap();
    assert_eq!(w.b.release(w.now, &gs[2], Purpose::Explicit), Err(Failure::ReleaseUnconfirmed));
}

#[test]
fn lane_has_reserved_slots_acquires_cannot_take() {
    let mut config = BrokerConfig::new(vec![A.to_string()], TOKEN);
    config.max_pending_per_conn = 4;
    config.lane_slots_per_conn = 2; // acquires: 1 per connection (+1 ping)
    let mut w = World::with_config(config, &[(A, serve("leader"))]);
    let g = ticket(&mut w);
    let ops: Vec<OpId> = (0..3).map(|_| w.acquire("q", 5.0, 5.0, 0.0)).collect();
    assert_eq!(w.acquires_seen(), 1 + 2, "one in flight per connection; the third waits");
    assert_eq!(w.result(ops[2]), None);
    w.b.release(w.now, &g, Purpose::Explicit).unwrap();
    w.step();
    assert_eq!(w.releases_seen().len(), 1, "the release still goes out");
}

// ---------------------------------------------------------------- close

#[test]
fn close_releases_live_tickets_then_closes() {
    let mut w = one_leader();
    let g = ticket(&mut w);
    let pending = w.acquire("other", 5.0, 10.0, 0.0);
    let (pconn, pid, _, powner) = w.last_acquire();
    w.b.close(w.now);
    w.step();
    assert_eq!(w.result(pending), Some(Err(Failure::Closed)));
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 1);
    assert_eq!(rel[0].4, g.token.get());
    // The pending acquire's grant arrives while closing: compensated.
    w.send(pconn, &format!("A {pid} other {powner} 4242 0\n"));
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 2);
    assert_eq!(rel[1].4, 4242);
    assert!(!w.closed);
    for (c, id, key, ..) in rel {
        w.send(c, &format!("R {id} {key}\n"));
    }
    assert!(w.closed);
    assert!(w.open_conns().is_empty());
    let op = w.acquire("k", 1.0, 1.0, 0.0);
    assert_eq!(w.result(op), Some(Err(Failure::Closed)));
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.open_conns().len(), 0, "no reconnect after close");
}

#[test]
fn close_gives_up_after_5s() {
    let mut w = one_leader();
    let _g = ticket(&mut w);
    w.b.close(w.now);
    w.run_for(ms(4999));
    assert!(!w.closed);
    w.run_for(ms(1));
    assert!(w.closed);
    assert_eq!(w.lane_done.len(), 1);
    assert_eq!(w.lane_done[0].1, Outcome::Unconfirmed);
}

#[test]
fn bad_config_is_refused() {
    let bad = |addrs: &[&str]| {
        Broker::new(
            Instant::now(),
            BrokerConfig::new(addrs.iter().map(|s| s.to_string()).collect(), ""),
            Box::new(TestRng(1)),
        )
        .is_err()
    };
    assert!(bad(&[]));
    assert!(bad(&["nohost"]));
    assert!(bad(&["host:0"]));
    assert!(bad(&["host:99999"]));
    assert!(bad(&["ho st:1"]));
    assert!(bad(&[":1"]));
    assert!(!bad(&["[::1]:5225", "localhost:1"]));
}

// ---------------------------------------------------------------- docs/client.md, Release lane: resolving Indeterminate

#[test]
fn indeterminate_acquire_is_queried_and_released_on_h() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, _, _, owner) = w.last_acquire();
    w.hang_up(conn);
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)), "the caller still gets Indeterminate");
    w.run_for(ms(10));
    let q = w.queries_seen();
    assert_eq!(q.len(), 1, "one Q for the Indeterminate acquire");
    let (qconn, qid, key, qowner) = q[0].clone();
    assert_ne!(qconn, conn);
    assert_eq!((key.as_str(), qowner.as_str()), ("k", owner.as_str()), "Q names the acquire's key and owner");
    assert!(w.releases_seen().is_empty(), "nothing is released before H");
    w.send(qconn, &format!("H {qid} k {owner} 4242 9000\n"));
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 1, "H → the exact R");
    let (rconn, rid, rkey, rowner, token) = rel[0].clone();
    assert_eq!((rkey.as_str(), rowner.as_str(), token), ("k", owner.as_str(), 4242));
    assert!(w.resolved.is_empty());
    w.send(rconn, &format!("R {rid} k\n"));
    assert_eq!(w.resolved, vec![("k".to_owned(), Outcome::Released, Some(4242))]);
    assert_eq!(w.acquires_seen(), 1, "the acquire itself is never resent");
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
}

#[test]
fn indeterminate_acquire_answered_n_is_done_without_a_release() {
    let mut w = one_leader();
    let (qconn, qid) = indeterminate_query(&mut w);
    w.send(qconn, &format!("N {qid} k\n"));
    assert_eq!(w.resolved, vec![("k".to_owned(), Outcome::NotHolder, None)]);
    w.run_for(Duration::from_secs(10));
    assert!(w.releases_seen().is_empty());
    assert_eq!(w.queries_seen().len(), 1, "N ends the entry");
}

#[test]
fn the_query_waits_for_a_new_leader_within_its_5s_window() {
    let mut w = World::new(&[A, B, C], &[(A, serve("leader")), (B, serve("follower")), (C, serve("follower"))]);
    let conn_of =
        |w: &World, addr: &str| w.conns.iter().find(|(_, c)| c.addr == addr && c.open).map(|(id, _)| *id).unwrap();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let (ca, _, _, owner) = w.last_acquire();
    assert_eq!(w.conns[&ca].addr, A);
    // kill -9 of the leader: its connection ends and it refuses reconnects.
    w.modes.insert(A.into(), Mode::Refuse);
    w.hang_up(ca);
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    w.run_for(ms(2400));
    assert!(w.queries_seen().is_empty(), "never on a known follower");
    // B is elected and says so.
    let (cb, cc) = (conn_of(&w, B), conn_of(&w, C));
    w.send(cb, &format!("L {B}\n"));
    w.send(cc, &format!("L {B}\n"));
    let q = w.queries_seen();
    assert_eq!(q.len(), 1);
    let (qconn, qid, ..) = q[0].clone();
    assert_eq!(qconn, cb, "the Q goes to the new leader");
    w.send(cb, &format!("H {qid} k {owner} 99 7000\n"));
    let (rconn, rid, _, _, token) = w.releases_seen()[0].clone();
    assert_eq!((rconn, token), (cb, 99));
    w.send(cb, &format!("R {rid} k\n"));
    assert_eq!(w.resolved, vec![("k".to_owned(), Outcome::Released, Some(99))]);
}

#[test]
fn no_leader_within_5s_leaves_the_resolution_unconfirmed() {
    let mut w = World::new(&[A, B], &[(A, serve("leader")), (B, serve("follower"))]);
    w.acquire("k", 5.0, 10.0, 0.0);
    let (ca, ..) = w.last_acquire();
    w.modes.insert(A.into(), Mode::Refuse);
    w.hang_up(ca);
    w.run_for(ms(4999));
    assert!(w.resolved.is_empty());
    w.run_for(ms(2));
    assert_eq!(w.resolved, vec![("k".to_owned(), Outcome::Unconfirmed, None)]);
    assert!(w.queries_seen().is_empty());
}

#[test]
fn a_query_lost_with_its_session_is_asked_again_elsewhere() {
    let mut w = one_leader();
    w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.hang_up(conn);
    w.run_for(ms(10));
    let (qconn, ..) = w.queries_seen()[0].clone();
    w.hang_up(qconn);
    w.run_for(ms(500));
    let q = w.queries_seen();
    assert_eq!(q.len(), 2, "asked again after its session died: {q:?}");
    assert_ne!(q[1].0, qconn);
    assert!(w.resolved.is_empty());
}

#[test]
fn a_cancelled_possibly_sent_acquire_is_resolved_too() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    w.b.cancel(w.now, op);
    w.step();
    w.run_for(ms(10));
    assert_eq!(w.result(op), None, "no event for a cancelled acquire");
    assert_eq!(w.queries_seen().len(), 1);
}
