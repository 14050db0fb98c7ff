//! The leader's lock logic (docs/protocol.md §4–6, docs/architecture.md), as
//! a pure state machine: no I/O, no async runtime, no clock reads and no
//! queues to other tasks. Times come in as arguments (`now`), effects come
//! out of `poll_*` methods; the server's manager task
//! ([`crate::manager`]) is a thin driver around it.
//!
//! **Inputs** (`handle_*`): a connection opened ([`Leader::handle_conn_opened`]),
//! a request ([`Leader::handle_request`]), a connection leaving its queues
//! (EOF, [`Leader::handle_leave_queues`]) or gone ([`Leader::handle_conn_closed`]),
//! a committed (or failed) batch ([`Leader::handle_committed`]), a leadership
//! change ([`Leader::handle_leadership`]), time passing ([`Leader::handle_timeout`]),
//! a graceful shutdown ([`Leader::handle_drain`]).
//!
//! **Outputs** (`poll_*`, drain them after every input, in this order):
//! [`Leader::poll_delivery`] (answers, pushes and closes for connections)
//! until `None`; then [`Leader::poll_proposal`] (the next batch for the
//! replicator) — a batch committed at once is fed back with
//! [`Leader::handle_committed`] and the deliveries drained again; last
//! [`Leader::poll_timeout`], the earliest deadline of the one timer table,
//! when [`Leader::handle_timeout`] is next due.
//!
//! Invariants:
//! - Nothing is answered `A`, `R` or `N` before its command is committed.
//! - At most one proposal per key is in flight; requests for that key that
//!   need a proposal wait for it, so a release and an expiry of the same
//!   grant can never both take effect, and hand-over happens in the same
//!   command as the release/expiry.
//! - One timer table ([`timers`]) holds every wait and lease timer, the
//!   `Tick` and the end of the start grace; a timer leaves with its waiter
//!   or holder, so the table is bounded by held keys + waiters + 2.
//! - Every operation costs O(1) or O(log n); nothing scans all keys except
//!   a leadership change (the projection is rebuilt from the applied state,
//!   docs/protocol.md §6, "A new leader") and the end of the start grace.

pub mod contention;
mod io;
pub mod projection;
mod proposals;
pub mod stats;
pub mod timers;
mod view;

#[cfg(test)]
mod tests;

pub use io::{ConnId, Delivery, Request, WaiterId};
pub use proposals::{Batch, BatchId, MAX_BATCHES_IN_FLIGHT, MAX_BATCH_BYTES, MAX_BATCH_COMMANDS};
pub use view::{owner_prefix, HolderInfo, LockInfo, WaiterInfo};

use crate::config::Limits;
use crate::domain_time::{self, DomainClock};
use crate::locks::{GrantKind, Holder, LockState};
use crate::replication::{self, Leadership};
use projection::{Grant, Projection, QueuedQuery, QueuedRelease, Waiter};
use proposals::Outbox;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use ticketing_proto::{Addr, Key, Owner, RequestId, ServerFrame};
use timers::TimerKind;
use tracing::{debug, warn};

/// The applied (replicated) holders, read when the projection must follow
/// them after a surprise or a failed proposal.
pub trait AppliedView {
    /// Every applied holder of `key`.
    fn applied_holders(&self, key: &Key) -> Vec<Holder>;
    /// The applied exclusive holders whose key has the hash `hash`
    /// ([`crate::locks::key_hash`]).
    fn applied_by_hash(&self, hash: u64) -> Vec<(Key, Holder)>;
}

impl AppliedView for LockState {
    fn applied_holders(&self, key: &Key) -> Vec<Holder> {
        self.holders_of(key)
    }
    fn applied_by_hash(&self, hash: u64) -> Vec<(Key, Holder)> {
        self.exclusive_by_hash(hash)
    }
}

/// A wall clock: microseconds since the Unix epoch.
pub type WallClock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system's wall clock, for [`Leader::new`].
pub fn system_wall() -> WallClock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    })
}

/// The leader (see the module docs).
pub struct Leader {
    limits: Limits,
    /// What it counted since the driver last took it.
    stats: stats::Stats,
    /// The wall clock (µs since the Unix epoch), read when a command needs it.
    wall: WallClock,
    advertise: Addr,
    /// The latest `now` given to an input.
    now: Instant,
    proj: Projection,
    /// Registered connections and their client addresses (for `/locks/<key>`).
    clients: HashMap<ConnId, String>,
    /// The domain clock while serving (docs/protocol.md, "Domain time").
    clock: Option<DomainClock>,
    /// When the last command was proposed (a `Tick` follows after `tick_ms` of silence).
    last_proposed: Instant,
    /// A `Tick` is being committed.
    tick_in_flight: bool,
    /// The leadership epoch we serve; `None` when not serving.
    epoch: Option<u64>,
    leader: Option<Addr>,
    /// Commands proposed and not yet answered (outbox included).
    in_flight: usize,
    /// Commands proposed and not yet handed to the replicator.
    outbox: Outbox,
    /// Batches handed to the replicator and not yet finished.
    batches: Vec<proposals::InFlight>,
    next_batch: u64,
    draining: bool,
    /// The domain time (ms) before which nothing is granted: the start grace
    /// of a new domain (docs/deployment.md, "Start grace"); 0 for none.
    grace_dt: u64,
    deliveries: VecDeque<(ConnId, Delivery)>,
}

impl Leader {
    /// A leader that serves nothing until [`Leader::handle_leadership`]
    /// says so. `advertise` is this node's client address (never named in
    /// a redirect, see [`replication::redirect`]).
    /// `wall` is the wall clock the tokens of new grants start from
    /// (docs/protocol.md, "Tokens"): the system's in the server
    /// ([`system_wall`]), a simulated one in tests.
    pub fn new(limits: Limits, advertise: Addr, now: Instant, wall: WallClock) -> Leader {
        let grace_dt = u64::try_from(limits.start_grace.as_millis()).unwrap_or(u64::MAX);
        Leader {
            limits,
            stats: stats::Stats::default(),
            wall,
            advertise,
            now,
            proj: Projection::new(),
            clients: HashMap::new(),
            clock: None,
            last_proposed: now,
            tick_in_flight: false,
            epoch: None,
            leader: None,
            in_flight: 0,
            outbox: Outbox::default(),
            batches: Vec::new(),
            next_batch: 0,
            draining: false,
            grace_dt,
            deliveries: VecDeque::new(),
        }
    }

    /// What it counted since the last call (the driver exports it).
    pub fn take_stats(&mut self) -> stats::Stats {
        std::mem::take(&mut self.stats)
    }

    /// Sets the number of projected keys above which a key that is only
    /// held leaves the projection (default [`projection::DORMANT_ABOVE`];
    /// tests and the fuzz target use 0 to take that path always).
    pub fn set_dormant_above(&mut self, n: usize) {
        self.proj.set_dormant_above(n);
    }

    fn advance(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    // ----- outputs ----------------------------------------------------------

    /// The next delivery for a connection. Call after every input until it
    /// returns `None`; deliveries of one connection come out in the order
    /// they must be written.
    #[must_use]
    pub fn poll_delivery(&mut self) -> Option<(ConnId, Delivery)> {
        self.deliveries.pop_front()
    }

    /// The earliest timer deadline: call [`Leader::handle_timeout`] then.
    /// Ask again after every input (inputs arm and disarm timers).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timer = self.proj.timers().next();
        let dormant = self.proj.first_dormant().zip(self.clock).map(|((end_dt, _), c)| c.instant_of(end_dt, self.now));
        match (timer, dormant) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ----- queries ----------------------------------------------------------

    /// Gives each dormant key of `keys` its projection entry back.
    fn hydrate(&mut self, keys: &[Key], applied: &dyn AppliedView) {
        let Some(clock) = self.clock else { return };
        if self.proj.dormant() == 0 {
            return;
        }
        for key in keys {
            if !self.proj.knows(key) {
                self.proj.hydrate(key, applied.applied_holders(key), &clock, self.now);
            }
        }
    }

    /// The dormant keys whose lease ended by `now` get their entries back
    /// and are expired like any other.
    fn expire_dormant(&mut self, applied: &dyn AppliedView) {
        let Some(clock) = self.clock else { return };
        let dt = clock.dt_at(self.now);
        while let Some(entry @ (end_dt, hash)) = self.proj.first_dormant() {
            if end_dt > dt {
                break;
            }
            let mut found = false;
            for (key, h) in applied.applied_by_hash(hash) {
                if h.end_dt() == end_dt && self.proj.hydrate(&key, vec![h], &clock, self.now) {
                    found = true;
                    self.pump(&key);
                    break;
                }
            }
            if !found {
                warn!(end_dt, "a dormant held key is not in the applied state: no longer counted as held");
                self.proj.drop_dormant(entry);
            }
        }
    }

    /// The `n` keys with the most live waiters now, most first (the console).
    pub fn contended(&self, n: usize) -> Vec<(Key, usize)> {
        self.proj.contended(n)
    }

    /// Draining ([`Leader::handle_drain`]) and nothing is in flight any more.
    pub fn is_drained(&self) -> bool {
        self.draining && self.in_flight == 0
    }

    /// Holders over all keys (a counted holder is one), grants being committed included.
    pub fn held(&self) -> usize {
        self.proj.held()
    }

    /// Waiters queued over all keys (a multi-key waiter once per key).
    pub fn waiters(&self) -> usize {
        self.proj.waiters()
    }

    /// Keys this leader granted to principal `name` that are still held,
    /// grants being committed included (its `max_held_keys` is checked
    /// against this; grants of an earlier leader count for nobody).
    pub fn held_of(&self, name: &str) -> usize {
        self.proj.held_of(name)
    }

    /// Waiters of principal `name` (a multi-key waiter once per key).
    pub fn waiters_of(&self, name: &str) -> usize {
        self.proj.waiters_of(name)
    }

    /// Held keys the projection keeps no entry for (their holders are read
    /// from the applied state when touched).
    pub fn dormant(&self) -> usize {
        self.proj.dormant()
    }

    /// Timers armed (bounded by held keys + waiters + 2): the timer table
    /// and the lease ends of dormant keys.
    pub fn timers_len(&self) -> usize {
        self.proj.timers().len() + self.proj.dormant()
    }

    /// Commands proposed and not yet finished (the outbox included).
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The leadership epoch served, if serving.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// Checks every internal count against a recount and every timer
    /// against the state it belongs to; panics on a mismatch (tests and
    /// the fuzz target; O(state)).
    pub fn check(&self) {
        self.proj.check();
        let batched: usize = self.batches.iter().map(proposals::InFlight::len).sum();
        assert_eq!(self.in_flight, self.outbox.len() + batched, "in_flight");
        assert!(self.batches.len() <= MAX_BATCHES_IN_FLIGHT, "batches in flight");
        for kind in self.proj.timers().kinds() {
            if matches!(kind, TimerKind::Tick | TimerKind::GraceEnd) {
                assert!(self.epoch.is_some(), "{kind:?} armed while not serving");
            }
        }
    }

    // ----- plumbing ---------------------------------------------------------

    fn send(&mut self, conn: ConnId, delivery: Delivery) {
        if self.clients.contains_key(&conn) {
            self.deliveries.push_back((conn, delivery));
        }
    }

    fn reply(&mut self, conn: ConnId, id: RequestId, frame: ServerFrame) {
        self.send(conn, Delivery::Reply { id, frame });
    }

    /// Answers `w` with `T` (its wait ended without a grant).
    fn time_out(&mut self, w: Waiter) {
        self.stats.timeouts += 1;
        self.reply(w.conn, w.id, ServerFrame::Timeout { id: w.id, key: w.key });
    }

    /// Answers request `id` on `key` with `B` (a limit is reached).
    fn refuse_busy(&mut self, conn: ConnId, id: RequestId, key: Key) {
        self.stats.busy += 1;
        self.reply(conn, id, ServerFrame::Busy { id, key });
    }

    /// `M <leader>` or `E no_leader`, by the one rule of [`replication::redirect`].
    fn redirect_frame(&self, leader: Option<&Addr>) -> ServerFrame {
        replication::redirect(leader, &self.advertise)
    }

    /// Puts `w` at the tail of its key's queue, with a wait timer if `timed`.
    fn enqueue(&mut self, w: Waiter, timed: bool) {
        if !self.clients.contains_key(&w.conn) {
            return; // the connection closed meanwhile: its waiters leave anyway
        }
        self.proj.enqueue(w, timed);
    }

    /// Puts a waiter that was taken off for a hand-over back at the head of
    /// its queues (the hand-over did not happen) — unless its wait is over or
    /// its connection is gone.
    fn put_back(&mut self, w: Waiter) {
        if w.wait_until <= self.now {
            self.time_out(w);
            return;
        }
        if !self.clients.contains_key(&w.conn) || self.epoch.is_none() {
            return;
        }
        self.proj.requeue_front(w);
    }

    /// The start grace is running: nothing is granted (docs/deployment.md, "Start grace").
    fn in_grace(&self) -> bool {
        self.clock.is_some_and(|c| c.dt_at(self.now) < self.grace_dt)
    }

    // ----- inputs -----------------------------------------------------------

    /// A connection finished its handshake; `client` is its `ip:port`
    /// (shown for its waiters in `/locks/<key>`). Only registered
    /// connections get deliveries.
    pub fn handle_conn_opened(&mut self, now: Instant, conn: ConnId, client: String) {
        self.advance(now);
        self.clients.insert(conn, client);
    }

    /// The connection sent EOF: its waiters leave their queues, each
    /// reported as [`Delivery::Dropped`]; answers to its requests already
    /// being committed are still delivered.
    pub fn handle_leave_queues(&mut self, now: Instant, conn: ConnId) {
        self.advance(now);
        let gone = self.proj.remove_conn_waiters(conn);
        for w in &gone {
            self.send(conn, Delivery::Dropped(w.id));
        }
        self.after_waiters_left(&gone);
    }

    /// Waiters left their queues: a waiter behind them may have become
    /// grantable (a counted one behind an exclusive one, or one behind a
    /// multi-key waiter), so their keys are looked at again.
    fn after_waiters_left(&mut self, gone: &[Waiter]) {
        if self.epoch.is_none() {
            return;
        }
        for w in gone {
            for key in w.keys() {
                self.pump(key);
            }
        }
    }

    /// The connection is gone: its waiters leave their queues (with their
    /// timers; its grants stay) and it gets no more deliveries.
    pub fn handle_conn_closed(&mut self, now: Instant, conn: ConnId) {
        self.advance(now);
        if self.clients.remove(&conn).is_some() {
            let gone = self.proj.remove_conn_waiters(conn);
            self.after_waiters_left(&gone);
        }
    }

    /// Graceful shutdown: no new request is served (none is answered; the
    /// connection says `E shutting_down`); [`Leader::is_drained`] once
    /// nothing is in flight.
    pub fn handle_drain(&mut self) {
        self.draining = true;
    }

    /// Whether a new request from `conn` is served: not while draining (no
    /// answer), and not without a serving epoch (the connection gets
    /// `M`/`E no_leader` and closes).
    fn accepts_requests(&mut self, conn: ConnId) -> bool {
        if self.draining {
            return false;
        }
        if self.epoch.is_none() {
            let frame = self.redirect_frame(self.leader.as_ref());
            self.send(conn, Delivery::Fatal(frame));
            return false;
        }
        true
    }

    /// A request from the registered connection `conn`.
    pub fn handle_request(&mut self, now: Instant, conn: ConnId, request: Request, applied: &dyn AppliedView) {
        self.advance(now);
        if !self.accepts_requests(conn) {
            return;
        }
        match &request {
            Request::Holds { key, .. } | Request::Release { key, .. } => {
                self.hydrate(std::slice::from_ref(key), applied)
            }
            Request::Acquire { kind: GrantKind::All { keys }, .. } => self.hydrate(keys, applied),
            Request::Acquire { key, .. } => self.hydrate(std::slice::from_ref(key), applied),
        }
        match request {
            Request::Holds { id, key, owner } => {
                if self.proj.is_busy(&key) {
                    // A grant (or hand-over) of this key is being committed:
                    // answer by its outcome (see `pump`).
                    self.proj.push_query(&key, QueuedQuery { conn, id, owner });
                } else {
                    self.answer_query(conn, id, &key, &owner);
                }
            }
            Request::Acquire { id, key, kind, owner, wait, lease, read_at, principal } => {
                let wait_until = read_at + Duration::from_secs(u64::from(wait));
                let cap = principal.as_ref().and_then(|p| p.max_waiters);
                let held_cap = principal.as_ref().and_then(|p| p.max_held_keys);
                let principal = principal.map(|p| p.name);
                let w = Waiter { conn, id, key, owner, lease, read_at, wait_until, kind, principal, held_cap };
                self.acquire(w, wait, cap);
            }
            Request::Release { id, key, owner, token } => {
                self.proj.push_release(&key, QueuedRelease { conn, id, owner, token });
                self.pump(&key);
            }
        }
    }

    /// `cap`: the waiters its principal may have queued (docs/security.md,
    /// "Several teams: principals").
    fn acquire(&mut self, w: Waiter, wait: u8, cap: Option<usize>) {
        let keys = w.keys().to_vec();
        // Grantable now: nobody queued on any of its keys and compatible
        // with their holders (docs/protocol.md, "A key's holders"). A key
        // can still have a proposal in flight: the no-op release of an `R`
        // that matches no grant (docs/protocol.md §6). The grant is then the
        // key's next command. During the start grace nothing is grantable:
        // every acquire queues.
        let grantable =
            !self.in_grace() && keys.iter().all(|k| self.proj.queued(k) == 0 && self.proj.compatible(k, &w.kind));
        if grantable {
            if self.proj.held() + keys.len() > self.limits.max_held_keys {
                self.refuse_busy(w.conn, w.id, w.key.clone());
                self.forget_idle(&keys);
                return;
            }
            if self.over_held_cap(&w, 0) {
                self.refuse_principal_busy(&w);
                self.forget_idle(&keys);
                return;
            }
            if keys.iter().any(|k| self.proj.is_busy(k)) {
                // Neither `T` (nothing holds it against this request) nor a
                // waiter cap (it is not queued behind anyone): it goes first
                // once the proposal is committed (see `pump`); a wait of 0
                // gets no timer.
                self.enqueue(w, wait > 0);
            } else {
                self.grant(w);
            }
            return;
        }
        if wait == 0 {
            self.time_out(w);
            self.forget_idle(&keys);
            return;
        }
        let per_key_full = keys.iter().any(|k| self.proj.queued(k) >= self.limits.max_waiters_per_key);
        if per_key_full || self.proj.waiters() + keys.len() > self.limits.max_waiters {
            self.refuse_busy(w.conn, w.id, w.key.clone());
            self.forget_idle(&keys);
            return;
        }
        // Its principal's held keys are checked when it is handed its keys
        // (`take_run`): a hand-over from the same principal takes a place.
        if let (Some(name), Some(cap)) = (&w.principal, cap) {
            if self.proj.waiters_of(name) + keys.len() > cap {
                self.refuse_principal_busy(&w);
                self.forget_idle(&keys);
                return;
            }
        }
        self.enqueue(w, true);
    }

    /// Whether granting `w` its keys would take its principal beyond its
    /// `max_held_keys` (docs/security.md, "Several teams: principals"): the
    /// keys this leader granted it, minus `leaving` of them whose place `w`
    /// takes (a hand-over from the same principal).
    fn over_held_cap(&self, w: &Waiter, leaving: usize) -> bool {
        match (&w.principal, w.held_cap) {
            (Some(name), Some(cap)) => self.proj.held_of(name).saturating_sub(leaving) + w.keys().len() > cap,
            _ => false,
        }
    }

    /// Answers `w` with `B` for one of its principal's caps.
    fn refuse_principal_busy(&mut self, w: &Waiter) {
        if let Some(name) = &w.principal {
            *self.stats.principal_busy.entry(name.to_string()).or_default() += 1;
        }
        self.refuse_busy(w.conn, w.id, w.key.clone());
    }

    fn forget_idle(&mut self, keys: &[Key]) {
        for k in keys {
            self.proj.remove_if_idle(k);
        }
    }

    /// Time passed: every timer due at `now` fires (waits end with `T`,
    /// leases are expired, a `Tick` is proposed, the grace ends).
    pub fn handle_timeout(&mut self, now: Instant, applied: &dyn AppliedView) {
        self.advance(now);
        let now = self.now;
        self.expire_dormant(applied);
        while let Some(timer) = self.proj.timers_mut().pop_due(now) {
            match timer {
                TimerKind::Wait(wid) => {
                    if let Some(w) = self.proj.remove_waiter(wid) {
                        let keys = w.keys().to_vec();
                        self.time_out(w);
                        for key in &keys {
                            self.pump(key);
                        }
                    }
                }
                TimerKind::Lease(key) => self.pump(&key),
                TimerKind::Tick => self.on_tick_timer(now),
                TimerKind::GraceEnd => {
                    debug!("start grace over: granting the queued waiters in FIFO order");
                    for key in self.proj.keys_with_waiters() {
                        self.pump(&key);
                    }
                }
            }
        }
    }

    /// What this node knows about leadership changed. `applied` is the
    /// applied state (read only when this node starts serving a new epoch:
    /// every held lock is kept until its domain-time lease end).
    pub fn handle_leadership(&mut self, now: Instant, l: &Leadership, applied: &LockState) {
        self.advance(now);
        let now = self.now;
        self.leader = l.leader.clone();
        let serving_epoch = if l.serving && l.active { Some(l.epoch) } else { None };
        if serving_epoch == self.epoch {
            return;
        }
        self.discard_outbox();
        // Stepping down, or a new term: every waiter is dropped (their
        // connections are closed with `M`/`E no_leader`), with every timer.
        // A new term starts its domain clock at the largest applied domain
        // time and keeps every held lock until `granted_dt + lease` in
        // domain time (docs/protocol.md, "Domain time").
        let frame = self.redirect_frame(self.leader.as_ref());
        for w in self.proj.clear() {
            self.send(w.conn, Delivery::Fatal(frame.clone()));
        }
        self.epoch = serving_epoch;
        self.clock = None;
        if self.epoch.is_some() {
            let applied_dt = applied.domain_time();
            let start_dt = if crate::mutation::on("domain-time-jump") { applied_dt + 250_000 } else { applied_dt };
            let clock = DomainClock::start(start_dt, now);
            self.clock = Some(clock);
            for (key, h) in applied.holders() {
                self.proj.add_applied(&key, h, &clock, now);
            }
            self.last_proposed = now;
            let tick = self.tick();
            self.proj.timers_mut().set(TimerKind::Tick, now + tick);
            if applied_dt < self.grace_dt {
                // A new domain: nothing is granted before domain time reaches the grace.
                let end = clock.instant_of(self.grace_dt, now);
                self.proj.timers_mut().set(TimerKind::GraceEnd, end);
                debug!(grace_ms = self.grace_dt - applied_dt, "start grace: nothing is granted before it ends");
            }
            debug!(
                epoch = l.epoch,
                held = self.proj.held(),
                applied_dt,
                "serving: leases kept until their domain-time end"
            );
        }
    }

    /// The domain time at `now` (0 when not serving).
    fn domain_now(&self, now: Instant) -> u64 {
        self.clock.map_or(0, |c| c.dt_at(now))
    }

    fn tick(&self) -> Duration {
        Duration::from_millis(self.limits.tick_ms)
    }

    /// Commits a `Tick` when nothing was proposed for `tick_ms`; re-arms.
    fn on_tick_timer(&mut self, now: Instant) {
        if self.epoch.is_none() {
            return;
        }
        if !self.draining && !self.tick_in_flight && domain_time::tick_due(self.last_proposed, now, self.tick()) {
            self.propose_tick();
        }
        let next = (self.last_proposed + self.tick()).max(now + Duration::from_millis(1));
        let next = if self.tick_in_flight { next.max(now + self.tick()) } else { next };
        self.proj.timers_mut().set(TimerKind::Tick, next);
    }

    /// `H` when `owner` holds `key` (remaining by domain time), else `N`.
    fn answer_query(&mut self, conn: ConnId, id: RequestId, key: &Key, owner: &Owner) {
        let mine = self.proj.holders(key).iter().filter(|h| h.owner == *owner);
        let held = mine.map(|h| h.grant).find(|g| matches!(g, Grant::Committed { .. }));
        let frame = match held {
            Some(Grant::Committed { token, deadline, .. }) => {
                let left = deadline.saturating_duration_since(self.now).as_millis();
                ServerFrame::Held {
                    id,
                    key: key.clone(),
                    owner: owner.clone(),
                    token,
                    remaining_ms: u32::try_from(left).unwrap_or(u32::MAX),
                }
            }
            _ => ServerFrame::NotHolder { id, key: key.clone() },
        };
        self.stats.queries += 1;
        self.reply(conn, id, frame);
        self.proj.remove_if_idle(key);
    }
}
