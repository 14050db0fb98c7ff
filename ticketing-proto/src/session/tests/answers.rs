//! Answers matched to their requests by id, op class and key; every mismatch is
//! fatal; the lane, cancellation, keepalive and answer deadlines; `Q`.

use super::*;

#[test]
fn out_of_order_answers_by_id_not_fifo() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.acquire(2, 10, "k", "o1", 5);
    h.acquire(2, 11, "k", "o2", 5);
    h.input(3, b"T 2 k\nA 1 k o1 99 0\n");
    assert_eq!(
        h.events,
        vec![
            SessionEvent::Answer { op: OpId(11), answer: Answer::Timeout },
            SessionEvent::Answer {
                op: OpId(10),
                answer: Answer::Granted {
                    key: k("k"),
                    owner: o("o1"),
                    token: Token::new(99).unwrap(),
                    waited_ms: 0,
                    t_send: h.at(2),
                    slot: None,
                    other_keys: vec![],
                }
            },
        ]
    );
    assert_eq!(h.s.pending_acquires(), 0);
}

#[test]
fn busy_and_release_answers() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.acquire(2, 1, "k", "o1", 5);
    let r = Request::Release { key: k("j"), owner: o("o2"), token: Token::new(4).unwrap() };
    h.s.send(h.at(2), OpId(2), r.clone()).unwrap();
    h.s.send(h.at(2), OpId(3), r).unwrap();
    h.drain();
    assert_eq!(h.take_wire(), "A 1 k o1 5 10\nR 2 j o2 4\nR 3 j o2 4\n");
    h.input(3, b"N 3 j\nB 1 k\nR 2 j\n");
    let answers = h.answers();
    assert_eq!(answers, vec![(3, Answer::NotHolder), (1, Answer::Busy), (2, Answer::Released)]);
}

#[test]
fn every_mismatch_is_session_fatal() {
    for bad in [
        &b"A 1 other o1 5 0\n"[..], // wrong key
        b"A 1 k o2 5 0\n",          // wrong owner
        b"T 1 other\n",             // wrong key on T
        b"B 1 other\n",             // wrong key on B
        b"R 1 k\n",                 // wrong op class
        b"N 1 k\n",                 // wrong op class
        b"P 1\n",                   // pong for an acquire
        b"T 9 k\n",                 // unknown id
        b"Z 1\n",                   // unknown frame
        b"T 1  k\n",                // malformed
        b"OK leader 0000000000000000000000000000000000000000000000000000000000000000\n",
        b"E bad_frame\n",
        b"E internal some text\n",
        b"E duplicate_id\n",
    ] {
        let c = fatal_after_acquire(bad);
        assert!(!c.reason.backoff_to_cap());
    }
    let c = fatal_after_acquire(&[b'x'; 600]);
    assert_eq!(c.reason, CloseReason::Protocol("oversized frame"));
}

#[test]
fn e_codes_and_moved() {
    assert_eq!(fatal_after_acquire(b"E no_leader\n").reason, CloseReason::NoLeader);
    assert_eq!(fatal_after_acquire(b"E auth_failed\n").reason, CloseReason::AuthFailed);
    assert_eq!(fatal_after_acquire(b"E not_active\n").reason, CloseReason::NotActive);
    assert_eq!(
        fatal_after_acquire(b"M 10.0.0.1:5225\n").reason,
        CloseReason::Moved(Addr::new("10.0.0.1:5225").unwrap())
    );
    assert_eq!(fatal_after_acquire(b"E shutting_down\n").reason, CloseReason::ServerError(ErrorCode::ShuttingDown));
}

#[test]
fn unsolicited_grant_goes_to_the_lane_then_closes() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.input(2, b"A 5 k owner 77 0\n");
    assert_eq!(
        h.events[0],
        SessionEvent::OrphanGrant {
            key: k("k"),
            owner: o("owner"),
            token: Token::new(77).unwrap(),
            other_keys: vec![]
        }
    );
    assert!(matches!(h.events[1], SessionEvent::Closed(Closed { reason: CloseReason::Protocol(_), .. })));
}

#[test]
fn leader_notification_keeps_the_connection() {
    let mut h = Harness::ready("follower", TOKEN);
    h.input(2, b"L 10.0.0.2:5225\n");
    assert_eq!(h.events[1], SessionEvent::Leader(Addr::new("10.0.0.2:5225").unwrap()));
    assert!(h.s.is_ready());
    assert!(h.closed().is_none());
}

#[test]
fn registered_before_written_and_unsent_on_close() {
    let mut h = Harness::ready("leader", TOKEN);
    let req = Request::Acquire { key: k("k"), owner: o("o"), wait: 1, lease: 1 };
    h.s.send(h.at(2), OpId(1), req.clone()).unwrap();
    assert_eq!(h.s.possibly_written(OpId(1)), Some(false));
    // closed before the bytes were handed out: unsent, may be routed elsewhere
    h.s.handle_closed();
    h.drain();
    let c = h.closed().unwrap();
    assert_eq!(c.unsent, vec![(OpId(1), req)]);
    assert!(c.possibly_sent.is_empty());
    assert!(h.wire.is_empty());
}

#[test]
fn cancel_unsent_and_possibly_sent() {
    let mut h = Harness::ready("leader", TOKEN);
    let req = Request::Acquire { key: k("k"), owner: o("o"), wait: 1, lease: 1 };
    h.s.send(h.at(2), OpId(1), req.clone()).unwrap();
    assert_eq!(h.s.cancel(OpId(1)), CancelOutcome::Unsent);
    h.drain();
    assert!(h.wire.is_empty());
    assert_eq!(h.s.pending_acquires(), 0);
    h.s.send(h.at(2), OpId(2), req).unwrap();
    h.drain();
    assert_eq!(h.s.cancel(OpId(2)), CancelOutcome::PossiblySent);
    assert_eq!(h.s.cancel(OpId(3)), CancelOutcome::NotFound);
}

#[test]
fn keepalive_ping_then_dead() {
    let mut h = Harness::ready("leader", TOKEN);
    h.take_wire();
    h.timeout(1000);
    assert!(h.wire.is_empty(), "1 s of silence counts from the OK at t=1ms");
    h.timeout(1001);
    assert_eq!(h.take_wire(), "P 1\n");
    h.input(1500, b"P 1\n");
    assert!(h.closed().is_none());
    h.timeout(2499);
    assert!(h.wire.is_empty());
    h.timeout(2500);
    assert_eq!(h.take_wire(), "P 2\n");
    // no ping twice, dead 4 s after the last arrival
    h.timeout(4000);
    assert!(h.wire.is_empty());
    h.timeout(5499);
    assert!(h.closed().is_none());
    h.timeout(5500);
    assert_eq!(h.closed().unwrap().reason, CloseReason::KeepaliveTimeout);
}

#[test]
fn answer_deadline_is_wait_plus_five() {
    let mut h = Harness::ready("leader", TOKEN);
    h.acquire(10, 1, "k", "o", 2);
    // keep the connection alive with pongs
    for t in (1000..7000).step_by(900) {
        h.timeout(t);
        let w = h.take_wire();
        if let Some(id) = w.strip_prefix("P ") {
            h.input(t, format!("P {id}").as_bytes());
        }
    }
    assert!(h.closed().is_none());
    h.timeout(7009);
    assert!(h.closed().is_none());
    h.timeout(7010);
    let c = h.closed().unwrap();
    assert_eq!(c.reason, CloseReason::AnswerTimeout);
    assert_eq!(c.possibly_sent.len(), 1);
}

#[test]
fn query_answers_h_or_n_and_counts_as_a_lane_request() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    let q = |key: &str, owner: &str| Request::Query { key: k(key), owner: o(owner) };
    h.s.send(h.at(2), OpId(1), q("k", "o1")).unwrap();
    h.s.send(h.at(2), OpId(2), q("j", "o2")).unwrap();
    assert_eq!(h.s.pending_releases(), 2);
    assert_eq!(h.s.pending_acquires(), 0);
    h.drain();
    assert_eq!(h.take_wire(), "Q 1 k o1\nQ 2 j o2\n");
    h.input(3, b"N 2 j\nH 1 k o1 1700000000000000 4200\n");
    let answers = h.answers();
    let held = Answer::Held { token: Token::new(1700000000000000).unwrap(), remaining_ms: 4200 };
    assert_eq!(answers, vec![(2, Answer::NotHolder), (1, held)]);
    assert_eq!(h.s.pending_releases(), 0);
}

#[test]
fn query_mismatches_are_session_fatal() {
    for bad in [
        &b"H 1 k o2 5 10\n"[..], // wrong owner
        b"H 1 j o1 5 10\n",      // wrong key
        b"H 9 k o1 5 10\n",      // unknown id
        b"R 1 k\n",              // R never answers a query
        b"T 1 k\n",              // wrong op class
        b"N 1 j\n",              // wrong key on N
    ] {
        let mut h = Harness::ready("leader", TOKEN);
        h.s.send(h.at(2), OpId(1), Request::Query { key: k("k"), owner: o("o1") }).unwrap();
        h.drain();
        h.input(3, bad);
        let c = h.closed().unwrap_or_else(|| panic!("{:?} did not close", String::from_utf8_lossy(bad)));
        assert_eq!(c.possibly_sent.len(), 1);
    }
    // H never answers an acquire or a release.
    let c = fatal_after_acquire(b"H 1 k o1 5 10\n");
    assert!(matches!(c.reason, CloseReason::Protocol(_)));
}
