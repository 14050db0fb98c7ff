//! Identity and membership (docs/deployment.md, "A 3-node cluster" and
//! "Identity and the rolling restart"): bootstrap of a new fencing
//! domain, the join loop of a node without one, and the leader's rolling
//! learner replacement (add learner → caught up → replace the voter), one at
//! a time.

use super::peer::{Pool, RpcError};
use super::types::{DomainId, NodeId, NodeInfo};
use super::wire::{Body, BootstrapAnswer, JoinAnswer, JoinRequest, PeerStatus};
use super::Node;
use openraft::{ChangeMembers, ServerState};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tracing::{debug, info, warn};

/// How long `--bootstrap` keeps trying to reach every peer.
pub const BOOTSTRAP_PATIENCE: Duration = Duration::from_secs(30);
/// How often a node without a domain asks its peers to join it.
const JOIN_EVERY: Duration = Duration::from_millis(500);
/// Time to add a learner and let it catch up, and to change the membership.
const REPLACE_STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
pub fn role_text(s: ServerState) -> &'static str {
    match s {
        ServerState::Leader => "leader",
        ServerState::Follower => "follower",
        ServerState::Candidate => "candidate",
        ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    }
}

/// What this node says about itself to a `Status` request.
pub fn status(node: &Node) -> PeerStatus {
    let (initialized, role, leader) = match node.raft.get() {
        Some(raft) => {
            let m = raft.metrics().borrow().clone();
            let initialized = m.membership_config.membership().nodes().next().is_some();
            (initialized, role_text(m.state), m.current_leader)
        }
        None => (false, "learner", None),
    };
    PeerStatus {
        node_id: node.id,
        domain: node.domain(),
        client: node.client_addr.clone(),
        admin: node.admin_addr.clone(),
        initialized,
        role: role.to_owned(),
        leader,
    }
}

/// A bootstrapping peer asks this node to join the new domain `d`.
pub async fn on_bootstrap(node: &Node, d: DomainId) -> BootstrapAnswer {
    let initialized = match node.raft.get() {
        Some(raft) => raft.is_initialized().await.unwrap_or(true),
        None => true,
    };
    if let Some(mine) = node.domain() {
        return BootstrapAnswer::AlreadyInDomain(mine);
    }
    if initialized {
        // Raft state without a domain cannot happen; refuse to be safe.
        return BootstrapAnswer::AlreadyInDomain(DomainId(0));
    }
    if node.adopt_domain(d) {
        info!(domain = %d, "joined a new fencing domain (bootstrap by a peer)");
        BootstrapAnswer::Ok
    } else {
        BootstrapAnswer::AlreadyInDomain(node.domain().unwrap_or(DomainId(0)))
    }
}

/// Why `--bootstrap` refused to create a domain (nothing was changed).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapRefusal {
    /// A peer already belongs to a fencing domain.
    PeerInDomain {
        /// Its `--peers` address.
        addr: String,
        /// Its NodeId.
        node: NodeId,
        /// Its domain.
        domain: DomainId,
    },
    /// A peer already has Raft state.
    PeerInitialized {
        /// Its `--peers` address.
        addr: String,
    },
    /// Not every peer answered within the patience.
    PeersMissing {
        /// Each missing peer with why.
        missing: Vec<String>,
    },
    /// None of `--peers` is this node.
    NotAPeer {
        /// The `--peers` list.
        peers: Vec<String>,
        /// This node's `--peer-listen`.
        peer_listen: String,
    },
    /// Two `--peers` entries reach the same node.
    DuplicateNode(NodeId),
    /// This node joined another domain meanwhile.
    JoinedMeanwhile,
    /// A peer joined another domain meanwhile.
    PeerJoinedMeanwhile {
        /// Its `--peers` address.
        addr: String,
        /// The domain it joined.
        domain: DomainId,
    },
    /// A peer answered something else than asked.
    UnexpectedAnswer {
        /// Its `--peers` address.
        addr: String,
    },
    /// A peer failed while being bootstrapped.
    PeerFailed {
        /// Its `--peers` address.
        addr: String,
        /// Why.
        error: RpcError,
    },
    /// Raft is not running on this node.
    RaftNotRunning,
    /// Raft refused to initialize the group (its reason).
    Initialize(String),
}

impl fmt::Display for BootstrapRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapRefusal::PeerInDomain { addr, node, domain } => write!(
                f,
                "peer {addr} (node {node}) already belongs to fencing domain {domain}: refusing to bootstrap; \
                 --bootstrap is only for the first start of a new cluster"
            ),
            BootstrapRefusal::PeerInitialized { addr } => {
                write!(f, "peer {addr} already has Raft state: refusing to bootstrap")
            }
            BootstrapRefusal::PeersMissing { missing } => write!(
                f,
                "bootstrap needs every peer reachable; after {}s still missing: {}",
                BOOTSTRAP_PATIENCE.as_secs(),
                missing.join("; ")
            ),
            BootstrapRefusal::NotAPeer { peers, peer_listen } => write!(
                f,
                "none of --peers {peers:?} is this node (its --peer-listen {peer_listen}): \
                 list this node's own peer address too"
            ),
            BootstrapRefusal::DuplicateNode(id) => {
                write!(f, "two --peers entries reach the same node {id}: list each node once")
            }
            BootstrapRefusal::JoinedMeanwhile => {
                f.write_str("this node joined another domain while bootstrapping: refusing")
            }
            BootstrapRefusal::PeerJoinedMeanwhile { addr, domain } => {
                write!(f, "peer {addr} joined domain {domain} meanwhile: refusing to bootstrap")
            }
            BootstrapRefusal::UnexpectedAnswer { addr } => write!(f, "peer {addr}: unexpected answer to bootstrap"),
            BootstrapRefusal::PeerFailed { addr, error } => write!(f, "peer {addr} failed during bootstrap: {error}"),
            BootstrapRefusal::RaftNotRunning => f.write_str("raft is not running"),
            BootstrapRefusal::Initialize(e) => write!(f, "cannot initialize the Raft group: {e}"),
        }
    }
}

impl std::error::Error for BootstrapRefusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BootstrapRefusal::PeerFailed { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// `--bootstrap`: create a new domain with every peer as a voter, or refuse.
pub async fn bootstrap(node: Arc<Node>, pool: Arc<Pool>) -> Result<(), BootstrapRefusal> {
    let statuses = peer_statuses(&node, &pool).await?;
    check_members(&node, &statuses)?;
    let domain = new_domain_id();
    if !node.adopt_domain(domain) {
        return Err(BootstrapRefusal::JoinedMeanwhile);
    }
    announce_domain(&node, &pool, &statuses, domain).await?;
    let members: BTreeMap<NodeId, NodeInfo> = statuses
        .iter()
        .map(|(addr, s)| (s.node_id, NodeInfo { peer: addr.clone(), client: s.client.clone(), admin: s.admin.clone() }))
        .collect();
    let raft = node.raft.get().ok_or(BootstrapRefusal::RaftNotRunning)?;
    raft.initialize(members.clone()).await.map_err(|e| BootstrapRefusal::Initialize(e.to_string()))?;
    info!(domain = %domain, members = ?members, "bootstrapped a new fencing domain");
    Ok(())
}

/// Bootstrap step 1: the status of every peer, waiting (up to
/// [`BOOTSTRAP_PATIENCE`]) until all answer; refused if any belongs to a
/// domain or has Raft state.
async fn peer_statuses(node: &Node, pool: &Pool) -> Result<BTreeMap<String, PeerStatus>, BootstrapRefusal> {
    let deadline = crate::clock::now() + BOOTSTRAP_PATIENCE;
    loop {
        let mut found = BTreeMap::new();
        let mut missing = Vec::new();
        for addr in &node.peers {
            match pool.call(addr, None, Body::StatusReq, Duration::from_secs(2)).await {
                Ok(Body::StatusResp(s)) => {
                    if let Some(d) = s.domain {
                        return Err(BootstrapRefusal::PeerInDomain { addr: addr.clone(), node: s.node_id, domain: d });
                    }
                    if s.initialized {
                        return Err(BootstrapRefusal::PeerInitialized { addr: addr.clone() });
                    }
                    found.insert(addr.clone(), s);
                }
                Ok(_) => missing.push(format!("{addr}: unexpected answer")),
                Err(e) => missing.push(format!("{addr}: {e}")),
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        if crate::clock::now() >= deadline {
            return Err(BootstrapRefusal::PeersMissing { missing });
        }
        debug!(missing = ?missing, "bootstrap: waiting for peers");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Bootstrap step 2: this node is among the peers, and each peer is listed once.
fn check_members(node: &Node, statuses: &BTreeMap<String, PeerStatus>) -> Result<(), BootstrapRefusal> {
    if !statuses.values().any(|s| s.node_id == node.id) {
        return Err(BootstrapRefusal::NotAPeer {
            peers: node.peers.clone(),
            peer_listen: node.peer_listen.to_string(),
        });
    }
    let mut ids = BTreeSet::new();
    for s in statuses.values() {
        if !ids.insert(s.node_id) {
            return Err(BootstrapRefusal::DuplicateNode(s.node_id));
        }
    }
    Ok(())
}

/// A new random, non-zero fencing domain id.
fn new_domain_id() -> DomainId {
    loop {
        let mut b = [0u8; 16];
        rand_core::RngCore::fill_bytes(&mut ticketing_proto::entropy::ThreadOr(rand_core::OsRng), &mut b);
        let d = u128::from_be_bytes(b);
        if d != 0 {
            return DomainId(d);
        }
    }
}

/// Bootstrap step 3: every other peer joins `domain`, or bootstrap is refused.
async fn announce_domain(
    node: &Node,
    pool: &Pool,
    statuses: &BTreeMap<String, PeerStatus>,
    domain: DomainId,
) -> Result<(), BootstrapRefusal> {
    for (addr, s) in statuses {
        if s.node_id == node.id {
            continue;
        }
        match pool.call(addr, Some(s.node_id), Body::BootstrapReq(domain), Duration::from_secs(2)).await {
            Ok(Body::BootstrapResp(BootstrapAnswer::Ok)) => {}
            Ok(Body::BootstrapResp(BootstrapAnswer::AlreadyInDomain(d))) => {
                return Err(BootstrapRefusal::PeerJoinedMeanwhile { addr: addr.clone(), domain: d });
            }
            Ok(_) => return Err(BootstrapRefusal::UnexpectedAnswer { addr: addr.clone() }),
            Err(error) => return Err(BootstrapRefusal::PeerFailed { addr: addr.clone(), error }),
        }
    }
    Ok(())
}

/// Whether `id` is a voter in this node's view of the membership.
fn is_voter(node: &Node, id: NodeId) -> bool {
    node.raft.get().is_some_and(|r| r.metrics().borrow().membership_config.membership().voter_ids().any(|v| v == id))
}

/// Finds which `--peers` entry is this node: its `--peer-listen` if listed,
/// else the address whose handshake answers with this node's id.
pub async fn resolve_self(node: &Node, pool: &Pool) -> String {
    if node.peers.iter().any(|p| p == &node.peer_listen) {
        return node.peer_listen.clone();
    }
    let mut warned = false;
    loop {
        for p in &node.peers {
            if pool.node_id_at(p).await.ok() == Some(node.id) {
                return p.clone();
            }
        }
        if !warned {
            warn!(peers = ?node.peers, listen = %node.peer_listen, "this node's --peer-listen is not in --peers; \
                  looking for the entry that reaches this node");
            warned = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A node that is not a voter asks its peers to join it (docs/deployment.md, "Identity and
/// the rolling restart"), until it is one.
pub async fn join_loop(node: Arc<Node>, pool: Arc<Pool>) {
    let me = resolve_self(&node, &pool).await;
    let request = JoinRequest {
        node_id: node.id,
        node: NodeInfo { peer: me.clone(), client: node.client_addr.clone(), admin: node.admin_addr.clone() },
    };
    let mut last_note = String::new();
    loop {
        if is_voter(&node, node.id) {
            info!(node = %node.id, "this node is a voter of the domain");
            return;
        }
        for addr in node.peers.iter().filter(|p| **p != me) {
            let note = match pool.call(addr, None, Body::JoinReq(request.clone()), Duration::from_secs(2)).await {
                Ok(Body::JoinResp(JoinAnswer::Accepted(d))) => {
                    if node.adopt_domain(d) {
                        info!(domain = %d, leader = %addr, "join accepted");
                    }
                    format!("accepted by {addr}")
                }
                Ok(Body::JoinResp(JoinAnswer::Refused(why))) => format!("refused by {addr}: {why}"),
                Ok(Body::JoinResp(a)) => format!("{addr}: {a:?}"),
                Ok(_) => format!("{addr}: unexpected answer"),
                Err(RpcError::Unreachable(_)) => continue,
                Err(e) => format!("{addr}: {e}"),
            };
            if note != last_note {
                debug!(%note, "join");
                last_note = note;
            }
        }
        tokio::time::sleep(JOIN_EVERY).await;
    }
}

/// The leader's side of a join: replace the old member at the joiner's
/// address by the joiner, one replacement at a time.
pub async fn on_join(node: &Arc<Node>, req: JoinRequest) -> JoinAnswer {
    let Some(raft) = node.raft.get() else { return JoinAnswer::NotLeader };
    let Some(domain) = node.domain() else { return JoinAnswer::NotLeader };
    if !node.is_serving() {
        return JoinAnswer::NotLeader;
    }
    let membership = raft.metrics().borrow().membership_config.clone();
    let membership = membership.membership();
    if membership.voter_ids().any(|v| v == req.node_id) {
        return JoinAnswer::Accepted(domain);
    }
    let old: BTreeSet<NodeId> = membership
        .nodes()
        .filter(|(id, n)| n.peer == req.node.peer && **id != req.node_id)
        .map(|(id, _)| *id)
        .collect();
    let old_voters: BTreeSet<NodeId> = membership.voter_ids().filter(|v| old.contains(v)).collect();
    if old_voters.is_empty() {
        return JoinAnswer::Refused(format!("no voter of the domain has the peer address {}", req.node.peer));
    }
    if req.node_id == node.id {
        return JoinAnswer::Refused("a node cannot replace itself".into());
    }
    let Ok(guard) = node.replacing.clone().try_lock_owned() else { return JoinAnswer::Busy };
    let voters: BTreeSet<NodeId> =
        membership.voter_ids().filter(|v| !old.contains(v)).chain(std::iter::once(req.node_id)).collect();
    let raft = raft.clone();
    tokio::spawn(async move {
        let _guard = guard;
        info!(new = %req.node_id, old = ?old_voters, addr = %req.node.peer, "replacing a member: adding the learner");
        match tokio::time::timeout(REPLACE_STEP_TIMEOUT, raft.add_learner(req.node_id, req.node.clone(), true)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return warn!(error = %e, "replacement: add learner failed"),
            Err(_) => return warn!("replacement: the learner did not catch up in time"),
        }
        info!(new = %req.node_id, voters = ?voters, "replacement: learner caught up, changing the voters");
        match tokio::time::timeout(
            REPLACE_STEP_TIMEOUT,
            raft.change_membership(ChangeMembers::ReplaceAllVoters(voters), false),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return warn!(error = %e, "replacement: membership change failed"),
            Err(_) => return warn!("replacement: membership change timed out"),
        }
        // Leftover learners at that address (an earlier joiner that died).
        let left: BTreeSet<NodeId> = {
            let m = raft.metrics().borrow().membership_config.clone();
            m.membership().nodes().filter(|(id, _)| old.contains(id)).map(|(id, _)| *id).collect()
        };
        if !left.is_empty() {
            if let Ok(Err(e)) = tokio::time::timeout(
                REPLACE_STEP_TIMEOUT,
                raft.change_membership(ChangeMembers::RemoveNodes(left), false),
            )
            .await
            {
                warn!(error = %e, "replacement: removing stale learners failed");
            }
        }
        info!(new = %req.node_id, "replacement done");
    });
    JoinAnswer::Accepted(domain)
}

/// How long a membership change may take, each step (a new node catching
/// up as a learner; the joint and the final configuration committed).
const CHANGE_STEP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node to be added may take to answer at all (it may have just
/// started).
const NEW_NODE_PATIENCE: Duration = Duration::from_secs(10);
/// How long a node may take to answer the liveness probe of a change.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Grows the voters 3 → 5 with the nodes at the two peer addresses `add`
/// (docs/operating.md, "Growing and shrinking a cluster"): each new node is
/// caught up as a learner first, then both become voters in one joint
/// consensus step. Only the serving leader changes the membership, one
/// change at a time; anything that does not fit is refused with the reason
/// and changes nothing.
pub async fn grow(node: &Node, pool: &Pool, add: &[String]) -> Result<(), String> {
    let raft = node.raft.get().ok_or("raft is not running")?;
    let domain = node.domain().filter(|_| node.is_serving()).ok_or(NOT_LEADER)?;
    let _one = node.replacing.clone().try_lock_owned().map_err(|_| BUSY)?;
    let membership = raft.metrics().borrow().membership_config.membership().clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    if voters.len() != 3 {
        return Err(format!("the cluster has {} voters: add grows 3 voters to 5", voters.len()));
    }
    let [a, b] = add else { return Err("add takes exactly two peer addresses (3 → 5 voters)".into()) };
    if a == b {
        return Err(format!("{a} is given twice"));
    }
    let mut joining = BTreeMap::new();
    for addr in [a, b] {
        if let Some((id, _)) = membership.nodes().find(|(id, n)| n.peer == *addr && voters.contains(id)) {
            return Err(format!("{addr} is already the peer address of voter {id}"));
        }
        let s = new_node_status(pool, addr).await?;
        if voters.contains(&s.node_id) || joining.values().any(|(id, _): &(NodeId, NodeInfo)| *id == s.node_id) {
            return Err(format!("{addr} is node {}, already a member", s.node_id));
        }
        match s.domain {
            Some(d) if d != domain => {
                return Err(format!("{addr} (node {}) belongs to another fencing domain {d}", s.node_id))
            }
            // A node of this domain that is no voter was one before: its
            // NodeId never returns (docs/deployment.md, "Identity and the
            // rolling restart"); a learner of a change that did not finish may.
            Some(_) if membership.get_node(&s.node_id).is_none() => {
                return Err(format!(
                    "{addr} (node {}) was a member of this domain and was removed: start it on an empty data dir \
                     to add it as a new node",
                    s.node_id
                ))
            }
            _ => {}
        }
        let info = NodeInfo { peer: addr.clone(), client: s.client, admin: s.admin };
        joining.insert(addr.clone(), (s.node_id, info));
    }
    for (addr, (id, info)) in &joining {
        info!(node = %id, %addr, "grow: adding a learner");
        match tokio::time::timeout(CHANGE_STEP_TIMEOUT, raft.add_learner(*id, info.clone(), true)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("adding {addr} as a learner failed: {e}")),
            Err(_) => return Err(format!("{addr} did not catch up within {}s", CHANGE_STEP_TIMEOUT.as_secs())),
        }
    }
    let ids: BTreeSet<NodeId> = joining.values().map(|(id, _)| *id).collect();
    info!(voters = ?ids, "grow: the learners caught up; adding them as voters (joint consensus)");
    change(raft, ChangeMembers::AddVoterIds(ids)).await?;
    info!("grow: the cluster has 5 voters");
    Ok(())
}

/// The status of a node about to be added, asked until it answers (a node
/// just started may not listen yet) for up to [`NEW_NODE_PATIENCE`].
async fn new_node_status(pool: &Pool, addr: &str) -> Result<PeerStatus, String> {
    let deadline = crate::clock::now() + NEW_NODE_PATIENCE;
    loop {
        match pool.call(addr, None, Body::StatusReq, PROBE_TIMEOUT).await {
            Ok(Body::StatusResp(s)) => return Ok(s),
            Ok(_) => return Err(format!("{addr}: unexpected answer")),
            Err(e) if crate::clock::now() >= deadline => {
                return Err(format!("{addr}: {e}: start the new node first (without --bootstrap)"))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Shrinks the voters 5 → 3, removing the two voters `remove` names (a
/// NodeId or a peer address each) in one joint consensus step. Refused
/// unless a majority of the 5 and a majority of the 3 left answer now (the
/// change could not commit otherwise). Removing the leader itself is
/// allowed: it commits the change, then steps down and the 3 elect a new
/// leader.
pub async fn shrink(node: &Node, pool: &Pool, remove: &[String]) -> Result<(), String> {
    let raft = node.raft.get().ok_or("raft is not running")?;
    node.domain().filter(|_| node.is_serving()).ok_or(NOT_LEADER)?;
    let _one = node.replacing.clone().try_lock_owned().map_err(|_| BUSY)?;
    let membership = raft.metrics().borrow().membership_config.membership().clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    if voters.len() != 5 {
        return Err(format!("the cluster has {} voters: remove shrinks 5 voters to 3", voters.len()));
    }
    if remove.len() != 2 {
        return Err("remove takes exactly two nodes (5 → 3 voters)".into());
    }
    let mut gone = BTreeSet::new();
    for r in remove {
        let id = membership
            .nodes()
            .find(|(id, n)| voters.contains(id) && (n.peer == *r || id.0.to_string() == *r))
            .map(|(id, _)| *id)
            .ok_or_else(|| format!("{r} is neither the NodeId nor the peer address of a voter"))?;
        if !gone.insert(id) {
            return Err(format!("{r} names node {id} twice"));
        }
    }
    let mut live = BTreeSet::from([node.id]);
    for (id, n) in membership.nodes().filter(|(id, _)| voters.contains(id) && **id != node.id) {
        if let Ok(Body::StatusResp(s)) = pool.call(&n.peer, Some(*id), Body::StatusReq, PROBE_TIMEOUT).await {
            if s.domain == node.domain() {
                live.insert(*id);
            }
        }
    }
    let left: BTreeSet<NodeId> = voters.difference(&gone).copied().collect();
    let live_left = left.intersection(&live).count();
    if live.len() < 3 || live_left < 2 {
        return Err(format!(
            "refused: it would lose the majority: {} of the 5 voters and {live_left} of the 3 that stay answer now \
             (a change needs 3 of 5 and 2 of 3)",
            live.len()
        ));
    }
    info!(removed = ?gone, "shrink: removing two voters (joint consensus)");
    change(raft, ChangeMembers::RemoveVoters(gone)).await?;
    info!("shrink: the cluster has 3 voters");
    Ok(())
}

/// One `change_membership` (joint, then final), bounded in time.
async fn change(raft: &super::types::Raft, members: ChangeMembers<NodeId, NodeInfo>) -> Result<(), String> {
    match tokio::time::timeout(CHANGE_STEP_TIMEOUT, raft.change_membership(members, false)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("the membership change failed: {e}")),
        Err(_) => Err(format!("the membership change did not commit within {}s", CHANGE_STEP_TIMEOUT.as_secs())),
    }
}

/// The refusal of a change asked of a node that is not the serving leader.
pub const NOT_LEADER: &str = "not the leader";
/// The refusal of a change while another one runs.
pub const BUSY: &str = "another membership change is running: try again when it is done";

/// How long a restoring node waits to lead its new domain and commit the
/// backup.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(60);

/// `--restore` after a bootstrap (docs/operating.md, "Backup and disaster
/// recovery"): once this node leads the new domain, the backup's state is
/// committed as the domain's first command; the node serves only then.
pub async fn restore(node: &Node, sm: &super::store::StateMachine, r: &crate::config::Restore) -> Result<(), String> {
    let raft = node.raft.get().ok_or("raft is not running")?;
    let deadline = crate::clock::now() + RESTORE_TIMEOUT;
    loop {
        let m = raft.metrics().borrow().clone();
        let leads = m.state == ServerState::Leader && m.current_leader == Some(node.id);
        if leads && m.last_applied.is_some_and(|l| l.leader_id.get_term() == m.current_term) {
            break;
        }
        if crate::clock::now() >= deadline {
            return Err(format!("this node did not lead the new domain within {}s", RESTORE_TIMEOUT.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dt = sm.with_locks(|s| s.domain_time());
    let cmd = crate::locks::Command::Restore { state: r.data.clone(), dt };
    match tokio::time::timeout(RESTORE_TIMEOUT, raft.client_write(super::types::Batch(vec![cmd]))).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("committing the backup failed: {e}")),
        Err(_) => return Err("committing the backup timed out".into()),
    }
    let (held, last) = sm.with_locks(|s| (s.held_count(), s.last_token()));
    if held != r.header.held_keys || last < r.header.last_token {
        return Err(format!("the restored state holds {held} keys, the backup {}", r.header.held_keys));
    }
    node.restoring.store(false, std::sync::atomic::Ordering::Release);
    info!(
        file = %r.path.display(),
        from_domain = %r.header.domain,
        applied_index = r.header.applied_index,
        held_keys = held,
        token_high_water = last,
        "restored the backup into the new domain; new tokens are above its high-water"
    );
    Ok(())
}
