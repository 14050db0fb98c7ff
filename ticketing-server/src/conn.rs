//! One client connection (docs/protocol.md §3): greeting and AUTH, decoding requests,
//! forwarding them to the lock manager, writing answers, following
//! leadership changes. Generic over the stream, so plain TCP and TLS share it.
//!
//! One task per connection. Reads go into a buffer that never holds more
//! than 512 bytes without an LF (a longer line is `E too_large`); answers
//! are encoded whole into one outbound buffer that the same task writes, so
//! frames never interleave. The outbound buffer is bounded by
//! `--max-write-buffer-bytes`: a client that leaves more answers than that
//! unread is closed at once (docs/configuration.md, "Limits"), so it never holds memory or
//! stalls anyone else. The manager's answers arrive on a bounded queue with
//! one slot per allowed in-flight request.

use crate::leader::Request;
use crate::locks::GrantKind;
use crate::manager::{ConnId, Delivery, ManagerHandle, ManagerRequest};
use crate::preauth::PreAuthPermit;
use crate::principal::Principals;
use crate::replication::{self, Leadership};
use bytes::{Buf, BytesMut};
use std::collections::HashSet;
use std::time::Duration;
use ticketing_proto::auth::{self, Label};
use ticketing_proto::frame::decode_client;
use ticketing_proto::limits::MAX_FRAME;
use ticketing_proto::{Addr, ClientFrame, ErrorCode, Hex32, RequestId, Role, ServerFrame};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{broadcast, mpsc, watch};
use tokio::time::Instant;
use tracing::{debug, trace};

/// How long a fatal `E` line (and what was queued before it) may take to write.
const FATAL_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// After a fatal `E`, how long to read and discard what the client still
/// sends, so the close is a FIN and not a RST that could destroy the `E`
/// line in the client's receive buffer.
const LINGER: Duration = Duration::from_millis(500);
const LINGER_MAX_BYTES: usize = 1 << 20;
/// After the client's EOF, how long answers to requests already being
/// committed may still take before the connection closes.
const EOF_DRAIN: Duration = Duration::from_secs(2);

/// What every connection shares.
pub struct ConnContext {
    /// The lock manager.
    pub manager: ManagerHandle,
    /// This node's view of leadership.
    pub leadership: watch::Receiver<Leadership>,
    /// The principals and their tokens; no token = auth off. Replaced on
    /// reload (SIGHUP): each AUTH checks the current tokens, each request
    /// the current definition of its connection's principal.
    pub client_tokens: std::sync::Arc<crate::reload::Current<Principals>>,
    /// This node's client address as announced in `M`/`L`.
    pub advertise: Addr,
    /// In-flight requests allowed per connection.
    pub max_pending: usize,
    /// Answer bytes a connection may leave unwritten (`--max-write-buffer-bytes`).
    pub max_write_buffer: usize,
    /// Answer bytes all connections together may leave unwritten
    /// (`--max-total-write-buffer-bytes`): past it, a connection holding
    /// more than [`TOTAL_OVERFLOW_FLOOR`] unread is closed.
    pub write_buffers: WriteBuffers,
}

/// Below this many unread bytes a connection is never closed for the
/// process-wide total: only the connections that do not read are.
pub const TOTAL_OVERFLOW_FLOOR: usize = 64 * 1024;

/// The unread answer bytes of every connection, against one total.
#[derive(Debug, Default)]
pub struct WriteBuffers {
    /// Bytes held now.
    held: std::sync::atomic::AtomicUsize,
    /// `--max-total-write-buffer-bytes`.
    pub max: usize,
}

impl WriteBuffers {
    /// A total of `max` bytes.
    pub fn new(max: usize) -> WriteBuffers {
        WriteBuffers { held: Default::default(), max }
    }

    /// Moves one connection's count from `*counted` to `now`; whether the
    /// total is now beyond the maximum.
    fn account(&self, counted: &mut usize, now: usize) -> bool {
        use std::sync::atomic::Ordering;
        let total = if now >= *counted {
            self.held.fetch_add(now - *counted, Ordering::AcqRel) + (now - *counted)
        } else {
            self.held.fetch_sub(*counted - now, Ordering::AcqRel) - (*counted - now)
        };
        *counted = now;
        total > self.max
    }

    /// Bytes held now by every connection.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// Why the connection loop ended.
enum End {
    /// Write this frame, then close.
    Fatal(ServerFrame),
    /// The client closed (or the socket failed): just close.
    Gone,
    /// The client left more than `--max-write-buffer-bytes` unread: close
    /// at once, nothing more written.
    Overflow,
}

/// The state of one client connection (its task owns it).
struct ClientConn<'a> {
    id: ConnId,
    /// The client's address, shown for its waiters in `/locks/<key>`.
    peer: String,
    ctx: &'a ConnContext,
    snonce: Hex32,
    authed: bool,
    /// Its unread answer bytes as counted in `ctx.write_buffers`.
    counted_out: usize,
    /// Its place among the unauthenticated connections, until AUTH succeeds.
    preauth: Option<PreAuthPermit>,
    /// The name of the principal its token belongs to (`None`: auth off,
    /// every key allowed).
    principal: Option<std::sync::Arc<str>>,
    registered: bool,
    in_flight: HashSet<RequestId>,
    deliveries_tx: mpsc::Sender<Delivery>,
    leadership: watch::Receiver<Leadership>,
    last_leader: Option<Addr>,
    /// The leadership epoch this connection was served in, while this node
    /// serves. Compared as an epoch, not a bool: the watch may merge "not
    /// serving" and "serving again" into one update, and a connection of an
    /// earlier epoch must still be closed (its waiters are gone).
    serving_epoch: Option<u64>,
    out: BytesMut,
}

/// Serves one connection until it closes. `handshake_deadline` bounds the
/// time to a correct AUTH; `shutdown` fires (or closes) when the server stops.
/// Steps: greet, run the connection's loop until it ends, leave the queues,
/// close as the end requires.
pub async fn serve<S>(
    stream: S,
    id: ConnId,
    peer: std::net::SocketAddr,
    ctx: &ConnContext,
    handshake_deadline: Instant,
    shutdown: broadcast::Receiver<()>,
    preauth: PreAuthPermit,
) where
    S: AsyncRead + AsyncWrite + Send,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (deliveries_tx, mut deliveries_rx) = mpsc::channel(ctx.max_pending.saturating_add(8));
    let mut conn = ClientConn::new(id, peer, ctx, deliveries_tx);
    conn.preauth = Some(preauth);
    let end = conn.run(&mut rd, &mut wr, &mut deliveries_rx, handshake_deadline, shutdown).await;
    // Its waiters leave their queues at once (its grants stay).
    if conn.registered {
        ctx.manager.disconnected(id);
    }
    let counted = conn.counted_out;
    conn.close(end, &mut rd, &mut wr, &mut deliveries_rx).await;
    ctx.write_buffers.account(&mut { counted }, 0);
}

impl<'a> ClientConn<'a> {
    /// A fresh connection with its greeting queued.
    fn new(
        id: ConnId,
        peer: std::net::SocketAddr,
        ctx: &'a ConnContext,
        deliveries_tx: mpsc::Sender<Delivery>,
    ) -> Self {
        let snonce = auth::nonce(&mut ticketing_proto::entropy::ThreadOr(rand_core::OsRng));
        let mut conn = ClientConn {
            id,
            peer: peer.to_string(),
            ctx,
            snonce,
            authed: false,
            principal: None,
            preauth: None,
            counted_out: 0,
            registered: false,
            in_flight: HashSet::new(),
            deliveries_tx,
            leadership: ctx.leadership.clone(),
            last_leader: None,
            serving_epoch: None,
            out: BytesMut::with_capacity(1024),
        };
        ServerFrame::Greeting { snonce }.encode(&mut conn.out);
        conn
    }

    /// The connection's loop: reads, deliveries, leadership changes and
    /// writes, until something ends it.
    async fn run<S: AsyncRead + AsyncWrite>(
        &mut self,
        rd: &mut ReadHalf<S>,
        wr: &mut WriteHalf<S>,
        deliveries_rx: &mut mpsc::Receiver<Delivery>,
        handshake_deadline: Instant,
        mut shutdown: broadcast::Receiver<()>,
    ) -> End {
        let ctx = self.ctx;
        // Read straight into the frame buffer (no chunk in the task: at ten
        // thousand connections each byte of a task's state counts, docs/benchmarks.md W4).
        let mut inbuf = BytesMut::with_capacity(MAX_FRAME * 2);
        // Set when the client sent EOF: no more reading; close once every
        // request read before it has its answer (or at this deadline).
        let mut eof_drain: Option<Instant> = None;
        loop {
            if eof_drain.is_some() && self.in_flight.is_empty() {
                return End::Gone;
            }
            if self.out.len() > ctx.max_write_buffer {
                return End::Overflow;
            }
            let out = self.out.len();
            if ctx.write_buffers.account(&mut self.counted_out, out) && out > TOTAL_OVERFLOW_FLOOR {
                return End::Overflow;
            }
            if inbuf.capacity() - inbuf.len() < MAX_FRAME {
                inbuf.reserve(MAX_FRAME * 2);
            }
            tokio::select! {
                biased;
                _ = shutdown.recv() => {
                    return End::Fatal(ServerFrame::error(ErrorCode::ShuttingDown));
                }
                _ = evicted(&mut self.preauth), if !self.authed => {
                    debug!("evicted before its handshake by a newer unauthenticated connection");
                    return End::Gone;
                }
                _ = tokio::time::sleep_until(handshake_deadline), if !self.authed => {
                    ctx.manager.metrics().limits.client_handshake_timeouts.inc();
                    debug!("handshake timed out");
                    return End::Fatal(ServerFrame::error(ErrorCode::HandshakeTimeout));
                }
                _ = sleep_until_some(eof_drain), if eof_drain.is_some() => {
                    return End::Gone;
                }
                Some(delivery) = deliveries_rx.recv() => {
                    if let Some(end) = self.on_delivery(delivery) {
                        return end;
                    }
                }
                changed = self.leadership.changed(), if self.authed => {
                    if changed.is_err() {
                        return End::Fatal(ServerFrame::error(ErrorCode::ShuttingDown));
                    }
                    if let Some(end) = self.on_leadership() {
                        return end;
                    }
                }
                res = wr.write_buf(&mut self.out), if !self.out.is_empty() => {
                    if let Err(e) = res {
                        debug!(error = %e, "write failed");
                        return End::Gone;
                    }
                }
                res = rd.read_buf(&mut inbuf), if eof_drain.is_none() => {
                    let got = match res {
                        Ok(n) => n,
                        Err(e) => {
                            debug!(error = %e, "read failed");
                            return End::Gone;
                        }
                    };
                    if got == 0 {
                        match self.on_eof().await {
                            Some(at) => eof_drain = Some(at),
                            None => return End::Gone,
                        }
                    } else if let Some(end) = self.on_input(&mut inbuf).await {
                        return end;
                    }
                }
            }
        }
    }

    /// EOF: the client sends nothing more. Its waiters leave their queues
    /// now (a dead client must not be handed a key); answers already being
    /// committed (a grant of a free key, a release) are still written, until
    /// the returned deadline. `None`: close now.
    async fn on_eof(&mut self) -> Option<Instant> {
        debug!("client closed its sending side");
        if !self.registered || self.ctx.manager.send(ManagerRequest::LeaveQueues { conn: self.id }).await.is_err() {
            return None;
        }
        Some(Instant::now() + EOF_DRAIN)
    }

    /// Closes the connection as `end` requires: a fatal `E` line after the
    /// committed answers, nothing for an overflow, the pending output for a
    /// client that is gone.
    async fn close<S: AsyncRead + AsyncWrite>(
        mut self,
        end: End,
        rd: &mut ReadHalf<S>,
        wr: &mut WriteHalf<S>,
        deliveries_rx: &mut mpsc::Receiver<Delivery>,
    ) {
        match end {
            End::Fatal(frame) => {
                debug!(frame = ?frame, "closing with error");
                // Answers already committed go out before the `E` line.
                while let Ok(delivery) = deliveries_rx.try_recv() {
                    if matches!(delivery, Delivery::Reply { .. }) {
                        let _ = self.on_delivery(delivery);
                    }
                }
                frame.encode(&mut self.out);
                let out = &mut self.out;
                let wrote = tokio::time::timeout(FATAL_WRITE_TIMEOUT, async {
                    wr.write_all_buf(out).await?;
                    wr.flush().await?;
                    wr.shutdown().await
                })
                .await;
                if matches!(wrote, Ok(Ok(()))) {
                    linger(rd).await;
                }
            }
            End::Overflow => {
                self.ctx.manager.metrics().limits.write_buffer_overflows.inc();
                debug!(
                    unread = self.out.len(),
                    limit = self.ctx.max_write_buffer,
                    "closing: the client does not read its answers"
                );
            }
            End::Gone => {
                let out = &mut self.out;
                let _ = tokio::time::timeout(FATAL_WRITE_TIMEOUT, async {
                    wr.write_all_buf(out).await?;
                    wr.shutdown().await
                })
                .await;
            }
        }
    }
}

/// Completes when the connection was evicted from the unauthenticated
/// budget; never for `None`.
async fn evicted(permit: &mut Option<PreAuthPermit>) {
    match permit {
        Some(p) => p.evicted().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`; never completes for `None`.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Reads and discards until EOF, a pause, or a bound, so closing does not reset.
async fn linger<R: AsyncRead>(rd: &mut ReadHalf<R>) {
    let deadline = Instant::now() + LINGER;
    // On the heap, only while closing: an array here would be part of every
    // connection's task for its whole life (it was 4 of its 5.4 KB).
    let mut buf = vec![0u8; 4096];
    let mut total = 0usize;
    while total < LINGER_MAX_BYTES {
        match tokio::time::timeout_at(deadline, rd.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => total += n,
            _ => break,
        }
    }
}

impl ClientConn<'_> {
    fn send(&mut self, frame: &ServerFrame) {
        frame.encode(&mut self.out);
    }

    fn not_serving_frame(&self, l: &Leadership) -> ServerFrame {
        replication::redirect(l.leader.as_ref(), &self.ctx.advertise)
    }

    fn on_delivery(&mut self, delivery: Delivery) -> Option<End> {
        match delivery {
            Delivery::Reply { id, frame } => {
                self.in_flight.remove(&id);
                trace!(frame = ?frame, "answer");
                self.send(&frame);
                None
            }
            Delivery::Fatal(frame) => Some(End::Fatal(frame)),
            Delivery::Dropped(id) => {
                self.in_flight.remove(&id);
                None
            }
        }
    }

    /// This connection was served while this node served, and that
    /// leadership ended: this node stopped serving, or serves again in a
    /// later epoch (a flap the watch may have merged into one update).
    fn stale(&self, l: &Leadership) -> bool {
        self.serving_epoch.is_some_and(|e| !l.serving || l.epoch != e)
    }

    fn on_leadership(&mut self) -> Option<End> {
        let l = self.leadership.borrow_and_update().clone();
        if self.stale(&l) {
            return Some(End::Fatal(self.not_serving_frame(&l)));
        }
        self.serving_epoch = l.serving.then_some(l.epoch);
        if l.leader != self.last_leader {
            if let Some(addr) = &l.leader {
                self.send(&ServerFrame::Leader { addr: addr.clone() });
            }
            self.last_leader = l.leader;
        }
        None
    }

    /// Handles every complete line in `inbuf`; what is left is shorter than 512 bytes.
    async fn on_input(&mut self, inbuf: &mut BytesMut) -> Option<End> {
        loop {
            match decode_client(inbuf) {
                Ok(None) => return None,
                Err(e) => {
                    debug!(error = %e, "bad input");
                    return Some(End::Fatal(ServerFrame::error(e.code())));
                }
                Ok(Some((frame, used))) => {
                    inbuf.advance(used);
                    if let Some(end) = self.on_frame(frame).await {
                        return Some(end);
                    }
                }
            }
        }
    }

    async fn on_frame(&mut self, frame: ClientFrame) -> Option<End> {
        if !self.authed {
            return match frame {
                ClientFrame::Auth { cnonce, cmac } => self.on_auth(cnonce, cmac).await,
                // A well-formed frame other than AUTH before OK breaks the handshake.
                _ => Some(End::Fatal(ServerFrame::error(ErrorCode::BadFrame))),
            };
        }
        let read_at = Instant::now();
        let id = match &frame {
            ClientFrame::Auth { .. } => return Some(End::Fatal(ServerFrame::error(ErrorCode::BadFrame))),
            ClientFrame::Acquire { id, .. }
            | ClientFrame::AcquireShared { id, .. }
            | ClientFrame::AcquireAll { id, .. }
            | ClientFrame::Release { id, .. }
            | ClientFrame::Query { id, .. }
            | ClientFrame::Ping { id } => *id,
        };
        if self.in_flight.contains(&id) {
            return Some(End::Fatal(ServerFrame::error(ErrorCode::DuplicateId)));
        }
        if let ClientFrame::Ping { id } = frame {
            // Answered at once, on leaders and followers alike.
            self.send(&ServerFrame::Pong { id });
            return None;
        }
        if self.in_flight.len() >= self.ctx.max_pending {
            return Some(End::Fatal(ServerFrame::error(ErrorCode::TooManyPending)));
        }
        let l = self.leadership.borrow().clone();
        if !l.serving || self.stale(&l) {
            return Some(End::Fatal(self.not_serving_frame(&l)));
        }
        // One read of the principal's current definition per request.
        let current = self.principal.as_ref().map(|name| self.ctx.client_tokens.get().by_name(name).cloned());
        if let Some(key) = current.as_ref().and_then(|p| forbidden_key(&frame, p.as_deref())) {
            // Final, and the connection stays (docs/protocol.md, "The answer F").
            let principal = self.principal.as_deref().unwrap_or_default();
            self.ctx.manager.metrics().forbidden(principal);
            debug!(principal, key = %key, "forbidden");
            self.send(&ServerFrame::Forbidden { id, key });
            return None;
        }
        let conn = self.id;
        let read_at = read_at.into_std();
        let principal = self.principal.clone().zip(current).map(|(name, p)| crate::principal::PrincipalCap {
            name,
            max_waiters: p.as_ref().and_then(|p| p.max_waiters),
            max_held_keys: p.and_then(|p| p.max_held_keys),
        });
        let request = match frame {
            ClientFrame::Acquire { id, key, owner, wait, lease } => {
                Request::Acquire { id, key, kind: GrantKind::Exclusive, owner, wait, lease, read_at, principal }
            }
            ClientFrame::AcquireShared { id, key, owner, wait, lease, n } => {
                Request::Acquire { id, key, kind: GrantKind::Shared { n }, owner, wait, lease, read_at, principal }
            }
            ClientFrame::AcquireAll { id, owner, wait, lease, keys } => {
                let key = keys.first().clone();
                Request::Acquire {
                    id,
                    key,
                    kind: GrantKind::All { keys: keys.into_vec() },
                    owner,
                    wait,
                    lease,
                    read_at,
                    principal,
                }
            }
            ClientFrame::Release { id, key, owner, token } => Request::Release { id, key, owner, token },
            ClientFrame::Query { id, key, owner } => Request::Holds { id, key, owner },
            ClientFrame::Auth { .. } | ClientFrame::Ping { .. } => unreachable!("handled above"),
        };
        let req = ManagerRequest::Request { conn, request };
        self.in_flight.insert(id);
        if self.ctx.manager.send(req).await.is_err() {
            return Some(End::Fatal(ServerFrame::error(ErrorCode::Internal)));
        }
        None
    }

    async fn on_auth(&mut self, cnonce: Hex32, cmac: Hex32) -> Option<End> {
        let principals = self.ctx.client_tokens.get();
        let tokens = principals.tokens();
        let Some(which) = auth::check_client(tokens, Label::Client, &self.snonce, &cnonce, &cmac) else {
            debug!("auth failed");
            return Some(End::Fatal(ServerFrame::error(ErrorCode::AuthFailed)));
        };
        let l = self.leadership.borrow_and_update().clone();
        if !l.active {
            return Some(End::Fatal(ServerFrame::error(ErrorCode::NotActive)));
        }
        let token: &[u8] = which.map(|i| tokens[i].expose()).unwrap_or_default();
        let smac = auth::mac(token, Label::Server, &self.snonce, &cnonce);
        let role = if l.serving { Role::Leader } else { Role::Follower };
        self.send(&ServerFrame::Ok { role, smac });
        let req = ManagerRequest::Register { conn: self.id, tx: self.deliveries_tx.clone(), client: self.peer.clone() };
        if self.ctx.manager.send(req).await.is_err() {
            return Some(End::Fatal(ServerFrame::error(ErrorCode::Internal)));
        }
        self.registered = true;
        self.authed = true;
        self.preauth = None;
        self.principal = which.and_then(|i| principals.of_token(i)).map(|p| std::sync::Arc::from(p.name.as_str()));
        self.serving_epoch = l.serving.then_some(l.epoch);
        if let Some(addr) = &l.leader {
            self.send(&ServerFrame::Leader { addr: addr.clone() });
        }
        self.last_leader = l.leader;
        debug!(?role, "authenticated");
        None
    }
}

/// The key of `frame` that `principal` (its current definition; `None`: a
/// reload removed it, it may use no key) may not use (docs/security.md,
/// "Several teams: principals"): for a `K`, the first such key.
fn forbidden_key(frame: &ClientFrame, principal: Option<&crate::principal::Principal>) -> Option<ticketing_proto::Key> {
    let keys: &[ticketing_proto::Key] = match frame {
        ClientFrame::Acquire { key, .. }
        | ClientFrame::AcquireShared { key, .. }
        | ClientFrame::Release { key, .. }
        | ClientFrame::Query { key, .. } => std::slice::from_ref(key),
        ClientFrame::AcquireAll { keys, .. } => keys.as_slice(),
        ClientFrame::Auth { .. } | ClientFrame::Ping { .. } => return None,
    };
    match principal {
        Some(p) => p.first_forbidden(keys).cloned(),
        None => keys.first().cloned(),
    }
}

/// Counts a connection in the `connections` gauge while alive.
pub struct ConnGauge(ManagerHandle);

impl ConnGauge {
    /// Increments the gauge; the drop decrements it.
    pub fn new(manager: &ManagerHandle) -> ConnGauge {
        manager.metrics().connections.inc();
        ConnGauge(manager.clone())
    }
}

impl Drop for ConnGauge {
    fn drop(&mut self) {
        self.0.metrics().connections.dec();
    }
}

/// Writes `E overloaded` on a connection refused for the connection limit,
/// then closes it (bounded in time).
pub async fn refuse<S>(stream: S)
where
    S: AsyncRead + AsyncWrite + Send,
{
    let (mut rd, mut wr): (ReadHalf<S>, WriteHalf<S>) = tokio::io::split(stream);
    let frame = ServerFrame::error(ErrorCode::Overloaded).to_bytes();
    let wrote = tokio::time::timeout(FATAL_WRITE_TIMEOUT, async {
        wr.write_all(&frame).await?;
        wr.flush().await?;
        wr.shutdown().await
    })
    .await;
    if matches!(wrote, Ok(Ok(()))) {
        linger(&mut rd).await;
    }
}
