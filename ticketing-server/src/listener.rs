//! The accept loop (mini-redis style): a `Semaphore` bounds the number of
//! client connections, a `broadcast` tells every connection to stop, and a
//! completion channel (every connection task holds a sender) tells the
//! server when the last one is gone.

use crate::conn::{self, ConnContext, ConnGauge};
use crate::manager::ConnId;
use crate::net::Accept;
use crate::preauth::PreAuth;
use crate::reload::ClientTls;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info_span, warn, Instrument};

/// At most this many refused connections are being answered `E overloaded` at once; beyond it they are just closed.
const MAX_REFUSING: usize = 1024;

/// The accept loop's state.
pub struct Listener<A: Accept> {
    /// The client port (TCP; a simulated one in a simulation).
    pub listener: A,
    /// One permit per allowed connection (`--max-connections`).
    pub limit: Arc<Semaphore>,
    /// TLS on the client port, if configured (replaced on reload: each accept takes the current one).
    pub tls: Arc<ClientTls>,
    /// Dropped (closed) when the server shuts down.
    pub notify_shutdown: broadcast::Sender<()>,
    /// Cloned into every connection task; the server waits until all are dropped.
    pub shutdown_complete: mpsc::Sender<()>,
    /// Shared by every connection.
    pub ctx: Arc<ConnContext>,
    /// Time from accept to a correct AUTH (TLS handshake included).
    pub handshake_timeout: Duration,
    /// Unauthenticated connections (docs/security.md, "Unauthenticated
    /// connections"): a newer one evicts the oldest when it is full.
    pub preauth: PreAuth,
}

impl<A: Accept> Listener<A> {
    /// Accepts connections until the task is dropped. Accept errors (for
    /// example running out of file descriptors) are logged and retried after
    /// a short pause; they never stop the server.
    pub async fn run(&self) -> std::convert::Infallible {
        let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
        let mut next_id: u64 = 0;
        loop {
            let (socket, peer) = match self.listener.accept().await {
                Ok(pair) => pair,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            next_id += 1;
            let id = ConnId(next_id);
            let deadline = Instant::now() + self.handshake_timeout;
            let tls = self.tls.acceptor();
            let Ok(permit) = self.limit.clone().try_acquire_owned() else {
                debug!(%peer, "connection limit reached");
                self.ctx.manager.metrics().limits.client_connections_refused.inc();
                if let Ok(slot) = refusing.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        let _slot = slot;
                        if let Some(stream) = handshake_tls(tls, socket, deadline).await {
                            match stream {
                                Either::Plain(s) => conn::refuse(s).await,
                                Either::Tls(s) => conn::refuse(s).await,
                            }
                        }
                    });
                }
                continue;
            };
            let (mut preauth, evicted) = self.preauth.admit(peer.ip());
            if evicted {
                self.ctx.manager.metrics().limits.client_preauth_evicted.inc();
            }
            let ctx = self.ctx.clone();
            let shutdown = self.notify_shutdown.subscribe();
            let complete = self.shutdown_complete.clone();
            let span = info_span!("conn", id = id.0, %peer);
            tokio::spawn(
                async move {
                    let _permit = permit;
                    let _complete = complete;
                    let _gauge = ConnGauge::new(&ctx.manager);
                    debug!("accepted");
                    let stream = tokio::select! {
                        s = handshake_tls(tls, socket, deadline) => s,
                        _ = preauth.evicted() => None,
                    };
                    match stream {
                        Some(Either::Plain(s)) => conn::serve(s, id, peer, &ctx, deadline, shutdown, preauth).await,
                        // Still boxed: the TLS state (1.2 KB) stays out of the task's own state.
                        Some(Either::Tls(s)) => conn::serve(s, id, peer, &ctx, deadline, shutdown, preauth).await,
                        // The TLS stage of the handshake ran out of time.
                        None if Instant::now() >= deadline => {
                            ctx.manager.metrics().limits.client_handshake_timeouts.inc();
                        }
                        None => {}
                    }
                    debug!("closed");
                }
                .instrument(span),
            );
        }
    }
}

enum Either<S> {
    Plain(S),
    Tls(Box<tokio_rustls::server::TlsStream<S>>),
}

/// The TLS handshake (if TLS is on), bounded by the handshake deadline.
async fn handshake_tls<S: crate::net::Conn>(
    tls: Option<TlsAcceptor>,
    socket: S,
    deadline: Instant,
) -> Option<Either<S>> {
    let Some(acceptor) = tls else { return Some(Either::Plain(socket)) };
    match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
        Ok(Ok(s)) => Some(Either::Tls(Box::new(s))),
        Ok(Err(e)) => {
            debug!(error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            debug!("TLS handshake timed out");
            None
        }
    }
}
