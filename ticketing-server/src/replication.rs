//! The one narrow "propose → committed" interface between the leader's lock
//! manager and whatever makes a command durable: [`Standalone`] applies it
//! at once to the single local [`LockState`]; the cluster implementation
//! commits it through openraft and applies it on every node. Both run the
//! same [`LockState::apply`], so there is one lock implementation.

use crate::locks::{Applied, Command, Holder, LockState};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use ticketing_proto::{Addr, ErrorCode, Key, ServerFrame};
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

/// The outcome of a proposed batch: one [`Applied`] per command, in order,
/// or one error for the whole batch (committed all together or not at all).
pub type BatchOutcome = Result<Vec<Applied>, ProposeError>;

/// What [`Replicator::propose`] gives back.
pub enum Proposal {
    /// Already committed and applied (standalone): the manager routes the
    /// outcomes at once, without a task or a channel round trip.
    Ready(BatchOutcome),
    /// Being committed: resolves once committed and applied (or failed).
    Pending(Pin<Box<dyn Future<Output = BatchOutcome> + Send>>),
}

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
    /// restarts its domain clock (docs/protocol.md, "Domain time") when it changes.
    pub epoch: u64,
}

/// What `/status` shows of the applied state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AppliedSummary {
    /// Keys held.
    pub held_keys: usize,
    /// The last token issued (0 before the first grant).
    pub last_token: u64,
}

/// THE rule for a request this node cannot serve (docs/protocol.md §7,
/// "Redirects"): `M <leader>` when a leader other than this node (`own`, its
/// advertised client address) is known, else `E no_leader`. A node never
/// redirects a client to itself: a restarted node can share its address with
/// the old member a stale leader hint still names.
pub fn redirect(leader: Option<&Addr>, own: &Addr) -> ServerFrame {
    match leader {
        Some(addr) if addr != own => ServerFrame::Moved { addr: addr.clone() },
        _ => ServerFrame::error(ErrorCode::NoLeader),
    }
}

/// Makes lock commands durable and applied, in one order, before anything is answered.
pub trait Replicator: Send + Sync + 'static {
    /// Propose a batch of commands (never empty) as one unit: committed
    /// together, applied in order with [`LockState::apply`]; the outcome has
    /// one [`Applied`] per command, in order. Commands of one batch are about
    /// distinct keys (the manager keeps one proposal per key in flight).
    fn propose(&self, cmds: Vec<Command>) -> Proposal;

    /// Runs `f` on the applied state, without copying it.
    fn with_applied(&self, f: &mut dyn FnMut(&LockState));

    /// Leadership changes.
    fn leadership(&self) -> watch::Receiver<Leadership>;
}

impl dyn Replicator {
    /// Every applied holder of `key` (a copy of those entries).
    pub fn applied_holders(&self, key: &Key) -> Vec<Holder> {
        let mut out = Vec::new();
        self.with_applied(&mut |s| out = s.holders_of(key));
        out
    }

    /// Held keys and the last token.
    pub fn applied_summary(&self) -> AppliedSummary {
        let mut out = AppliedSummary::default();
        self.with_applied(&mut |s| out = AppliedSummary { held_keys: s.held_count(), last_token: s.last_token() });
        out
    }
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
    fn propose(&self, cmds: Vec<Command>) -> Proposal {
        Proposal::Ready(match self.state.lock() {
            Ok(mut state) => Ok(state.apply_all(&cmds)),
            Err(_) => Err(ProposeError::Unknown),
        })
    }

    fn with_applied(&self, f: &mut dyn FnMut(&LockState)) {
        f(&self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.subscribe()
    }
}
