//! Counted (`S`/`G`) and multi-key (`K`) grants: their frames, answers and mismatches.

use super::*;

#[test]
fn s_and_k_frames_on_the_wire_and_their_grants() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.shared(2, 1, "pool", "o1", 5);
    h.all(2, 2, &["b", "a", "c"], "o2");
    assert_eq!(h.take_wire(), "S 1 pool o1 5 10 5\nK 2 o2 5 10 b a c\n");
    assert_eq!(h.s.pending_acquires(), 2, "S and K count as acquires");
    // Out of order, by id; K is answered with its FIRST key.
    h.input(3, b"A 2 b o2 12 3\nG 1 pool o1 11 3 4\n");
    assert_eq!(
        h.answers(),
        vec![
            (2, granted("b", "o2", 12, h.at(2), None, &["a", "c"])),
            (1, granted("pool", "o1", 11, h.at(2), Some(4), &[]))
        ]
    );
    assert_eq!(h.s.pending_acquires(), 0);
    assert!(h.closed().is_none());
}

#[test]
fn t_and_b_answer_s_by_its_key_and_k_by_its_first_key() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.shared(2, 1, "pool", "o1", 65535);
    h.all(2, 2, &["x", "y"], "o2");
    h.shared(2, 3, "pool", "o3", 2);
    h.all(2, 4, &["p", "q"], "o4");
    h.input(3, b"T 1 pool\nB 2 x\nB 3 pool\nT 4 p\n");
    assert_eq!(h.answers(), vec![(1, Answer::Timeout), (2, Answer::Busy), (3, Answer::Busy), (4, Answer::Timeout)]);
    assert!(h.closed().is_none());
}

#[test]
fn every_mismatch_of_s_and_k_is_session_fatal() {
    let s = |h: &mut Harness| {
        h.shared(2, 1, "pool", "o1", 3);
    };
    for bad in [
        &b"A 1 pool o1 5 0\n"[..], // A answers no S (op class)
        b"G 1 other o1 5 0 0\n",   // wrong key
        b"G 1 pool o2 5 0 0\n",    // wrong owner
        b"G 1 pool o1 5 0 3\n",    // slot not below n
        b"T 1 other\n",            // wrong key on T
        b"R 1 pool\n",             // wrong op class
        b"H 1 pool o1 5 100\n",    // wrong op class
    ] {
        let (c, events) = fatal_after(s, bad);
        assert!(matches!(c.reason, CloseReason::Protocol(_)), "{c:?}");
        assert!(!events.iter().any(|e| matches!(e, SessionEvent::Answer { .. })), "{events:?}");
    }
    let kk = |h: &mut Harness| {
        h.all(2, 1, &["a", "b"], "o1");
    };
    for bad in [
        &b"A 1 b o1 5 0\n"[..], // not the first key
        b"A 1 a o2 5 0\n",      // wrong owner
        b"G 1 a o1 5 0 0\n",    // G answers no K
        b"T 1 b\n",             // T with a later key
        b"B 1 b\n",             // B with a later key
        b"N 1 a\n",             // wrong op class
    ] {
        let (c, events) = fatal_after(kk, bad);
        assert!(matches!(c.reason, CloseReason::Protocol(_)), "{c:?}");
        assert!(!events.iter().any(|e| matches!(e, SessionEvent::Answer { .. })), "{events:?}");
    }
    // A G for an exclusive acquire is fatal too.
    let a = |h: &mut Harness| {
        h.acquire(2, 1, "k", "o1", 5);
    };
    let (c, _) = fatal_after(a, b"G 1 k o1 5 0 0\n");
    assert_eq!(c.reason, CloseReason::Protocol("grant does not match its request"));
}

#[test]
fn an_unmatched_g_goes_to_the_lane_then_closes() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.input(2, b"G 5 pool owner 77 0 2\n");
    assert_eq!(
        h.events[0],
        SessionEvent::OrphanGrant {
            key: k("pool"),
            owner: o("owner"),
            token: Token::new(77).unwrap(),
            other_keys: vec![]
        }
    );
    assert_eq!(h.closed().unwrap().reason, CloseReason::Protocol("counted grant with no pending acquire"));
}

#[test]
fn an_orphan_a_for_an_unsent_k_names_every_key_else_only_the_first() {
    // Registered but its bytes never handed out: the session knows the K, so
    // the grant's other keys (same owner, same token) go to the lane too.
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    let keys = KeySet::new(vec![k("a"), k("b"), k("c")]).unwrap();
    let id = h.s.send(h.at(2), OpId(1), Request::AcquireAll { keys, owner: o("o1"), wait: 5, lease: 10 }).unwrap();
    h.input(3, format!("A {id} a o1 90 0\n").as_bytes());
    assert_eq!(
        h.events[0],
        SessionEvent::OrphanGrant {
            key: k("a"),
            owner: o("o1"),
            token: Token::new(90).unwrap(),
            other_keys: vec![k("b"), k("c")]
        }
    );
    let c = h.closed().unwrap();
    assert_eq!((c.unsent.len(), c.possibly_sent.len()), (1, 0), "the K itself was never written");
    // An A with an unknown id names only its key.
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.all(2, 1, &["a", "b"], "o1");
    h.input(3, b"A 9 a o1 90 0\n");
    assert!(matches!(&h.events[0], SessionEvent::OrphanGrant { other_keys, .. } if other_keys.is_empty()));
    assert_eq!(h.closed().unwrap().possibly_sent.len(), 1, "the written K is possibly sent");
}

#[test]
fn s_and_k_have_the_answer_deadline_and_end_possibly_sent() {
    let mut h = Harness::ready("leader", TOKEN);
    h.shared(2, 1, "pool", "o1", 2); // wait 5 → answered by 2 + 5000 + 5000 ms
    h.take_wire();
    for t in (1000..10_000).step_by(900) {
        h.timeout(t);
        let w = h.take_wire();
        if let Some(id) = w.strip_prefix("P ") {
            h.input(t, format!("P {id}").as_bytes());
        }
    }
    h.timeout(10_001);
    assert!(h.closed().is_none());
    h.timeout(10_002);
    let c = h.closed().unwrap();
    assert_eq!(c.reason, CloseReason::AnswerTimeout);
    assert!(matches!(&c.possibly_sent[..], [(OpId(1), Request::AcquireShared { n: 2, .. })]));
    let mut h = Harness::ready("leader", TOKEN);
    h.all(2, 1, &["a", "b"], "o1");
    h.s.handle_closed();
    h.drain();
    let c = h.closed().unwrap();
    let Some((owner, keys)) = c.possibly_sent[0].1.acquire_keys() else { panic!("{c:?}") };
    assert_eq!((owner.as_str(), keys), ("o1", vec![k("a"), k("b")]));
}
