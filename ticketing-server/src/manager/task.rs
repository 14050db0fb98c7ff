//! The manager task: its loop, the requests of the connections, the wait and
//! lease timers, and leadership changes. What needs proposing and how
//! outcomes are routed is in `proposals`.

use super::metrics::gauge_value;
use super::projection::{Holding, LeaseGen, Projection, Waiter};
use super::proposals::{Done, Outbox};
use super::{ConnId, Delivery, ManagerRequest, Metrics, WaiterId};
use crate::config::Limits;
use crate::domain_time::{self, DomainClock};
use crate::replication::{self, Leadership, Replicator};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use ticketing_proto::{Addr, Key, RequestId, ServerFrame};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

/// Proposal outcomes waiting for the manager (docs/configuration.md, "Queues").
const DONE_QUEUE: usize = 4096;

/// Requests taken from the inbox without waiting after each event, before
/// the commands they need are proposed together (one batch).
const DRAIN_PER_PASS: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Wait(WaiterId),
    Lease(Key, LeaseGen),
    /// Commit a `Tick` if nothing was proposed for `--tick-ms`.
    Tick,
}

pub(super) struct Manager {
    pub(super) replicator: Arc<dyn Replicator>,
    pub(super) limits: Limits,
    pub(super) metrics: Arc<Metrics>,
    pub(super) advertise: Addr,
    pub(super) proj: Projection,
    /// Registered connections and their delivery queues.
    pub(super) conns: HashMap<ConnId, mpsc::Sender<Delivery>>,
    /// The client address of each registered connection (for `/locks/<key>`).
    clients: HashMap<ConnId, String>,
    /// The domain clock while serving (docs/protocol.md, "Domain time").
    pub(super) clock: Option<DomainClock>,
    /// When the last command was proposed (a `Tick` follows after `tick_ms` of silence).
    pub(super) last_proposed: Instant,
    /// A `Tick` is being committed.
    pub(super) tick_in_flight: bool,
    timers: BinaryHeap<Reverse<(Instant, u64, Timer)>>,
    timer_seq: u64,
    /// The leadership epoch we serve; `None` when not serving.
    pub(super) epoch: Option<u64>,
    leader: Option<Addr>,
    /// Commands proposed and not yet answered (outbox included).
    pub(super) in_flight: usize,
    /// Commands proposed and not yet handed to the replicator.
    pub(super) outbox: Outbox,
    /// Batches handed to the replicator and not yet finished.
    pub(super) batches_in_flight: usize,
    draining: bool,
    drained: Vec<oneshot::Sender<()>>,
    pub(super) done_tx: mpsc::Sender<Done>,
}

/// Spawns the manager task reading `rx`.
pub(super) fn start(
    replicator: Arc<dyn Replicator>,
    limits: Limits,
    metrics: Arc<Metrics>,
    advertise: Addr,
    rx: mpsc::Receiver<ManagerRequest>,
) {
    // Proposal outcomes; a proposal task waits for room (there is at most
    // one proposal in flight per key, so this rarely fills).
    let (done_tx, done_rx) = mpsc::channel(DONE_QUEUE);
    let leadership = replicator.leadership();
    let manager = Manager {
        replicator,
        limits,
        metrics,
        advertise,
        proj: Projection::new(),
        conns: HashMap::new(),
        clients: HashMap::new(),
        clock: None,
        last_proposed: Instant::now(),
        tick_in_flight: false,
        timers: BinaryHeap::new(),
        timer_seq: 0,
        epoch: None,
        leader: None,
        in_flight: 0,
        outbox: Outbox::default(),
        batches_in_flight: 0,
        draining: false,
        drained: Vec::new(),
        done_tx,
    };
    tokio::spawn(manager.run(rx, done_rx, leadership));
}

impl Manager {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<ManagerRequest>,
        mut done_rx: mpsc::Receiver<Done>,
        mut leadership: watch::Receiver<Leadership>,
    ) {
        let first = leadership.borrow_and_update().clone();
        self.on_leadership(first);
        let mut leadership_open = true;
        loop {
            let next_timer = self.timers.peek().map(|Reverse((at, _, _))| *at);
            tokio::select! {
                biased;
                Some(done) = done_rx.recv() => {
                    self.batches_in_flight -= 1;
                    self.on_done(done);
                }
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
            // Take what else is already queued (bounded), so the commands
            // it needs go into the same batch.
            for _ in 0..DRAIN_PER_PASS {
                match rx.try_recv() {
                    Ok(req) => self.on_request(req),
                    Err(_) => break,
                }
            }
            self.flush();
            self.check_drained();
            self.metrics.waiters.set(gauge_value(self.proj.waiters()));
            self.metrics.held_keys.set(gauge_value(self.proj.held()));
        }
        debug!("lock manager stopped");
    }

    // ----- plumbing ---------------------------------------------------------

    pub(super) fn send(&mut self, conn: ConnId, delivery: Delivery) {
        let Some(tx) = self.conns.get(&conn) else { return };
        match tx.try_send(delivery) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                // Cannot happen: a connection's queue holds one slot per in-flight request.
                warn!(%conn, "delivery queue full; answer dropped");
            }
        }
    }

    pub(super) fn reply(&mut self, conn: ConnId, id: RequestId, frame: ServerFrame) {
        self.send(conn, Delivery::Reply { id, frame });
    }

    /// Answers `w` with `T` (its wait ended without a grant).
    pub(super) fn time_out(&mut self, w: Waiter) {
        self.metrics.timeouts.inc();
        self.reply(w.conn, w.id, ServerFrame::Timeout { id: w.id, key: w.key });
    }

    /// Answers request `id` on `key` with `B` (a limit is reached).
    pub(super) fn refuse_busy(&mut self, conn: ConnId, id: RequestId, key: Key) {
        self.metrics.busy.inc();
        self.reply(conn, id, ServerFrame::Busy { id, key });
    }

    /// `M <leader>` or `E no_leader`, by the one rule of [`replication::redirect`].
    pub(super) fn redirect_frame(&self, leader: Option<&Addr>) -> ServerFrame {
        replication::redirect(leader, &self.advertise)
    }

    fn push_timer(&mut self, at: Instant, timer: Timer) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, timer)));
    }

    /// Sets the holder of `key` and arms its lease timer.
    pub(super) fn hold(&mut self, key: &Key, holding: Option<Holding>) {
        if let Some(Holding { deadline: Some(at), gen, .. }) = &holding {
            self.push_timer(*at, Timer::Lease(key.clone(), *gen));
        }
        self.proj.set_holder(key, holding);
    }

    /// Puts `w` at the tail of its key's queue, with a wait timer if `timed`.
    fn enqueue(&mut self, w: Waiter, timed: bool) {
        if !self.conns.contains_key(&w.conn) {
            return; // the connection closed meanwhile: its waiters leave anyway
        }
        let until = w.wait_until;
        let wid = self.proj.enqueue(w);
        if timed {
            self.push_timer(until, Timer::Wait(wid));
        }
    }

    /// Puts a waiter that was taken off for a hand-over back at the head of
    /// its queue (the hand-over did not happen) — unless its wait is over or
    /// its connection is gone.
    pub(super) fn put_back(&mut self, w: Waiter) {
        if w.wait_until <= Instant::now() {
            self.time_out(w);
            return;
        }
        if !self.conns.contains_key(&w.conn) || self.epoch.is_none() {
            return;
        }
        let until = w.wait_until;
        let wid = self.proj.requeue_front(w);
        self.push_timer(until, Timer::Wait(wid));
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
            let frame = self.redirect_frame(self.leader.as_ref());
            self.send(conn, Delivery::Fatal(frame));
            return false;
        }
        true
    }

    fn on_request(&mut self, req: ManagerRequest) {
        match req {
            ManagerRequest::Register { conn, tx, client } => {
                self.conns.insert(conn, tx);
                self.clients.insert(conn, client);
            }
            ManagerRequest::LeaveQueues { conn } => {
                for w in self.proj.remove_conn_waiters(conn) {
                    self.send(conn, Delivery::Dropped(w.id));
                }
            }
            ManagerRequest::Disconnected { conn } => {
                self.clients.remove(&conn);
                if self.conns.remove(&conn).is_some() {
                    self.proj.remove_conn_waiters(conn);
                }
            }
            ManagerRequest::Query { key, reply } => {
                let now = Instant::now();
                let clients = &self.clients;
                let client = |c: ConnId| clients.get(&c).cloned().unwrap_or_default();
                let mut info = self.proj.lock_info(&key, now, &client);
                info.domain_time_ms = self.domain_now(now);
                let _ = reply.send(info);
            }
            ManagerRequest::Contended { n, reply } => {
                let _ = reply.send(self.proj.contended(n));
            }
            ManagerRequest::Holds { conn, id, key, owner } => {
                if !self.accepts_requests(conn) {
                    return;
                }
                if self.proj.is_busy(&key) {
                    // A grant (or hand-over) of this key is being committed:
                    // answer by its outcome (see `pump`).
                    self.proj.push_query(&key, super::projection::QueuedQuery { conn, id, owner });
                } else {
                    self.answer_query(conn, id, &key, &owner);
                }
            }
            ManagerRequest::Drain { done } => {
                self.draining = true;
                self.drained.push(done);
            }
            ManagerRequest::Acquire { conn, id, key, owner, wait, lease, read_at } => {
                if !self.accepts_requests(conn) {
                    return;
                }
                let wait_until = read_at + Duration::from_secs(u64::from(wait));
                let w = Waiter { conn, id, key, owner, lease, read_at, wait_until };
                self.acquire(w, wait);
            }
            ManagerRequest::Release { conn, id, key, owner, token } => {
                if !self.accepts_requests(conn) {
                    return;
                }
                self.proj.push_release(&key, super::projection::QueuedRelease { conn, id, owner, token });
                self.pump(&key);
            }
        }
    }

    fn acquire(&mut self, w: Waiter, wait: u8) {
        let key = w.key.clone();
        // Free: no holder and nobody queued. A free key can still have a
        // proposal in flight: the no-op release of an `R` that matches no
        // grant (docs/protocol.md §6). The grant is then the key's next command.
        let free = self.proj.holder(&key).is_none() && self.proj.queued(&key) == 0;
        if free {
            if self.proj.held() >= self.limits.max_held_keys {
                self.refuse_busy(w.conn, w.id, key.clone());
                self.proj.remove_if_idle(&key);
                return;
            }
            if self.proj.is_busy(&key) {
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
            self.time_out(w);
            return;
        }
        if self.proj.queued(&key) >= self.limits.max_waiters_per_key || self.proj.waiters() >= self.limits.max_waiters {
            self.refuse_busy(w.conn, w.id, key);
            return;
        }
        self.enqueue(w, true);
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
                    if self.proj.waiter(wid).is_some_and(|w| w.wait_until <= now) {
                        if let Some(w) = self.proj.remove_waiter(wid) {
                            self.time_out(w);
                        }
                    }
                }
                Timer::Lease(key, gen) => {
                    if self.proj.holder(&key).is_some_and(|h| h.gen == gen) {
                        self.pump(&key);
                    }
                }
                Timer::Tick => self.on_tick_timer(now),
            }
        }
    }

    fn on_leadership(&mut self, l: Leadership) {
        self.leader = l.leader.clone();
        let serving_epoch = if l.serving && l.active { Some(l.epoch) } else { None };
        if serving_epoch == self.epoch {
            return;
        }
        self.discard_outbox();
        // Stepping down, or a new term: every waiter is dropped (their
        // connections are closed with `M`/`E no_leader`). A new term starts
        // its domain clock at the largest applied domain time and keeps every
        // held lock until `granted_dt + lease` in domain time
        // (docs/protocol.md, "Domain time").
        let frame = self.redirect_frame(self.leader.as_ref());
        for w in self.proj.clear() {
            self.send(w.conn, Delivery::Fatal(frame.clone()));
        }
        self.timers.clear();
        self.epoch = serving_epoch;
        self.clock = None;
        if self.epoch.is_some() {
            let now = Instant::now();
            let (applied_dt, holders) = self.replicator.applied_holders_at();
            let clock = DomainClock::start(applied_dt, now);
            self.clock = Some(clock);
            for (key, h) in holders {
                let deadline = clock.instant_of(h.end_dt(), now);
                let holding = self.proj.until(h.owner, h.token, h.granted_dt, deadline);
                self.hold(&key, Some(holding));
            }
            self.last_proposed = now;
            self.push_timer(now + self.tick(), Timer::Tick);
            debug!(
                epoch = l.epoch,
                held = self.proj.held(),
                applied_dt,
                "serving: leases kept until their domain-time end"
            );
        }
    }

    /// The domain time now (0 when not serving).
    pub(super) fn domain_now(&self, now: Instant) -> u64 {
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
            self.propose_tick(now);
        }
        let next = (self.last_proposed + self.tick()).max(now + Duration::from_millis(1));
        let next = if self.tick_in_flight { next.max(now + self.tick()) } else { next };
        self.push_timer(next, Timer::Tick);
    }

    /// `H` when `owner` holds `key` (remaining by domain time), else `N`.
    pub(super) fn answer_query(&mut self, conn: ConnId, id: RequestId, key: &Key, owner: &ticketing_proto::Owner) {
        let now = Instant::now();
        let frame = match self.proj.holder(key) {
            Some(Holding { owner: o, token: Some(token), deadline: Some(deadline), .. }) if o == owner => {
                let left = deadline.saturating_duration_since(now).as_millis();
                ServerFrame::Held {
                    id,
                    key: key.clone(),
                    owner: owner.clone(),
                    token: *token,
                    remaining_ms: u32::try_from(left).unwrap_or(u32::MAX),
                }
            }
            _ => ServerFrame::NotHolder { id, key: key.clone() },
        };
        self.metrics.queries.inc();
        self.reply(conn, id, frame);
        self.proj.remove_if_idle(key);
    }

    fn check_drained(&mut self) {
        if self.draining && self.in_flight == 0 {
            for done in self.drained.drain(..) {
                let _ = done.send(());
            }
        }
    }
}
