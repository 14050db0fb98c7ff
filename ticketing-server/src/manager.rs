//! The leader's lock manager (SPEC §4): one task that owns the per-key
//! projection (holder, FIFO waiters, lease and wait timers), turns client
//! requests into [`Command`]s proposed through the [`Replicator`], and routes
//! the committed [`Outcome`]s back to the connections as `A`/`T`/`B`/`R`/`N`.
//!
//! Invariants:
//! - Nothing is answered `A`, `R` or `N` before its command is committed.
//! - At most one proposal per key is in flight; requests for that key that
//!   need a proposal wait for it, so a release and an expiry of the same
//!   grant can never both take effect, and hand-over happens in the same
//!   command as the release/expiry.
//! - Every operation costs O(1) or O(log n) (hash maps, per-key `VecDeque`,
//!   one deadline heap with lazy invalidation); nothing scans all keys
//!   except a leadership change, which rebuilds the projection from the
//!   applied state by design (SPEC §4, last row).
//! - The manager never awaits a connection or a proposal: proposals run in
//!   their own tasks and report back through a channel; answers are handed
//!   to the connection's bounded queue with `try_send`.

use crate::config::Limits;
use crate::locks::{Command, NextHolder, Outcome};
use crate::replication::{Leadership, ProposeError, Replicator};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use ticketing_proto::{Addr, ErrorCode, Key, Owner, RequestId, ServerFrame, Token};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

/// Identifies one client connection for the lifetime of the process.
pub type ConnId = u64;

/// What the manager sends to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The final answer to request `id` (`A`, `T`, `B`, `R` or `N`).
    Reply {
        /// The request this answers.
        id: RequestId,
        /// The frame to write.
        frame: ServerFrame,
    },
    /// Write this frame (`M`, `E no_leader`, …) and close the connection.
    Fatal(ServerFrame),
    /// Request `id` left its queue unanswered (its connection sent EOF).
    Dropped(RequestId),
}

/// What a connection (or the server) sends to the manager.
#[derive(Debug)]
pub enum Request {
    /// A connection finished its handshake; answers for it go to `tx`.
    Register {
        /// The connection.
        conn: ConnId,
        /// Its answer queue.
        tx: mpsc::Sender<Answer>,
    },
    /// `A <id> <key> <owner> <wait> <lease>`.
    Acquire {
        /// The connection.
        conn: ConnId,
        /// Request id.
        id: RequestId,
        /// Key.
        key: Key,
        /// Owner.
        owner: Owner,
        /// Wait, whole seconds.
        wait: u8,
        /// Lease, whole seconds.
        lease: u8,
        /// When the server read the request (for `waited_ms` and the wait timer).
        read_at: Instant,
    },
    /// `R <id> <key> <owner> <token>`.
    Release {
        /// The connection.
        conn: ConnId,
        /// Request id.
        id: RequestId,
        /// Key.
        key: Key,
        /// Owner of the grant.
        owner: Owner,
        /// Token of the grant.
        token: Token,
    },
    /// The client closed its sending side (EOF): its waiters leave their
    /// queues, each reported as [`Answer::Dropped`]; answers to its requests
    /// already being committed are still delivered.
    LeaveQueues {
        /// The connection.
        conn: ConnId,
    },
    /// The connection is gone: its waiters leave their queues (its grants stay).
    Closed {
        /// The connection.
        conn: ConnId,
    },
    /// Read-only view of one key (for `/locks/<key>`).
    Query {
        /// Key.
        key: Key,
        /// Where the answer goes.
        reply: oneshot::Sender<LockInfo>,
    },
    /// Graceful shutdown: accept no new requests; `done` fires once no proposal is in flight.
    Drain {
        /// Fired when drained.
        done: oneshot::Sender<()>,
    },
}

/// The current holder of a key, as the leader projects it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HolderInfo {
    /// Owner of the grant.
    pub owner: Owner,
    /// Its fencing token.
    pub token: Token,
    /// Milliseconds until its lease ends (at the leader).
    pub remaining_ms: u64,
}

/// A read-only snapshot of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockInfo {
    /// The committed holder, if any (a grant still being committed is not shown).
    pub holder: Option<HolderInfo>,
    /// Number of waiters in the key's queue.
    pub waiters: usize,
}

/// Counters and gauges for `/metrics`. Plain atomics, read with `Relaxed`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Grants committed (direct and hand-over).
    pub grants: AtomicU64,
    /// Releases answered `R`.
    pub releases_released: AtomicU64,
    /// Releases answered `N`.
    pub releases_not_holder: AtomicU64,
    /// Leases that ended (expiries committed).
    pub expiries: AtomicU64,
    /// Acquires answered `T`.
    pub timeouts: AtomicU64,
    /// Acquires answered `B`.
    pub busy: AtomicU64,
    /// Proposals that failed (not leader, unknown outcome, shutdown).
    pub proposal_errors: AtomicU64,
    /// Waiters now queued (gauge).
    pub waiters: AtomicU64,
    /// Keys now held, grants in flight included (gauge).
    pub held_keys: AtomicU64,
    /// Authenticated or handshaking client connections (gauge).
    pub connections: AtomicU64,
    /// Sum of `waited_ms` over all grants (with `grants`: the mean acquire-to-grant time).
    pub grant_wait_ms_sum: AtomicU64,
    /// Grants counted by `waited_ms` into the buckets of [`GRANT_WAIT_BUCKETS_MS`] (last: above all).
    pub grant_wait_ms_buckets: [AtomicU64; GRANT_WAIT_BUCKETS_MS.len() + 1],
}

/// Upper bounds (ms, inclusive) of the acquire-to-grant histogram of `/metrics`.
pub const GRANT_WAIT_BUCKETS_MS: [u64; 12] = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 30000, 120000];

fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A cloneable handle to the manager task.
#[derive(Clone)]
pub struct ManagerHandle {
    tx: mpsc::Sender<Request>,
    metrics: Arc<Metrics>,
}

/// The manager task has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagerGone;

impl std::fmt::Display for ManagerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the lock manager has stopped")
    }
}

impl std::error::Error for ManagerGone {}

impl ManagerHandle {
    /// Sends one request (waits while the manager's inbox is full).
    pub async fn send(&self, req: Request) -> Result<(), ManagerGone> {
        self.tx.send(req).await.map_err(|_| ManagerGone)
    }

    /// Tells the manager a connection is gone without waiting (used from `Drop`).
    pub fn closed(&self, conn: ConnId) {
        let tx = self.tx.clone();
        if tx.try_send(Request::Closed { conn }).is_err() {
            tokio::spawn(async move {
                let _ = tx.send(Request::Closed { conn }).await;
            });
        }
    }

    /// The projection of one key (for `/locks/<key>`).
    pub async fn lock_info(&self, key: Key) -> Result<LockInfo, ManagerGone> {
        let (reply, rx) = oneshot::channel();
        self.send(Request::Query { key, reply }).await?;
        rx.await.map_err(|_| ManagerGone)
    }

    /// Stops taking requests and waits until no proposal is in flight.
    pub async fn drain(&self) -> Result<(), ManagerGone> {
        let (done, rx) = oneshot::channel();
        self.send(Request::Drain { done }).await?;
        rx.await.map_err(|_| ManagerGone)
    }

    /// The shared counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

/// Starts the manager task. It runs until every [`ManagerHandle`] is dropped.
pub fn spawn(replicator: Arc<dyn Replicator>, limits: Limits, metrics: Arc<Metrics>) -> ManagerHandle {
    let (tx, rx) = mpsc::channel(4096);
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let leadership = replicator.leadership();
    let manager = Manager {
        replicator,
        limits,
        metrics: metrics.clone(),
        keys: HashMap::new(),
        waiters: HashMap::new(),
        conns: HashMap::new(),
        timers: BinaryHeap::new(),
        timer_seq: 0,
        next_waiter: 0,
        next_gen: 0,
        held: 0,
        total_waiters: 0,
        epoch: None,
        leader: None,
        in_flight: 0,
        draining: false,
        drained: Vec::new(),
        done_tx,
    };
    tokio::spawn(manager.run(rx, done_rx, leadership));
    ManagerHandle { tx, metrics }
}

type WaiterId = u64;

/// A queued (or about to be granted) acquire.
#[derive(Debug, Clone)]
struct Waiter {
    conn: ConnId,
    id: RequestId,
    key: Key,
    owner: Owner,
    lease: u8,
    read_at: Instant,
    /// When its wait ends.
    wait_until: Instant,
}

/// The projected holder of a key.
#[derive(Debug, Clone)]
struct Proj {
    owner: Owner,
    /// `None` while the grant is being committed.
    token: Option<Token>,
    /// Lease end at the leader (`None` while the grant is being committed).
    deadline: Option<Instant>,
    /// Identifies this grant's lease timer.
    gen: u64,
}

#[derive(Debug)]
struct PendingRelease {
    conn: ConnId,
    id: RequestId,
    owner: Owner,
    token: Token,
}

#[derive(Debug, Default)]
struct KeyState {
    holder: Option<Proj>,
    /// FIFO of waiter ids; ids no longer in `Manager::waiters` are dead and skipped.
    queue: VecDeque<WaiterId>,
    /// Live waiters in `queue`.
    live: usize,
    /// A proposal for this key is in flight.
    busy: bool,
    /// Releases waiting for the in-flight proposal.
    pending: VecDeque<PendingRelease>,
}

impl KeyState {
    fn is_idle(&self) -> bool {
        self.holder.is_none() && self.live == 0 && !self.busy && self.pending.is_empty()
    }
}

/// What a proposal was for, so its outcome can be routed.
#[derive(Debug)]
enum Purpose {
    Grant(Waiter),
    Release { conn: ConnId, id: RequestId, next: Option<Waiter> },
    Expire { next: Option<Waiter> },
}

#[derive(Debug)]
struct Done {
    key: Key,
    epoch: Option<u64>,
    purpose: Purpose,
    result: Result<Outcome, ProposeError>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Wait(WaiterId),
    Lease(Key, u64),
}

struct ConnEntry {
    tx: mpsc::Sender<Answer>,
    waiters: HashSet<WaiterId>,
}

struct Manager {
    replicator: Arc<dyn Replicator>,
    limits: Limits,
    metrics: Arc<Metrics>,
    keys: HashMap<Key, KeyState>,
    waiters: HashMap<WaiterId, Waiter>,
    conns: HashMap<ConnId, ConnEntry>,
    timers: BinaryHeap<Reverse<(Instant, u64, Timer)>>,
    timer_seq: u64,
    next_waiter: WaiterId,
    next_gen: u64,
    /// Keys with a holder in the projection (grants in flight included).
    held: usize,
    total_waiters: usize,
    /// The leadership epoch we serve; `None` when not serving.
    epoch: Option<u64>,
    leader: Option<Addr>,
    in_flight: usize,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
    done_tx: mpsc::UnboundedSender<Done>,
}

fn wall_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)).unwrap_or(0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Manager {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Request>,
        mut done_rx: mpsc::UnboundedReceiver<Done>,
        mut leadership: watch::Receiver<Leadership>,
    ) {
        let first = leadership.borrow_and_update().clone();
        self.on_leadership(first);
        let mut leadership_open = true;
        loop {
            let next_timer = self.timers.peek().map(|Reverse((at, _, _))| *at);
            tokio::select! {
                biased;
                Some(done) = done_rx.recv() => self.on_done(done),
                changed = leadership.changed(), if leadership_open => {
                    if changed.is_ok() {
                        let l = leadership.borrow_and_update().clone();
                        self.on_leadership(l);
                    } else {
                        leadership_open = false;
                    }
                }
                req = rx.recv() => match req {
                    Some(req) => self.on_request(req),
                    None => break,
                },
                _ = tokio::time::sleep_until(next_timer.unwrap_or_else(Instant::now)), if next_timer.is_some() => {
                    self.on_timers();
                }
            }
            self.check_drained();
            self.metrics.waiters.store(self.total_waiters as u64, Ordering::Relaxed);
            self.metrics.held_keys.store(self.held as u64, Ordering::Relaxed);
        }
        debug!("lock manager stopped");
    }

    // ----- plumbing ---------------------------------------------------------

    fn send(&mut self, conn: ConnId, answer: Answer) {
        let Some(entry) = self.conns.get(&conn) else { return };
        match entry.tx.try_send(answer) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Cannot happen: a connection's queue holds one slot per in-flight request.
                warn!(conn, "answer queue full; answer dropped");
            }
        }
    }

    fn reply(&mut self, conn: ConnId, id: RequestId, frame: ServerFrame) {
        self.send(conn, Answer::Reply { id, frame });
    }

    fn not_leader_frame(&self) -> ServerFrame {
        match &self.leader {
            Some(addr) => ServerFrame::Moved { addr: addr.clone() },
            None => ServerFrame::error(ErrorCode::NoLeader),
        }
    }

    fn error_frame(&self, e: &ProposeError) -> ServerFrame {
        match e {
            ProposeError::NotLeader(Some(addr)) => ServerFrame::Moved { addr: addr.clone() },
            ProposeError::NotLeader(None) | ProposeError::Unknown => ServerFrame::error(ErrorCode::NoLeader),
            ProposeError::Shutdown => ServerFrame::error(ErrorCode::ShuttingDown),
        }
    }

    fn push_timer(&mut self, at: Instant, timer: Timer) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, timer)));
    }

    fn new_gen(&mut self) -> u64 {
        self.next_gen += 1;
        self.next_gen
    }

    fn propose(&mut self, cmd: Command, purpose: Purpose) {
        let key = cmd.key().clone();
        if let Some(ks) = self.keys.get_mut(&key) {
            ks.busy = true;
        }
        self.in_flight += 1;
        let fut = self.replicator.propose(cmd);
        let tx = self.done_tx.clone();
        let epoch = self.epoch;
        tokio::spawn(async move {
            let result = fut.await;
            let _ = tx.send(Done { key, epoch, purpose, result });
        });
    }

    /// Holder changes go through here so `held` stays right.
    fn set_holder(&mut self, key: &Key, holder: Option<Proj>) {
        let Some(ks) = self.keys.get_mut(key) else { return };
        match (&ks.holder, &holder) {
            (None, Some(_)) => self.held += 1,
            (Some(_), None) => self.held -= 1,
            _ => {}
        }
        if let Some(Proj { deadline: Some(at), gen, .. }) = &holder {
            let (at, gen) = (*at, *gen);
            ks.holder = holder;
            self.push_timer(at, Timer::Lease(key.clone(), gen));
        } else {
            ks.holder = holder;
        }
    }

    fn committed_holder(&mut self, owner: Owner, token: Token, lease: u8) -> Proj {
        let gen = self.new_gen();
        Proj { owner, token: Some(token), deadline: Some(Instant::now() + Duration::from_secs(u64::from(lease))), gen }
    }

    /// Re-reads one key's holder from the applied state (after a surprise or
    /// an error); a holder found there gets a full-length lease from now.
    fn resync_key(&mut self, key: &Key) {
        let applied = self.replicator.applied();
        let holder = applied.holder(key).cloned();
        let proj = holder.map(|h| self.committed_holder(h.owner, h.token, h.lease_s));
        self.set_holder(key, proj);
    }

    fn remove_if_idle(&mut self, key: &Key) {
        if self.keys.get(key).is_some_and(KeyState::is_idle) {
            self.keys.remove(key);
        }
    }

    /// Takes the first live waiter off the key's queue.
    fn pop_head(&mut self, key: &Key) -> Option<Waiter> {
        loop {
            let ks = self.keys.get_mut(key)?;
            let wid = ks.queue.pop_front()?;
            if let Some(w) = self.waiters.remove(&wid) {
                ks.live -= 1;
                self.total_waiters -= 1;
                if let Some(c) = self.conns.get_mut(&w.conn) {
                    c.waiters.remove(&wid);
                }
                return Some(w);
            }
        }
    }

    /// Puts a waiter that was taken off for a hand-over back at the head of
    /// its queue (the hand-over did not happen) — unless its wait is over or
    /// its connection is gone.
    fn put_back(&mut self, w: Waiter) {
        if w.wait_until <= Instant::now() {
            inc(&self.metrics.timeouts);
            self.reply(w.conn, w.id, ServerFrame::Timeout { id: w.id, key: w.key.clone() });
            return;
        }
        if !self.conns.contains_key(&w.conn) || self.epoch.is_none() {
            return;
        }
        self.next_waiter += 1;
        let wid = self.next_waiter;
        let key = w.key.clone();
        let until = w.wait_until;
        let conn = w.conn;
        let ks = self.keys.entry(key).or_default();
        ks.queue.push_front(wid);
        ks.live += 1;
        self.total_waiters += 1;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.waiters.insert(wid);
        }
        self.waiters.insert(wid, w);
        self.push_timer(until, Timer::Wait(wid));
    }

    /// Removes a live waiter (timer or closed connection); returns it.
    fn remove_waiter(&mut self, wid: WaiterId) -> Option<Waiter> {
        let w = self.waiters.remove(&wid)?;
        self.total_waiters -= 1;
        if let Some(c) = self.conns.get_mut(&w.conn) {
            c.waiters.remove(&wid);
        }
        if let Some(ks) = self.keys.get_mut(&w.key) {
            ks.live -= 1;
            // Compact when dead entries dominate, so a long-held key with
            // many timed-out waiters does not grow its queue without bound.
            if ks.queue.len() > 2 * ks.live + 32 {
                let waiters = &self.waiters;
                ks.queue.retain(|id| waiters.contains_key(id));
            }
        }
        self.remove_if_idle(&w.key.clone());
        Some(w)
    }

    // ----- events -----------------------------------------------------------

    /// Whether a new `A`/`R` from `conn` is served: not while draining (no
    /// answer; the connection gets `E shutting_down`), and not without a
    /// serving epoch (the connection gets `M`/`E no_leader` and closes).
    fn accepts_requests(&mut self, conn: ConnId) -> bool {
        if self.draining {
            return false;
        }
        if self.epoch.is_none() {
            let frame = self.not_leader_frame();
            self.send(conn, Answer::Fatal(frame));
            return false;
        }
        true
    }

    fn on_request(&mut self, req: Request) {
        match req {
            Request::Register { conn, tx } => {
                self.conns.insert(conn, ConnEntry { tx, waiters: HashSet::new() });
            }
            Request::LeaveQueues { conn } => {
                let waiters = self.conns.get_mut(&conn).map(|c| std::mem::take(&mut c.waiters)).unwrap_or_default();
                for wid in waiters {
                    if let Some(w) = self.remove_waiter(wid) {
                        self.send(conn, Answer::Dropped(w.id));
                    }
                }
            }
            Request::Closed { conn } => {
                if let Some(entry) = self.conns.remove(&conn) {
                    for wid in entry.waiters {
                        self.remove_waiter(wid);
                    }
                }
            }
            Request::Query { key, reply } => {
                let now = Instant::now();
                let info = match self.keys.get(&key) {
                    None => LockInfo::default(),
                    Some(ks) => LockInfo {
                        holder: ks.holder.as_ref().and_then(|h| {
                            Some(HolderInfo {
                                owner: h.owner.clone(),
                                token: h.token?,
                                remaining_ms: millis(h.deadline?.saturating_duration_since(now)),
                            })
                        }),
                        waiters: ks.live,
                    },
                };
                let _ = reply.send(info);
            }
            Request::Drain { done } => {
                self.draining = true;
                self.drained.push(done);
            }
            Request::Acquire { conn, id, key, owner, wait, lease, read_at } => {
                if !self.accepts_requests(conn) {
                    return;
                }
                let wait_until = read_at + Duration::from_secs(u64::from(wait));
                let w = Waiter { conn, id, key, owner, lease, read_at, wait_until };
                self.acquire(w, wait);
            }
            Request::Release { conn, id, key, owner, token } => {
                if !self.accepts_requests(conn) {
                    return;
                }
                let ks = self.keys.entry(key.clone()).or_default();
                ks.pending.push_back(PendingRelease { conn, id, owner, token });
                self.pump(&key);
            }
        }
    }

    fn acquire(&mut self, w: Waiter, wait: u8) {
        let key = w.key.clone();
        let ks = self.keys.entry(key.clone()).or_default();
        // Free: no holder and nobody queued. A free key can still have a
        // proposal in flight: the no-op release of an `R` that matches no
        // grant (Decision 9). The grant is then the key's next command.
        let free = ks.holder.is_none() && ks.live == 0;
        if free {
            if self.held >= self.limits.max_held_keys {
                inc(&self.metrics.busy);
                self.reply(w.conn, w.id, ServerFrame::Busy { id: w.id, key: key.clone() });
                self.remove_if_idle(&key);
                return;
            }
            if ks.busy {
                // Neither `T` (the key is not held) nor a waiter cap (it is
                // not queued behind anyone): it goes first once the no-op
                // release is committed (see `pump`); a wait of 0 gets no timer.
                self.enqueue(w, wait > 0);
            } else {
                self.grant(w);
            }
            return;
        }
        if wait == 0 {
            inc(&self.metrics.timeouts);
            self.reply(w.conn, w.id, ServerFrame::Timeout { id: w.id, key });
            return;
        }
        if ks.live >= self.limits.max_waiters_per_key || self.total_waiters >= self.limits.max_waiters {
            inc(&self.metrics.busy);
            self.reply(w.conn, w.id, ServerFrame::Busy { id: w.id, key });
            return;
        }
        self.enqueue(w, true);
    }

    /// Puts `w` at the tail of its key's queue, with a wait timer if `timed`.
    fn enqueue(&mut self, w: Waiter, timed: bool) {
        if !self.conns.contains_key(&w.conn) {
            return; // the connection closed meanwhile: its waiters leave anyway
        }
        self.next_waiter += 1;
        let wid = self.next_waiter;
        let ks = self.keys.entry(w.key.clone()).or_default();
        ks.queue.push_back(wid);
        ks.live += 1;
        self.total_waiters += 1;
        let until = w.wait_until;
        if let Some(c) = self.conns.get_mut(&w.conn) {
            c.waiters.insert(wid);
        }
        self.waiters.insert(wid, w);
        if timed {
            self.push_timer(until, Timer::Wait(wid));
        }
    }

    /// Proposes a grant of a free key to `w` (the key counts as held meanwhile).
    fn grant(&mut self, w: Waiter) {
        let gen = self.new_gen();
        let proj = Proj { owner: w.owner.clone(), token: None, deadline: None, gen };
        self.set_holder(&w.key, Some(proj));
        let cmd =
            Command::Grant { key: w.key.clone(), owner: w.owner.clone(), lease_s: w.lease, micros: wall_micros() };
        self.propose(cmd, Purpose::Grant(w));
    }

    /// Starts the next proposal the key needs, if none is in flight: a due
    /// expiry first, then the oldest waiting release, then a grant of a free
    /// key to its queue head.
    fn pump(&mut self, key: &Key) {
        let Some(ks) = self.keys.get(key) else { return };
        if ks.busy {
            return;
        }
        let now = Instant::now();
        if let Some(Proj { owner, token: Some(token), deadline: Some(deadline), .. }) = &ks.holder {
            if *deadline <= now {
                let (owner, token) = (owner.clone(), *token);
                let next = self.pop_head(key);
                let cmd = Command::Expire {
                    key: key.clone(),
                    owner,
                    token,
                    next: next.as_ref().map(|w| NextHolder { owner: w.owner.clone(), lease_s: w.lease }),
                    micros: wall_micros(),
                };
                self.propose(cmd, Purpose::Expire { next });
                return;
            }
        }
        let ks = self.keys.get_mut(key).unwrap_or_else(|| unreachable!("checked above"));
        if let Some(r) = ks.pending.pop_front() {
            let matches = ks.holder.as_ref().is_some_and(|h| h.owner == r.owner && h.token == Some(r.token));
            let next = if matches { self.pop_head(key) } else { None };
            let cmd = Command::Release {
                key: key.clone(),
                owner: r.owner,
                token: r.token,
                next: next.as_ref().map(|w| NextHolder { owner: w.owner.clone(), lease_s: w.lease }),
                micros: wall_micros(),
            };
            self.propose(cmd, Purpose::Release { conn: r.conn, id: r.id, next });
            return;
        }
        if ks.holder.is_none() && ks.live > 0 {
            while let Some(head) = self.pop_head(key) {
                // The held-keys cap was checked when this waiter arrived;
                // other keys may have filled the server since (§10: B).
                if self.held >= self.limits.max_held_keys {
                    inc(&self.metrics.busy);
                    self.reply(head.conn, head.id, ServerFrame::Busy { id: head.id, key: key.clone() });
                    continue;
                }
                self.grant(head);
                return;
            }
        }
        self.remove_if_idle(key);
    }

    fn granted(&mut self, w: Waiter, token: Token) {
        let proj = self.committed_holder(w.owner.clone(), token, w.lease);
        self.set_holder(&w.key, Some(proj));
        let waited = Instant::now().saturating_duration_since(w.read_at);
        let waited_ms = u32::try_from(waited.as_millis()).unwrap_or(u32::MAX);
        inc(&self.metrics.grants);
        self.metrics.grant_wait_ms_sum.fetch_add(u64::from(waited_ms), Ordering::Relaxed);
        let bucket = GRANT_WAIT_BUCKETS_MS
            .iter()
            .position(|b| u64::from(waited_ms) <= *b)
            .unwrap_or(GRANT_WAIT_BUCKETS_MS.len());
        self.metrics.grant_wait_ms_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let frame = ServerFrame::Granted { id: w.id, key: w.key.clone(), owner: w.owner, token, waited_ms };
        self.reply(w.conn, w.id, frame);
    }

    /// After a committed release/expiry: the key goes to `next` (with the
    /// handed-over token) or becomes free.
    fn handed_over(&mut self, key: &Key, next: Option<Waiter>, token: Option<Token>) {
        match (next, token) {
            (Some(w), Some(t)) => self.granted(w, t),
            (next, _) => {
                self.set_holder(key, None);
                if let Some(w) = next {
                    // The state machine could not issue a token (counter exhausted).
                    warn!(key = %key, "hand-over without a token");
                    self.put_back(w);
                }
            }
        }
    }

    fn on_done(&mut self, done: Done) {
        self.in_flight -= 1;
        let Done { key, epoch, purpose, result } = done;
        if epoch != self.epoch || epoch.is_none() {
            // A proposal of an earlier term: its connections were closed and
            // the projection rebuilt since.
            return;
        }
        if let Some(ks) = self.keys.get_mut(&key) {
            ks.busy = false;
        }
        match (purpose, result) {
            (Purpose::Grant(w), Ok(Outcome::Granted(token))) => self.granted(w, token),
            (Purpose::Grant(w), Ok(other)) => {
                debug!(key = %key, ?other, "grant found the key held; resyncing");
                self.resync_key(&key);
                if w.wait_until > w.read_at {
                    self.put_back(w);
                } else {
                    inc(&self.metrics.timeouts);
                    self.reply(w.conn, w.id, ServerFrame::Timeout { id: w.id, key: key.clone() });
                }
            }
            (Purpose::Release { conn, id, next }, Ok(Outcome::Released { handed_over })) => {
                inc(&self.metrics.releases_released);
                self.reply(conn, id, ServerFrame::Released { id, key: key.clone() });
                self.handed_over(&key, next, handed_over);
            }
            (Purpose::Release { conn, id, next }, Ok(other)) => {
                inc(&self.metrics.releases_not_holder);
                self.reply(conn, id, ServerFrame::NotHolder { id, key: key.clone() });
                if next.is_some() || !matches!(other, Outcome::NotHolder) {
                    // The projection said it matched, the state machine disagreed.
                    self.resync_key(&key);
                }
                if let Some(w) = next {
                    self.put_back(w);
                }
            }
            (Purpose::Expire { next }, Ok(Outcome::Expired { handed_over })) => {
                inc(&self.metrics.expiries);
                self.handed_over(&key, next, handed_over);
            }
            (Purpose::Expire { next }, Ok(other)) => {
                debug!(key = %key, ?other, "expiry did not match; resyncing");
                self.resync_key(&key);
                if let Some(w) = next {
                    self.put_back(w);
                }
            }
            (purpose, Err(e)) => {
                inc(&self.metrics.proposal_errors);
                warn!(key = %key, error = ?e, "proposal failed");
                let frame = self.error_frame(&e);
                match purpose {
                    Purpose::Grant(w) => self.send(w.conn, Answer::Fatal(frame.clone())),
                    Purpose::Release { conn, next, .. } => {
                        self.send(conn, Answer::Fatal(frame.clone()));
                        if let Some(w) = next {
                            self.send(w.conn, Answer::Fatal(frame.clone()));
                        }
                    }
                    Purpose::Expire { next } => {
                        if let Some(w) = next {
                            self.send(w.conn, Answer::Fatal(frame.clone()));
                        }
                    }
                }
                self.resync_key(&key);
            }
        }
        self.pump(&key);
    }

    fn on_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, _, _))) = self.timers.peek() {
            if *at > now {
                break;
            }
            let Some(Reverse((_, _, timer))) = self.timers.pop() else { break };
            match timer {
                Timer::Wait(wid) => {
                    if self.waiters.get(&wid).is_some_and(|w| w.wait_until <= now) {
                        if let Some(w) = self.remove_waiter(wid) {
                            inc(&self.metrics.timeouts);
                            self.reply(w.conn, w.id, ServerFrame::Timeout { id: w.id, key: w.key });
                        }
                    }
                }
                Timer::Lease(key, gen) => {
                    let current = self.keys.get(&key).and_then(|ks| ks.holder.as_ref()).is_some_and(|h| h.gen == gen);
                    if current {
                        self.pump(&key);
                    }
                }
            }
        }
    }

    fn on_leadership(&mut self, l: Leadership) {
        self.leader = l.leader.clone();
        let serving_epoch = if l.serving && l.active { Some(l.epoch) } else { None };
        if serving_epoch == self.epoch {
            return;
        }
        // Stepping down, or a new term: every waiter is dropped (their
        // connections are closed with `M`/`E no_leader`), and a new term
        // restarts every held lease at full length from the applied state.
        let frame = self.not_leader_frame();
        let waiters: Vec<Waiter> = self.waiters.drain().map(|(_, w)| w).collect();
        for w in waiters {
            self.send(w.conn, Answer::Fatal(frame.clone()));
        }
        for c in self.conns.values_mut() {
            c.waiters.clear();
        }
        self.keys.clear();
        self.timers.clear();
        self.held = 0;
        self.total_waiters = 0;
        self.epoch = serving_epoch;
        if self.epoch.is_some() {
            let applied = self.replicator.applied();
            let holders: Vec<_> = applied.holders().map(|(k, h)| (k.clone(), h.clone())).collect();
            for (key, h) in holders {
                self.keys.entry(key.clone()).or_default();
                let proj = self.committed_holder(h.owner, h.token, h.lease_s);
                self.set_holder(&key, Some(proj));
            }
            debug!(epoch = l.epoch, held = self.held, "serving: leases restarted at full length");
        }
    }

    fn check_drained(&mut self) {
        if self.draining && self.in_flight == 0 {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::Standalone;

    fn k(s: &str) -> Key {
        Key::new(s.to_owned()).unwrap()
    }
    fn o(s: &str) -> Owner {
        Owner::new(s.to_owned()).unwrap()
    }

    async fn setup(limits: Limits) -> (ManagerHandle, mpsc::Receiver<Answer>) {
        let rep = Arc::new(Standalone::new(Addr::new("127.0.0.1:1").unwrap()));
        let h = spawn(rep, limits, Arc::default());
        let (tx, rx) = mpsc::channel(64);
        h.send(Request::Register { conn: 1, tx }).await.unwrap();
        (h, rx)
    }

    async fn acquire(h: &ManagerHandle, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
        let req = Request::Acquire {
            conn: 1,
            id: RequestId(id),
            key: k(key),
            owner: o(owner),
            wait,
            lease,
            read_at: Instant::now(),
        };
        h.send(req).await.unwrap();
    }

    async fn next(rx: &mut mpsc::Receiver<Answer>) -> ServerFrame {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap() {
            Answer::Reply { frame, .. } | Answer::Fatal(frame) => frame,
            Answer::Dropped(id) => panic!("request {id} dropped"),
        }
    }

    #[tokio::test]
    async fn held_keys_cap_is_checked_again_when_a_queued_free_key_is_granted() {
        let limits = Limits { max_held_keys: 1, ..Limits::default() };
        let (h, mut rx) = setup(limits).await;
        // A no-op release keeps key "a" busy; the A behind it waits for it.
        let release =
            Request::Release { conn: 1, id: RequestId(1), key: k("a"), owner: o("x"), token: Token::new(5).unwrap() };
        h.send(release).await.unwrap();
        acquire(&h, 2, "a", "o1", 0, 5).await;
        // Meanwhile key "b" takes the only held-key slot.
        acquire(&h, 3, "b", "o2", 0, 5).await;
        let mut frames = Vec::new();
        for _ in 0..3 {
            frames.push(next(&mut rx).await);
        }
        assert!(frames.contains(&ServerFrame::NotHolder { id: RequestId(1), key: k("a") }), "{frames:?}");
        assert!(frames.iter().any(|f| matches!(f, ServerFrame::Granted { id: RequestId(3), .. })), "{frames:?}");
        assert!(frames.contains(&ServerFrame::Busy { id: RequestId(2), key: k("a") }), "{frames:?}");
    }

    #[tokio::test]
    async fn leave_queues_drops_waiters_but_keeps_answering() {
        let (h, mut rx) = setup(Limits::default()).await;
        acquire(&h, 1, "lq", "o1", 0, 5).await;
        assert!(matches!(next(&mut rx).await, ServerFrame::Granted { .. }));
        acquire(&h, 2, "lq", "o2", 30, 5).await;
        h.send(Request::LeaveQueues { conn: 1 }).await.unwrap();
        let dropped = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
        assert!(matches!(dropped, Answer::Dropped(RequestId(2))), "{dropped:?}");
        // The connection still gets answers to its other requests.
        acquire(&h, 3, "lq-other", "o3", 0, 5).await;
        assert!(matches!(next(&mut rx).await, ServerFrame::Granted { id: RequestId(3), .. }));
        let info = h.lock_info(Key::new("lq").unwrap()).await.unwrap();
        assert_eq!(info.waiters, 0);
    }

    #[tokio::test]
    async fn grant_queue_release_handover_and_query() {
        let (h, mut rx) = setup(Limits::default()).await;
        acquire(&h, 1, "a", "o1", 0, 5).await;
        let ServerFrame::Granted { token: t1, .. } = next(&mut rx).await else { panic!() };
        acquire(&h, 2, "a", "o2", 0, 5).await;
        assert_eq!(next(&mut rx).await, ServerFrame::Timeout { id: RequestId(2), key: k("a") });
        acquire(&h, 3, "a", "o3", 10, 5).await;
        let info = h.lock_info(k("a")).await.unwrap();
        assert_eq!(info.waiters, 1);
        assert_eq!(info.holder.as_ref().unwrap().token, t1);
        h.send(Request::Release { conn: 1, id: RequestId(4), key: k("a"), owner: o("o1"), token: t1 }).await.unwrap();
        assert_eq!(next(&mut rx).await, ServerFrame::Released { id: RequestId(4), key: k("a") });
        let ServerFrame::Granted { id, token: t2, owner, .. } = next(&mut rx).await else { panic!() };
        assert_eq!((id, owner), (RequestId(3), o("o3")));
        assert!(t2 > t1);
        assert_eq!(h.metrics().grants.load(Ordering::Relaxed), 2);
        assert_eq!(h.metrics().held_keys.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn closed_connection_leaves_queue() {
        let (h, mut rx) = setup(Limits::default()).await;
        let (tx2, mut rx2) = mpsc::channel(8);
        h.send(Request::Register { conn: 2, tx: tx2 }).await.unwrap();
        acquire(&h, 1, "a", "o1", 0, 5).await;
        let ServerFrame::Granted { token, .. } = next(&mut rx).await else { panic!() };
        let req = Request::Acquire {
            conn: 2,
            id: RequestId(1),
            key: k("a"),
            owner: o("dead"),
            wait: 10,
            lease: 5,
            read_at: Instant::now(),
        };
        h.send(req).await.unwrap();
        h.send(Request::Closed { conn: 2 }).await.unwrap();
        assert_eq!(h.lock_info(k("a")).await.unwrap().waiters, 0);
        h.send(Request::Release { conn: 1, id: RequestId(2), key: k("a"), owner: o("o1"), token }).await.unwrap();
        assert_eq!(next(&mut rx).await, ServerFrame::Released { id: RequestId(2), key: k("a") });
        assert!(h.lock_info(k("a")).await.unwrap().holder.is_none());
        assert!(rx2.try_recv().is_err());
    }
}
