//! The answer `F`: final for any request, matched by its key (for a `K`, any
//! of its keys); the session goes on.

use super::*;

#[test]
fn f_answers_any_request_by_its_key_and_k_by_any_of_its_keys() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.shared(2, 1, "pool", "o1", 3);
    h.all(2, 2, &["x", "y", "z"], "o2");
    h.all(2, 3, &["p", "q"], "o3");
    // A K is answered F with the first key its principal may not use (not
    // necessarily its first key); the connection stays.
    h.input(3, b"F 1 pool\nF 2 y\n");
    assert_eq!(h.answers(), vec![(1, forbidden("pool")), (2, forbidden("y"))]);
    assert!(h.closed().is_none());
    // A key the request does not name is a mismatch: fatal.
    h.input(4, b"F 3 other\n");
    assert!(h.closed().is_some());
}

#[test]
fn f_answers_a_release_and_a_query_by_their_key_and_the_session_goes_on() {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.acquire(2, 1, "payments/1", "o1", 5);
    let release = Request::Release { key: k("payments/2"), owner: o("o2"), token: Token::new(4).unwrap() };
    h.s.send(h.at(2), OpId(2), release).unwrap();
    h.s.send(h.at(2), OpId(3), Request::Query { key: k("payments/3"), owner: o("o3") }).unwrap();
    h.drain();
    assert_eq!(h.take_wire(), "A 1 payments/1 o1 5 10\nR 2 payments/2 o2 4\nQ 3 payments/3 o3\n");
    // Out of order, by id; each F is final for its request.
    h.input(3, b"F 3 payments/3\nF 1 payments/1\nF 2 payments/2\n");
    assert_eq!(
        h.answers(),
        vec![(3, forbidden("payments/3")), (1, forbidden("payments/1")), (2, forbidden("payments/2"))]
    );
    assert_eq!(h.s.pending_acquires(), 0, "F ends the acquire");
    assert!(h.closed().is_none(), "the connection stays");
    // The same session serves the next request.
    h.events.clear();
    h.acquire(4, 4, "orders/1", "o4", 5);
    h.input(5, b"A 4 orders/1 o4 77 0\n");
    assert!(matches!(&h.answers()[..], [(4, Answer::Granted { .. })]));
    // A second F for an answered id has no pending entry: fatal.
    h.input(6, b"F 1 payments/1\n");
    assert_eq!(h.closed().unwrap().reason, CloseReason::Protocol("answer does not match a pending request"));
}

#[test]
fn an_f_that_does_not_match_its_request_is_session_fatal() {
    let acquire = |h: &mut Harness| {
        h.acquire(2, 1, "k", "o1", 5);
    };
    let shared = |h: &mut Harness| {
        h.shared(2, 1, "pool", "o1", 3);
    };
    for (send, bad) in [
        (&acquire as &dyn Fn(&mut Harness), &b"F 1 other\n"[..]), // another key
        (&acquire, b"F 9 k\n"),                                   // unknown id
        (&shared, b"F 1 other\n"),                                // another key on S
    ] {
        let (c, events) = fatal_after(send, bad);
        assert!(matches!(c.reason, CloseReason::Protocol(_)), "{c:?}");
        assert!(!events.iter().any(|e| matches!(e, SessionEvent::Answer { .. })), "{events:?}");
    }
    // A release or a query answered F with another key.
    for req in [
        Request::Release { key: k("k"), owner: o("o1"), token: Token::new(4).unwrap() },
        Request::Query { key: k("k"), owner: o("o1") },
    ] {
        let mut h = Harness::ready("leader", TOKEN);
        h.events.clear();
        h.s.send(h.at(2), OpId(1), req).unwrap();
        h.drain();
        h.input(3, b"F 1 j\n");
        assert!(matches!(h.closed().unwrap().reason, CloseReason::Protocol(_)));
    }
    // A request whose bytes were never handed out cannot be answered yet.
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    let id = h.s.send(h.at(2), OpId(1), Request::Acquire { key: k("k"), owner: o("o1"), wait: 5, lease: 10 }).unwrap();
    h.input(3, format!("F {id} k\n").as_bytes());
    let c = h.closed().unwrap();
    assert_eq!((c.unsent.len(), c.possibly_sent.len()), (1, 0));
    // F never answers a ping (it has no key).
    let mut h = Harness::ready("leader", TOKEN);
    h.timeout(1001);
    let ping = h.take_wire();
    let id = ping.strip_prefix("P ").unwrap_or_else(|| panic!("no ping: {ping:?}")).trim_end();
    h.input(1002, format!("F {id} k\n").as_bytes());
    assert!(matches!(h.closed().unwrap().reason, CloseReason::Protocol(_)));
}
