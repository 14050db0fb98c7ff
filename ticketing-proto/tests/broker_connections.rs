//! Broker tests: connecting, the wait budget, routing and response matching, auth, backoff and
//! keepalive. The harness is `broker_support`.

mod broker_support;

use broker_support::*;
use std::time::Duration;
use ticketing_proto::broker::{ConnId, Failure};
use ticketing_proto::lane::{Outcome, Purpose};
use ticketing_proto::session::CloseReason;

// ---------------------------------------------------------------- the wait budget is a hard bound

#[test]
fn hung_first_attempt_and_wait_one_is_unavailable_at_one_second() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    let op = w.acquire("k", 1.0, 10.0, 0.0);
    w.run_for(ms(999));
    assert_eq!(w.result(op), None);
    w.run_for(ms(1));
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)), "the caller's wait bounds the connection wait too");
    assert!(!w.b.first_attempts_settled(), "the handshakes are still running");
    // The server greets later: nothing is sent for the failed acquire.
    w.greet(A, "leader");
    assert!(w.b.is_ready());
    assert_eq!(w.acquires_seen(), 0);
}

#[test]
fn wait_zero_with_nothing_ready_is_unavailable_at_once_and_sends_nothing() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    let op = w.acquire("k", 0.0, 10.0, 0.0);
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)));
    assert_eq!(w.elapsed(), Duration::ZERO);
    w.greet(A, "leader");
    assert_eq!(w.acquires_seen(), 0);
    // Once ready, wait 0 is one immediate attempt on the wire.
    let op = w.acquire("k", 0.0, 10.0, 0.0);
    assert_eq!(w.acquires_seen(), 1);
    assert_eq!(w.acquire_wait_sent(), 0);
    assert_eq!(w.result(op), None, "sent, waiting for its answer");
}

#[test]
fn refused_first_attempts_settle_at_once_and_the_budget_still_rules() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    assert!(!w.usable());
    let op = w.acquire("k", 2.0, 10.0, 0.0);
    let conns = w.open_conns();
    w.hang_up(conns[0]);
    assert!(!w.usable(), "the other first attempt is still in progress");
    w.hang_up(conns[1]);
    assert!(w.b.first_attempts_settled() && w.usable(), "a dead address settles at once");
    assert_eq!(w.result(op), None, "2 s budget: reconnects may still succeed");
    w.run_for(ms(2000));
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)));
    assert_eq!(w.acquires_seen(), 0);
}

#[test]
fn connect_is_usable_at_the_first_ready_connection_while_the_other_hangs() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    w.run_for(ms(200));
    assert!(!w.usable());
    let conns = w.open_conns();
    assert_eq!(conns.len(), 2, "two connections to a single address");
    w.greet_conns(A, "leader", &conns[..1]);
    assert!(w.b.is_ready() && w.usable(), "one ready connection is enough");
    assert!(!w.b.first_attempts_settled(), "the other handshake still hangs");
    // The request goes to the ready connection at once.
    let op = w.acquire("k", 0.0, 10.0, 0.0);
    let (conn, id, _, owner) = w.last_acquire();
    assert_eq!(conn, conns[0]);
    w.send(conn, &format!("A {id} k {owner} 7 0\n"));
    assert_eq!(w.result(op).unwrap().unwrap().unwrap().token.get(), 7);
    // The hung slot settles at the 5 s handshake limit.
    w.run_for(ms(4800));
    assert!(w.b.first_attempts_settled());
}

#[test]
fn connect_is_usable_when_every_first_attempt_hangs_up_to_the_handshake_limit() {
    let mut w = World::new(&[A, B], &[(A, Mode::Silent), (B, Mode::Silent)]);
    w.run_for(ms(4999));
    assert!(!w.usable());
    w.run_for(ms(1));
    assert!(w.usable() && !w.b.is_ready(), "settled (failed), not ready");
}

#[test]
fn follower_only_is_usable_for_connect_but_routes_nothing() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    w.greet(A, "follower");
    assert!(w.usable() && !w.b.is_ready());
    let op = w.acquire("k", 0.0, 10.0, 0.0);
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)), "never sent to a known follower");
    assert_eq!(w.acquires_seen(), 0);
}

#[test]
fn the_seed_pattern_connect_wait_ready_acquire() {
    // connect(addr) resolves at the first usable connection; wait_ready(5) is
    // then true; acquire(key, 5, 30, 2) goes out with the full wait.
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    w.run_for(ms(300));
    w.greet(A, "leader");
    assert!(w.usable() && w.b.is_ready());
    let op = w.acquire("key", 5.0, 30.0, 2.0);
    assert_eq!(w.acquire_wait_sent(), 5);
    let (conn, id, _, owner) = w.last_acquire();
    w.send(conn, &format!("A {id} key {owner} 99 0\n"));
    assert_eq!(w.result(op).unwrap().unwrap().unwrap().token.get(), 99);
}

#[test]
fn acquire_during_a_slow_handshake_is_sent_with_what_is_left_of_its_budget() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    w.run_for(ms(1000));
    w.greet(A, "leader");
    assert_eq!(w.acquire_wait_sent(), 4, "5 s budget, 1 s used");
    assert_eq!(w.result(op), None);
}

// ---------------------------------------------------------------- docs/client.md, Response matching rows

#[test]
fn unsolicited_grant_is_released_with_its_exact_token_within_5s() {
    let mut w = one_leader();
    let conn = w.open_conns()[0];
    w.send(conn, "A 77 other-key abcdef 123456 0\n");
    assert!(!w.conns[&conn].open, "session-fatal");
    w.run_for(ms(200));
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 1);
    let (rconn, rid, key, owner, token) = rel[0].clone();
    assert_ne!(rconn, conn);
    assert_eq!((key.as_str(), owner.as_str(), token), ("other-key", "abcdef", 123456));
    w.send(rconn, &format!("N {rid} other-key\n"));
    assert_eq!(w.lane_done, vec![(Purpose::Compensation, Outcome::NotHolder, 123456)]);
}

#[test]
fn moved_to_an_unlisted_address_is_ignored_and_closes() {
    let mut w = World::new(&[A, B], &[(A, serve("leader")), (B, serve("leader"))]);
    assert_eq!(w.b.leader_hint(), Some(B), "OK leader sets the hint (last one ready)");
    let conn_a = w.conns.iter().find(|(_, c)| c.addr == A).map(|(id, _)| *id).unwrap();
    w.send(conn_a, "M 10.9.9.9:5225\n");
    assert!(!w.conns[&conn_a].open);
    assert_eq!(w.b.leader_hint(), Some(B), "unlisted: ignored");
    let conn_b = w.conns.iter().find(|(_, c)| c.addr == B && c.open).map(|(id, _)| *id).unwrap();
    w.send(conn_b, &format!("M {A}\n"));
    assert_eq!(w.b.leader_hint(), Some(A), "listed: kept as the hint");
    assert!(!w.conns[&conn_b].open);
}

#[test]
fn l_keeps_the_connection_and_sets_roles() {
    let mut w = World::new(&[A, B, C], &[(A, serve("leader")), (B, serve("leader")), (C, serve("leader"))]);
    let conn_of =
        |w: &World, addr: &str| w.conns.iter().find(|(_, c)| c.addr == addr && c.open).map(|(id, _)| *id).unwrap();
    let (ca, cb, cc) = (conn_of(&w, A), conn_of(&w, B), conn_of(&w, C));
    // B says the leader is A: B becomes a follower; A says it is itself the leader.
    w.send(cb, &format!("L {A}\n"));
    w.send(ca, &format!("L {A}\n"));
    // C names an unlisted address: ignored completely.
    w.send(cc, "L 10.1.1.1:1\n");
    assert!(w.conns[&ca].open && w.conns[&cb].open && w.conns[&cc].open, "L keeps connections");
    assert_eq!(w.b.leader_hint(), Some(A));
    for _ in 0..6 {
        w.acquire("k", 5.0, 5.0, 0.0);
    }
    let used: Vec<ConnId> = w.all_requests().into_iter().map(|(c, _)| c).collect();
    assert!(used.iter().all(|c| *c == ca), "the hinted leader connection gets the requests: {used:?}");
    // A goes away: requests go round-robin to C (leader by OK), never to follower B.
    w.modes.insert(A.into(), Mode::Refuse);
    w.hang_up(ca);
    for _ in 0..4 {
        w.acquire("k", 5.0, 5.0, 0.0);
    }
    let used: Vec<ConnId> = w.all_requests().into_iter().map(|(c, _)| c).collect();
    assert!(!used.contains(&cb), "never a known follower");
    assert!(used.contains(&cc));
}

#[test]
fn only_followers_means_no_route_and_unavailable() {
    let mut w = World::new(&[A, B], &[(A, serve("follower")), (B, serve("follower"))]);
    assert!(!w.b.is_ready());
    let op = w.acquire("k", 1.0, 5.0, 0.0);
    w.run_for(ms(1000));
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)));
    assert_eq!(w.acquires_seen(), 0);
}

#[test]
fn no_leader_resets_the_hint() {
    let mut w = one_leader();
    assert_eq!(w.b.leader_hint(), Some(A));
    let conn = w.open_conns()[0];
    w.send(conn, "E no_leader\n");
    assert_eq!(w.b.leader_hint(), None);
    assert_eq!(w.ended.last(), Some(&CloseReason::NoLeader));
}

// ---------------------------------------------------------------- auth

#[test]
fn wrong_smac_is_auth_failed_and_no_request_is_sent() {
    let mut w = World::new(&[A], &[(A, Mode::Serve { role: "leader", token: b"not-it".to_vec(), leader: None })]);
    assert!(!w.b.is_ready());
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    assert_eq!(w.result(op), None, "waits for the next attempt within its budget");
    w.run_for(Duration::from_secs(5));
    assert_eq!(w.result(op), Some(Err(Failure::AuthFailed)));
    assert!(w.all_requests().is_empty(), "no request ever sent to an unproven server");
    assert_eq!(w.ended.iter().filter(|r| **r == CloseReason::AuthFailed).count(), w.connects.len());
}

#[test]
fn auth_failure_on_every_connection_fails_waiting_acquires_at_once() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    // Both connections now get a server that cannot prove the token.
    w.modes.insert(A.into(), Mode::Serve { role: "leader", token: b"bad".to_vec(), leader: None });
    for c in w.open_conns() {
        let s = w.conns[&c].snonce;
        w.send(c, &format!("TICKETING 1 {}\n", s.to_hex_string()));
    }
    assert_eq!(w.result(op), Some(Err(Failure::AuthFailed)));
    assert_eq!(w.elapsed(), Duration::ZERO);
}

// ---------------------------------------------------------------- backoff, keepalive

#[test]
fn backoff_schedule_doubles_to_the_cap() {
    let mut w = World::new(&[A, B], &[(A, Mode::Refuse), (B, Mode::Refuse)]);
    w.run_for(Duration::from_secs(13));
    assert_eq!(retry_gaps(&w, A), vec![100, 200, 400, 800, 1600, 3200, 3200, 3200]);
    assert_eq!(retry_gaps(&w, B), vec![100, 200, 400, 800, 1600, 3200, 3200, 3200]);
}

#[test]
fn backoff_resets_after_a_successful_handshake() {
    let mut w = World::new(&[A, B], &[(A, Mode::Refuse), (B, serve("leader"))]);
    w.run_for(ms(1600)); // A: attempts at 0, 100, 300, 700, 1500
    w.modes.insert(A.into(), serve("leader"));
    w.run_for(ms(1600)); // attempt at 3100 succeeds
    let conn = w.conns.iter().find(|(_, c)| c.addr == A && c.open).map(|(id, _)| *id).unwrap();
    w.modes.insert(A.into(), Mode::Refuse);
    w.hang_up(conn);
    let hung_up = w.elapsed();
    w.run_for(ms(1000));
    // connect-to-connect gaps: the good session lived 100 ms, then 0.1 s, 0.2 s, 0.4 s again
    assert_eq!(retry_gaps(&w, A), vec![100, 200, 400, 800, 1600, 200, 200, 400]);
    let first_retry = w.connects.iter().filter(|(_, a)| a == A).map(|(t, _)| *t).find(|t| *t > hung_up);
    assert_eq!(first_retry, Some(hung_up + ms(100)), "reset to 0.1 s after a successful handshake");
}

#[test]
fn auth_failed_and_not_active_jump_to_the_cap() {
    let mut w = World::new(&[A, B], &[(A, serve("leader")), (B, serve("leader"))]);
    let conn_a = w.open_conns()[0];
    w.modes.insert(A.into(), Mode::Refuse);
    w.send(conn_a, "E not_active\n");
    w.run_for(ms(3300));
    assert_eq!(retry_gaps(&w, A), vec![3200]);
    let conn_b = w.open_conns()[0];
    w.modes.insert(B.into(), Mode::Refuse);
    let before = w.elapsed();
    w.send(conn_b, "E auth_failed\n");
    w.run_for(ms(3300));
    let b_times: Vec<Duration> = w.connects.iter().filter(|(_, a)| a == B).map(|(t, _)| *t).collect();
    assert_eq!(b_times.last().copied(), Some(before + ms(3200)));
}

#[test]
fn keepalive_pings_after_1s_and_declares_death_after_3s_more() {
    let mut w = one_leader();
    let op = w.acquire("k", 30.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.run_for(ms(999));
    assert_eq!(w.conns[&conn].pings, 0);
    w.run_for(ms(1));
    assert_eq!(w.conns[&conn].pings, 1, "P after 1 s of silence");
    w.run_for(ms(10_000));
    assert_eq!(w.result(op), None, "answered pings keep the session alive");
    assert!(w.conns[&conn].open);
    w.conns.get_mut(&conn).unwrap().answer_pings = false;
    let silent_from = w.now;
    w.run_for(ms(5000));
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    assert_eq!(w.ended.last(), Some(&CloseReason::KeepaliveTimeout));
    let _ = silent_from;
}

#[test]
fn handshake_gives_up_after_5s() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    w.run_for(ms(4999));
    assert!(w.ended.is_empty());
    w.run_for(ms(1));
    assert_eq!(w.ended, vec![CloseReason::HandshakeTimeout, CloseReason::HandshakeTimeout]);
}
