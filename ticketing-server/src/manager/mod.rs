//! The leader's lock manager (docs/protocol.md §6): one task that owns the
//! per-key projection (holder, FIFO waiters, lease and wait timers), turns
//! client requests into [`Command`](crate::locks::Command)s proposed through
//! the [`Replicator`], and routes the committed
//! [`Applied`](crate::locks::Applied) effects back to the connections as
//! `A`/`T`/`B`/`R`/`N`.
//!
//! - this module: the messages and the [`ManagerHandle`];
//! - `projection`: the projection itself, a plain struct (no tokio);
//! - `task`: the task's loop, requests, timers and leadership changes;
//! - `proposals`: what needs proposing per key, and routing the outcomes;
//! - `metrics`: the metrics registry.
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
//!   applied state by design (docs/protocol.md §6, "A new leader").
//! - The manager never awaits a connection or a proposal: the commands it
//!   needs are proposed in batches (one Raft entry each, at most one batch in
//!   flight, docs/cluster-protocol.md "Log entries"); a batch being committed
//!   runs in its own task and reports back through a channel, one the
//!   replicator answers at once (standalone) is routed inline; answers are
//!   handed to the connection's bounded queue with `try_send`.

pub mod metrics;
pub mod projection;
mod proposals;
mod task;

pub use metrics::Metrics;

use crate::config::Limits;
use crate::replication::Replicator;
use std::fmt;
use std::sync::Arc;
use ticketing_proto::{Addr, Key, Owner, RequestId, ServerFrame, Token};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Identifies one client connection for the lifetime of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Identifies one queued acquire inside the manager (never reused; a
/// waiter put back at the head of its queue gets a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(u64);

/// What the manager delivers to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
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
    /// `Q <id> <key> <owner>`: answered `H` (that owner holds the key) or
    /// `N`; changes nothing (docs/protocol.md §3.2).
    Holds {
        /// The connection.
        conn: ConnId,
        /// Request id.
        id: RequestId,
        /// Key.
        key: Key,
        /// The owner asked about.
        owner: Owner,
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
    /// Graceful shutdown: accept no new requests; `done` fires once no proposal is in flight.
    Drain {
        /// Fired when drained.
        done: oneshot::Sender<()>,
    },
}

/// What `/locks/<key>` shows of an owner: [`Owner::prefix`], its first 8
/// characters and never more than half of it — owner and token together
/// could release the lock, so the full owner never leaves the leader
/// (docs/deployment.md, "Admin HTTP").
pub fn owner_prefix(owner: &Owner) -> String {
    owner.prefix().to_owned()
}

/// The current holder of a key, as the leader projects it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HolderInfo {
    /// The owner's prefix ([`owner_prefix`]), never the full owner.
    pub owner_prefix: String,
    /// Its fencing token.
    pub token: Token,
    /// Milliseconds until its lease ends (at the leader, by domain time).
    pub remaining_ms: u64,
    /// Domain time (ms) of the grant; the lease ends at `granted_dt + lease`.
    pub granted_dt: u64,
}

/// One waiter of a key, as the leader projects it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WaiterInfo {
    /// The owner's prefix ([`owner_prefix`]), never the full owner.
    pub owner_prefix: String,
    /// The waiting client's address (`ip:port`).
    pub client: String,
    /// Milliseconds since the server read its `A`.
    pub waited_ms: u64,
    /// Milliseconds until its `wait` ends (then it is answered `T`).
    pub wait_left_ms: u64,
}

/// A read-only snapshot of one key (the body of `/locks/<key>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockInfo {
    /// The committed holder, if any (a grant still being committed is not shown).
    pub holder: Option<HolderInfo>,
    /// Every waiter, in FIFO order (the head is granted next).
    pub waiters: Vec<WaiterInfo>,
    /// The leader's domain time (ms) when the snapshot was taken.
    pub domain_time_ms: u64,
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
    let (tx, rx) = mpsc::channel(4096);
    task::start(replicator, limits, metrics.clone(), advertise, rx);
    ManagerHandle { tx, metrics }
}

#[cfg(test)]
mod tests;
