//! The leader on a simulated clock, with a [`LockState`] as its replicator:
//! unit tests of its rules, and a proptest of random histories (requests
//! from several connections, commits, failed and delayed batches,
//! leadership changes, closes and time) checked against the invariants of
//! docs/protocol.md §4–6.

use super::*;
use crate::locks::GrantKind;
use crate::test_fields::{k, o, t0};
use proptest::prelude::*;
use std::collections::BTreeMap;
use ticketing_proto::limits::TOKEN_MAX;
use ticketing_proto::ErrorCode;

const ME: &str = "127.0.0.1:1";

fn serving(epoch: u64) -> Leadership {
    Leadership { serving: true, active: true, leader: Some(Addr::new(ME).unwrap()), epoch }
}

/// A leader, its replicated state and a simulated clock. Batches handed
/// out wait in `pending` until the test commits or fails them.
struct Sim {
    now: Instant,
    leader: Leader,
    state: LockState,
    metrics: Arc<Metrics>,
    pending: VecDeque<Batch>,
    /// Batches already committed (or lost) whose outcome is still to be reported (delayed).
    resolved: VecDeque<(BatchId, replication::BatchOutcome)>,
    /// Every delivery, with the time it came out.
    out: Vec<(Instant, ConnId, Delivery)>,
    /// Commit every batch as soon as it is handed out.
    auto_commit: bool,
}

impl Sim {
    fn new(limits: Limits) -> Sim {
        Sim::with_state(limits, LockState::new())
    }

    fn with_state(limits: Limits, state: LockState) -> Sim {
        let now = t0();
        let metrics = Arc::new(Metrics::default());
        let leader = Leader::new(limits, metrics.clone(), Addr::new(ME).unwrap(), now);
        let mut sim = Sim {
            now,
            leader,
            state,
            metrics,
            pending: VecDeque::new(),
            resolved: VecDeque::new(),
            out: Vec::new(),
            auto_commit: true,
        };
        sim.leader.handle_leadership(now, &serving(1), &sim.state);
        for c in 1..=3 {
            sim.leader.handle_conn_opened(now, ConnId(c), format!("10.0.0.{c}:5000"));
        }
        sim.drain();
        sim
    }

    /// Drains the outputs (deliveries, then batches; auto-committed ones are fed back).
    fn drain(&mut self) {
        loop {
            while let Some((conn, d)) = self.leader.poll_delivery() {
                self.out.push((self.now, conn, d));
            }
            let Some(batch) = self.leader.poll_proposal() else { break };
            self.pending.push_back(batch);
            if self.auto_commit {
                self.commit();
            }
        }
        self.leader.check();
    }

    /// Commits the oldest pending batch (first reports a delayed outcome, if any).
    fn commit(&mut self) -> bool {
        if let Some((id, outcome)) = self.resolved.pop_front() {
            self.leader.handle_committed(self.now, id, outcome, &self.state);
            self.drain();
            return true;
        }
        let Some(b) = self.pending.pop_front() else { return false };
        let outcome = self.state.apply_all(&b.cmds);
        self.leader.handle_committed(self.now, b.id, Ok(outcome), &self.state);
        self.drain();
        true
    }

    /// Fails the oldest pending batch (`applied`: it committed anyway, the outcome was lost).
    fn fail(&mut self, e: ProposeErrorKind, applied: bool) -> bool {
        let Some(b) = self.pending.pop_front() else { return false };
        if applied {
            self.state.apply_all(&b.cmds);
        }
        let e = match e {
            ProposeErrorKind::Unknown => replication::ProposeError::Unknown,
            ProposeErrorKind::NotLeader => replication::ProposeError::NotLeader(None),
            ProposeErrorKind::Shutdown => replication::ProposeError::Shutdown,
        };
        self.leader.handle_committed(self.now, b.id, Err(e), &self.state);
        self.drain();
        true
    }

    fn request(&mut self, conn: u64, r: Request) {
        self.leader.handle_request(self.now, ConnId(conn), r);
        self.drain();
    }

    fn acquire(&mut self, conn: u64, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
        let r = Request::Acquire {
            id: RequestId(id),
            key: k(key),
            kind: GrantKind::Exclusive,
            owner: o(owner),
            wait,
            lease,
            read_at: self.now,
        };
        self.request(conn, r);
    }

    fn release(&mut self, conn: u64, id: u64, key: &str, owner: &str, token: Token) {
        self.request(conn, Request::Release { id: RequestId(id), key: k(key), owner: o(owner), token });
    }

    /// Time passes to `now + d`, every timer firing at its deadline.
    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        while let Some(at) = self.leader.poll_timeout() {
            if at > until {
                break;
            }
            self.now = self.now.max(at);
            self.leader.handle_timeout(self.now);
            self.drain();
        }
        self.now = until;
    }

    /// The frames delivered so far, and forgets them.
    fn frames(&mut self) -> Vec<ServerFrame> {
        self.out
            .drain(..)
            .map(|(_, _, d)| match d {
                Delivery::Reply { frame, .. } | Delivery::Fatal(frame) => frame,
                Delivery::Dropped(id) => panic!("request {id} dropped"),
            })
            .collect()
    }

    fn granted(&mut self) -> Token {
        match self.frames().as_slice() {
            [ServerFrame::Granted { token, .. }] => *token,
            other => panic!("{other:?}"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum ProposeErrorKind {
    Unknown,
    NotLeader,
    Shutdown,
}

fn no_ticks() -> Limits {
    Limits { tick_ms: 60_000, ..Limits::default() }
}

#[test]
fn grant_queue_release_handover_and_query() {
    let mut s = Sim::new(no_ticks());
    s.acquire(1, 1, "a", "o1", 0, 5);
    let t1 = s.granted();
    s.acquire(1, 2, "a", "o2", 0, 5);
    assert_eq!(s.frames(), vec![ServerFrame::Timeout { id: RequestId(2), key: k("a") }]);
    s.acquire(2, 3, "a", "o3", 10, 5);
    let info = s.leader.lock_info(s.now, &k("a"));
    assert_eq!(info.waiters.len(), 1);
    assert_eq!(info.waiters[0].client, "10.0.0.2:5000");
    assert_eq!(info.holder.as_ref().unwrap().token, t1);
    s.release(1, 4, "a", "o1", t1);
    let frames = s.frames();
    assert_eq!(frames[0], ServerFrame::Released { id: RequestId(4), key: k("a") });
    let ServerFrame::Granted { id, token: t2, ref owner, .. } = frames[1] else { panic!("{frames:?}") };
    assert_eq!((id, owner.clone()), (RequestId(3), o("o3")));
    assert!(t2 > t1);
    assert_eq!(s.metrics.grants.get(), 2);
    assert_eq!(s.state.holder(&k("a")).unwrap().token, t2, "the hand-over is in the release's command");
    // Q: H for the holder, with its remaining lease by the simulated clock.
    s.advance(Duration::from_millis(1_500));
    s.request(3, Request::Holds { id: RequestId(5), key: k("a"), owner: o("o3") });
    s.request(3, Request::Holds { id: RequestId(6), key: k("a"), owner: o("o1") });
    let want_h = ServerFrame::Held { id: RequestId(5), key: k("a"), owner: o("o3"), token: t2, remaining_ms: 3_500 };
    assert_eq!(s.frames(), vec![want_h, ServerFrame::NotHolder { id: RequestId(6), key: k("a") }]);
}

#[test]
fn a_wait_ends_with_t_exactly_at_its_end() {
    let mut s = Sim::new(no_ticks());
    s.acquire(1, 1, "a", "o1", 0, 30);
    s.granted();
    s.acquire(2, 2, "a", "o2", 3, 5);
    s.advance(Duration::from_millis(2_999));
    assert!(s.frames().is_empty());
    assert_eq!(s.leader.timers_len(), 3, "tick, lease, wait");
    s.advance(Duration::from_millis(1));
    assert_eq!(s.frames(), vec![ServerFrame::Timeout { id: RequestId(2), key: k("a") }]);
    assert_eq!(s.leader.timers_len(), 2, "the wait timer left with its waiter");
}

#[test]
fn a_lease_ends_at_its_end_and_hands_over_in_the_same_command() {
    let mut s = Sim::new(no_ticks());
    s.acquire(1, 1, "a", "o1", 0, 2);
    let t1 = s.granted();
    s.acquire(2, 2, "a", "o2", 10, 7);
    s.advance(Duration::from_millis(1_999));
    assert!(s.frames().is_empty());
    s.advance(Duration::from_millis(1));
    let frames = s.frames();
    let [ServerFrame::Granted { id: RequestId(2), token: t2, waited_ms: 2_000, .. }] = frames.as_slice() else {
        panic!("{frames:?}")
    };
    assert!(*t2 > t1);
    assert_eq!(s.metrics.expiries.get(), 1);
    let h = s.state.holder(&k("a")).unwrap();
    assert_eq!((h.owner, h.token, h.lease_s), (o("o2"), *t2, 7));
}

#[test]
fn held_keys_cap_is_checked_again_when_a_queued_free_key_is_granted() {
    let mut s = Sim::new(Limits { max_held_keys: 1, ..no_ticks() });
    s.auto_commit = false;
    // A no-op release keeps key "a" busy; the A behind it waits for it.
    s.release(1, 1, "a", "x", Token::new(5).unwrap());
    s.acquire(1, 2, "a", "o1", 0, 5);
    // Meanwhile key "b" takes the only held-key slot.
    s.acquire(1, 3, "b", "o2", 0, 5);
    while s.commit() {}
    let frames = s.frames();
    assert!(frames.contains(&ServerFrame::NotHolder { id: RequestId(1), key: k("a") }), "{frames:?}");
    assert!(frames.iter().any(|f| matches!(f, ServerFrame::Granted { id: RequestId(3), .. })), "{frames:?}");
    assert!(frames.contains(&ServerFrame::Busy { id: RequestId(2), key: k("a") }), "{frames:?}");
}

#[test]
fn commands_proposed_while_a_batch_is_in_flight_go_out_as_one_batch() {
    let mut s = Sim::new(no_ticks());
    s.auto_commit = false;
    s.acquire(1, 1, "a0", "o0", 0, 5);
    for i in 1..=5 {
        s.acquire(1, i + 1, &format!("a{i}"), &format!("o{i}"), 0, 5);
    }
    assert_eq!(s.pending.len(), 1, "one batch in flight");
    assert!(s.out.is_empty(), "nothing is answered before its commit");
    s.commit();
    assert_eq!(s.pending.len(), 1);
    let keys: Vec<_> = s.pending[0].cmds.iter().filter_map(|c| c.keys().first().copied().cloned()).collect();
    assert_eq!(keys, (1..=5).map(|i| k(&format!("a{i}"))).collect::<Vec<_>>());
    s.commit();
    let mut last = 0;
    for (i, f) in s.frames().into_iter().enumerate() {
        let ServerFrame::Granted { id, token, .. } = f else { panic!("{f:?}") };
        assert_eq!(id, RequestId(i as u64 + 1), "outcomes are routed in order");
        assert!(token.get() > last, "tokens strictly increase in batch order");
        last = token.get();
    }
}

#[test]
fn batches_hold_at_most_128_commands() {
    let mut s = Sim::new(no_ticks());
    s.auto_commit = false;
    for i in 0..300 {
        s.acquire(1, i, &format!("k{i}"), "o", 0, 5);
    }
    s.commit();
    let sizes: Vec<usize> = std::iter::from_fn(|| {
        let n = s.pending.front().map(|b| b.cmds.len());
        s.commit();
        n
    })
    .collect();
    assert_eq!(sizes, vec![128, 128, 43]);
}

#[test]
fn a_failed_batch_fails_every_command_in_it_and_grants_nothing() {
    let mut s = Sim::new(no_ticks());
    s.auto_commit = false;
    s.acquire(1, 1, "x0", "o0", 0, 5);
    s.acquire(1, 2, "x1", "o1", 0, 5);
    s.acquire(2, 3, "x2", "o2", 0, 5);
    s.commit();
    assert!(matches!(s.frames().as_slice(), [ServerFrame::Granted { id: RequestId(1), .. }]));
    s.fail(ProposeErrorKind::Unknown, false);
    // Outcome unknown: never `A`; each request's connection gets `E no_leader`.
    let fatal: Vec<_> = s.out.drain(..).map(|(_, c, d)| (c, d)).collect();
    let e = Delivery::Fatal(ServerFrame::error(ErrorCode::NoLeader));
    assert_eq!(fatal, vec![(ConnId(1), e.clone()), (ConnId(2), e)]);
    // The keys follow the applied state (not granted), and are free again.
    assert_eq!(s.leader.held(), 1);
    s.acquire(3, 4, "x1", "o4", 0, 5);
    s.commit();
    assert!(matches!(s.frames().as_slice(), [ServerFrame::Granted { id: RequestId(4), .. }]));
}

#[test]
fn ticks_are_committed_while_nothing_else_is() {
    let mut s = Sim::new(Limits { tick_ms: 20, ..Limits::default() });
    s.advance(Duration::from_millis(19));
    assert_eq!(s.metrics.ticks.get(), 0);
    s.advance(Duration::from_millis(1));
    assert_eq!(s.metrics.ticks.get(), 1);
    assert_eq!(s.state.domain_time(), 20);
    s.advance(Duration::from_millis(45));
    assert_eq!(s.metrics.ticks.get(), 3);
    assert_eq!(s.leader.lock_info(s.now, &k("x")).domain_time_ms, 65);
    // A command resets the silence: no tick 20 ms after it … but 20 ms after.
    s.acquire(1, 1, "a", "o", 0, 5);
    s.advance(Duration::from_millis(19));
    assert_eq!(s.metrics.ticks.get(), 3);
    s.advance(Duration::from_millis(1));
    assert_eq!(s.metrics.ticks.get(), 4);
}

#[test]
fn token_exhaustion_is_reported_as_itself() {
    let mut snap = Vec::new();
    snap.extend_from_slice(b"TKLS\x02");
    snap.extend_from_slice(&TOKEN_MAX.to_le_bytes());
    snap.extend_from_slice(&0u64.to_le_bytes());
    snap.extend_from_slice(&0u64.to_le_bytes());
    let state = LockState::from_snapshot(&snap).unwrap();
    let mut s = Sim::with_state(no_ticks(), state);
    s.acquire(1, 1, "a", "o", 5, 5);
    assert_eq!(s.frames(), vec![ServerFrame::Busy { id: RequestId(1), key: k("a") }]);
    assert_eq!((s.leader.held(), s.leader.waiters()), (0, 0));
}

#[test]
fn a_new_term_keeps_held_locks_until_their_domain_time_end_and_closes_waiters() {
    let mut s = Sim::new(no_ticks());
    s.acquire(1, 1, "a", "o1", 0, 10);
    s.granted();
    s.acquire(2, 2, "a", "o2", 30, 5);
    s.advance(Duration::from_secs(4));
    // Stepping down: the waiter's connection is closed with the redirect.
    let follower =
        Leadership { serving: false, active: true, leader: Some(Addr::new("10.9.9.9:1").unwrap()), epoch: 1 };
    s.leader.handle_leadership(s.now, &follower, &s.state);
    s.drain();
    let moved = Delivery::Fatal(ServerFrame::Moved { addr: Addr::new("10.9.9.9:1").unwrap() });
    assert_eq!(s.out.drain(..).map(|(_, c, d)| (c, d)).collect::<Vec<_>>(), vec![(ConnId(2), moved)]);
    assert_eq!(s.leader.timers_len(), 0, "no timer is left when not serving");
    // A request now is redirected.
    s.acquire(3, 3, "b", "o3", 0, 5);
    assert!(matches!(s.out.pop().unwrap().2, Delivery::Fatal(ServerFrame::Moved { .. })));
    // Serving again 1 s later: the lease ends at its domain-time end (granted
    // at dt 0 + 10 s; the domain clock restarts at the applied dt, 0).
    s.now += Duration::from_secs(1);
    s.leader.handle_leadership(s.now, &serving(2), &s.state);
    s.drain();
    s.acquire(3, 4, "a", "o4", 20, 5);
    s.advance(Duration::from_millis(9_999));
    assert!(s.out.is_empty());
    s.advance(Duration::from_millis(1));
    assert!(matches!(s.frames().as_slice(), [ServerFrame::Granted { id: RequestId(4), .. }]));
}

#[test]
fn timers_leave_with_their_holder_so_the_table_stays_bounded() {
    let mut s = Sim::new(Limits::default());
    for i in 0..20_000u64 {
        let key = format!("k{}", i % 7);
        s.acquire(1, 2 * i, &key, "owner", 0, 250);
        let token = s.granted();
        s.release(1, 2 * i + 1, &key, "owner", token);
        assert_eq!(s.frames().len(), 1);
        assert!(s.leader.timers_len() <= 1, "{} timers after {i} pairs", s.leader.timers_len());
        if i % 100 == 0 {
            s.advance(Duration::from_millis(1));
        }
    }
    assert_eq!(s.leader.timers_len(), 1, "only the tick");
}

#[test]
fn the_start_grace_queues_everything_and_grants_in_fifo_order_at_its_end() {
    let mut s = Sim::new(Limits { start_grace: Duration::from_secs(3), ..no_ticks() });
    s.acquire(1, 1, "a", "first", 10, 5);
    s.acquire(2, 2, "a", "second", 10, 5);
    s.acquire(3, 3, "a", "zero", 0, 5);
    s.acquire(3, 4, "b", "short", 1, 5);
    s.acquire(3, 5, "c", "c1", 10, 5);
    assert_eq!(s.frames(), vec![ServerFrame::Timeout { id: RequestId(3), key: k("a") }], "wait 0 → T");
    assert_eq!(s.leader.waiters(), 4);
    assert_eq!(s.leader.held(), 0, "nothing granted during the grace");
    s.advance(Duration::from_secs(1));
    assert_eq!(s.frames(), vec![ServerFrame::Timeout { id: RequestId(4), key: k("b") }], "wait timers run");
    s.advance(Duration::from_millis(1_999));
    assert!(s.frames().is_empty());
    s.advance(Duration::from_millis(1));
    let mut granted: Vec<_> = s
        .frames()
        .into_iter()
        .map(|f| match f {
            ServerFrame::Granted { id, owner, .. } => (id, owner),
            other => panic!("{other:?}"),
        })
        .collect();
    granted.sort();
    assert_eq!(granted, vec![(RequestId(1), o("first")), (RequestId(5), o("c1"))]);
    s.release(1, 6, "a", "first", s.state.holder(&k("a")).unwrap().token);
    let frames = s.frames();
    assert!(matches!(&frames[1], ServerFrame::Granted { id: RequestId(2), .. }), "FIFO after the grace: {frames:?}");
    // A grace is a new domain's: a leader taking over later does not wait again.
    s.leader.handle_leadership(s.now, &serving(2), &s.state);
    s.drain();
    s.acquire(1, 7, "d", "o", 0, 5);
    assert!(matches!(s.frames().as_slice(), [ServerFrame::Granted { id: RequestId(7), .. }]));
}

// ----- random histories -----------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// `kind` 0–3: exclusive (`A`); 4–6: counted with n = kind − 3 (`S`);
    /// 7: the key and the next one (`K`).
    Acquire {
        conn: u8,
        key: u8,
        wait: u8,
        lease: u8,
        kind: u8,
    },
    /// Release the `pick`-th grant ever delivered on `key` (so current and stale ones), or a made-up one.
    Release {
        conn: u8,
        key: u8,
        pick: u8,
    },
    Query {
        conn: u8,
        key: u8,
    },
    Commit,
    Fail {
        kind: u8,
        applied: bool,
    },
    Advance {
        ms: u16,
    },
    LeaveQueues {
        conn: u8,
    },
    Close {
        conn: u8,
    },
    /// A leadership change; the batches in flight are committed first
    /// (`commit_in_flight`) or lost, their outcomes reported later.
    Leadership {
        serving: bool,
        commit_in_flight: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3u8, 0..3u8, 0..4u8, 1..4u8, 0..8u8)
            .prop_map(|(conn, key, wait, lease, kind)| Op::Acquire { conn, key, wait, lease, kind }),
        3 => (0..3u8, 0..3u8, any::<u8>()).prop_map(|(conn, key, pick)| Op::Release { conn, key, pick }),
        1 => (0..3u8, 0..3u8).prop_map(|(conn, key)| Op::Query { conn, key }),
        6 => Just(Op::Commit),
        1 => (0..3u8, any::<bool>()).prop_map(|(kind, applied)| Op::Fail { kind, applied }),
        4 => (0..2500u16).prop_map(|ms| Op::Advance { ms }),
        1 => (0..3u8).prop_map(|conn| Op::LeaveQueues { conn }),
        1 => (0..3u8).prop_map(|conn| Op::Close { conn }),
        1 => (any::<bool>(), any::<bool>()).prop_map(|(serving, commit_in_flight)| Op::Leadership { serving, commit_in_flight }),
    ]
}

/// What the model remembers of one request.
#[derive(Debug, Clone)]
struct Sent {
    key: Key,
    acquire: bool,
    epoch: u64,
    answers: usize,
    /// An acquire's kind (its keys for a multi-key one).
    kind: GrantKind,
}

/// A delivered grant (of one key).
#[derive(Debug, Clone)]
struct Given {
    req: (ConnId, RequestId),
    owner: Owner,
    token: Token,
    /// A counted grant's slot and its request's n.
    counted: Option<(u16, u16)>,
    /// When its acquire was sent.
    at: Instant,
    lease: Duration,
    released: bool,
}

struct Model {
    sim: Sim,
    limits: Limits,
    /// The live connection of each slot.
    conns: [ConnId; 3],
    next_conn: u64,
    /// Closed connections, each with the number of deliveries made before its close.
    closed: HashMap<ConnId, usize>,
    next_req: u64,
    sent: BTreeMap<(ConnId, RequestId), Sent>,
    /// Every grant delivered, per key, in delivery order.
    grants: BTreeMap<Key, Vec<Given>>,
    /// Lease and send time of each acquire (the holder's conservative deadline
    /// runs from its send time, docs/client.md).
    leases: HashMap<(ConnId, RequestId), (u8, Instant)>,
    releases: HashMap<(ConnId, RequestId), (Key, Token)>,
    last_token: u64,
    epoch: u64,
    serving: bool,
    checked: usize,
}

impl Model {
    fn new() -> Model {
        let limits =
            Limits { max_waiters_per_key: 3, max_waiters: 5, max_held_keys: 2, tick_ms: 700, ..Limits::default() };
        let mut sim = Sim::new(limits.clone());
        sim.auto_commit = false;
        Model {
            sim,
            limits,
            conns: [ConnId(1), ConnId(2), ConnId(3)],
            next_conn: 4,
            closed: HashMap::new(),
            next_req: 0,
            sent: BTreeMap::new(),
            grants: BTreeMap::new(),
            leases: HashMap::new(),
            releases: HashMap::new(),
            last_token: 0,
            epoch: 1,
            serving: true,
            checked: 0,
        }
    }

    fn key(n: u8) -> Key {
        k(&format!("key{n}"))
    }

    fn send(&mut self, slot: u8, key: Key, r: impl FnOnce(RequestId) -> Request) {
        let conn = self.conns[usize::from(slot)];
        self.next_req += 1;
        let id = RequestId(self.next_req);
        let req = r(id);
        let acquire = matches!(req, Request::Acquire { .. });
        let kind = match &req {
            Request::Acquire { kind, .. } => kind.clone(),
            _ => GrantKind::Exclusive,
        };
        if let Request::Acquire { lease, read_at, .. } = &req {
            self.leases.insert((conn, id), (*lease, *read_at));
        }
        if let Request::Release { token, .. } = &req {
            self.releases.insert((conn, id), (key.clone(), *token));
        }
        self.sent.insert((conn, id), Sent { key, acquire, epoch: self.epoch, answers: 0, kind });
        self.sim.leader.handle_request(self.sim.now, conn, req);
        self.sim.drain();
    }

    fn close(&mut self, slot: usize) {
        let conn = self.conns[slot];
        self.sim.leader.handle_conn_closed(self.sim.now, conn);
        self.closed.insert(conn, self.sim.out.len());
        self.conns[slot] = ConnId(self.next_conn);
        self.sim.leader.handle_conn_opened(self.sim.now, ConnId(self.next_conn), "10.0.0.9:1".into());
        self.next_conn += 1;
        self.sim.drain();
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Acquire { conn, key, wait, lease, kind } => {
                let now = self.sim.now;
                let owner = o(&format!("owner-{conn}-{}", self.next_req + 1));
                let kind = match kind {
                    0..=3 => GrantKind::Exclusive,
                    4..=6 => GrantKind::Shared { n: u16::from(kind - 3) },
                    _ => GrantKind::All { keys: vec![Model::key(key), Model::key((key + 1) % 3)] },
                };
                self.send(conn, Model::key(key), |id| Request::Acquire {
                    id,
                    key: Model::key(key),
                    kind,
                    owner,
                    wait,
                    lease,
                    read_at: now,
                });
            }
            Op::Release { conn, key, pick } => {
                let given = self.grants.entry(Model::key(key)).or_default();
                let n = given.len() + 1;
                let (owner, token) = match given.get_mut(usize::from(pick) % n) {
                    Some(g) => {
                        // Its holder stops relying on the grant once it sends `R`.
                        g.released = true;
                        (g.owner.clone(), g.token)
                    }
                    None => (o("nobody"), Token::new(u64::from(pick) + 1).unwrap()),
                };
                self.send(conn, Model::key(key), |id| Request::Release { id, key: Model::key(key), owner, token });
            }
            Op::Query { conn, key } => {
                self.send(conn, Model::key(key), |id| Request::Holds { id, key: Model::key(key), owner: o("q") })
            }
            Op::Commit => {
                self.sim.commit();
            }
            Op::Fail { kind, applied } => {
                let kind = [ProposeErrorKind::Unknown, ProposeErrorKind::NotLeader, ProposeErrorKind::Shutdown]
                    [usize::from(kind)];
                self.sim.fail(kind, applied);
            }
            Op::Advance { ms } => self.sim.advance(Duration::from_millis(u64::from(ms))),
            Op::LeaveQueues { conn } => {
                let c = self.conns[usize::from(conn)];
                self.sim.leader.handle_leave_queues(self.sim.now, c);
                self.sim.drain();
            }
            Op::Close { conn } => self.close(usize::from(conn)),
            Op::Leadership { serving, commit_in_flight } => {
                // A batch in flight across the change commits before the new
                // term reads the applied state, or is lost; either way its
                // outcome arrives later, in the new term.
                for b in std::mem::take(&mut self.sim.pending) {
                    let outcome = if commit_in_flight {
                        Ok(self.sim.state.apply_all(&b.cmds))
                    } else {
                        Err(replication::ProposeError::Unknown)
                    };
                    self.sim.resolved.push_back((b.id, outcome));
                }
                if serving != self.serving || serving {
                    self.epoch += 1;
                }
                self.serving = serving;
                let l = Leadership { serving, active: true, leader: None, epoch: self.epoch };
                self.sim.leader.handle_leadership(self.sim.now, &l, &self.sim.state);
                self.sim.drain();
                self.observe();
                // Every connection notices the change and closes (conn.rs).
                for slot in 0..3 {
                    self.close(slot);
                }
            }
        }
        self.observe();
    }

    /// Checks every new delivery and the leader's state.
    fn observe(&mut self) {
        while self.checked < self.sim.out.len() {
            let (at, conn, d) = self.sim.out[self.checked].clone();
            if let Some(before) = self.closed.get(&conn) {
                // Written before the close were dropped with the connection; none may come after.
                assert!(self.checked < *before, "delivery to a closed connection: {d:?}");
                self.checked += 1;
                continue;
            }
            self.checked += 1;
            match d {
                Delivery::Fatal(_) => {
                    // The connection closes: its requests are over.
                    let slot = self.conns.iter().position(|c| *c == conn).expect("a live connection");
                    self.close(slot);
                }
                Delivery::Reply { id, frame } => self.answered(at, conn, id, &frame),
                Delivery::Dropped(id) => self.answered(at, conn, id, &ServerFrame::NotHolder { id, key: k("x") }),
            }
        }
        let l = &self.sim.leader;
        assert!(l.held() <= self.limits.max_held_keys, "held-keys cap");
        // An acquire of a free key whose no-op release is being committed
        // waits uncapped (it queues behind no one: tests/matrix.rs), at most
        // one per key: the model has 3 keys.
        assert!(l.waiters() <= self.limits.max_waiters + 3, "waiters cap");
        for n in 0..3 {
            let q = l.lock_info(self.sim.now, &Model::key(n)).waiters.len();
            assert!(q <= self.limits.max_waiters_per_key, "per-key waiters cap");
        }
        assert!(l.timers_len() <= l.held() + l.waiters() + 2, "timers beyond the state");
    }

    fn answered(&mut self, at: Instant, conn: ConnId, id: RequestId, frame: &ServerFrame) {
        let sent = self.sent.get_mut(&(conn, id)).expect("an answer to a request that was sent");
        sent.answers += 1;
        assert_eq!(sent.answers, 1, "request {id} on {conn} answered twice: {frame:?}");
        let (key, acquire, epoch) = (sent.key.clone(), sent.acquire, sent.epoch);
        let kind = self.sent[&(conn, id)].kind.clone();
        let granted = match frame {
            ServerFrame::Granted { key: gk, token, owner, .. } => Some((gk, token, owner, None)),
            ServerFrame::GrantedShared { key: gk, token, owner, slot, .. } => Some((gk, token, owner, Some(*slot))),
            _ => None,
        };
        if let Some((gk, token, owner, slot)) = granted {
            assert!(acquire && *gk == key);
            assert!(token.get() > self.last_token, "tokens strictly increase (one per grant)");
            self.last_token = token.get();
            let (keys, counted) = match &kind {
                GrantKind::Exclusive => (vec![key.clone()], None),
                GrantKind::Shared { n } => {
                    let slot = slot.expect("a counted grant is answered G");
                    assert!(slot < *n, "slot {slot} of n = {n}");
                    (vec![key.clone()], Some((slot, *n)))
                }
                GrantKind::All { keys } => (keys.clone(), None),
            };
            assert_eq!(slot.is_some(), counted.is_some(), "G answers S only");
            let (lease, sent_at) = self.leases[&(conn, id)];
            let lease = Duration::from_secs(u64::from(lease));
            assert!(at >= sent_at);
            for key in keys {
                let grants = self.grants.entry(key.clone()).or_default();
                // The holders at `at`: every earlier grant not released
                // whose holder's conservative deadline (its send time +
                // lease) has not passed.
                let live: Vec<&Given> = grants.iter().filter(|g| !g.released && at < g.at + g.lease).collect();
                match counted {
                    None => assert!(live.is_empty(), "{key} granted exclusively to {owner:?} while {:?} hold it", live),
                    Some((slot, n)) => {
                        assert!(live.iter().all(|g| g.counted.is_some()), "{key}: counted beside an exclusive holder");
                        assert!(live.len() < usize::from(n), "{key}: more than n = {n} counted holders");
                        assert!(live.iter().all(|g| g.counted.map(|c| c.0) != Some(slot)), "{key}: slot {slot} twice");
                    }
                }
                // FIFO: no earlier-sent acquire of the same key and epoch is granted after a later one.
                if let Some(prev) = grants.last() {
                    let prev_epoch = self.sent[&prev.req].epoch;
                    if prev_epoch == epoch {
                        assert!(prev.req.1 < id, "FIFO: {id} granted after {} on {key}", prev.req.1);
                    }
                }
                let given = Given {
                    req: (conn, id),
                    owner: owner.clone(),
                    token: *token,
                    counted,
                    at: sent_at,
                    lease,
                    released: false,
                };
                grants.push(given);
            }
        }
        if let ServerFrame::Released { key: rk, .. } = frame {
            let (k2, token) = self.releases[&(conn, id)].clone();
            assert_eq!(*rk, k2);
            let g = self.grants.get(&k2).and_then(|gs| gs.iter().find(|g| g.token == token));
            assert!(g.is_some_and(|g| g.released), "`R` only for a grant that was given and released");
        }
    }

    /// Lets everything finish, then checks every request was answered once
    /// (or its connection closed) and the projection matches the state.
    fn finish(&mut self) {
        for _ in 0..1000 {
            if !self.sim.commit() {
                self.sim.advance(Duration::from_secs(1));
                self.observe();
                if self.sim.pending.is_empty() && self.sim.resolved.is_empty() && self.sim.leader.waiters() == 0 {
                    break;
                }
            }
            self.observe();
        }
        while self.sim.commit() {
            self.observe();
        }
        for ((conn, id), s) in &self.sent {
            assert!(s.answers == 1 || self.closed.contains_key(conn), "request {id} on {conn} never answered: {s:?}");
        }
        if self.serving {
            for n in 0..3 {
                let key = Model::key(n);
                let got: Vec<_> =
                    self.sim.leader.lock_info(self.sim.now, &key).holders.iter().map(|h| (h.token, h.slot)).collect();
                let want: Vec<_> = self.sim.state.holders_of(&key).iter().map(|h| (h.token, h.slot)).collect();
                assert_eq!(got, want, "projection of {key}");
            }
        }
        self.sim.leader.check();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random histories keep every invariant (see the module docs).
    #[test]
    fn random_histories_keep_the_invariants(ops in proptest::collection::vec(op(), 1..120)) {
        let mut m = Model::new();
        for op in &ops {
            m.apply(op);
        }
        m.finish();
    }
}
