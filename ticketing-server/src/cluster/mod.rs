//! Cluster mode (docs/deployment.md, docs/cluster-protocol.md): the
//! [`Replicator`] on openraft.
//!
//! - `types`: the openraft type configuration (entries are lock commands).
//! - `store`: in-memory log, state machine over [`LockState`], snapshots.
//! - `disk`: durable mode's Raft log (`--data-dir`, docs/deployment.md "Durability").
//! - `wire`: the peer protocol's handshake and frames (docs/cluster-protocol.md).
//! - `peer`: the peer port, the connection pool, the openraft network.
//! - `replicator`: the [`Replicator`] and the leadership it publishes.
//! - `membership`: bootstrap, join and rolling learner replacement
//!   (docs/deployment.md, "Identity and the rolling restart").
//!
//! This module holds no lock logic: it commits [`Command`]s and applies them
//! with [`LockState::apply`] on every node; the leader's manager does the rest
//! through the [`Replicator`] trait, following [`Leadership`], which is
//! published here from `raft.metrics()` with the quorum-ack gate
//! (docs/deployment.md, "Failover timing").

pub mod disk;
mod election;
mod late;
pub mod membership;
pub mod peer;
mod replicator;
pub mod store;
pub mod types;
pub mod wire;

use crate::durable::journal::Journal;
use crate::durable::{DataDir, DataDirError};
use crate::locks::{Command, LockState};
use crate::reload::{Current, Material, PeerTokens};
use crate::replication::{Leadership, Proposal, ProposeError, Replicator};
use crate::tls::PeerTls;
use membership::BootstrapRefusal;
use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::ServerState;
use prometheus_client::metrics::histogram::Histogram;
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use ticketing_proto::auth::Secret;
use ticketing_proto::Addr;
use tokio::sync::{oneshot, watch};
use tracing::{error, info, warn};
use types::{DomainId, NodeId, NodeInfo, Raft};

use replicator::publish_leadership;
pub use replicator::ClusterReplicator;

/// THE peer-count rule (docs/deployment.md, "A 3-node cluster"): a cluster
/// has 3 or 5 members (`--peers`, self included), nothing else.
pub fn peer_count_ok(n: usize) -> bool {
    matches!(n, 3 | 5)
}

/// What cluster mode needs to start.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Address to bind the peer port on.
    pub peer_listen: String,
    /// Peer addresses of all members, self included (3 or 5).
    pub peers: Vec<String>,
    /// Create a new fencing domain.
    pub bootstrap: bool,
    /// `--restore`: the backup a new domain starts from.
    pub restore: Option<Arc<crate::config::Restore>>,
    /// The peer tokens (the first is sent, any is accepted), replaced on
    /// reload. None: the peers authenticate by mutual TLS alone, or (with
    /// `unauthenticated_peers`) not at all.
    pub peer_tokens: Arc<PeerTokens>,
    /// `--insecure-unauthenticated-peers`: may run with neither a peer token
    /// nor peer TLS (warned about at every start).
    pub unauthenticated_peers: bool,
    /// Mutual TLS between peers (`None`: plain TCP), replaced on reload.
    pub peer_tls: Arc<Current<Option<PeerTls>>>,
    /// This node's client address, announced in `M`/`L`.
    pub advertise: Addr,
    /// This node's `--admin-listen`, shared with the peers (a follower's
    /// `/locks/<key>` names the leader's).
    pub admin: Option<String>,
    /// Raft heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// Raft election timeout lower bound, ms.
    pub election_timeout_min_ms: u64,
    /// Raft election timeout upper bound, ms (also the quorum-ack limit, docs/deployment.md "Failover timing").
    pub election_timeout_max_ms: u64,
    /// The peer port's abuse limits and their metrics.
    pub limits: peer::PeerLimits,
    /// Where the time to commit each proposed batch is observed, if anywhere.
    pub commit_seconds: Option<Histogram>,
    /// Counts the campaigns started at once (`ticketing_raft_hurried_campaigns_total`).
    pub hurried_campaigns: prometheus_client::metrics::counter::Counter,
    /// Durable mode: the opened `--data-dir` (identity, vote, log, snapshots).
    pub data: Option<Arc<DataDir>>,
    /// The network the peer port binds on and the peer links dial (TCP).
    pub net: Arc<dyn crate::net::Net>,
}

impl ClusterConfig {
    /// The cluster part of a validated server configuration (cluster mode
    /// has `--peer-listen`, checked by `Config::resolve`); `advertise` is the
    /// client address to announce (the configured one or the bound one);
    /// the peer tokens and TLS are `material`'s (shared, so a reload reaches them).
    pub fn from_config(cfg: &crate::config::Config, advertise: Addr, material: &Material) -> ClusterConfig {
        ClusterConfig {
            peer_listen: cfg.peer_listen.clone().unwrap_or_default(),
            peers: cfg.peers.clone(),
            bootstrap: cfg.bootstrap,
            restore: cfg.restore.clone(),
            peer_tokens: material.peer_tokens.clone(),
            peer_tls: material.peer_tls.clone(),
            unauthenticated_peers: cfg.insecure_unauthenticated_peers,
            advertise,
            admin: cfg.admin_listen.clone(),
            heartbeat_ms: cfg.heartbeat_ms,
            election_timeout_min_ms: cfg.election_timeout_min_ms,
            election_timeout_max_ms: cfg.election_timeout_max_ms,
            limits: peer::PeerLimits {
                max_connections: cfg.limits.max_peer_connections,
                handshake_timeout: cfg.peer_handshake_timeout,
                frame_timeout: cfg.peer_frame_timeout,
                max_conn_bytes: cfg.limits.max_peer_in_flight_bytes_per_conn,
                max_node_bytes: cfg.limits.max_peer_in_flight_bytes,
                preauth: crate::preauth::PreAuth::new(
                    cfg.limits.max_peer_preauth_connections,
                    cfg.limits.max_peer_preauth_per_address,
                ),
                max_snapshot_bytes: cfg.limits.max_snapshot_bytes,
                metrics: Default::default(),
            },
            commit_seconds: None,
            hurried_campaigns: Default::default(),
            data: None,
            net: Arc::new(crate::net::Tcp),
        }
    }
}

/// Why cluster mode could not start, or stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClusterError {
    /// `--peers` does not list 3 or 5 addresses.
    PeerCount(usize),
    /// The peer port cannot be bound.
    Bind {
        /// `--peer-listen`.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// openraft refused the timing settings.
    RaftConfig(openraft::ConfigError),
    /// Raft did not start.
    RaftStart(openraft::error::Fatal<NodeId>),
    /// `--bootstrap` refused to create a domain (nothing was changed).
    BootstrapRefused(membership::BootstrapRefusal),
    /// The data dir cannot be used (durable mode).
    DataDir(DataDirError),
    /// `--restore` could not build the new domain (the reason).
    RestoreRefused(String),
    /// Neither a peer token nor peer mutual TLS, without the explicit opt-out.
    PeerAuthMissing,
}

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::PeerCount(n) => write!(f, "--peers must list 3 or 5 addresses, got {n}"),
            ClusterError::Bind { addr, source } => write!(f, "cannot bind --peer-listen {addr}: {source}"),
            ClusterError::RaftConfig(e) => write!(f, "invalid Raft timing: {e}"),
            ClusterError::RaftStart(e) => write!(f, "cannot start Raft: {e}"),
            ClusterError::BootstrapRefused(why) => write!(f, "bootstrap refused: {why}"),
            ClusterError::DataDir(e) => e.fmt(f),
            ClusterError::RestoreRefused(why) => write!(f, "restore refused: {why}"),
            ClusterError::PeerAuthMissing => f.write_str(crate::config::PEER_AUTH_MISSING),
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Bind { source, .. } => Some(source),
            ClusterError::RaftConfig(e) => Some(e),
            ClusterError::RaftStart(e) => Some(e),
            ClusterError::BootstrapRefused(e) => Some(e),
            ClusterError::DataDir(e) => Some(e),
            ClusterError::PeerCount(_) | ClusterError::PeerAuthMissing | ClusterError::RestoreRefused(_) => None,
        }
    }
}

/// Node-wide state shared by the peer server, the pool and membership.
pub struct Node {
    /// This process's NodeId.
    pub id: NodeId,
    /// The peer tokens: the first is sent when dialing, any is accepted (replaced on reload).
    pub tokens: Arc<PeerTokens>,
    /// Mutual TLS between peers, or `None` for plain TCP (replaced on reload).
    pub tls: Arc<Current<Option<PeerTls>>>,
    /// `--insecure-unauthenticated-peers`.
    pub unauthenticated_peers: bool,
    /// The quorum-ack limit (`election_timeout_max`; see [`late::gate_limit`]).
    pub quorum_limit: Duration,
    /// The peer port's abuse limits.
    pub limits: peer::PeerLimits,
    /// This node's client address.
    pub client_addr: String,
    /// This node's admin HTTP address (`--admin-listen`), if any.
    pub admin_addr: Option<String>,
    /// `--peers`.
    pub peers: Vec<String>,
    /// `--peer-listen`.
    pub peer_listen: String,
    domain: Mutex<Option<DomainId>>,
    /// The Raft instance (set once at start).
    pub raft: OnceLock<Raft>,
    serving: AtomicBool,
    /// Set while a `--restore` is not yet committed: the node does not
    /// serve (docs/operating.md, "Backup and disaster recovery").
    pub restoring: AtomicBool,
    /// Held while a learner replacement runs (one at a time).
    pub replacing: Arc<tokio::sync::Mutex<()>>,
    /// Durable mode: where the identity (NodeId, domain) is kept.
    data: Option<Arc<DataDir>>,
    /// The campaign a follower with the longer log starts at once (election.rs).
    pub hurry: Arc<election::Hurry>,
    /// The Raft heartbeat interval (a hurried campaign's step).
    pub heartbeat: Duration,
    /// The network the peer links dial.
    pub net: Arc<dyn crate::net::Net>,
}

impl Node {
    /// The fencing domain, if this node belongs to one.
    pub fn domain(&self) -> Option<DomainId> {
        *self.domain.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins domain `d` if this node has none; `true` if it now belongs to
    /// `d`. A durable node records it in its data dir first (a failed write
    /// is fail-stop).
    pub fn adopt_domain(&self, d: DomainId) -> bool {
        let mut g = self.domain.lock().unwrap_or_else(|p| p.into_inner());
        match *g {
            None => {
                if let Some(dir) = &self.data {
                    if let Err(e) = dir.save_domain(d.0) {
                        crate::durable::fail_stop(dir.path(), &e);
                    }
                }
                *g = Some(d);
                true
            }
            Some(mine) => mine == d,
        }
    }

    /// Whether the peer handshake checks a peer token: `false` when the
    /// node has none and the peers authenticate by mutual TLS alone, or
    /// deliberately not at all (`--insecure-unauthenticated-peers`). A node
    /// with neither does not start; if one ever ran, its handshake would
    /// check against no token at all and accept no peer.
    pub fn checks_tokens(&self, tokens: &[Secret]) -> bool {
        !tokens.is_empty() || !(self.tls.get().is_some() || self.unauthenticated_peers)
    }

    /// This node is the leader with a live quorum and serves clients.
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Acquire)
    }
}

/// A new NodeId: random, non-zero, below 2^63 (docs/deployment.md, "Identity and the rolling restart").
pub fn random_node_id() -> NodeId {
    loop {
        let id = rand_core::RngCore::next_u64(&mut ticketing_proto::entropy::ThreadOr(rand_core::OsRng));
        // Keep ids below 2^63 so they read the same in every JSON consumer.
        let id = id >> 1;
        if id != 0 {
            return NodeId(id);
        }
    }
}

/// A member as shown by `/status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemberView {
    /// NodeId.
    pub id: NodeId,
    /// Peer address.
    pub peer: String,
    /// Client address.
    pub client: String,
    /// Voter (else learner).
    pub voter: bool,
    /// Its admin HTTP address (`--admin-listen`), when it announced one.
    pub admin: Option<String>,
    /// On the leader: the last log index known to be replicated on that
    /// member (matched); `None` elsewhere or before its first ack.
    pub matched_index: Option<u64>,
}

/// This node's cluster state, for `/status` and `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClusterStatus {
    /// This node's NodeId.
    pub node_id: NodeId,
    /// The fencing domain (32 hex digits), if any.
    pub domain: Option<String>,
    /// Raft role.
    pub role: String,
    /// Whether this node serves clients (leader with a live quorum).
    pub serving: bool,
    /// The known leader's NodeId.
    pub leader_id: Option<NodeId>,
    /// The known leader's client address.
    pub leader: Option<String>,
    /// Members of the current membership.
    pub members: Vec<MemberView>,
    /// Current term.
    pub term: u64,
    /// Last log index.
    pub last_log_index: Option<u64>,
    /// Committed index.
    pub commit_index: Option<u64>,
    /// Applied index.
    pub applied_index: Option<u64>,
    /// Milliseconds since a quorum last acknowledged this leader.
    pub millis_since_quorum_ack: Option<u64>,
}

/// A started cluster node.
pub struct Started {
    /// The replicator.
    pub replicator: Arc<ClusterReplicator>,
    /// Resolves if the node must stop: a refused or failed `--bootstrap`
    /// (the binary then exits 1 with the message, docs/deployment.md).
    pub failed: oneshot::Receiver<ClusterError>,
}

/// Starts cluster mode: binds the peer port, starts Raft, the leadership
/// publisher and bootstrap (with `--bootstrap`) or the join loop. A durable
/// node (`--data-dir`) starts as the NodeId and domain its DIR holds, from
/// its snapshot and log (docs/deployment.md, "Durability").
pub async fn start(cfg: ClusterConfig) -> Result<Started, ClusterError> {
    if !peer_count_ok(cfg.peers.len()) {
        return Err(ClusterError::PeerCount(cfg.peers.len()));
    }
    let tls_on = cfg.peer_tls.get().is_some();
    if cfg.peer_tokens.get().is_empty() && !tls_on {
        if !cfg.unauthenticated_peers {
            return Err(ClusterError::PeerAuthMissing);
        }
        warn!(
            "--insecure-unauthenticated-peers: the peer port authenticates NOBODY (no peer token, no peer TLS); \
             anyone who reaches it can join the cluster and forge grants. Throw-away tests only"
        );
    }
    let listener = cfg
        .net
        .bind(&cfg.peer_listen)
        .await
        .map_err(|source| ClusterError::Bind { addr: cfg.peer_listen.clone(), source })?;
    let node = new_node(&cfg);
    let pool = Arc::new(peer::Pool::new(node.clone()));
    let (raft, sm) = start_raft(&cfg, &node, &pool).await?;
    let _ = node.raft.set(raft.clone());
    tokio::spawn(snapshot_cadence(raft.clone(), sm.clone()));
    info!(
        node = %node.id,
        peer_listen = %cfg.peer_listen,
        peers = ?cfg.peers,
        peer_tls = node.tls.get().is_some(),
        durable = cfg.data.is_some(),
        domain = ?node.domain().map(|d| d.to_string()),
        "cluster node started"
    );
    tokio::spawn(peer::serve(listener, node.clone()));

    let (tx, _) = watch::channel(Leadership { serving: false, active: false, leader: None, epoch: 0 });
    let replicator = Arc::new(ClusterReplicator {
        node: node.clone(),
        pool: pool.clone(),
        raft: raft.clone(),
        sm,
        leadership: tx,
        propose_timeout: Duration::from_millis(2 * cfg.election_timeout_max_ms + 1000),
        commit_seconds: cfg.commit_seconds.clone(),
    });
    tokio::spawn(publish_leadership(replicator.clone(), Duration::from_millis(cfg.election_timeout_max_ms)));
    let failed = spawn_membership(&cfg, node, pool, replicator.sm.clone());
    Ok(Started { replicator, failed })
}

/// This process's node state: a new NodeId in memory mode, the DIR's
/// identity (NodeId and domain) in durable mode.
fn new_node(cfg: &ClusterConfig) -> Arc<Node> {
    let (id, domain) = match &cfg.data {
        Some(dir) => {
            let identity = dir.identity();
            (NodeId(identity.node_id), identity.domain.map(DomainId))
        }
        None => (random_node_id(), None),
    };
    Arc::new(Node {
        id,
        tokens: cfg.peer_tokens.clone(),
        tls: cfg.peer_tls.clone(),
        unauthenticated_peers: cfg.unauthenticated_peers,
        quorum_limit: Duration::from_millis(cfg.election_timeout_max_ms),
        limits: cfg.limits.clone(),
        client_addr: cfg.advertise.as_str().to_owned(),
        admin_addr: cfg.admin.clone(),
        peers: cfg.peers.clone(),
        peer_listen: cfg.peer_listen.clone(),
        domain: Mutex::new(domain),
        raft: OnceLock::new(),
        serving: AtomicBool::new(false),
        restoring: AtomicBool::new(cfg.restore.is_some()),
        replacing: Arc::new(tokio::sync::Mutex::new(())),
        data: cfg.data.clone(),
        hurry: Arc::new(election::Hurry::new(cfg.hurried_campaigns.clone())),
        heartbeat: Duration::from_millis(cfg.heartbeat_ms),
        net: cfg.net.clone(),
    })
}

/// openraft's configuration from the timing settings (not yet validated).
fn raft_config(cfg: &ClusterConfig) -> openraft::Config {
    openraft::Config {
        cluster_name: "ticketing".into(),
        heartbeat_interval: cfg.heartbeat_ms,
        election_timeout_min: cfg.election_timeout_min_ms,
        election_timeout_max: cfg.election_timeout_max_ms,
        install_snapshot_timeout: 2000.max(cfg.election_timeout_max_ms),
        // Snapshots are triggered by `snapshot_cadence` (scaled to the state).
        snapshot_policy: openraft::SnapshotPolicy::Never,
        // A follower a little behind is sent entries, not the whole state.
        // Counted in entries, i.e. batches of up to 128 commands: 2 000
        // keep ~2 000 commands at one client and at most 256 000 under load
        // (openraft's default, 1 000, is 0.1 s of a W4 fill).
        max_in_snapshot_log_to_keep: LOG_KEPT_AFTER_SNAPSHOT,
        // Entries per AppendEntries while a follower catches up. openraft
        // gives each request one heartbeat interval (50 ms) and sends the
        // same range again after a timeout; its default of 300 entries is up
        // to 38 400 commands (~9 MiB) here, which a follower on a loaded
        // machine could not take in 50 ms, so a new member behind a leader
        // that had not compacted its log never caught up. 8 entries are at
        // most 256 KiB; in steady state a request carries one or two.
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        ..Default::default()
    }
}

/// Starts Raft on the in-memory log, or (durable mode) on the data dir's
/// log with the state machine recovered from its snapshot.
async fn start_raft(
    cfg: &ClusterConfig,
    node: &Arc<Node>,
    pool: &Arc<peer::Pool>,
) -> Result<(Raft, store::StateMachine), ClusterError> {
    let config = Arc::new(raft_config(cfg).validate().map_err(ClusterError::RaftConfig)?);
    let network = peer::Network { pool: pool.clone(), durable: None };
    let raft = match &cfg.data {
        None => {
            let sm = store::StateMachine::default();
            let raft = Raft::new(node.id, config, network, store::LogStore::default(), sm.clone()).await;
            (raft, sm)
        }
        Some(dir) => {
            let journal = Journal::open(dir).map_err(ClusterError::DataDir)?;
            let sm = store::StateMachine::recover(dir.clone(), journal.durable()).map_err(ClusterError::DataDir)?;
            let network = peer::Network { durable: Some(journal.durable()), ..network };
            let raft = Raft::new(node.id, config, network, disk::DiskLog::new(journal, node.id), sm.clone()).await;
            (raft, sm)
        }
    };
    match raft {
        (Ok(raft), sm) => Ok((raft, sm)),
        (Err(e), _) => Err(ClusterError::RaftStart(e)),
    }
}

/// Bootstrap (with `--bootstrap`, on a node of no domain yet) or the join
/// loop; the receiver resolves with a refused bootstrap.
fn spawn_membership(
    cfg: &ClusterConfig,
    node: Arc<Node>,
    pool: Arc<peer::Pool>,
    sm: store::StateMachine,
) -> oneshot::Receiver<ClusterError> {
    let (failed_tx, failed) = oneshot::channel();
    if cfg.restore.is_some() && node.domain().is_some() {
        // The restored node restarted with its first command line: its DIR
        // holds the (restored) domain.
        warn!(domain = ?node.domain().map(|d| d.to_string()), "--restore ignored: the data dir holds a domain");
        node.restoring.store(false, Ordering::Release);
    }
    if cfg.bootstrap && node.domain().is_some() {
        // A durable node restarted with its first command line: its DIR
        // holds the domain, so it rejoins it instead of creating one.
        info!(domain = ?node.domain().map(|d| d.to_string()), "--bootstrap ignored: the data dir holds a domain");
    }
    let restore = cfg.restore.clone();
    if cfg.bootstrap && node.domain().is_none() {
        tokio::spawn(async move {
            match membership::bootstrap(node.clone(), pool.clone()).await {
                Ok(()) => {
                    if let Some(r) = restore {
                        if let Err(why) = membership::restore(&node, &sm, &r).await {
                            error!(error = %why, "restore failed");
                            let _ = failed_tx.send(ClusterError::RestoreRefused(why));
                        }
                    }
                }
                // A domain is alive at the peers (a node restarted by its
                // supervisor with its first command line): join it; a
                // --restore is for a new domain only.
                Err(why @ (BootstrapRefusal::PeerInDomain { .. } | BootstrapRefusal::PeerInitialized { .. })) => {
                    warn!(reason = %why, "--bootstrap: a fencing domain is alive at the peers; joining it instead");
                    if restore.is_some() {
                        warn!("--restore ignored: a domain is alive at the peers");
                        node.restoring.store(false, Ordering::Release);
                    }
                    membership::join_loop(node, pool).await;
                }
                Err(why) => {
                    error!(error = %why, "bootstrap refused");
                    let _ = failed_tx.send(ClusterError::BootstrapRefused(why));
                }
            }
        });
    } else {
        drop(failed_tx);
        tokio::spawn(membership::join_loop(node, pool));
    }
    failed
}

/// Entries kept in the log after a snapshot (see the openraft config).
const LOG_KEPT_AFTER_SNAPSHOT: u64 = 2000;

/// Log entries per AppendEntries request (see the openraft config).
const MAX_PAYLOAD_ENTRIES: u64 = 8;

/// Builds a snapshot (through openraft's trigger) whenever the commands
/// applied since the last one exceed [`store::snapshot_threshold`] of the
/// held keys, instead of openraft's fixed "every 5 000 entries", which at a
/// million held keys would write the whole state several times a second
/// (docs/benchmarks.md, "Optimizations: memory"). Every node, leader or
/// not, compacts its own log this way. Ends when Raft shuts down.
async fn snapshot_cadence(raft: Raft, sm: store::StateMachine) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if sm.snapshot_due() {
            // Ignored by openraft while a build is in progress.
            if raft.trigger().snapshot().await.is_err() {
                return;
            }
        }
    }
}
