//! The session state machine, byte by byte, on a simulated clock.

use super::*;
use crate::frame::{Addr, KeySet, Owner, Role, Token};

const TOKEN: &[u8] = b"secret";

fn k(s: &str) -> Key {
    Key::new(s.to_owned()).unwrap()
}
fn o(s: &str) -> Owner {
    Owner::new(s.to_owned()).unwrap()
}
fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A session plus the server half of its handshake.
struct Harness {
    s: Session,
    t0: Instant,
    wire: Vec<u8>,
    events: Vec<SessionEvent>,
}

impl Harness {
    fn new() -> Harness {
        let t0 = Instant::now();
        Harness {
            s: Session::new(t0, SessionConfig::default(), TOKEN, Hex32([7; 32])),
            t0,
            wire: vec![],
            events: vec![],
        }
    }

    /// Every event so far as (op, answer); any other event fails the test.
    fn answers(&self) -> Vec<(u64, Answer)> {
        self.events
            .iter()
            .map(|e| match e {
                SessionEvent::Answer { op, answer } => (op.0, answer.clone()),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    fn at(&self, ms_: u64) -> Instant {
        self.t0 + ms(ms_)
    }

    fn drain(&mut self) {
        while let Some(b) = self.s.poll_transmit() {
            self.wire.extend_from_slice(&b);
        }
        while let Some(e) = self.s.poll_event() {
            self.events.push(e);
        }
    }

    fn input(&mut self, at: u64, bytes: &[u8]) {
        let now = self.at(at);
        self.s.handle_input(now, bytes);
        self.drain();
    }

    fn timeout(&mut self, at: u64) {
        self.s.handle_timeout(self.at(at));
        self.drain();
    }

    fn take_wire(&mut self) -> String {
        String::from_utf8(std::mem::take(&mut self.wire)).unwrap()
    }

    fn ready(role: &str, token: &[u8]) -> Harness {
        let mut h = Harness::new();
        let snonce = Hex32([3; 32]);
        h.input(0, format!("TICKETING 1 {}\n", snonce.to_hex_string()).as_bytes());
        let auth = h.take_wire();
        let cnonce = Hex32([7; 32]);
        let cmac = auth::mac(TOKEN, Label::Client, &snonce, &cnonce);
        assert_eq!(auth, format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string()));
        let smac = auth::mac(token, Label::Server, &snonce, &cnonce);
        h.input(1, format!("OK {role} {}\n", smac.to_hex_string()).as_bytes());
        h
    }

    fn acquire(&mut self, at: u64, op: u64, key: &str, owner: &str, wait: u8) -> RequestId {
        let req = Request::Acquire { key: k(key), owner: o(owner), wait, lease: 10 };
        let id = self.s.send(self.at(at), OpId(op), req).unwrap();
        self.drain();
        id
    }

    fn shared(&mut self, at: u64, op: u64, key: &str, owner: &str, n: u16) -> RequestId {
        let req = Request::AcquireShared { key: k(key), owner: o(owner), wait: 5, lease: 10, n };
        let id = self.s.send(self.at(at), OpId(op), req).unwrap();
        self.drain();
        id
    }

    fn all(&mut self, at: u64, op: u64, keys: &[&str], owner: &str) -> RequestId {
        let keys = KeySet::new(keys.iter().map(|s| k(s)).collect()).unwrap();
        let req = Request::AcquireAll { keys, owner: o(owner), wait: 5, lease: 10 };
        let id = self.s.send(self.at(at), OpId(op), req).unwrap();
        self.drain();
        id
    }

    fn closed(&self) -> Option<&Closed> {
        self.events.iter().find_map(|e| match e {
            SessionEvent::Closed(c) => Some(c),
            _ => None,
        })
    }
}

#[test]
fn handshake_ok_and_token_never_on_wire() {
    let mut h = Harness::ready("leader", TOKEN);
    assert_eq!(h.events, vec![SessionEvent::Ready { role: Role::Leader }]);
    assert!(h.s.is_ready());
    h.acquire(2, 1, "k", "o1", 5);
    let wire = h.take_wire();
    assert_eq!(wire, "A 1 k o1 5 10\n");
    assert!(!wire.contains("secret"));
}

#[test]
fn wrong_smac_is_auth_failed_and_nothing_can_be_sent() {
    let mut h = Harness::ready("leader", b"other-token");
    let c = h.closed().unwrap();
    assert_eq!(c.reason, CloseReason::AuthFailed);
    assert!(c.reason.backoff_to_cap());
    assert_eq!(
        h.s.send(h.at(2), OpId(1), Request::Release { key: k("k"), owner: o("o"), token: Token::new(5).unwrap() }),
        Err(SendError::Closed)
    );
    h.drain();
    assert!(h.wire.is_empty());
}

#[test]
fn send_before_ready_is_refused() {
    let mut h = Harness::new();
    let r = h.s.send(h.t0, OpId(1), Request::Acquire { key: k("k"), owner: o("o"), wait: 0, lease: 1 });
    assert_eq!(r, Err(SendError::NotReady));
}

#[test]
fn handshake_timeout_and_errors_during_handshake() {
    let mut h = Harness::new();
    h.timeout(4999);
    assert!(h.closed().is_none());
    h.timeout(5000);
    assert_eq!(h.closed().unwrap().reason, CloseReason::HandshakeTimeout);

    let mut h = Harness::new();
    h.input(0, b"E not_active\n");
    assert_eq!(h.closed().unwrap().reason, CloseReason::NotActive);
    assert!(h.closed().unwrap().reason.backoff_to_cap());

    let mut h = Harness::new();
    h.input(0, b"OK leader 0000000000000000000000000000000000000000000000000000000000000000\n");
    assert_eq!(h.closed().unwrap().reason, CloseReason::Protocol("expected the greeting"));
}

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

fn fatal_after_acquire(answer: &[u8]) -> Closed {
    let mut h = Harness::ready("leader", TOKEN);
    h.acquire(2, 1, "k", "o1", 5);
    h.input(3, answer);
    let c = h.closed().unwrap_or_else(|| panic!("{:?} did not close", String::from_utf8_lossy(answer))).clone();
    assert_eq!(c.possibly_sent.len(), 1, "the sent acquire is possibly sent");
    assert!(c.unsent.is_empty());
    c
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

// ---------------------------------------------------------------- counted (S/G) and multi-key (K) grants

fn granted(key: &str, owner: &str, token: u64, t_send: Instant, slot: Option<u16>, others: &[&str]) -> Answer {
    Answer::Granted {
        key: k(key),
        owner: o(owner),
        token: Token::new(token).unwrap(),
        waited_ms: 3,
        t_send,
        slot,
        other_keys: others.iter().map(|s| k(s)).collect(),
    }
}

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
fn f_answers_any_request_by_its_key_and_k_by_any_of_its_keys() {
    let forbidden = |key: &str| Answer::Forbidden { key: k(key) };
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    h.shared(2, 1, "pool", "o1", 3);
    h.all(2, 2, &["x", "y", "z"], "o2");
    h.all(2, 3, &["p", "q"], "o3");
    // A K is answered F with the first key its principal may not use (not
    // necessarily its first key); the connection stays.
    h.input(
        3,
        b"F 1 pool
F 2 y
",
    );
    assert_eq!(h.answers(), vec![(1, forbidden("pool")), (2, forbidden("y"))]);
    assert!(h.closed().is_none());
    // A key the request does not name is a mismatch: fatal.
    h.input(4, b"F 3 other\n");
    assert!(h.closed().is_some());
}

#[test]
fn f_answers_a_release_and_a_query_by_their_key_and_the_session_goes_on() {
    let forbidden = |key: &str| Answer::Forbidden { key: k(key) };
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

fn fatal_after(send: impl FnOnce(&mut Harness), answer: &[u8]) -> (Closed, Vec<SessionEvent>) {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    send(&mut h);
    h.input(3, answer);
    let c = h.closed().unwrap_or_else(|| panic!("{:?} did not close", String::from_utf8_lossy(answer))).clone();
    assert_eq!(c.possibly_sent.len(), 1, "the sent acquire is possibly sent: {:?}", String::from_utf8_lossy(answer));
    (c, h.events.clone())
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
