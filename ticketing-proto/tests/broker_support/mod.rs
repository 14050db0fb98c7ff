//! The harness of the broker tests: a `Broker` against in-memory fake servers with a
//! simulated clock (quinn `Pair` style: `step()` moves bytes and events, `run_until()`
//! moves time). Each `broker_*.rs` test binary uses part of it.

// Every test binary includes this module and uses only some of its helpers.
#![allow(dead_code)]

use rand_core::{CryptoRng, RngCore};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use ticketing_proto::auth::{self, Label};
use ticketing_proto::broker::{Broker, BrokerConfig, BrokerEvent, ConnId, Failure, Grant, OpId};
use ticketing_proto::frame::{decode_client, ClientFrame, Hex32, RequestId};
use ticketing_proto::lane::{Outcome, Purpose};
use ticketing_proto::params;
use ticketing_proto::session::CloseReason;

pub const TOKEN: &[u8] = b"s3cret-token";

/// Deterministic "CSPRNG" for tests.
pub struct TestRng(pub u64);
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
pub enum Mode {
    /// The transport fails at once (connection refused).
    Refuse,
    /// Greets, checks AUTH, answers `OK role` with a MAC made with `token`, then maybe `L`.
    Serve { role: &'static str, token: Vec<u8>, leader: Option<String> },
    /// Accepts the TCP connection but never says anything.
    Silent,
}

pub struct FakeConn {
    pub addr: String,
    pub snonce: Hex32,
    pub buf: Vec<u8>,
    /// Every request frame this connection received (AUTH and P excluded).
    pub requests: Vec<ClientFrame>,
    pub pings: usize,
    pub answer_pings: bool,
    pub open: bool,
}

pub struct World {
    pub now: Instant,
    pub t0: Instant,
    pub b: Broker,
    pub modes: HashMap<String, Mode>,
    pub conns: BTreeMap<ConnId, FakeConn>,
    pub connects: Vec<(Duration, String)>,
    pub acquired: HashMap<OpId, Result<Option<Grant>, Failure>>,
    pub released: HashMap<OpId, Result<bool, Failure>>,
    pub lane_done: Vec<(Purpose, Outcome, u64)>,
    /// Resolutions of Indeterminate acquires: (key, outcome, token from `H`).
    pub resolved: Vec<(String, Outcome, Option<u64>)>,
    pub ended: Vec<CloseReason>,
    pub closed: bool,
    pub wire: Vec<u8>,
    /// Every request any fake server received, in arrival order.
    pub log: Vec<(ConnId, ClientFrame)>,
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub fn serve(role: &'static str) -> Mode {
    Mode::Serve { role, token: TOKEN.to_vec(), leader: None }
}

impl World {
    pub fn new(addrs: &[&str], modes: &[(&str, Mode)]) -> World {
        Self::with_config(BrokerConfig::new(addrs.iter().map(|a| a.to_string()).collect(), TOKEN), modes)
    }

    pub fn with_config(config: BrokerConfig, modes: &[(&str, Mode)]) -> World {
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

    pub fn elapsed(&self) -> Duration {
        self.now - self.t0
    }

    /// Moves bytes and events until nothing moves.
    pub fn step(&mut self) {
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

    pub fn on_event(&mut self, e: BrokerEvent) {
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

    pub fn server_read(&mut self, conn: ConnId, data: &[u8]) {
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
    pub fn send(&mut self, conn: ConnId, line: &str) {
        assert!(self.conns[&conn].open);
        self.b.handle_input(self.now, conn, line.as_bytes());
        self.step();
    }

    /// The server side of `conn` closes the connection.
    pub fn hang_up(&mut self, conn: ConnId) {
        self.b.handle_conn_lost(self.now, conn);
        self.step();
    }

    pub fn run_for(&mut self, d: Duration) {
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

    pub fn acquire(&mut self, key: &str, wait: f64, lease: f64, budget: f64) -> OpId {
        let p = params::acquire(key, wait, lease, budget).unwrap();
        let op = self.b.acquire(self.now, &p);
        self.step();
        op
    }

    /// Every request seen by any fake server, in arrival order.
    pub fn all_requests(&self) -> Vec<(ConnId, ClientFrame)> {
        self.log.clone()
    }

    pub fn acquires_seen(&self) -> usize {
        self.all_requests().iter().filter(|(_, f)| matches!(f, ClientFrame::Acquire { .. })).count()
    }

    /// The connection and frame of the last request seen.
    pub fn last_request(&self) -> (ConnId, ClientFrame) {
        self.log.last().cloned().expect("no request seen")
    }

    pub fn last_acquire(&self) -> (ConnId, RequestId, String, String) {
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

    pub fn releases_seen(&self) -> Vec<(ConnId, RequestId, String, String, u64)> {
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

    pub fn open_conns(&self) -> Vec<ConnId> {
        self.conns.iter().filter(|(_, c)| c.open).map(|(id, _)| *id).collect()
    }

    pub fn result(&self, op: OpId) -> Option<Result<Option<Grant>, Failure>> {
        self.acquired.get(&op).cloned()
    }
}

pub const A: &str = "127.0.0.1:5225";
pub const B: &str = "127.0.0.1:5226";
pub const C: &str = "127.0.0.1:5227";

pub fn one_leader() -> World {
    let w = World::new(&[A], &[(A, serve("leader"))]);
    assert!(w.b.is_ready());
    assert_eq!(w.open_conns().len(), 2, "one address → two connections");
    w
}

impl World {
    /// The silent server at `addr` starts serving as `role` and greets `conns` now
    /// (its other connections stay silent).
    pub fn greet_conns(&mut self, addr: &str, role: &'static str, conns: &[ConnId]) {
        self.modes.insert(addr.into(), serve(role));
        for c in conns {
            let s = self.conns[c].snonce;
            self.send(*c, &format!("TICKETING 1 {}\n", s.to_hex_string()));
        }
    }

    /// The silent server at `addr` starts serving as `role` and greets every open connection.
    pub fn greet(&mut self, addr: &str, role: &'static str) {
        let conns: Vec<ConnId> = self.open_conns().into_iter().filter(|c| self.conns[c].addr == addr).collect();
        self.greet_conns(addr, role, &conns);
    }

    pub fn acquire_wait_sent(&self) -> u8 {
        match self.all_requests().into_iter().rev().find(|(_, f)| matches!(f, ClientFrame::Acquire { .. })) {
            Some((_, ClientFrame::Acquire { wait, .. })) => wait,
            _ => panic!("no acquire seen"),
        }
    }

    /// What `connect` waits for: a routable connection, or every first attempt settled.
    pub fn usable(&self) -> bool {
        self.b.is_ready() || self.b.first_attempts_settled()
    }
}

pub fn retry_gaps(w: &World, addr: &str) -> Vec<u64> {
    let times: Vec<u64> = w.connects.iter().filter(|(_, a)| a == addr).map(|(t, _)| t.as_millis() as u64).collect();
    times.windows(2).map(|p| p[1] - p[0]).collect()
}

/// An acquire of `k` whose connection hangs up once it is written: it ends
/// Indeterminate and the lane asks `Q`; the connection and id of that query.
pub fn indeterminate_query(w: &mut World) -> (ConnId, RequestId) {
    w.acquire("k", 5.0, 10.0, 0.0);
    let (conn, ..) = w.last_acquire();
    w.hang_up(conn);
    w.run_for(ms(10));
    let (qconn, qid, ..) = w.queries_seen()[0].clone();
    (qconn, qid)
}

pub fn ticket(w: &mut World) -> Grant {
    let op = w.acquire("k", 5.0, 30.0, 0.0);
    let (conn, id, _, owner) = w.last_acquire();
    let token = 1000 + id.0;
    w.send(conn, &format!("A {id} k {owner} {token} 0\n"));
    w.result(op).unwrap().unwrap().unwrap()
}

impl World {
    pub fn queries_seen(&self) -> Vec<(ConnId, RequestId, String, String)> {
        self.all_requests()
            .into_iter()
            .filter_map(|(c, f)| match f {
                ClientFrame::Query { id, key, owner } => Some((c, id, key.to_string(), owner.as_str().to_owned())),
                _ => None,
            })
            .collect()
    }
}

impl World {
    pub fn acquire_shared(&mut self, key: &str, n: i64, wait: f64, lease: f64, budget: f64) -> OpId {
        let p = params::acquire_shared(key, n, wait, lease, budget).unwrap();
        let op = self.b.acquire_shared(self.now, &p);
        self.step();
        op
    }

    pub fn acquire_all(&mut self, keys: &[&str], wait: f64, lease: f64, budget: f64) -> OpId {
        let p = params::acquire_all(keys, wait, lease, budget).unwrap();
        let op = self.b.acquire_all(self.now, &p);
        self.step();
        op
    }

    /// The connection, id, key, owner and n of the last `S` seen.
    pub fn last_shared(&self) -> (ConnId, RequestId, String, String, u16) {
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
    pub fn last_all(&self) -> (ConnId, RequestId, Vec<String>, String) {
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
    pub fn released_keys(&self) -> Vec<(String, String, u64)> {
        let mut v: Vec<_> = self.releases_seen().into_iter().map(|(_, _, k, o, t)| (k, o, t)).collect();
        v.sort();
        v
    }

    /// Answers every release seen from index `from` on with `R`, except the keys in `n_for` (`N`).
    pub fn answer_releases(&mut self, from: usize, n_for: &[&str]) {
        for (c, id, key, ..) in self.releases_seen().into_iter().skip(from) {
            let op = if n_for.contains(&key.as_str()) { "N" } else { "R" };
            self.send(c, &format!("{op} {id} {key}\n"));
        }
    }
}

pub fn multi_ticket(w: &mut World, keys: &[&str], token: u64) -> Grant {
    let op = w.acquire_all(keys, 5.0, 30.0, 0.0);
    let (conn, id, _, owner) = w.last_all();
    w.send(conn, &format!("A {id} {} {owner} {token} 0\n", keys[0]));
    w.result(op).unwrap().unwrap().unwrap()
}
