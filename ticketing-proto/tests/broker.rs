//! Deterministic tests of the client core: a `Broker` against in-memory fake
//! servers with a simulated clock (quinn `Pair` style: `step()` moves bytes
//! and events, `run_until()` moves time).

use rand_core::{CryptoRng, RngCore};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use ticketing_proto::auth::{self, Label};
use ticketing_proto::broker::{Broker, BrokerConfig, BrokerEvent, ConnId, Failure, Grant, OpId};
use ticketing_proto::frame::{decode_client, ClientFrame, Hex32, RequestId};
use ticketing_proto::lane::{Outcome, Purpose};
use ticketing_proto::params;
use ticketing_proto::session::CloseReason;

const TOKEN: &[u8] = b"s3cret-token";

/// Deterministic "CSPRNG" for tests.
struct TestRng(u64);
impl RngCore for TestRng {
    fn next_u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for b in dest {
            *b = self.next_u64() as u8;
        }
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}
impl CryptoRng for TestRng {}

#[derive(Clone)]
enum Mode {
    /// The transport fails at once (connection refused).
    Refuse,
    /// Greets, checks AUTH, answers `OK role` with a MAC made with `token`, then maybe `L`.
    Serve { role: &'static str, token: Vec<u8>, leader: Option<String> },
    /// Accepts the TCP connection but never says anything.
    Silent,
}

struct FakeConn {
    addr: String,
    snonce: Hex32,
    buf: Vec<u8>,
    /// Every request frame this connection received (AUTH and P excluded).
    requests: Vec<ClientFrame>,
    pings: usize,
    answer_pings: bool,
    open: bool,
}

struct World {
    now: Instant,
    t0: Instant,
    b: Broker,
    modes: HashMap<String, Mode>,
    conns: BTreeMap<ConnId, FakeConn>,
    connects: Vec<(Duration, String)>,
    acquired: HashMap<OpId, Result<Option<Grant>, Failure>>,
    released: HashMap<OpId, Result<bool, Failure>>,
    lane_done: Vec<(Purpose, Outcome, u64)>,
    /// Resolutions of Indeterminate acquires: (key, outcome, token from `H`).
    resolved: Vec<(String, Outcome, Option<u64>)>,
    ended: Vec<CloseReason>,
    closed: bool,
    wire: Vec<u8>,
    /// Every request any fake server received, in arrival order.
    log: Vec<(ConnId, ClientFrame)>,
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn serve(role: &'static str) -> Mode {
    Mode::Serve { role, token: TOKEN.to_vec(), leader: None }
}

impl World {
    fn new(addrs: &[&str], modes: &[(&str, Mode)]) -> World {
        Self::with_config(BrokerConfig::new(addrs.iter().map(|a| a.to_string()).collect(), TOKEN), modes)
    }

    fn with_config(config: BrokerConfig, modes: &[(&str, Mode)]) -> World {
        let t0 = Instant::now();
        let b = Broker::new(t0, config, Box::new(TestRng(42))).unwrap();
        let mut w = World {
            now: t0,
            t0,
            b,
            modes: modes.iter().map(|(a, m)| (a.to_string(), m.clone())).collect(),
            conns: BTreeMap::new(),
            connects: vec![],
            acquired: HashMap::new(),
            released: HashMap::new(),
            lane_done: vec![],
            resolved: vec![],
            ended: vec![],
            closed: false,
            wire: vec![],
            log: vec![],
        };
        w.step();
        w
    }

    fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Moves bytes and events until nothing moves.
    fn step(&mut self) {
        loop {
            let mut moved = false;
            while let Some(t) = self.b.poll_transmit() {
                moved = true;
                self.wire.extend_from_slice(&t.data);
                self.server_read(t.conn, &t.data);
            }
            while let Some(e) = self.b.poll_event() {
                moved = true;
                self.on_event(e);
            }
            if !moved {
                break;
            }
        }
    }

    fn on_event(&mut self, e: BrokerEvent) {
        match e {
            BrokerEvent::Connect { conn, addr } => {
                self.connects.push((self.elapsed(), addr.clone()));
                let mode = self.modes.get(&addr).cloned().unwrap_or(Mode::Refuse);
                match mode {
                    Mode::Refuse => self.b.handle_conn_lost(self.now, conn),
                    Mode::Silent | Mode::Serve { .. } => {
                        let mut n = [0u8; 32];
                        TestRng(conn.0 + 1000).fill_bytes(&mut n);
                        let snonce = Hex32(n);
                        self.conns.insert(
                            conn,
                            FakeConn {
                                addr,
                                snonce,
                                buf: vec![],
                                requests: vec![],
                                pings: 0,
                                answer_pings: true,
                                open: true,
                            },
                        );
                        if matches!(mode, Mode::Serve { .. }) {
                            self.b.handle_input(
                                self.now,
                                conn,
                                format!("TICKETING 1 {}\n", snonce.to_hex_string()).as_bytes(),
                            );
                        }
                    }
                }
            }
            BrokerEvent::Disconnect { conn } => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.open = false;
                }
            }
            BrokerEvent::Acquired { op, result } => {
                assert!(self.acquired.insert(op, result).is_none(), "acquire {op:?} completed twice");
            }
            BrokerEvent::Released { op, result } => {
                assert!(self.released.insert(op, result).is_none(), "release {op:?} completed twice");
            }
            BrokerEvent::LaneDone { grant, purpose, outcome } => {
                self.lane_done.push((purpose, outcome, grant.token.get()))
            }
            BrokerEvent::Resolved { key, token, outcome, .. } => {
                self.resolved.push((key.as_str().to_owned(), outcome, token.map(|t| t.get())))
            }
            BrokerEvent::SessionEnded { reason, .. } => self.ended.push(reason),
            BrokerEvent::Closed => self.closed = true,
        }
    }

    fn server_read(&mut self, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        assert!(c.open, "bytes written to a dropped transport");
        c.buf.extend_from_slice(data);
        let mut replies: Vec<Vec<u8>> = vec![];
        while let Some((frame, used)) = decode_client(&c.buf).expect("the client sent a malformed frame") {
            c.buf.drain(..used);
            match frame {
                ClientFrame::Auth { cnonce, cmac } => {
                    let Some(Mode::Serve { role, token, leader }) = self.modes.get(&c.addr).cloned() else { continue };
                    if !auth::verify(TOKEN, Label::Client, &c.snonce, &cnonce, &cmac) {
                        replies.push(b"E auth_failed\n".to_vec());
                        continue;
                    }
                    let smac = auth::mac(&token, Label::Server, &c.snonce, &cnonce);
                    replies.push(format!("OK {role} {}\n", smac.to_hex_string()).into_bytes());
                    if let Some(l) = leader {
                        replies.push(format!("L {l}\n").into_bytes());
                    }
                }
                ClientFrame::Ping { id } => {
                    c.pings += 1;
                    if c.answer_pings {
                        replies.push(format!("P {id}\n").into_bytes());
                    }
                }
                other => {
                    c.requests.push(other.clone());
                    self.log.push((conn, other));
                }
            }
        }
        for r in replies {
            self.b.handle_input(self.now, conn, &r);
        }
    }

    /// The server side of `conn` sends `line`.
    fn send(&mut self, conn: ConnId, line: &str) {
        assert!(self.conns[&conn].open);
        self.b.handle_input(self.now, conn, line.as_bytes());
        self.step();
    }

    /// The server side of `conn` closes the connection.
    fn hang_up(&mut self, conn: ConnId) {
        self.b.handle_conn_lost(self.now, conn);
        self.step();
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            self.step();
            match self.b.poll_timeout() {
                Some(t) if t <= end => {
                    self.now = self.now.max(t);
                    self.b.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = end;
        self.step();
    }

    fn acquire(&mut self, key: &str, wait: f64, lease: f64, budget: f64) -> OpId {
        let p = params::acquire(key, wait, lease, budget).unwrap();
        let op = self.b.acquire(self.now, &p);
        self.step();
        op
    }

    /// Every request seen by any fake server, in arrival order.
    fn all_requests(&self) -> Vec<(ConnId, ClientFrame)> {
        self.log.clone()
    }

    fn acquires_seen(&self) -> usize {
        self.all_requests().iter().filter(|(_, f)| matches!(f, ClientFrame::Acquire { .. })).count()
    }

    /// The connection and frame of the last request seen.
    fn last_request(&self) -> (ConnId, ClientFrame) {
        self.log.last().cloned().expect("no request seen")
    }

    fn last_acquire(&self) -> (ConnId, RequestId, String, String) {
        let (c, f) = self
            .all_requests()
            .into_iter()
            .filter(|(_, f)| matches!(f, ClientFrame::Acquire { .. }))
            .last()
            .expect("no acquire seen");
        match f {
            ClientFrame::Acquire { id, key, owner, .. } => (c, id, key.to_string(), owner.as_str().to_owned()),
            _ => unreachable!(),
        }
    }

    fn releases_seen(&self) -> Vec<(ConnId, RequestId, String, String, u64)> {
        self.all_requests()
            .into_iter()
            .filter_map(|(c, f)| match f {
                ClientFrame::Release { id, key, owner, token } => {
                    Some((c, id, key.to_string(), owner.as_str().to_owned(), token.get()))
                }
                _ => None,
            })
            .collect()
    }

    fn open_conns(&self) -> Vec<ConnId> {
        self.conns.iter().filter(|(_, c)| c.open).map(|(id, _)| *id).collect()
    }

    fn result(&self, op: OpId) -> Option<Result<Option<Grant>, Failure>> {
        self.acquired.get(&op).cloned()
    }
}

const A: &str = "127.0.0.1:5225";
const B: &str = "127.0.0.1:5226";
const C: &str = "127.0.0.1:5227";

fn one_leader() -> World {
    let w = World::new(&[A], &[(A, serve("leader"))]);
    assert!(w.b.is_ready());
    assert_eq!(w.open_conns().len(), 2, "one address → two connections");
    w
}

// ---------------------------------------------------------------- docs/client.md, Acquire basics

#[test]
fn grant_becomes_a_ticket_with_the_conservative_deadline() {
    let mut w = one_leader();
    let op = w.acquire("seat-1", 5.0, 10.0, 2.0);
    let (conn, id, key, owner) = w.last_acquire();
    assert_eq!(key, "seat-1");
    let t_send = w.now;
    w.run_for(ms(300));
    w.send(conn, &format!("A {id} seat-1 {owner} 42 100\n"));
    let g = w.result(op).unwrap().unwrap().unwrap();
    assert_eq!(g.token.get(), 42);
    assert_eq!(g.deadline, t_send + ms(100) + ms(9990));
    assert_eq!(w.b.live_tickets(), 1);
    let wire = String::from_utf8_lossy(&w.wire).into_owned();
    assert!(wire.contains(&format!("A {id} seat-1 {owner} 5 10\n")));
    assert!(!wire.contains("s3cret"), "the token never crosses the wire");
}

#[test]
fn t_is_none_and_b_is_busy_at_once_with_one_frame() {
    let mut w = one_leader();
    let op = w.acquire("k", 0.0, 5.0, 0.0);
    let (conn, id, ..) = w.last_acquire();
    w.send(conn, &format!("T {id} k\n"));
    assert_eq!(w.result(op), Some(Ok(None)));

    let op = w.acquire("k", 3.0, 5.0, 0.0);
    let (conn, id, ..) = w.last_acquire();
    w.send(conn, &format!("B {id} k\n"));
    assert_eq!(w.result(op), Some(Err(Failure::Busy)));
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.acquires_seen(), 2, "no internal retry after B");
}

#[test]
fn several_requests_same_key_matched_by_id_not_fifo() {
    let mut w = one_leader();
    let op1 = w.acquire("k", 5.0, 5.0, 0.0);
    let op2 = w.acquire("k", 5.0, 5.0, 0.0);
    let reqs: Vec<_> = w
        .all_requests()
        .into_iter()
        .map(|(c, f)| match f {
            ClientFrame::Acquire { id, owner, .. } => (c, id, owner.as_str().to_owned()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(reqs.len(), 2);
    assert_ne!(reqs[0].0, reqs[1].0, "round-robin over the two connections");
    // Answer the second first.
    let (c2, id2, o2) = reqs[1].clone();
    w.send(c2, &format!("A {id2} k {o2} 7 0\n"));
    assert_eq!(w.result(op2).unwrap().unwrap().unwrap().token.get(), 7);
    assert_eq!(w.result(op1), None);
    let (c1, id1, _) = reqs[0].clone();
    w.send(c1, &format!("T {id1} k\n"));
    assert_eq!(w.result(op1), Some(Ok(None)));
}

// ---------------------------------------------------------------- Indeterminate

#[test]
fn server_closes_after_reading_a_is_indeterminate_and_never_resent() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.hang_up(conn);
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    w.run_for(Duration::from_secs(20));
    assert_eq!(w.acquires_seen(), 1, "a possibly-sent acquire is never resent");
    assert!(w.b.is_ready(), "a dead connection never breaks the broker");
}

#[test]
fn answer_with_wrong_key_closes_the_session_and_is_indeterminate() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let other = w.acquire("j", 5.0, 10.0, 0.0);
    let (conn_j, ..) = w.last_acquire();
    let (conn, id, _, owner) = {
        let (c, f) = w.all_requests()[0].clone();
        match f {
            ClientFrame::Acquire { id, key, owner, .. } => (c, id, key.to_string(), owner.as_str().to_owned()),
            _ => unreachable!(),
        }
    };
    assert_ne!(conn, conn_j);
    w.send(conn, &format!("A {id} wrong {owner} 5 0\n"));
    assert!(!w.conns[&conn].open, "session closed");
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    assert_eq!(w.result(other), None, "the other connection is unaffected");
    assert!(w.releases_seen().is_empty(), "a mismatched answer is not an unsolicited grant");
}

#[test]
fn every_fatal_frame_makes_sent_acquires_indeterminate() {
    for line in [
        "E internal\n",
        "E bad_frame\n",
        "E duplicate_id\n",
        "E too_many_pending\n",
        "E shutting_down bye\n",
        "E overloaded\n",
        "E no_leader\n",
        "E not_active\n",
        "E auth_failed\n",
        "E something_new\n",
        "Q 1\n",
        "A 1\n",
        "T 1 k extra\n",
        "TICKETING 1 0000000000000000000000000000000000000000000000000000000000000000\n",
        "M 127.0.0.1:5225\n",
        "P 999\n",
    ] {
        let mut w = one_leader();
        let op = w.acquire("k", 5.0, 10.0, 0.0);
        let (conn, ..) = w.last_acquire();
        w.send(conn, line);
        assert!(!w.conns[&conn].open, "{line:?} must close the session");
        assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)), "{line:?}");
        w.run_for(Duration::from_secs(5));
        assert_eq!(w.acquires_seen(), 1, "{line:?}: never resent");
    }
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.send(conn, &"x".repeat(513));
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)), "oversized");
}

#[test]
fn no_answer_within_wait_plus_5s_closes_and_is_indeterminate() {
    let mut w = one_leader();
    let op = w.acquire("k", 2.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.run_for(ms(6999));
    assert_eq!(w.result(op), None);
    assert!(w.conns[&conn].open);
    w.run_for(ms(1));
    assert_eq!(w.result(op), Some(Err(Failure::Indeterminate)));
    assert!(!w.conns[&conn].open);
    assert_eq!(w.ended.last(), Some(&CloseReason::AnswerTimeout));
}

#[test]
fn unsent_acquire_is_rerouted_when_its_session_dies() {
    let mut w = one_leader();
    let p = params::acquire("k", 5.0, 10.0, 0.0).unwrap();
    let op = w.b.acquire(w.now, &p);
    // The transport dies before the bytes were handed out.
    let conns = w.open_conns();
    for c in &conns {
        w.b.handle_conn_lost(w.now, *c);
    }
    w.step();
    assert_eq!(w.acquires_seen(), 0);
    assert_eq!(w.result(op), None, "unsent: waits within its budget");
    w.run_for(ms(150)); // reconnect after 0.1 s
    assert_eq!(w.acquires_seen(), 1);
    let (conn, id, _, owner) = w.last_acquire();
    assert!(!conns.contains(&conn));
    w.send(conn, &format!("A {id} k {owner} 9 0\n"));
    assert_eq!(w.result(op).unwrap().unwrap().unwrap().token.get(), 9);
}

#[test]
fn unsent_acquire_goes_to_the_other_connection_at_once() {
    let mut w = one_leader();
    let p = params::acquire("k", 0.0, 10.0, 0.0).unwrap();
    let op = w.b.acquire(w.now, &p);
    let first = w.open_conns()[0];
    let second = w.open_conns()[1];
    // rr picked one of them; kill both orders' first candidate deterministically:
    w.b.handle_conn_lost(w.now, first);
    w.b.handle_conn_lost(w.now, second);
    w.step();
    // wait = 0 has no budget left and nothing is ready: Unavailable, nothing sent.
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)));
    assert_eq!(w.acquires_seen(), 0);
}

#[test]
fn no_connection_within_the_wait_budget_is_unavailable() {
    let mut w = World::new(&[A], &[(A, Mode::Refuse)]);
    let op = w.acquire("k", 2.0, 10.0, 0.0);
    w.run_for(ms(1999));
    assert_eq!(w.result(op), None);
    w.run_for(ms(1));
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)));
    let op = w.acquire("k", 0.0, 10.0, 0.0);
    assert_eq!(w.result(op), Some(Err(Failure::Unavailable)), "wait 0: at once");
}

#[test]
fn acquire_waits_for_a_connection_and_sends_only_the_budget_left() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    let op = w.acquire("k", 10.0, 10.0, 0.0);
    // The silent server makes the handshake time out after 5 s; then it starts serving.
    w.modes.insert(A.into(), serve("leader"));
    w.run_for(ms(5200));
    assert!(w.b.is_ready());
    match w.last_request().1 {
        ClientFrame::Acquire { wait, .. } => assert_eq!(wait, 5, "10 s budget, 5.1 s used → 5 s rounded up"),
        other => panic!("{other:?}"),
    }
    assert_eq!(w.result(op), None);
}

// ---------------------------------------------------------------- the wait budget is a hard bound

impl World {
    /// The silent server at `addr` starts serving as `role` and greets `conns` now
    /// (its other connections stay silent).
    fn greet_conns(&mut self, addr: &str, role: &'static str, conns: &[ConnId]) {
        self.modes.insert(addr.into(), serve(role));
        for c in conns {
            let s = self.conns[c].snonce;
            self.send(*c, &format!("TICKETING 1 {}\n", s.to_hex_string()));
        }
    }

    /// The silent server at `addr` starts serving as `role` and greets every open connection.
    fn greet(&mut self, addr: &str, role: &'static str) {
        let conns: Vec<ConnId> = self.open_conns().into_iter().filter(|c| self.conns[c].addr == addr).collect();
        self.greet_conns(addr, role, &conns);
    }

    fn acquire_wait_sent(&self) -> u8 {
        match self.all_requests().into_iter().rev().find(|(_, f)| matches!(f, ClientFrame::Acquire { .. })) {
            Some((_, ClientFrame::Acquire { wait, .. })) => wait,
            _ => panic!("no acquire seen"),
        }
    }

    /// What `connect` waits for: a routable connection, or every first attempt settled.
    fn usable(&self) -> bool {
        self.b.is_ready() || self.b.first_attempts_settled()
    }
}

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

// ---------------------------------------------------------------- docs/client.md, Acquire step 4

#[test]
fn late_grant_with_waited_ms_zero_is_insufficient_time_and_compensated() {
    let mut w = one_leader();
    // lease 3, budget 2: a grant read more than 0.997 s after the send is not enough.
    let op = w.acquire("k", 5.0, 3.0, 2.0);
    let (conn, id, _, owner) = w.last_acquire();
    w.run_for(ms(1500));
    w.send(conn, &format!("A {id} k {owner} 555 0\n"));
    assert_eq!(w.result(op), Some(Err(Failure::InsufficientTime)));
    let rel = w.releases_seen();
    assert_eq!(rel.len(), 1);
    let (rconn, rid, key, rowner, token) = rel[0].clone();
    assert_eq!((key.as_str(), rowner.as_str(), token), ("k", owner.as_str(), 555));
    w.send(rconn, &format!("R {rid} k\n"));
    assert_eq!(w.lane_done, vec![(Purpose::Compensation, Outcome::Released, 555)]);
    assert_eq!(w.b.live_tickets(), 0);
}

#[test]
fn late_grant_whose_waited_ms_covers_the_delay_is_a_ticket() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 3.0, 2.0);
    let t_send = w.now;
    let (conn, id, _, owner) = w.last_acquire();
    w.run_for(ms(1500));
    w.send(conn, &format!("A {id} k {owner} 556 1500\n"));
    let g = w.result(op).unwrap().unwrap().unwrap();
    assert_eq!(g.deadline, t_send + ms(1500) + ms(2997), "remaining counts from t_send + waited_ms");
    assert!(w.releases_seen().is_empty());
}

#[test]
fn grant_with_no_time_left_at_all_is_insufficient_even_with_budget_zero() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 1.0, 0.0);
    let (conn, id, _, owner) = w.last_acquire();
    w.run_for(ms(999));
    w.send(conn, &format!("A {id} k {owner} 5 0\n"));
    assert_eq!(w.result(op), Some(Err(Failure::InsufficientTime)));
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

fn retry_gaps(w: &World, addr: &str) -> Vec<u64> {
    let times: Vec<u64> = w.connects.iter().filter(|(_, a)| a == addr).map(|(t, _)| t.as_millis() as u64).collect();
    times.windows(2).map(|p| p[1] - p[0]).collect()
}

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

// ---------------------------------------------------------------- docs/client.md, Release lane lane

fn ticket(w: &mut World) -> Grant {
    let op = w.acquire("k", 5.0, 30.0, 0.0);
    let (conn, id, _, owner) = w.last_acquire();
    let token = 1000 + id.0;
    w.send(conn, &format!("A {id} k {owner} {token} 0\n"));
    w.result(op).unwrap().unwrap().unwrap()
}

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

// ---------------------------------------------------------------- docs/client.md, Acquire step 7

#[test]
fn cancel_unsent_sends_nothing() {
    let mut w = World::new(&[A], &[(A, Mode::Silent)]);
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    w.b.cancel(w.now, op);
    w.modes.insert(A.into(), serve("leader"));
    w.run_for(ms(6000));
    assert!(w.b.is_ready());
    assert_eq!(w.acquires_seen(), 0);
    assert_eq!(w.result(op), None, "no event for a cancelled op");
}

#[test]
fn cancel_after_send_closes_that_session() {
    let mut w = one_leader();
    let op = w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    // a second acquire on the same connection (round-robin: skip the other one)
    let _other_conn = w.acquire("j", 5.0, 10.0, 0.0);
    let op3 = w.acquire("l", 5.0, 10.0, 0.0);
    assert_eq!(w.last_acquire().0, conn);
    w.b.cancel(w.now, op);
    w.step();
    assert!(!w.conns[&conn].open, "possibly sent → close the session");
    assert_eq!(w.ended.last(), Some(&CloseReason::Cancelled));
    assert_eq!(w.result(op), None);
    assert_eq!(w.result(op3), Some(Err(Failure::Indeterminate)), "its neighbour is Indeterminate");
}

#[test]
fn a_grant_the_caller_cannot_take_is_compensated() {
    let mut w = one_leader();
    let g = ticket(&mut w);
    w.b.compensate(w.now, &g);
    w.step();
    assert_eq!(w.releases_seen().len(), 1);
    assert_eq!(w.b.live_tickets(), 0);
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

impl World {
    fn queries_seen(&self) -> Vec<(ConnId, RequestId, String, String)> {
        self.all_requests()
            .into_iter()
            .filter_map(|(c, f)| match f {
                ClientFrame::Query { id, key, owner } => Some((c, id, key.to_string(), owner.as_str().to_owned())),
                _ => None,
            })
            .collect()
    }
}

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
    w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.hang_up(conn);
    w.run_for(ms(10));
    let (qconn, qid, ..) = w.queries_seen()[0].clone();
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

// ---------------------------------------------------------------- counted (S/G) and multi-key (K) grants

impl World {
    fn acquire_shared(&mut self, key: &str, n: i64, wait: f64, lease: f64, budget: f64) -> OpId {
        let p = params::acquire_shared(key, n, wait, lease, budget).unwrap();
        let op = self.b.acquire_shared(self.now, &p);
        self.step();
        op
    }

    fn acquire_all(&mut self, keys: &[&str], wait: f64, lease: f64, budget: f64) -> OpId {
        let p = params::acquire_all(keys, wait, lease, budget).unwrap();
        let op = self.b.acquire_all(self.now, &p);
        self.step();
        op
    }

    /// The connection, id, key, owner and n of the last `S` seen.
    fn last_shared(&self) -> (ConnId, RequestId, String, String, u16) {
        self.log
            .iter()
            .rev()
            .find_map(|(c, f)| match f {
                ClientFrame::AcquireShared { id, key, owner, n, .. } => {
                    Some((*c, *id, key.to_string(), owner.as_str().to_owned(), *n))
                }
                _ => None,
            })
            .expect("no S seen")
    }

    /// The connection, id, keys and owner of the last `K` seen.
    fn last_all(&self) -> (ConnId, RequestId, Vec<String>, String) {
        self.log
            .iter()
            .rev()
            .find_map(|(c, f)| match f {
                ClientFrame::AcquireAll { id, owner, keys, .. } => {
                    Some((*c, *id, keys.as_slice().iter().map(|k| k.to_string()).collect(), owner.as_str().to_owned()))
                }
                _ => None,
            })
            .expect("no K seen")
    }

    /// (key, owner, token) of every release seen, sorted by key.
    fn released_keys(&self) -> Vec<(String, String, u64)> {
        let mut v: Vec<_> = self.releases_seen().into_iter().map(|(_, _, k, o, t)| (k, o, t)).collect();
        v.sort();
        v
    }

    /// Answers every release seen from index `from` on with `R`, except the keys in `n_for` (`N`).
    fn answer_releases(&mut self, from: usize, n_for: &[&str]) {
        for (c, id, key, ..) in self.releases_seen().into_iter().skip(from) {
            let op = if n_for.contains(&key.as_str()) { "N" } else { "R" };
            self.send(c, &format!("{op} {id} {key}\n"));
        }
    }
}

fn multi_ticket(w: &mut World, keys: &[&str], token: u64) -> Grant {
    let op = w.acquire_all(keys, 5.0, 30.0, 0.0);
    let (conn, id, _, owner) = w.last_all();
    w.send(conn, &format!("A {id} {} {owner} {token} 0\n", keys[0]));
    w.result(op).unwrap().unwrap().unwrap()
}

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
