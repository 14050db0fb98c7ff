//! The one narrow "propose → committed" interface between the leader's lock
//! manager and whatever makes a command durable: [`Standalone`] applies it
//! at once to the single local [`LockState`]; the cluster implementation
//! commits it through openraft and applies it on every node. Both run the
//! same [`LockState::apply`], so there is one lock implementation.

use crate::locks::{Command, LockState, Outcome};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use ticketing_proto::Addr;
use tokio::sync::watch;

/// Why a proposal was not committed (or its outcome is unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// This node is not the leader; the leader's client address if known.
    NotLeader(Option<Addr>),
    /// The outcome is unknown (timeout, quorum lost mid-flight). The caller
    /// MUST NOT answer `A`: the grant, if it committed, returns at lease end.
    Unknown,
    /// The node is shutting down.
    Shutdown,
}

/// A boxed proposal future.
pub type Proposal = Pin<Box<dyn Future<Output = Result<Outcome, ProposeError>> + Send>>;

/// What this node knows about leadership, published on a `watch` channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    /// This node may serve clients (it is the leader with a live quorum, or standalone).
    pub serving: bool,
    /// The node serves a fencing domain at all (`false` → `E not_active`).
    pub active: bool,
    /// The current leader's client address, if known (this node's own when serving).
    pub leader: Option<Addr>,
    /// Increases every time this node becomes the serving leader; the manager
    /// restarts every held lease at full length when it changes.
    pub epoch: u64,
}

/// Makes lock commands durable and applied, in one order, before anything is answered.
pub trait Replicator: Send + Sync + 'static {
    /// Propose one command; resolves once it is committed and applied, with
    /// the outcome of [`LockState::apply`] for it.
    fn propose(&self, cmd: Command) -> Proposal;

    /// A copy of the applied state (for a new leader's lease timers and for /locks).
    fn applied(&self) -> LockState;

    /// Leadership changes.
    fn leadership(&self) -> watch::Receiver<Leadership>;
}

/// Standalone mode: one node, always the serving leader; a command is
/// committed when it is applied to the local state.
pub struct Standalone {
    state: Arc<Mutex<LockState>>,
    leadership: watch::Sender<Leadership>,
}

impl Standalone {
    /// A standalone replicator announcing `advertise` as the leader.
    pub fn new(advertise: Addr) -> Standalone {
        let (tx, _) = watch::channel(Leadership { serving: true, active: true, leader: Some(advertise), epoch: 1 });
        Standalone { state: Arc::new(Mutex::new(LockState::new())), leadership: tx }
    }
}

impl Replicator for Standalone {
    fn propose(&self, cmd: Command) -> Proposal {
        let outcome = match self.state.lock() {
            Ok(mut state) => Ok(state.apply(&cmd)),
            Err(_) => Err(ProposeError::Unknown),
        };
        Box::pin(std::future::ready(outcome))
    }

    fn applied(&self) -> LockState {
        self.state.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }
}
