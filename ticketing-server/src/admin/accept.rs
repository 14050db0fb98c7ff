//! The admin port's accept loop (docs/security.md, "The admin port"): every
//! connection takes one of `--admin-max-connections` slots, at most a quarter
//! of them from one source address (beyond either it is closed at once and
//! counted). Until its request head has arrived (TLS handshake included) a
//! connection also holds a place in the port's unauthenticated budget
//! (`crate::preauth`: half of the slots, an eighth from one address), where
//! a newer connection pushes the oldest out: idle or slow connections only
//! push each other out and never hold every slot. One request per
//! connection (no keep-alive), its head within [`HEADER_TIMEOUT`] of the
//! accept, the whole exchange within [`CONNECTION_TIMEOUT`].

use crate::metrics::LimitMetrics;
use crate::preauth::{PreAuth, PreAuthPermit};
use crate::reload::ClientTls;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

/// How long a connection has from its accept to the end of its request
/// head (TLS handshake included): a slow or idle connection is closed.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may live: one request and its answer
/// (connections are not kept alive).
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// The smallest `--admin-max-connections`: below it the unauthenticated
/// share of one address would be the address's whole share.
pub const MIN_CONNECTIONS: usize = 8;

/// What bounds the admin port (docs/security.md, "The admin port").
#[derive(Clone)]
pub struct AdminLimits {
    /// Connections at once (`--admin-max-connections`); a quarter of them
    /// from one address.
    pub max_connections: usize,
    /// TLS (`--admin-tls-cert`/`--admin-tls-key`; replaced on SIGHUP).
    pub tls: Arc<ClientTls>,
}

impl Default for AdminLimits {
    fn default() -> AdminLimits {
        AdminLimits { max_connections: 64, tls: Arc::default() }
    }
}

impl AdminLimits {
    fn total(&self) -> usize {
        self.max_connections.max(1)
    }

    /// Connections from one address: a quarter of the slots.
    fn per_address(&self) -> usize {
        (self.max_connections / 4).max(1)
    }

    /// The unauthenticated budget: half of the slots in all, an eighth
    /// from one address (so an address's idle connections leave it half of
    /// its share).
    fn preauth(&self) -> PreAuth {
        PreAuth::new((self.max_connections / 2).max(1), (self.max_connections / 8).max(1))
    }
}

/// Accepts admin connections on `listener` and serves `app` on each, within
/// `limits`, counting refusals and evictions in `counters`, until the task
/// is dropped. Accept errors are logged and retried after a short pause.
pub async fn accept_loop(
    listener: TcpListener,
    app: Router,
    limits: AdminLimits,
    counters: LimitMetrics,
) -> std::convert::Infallible {
    let slots = Arc::new(Semaphore::new(limits.total()));
    let per_addr = PerAddress::new(limits.per_address());
    let preauth = limits.preauth();
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(pair) => pair,
            Err(e) => {
                warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let accepted = Instant::now();
        let (Ok(total), Some(address)) = (slots.clone().try_acquire_owned(), per_addr.take(peer.ip())) else {
            counters.admin_connections_refused.inc();
            debug!(%peer, "admin connection refused: too many connections");
            continue;
        };
        let (permit, evicted) = preauth.admit(peer.ip());
        if evicted {
            counters.admin_preauth_evicted.inc();
        }
        let slot = Slot { _total: total, _address: address };
        tokio::spawn(connection(socket, limits.tls.acceptor(), app.clone(), slot, permit, accepted));
    }
}

/// One connection's place among the slots (in all and of its address).
struct Slot {
    _total: OwnedSemaphorePermit,
    _address: AddressGuard,
}

/// One connection: TLS if configured, then one request. Until the request
/// head has arrived it can be pushed out by a newer connection (`preauth`)
/// and is closed [`HEADER_TIMEOUT`] after `accepted`; it frees its slot
/// before its socket closes, so whoever sees it closed finds the slot free.
async fn connection(
    socket: TcpStream,
    tls: Option<TlsAcceptor>,
    app: Router,
    slot: Slot,
    mut preauth: PreAuthPermit,
    accepted: Instant,
) {
    let (head_tx, head_rx) = oneshot::channel();
    let served = async move {
        match tls {
            Some(acceptor) => match acceptor.accept(socket).await {
                Ok(s) => serve_http(TokioIo::new(s), app, head_tx).await,
                Err(e) => debug!(error = %e, "admin TLS handshake failed"),
            },
            None => serve_http(TokioIo::new(socket), app, head_tx).await,
        }
    };
    let mut served = std::pin::pin!(served);
    let head = tokio::select! {
        () = &mut served => false,
        () = preauth.evicted() => {
            debug!("admin connection without a request head closed for a newer one");
            false
        }
        () = tokio::time::sleep_until(accepted + HEADER_TIMEOUT) => {
            debug!("admin connection closed: no request head within 10 s");
            false
        }
        Ok(()) = head_rx => true,
    };
    drop(preauth);
    if head {
        let _ = tokio::time::timeout_at(accepted + CONNECTION_TIMEOUT, served).await;
    }
    drop(slot);
}

/// One HTTP/1 connection: one request (its head also bounded by hyper's
/// header timeout); `head` is told when the request head has arrived.
async fn serve_http<I>(io: I, app: Router, head: oneshot::Sender<()>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = FirstHead { inner: hyper_util::service::TowerToHyperService::new(app), head: Mutex::new(Some(head)) };
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(false)
        .serve_connection(io, service)
        .await;
    if let Err(e) = served {
        debug!(error = %e, "admin connection ended");
    }
}

/// A service that tells `head` when it is first called: hyper calls it once
/// a request head has been read whole.
struct FirstHead<S> {
    inner: S,
    head: Mutex<Option<oneshot::Sender<()>>>,
}

impl<S: hyper::service::Service<R>, R> hyper::service::Service<R> for FirstHead<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn call(&self, request: R) -> S::Future {
        if let Some(tx) = self.head.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(());
        }
        self.inner.call(request)
    }
}

/// Connections per source address, each counted while its guard lives.
#[derive(Clone)]
struct PerAddress {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max: usize,
}

impl PerAddress {
    fn new(max: usize) -> PerAddress {
        PerAddress { counts: Arc::default(), max }
    }

    /// A place for one more connection from `ip`, if it has fewer than the maximum.
    fn take(&self, ip: IpAddr) -> Option<AddressGuard> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(AddressGuard { per: self.clone(), ip })
    }
}

struct AddressGuard {
    per: PerAddress,
    ip: IpAddr,
}

impl Drop for AddressGuard {
    fn drop(&mut self) {
        let mut counts = self.per.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The accept loop on a loopback socket, with a handler that waits until
    //! the test lets it answer, so connections past their request head stay
    //! open as long as the test needs.

    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Bounds every wait: a hang fails the test instead of blocking it.
    const BOUND: Duration = Duration::from_secs(20);

    struct Port {
        port: u16,
        counters: LimitMetrics,
        /// Lets one waiting `/wait` handler answer per permit.
        answer: Arc<Semaphore>,
        /// Told once per `/wait` request that reached its handler.
        entered: tokio::sync::mpsc::UnboundedReceiver<()>,
        _task: tokio::task::JoinHandle<()>,
    }

    async fn start(max_connections: usize) -> Port {
        let answer = Arc::new(Semaphore::new(0));
        let (tx, entered) = tokio::sync::mpsc::unbounded_channel();
        let gate = answer.clone();
        let app = Router::new().route("/ok", get(|| async { "ok" })).route(
            "/wait",
            get(move || {
                let (gate, tx) = (gate.clone(), tx.clone());
                async move {
                    let _ = tx.send(());
                    gate.acquire().await.expect("gate open").forget();
                    "waited"
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let counters = LimitMetrics::default();
        let limits = AdminLimits { max_connections, tls: Arc::default() };
        let c = counters.clone();
        let task = tokio::spawn(async move {
            accept_loop(listener, app, limits, c).await;
        });
        Port { port, counters, answer, entered, _task: task }
    }

    /// A request on a new connection (a write the server refused to read is not an error here).
    async fn send(port: u16, path: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        let _ = s.write_all(req.as_bytes()).await;
        s
    }

    /// Everything until the server closes (bounded; a reset reads as the end).
    async fn read_all(mut s: TcpStream) -> String {
        let mut out = Vec::new();
        let read = tokio::time::timeout(BOUND, s.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the server did not close the connection");
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Waits until `counter` reaches `n` (bounded).
    async fn counted(counter: &prometheus_client::metrics::counter::Counter, n: u64) {
        let end = Instant::now() + BOUND;
        while counter.get() < n {
            assert!(Instant::now() < end, "counted {} of {n}", counter.get());
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(counter.get(), n);
    }

    async fn entered(p: &mut Port) {
        tokio::time::timeout(BOUND, p.entered.recv()).await.expect("the request was not served").unwrap();
    }

    #[tokio::test]
    async fn beyond_the_slots_of_an_address_a_connection_is_closed_at_once_and_counted() {
        // 8 slots, 2 from one address: every test connection is from 127.0.0.1.
        let mut p = start(8).await;
        let first = send(p.port, "/wait").await;
        entered(&mut p).await;
        let second = send(p.port, "/wait").await;
        entered(&mut p).await;
        let refused = send(p.port, "/ok").await;
        assert_eq!(read_all(refused).await, "", "a connection beyond the address's share got an answer");
        counted(&p.counters.admin_connections_refused, 1).await;
        p.answer.add_permits(2);
        for s in [first, second] {
            assert!(read_all(s).await.starts_with("HTTP/1.1 200"));
        }
        // The slots are free again once the answers are done.
        assert!(read_all(send(p.port, "/ok").await).await.starts_with("HTTP/1.1 200"));
        assert_eq!(p.counters.admin_preauth_evicted.get(), 0);
    }

    #[tokio::test]
    async fn idle_connections_push_each_other_out_and_never_keep_a_request_out() {
        // 64 slots: 16 from one address, of which 8 without a request head.
        let p = start(64).await;
        let mut open = std::collections::VecDeque::new();
        for i in 1..=40u64 {
            open.push_back(TcpStream::connect(("127.0.0.1", p.port)).await.unwrap());
            if i > 8 {
                // The oldest open one was closed for this one.
                counted(&p.counters.admin_preauth_evicted, i - 8).await;
                assert_eq!(read_all(open.pop_front().unwrap()).await, "");
            }
        }
        assert!(read_all(send(p.port, "/ok").await).await.starts_with("HTTP/1.1 200"));
        // The request pushed out the oldest of the 8 (its address's share).
        assert_eq!(p.counters.admin_preauth_evicted.get(), 33);
        assert_eq!(p.counters.admin_connections_refused.get(), 0);
        drop(open);
    }

    #[tokio::test]
    async fn a_connection_past_its_head_leaves_the_unauthenticated_budget() {
        // 16 slots: 4 from one address, 2 of them without a request head.
        let mut p = start(16).await;
        let busy = send(p.port, "/wait").await;
        entered(&mut p).await;
        // Two idle ones fill the budget of the address without pushing the
        // waiting request out; a third connection pushes the oldest idle out.
        let idle = [
            TcpStream::connect(("127.0.0.1", p.port)).await.unwrap(),
            TcpStream::connect(("127.0.0.1", p.port)).await.unwrap(),
        ];
        assert!(read_all(send(p.port, "/ok").await).await.starts_with("HTTP/1.1 200"));
        assert_eq!(p.counters.admin_preauth_evicted.get(), 1);
        p.answer.add_permits(1);
        assert!(read_all(busy).await.starts_with("HTTP/1.1 200"));
        drop(idle);
    }
}
