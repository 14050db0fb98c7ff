//! The manager task: a `select!` loop that reads the clock, feeds the
//! [`Leader`] and drains its outputs (the order of docs/architecture.md,
//! "The leader's inputs and outputs"): deliveries after every input, then
//! the batches once per pass, then it sleeps until `poll_timeout`.

use super::{ConnId, Delivery, ManagerRequest};
use crate::config::Limits;
use crate::leader::{AppliedView, BatchId, Leader};
use crate::locks::Holder;
use crate::metrics::gauge_value;
use crate::metrics::Metrics;
use crate::replication::{BatchOutcome, Leadership, Proposal, Replicator};
use std::collections::HashMap;
use std::sync::Arc;
use ticketing_proto::{Addr, Key};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

/// Proposal outcomes waiting for the manager (docs/configuration.md, "Queues").
const DONE_QUEUE: usize = 4096;

/// Requests taken from the inbox without waiting after each event, before
/// the commands they need are proposed together (one batch).
const DRAIN_PER_PASS: usize = 128;

/// A finished batch, reported back by the task that awaited it.
struct Done {
    id: BatchId,
    outcome: BatchOutcome,
}

/// The applied state as the leader reads it (one key at a time): after a
/// surprise, and for a dormant key (`leader/projection.rs`).
struct Applied<'a>(&'a dyn Replicator);

impl AppliedView for Applied<'_> {
    fn applied_holders(&self, key: &Key) -> Vec<Holder> {
        self.0.applied_holders(key)
    }
    fn applied_by_hash(&self, hash: u64) -> Vec<(Key, Holder)> {
        let mut out = Vec::new();
        self.0.with_applied(&mut |s| out = s.exclusive_by_hash(hash));
        out
    }
}

// The clock, read by the driver alone (the leader takes it as an input).
use crate::clock::now;

struct Driver {
    leader: Leader,
    replicator: Arc<dyn Replicator>,
    metrics: Arc<Metrics>,
    /// Registered connections and their delivery queues.
    conns: HashMap<ConnId, mpsc::Sender<Delivery>>,
    drained: Vec<oneshot::Sender<()>>,
    done_tx: mpsc::Sender<Done>,
}

/// Spawns the manager task reading `rx`.
pub(super) fn start(
    replicator: Arc<dyn Replicator>,
    limits: Limits,
    metrics: Arc<Metrics>,
    advertise: Addr,
    wall: crate::leader::WallClock,
    rx: mpsc::Receiver<ManagerRequest>,
) {
    // Proposal outcomes; a proposal task waits for room (there is at most
    // one batch in flight, so this never fills).
    let (done_tx, done_rx) = mpsc::channel(DONE_QUEUE);
    let leadership = replicator.leadership();
    let driver = Driver {
        leader: Leader::new(limits, advertise, now(), wall),
        replicator,
        metrics,
        conns: HashMap::new(),
        drained: Vec::new(),
        done_tx,
    };
    tokio::spawn(driver.run(rx, done_rx, leadership));
}

impl Driver {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<ManagerRequest>,
        mut done_rx: mpsc::Receiver<Done>,
        mut leadership: watch::Receiver<Leadership>,
    ) {
        let first = leadership.borrow_and_update().clone();
        self.on_leadership(&first);
        let mut leadership_open = true;
        loop {
            let next_timer = self.leader.poll_timeout().map(Instant::from_std);
            tokio::select! {
                biased;
                Some(done) = done_rx.recv() => self.on_committed(done.id, done.outcome),
                changed = leadership.changed(), if leadership_open => {
                    if changed.is_ok() {
                        let l = leadership.borrow_and_update().clone();
                        self.on_leadership(&l);
                    } else {
                        leadership_open = false;
                    }
                }
                req = rx.recv() => match req {
                    Some(req) => self.on_request(req),
                    None => break,
                },
                _ = tokio::time::sleep_until(next_timer.unwrap_or_else(Instant::now)), if next_timer.is_some() => {
                    self.leader.handle_timeout(now(), &Applied(&*self.replicator));
                    self.deliver();
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
            if self.leader.is_drained() {
                for done in self.drained.drain(..) {
                    let _ = done.send(());
                }
            }
            self.metrics.record_leader(self.leader.take_stats());
            self.metrics.waiters.set(gauge_value(self.leader.waiters()));
            self.metrics.held_keys.set(gauge_value(self.leader.held()));
        }
        debug!("lock manager stopped");
    }

    /// Hands every delivery of the leader to its connection's queue.
    fn deliver(&mut self) {
        while let Some((conn, delivery)) = self.leader.poll_delivery() {
            let Some(tx) = self.conns.get(&conn) else { continue };
            match tx.try_send(delivery) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // Cannot happen: a connection's queue holds one slot per in-flight request.
                    warn!(%conn, "delivery queue full; answer dropped");
                }
            }
        }
    }

    /// Hands the leader's batches to the replicator; one committed at once
    /// (standalone) is fed back here, without a task or a channel.
    fn flush(&mut self) {
        while let Some(batch) = self.leader.poll_proposal() {
            match self.replicator.propose(batch.cmds) {
                Proposal::Ready(outcome) => self.on_committed(batch.id, outcome),
                Proposal::Pending(fut) => {
                    let tx = self.done_tx.clone();
                    let id = batch.id;
                    tokio::spawn(async move {
                        let outcome = fut.await;
                        let _ = tx.send(Done { id, outcome }).await;
                    });
                }
            }
        }
    }

    fn on_committed(&mut self, id: BatchId, outcome: BatchOutcome) {
        self.leader.handle_committed(now(), id, outcome, &Applied(&*self.replicator));
        self.deliver();
    }

    fn on_leadership(&mut self, l: &Leadership) {
        let now = now();
        let leader = &mut self.leader;
        self.replicator.with_applied(&mut |applied| leader.handle_leadership(now, l, applied));
        self.deliver();
    }

    fn on_request(&mut self, req: ManagerRequest) {
        let now = now();
        match req {
            ManagerRequest::Register { conn, tx, client } => {
                self.conns.insert(conn, tx);
                self.leader.handle_conn_opened(now, conn, client);
            }
            ManagerRequest::LeaveQueues { conn } => self.leader.handle_leave_queues(now, conn),
            ManagerRequest::Disconnected { conn } => {
                self.leader.handle_conn_closed(now, conn);
                self.conns.remove(&conn);
            }
            ManagerRequest::Query { key, reply } => {
                let _ = reply.send(self.leader.lock_info(now, &key, &Applied(&*self.replicator)));
            }
            ManagerRequest::Contended { n, reply } => {
                let _ = reply.send(self.leader.contended(n));
            }
            ManagerRequest::Drain { done } => {
                self.leader.handle_drain();
                self.drained.push(done);
            }
            ManagerRequest::Request { conn, request } => {
                self.leader.handle_request(now, conn, request, &Applied(&*self.replicator))
            }
        }
        self.deliver();
    }
}
