//! The lock manager task (docs/architecture.md): a thin tokio driver
//! around the pure [`Leader`](crate::leader::Leader), which holds every
//! rule of docs/protocol.md §4–6. The driver reads the clock, feeds the
//! leader its inputs (requests of the connections, finished batches,
//! leadership changes, timeouts), hands its outputs on — deliveries to each
//! connection's bounded queue with `try_send`, batches to the
//! [`Replicator`] — and sleeps until the leader's next timer.
//!
//! - this module: the messages and the [`ManagerHandle`];
//! - `driver`: the task's `select!` loop;
//! - `metrics`: the metrics registry.
//!
//! The driver never awaits a connection or a proposal: a batch being
//! committed runs in its own task and reports back through a channel; one
//! the replicator answers at once (standalone) is fed back inline, without
//! a task or a channel round trip.

mod driver;

pub use crate::leader::{owner_prefix, ConnId, Delivery, HolderInfo, LockInfo, WaiterInfo};
use crate::metrics::Metrics;

use crate::config::Limits;
use crate::replication::Replicator;
use std::fmt;
use std::sync::Arc;
use ticketing_proto::{Addr, Key};
use tokio::sync::{mpsc, oneshot};

/// What a connection (or the server) asks of the manager.
#[derive(Debug)]
pub enum ManagerRequest {
    /// A connection finished its handshake; deliveries for it go to `tx`.
    Register {
        /// The connection.
        conn: ConnId,
        /// Its delivery queue.
        tx: mpsc::Sender<Delivery>,
        /// The client's address (`ip:port`), shown for its waiters in `/locks/<key>`.
        client: String,
    },
    /// A client request (`A`, `S`, `K`, `R`, `Q`) of a registered connection.
    Request {
        /// The connection.
        conn: ConnId,
        /// The request, as the leader takes it.
        request: crate::leader::Request,
    },
    /// The client closed its sending side (EOF): its waiters leave their
    /// queues, each reported as [`Delivery::Dropped`]; answers to its
    /// requests already being committed are still delivered.
    LeaveQueues {
        /// The connection.
        conn: ConnId,
    },
    /// The connection is gone: its waiters leave their queues (its grants stay).
    Disconnected {
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
    /// The `n` keys with the most waiters now (the console), most first.
    Contended {
        /// How many keys.
        n: usize,
        /// Where the answer goes: each key with its waiter count.
        reply: oneshot::Sender<Vec<(Key, usize)>>,
    },
    /// Graceful shutdown: accept no new requests; `done` fires once no proposal is in flight.
    Drain {
        /// Fired when drained.
        done: oneshot::Sender<()>,
    },
}

/// A cloneable handle to the manager task.
#[derive(Clone)]
pub struct ManagerHandle {
    tx: mpsc::Sender<ManagerRequest>,
    metrics: Arc<Metrics>,
}

/// The manager task has stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagerGone;

impl fmt::Display for ManagerGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the lock manager has stopped")
    }
}

impl std::error::Error for ManagerGone {}

impl ManagerHandle {
    /// Sends one request (waits while the manager's inbox is full).
    pub async fn send(&self, req: ManagerRequest) -> Result<(), ManagerGone> {
        self.tx.send(req).await.map_err(|_| ManagerGone)
    }

    /// Tells the manager a connection is gone without waiting (used from `Drop`).
    pub fn disconnected(&self, conn: ConnId) {
        let tx = self.tx.clone();
        if tx.try_send(ManagerRequest::Disconnected { conn }).is_err() {
            tokio::spawn(async move {
                let _ = tx.send(ManagerRequest::Disconnected { conn }).await;
            });
        }
    }

    /// The projection of one key (for `/locks/<key>`).
    pub async fn lock_info(&self, key: Key) -> Result<LockInfo, ManagerGone> {
        let (reply, rx) = oneshot::channel();
        self.send(ManagerRequest::Query { key, reply }).await?;
        rx.await.map_err(|_| ManagerGone)
    }

    /// The `n` keys with the most waiters now, most first (for the console).
    pub async fn contended(&self, n: usize) -> Result<Vec<(Key, usize)>, ManagerGone> {
        let (reply, rx) = oneshot::channel();
        self.send(ManagerRequest::Contended { n, reply }).await?;
        rx.await.map_err(|_| ManagerGone)
    }

    /// Stops taking requests and waits until no proposal is in flight.
    pub async fn drain(&self) -> Result<(), ManagerGone> {
        let (done, rx) = oneshot::channel();
        self.send(ManagerRequest::Drain { done }).await?;
        rx.await.map_err(|_| ManagerGone)
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

/// Starts the manager task. It runs until every [`ManagerHandle`] is
/// dropped. `advertise` is this node's client address (never named in a
/// redirect, see [`crate::replication::redirect`]).
pub fn spawn(replicator: Arc<dyn Replicator>, limits: Limits, metrics: Arc<Metrics>, advertise: Addr) -> ManagerHandle {
    spawn_with_wall(replicator, limits, metrics, advertise, crate::leader::system_wall())
}

/// [`spawn`] with the wall clock new tokens start from (a simulated one in
/// a simulation; [`spawn`] takes the system's).
pub fn spawn_with_wall(
    replicator: Arc<dyn Replicator>,
    limits: Limits,
    metrics: Arc<Metrics>,
    advertise: Addr,
    wall: crate::leader::WallClock,
) -> ManagerHandle {
    let (tx, rx) = mpsc::channel(4096);
    driver::start(replicator, limits, metrics.clone(), advertise, wall, rx);
    ManagerHandle { tx, metrics }
}

#[cfg(test)]
mod tests;
