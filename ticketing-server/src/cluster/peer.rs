//! The peer transport (docs/cluster-protocol.md): the accept loop of the peer
//! port (`server`), the pool of outgoing connections (one per peer address,
//! pipelined, every RPC with a timeout) and the openraft network on top of it.

mod server;
pub use server::serve;

use super::late;
use super::membership;
use super::types::{NodeId, NodeInfo, TypeConfig};
use super::wire::{self, Body, Envelope, HandshakeRefusal, Refusal, TlsFailure, WireError, VERSION};
use super::Node;
use crate::durable::journal::JLogId;
use crate::metrics::LimitMetrics;
use futures_util::stream::{FuturesUnordered, StreamExt};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tracing::{debug, warn};

/// Time to connect and complete the handshake with a peer.
const DIAL_TIMEOUT: Duration = Duration::from_millis(1000);
/// Requests of one accepted peer connection being served at once; the next
/// frame is read only when one finishes (docs/configuration.md, "Queues").
pub const MAX_PEER_IN_FLIGHT: usize = 256;
/// Encoded frames waiting to be written on one outgoing peer connection.
pub const PEER_WRITE_QUEUE: usize = 256;
/// Encoded answers not yet written on one accepted peer connection: past
/// this no further frame is read (a dialer that does not read its answers
/// stops being served, nothing grows).
pub const PEER_ANSWER_BYTES: usize = 1024 * 1024;
/// At most this many bytes of queued frames go into one socket write.
const WRITE_BATCH: usize = 256 * 1024;

/// The peer port's abuse limits (docs/configuration.md, "Limits") and their metrics.
#[derive(Debug, Clone)]
pub struct PeerLimits {
    /// `--max-peer-connections`: accepted peer connections at once.
    pub max_connections: usize,
    /// `--peer-handshake-timeout`: time an accepted peer has to complete the handshake.
    pub handshake_timeout: Duration,
    /// `--peer-frame-timeout`: time a started frame has to arrive whole.
    pub frame_timeout: Duration,
    /// `--max-peer-in-flight-bytes-per-conn`: request bytes one accepted
    /// connection may have in flight (read, not yet answered).
    pub max_conn_bytes: usize,
    /// `--max-peer-in-flight-bytes`: the same over all accepted connections
    /// (counted in the gauge `metrics.peer_in_flight_bytes`).
    pub max_node_bytes: usize,
    /// Unauthenticated connections (`--max-peer-preauth-*`, at most half
    /// of the slots): a newer one evicts the oldest when it is full.
    pub preauth: crate::preauth::PreAuth,
    /// `--max-snapshot-bytes`: the largest snapshot received from a leader.
    pub max_snapshot_bytes: u64,
    /// Counters of what these limits refused or closed.
    pub metrics: LimitMetrics,
}

impl Default for PeerLimits {
    fn default() -> PeerLimits {
        let d = crate::config::Config::default();
        PeerLimits {
            max_connections: d.limits.max_peer_connections,
            handshake_timeout: d.peer_handshake_timeout,
            frame_timeout: d.peer_frame_timeout,
            max_conn_bytes: d.limits.max_peer_in_flight_bytes_per_conn,
            max_node_bytes: d.limits.max_peer_in_flight_bytes,
            preauth: crate::preauth::PreAuth::new(
                d.limits.max_peer_preauth_connections,
                d.limits.max_peer_preauth_per_address,
            ),
            max_snapshot_bytes: d.limits.max_snapshot_bytes,
            metrics: LimitMetrics::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A peer connection's bytes: plain TCP, or TLS from the first byte.
trait PeerStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerStream for T {}

/// Writes the frames queued for one outgoing connection: every frame queued
/// by the time the writer wakes goes out in one write (up to
/// [`WRITE_BATCH`] bytes), then one flush.
async fn write_batches<W: AsyncWrite + Unpin>(
    rx: &mut mpsc::Receiver<Vec<u8>>,
    w: &mut W,
    mut mac: Option<ticketing_proto::auth::FrameMac>,
) -> std::io::Result<()> {
    let mut frames = Vec::with_capacity(64);
    let mut batch = Vec::with_capacity(16 * 1024);
    while rx.recv_many(&mut frames, 64).await > 0 {
        // Tags in the order the frames are written (the sequence both sides count).
        for frame in &mut frames {
            wire::seal(frame, 0, mac.as_mut());
        }
        let mut queued = frames.drain(..);
        while let Some(first) = queued.next() {
            if first.len() >= WRITE_BATCH {
                w.write_all(&first).await?;
                continue;
            }
            batch.clear();
            batch.extend_from_slice(&first);
            for more in queued.by_ref() {
                batch.extend_from_slice(&more);
                if batch.len() >= WRITE_BATCH {
                    break;
                }
            }
            w.write_all(&batch).await?;
        }
        drop(queued);
        w.flush().await?;
    }
    Ok(())
}

/// Why an RPC to a peer failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RpcError {
    /// Could not connect or complete the handshake (the cause), or could
    /// not encode the request.
    Unreachable(WireError),
    /// The process at that address has another NodeId.
    WrongTarget {
        /// The NodeId the caller meant.
        expected: NodeId,
        /// The NodeId found there.
        actual: NodeId,
    },
    /// The peer refused the message.
    Refused(Refusal),
    /// The connection closed before the answer.
    ConnectionLost,
    /// No answer in time.
    Timeout,
    /// The answer did not fit the request.
    Unexpected,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RpcError::Unreachable(e) => write!(f, "unreachable: {e}"),
            RpcError::WrongTarget { expected, actual } => {
                write!(f, "node {expected} is gone: node {actual} listens at that address")
            }
            RpcError::Refused(r) => write!(f, "refused: {r:?}"),
            RpcError::ConnectionLost => f.write_str("connection closed"),
            RpcError::Timeout => f.write_str("timed out"),
            RpcError::Unexpected => f.write_str("unexpected answer"),
        }
    }
}

impl std::error::Error for RpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RpcError::Unreachable(e) => Some(e),
            _ => None,
        }
    }
}

/// The calls on one connection waiting for their answers, by envelope id.
type AwaitedAnswers = Arc<Mutex<HashMap<u64, oneshot::Sender<Envelope>>>>;

/// One outgoing connection to a peer (pipelined).
struct PeerConn {
    peer_id: NodeId,
    tx: mpsc::Sender<Vec<u8>>,
    pending: AwaitedAnswers,
    alive: Arc<AtomicBool>,
    next_id: AtomicU64,
}

/// A request written to a peer connection whose answer has not been read
/// yet. Dropping it forgets the answer (its pending entry goes).
pub(super) struct Sent {
    conn: Arc<PeerConn>,
    id: u64,
    rx: oneshot::Receiver<Envelope>,
}

impl Drop for Sent {
    fn drop(&mut self) {
        lock(&self.conn.pending).remove(&self.id);
    }
}

impl Sent {
    /// Polls for the answer: a refusal is an error, a lost connection too.
    pub(super) fn poll_answer(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<Body, RpcError>> {
        std::pin::Pin::new(&mut self.rx).poll(cx).map(|answer| match answer {
            Ok(env) => match env.body {
                Body::Refused(r) => Err(RpcError::Refused(r)),
                b => Ok(b),
            },
            Err(_) => Err(RpcError::ConnectionLost),
        })
    }

    /// Waits for the answer.
    async fn answer(&mut self) -> Result<Body, RpcError> {
        std::future::poll_fn(|cx| self.poll_answer(cx)).await
    }
}

type Slot = Arc<tokio::sync::Mutex<Option<Arc<PeerConn>>>>;

/// Outgoing connections, one per peer address, dialed on demand.
pub struct Pool {
    node: Arc<Node>,
    slots: Mutex<HashMap<String, Slot>>,
}

impl Pool {
    /// An empty pool for `node`.
    pub fn new(node: Arc<Node>) -> Pool {
        Pool { node, slots: Mutex::new(HashMap::new()) }
    }

    async fn conn(&self, addr: &str) -> Result<Arc<PeerConn>, RpcError> {
        let slot = lock(&self.slots).entry(addr.to_owned()).or_default().clone();
        let mut guard = slot.lock().await;
        if let Some(c) = guard.as_ref() {
            if c.alive.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
        }
        *guard = None;
        let c = match tokio::time::timeout(DIAL_TIMEOUT, self.dial(addr)).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                match &e {
                    WireError::Tls(_) | WireError::Refused(_) => warn!(peer = %addr, error = %e, "cannot join peer"),
                    _ => debug!(peer = %addr, error = %e, "cannot reach peer"),
                }
                return Err(RpcError::Unreachable(e));
            }
            Err(_) => return Err(RpcError::Unreachable(WireError::Timeout)),
        };
        *guard = Some(c.clone());
        Ok(c)
    }

    async fn dial(&self, addr: &str) -> Result<Arc<PeerConn>, WireError> {
        let stream = self.node.net.connect(addr).await?;
        let tls = self.node.tls.get().as_ref().clone();
        let stream: Box<dyn PeerStream> = match &tls {
            None => Box::new(stream),
            Some(tls) => {
                // The acceptor's certificate must name the host of its --peers entry.
                let name = crate::tls::peer_server_name(addr)
                    .ok_or_else(|| WireError::Tls(TlsFailure::ServerName { addr: addr.to_owned() }))?;
                let s = TlsConnector::from(tls.client.clone())
                    .connect(name, stream)
                    .await
                    .map_err(|e| WireError::Tls(e.into()))?;
                Box::new(s)
            }
        };
        let (r, mut w) = tokio::io::split(stream);
        let mut r = BufReader::new(r);
        let tokens = self.node.tokens.get();
        if self.node.checks_tokens(&tokens) && tokens.is_empty() {
            return Err(WireError::Refused(HandshakeRefusal::NoPeerAuth));
        }
        let token = tokens.first().cloned();
        drop(tokens);
        let proof = token.as_ref().map(|t| t.expose());
        let (peer_id, _domain, macs) =
            wire::dial_handshake(&mut r, &mut w, proof, self.node.domain()).await.map_err(|e| match e {
                // With TLS 1.3 the acceptor checks our certificate after our side of the TLS handshake is done.
                WireError::Io(_) | WireError::Disconnected if tls.is_some() => {
                    WireError::Tls(TlsFailure::ClosedBeforeGreeting)
                }
                e => e,
            })?;
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(PEER_WRITE_QUEUE);
        let pending: AwaitedAnswers = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let conn = Arc::new(PeerConn {
            peer_id,
            tx,
            pending: pending.clone(),
            alive: alive.clone(),
            next_id: AtomicU64::new(1),
        });
        let alive_w = alive.clone();
        let (send_mac, recv_mac) = match macs {
            Some(m) => (Some(m.send), Some(m.recv)),
            None => (None, None),
        };
        tokio::spawn(async move {
            let _ = write_batches(&mut rx, &mut w, send_mac).await;
            alive_w.store(false, Ordering::Release);
        });
        let frame_timeout = self.node.limits.frame_timeout;
        tokio::spawn(async move {
            let mut reader = wire::FrameReader::new(r).with_mac(recv_mac);
            while let Ok(Some(env)) = reader.next(frame_timeout).await {
                if let Some(waiter) = lock(&pending).remove(&env.id) {
                    let _ = waiter.send(env);
                }
            }
            alive.store(false, Ordering::Release);
            // Dropping the senders fails every pending call at once.
            lock(&pending).clear();
        });
        Ok(conn)
    }

    /// One request/answer exchange with the node at `addr`. With `target`,
    /// the call fails unless the process there has that NodeId.
    pub async fn call(
        &self,
        addr: &str,
        target: Option<NodeId>,
        body: Body,
        limit: Duration,
    ) -> Result<Body, RpcError> {
        let exchange = async { self.send(addr, target, body).await?.answer().await };
        tokio::time::timeout(limit, exchange).await.unwrap_or(Err(RpcError::Timeout))
    }

    /// Writes one request to the node at `addr` (dialing if needed); the
    /// answer is read from the returned [`Sent`]. With `target`, fails
    /// unless the process there has that NodeId.
    pub(super) async fn send(&self, addr: &str, target: Option<NodeId>, body: Body) -> Result<Sent, RpcError> {
        let conn = self.conn(addr).await?;
        if let Some(expected) = target {
            if conn.peer_id != expected {
                return Err(RpcError::WrongTarget { expected, actual: conn.peer_id });
            }
        }
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&conn.pending).insert(id, tx);
        let env = Envelope { v: VERSION, id, to: conn.peer_id, domain: self.node.domain(), body };
        let sent = Sent { conn, id, rx };
        let bytes = wire::encode(&env).map_err(RpcError::Unreachable)?;
        if sent.conn.tx.send(bytes).await.is_err() {
            sent.conn.alive.store(false, Ordering::Release);
            return Err(RpcError::ConnectionLost);
        }
        Ok(sent)
    }

    /// The NodeId of the process at `addr` (dials if needed).
    pub async fn node_id_at(&self, addr: &str) -> Result<NodeId, RpcError> {
        Ok(self.conn(addr).await?.peer_id)
    }
}

/// The openraft network: one [`PeerClient`] per target.
pub struct Network {
    /// The connection pool.
    pub pool: Arc<Pool>,
    /// Durable mode: the journal's watermark, the most a follower is told is
    /// committed ([`super::disk::clamp_commit`]).
    pub durable: Option<watch::Receiver<Option<JLogId>>>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> PeerClient {
        let in_flight = late::Pending::new(late::max_reuse_age(self.pool.node.quorum_limit));
        PeerClient {
            pool: self.pool.clone(),
            target,
            addr: node.peer.clone(),
            in_flight,
            durable: self.durable.clone(),
        }
    }
}

/// Raft RPCs to one member.
pub struct PeerClient {
    pool: Arc<Pool>,
    target: NodeId,
    addr: String,
    /// AppendEntries requests still awaiting their answers, also past
    /// openraft's deadline (the `late` module).
    in_flight: late::Pending,
    durable: Option<watch::Receiver<Option<JLogId>>>,
}

type RaftRpcError<E = openraft::error::Infallible> = RPCError<NodeId, NodeInfo, RaftError<NodeId, E>>;

fn transport_error<E: std::error::Error>(e: RpcError) -> RPCError<NodeId, NodeInfo, E> {
    match e {
        RpcError::Timeout | RpcError::ConnectionLost | RpcError::Unexpected => RPCError::Network(NetworkError::new(&e)),
        // openraft backs off before trying an unreachable node again.
        RpcError::Unreachable(_) | RpcError::WrongTarget { .. } | RpcError::Refused(_) => {
            RPCError::Unreachable(Unreachable::new(&e))
        }
    }
}

impl PeerClient {
    async fn call(&self, body: Body, option: &RPCOption) -> Result<Body, RpcError> {
        self.pool.call(&self.addr, Some(self.target), body, option.hard_ttl()).await
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RaftRpcError> {
        if let Some(durable) = &self.durable {
            rpc.leader_commit = super::disk::clamp_commit(rpc.leader_commit, *durable.borrow());
        }
        // openraft drops this future after `_option`'s TTL (one heartbeat interval);
        // the request stays in `in_flight` and its answer can serve the next.
        let range = late::Range {
            vote: rpc.vote,
            prev: rpc.prev_log_id,
            last: rpc.entries.last().map(|e| e.log_id).or(rpc.prev_log_id),
        };
        // Before the write: the follower sees the request after this instant.
        let at = crate::clock::now();
        let sent =
            self.pool.send(&self.addr, Some(self.target), Body::AppendReq(rpc)).await.map_err(transport_error)?;
        let seq = self.in_flight.push(range.clone(), at, sent);
        match self.in_flight.answer(seq, &range).await.map_err(transport_error)? {
            Body::AppendResp(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(transport_error(RpcError::Unexpected)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RaftRpcError<InstallSnapshotError>> {
        match self.call(Body::SnapshotReq(rpc), &option).await.map_err(transport_error)? {
            Body::SnapshotResp(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(transport_error(RpcError::Unexpected)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RaftRpcError> {
        match self.call(Body::VoteReq(rpc), &option).await.map_err(transport_error)? {
            Body::VoteResp(r) => r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e))),
            _ => Err(transport_error(RpcError::Unexpected)),
        }
    }
}
