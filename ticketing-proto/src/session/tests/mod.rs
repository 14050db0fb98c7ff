//! The session state machine, byte by byte, on a simulated clock: the
//! harness and its helpers here; the tests by subject in the submodules.

mod answers;
mod forbidden;
mod grants;
mod handshake;

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

/// The session closed after `send` and then `answer`, with the one sent
/// request possibly sent: the close and every event since `send`.
fn fatal_after(send: impl FnOnce(&mut Harness), answer: &[u8]) -> (Closed, Vec<SessionEvent>) {
    let mut h = Harness::ready("leader", TOKEN);
    h.events.clear();
    send(&mut h);
    h.input(3, answer);
    let c = h.closed().unwrap_or_else(|| panic!("{:?} did not close", String::from_utf8_lossy(answer))).clone();
    assert_eq!(c.possibly_sent.len(), 1, "the sent acquire is possibly sent: {:?}", String::from_utf8_lossy(answer));
    (c, h.events.clone())
}

/// [`fatal_after`] an `A 1 k o1 5 …`: nothing is left unsent.
fn fatal_after_acquire(answer: &[u8]) -> Closed {
    let (c, _) = fatal_after(
        |h| {
            h.acquire(2, 1, "k", "o1", 5);
        },
        answer,
    );
    assert!(c.unsent.is_empty());
    c
}

/// The answer of a grant (`A`, or `G` with `slot`), `others` the other keys of a `K`.
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

/// The answer `F` naming `key`.
fn forbidden(key: &str) -> Answer {
    Answer::Forbidden { key: k(key) }
}
