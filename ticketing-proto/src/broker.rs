//! The connection pool and routing of SPEC §6.1 around [`Session`]s and the
//! [`Lane`], as one pure state machine: the whole client behaviour of §6
//! except sockets, TLS and the clock.
//!
//! # Driving it
//! ```text
//! loop {
//!     while let Some(t) = broker.poll_transmit() { write t.data to connection t.conn }
//!     while let Some(e) = broker.poll_event()    { Connect → open a transport, Disconnect → drop it,
//!                                                  Acquired/Released → complete the caller }
//!     sleep until broker.poll_timeout(), a command, or input; then one of
//!         broker.handle_input(now, conn, bytes) | broker.handle_conn_lost(now, conn)
//!         broker.handle_timeout(now) | broker.acquire(now, ..) | broker.release(now, ..)
//!         broker.cancel(now, op) | broker.close(now)
//! }
//! ```
//! Drain `poll_transmit` before `poll_event` after every mutation: bytes
//! handed out by `poll_transmit` count as possibly written.
//!
//! # Rules that live here
//! - one connection slot per configured address, two when exactly one is
//!   configured; per-slot reconnect backoff 0.1 s doubling to 3.2 s, reset by a
//!   successful handshake, straight to 3.2 s after `auth_failed`/`not_active`;
//! - the leader hint (from `OK leader`, `M`, `L`, only for configured
//!   addresses, exact match; `E no_leader` resets it) and each connection's role;
//! - routing: a ready leader connection (round-robin), else round-robin over
//!   ready connections that are not known followers; never a known follower;
//! - an acquire that finds no connection waits within its `wait` budget and
//!   never longer (then `Unavailable`, or `AuthFailed` when authentication is
//!   what failed); `wait` 0 is one immediate routing attempt, so right after
//!   the broker is built (no handshake done yet) it fails at once — wait for
//!   [`Broker::is_ready`] first (what `connect` and `wait_ready` do);
//!   an unsent acquire is re-routed when its session dies; a possibly-sent one
//!   ends `Indeterminate` and is never resent;
//! - the conservative deadline check (§6.3 step 4), compensations through the
//!   lane, cancellation (§6.3 step 7), close (§6.4).

use crate::deadline::{self, Verdict};
use crate::field::{Addr, Hex32, Key, Owner, Role, Token};
use crate::lane::{self, ExactGrant, Lane, Outcome, Purpose};
pub use crate::op::OpId;
use crate::params::{self, AcquireParams};
use crate::session::{Answer, CancelOutcome, CloseReason, Closed, Request, Session, SessionConfig, SessionEvent};
use crate::timer::TimerTable;
use bytes::Bytes;
use rand_core::RngCore;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

/// First reconnect delay.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Backoff doublings before the cap (0.1 · 2⁵ = 3.2 s).
pub const BACKOFF_MAX_STEP: u32 = 5;

/// Reconnect delay after `step` consecutive failures: 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 3.2 … s.
pub fn backoff_delay(step: u32) -> Duration {
    BACKOFF_INITIAL * (1u32 << step.min(BACKOFF_MAX_STEP))
}

/// Settings of a broker.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Configured addresses (`host:port`); also the leader-hint allowlist.
    pub addrs: Vec<String>,
    /// Shared client token (empty: auth off).
    pub token: Vec<u8>,
    /// Session timing.
    pub session: SessionConfig,
    /// Release lane capacity (entries queued + in flight).
    pub lane_capacity: usize,
    /// Requests in flight per connection (the server's `max_pending_per_conn`).
    pub max_pending_per_conn: usize,
    /// Of those, slots reserved for the release lane (acquires never use them).
    pub lane_slots_per_conn: usize,
}

impl BrokerConfig {
    /// Defaults of SPEC §6 for `addrs` and `token`.
    pub fn new(addrs: Vec<String>, token: impl Into<Vec<u8>>) -> BrokerConfig {
        BrokerConfig {
            addrs,
            token: token.into(),
            session: SessionConfig::default(),
            lane_capacity: lane::DEFAULT_CAPACITY,
            max_pending_per_conn: crate::limits::MAX_PENDING_PER_CONN,
            lane_slots_per_conn: 64,
        }
    }

    /// Checks the addresses: at least one, each `host:port` in visible ASCII.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.addrs.is_empty() {
            return Err(ConfigError::NoAddress);
        }
        for a in &self.addrs {
            if Addr::new(a.clone()).is_err() {
                return Err(ConfigError::AddressText { addr: a.clone() });
            }
            match a.rsplit_once(':') {
                Some((host, port)) if !host.is_empty() && port.parse::<u16>().map(|p| p > 0).unwrap_or(false) => {}
                _ => return Err(ConfigError::AddressPort { addr: a.clone() }),
            }
        }
        if self.lane_capacity == 0
            || self.max_pending_per_conn < self.lane_slots_per_conn + 2
            || self.lane_slots_per_conn == 0
        {
            return Err(ConfigError::Limits);
        }
        Ok(())
    }
}

/// A bad [`BrokerConfig`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No address was given.
    NoAddress,
    /// An address is not 1–255 visible ASCII bytes.
    AddressText {
        /// The address given.
        addr: String,
    },
    /// An address is not `host:port` with a port in 1–65535.
    AddressPort {
        /// The address given.
        addr: String,
    },
    /// The lane capacity, lane slots and in-flight limit do not fit together.
    Limits,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoAddress => f.write_str("at least one address is required"),
            ConfigError::AddressText { addr } => {
                write!(f, "address {addr:?} must be 1-255 visible ASCII bytes (host:port)")
            }
            ConfigError::AddressPort { addr } => {
                write!(f, "address {addr:?} must be host:port with a port in 1-65535")
            }
            ConfigError::Limits => f.write_str("inconsistent lane or pending limits"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One transport (a connection attempt) of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// A grant that became a ticket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The acquire that produced it.
    pub id: OpId,
    /// Key.
    pub key: Key,
    /// Owner (fresh per acquire).
    pub owner: Owner,
    /// Fencing token.
    pub token: Token,
    /// Conservative deadline (§6.3 step 4).
    pub deadline: Instant,
}

impl Grant {
    /// The exact (key, owner, token) to release.
    pub fn exact(&self) -> ExactGrant {
        ExactGrant { key: self.key.clone(), owner: self.owner.clone(), token: self.token }
    }
}

/// Why an operation failed. Exhaustive on purpose: every driver maps each
/// failure to its own error, and a new one must be mapped consciously.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// `B`: refused for capacity; final.
    Busy,
    /// Possibly sent, no definite answer: the lock may have been granted.
    Indeterminate,
    /// Granted with less than the budget left; the lane releases it.
    InsufficientTime,
    /// No ready connection within the budget; nothing was sent.
    Unavailable,
    /// Authentication failed (bad token, or a server that cannot prove it knows it).
    AuthFailed,
    /// No final answer to a release within 5 s, or the lane was full.
    ReleaseUnconfirmed,
    /// The broker is closed.
    Closed,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Failure::Busy => "busy: refused for capacity",
            Failure::Indeterminate => "indeterminate: possibly sent, no definite answer",
            Failure::InsufficientTime => "insufficient time: granted with less than the budget left",
            Failure::Unavailable => "unavailable: no ready connection within the budget",
            Failure::AuthFailed => "auth failed",
            Failure::ReleaseUnconfirmed => "release unconfirmed: no final answer within 5 s",
            Failure::Closed => "closed",
        })
    }
}

impl std::error::Error for Failure {}

/// What the broker asks of its driver, and what it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerEvent {
    /// Open a transport (TCP, then TLS if configured) to `addr`; feed what it
    /// reads with `handle_input(conn, ..)` and its end with `handle_conn_lost(conn)`.
    Connect {
        /// The new connection's id.
        conn: ConnId,
        /// `host:port`.
        addr: String,
    },
    /// Drop the transport `conn` (its session is over).
    Disconnect {
        /// The connection.
        conn: ConnId,
    },
    /// The result of [`Broker::acquire`] `op`.
    Acquired {
        /// The operation.
        op: OpId,
        /// A ticket, `None` for `T`, or a failure.
        result: Result<Option<Grant>, Failure>,
    },
    /// The result of an explicit [`Broker::release`] `op`.
    Released {
        /// The operation.
        op: OpId,
        /// `R` → true, `N` → false, or a failure.
        result: Result<bool, Failure>,
    },
    /// A compensating or best-effort release ended (for logs).
    LaneDone {
        /// What was released.
        grant: ExactGrant,
        /// Why it was in the lane.
        purpose: Purpose,
        /// How it ended.
        outcome: Outcome,
    },
    /// A session ended (for logs).
    SessionEnded {
        /// The connection.
        conn: ConnId,
        /// Its address.
        addr: String,
        /// Why.
        reason: CloseReason,
    },
    /// [`Broker::close`] has finished: every transport is dropped.
    Closed,
}

/// Bytes for one transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The connection.
    pub conn: ConnId,
    /// The bytes.
    pub data: Bytes,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Timer {
    Retry(usize),
    Session(ConnId),
    Budget(OpId),
    Lane,
    CloseGrace,
}

#[derive(Debug)]
struct Conn {
    id: ConnId,
    session: Session,
    role: Option<Role>,
}

#[derive(Debug)]
struct Slot {
    addr: String,
    conn: Option<Conn>,
    step: u32,
    auth_failed: bool,
    /// The slot's first connection attempt since the broker was built has not
    /// settled yet (neither ready nor failed).
    first_attempt: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpState {
    Waiting,
    Sent(ConnId),
}

#[derive(Debug)]
struct AcquireOp {
    key: Key,
    owner: Owner,
    wait: u8,
    lease: u8,
    budget: Duration,
    budget_deadline: Instant,
    state: OpState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    Closing,
    Closed,
}

/// The client core: pool, routing, sessions, lane (see the module docs).
pub struct Broker {
    config: BrokerConfig,
    rng: Box<dyn RngCore + Send>,
    slots: Vec<Slot>,
    conn_slot: HashMap<ConnId, usize>,
    next_conn: u64,
    next_op: u64,
    ops: HashMap<OpId, AcquireOp>,
    waiting: VecDeque<OpId>,
    lane: Lane<ConnId>,
    live: HashMap<OpId, ExactGrant>,
    hint: Option<String>,
    /// Round-robin positions: `[acquires, lane releases]`. Separate, so releases in
    /// between never shift the acquires' rotation (and vice versa).
    rr: [usize; 2],
    timers: TimerTable<Timer>,
    events: VecDeque<BrokerEvent>,
    phase: Phase,
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("addrs", &self.config.addrs)
            .field("ready", &self.is_ready())
            .field("hint", &self.hint)
            .field("ops", &self.ops.len())
            .field("lane", &self.lane.len())
            .field("phase", &self.phase)
            .finish()
    }
}

impl Broker {
    /// A broker at `now`; asks at once (as events) for one transport per slot.
    /// `rng` must be a CSPRNG: it makes the handshake nonces and the owners.
    pub fn new(now: Instant, config: BrokerConfig, rng: Box<dyn RngCore + Send>) -> Result<Broker, ConfigError> {
        config.validate()?;
        let mut addrs = config.addrs.clone();
        if addrs.len() == 1 {
            addrs.push(addrs[0].clone());
        }
        let slots = addrs
            .into_iter()
            .map(|addr| Slot { addr, conn: None, step: 0, auth_failed: false, first_attempt: true })
            .collect();
        let lane = Lane::new(config.lane_capacity);
        let mut b = Broker {
            config,
            rng,
            slots,
            conn_slot: HashMap::new(),
            next_conn: 1,
            next_op: 1,
            ops: HashMap::new(),
            waiting: VecDeque::new(),
            lane,
            live: HashMap::new(),
            hint: None,
            rr: [0; 2],
            timers: TimerTable::new(),
            events: VecDeque::new(),
            phase: Phase::Open,
        };
        for i in 0..b.slots.len() {
            b.connect(now, i);
        }
        Ok(b)
    }

    /// True when a request could be routed now (a ready connection that is not a known follower).
    pub fn is_ready(&self) -> bool {
        self.slots.iter().any(|s| matches!(&s.conn, Some(c) if c.session.is_ready() && c.role != Some(Role::Follower)))
    }

    /// True once every slot's first connection attempt since the broker was
    /// built has settled (its handshake completed, or it failed), or the
    /// broker is no longer open. With [`Broker::is_ready`], what `connect`
    /// waits for: whichever comes first.
    pub fn first_attempts_settled(&self) -> bool {
        self.phase != Phase::Open || self.slots.iter().all(|s| !s.first_attempt)
    }

    /// True when some slot's last handshake failed authentication (a wrong
    /// token, or a server that could not prove it knows it).
    pub fn auth_failing(&self) -> bool {
        self.slots.iter().any(|s| s.auth_failed)
    }

    /// The current leader hint, if any.
    pub fn leader_hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// Number of live tickets (granted, not yet released).
    pub fn live_tickets(&self) -> usize {
        self.live.len()
    }

    /// True once [`Broker::close`] has finished.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Starts an acquire (SPEC §6.3): a fresh owner, then routing within the
    /// `wait` budget. The result comes as [`BrokerEvent::Acquired`].
    pub fn acquire(&mut self, now: Instant, params: &AcquireParams) -> OpId {
        let op = self.alloc_op();
        if self.phase != Phase::Open {
            self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::Closed) });
            return op;
        }
        let owner = params::owner(&mut &mut *self.rng);
        let budget_deadline = now + Duration::from_secs(u64::from(params.wait));
        self.ops.insert(
            op,
            AcquireOp {
                key: params.key.clone(),
                owner,
                wait: params.wait,
                lease: params.lease,
                budget: Duration::from_secs(u64::from(params.budget)),
                budget_deadline,
                state: OpState::Waiting,
            },
        );
        self.waiting.push_back(op);
        self.timers.set(Timer::Budget(op), budget_deadline);
        self.dispatch(now);
        // `wait` 0 (or a budget already spent): one routing attempt, no waiting.
        if self.ops.get(&op).map(|o| o.state) == Some(OpState::Waiting) && budget_deadline <= now {
            self.expire_waiting(op);
        }
        op
    }

    /// Releases a ticket's exact grant through the lane. `Explicit` results
    /// come as [`BrokerEvent::Released`]; a full lane or a closed broker fails
    /// at once (`Err`, nothing enqueued).
    pub fn release(&mut self, now: Instant, grant: &Grant, purpose: Purpose) -> Result<OpId, Failure> {
        if self.phase != Phase::Open {
            return Err(Failure::Closed);
        }
        self.live.remove(&grant.id);
        let op = self.alloc_op();
        match self.lane.enqueue(now, op, grant.exact(), purpose) {
            Ok(()) => {
                self.dispatch(now);
                self.sync_lane_timer();
                Ok(op)
            }
            Err(lane::LaneFull) => {
                if purpose != Purpose::Explicit {
                    self.events.push_back(BrokerEvent::LaneDone {
                        grant: grant.exact(),
                        purpose,
                        outcome: Outcome::Unconfirmed,
                    });
                }
                Err(Failure::ReleaseUnconfirmed)
            }
        }
    }

    /// Cancels acquire `op` (SPEC §6.3 step 7): an unsent one just disappears;
    /// for a possibly-sent one the session is closed (its other possibly-sent
    /// acquires become Indeterminate). No event is reported for `op`.
    pub fn cancel(&mut self, now: Instant, op: OpId) {
        let Some(a) = self.ops.remove(&op) else { return };
        self.timers.clear(Timer::Budget(op));
        match a.state {
            OpState::Waiting => self.waiting.retain(|w| *w != op),
            OpState::Sent(conn) => {
                let Some(&slot) = self.conn_slot.get(&conn) else { return };
                let Some(c) = self.slots[slot].conn.as_mut() else { return };
                match c.session.cancel(op) {
                    CancelOutcome::Unsent | CancelOutcome::NotFound => {}
                    CancelOutcome::PossiblySent => {
                        c.session.close(CloseReason::Cancelled);
                        self.after_session(now, slot);
                    }
                }
                self.sync_session_timer(slot);
                self.dispatch(now);
            }
        }
    }

    /// A grant the caller could not take (e.g. its result had nowhere to go):
    /// release it through the lane as a compensation.
    pub fn compensate(&mut self, now: Instant, grant: &Grant) {
        self.live.remove(&grant.id);
        self.enqueue_compensation(now, grant.exact());
        self.dispatch(now);
    }

    /// Closes the broker: pending and future acquires fail with `Closed`, live
    /// tickets get best-effort releases; once the lane is empty (at most 5 s)
    /// every transport is dropped and [`BrokerEvent::Closed`] is reported.
    pub fn close(&mut self, now: Instant) {
        if self.phase != Phase::Open {
            return;
        }
        self.phase = Phase::Closing;
        let mut ops: Vec<OpId> = self.ops.keys().copied().collect();
        ops.sort();
        for op in ops {
            // A grant for a sent one that still arrives is compensated (unknown op).
            self.ops.remove(&op);
            self.timers.clear(Timer::Budget(op));
            self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::Closed) });
        }
        self.waiting.clear();
        let mut live: Vec<(OpId, ExactGrant)> = self.live.drain().collect();
        live.sort_by_key(|(id, _)| *id);
        for (_, g) in live {
            let op = self.alloc_op();
            if self.lane.enqueue(now, op, g.clone(), Purpose::BestEffort).is_err() {
                self.events.push_back(BrokerEvent::LaneDone {
                    grant: g,
                    purpose: Purpose::BestEffort,
                    outcome: Outcome::Unconfirmed,
                });
            }
        }
        self.timers.set(Timer::CloseGrace, now + lane::DEADLINE);
        self.dispatch(now);
        self.sync_lane_timer();
        self.maybe_finish_close();
    }

    /// Bytes read from transport `conn`.
    pub fn handle_input(&mut self, now: Instant, conn: ConnId, data: &[u8]) {
        let Some(&slot) = self.conn_slot.get(&conn) else { return };
        if let Some(c) = self.slots[slot].conn.as_mut() {
            c.session.handle_input(now, data);
        }
        self.after_session(now, slot);
        self.dispatch(now);
    }

    /// Transport `conn` ended (EOF, I/O error, connect or TLS failure).
    pub fn handle_conn_lost(&mut self, now: Instant, conn: ConnId) {
        let Some(&slot) = self.conn_slot.get(&conn) else { return };
        if let Some(c) = self.slots[slot].conn.as_mut() {
            c.session.handle_closed();
        }
        self.after_session(now, slot);
        self.dispatch(now);
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(timer) = self.timers.pop_expired(now) {
            match timer {
                Timer::Retry(slot) => {
                    if self.phase != Phase::Closed {
                        self.connect(now, slot);
                    }
                }
                Timer::Session(conn) => {
                    if let Some(&slot) = self.conn_slot.get(&conn) {
                        if let Some(c) = self.slots[slot].conn.as_mut() {
                            c.session.handle_timeout(now);
                        }
                        self.after_session(now, slot);
                    }
                }
                Timer::Budget(op) => {
                    if self.ops.get(&op).map(|o| o.state) == Some(OpState::Waiting) {
                        // One last chance: a connection may be ready right now.
                        self.dispatch(now);
                        if self.ops.get(&op).map(|o| o.state) == Some(OpState::Waiting) {
                            self.expire_waiting(op);
                        }
                    }
                }
                Timer::Lane => {
                    self.lane.handle_timeout(now);
                    self.drain_lane();
                    self.sync_lane_timer();
                }
                Timer::CloseGrace => self.finish_close(),
            }
        }
        self.dispatch(now);
    }

    /// Bytes to write on one transport. Call after every mutation until `None`.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        for s in &mut self.slots {
            if let Some(c) = s.conn.as_mut() {
                if let Some(data) = c.session.poll_transmit() {
                    return Some(Transmit { conn: c.id, data });
                }
            }
        }
        None
    }

    /// The next event. Call after [`Broker::poll_transmit`] until `None`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<BrokerEvent> {
        self.events.pop_front()
    }

    /// When [`Broker::handle_timeout`] must be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    // -- internals ----------------------------------------------------------

    /// Marks the first attempt of `slot` as settled (ready or failed).
    fn settle_first_attempt(&mut self, slot: usize) {
        self.slots[slot].first_attempt = false;
    }

    fn alloc_op(&mut self) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        op
    }

    fn connect(&mut self, now: Instant, slot: usize) {
        if self.slots[slot].conn.is_some() {
            return;
        }
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        let mut cnonce = [0u8; 32];
        self.rng.fill_bytes(&mut cnonce);
        let session = Session::new(now, self.config.session.clone(), &self.config.token, Hex32(cnonce));
        self.slots[slot].conn = Some(Conn { id, session, role: None });
        self.conn_slot.insert(id, slot);
        self.events.push_back(BrokerEvent::Connect { conn: id, addr: self.slots[slot].addr.clone() });
        self.sync_session_timer(slot);
    }

    fn sync_session_timer(&mut self, slot: usize) {
        if let Some(c) = &self.slots[slot].conn {
            self.timers.set_opt(Timer::Session(c.id), c.session.poll_timeout());
        }
    }

    fn sync_lane_timer(&mut self) {
        self.timers.set_opt(Timer::Lane, self.lane.poll_timeout());
    }

    fn allowlisted(&self, addr: &Addr) -> bool {
        self.config.addrs.iter().any(|a| a.as_bytes() == addr.as_bytes())
    }

    /// Drains the session of `slot` into broker state and events.
    fn after_session(&mut self, now: Instant, slot: usize) {
        loop {
            let Some(c) = self.slots[slot].conn.as_mut() else { return };
            let conn = c.id;
            let Some(ev) = c.session.poll_event() else { break };
            match ev {
                SessionEvent::Ready { role } => {
                    c.role = Some(role);
                    self.settle_first_attempt(slot);
                    let s = &mut self.slots[slot];
                    s.step = 0;
                    s.auth_failed = false;
                    if role == Role::Leader {
                        self.hint = Some(s.addr.clone());
                    }
                }
                SessionEvent::Leader(addr) => {
                    if self.allowlisted(&addr) {
                        let own = self.slots[slot].addr.as_bytes() == addr.as_bytes();
                        if let Some(c) = self.slots[slot].conn.as_mut() {
                            c.role = Some(if own { Role::Leader } else { Role::Follower });
                        }
                        self.hint = Some(addr.as_str().to_owned());
                    }
                }
                SessionEvent::Answer { op, answer } => self.on_answer(now, op, answer),
                SessionEvent::OrphanGrant { key, owner, token } => {
                    self.enqueue_compensation(now, ExactGrant { key, owner, token });
                }
                SessionEvent::Closed(closed) => {
                    self.on_session_closed(now, slot, conn, closed);
                    return;
                }
            }
        }
        self.sync_session_timer(slot);
    }

    fn on_answer(&mut self, now: Instant, op: OpId, answer: Answer) {
        if self.lane.contains(op) {
            match answer {
                Answer::Released => self.lane.answer(op, true),
                Answer::NotHolder => self.lane.answer(op, false),
                _ => {}
            }
            self.drain_lane();
            self.sync_lane_timer();
            return;
        }
        let Some(a) = self.ops.remove(&op) else {
            // The caller is gone (closed): a grant it will never see is compensated.
            if let Answer::Granted { key, owner, token, .. } = answer {
                self.enqueue_compensation(now, ExactGrant { key, owner, token });
            }
            return;
        };
        self.timers.clear(Timer::Budget(op));
        let result = match answer {
            Answer::Granted { token, waited_ms, t_send, .. } => {
                match deadline::check(t_send, waited_ms, a.lease, a.budget, now) {
                    Verdict::Ticket { deadline } => {
                        let grant = Grant { id: op, key: a.key, owner: a.owner, token, deadline };
                        self.live.insert(op, grant.exact());
                        Ok(Some(grant))
                    }
                    Verdict::InsufficientTime => {
                        self.enqueue_compensation(now, ExactGrant { key: a.key, owner: a.owner, token });
                        Err(Failure::InsufficientTime)
                    }
                }
            }
            Answer::Timeout => Ok(None),
            Answer::Busy => Err(Failure::Busy),
            Answer::Released | Answer::NotHolder => Err(Failure::Indeterminate),
        };
        self.events.push_back(BrokerEvent::Acquired { op, result });
    }

    fn on_session_closed(&mut self, now: Instant, slot: usize, conn: ConnId, closed: Closed) {
        self.settle_first_attempt(slot);
        self.timers.clear(Timer::Session(conn));
        self.conn_slot.remove(&conn);
        self.slots[slot].conn = None;
        let addr = self.slots[slot].addr.clone();
        match &closed.reason {
            CloseReason::Moved(a) if self.allowlisted(a) => self.hint = Some(a.as_str().to_owned()),
            CloseReason::NoLeader => self.hint = None,
            _ => {}
        }
        {
            let s = &mut self.slots[slot];
            if closed.reason.backoff_to_cap() {
                s.step = BACKOFF_MAX_STEP;
            }
            s.auth_failed = closed.reason == CloseReason::AuthFailed;
            let delay = backoff_delay(s.step);
            s.step = (s.step + 1).min(BACKOFF_MAX_STEP);
            if self.phase != Phase::Closed {
                self.timers.set(Timer::Retry(slot), now + delay);
            }
        }
        self.events.push_back(BrokerEvent::Disconnect { conn });
        self.events.push_back(BrokerEvent::SessionEnded { conn, addr, reason: closed.reason.clone() });

        // Unsent requests: acquires go back to the router, releases to the lane.
        let mut back: Vec<OpId> = Vec::new();
        for (op, req) in closed.unsent {
            match req {
                Request::Acquire { .. } => {
                    if let Some(a) = self.ops.get_mut(&op) {
                        a.state = OpState::Waiting;
                        self.timers.set(Timer::Budget(op), a.budget_deadline);
                        back.push(op);
                    }
                }
                Request::Release { .. } => self.lane.requeue(op, None),
            }
        }
        back.sort();
        for op in back.into_iter().rev() {
            self.waiting.push_front(op);
        }
        // Possibly sent: acquires are Indeterminate (never resent), releases retry.
        for (op, req) in closed.possibly_sent {
            match req {
                Request::Acquire { .. } => {
                    if self.ops.remove(&op).is_some() {
                        self.timers.clear(Timer::Budget(op));
                        self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::Indeterminate) });
                    }
                }
                Request::Release { .. } => self.lane.requeue(op, Some(conn)),
            }
        }
        // Waiting acquires whose budget already ran out while they were in flight.
        let expired: Vec<OpId> = self
            .waiting
            .iter()
            .copied()
            .filter(|op| self.ops.get(op).map(|a| a.budget_deadline <= now).unwrap_or(false))
            .collect();
        if closed.reason == CloseReason::AuthFailed && self.auth_failing_everywhere() {
            let all: Vec<OpId> = self.waiting.drain(..).collect();
            for op in all {
                self.ops.remove(&op);
                self.timers.clear(Timer::Budget(op));
                self.events.push_back(BrokerEvent::Acquired { op, result: Err(Failure::AuthFailed) });
            }
        } else {
            // Give them one routing attempt first (another connection may be ready).
            self.dispatch(now);
            for op in expired {
                if self.ops.get(&op).map(|o| o.state) == Some(OpState::Waiting) {
                    self.expire_waiting(op);
                }
            }
        }
        self.sync_lane_timer();
    }

    /// Every slot's last handshake failed authentication and none is ready.
    fn auth_failing_everywhere(&self) -> bool {
        !self.is_ready()
            && self
                .slots
                .iter()
                .all(|s| s.auth_failed && s.conn.as_ref().map(|c| !c.session.is_ready()).unwrap_or(true))
    }

    fn expire_waiting(&mut self, op: OpId) {
        if self.ops.remove(&op).is_none() {
            return;
        }
        self.waiting.retain(|w| *w != op);
        self.timers.clear(Timer::Budget(op));
        let failure = if self.slots.iter().any(|s| s.auth_failed) { Failure::AuthFailed } else { Failure::Unavailable };
        self.events.push_back(BrokerEvent::Acquired { op, result: Err(failure) });
    }

    fn enqueue_compensation(&mut self, now: Instant, grant: ExactGrant) {
        if self.phase == Phase::Closed {
            self.events.push_back(BrokerEvent::LaneDone {
                grant,
                purpose: Purpose::Compensation,
                outcome: Outcome::Unconfirmed,
            });
            return;
        }
        let op = self.alloc_op();
        if self.lane.enqueue(now, op, grant.clone(), Purpose::Compensation).is_err() {
            self.events.push_back(BrokerEvent::LaneDone {
                grant,
                purpose: Purpose::Compensation,
                outcome: Outcome::Unconfirmed,
            });
        }
        self.sync_lane_timer();
    }

    fn drain_lane(&mut self) {
        while let Some((id, entry, outcome)) = self.lane.poll_done() {
            match entry.purpose {
                Purpose::Explicit => {
                    let result = match outcome {
                        Outcome::Released => Ok(true),
                        Outcome::NotHolder => Ok(false),
                        Outcome::Unconfirmed => Err(Failure::ReleaseUnconfirmed),
                    };
                    self.events.push_back(BrokerEvent::Released { op: id, result });
                }
                purpose => self.events.push_back(BrokerEvent::LaneDone { grant: entry.grant, purpose, outcome }),
            }
        }
        self.maybe_finish_close();
    }

    fn maybe_finish_close(&mut self) {
        if self.phase == Phase::Closing && self.lane.is_empty() {
            self.finish_close();
        }
    }

    fn finish_close(&mut self) {
        if self.phase == Phase::Closed {
            return;
        }
        self.phase = Phase::Closed;
        self.timers = TimerTable::new();
        for s in &mut self.slots {
            if let Some(c) = s.conn.take() {
                self.events.push_back(BrokerEvent::Disconnect { conn: c.id });
            }
        }
        self.conn_slot.clear();
        // Whatever the lane still holds is given up.
        self.lane.give_up_all();
        self.drain_lane();
        self.events.push_back(BrokerEvent::Closed);
    }

    /// Candidate slots for a request, leader first, then not-follower; round-robin
    /// (acquires and lane releases each keep their own rotation).
    fn pick(&mut self, for_lane: bool, avoid: &[ConnId]) -> Option<usize> {
        let acquire_limit = self.config.max_pending_per_conn - self.config.lane_slots_per_conn - 1;
        let lane_limit = self.config.lane_slots_per_conn;
        let mut leaders = Vec::new();
        let mut others = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let Some(c) = &s.conn else { continue };
            if !c.session.is_ready() || c.role == Some(Role::Follower) {
                continue;
            }
            let room = if for_lane {
                c.session.pending_releases() < lane_limit
            } else {
                c.session.pending_acquires() < acquire_limit
            };
            if !room {
                continue;
            }
            if c.role == Some(Role::Leader) {
                leaders.push(i);
            } else {
                others.push(i);
            }
        }
        let mut pool = if leaders.is_empty() { others } else { leaders };
        if let Some(h) = &self.hint {
            let at_hint: Vec<usize> = pool.iter().copied().filter(|&i| &self.slots[i].addr == h).collect();
            if !at_hint.is_empty() {
                pool = at_hint;
            }
        }
        if !avoid.is_empty() {
            let fresh: Vec<usize> = pool
                .iter()
                .copied()
                .filter(|&i| self.slots[i].conn.as_ref().map(|c| !avoid.contains(&c.id)).unwrap_or(false))
                .collect();
            if !fresh.is_empty() {
                pool = fresh;
            }
        }
        if pool.is_empty() {
            return None;
        }
        let rr = &mut self.rr[usize::from(for_lane)];
        let i = pool[*rr % pool.len()];
        *rr = rr.wrapping_add(1);
        Some(i)
    }

    /// Routes queued lane entries first, then waiting acquires in FIFO order.
    fn dispatch(&mut self, now: Instant) {
        if self.phase == Phase::Closed {
            return;
        }
        let queued: Vec<(OpId, ExactGrant, Vec<ConnId>)> =
            self.lane.queued().map(|(id, e)| (id, e.grant.clone(), e.tried.clone())).collect();
        let mut touched: Vec<usize> = Vec::new();
        for (id, g, tried) in queued {
            let Some(slot) = self.pick(true, &tried) else { break };
            let Some(c) = self.slots[slot].conn.as_mut() else { continue };
            let req = Request::Release { key: g.key, owner: g.owner, token: g.token };
            if c.session.send(now, id, req).is_ok() {
                let conn = c.id;
                self.lane.mark_sent(id, conn);
                touched.push(slot);
            }
        }
        while let Some(&op) = self.waiting.front() {
            let Some(a) = self.ops.get(&op) else {
                self.waiting.pop_front();
                continue;
            };
            let (key, owner, max_wait, lease, budget_deadline) =
                (a.key.clone(), a.owner.clone(), a.wait, a.lease, a.budget_deadline);
            let Some(slot) = self.pick(false, &[]) else { break };
            self.waiting.pop_front();
            // Never promise the server more waiting than the caller's budget has left.
            let left = budget_deadline.saturating_duration_since(now);
            let left_secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let wait = u8::try_from(left_secs.min(u64::from(max_wait))).unwrap_or(max_wait);
            let req = Request::Acquire { key, owner, wait, lease };
            let Some(c) = self.slots[slot].conn.as_mut() else { continue };
            match c.session.send(now, op, req) {
                Ok(_) => {
                    let conn = c.id;
                    if let Some(a) = self.ops.get_mut(&op) {
                        a.state = OpState::Sent(conn);
                    }
                    self.timers.clear(Timer::Budget(op));
                    touched.push(slot);
                }
                Err(_) => {
                    self.waiting.push_front(op);
                    break;
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        for slot in touched {
            self.sync_session_timer(slot);
        }
    }
}
