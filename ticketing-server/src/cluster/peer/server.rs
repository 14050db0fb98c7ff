//! The accepting side of the peer port (docs/cluster-protocol.md): the
//! accept loop, TLS and the handshake of each connection, the in-flight
//! byte budgets, and the answer to every request.

use super::*;
use crate::net::BoxConn;

/// Serves the peer port until the process ends. At most
/// `--max-peer-connections` connections at once: one more is answered
/// `E overloaded` (if its socket takes the line at once) and closed.
pub async fn serve(listener: Box<dyn crate::net::AcceptBoxed>, node: Arc<Node>) {
    let slots = Arc::new(Semaphore::new(node.limits.max_connections));
    loop {
        match listener.accept_boxed().await {
            Ok((mut stream, from)) => {
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    node.limits.metrics.peer_connections_refused.inc();
                    debug!(%from, "peer connection limit reached");
                    // Never waits: the accept loop must not stall.
                    let _ = futures_util::FutureExt::now_or_never(stream.write(b"E overloaded\n"));
                    continue;
                };
                let (preauth, evicted) = node.limits.preauth.admit(from.ip());
                if evicted {
                    node.limits.metrics.peer_preauth_evicted.inc();
                }
                let node = node.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    let gauge = &node.limits.metrics.peer_connections;
                    gauge.inc();
                    let result = serve_conn(stream, from, node.clone(), preauth).await;
                    node.limits.metrics.peer_connections.dec();
                    match result {
                        Ok(()) => debug!(%from, "peer connection ended"),
                        Err(e @ (WireError::Protocol(_) | WireError::Timeout)) => {
                            warn!(%from, error = %e, "peer connection closed")
                        }
                        Err(e) => debug!(%from, error = %e, "peer connection ended"),
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "peer accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The accepting side's TLS handshake (with the current peer TLS), bounded
/// by the handshake timeout. A failure is logged as a refused peer.
async fn accept_tls(stream: BoxConn, from: SocketAddr, node: &Node) -> Option<Box<dyn PeerStream>> {
    let Some(tls) = node.tls.get().as_ref().clone() else { return Some(Box::new(stream)) };
    let acceptor = TlsAcceptor::from(tls.server);
    match tokio::time::timeout(node.limits.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => Some(Box::new(s)),
        Ok(Err(e)) => {
            warn!(
                %from,
                error = %e,
                "peer refused: TLS handshake failed (a plain-TCP peer, or a certificate not signed by --peer-tls-ca)"
            );
            None
        }
        Err(_) => {
            warn!(%from, "peer refused: no TLS handshake within the handshake timeout");
            None
        }
    }
}

/// One accepted connection: TLS and the handshake while it holds its
/// place among the unauthenticated connections (`preauth`; evicted by a
/// newer one: closed), then its frames.
async fn serve_conn(
    stream: BoxConn,
    from: SocketAddr,
    node: Arc<Node>,
    mut preauth: crate::preauth::PreAuthPermit,
) -> Result<(), WireError> {
    let handshake = handshake(stream, from, &node);
    let shaken = tokio::select! {
        shaken = handshake => shaken,
        _ = preauth.evicted() => {
            debug!(%from, "peer connection evicted before its handshake by a newer unauthenticated one");
            return Ok(());
        }
    };
    drop(preauth);
    let Some((r, w, macs)) = shaken? else { return Ok(()) };
    serve_frames(r, w, macs, from, &node).await.inspect_err(|e| {
        if matches!(e, WireError::Protocol(_) | WireError::Timeout) {
            node.limits.metrics.peer_bad_frames.inc();
        }
    })
}

/// The read and write halves of an authenticated peer connection.
type Halves = (
    BufReader<tokio::io::ReadHalf<Box<dyn PeerStream>>>,
    tokio::io::WriteHalf<Box<dyn PeerStream>>,
    Option<wire::Macs>,
);

/// TLS (if on) and the peer handshake; `None`: refused (logged).
async fn handshake(stream: BoxConn, from: SocketAddr, node: &Node) -> Result<Option<Halves>, WireError> {
    let Some(stream) = accept_tls(stream, from, node).await else { return Ok(None) };
    let (r, mut w) = tokio::io::split(stream);
    let mut r = BufReader::new(r);
    let limits = &node.limits;
    let tokens = node.tokens.get();
    let checked = node.checks_tokens(&tokens).then_some(&tokens[..]);
    let handshake = wire::accept_handshake(&mut r, &mut w, checked, node.id, node.domain(), limits.handshake_timeout);
    let shaken = match tokio::time::timeout(limits.handshake_timeout, handshake).await {
        Ok(shaken) => shaken,
        // The whole handshake (greeting write included) ran out of time first.
        Err(_) => {
            limits.metrics.peer_handshake_timeouts.inc();
            let _ = tokio::time::timeout(Duration::from_secs(1), w.write_all(b"E handshake_timeout\n")).await;
            return Err(WireError::Timeout);
        }
    };
    drop(tokens);
    let macs = match shaken {
        Ok(macs) => macs,
        // The handshake's own read limit answered `E handshake_timeout`.
        Err(WireError::Timeout) => {
            limits.metrics.peer_handshake_timeouts.inc();
            return Err(WireError::Timeout);
        }
        Err(WireError::Refused(HandshakeRefusal::AuthFailed)) => {
            warn!(%from, "peer refused: wrong peer token (auth_failed)");
            return Ok(None);
        }
        Err(other) => {
            warn!(%from, error = %other, "peer refused: handshake failed");
            return Ok(None);
        }
    };
    Ok(Some((r, w, macs)))
}

/// Request bytes of one accepted connection, counted against its budget
/// and the node's from the moment a frame's length is known until its
/// request is served (or the connection is gone).
struct Budget<'a> {
    conn: AtomicUsize,
    limits: &'a PeerLimits,
}

impl<'a> Budget<'a> {
    fn new(limits: &'a PeerLimits) -> Budget<'a> {
        Budget { conn: AtomicUsize::new(0), limits }
    }

    /// Counts a frame of `n` bytes; `false` (nothing counted) when that
    /// takes the connection over its budget or the node over its own.
    fn admit(&self, n: usize) -> bool {
        let on_conn = self.conn.fetch_add(n, Ordering::AcqRel) + n;
        let on_node = self.node().inc_by(n as i64) + n as i64;
        if on_conn <= self.limits.max_conn_bytes && on_node <= self.limits.max_node_bytes as i64 {
            return true;
        }
        self.release(n);
        false
    }

    fn release(&self, n: usize) {
        self.conn.fetch_sub(n, Ordering::AcqRel);
        self.node().dec_by(n as i64);
    }

    /// The node's count: request bytes in flight on every accepted connection.
    fn node(&self) -> &prometheus_client::metrics::gauge::Gauge {
        &self.limits.metrics.peer_in_flight_bytes
    }
}

impl Drop for Budget<'_> {
    /// What is still counted (a started frame, requests being served) leaves the node's count.
    fn drop(&mut self) {
        let left = self.conn.swap(0, Ordering::AcqRel);
        self.node().dec_by(left as i64);
    }
}

/// One request's bytes, released from the [`Budget`] when dropped.
struct Held<'a>(&'a Budget<'a>, usize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.release(self.1);
    }
}

/// The frames of one accepted connection, in this one task: requests are
/// read while fewer than [`MAX_PEER_IN_FLIGHT`] are being served (and less
/// than [`PEER_ANSWER_BYTES`] of answers wait), served concurrently, and
/// their answers written as they finish, all finished answers in one
/// write. No task per frame, no writer task. A request that takes the
/// connection's request bytes in flight over `--max-peer-in-flight-bytes-per-conn`,
/// or the node's over `--max-peer-in-flight-bytes`, closes the connection
/// (logged, `ticketing_peer_budget_closed_total`).
async fn serve_frames<R, W>(
    r: R,
    mut w: W,
    macs: Option<wire::Macs>,
    from: SocketAddr,
    node: &Arc<Node>,
) -> Result<(), WireError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let frame_timeout = node.limits.frame_timeout;
    // Declared before `running`: dropped after every `Held` in it.
    let budget = Budget::new(&node.limits);
    let mut admit = |n| budget.admit(n);
    let (mut send_mac, recv_mac) = match macs {
        Some(m) => (Some(m.send), Some(m.recv)),
        None => (None, None),
    };
    let mut reader = wire::FrameReader::new(r).with_mac(recv_mac);
    let mut running = FuturesUnordered::new();
    let mut out: Vec<u8> = Vec::with_capacity(4096);
    // Bytes were written since the last flush (TLS may hold some back).
    let mut dirty = false;
    let mut ended = false;
    loop {
        if ended && running.is_empty() && out.is_empty() && !dirty {
            return Ok(());
        }
        let can_read = !ended && running.len() < MAX_PEER_IN_FLIGHT && out.len() < PEER_ANSWER_BYTES;
        tokio::select! {
            biased;
            Some((id, body)) = running.next(), if !running.is_empty() => {
                let answer = Envelope { v: VERSION, id, to: node.id, domain: node.domain(), body };
                let start = out.len();
                match wire::encode_into(&answer, &mut out) {
                    Ok(()) => wire::seal(&mut out, start, send_mac.as_mut()),
                    Err(e) => warn!(error = %e, "cannot encode a peer answer"),
                }
            }
            written = std::future::poll_fn(|cx| {
                if out.is_empty() {
                    Pin::new(&mut w).poll_flush(cx).map_ok(|()| None)
                } else {
                    Pin::new(&mut w).poll_write(cx, &out).map_ok(Some)
                }
            }), if !out.is_empty() || dirty => match written {
                Ok(Some(0)) => return Err(WireError::Io(std::io::ErrorKind::WriteZero)),
                Ok(Some(n)) => {
                    out.drain(..n);
                    dirty = true;
                }
                Ok(None) => dirty = false,
                Err(e) => return Err(e.into()),
            },
            frame = reader.next_admitted(frame_timeout, &mut admit), if can_read => match frame? {
                wire::Read::Frame(env, n) => {
                    let held = Held(&budget, n);
                    running.push(async move {
                        let id = env.id;
                        let body = respond(node, env).await;
                        drop(held);
                        (id, body)
                    })
                }
                wire::Read::Refused(n) => {
                    node.limits.metrics.peer_budget_closed.inc();
                    warn!(
                        %from,
                        frame_bytes = n,
                        conn_bytes = budget.conn.load(Ordering::Acquire),
                        node_bytes = node.limits.metrics.peer_in_flight_bytes.get(),
                        max_conn_bytes = node.limits.max_conn_bytes,
                        max_node_bytes = node.limits.max_node_bytes,
                        "peer connection closed: request bytes in flight over \
                         --max-peer-in-flight-bytes-per-conn or --max-peer-in-flight-bytes"
                    );
                    return Ok(());
                }
                wire::Read::End => ended = true,
            },
        }
    }
}

/// Checks the envelope and runs the request.
async fn respond(node: &Arc<Node>, env: Envelope) -> Body {
    if env.v != VERSION {
        return Body::Refused(Refusal::BadVersion);
    }
    if env.to != node.id {
        return Body::Refused(Refusal::WrongTarget { actual: node.id });
    }
    if let (Some(mine), Some(theirs)) = (node.domain(), env.domain) {
        if mine != theirs {
            return Body::Refused(Refusal::WrongDomain);
        }
    }
    let Some(raft) = node.raft.get() else { return Body::Refused(Refusal::Unsupported) };
    match env.body {
        Body::AppendReq(req) => {
            // Only a leader that has this (fresh, random) NodeId in its
            // membership sends it entries: adopt its domain.
            if let Some(d) = env.domain {
                node.adopt_domain(d);
            }
            node.hurry.leader_contact(crate::clock::now());
            Body::AppendResp(raft.append_entries(req).await)
        }
        Body::SnapshotReq(req) => {
            if !snapshot_chunk_fits(req.offset, req.data.len(), node.limits.max_snapshot_bytes) {
                node.limits.metrics.snapshot_refused.inc();
                warn!(
                    offset = req.offset,
                    len = req.data.len(),
                    max = node.limits.max_snapshot_bytes,
                    "snapshot chunk refused: it would take the snapshot beyond --max-snapshot-bytes"
                );
                return Body::Refused(Refusal::Unsupported);
            }
            if let Some(d) = env.domain {
                node.adopt_domain(d);
            }
            Body::SnapshotResp(raft.install_snapshot(req).await)
        }
        Body::VoteReq(req) => {
            let probe = req.clone();
            let resp = raft.vote(req).await;
            if let Ok(r) = &resp {
                if let Some(term) =
                    node.hurry.campaign_above(node.id, crate::clock::now(), node.quorum_limit, &probe, r)
                {
                    node.hurry.start(raft.clone(), term, node.heartbeat);
                }
            }
            Body::VoteResp(resp)
        }
        Body::StatusReq => Body::StatusResp(membership::status(node)),
        Body::BootstrapReq(d) => Body::BootstrapResp(membership::on_bootstrap(node, d).await),
        Body::JoinReq(j) => Body::JoinResp(membership::on_join(node, j).await),
        // An answer sent as a request.
        Body::AppendResp(_)
        | Body::VoteResp(_)
        | Body::SnapshotResp(_)
        | Body::JoinResp(_)
        | Body::StatusResp(_)
        | Body::BootstrapResp(_)
        | Body::Refused(_) => Body::Refused(Refusal::Unsupported),
    }
}

/// Whether a snapshot chunk of `len` bytes at `offset` stays within `max`
/// bytes: the receive buffer grows to `offset + len`, so this bounds what a
/// sender (even one with the peer token) can make this node allocate.
fn snapshot_chunk_fits(offset: u64, len: usize, max: u64) -> bool {
    offset.checked_add(len as u64).is_some_and(|end| end <= max)
}

#[cfg(test)]
mod tests {
    use super::snapshot_chunk_fits;

    #[test]
    fn snapshot_chunks_stay_within_the_bound() {
        assert!(snapshot_chunk_fits(0, 1024, 1024));
        assert!(snapshot_chunk_fits(1000, 24, 1024));
        assert!(!snapshot_chunk_fits(1000, 25, 1024));
        assert!(!snapshot_chunk_fits(u64::MAX, 1, 1 << 30), "no overflow");
        assert!(!snapshot_chunk_fits(1 << 40, 0, 1 << 30), "an offset far beyond is refused even without data");
    }
}
