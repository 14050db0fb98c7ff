//! The connection pool and routing (docs/client.md, Connections) around
//! [`Session`]s and the [`Lane`], as one pure state machine: the whole client
//! behaviour of docs/client.md except sockets, TLS and the clock.
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
//! - the conservative deadline check (Acquire step 4), compensations through
//!   the lane, cancellation (Acquire step 7), close (Release lane).
//!
//! Where: `pool` (slots, backoff, hint and roles, a session's end), `route`
//! (picking a connection, sending what waits), `acquire`, `release` (the lane's
//! side), `close`; this file holds the types and the `handle_*`/`poll_*` surface.
//! Section names refer to docs/client.md.

mod acquire;
mod close;
mod pool;
mod release;
mod route;

use crate::deadline::{self, Verdict};
use crate::field::{Addr, Hex32, Key, KeySet, Owner, Role, Token};
use crate::lane::{self, ExactGrant, Lane, Outcome, Purpose};
pub use crate::op::OpId;
use crate::params::{self, AcquireParams, AllParams, SharedParams};
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
    /// Shared client token (empty: auth off); `Debug` prints it redacted.
    pub token: crate::auth::Secret,
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
    /// Defaults of docs/client.md for `addrs` and `token`.
    pub fn new(addrs: Vec<String>, token: impl Into<Vec<u8>>) -> BrokerConfig {
        BrokerConfig {
            addrs,
            token: crate::auth::Secret::new(token),
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
            if crate::hostport::split(a).is_none() {
                return Err(ConfigError::AddressPort { addr: a.clone() });
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
    /// Key (the first key of a multi-key grant).
    pub key: Key,
    /// Every key of the grant, `key` first: one for `A` and `S`, 2–16 for `K`.
    pub keys: Vec<Key>,
    /// Owner (fresh per acquire).
    pub owner: Owner,
    /// Fencing token (one for every key of a multi-key grant).
    pub token: Token,
    /// The slot of a counted grant; `None` for an exclusive one.
    pub slot: Option<u16>,
    /// Conservative deadline (docs/client.md, Acquire step 4).
    pub deadline: Instant,
}

impl Grant {
    /// The exact (key, owner, token) to release, for the first key.
    pub fn exact(&self) -> ExactGrant {
        ExactGrant { key: self.key.clone(), owner: self.owner.clone(), token: self.token }
    }

    /// The exact (key, owner, token) of every key, first key first: a
    /// multi-key grant is released key by key with its one token.
    pub fn exacts(&self) -> Vec<ExactGrant> {
        exacts(&self.keys, &self.owner, self.token)
    }
}

fn exacts(keys: &[Key], owner: &Owner, token: Token) -> Vec<ExactGrant> {
    keys.iter().map(|key| ExactGrant { key: key.clone(), owner: owner.clone(), token }).collect()
}

/// Why an operation failed. Exhaustive on purpose: every driver maps each
/// failure to its own error, and a new one must be mapped consciously.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Failure {
    /// `B`: refused for capacity; final.
    Busy,
    /// `F`: the connection's principal may not use this key (for a
    /// multi-key acquire, the first such key); final, never retried.
    Forbidden(Key),
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
        if let Failure::Forbidden(key) = self {
            return write!(f, "forbidden: this client's principal may not use the key {key}");
        }
        f.write_str(match self {
            Failure::Forbidden(_) => unreachable!("written above"),
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
    /// The resolution of an Indeterminate acquire ended (for logs): `Q`
    /// answered `N` (`NotHolder`, `token` None), or `H` then the exact `R`
    /// (`Released`/`NotHolder` with the token), or no answer in 5 s.
    Resolved {
        /// Key of the acquire.
        key: Key,
        /// Owner of the acquire.
        owner: Owner,
        /// The token `H` named, if it answered.
        token: Option<Token>,
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

/// What an acquire asks for.
#[derive(Debug, Clone)]
enum AcquireKind {
    /// `A`: the key alone.
    Exclusive,
    /// `S … n`: one of at most `n` counted holders.
    Shared { n: u16 },
    /// `K`: every key at once (the op's `key` is the first).
    All { keys: KeySet },
}

#[derive(Debug)]
struct AcquireOp {
    key: Key,
    kind: AcquireKind,
    owner: Owner,
    wait: u8,
    lease: u8,
    budget: Duration,
    budget_deadline: Instant,
    state: OpState,
}

/// The outcomes so far of an explicit release of several keys.
#[derive(Debug, Default)]
struct ReleaseGroup {
    left: usize,
    not_holder: bool,
    unconfirmed: bool,
    /// The first key answered `F`.
    forbidden: Option<Key>,
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
    /// Live tickets: the exact grant of each of their keys.
    live: HashMap<OpId, Vec<ExactGrant>>,
    /// Explicit releases of multi-key tickets: one lane entry per key, one result.
    groups: HashMap<OpId, ReleaseGroup>,
    /// Lane entry → the group it belongs to.
    group_of: HashMap<OpId, OpId>,
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
            groups: HashMap::new(),
            group_of: HashMap::new(),
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

    fn alloc_op(&mut self) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        op
    }
}
