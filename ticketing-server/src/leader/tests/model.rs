//! The leader against a model: random histories of requests (exclusive,
//! counted and multi-key acquires, releases, queries), commits, failures,
//! time, closes and leadership changes, every delivery checked.

use super::*;

/// The principal of the first two connections, and its caps.
const TEAM: &str = "team";
const TEAM_WAITERS: usize = 2;
const TEAM_HELD: usize = 1;

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
    /// `dormant`: every idle held key leaves the projection (else none does).
    fn new(dormant: bool) -> Model {
        let limits =
            Limits { max_waiters_per_key: 3, max_waiters: 5, max_held_keys: 2, tick_ms: 700, ..Limits::default() };
        let mut sim = Sim::new(limits.clone());
        sim.auto_commit = false;
        if !dormant {
            sim.leader.set_dormant_above(usize::MAX);
        }
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
        self.sim.leader.handle_request(self.sim.now, conn, req, &self.sim.state);
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
                    // The first two connections belong to a principal with
                    // caps of its own (docs/security.md, "Several teams: principals").
                    principal: (conn < 2).then(|| crate::principal::PrincipalCap {
                        name: TEAM.into(),
                        max_waiters: Some(TEAM_WAITERS),
                        max_held_keys: Some(TEAM_HELD),
                    }),
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
            let q = l.lock_info(self.sim.now, &Model::key(n), &self.sim.state).waiters.len();
            assert!(q <= self.limits.max_waiters_per_key, "per-key waiters cap");
        }
        assert!(l.timers_len() <= l.held() + l.waiters() + 2, "timers beyond the state");
        // The principal's own caps (its count: the projection's `check`).
        assert!(l.held_of(TEAM) <= TEAM_HELD, "the principal's held-keys cap");
        // As for `waiters`: one uncapped waiter per key behind a no-op release.
        assert!(l.waiters_of(TEAM) <= TEAM_WAITERS + 3, "the principal's waiters cap");
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
                let got: Vec<_> = self
                    .sim
                    .leader
                    .lock_info(self.sim.now, &key, &self.sim.state)
                    .holders
                    .iter()
                    .map(|h| (h.token, h.slot))
                    .collect();
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
    fn random_histories_keep_the_invariants(ops in proptest::collection::vec(op(), 1..120), dormant in any::<bool>()) {
        let mut m = Model::new(dormant);
        for op in &ops {
            m.apply(op);
        }
        m.finish();
    }
}
