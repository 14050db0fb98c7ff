//! The leader on a simulated clock, with a [`LockState`] as its replicator:
//! unit tests of its rules, and a proptest of random histories (requests
//! from several connections, commits, failed and delayed batches,
//! leadership changes, closes and time) checked against the invariants of
//! docs/protocol.md §4–6.

use super::*;
use crate::locks::GrantKind;
use crate::metrics::Metrics;
use crate::test_fields::{k, o, t0};
use proptest::prelude::*;
use std::collections::BTreeMap;
use ticketing_proto::limits::TOKEN_MAX;
use ticketing_proto::{ErrorCode, Token};

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
        let mut leader = Leader::new(limits, Addr::new(ME).unwrap(), now, system_wall());
        // Every idle held key leaves the projection, so each test also checks
        // the dormant path (docs/benchmarks.md, "Optimizations: memory").
        leader.set_dormant_above(0);
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
        self.metrics.record_leader(self.leader.take_stats());
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
        self.leader.handle_request(self.now, ConnId(conn), r, &self.state);
        self.drain();
    }

    fn acquire(&mut self, conn: u64, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
        self.acquire_by(None, conn, id, key, owner, wait, lease);
    }

    /// `A` from a connection of principal `cap.name`, with its caps.
    #[allow(clippy::too_many_arguments)]
    fn acquire_as(&mut self, cap: &PrincipalCap, conn: u64, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
        self.acquire_by(Some(cap.clone()), conn, id, key, owner, wait, lease);
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire_by(
        &mut self,
        principal: Option<PrincipalCap>,
        conn: u64,
        id: u64,
        key: &str,
        owner: &str,
        wait: u8,
        lease: u8,
    ) {
        let r = Request::Acquire {
            id: RequestId(id),
            key: k(key),
            kind: GrantKind::Exclusive,
            owner: o(owner),
            wait,
            lease,
            read_at: self.now,
            principal,
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
            self.leader.handle_timeout(self.now, &self.state);
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
    let info = s.leader.lock_info(s.now, &k("a"), &s.state);
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
fn a_dormant_key_is_shown_released_and_expired_from_the_applied_state() {
    // The Sim lets every idle held key go dormant (`set_dormant_above(0)`).
    let mut s = Sim::new(no_ticks());
    s.acquire(1, 1, "a", "o1", 0, 5);
    let t1 = s.granted();
    s.acquire(1, 2, "b", "o2", 0, 3);
    let t2 = s.granted();
    assert_eq!((s.leader.held(), s.leader.dormant()), (2, 2));
    let info = s.leader.lock_info(s.now, &k("a"), &s.state);
    assert_eq!(info.holder.as_ref().map(|h| (h.token, h.remaining_ms)), Some((t1, 5_000)));
    // A conflicting acquire sees the holder; a query too.
    s.acquire(2, 3, "a", "o3", 0, 5);
    assert_eq!(s.frames(), vec![ServerFrame::Timeout { id: RequestId(3), key: k("a") }]);
    s.request(2, Request::Holds { id: RequestId(4), key: k("b"), owner: o("o2") });
    let want = ServerFrame::Held { id: RequestId(4), key: k("b"), owner: o("o2"), token: t2, remaining_ms: 3_000 };
    assert_eq!(s.frames(), vec![want]);
    // The release of a dormant key frees it.
    s.release(1, 5, "a", "o1", t1);
    assert_eq!(s.frames(), vec![ServerFrame::Released { id: RequestId(5), key: k("a") }]);
    assert_eq!(s.state.holder(&k("a")), None);
    // b's lease ends from the dormant index, at its end.
    s.advance(Duration::from_millis(2_999));
    assert!(s.state.holder(&k("b")).is_some());
    s.advance(Duration::from_millis(1));
    assert_eq!(s.state.holder(&k("b")), None, "expired at its lease end");
    assert_eq!((s.leader.held(), s.leader.dormant(), s.leader.timers_len()), (0, 0, 1));
}

#[test]
fn a_new_term_keeps_a_large_applied_state_dormant() {
    let mut state = LockState::new();
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        let g = crate::locks::Command::Grant {
            key: k(key),
            owner: o(&format!("o{i}")),
            lease_s: 2,
            micros: 10 + i as u64,
            dt: 500,
        };
        state.apply(&g);
    }
    let mut s = Sim::with_state(no_ticks(), state);
    assert_eq!((s.leader.held(), s.leader.dormant()), (3, 3));
    let t = s.state.holder(&k("b")).unwrap().token;
    s.acquire(1, 1, "b", "x", 3, 5);
    assert!(s.frames().is_empty(), "queued behind the dormant holder");
    // Leases run to granted_dt + 2 s in domain time (the term starts at 500).
    s.advance(Duration::from_millis(1_999));
    assert!(s.frames().is_empty());
    s.advance(Duration::from_millis(1));
    let frames = s.frames();
    assert!(
        matches!(frames.as_slice(), [ServerFrame::Granted { id: RequestId(1), token, .. }] if *token > t),
        "{frames:?}"
    );
    assert_eq!(s.state.holder(&k("a")), None);
    assert_eq!((s.leader.held(), s.leader.dormant()), (1, 1), "b's new holder is dormant in its turn");
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

use crate::principal::PrincipalCap;

fn team(held: usize) -> PrincipalCap {
    PrincipalCap { name: "team".into(), max_waiters: None, max_held_keys: Some(held) }
}

fn principal_busy(s: &Sim, name: &str) -> u64 {
    s.metrics.principal_busy.get_or_create(&vec![("principal".to_owned(), name.to_owned())]).get()
}

#[test]
fn a_principal_at_its_held_keys_cap_gets_b_and_a_release_frees_a_place() {
    let mut s = Sim::new(no_ticks());
    let (team, ops) = (team(2), PrincipalCap { name: "ops".into(), max_waiters: None, max_held_keys: None });
    s.acquire_as(&team, 1, 1, "a", "o1", 0, 5);
    let ta = s.granted();
    s.acquire_as(&team, 2, 2, "b", "o2", 0, 5);
    s.granted();
    // Dormant keys (every idle held key here) still count for their principal.
    assert_eq!((s.leader.held_of("team"), s.leader.dormant()), (2, 2));
    s.acquire_as(&team, 1, 3, "c", "o1", 0, 5);
    assert_eq!(s.frames(), vec![ServerFrame::Busy { id: RequestId(3), key: k("c") }]);
    // A multi-key acquire counts each of its keys.
    s.request(
        1,
        Request::Acquire {
            id: RequestId(4),
            key: k("c"),
            kind: GrantKind::All { keys: vec![k("c"), k("d")] },
            owner: o("o1"),
            wait: 0,
            lease: 5,
            read_at: s.now,
            principal: Some(team.clone()),
        },
    );
    assert_eq!(s.frames(), vec![ServerFrame::Busy { id: RequestId(4), key: k("c") }]);
    assert_eq!((principal_busy(&s, "team"), s.metrics.busy.get()), (2, 2));
    // Another principal, and a connection without one, are not held back.
    s.acquire_as(&ops, 3, 5, "c", "o3", 0, 5);
    s.granted();
    s.acquire(3, 6, "e", "o3", 0, 5);
    s.granted();
    assert_eq!((s.leader.held_of("team"), s.leader.held_of("ops"), s.leader.held()), (2, 1, 4));
    // A release frees a place.
    s.release(1, 7, "a", "o1", ta);
    assert_eq!(s.frames(), vec![ServerFrame::Released { id: RequestId(7), key: k("a") }]);
    assert_eq!(s.leader.held_of("team"), 1);
    s.acquire_as(&team, 1, 8, "f", "o1", 0, 5);
    s.granted();
    // So does a lease's end.
    s.advance(Duration::from_secs(5));
    assert_eq!((s.leader.held_of("team"), s.leader.held()), (0, 0));
}

#[test]
fn a_hand_over_is_checked_against_the_principals_cap_and_its_own_freed_key_makes_room() {
    let mut s = Sim::new(no_ticks());
    let team = team(1);
    let ops = PrincipalCap { name: "ops".into(), max_waiters: None, max_held_keys: None };
    s.acquire_as(&team, 1, 1, "a", "o1", 0, 30);
    let ta = s.granted();
    // At its cap, a waiter of the team still queues for a key it holds: the
    // hand-over gives the team's place to it.
    s.acquire_as(&team, 2, 2, "a", "o2", 10, 30);
    assert!(s.out.is_empty());
    s.release(1, 3, "a", "o1", ta);
    let frames = s.frames();
    assert_eq!(frames[0], ServerFrame::Released { id: RequestId(3), key: k("a") });
    assert!(matches!(frames[1], ServerFrame::Granted { id: RequestId(2), .. }), "{frames:?}");
    assert_eq!(s.leader.held_of("team"), 1);
    // A key of another principal handed to the team at its cap: `B`, and
    // the next waiter gets it.
    s.acquire_as(&ops, 3, 4, "x", "ox", 0, 30);
    let tx = s.granted();
    s.acquire_as(&team, 1, 5, "x", "o1", 10, 30);
    s.acquire_as(&ops, 3, 6, "x", "oy", 10, 30);
    assert!(s.out.is_empty());
    s.release(3, 7, "x", "ox", tx);
    let frames = s.frames();
    assert!(frames.contains(&ServerFrame::Busy { id: RequestId(5), key: k("x") }), "{frames:?}");
    assert!(frames.iter().any(|f| matches!(f, ServerFrame::Granted { id: RequestId(6), .. })), "{frames:?}");
    assert_eq!((s.leader.held_of("team"), s.leader.held_of("ops"), principal_busy(&s, "team")), (1, 1, 1));
}

#[test]
fn grants_of_an_earlier_leader_count_for_nobody() {
    let mut s = Sim::new(no_ticks());
    let team = team(1);
    s.acquire_as(&team, 1, 1, "a", "o1", 0, 30);
    s.granted();
    // A new term reads the holders from the replicated state, which does
    // not know principals: "a" stays held but counts for nobody.
    s.now += Duration::from_secs(1);
    s.leader.handle_leadership(s.now, &serving(2), &s.state);
    s.drain();
    assert_eq!((s.leader.held(), s.leader.held_of("team")), (1, 0));
    s.acquire_as(&team, 1, 2, "b", "o1", 0, 30);
    s.granted();
    s.acquire_as(&team, 1, 3, "c", "o1", 0, 30);
    assert_eq!(s.frames(), vec![ServerFrame::Busy { id: RequestId(3), key: k("c") }]);
    // Until its lease ends (here with b's: the domain clock restarted at
    // the applied domain time).
    s.advance(Duration::from_millis(29_999));
    assert_eq!((s.leader.held(), s.leader.held_of("team")), (2, 1));
    s.advance(Duration::from_millis(1));
    assert_eq!((s.leader.held(), s.leader.held_of("team")), (0, 0));
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
    assert_eq!(s.leader.lock_info(s.now, &k("x"), &s.state).domain_time_ms, 65);
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

mod model;
