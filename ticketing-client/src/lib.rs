//! # ticketing-client
//!
//! The Rust client of Ticketing, a distributed FIFO lock service with
//! fencing tokens. It is a tokio driver of the sans-IO core in
//! `ticketing-proto`, where every client rule of docs/client.md lives; the Ruby,
//! Python and Node bindings wrap this crate.
//!
//! ```no_run
//! use std::time::Duration;
//! use ticketing_client::{TicketBroker, Tls};
//!
//! # async fn demo() -> ticketing_client::Result<()> {
//! let broker = TicketBroker::builder(["127.0.0.1:5225"]).token("123").tls(Tls::Off).build()?;
//! broker.wait_ready(Duration::from_secs(5)).await;
//! // wait up to 5 s in the queue, lease 30 s, need at least 2 s of work time
//! if let Some(ticket) = broker
//!     .acquire("seat-17", Duration::from_secs(5), Duration::from_secs(30), Duration::from_secs(2))
//!     .await?
//! {
//!     // In ONE database transaction with the business write:
//!     //   UPDATE fence SET high_water = :token WHERE key = :key AND high_water < :token
//!     let _token = ticket.token();
//!     ticket.release().await?;
//! }
//! broker.close().await;
//! # Ok(())
//! # }
//! ```
//!
//! Behaviour in one paragraph: one persistent connection per configured
//! address (two when there is only one), leader first, requests pipelined and
//! matched by id; an acquire whose bytes may have been written and that got
//! no definite answer fails with [`Error::Indeterminate`] and is never
//! resent; a grant becomes a [`Ticket`] only if its conservative remaining
//! time covers the work budget; releases go through a bounded lane with an
//! absolute 5 s deadline. Dropping an acquire future cancels it; dropping a
//! ticket releases it best-effort. See `docs/client.md` for the details.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod counted;
mod driver;
mod error;
mod runtime;
mod ticket;
mod tls;
mod transport;

pub use error::{ArgumentError, Error, Result, TlsError, TlsFile};
pub use runtime::runtime;
pub use ticket::Ticket;
pub use ticketing_proto::broker::ConfigError;
pub use ticketing_proto::params::ParamError;
pub use tls::Tls;
use transport::Dial;
pub use transport::{BoxFuture, Connect, Stream};

use driver::{AcquireReq, Cmd};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ticketing_proto::broker::{Broker, BrokerConfig, Grant};
use ticketing_proto::lane::Purpose;
use ticketing_proto::params;
use tokio::sync::{mpsc, oneshot};

/// Far enough in the future for "no deadline" without overflowing `Instant`.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d).unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// The command channel to the driver of the current process.
struct Link {
    pid: u32,
    tx: Option<mpsc::Sender<Cmd>>,
}

impl Drop for Link {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // The parent's channel after a fork: never touch it here.
            if let Some(tx) = self.tx.take() {
                std::mem::forget(tx);
            }
        }
    }
}

struct Shared {
    config: BrokerConfig,
    dial: Dial,
    /// The driver runs on the runtime `build` was called on, not the library's own.
    here: bool,
    link: Mutex<Link>,
    closed: AtomicBool,
    next_cid: AtomicU64,
}

impl Shared {
    fn spawn_driver(config: &BrokerConfig, dial: &Dial, here: bool) -> Result<mpsc::Sender<Cmd>> {
        let broker = Broker::new(
            crate::driver::now(),
            config.clone(),
            Box::new(ticketing_proto::entropy::ThreadOr(rand_core::OsRng)),
        )?;
        let (tx, rx) = mpsc::channel(driver::COMMAND_QUEUE);
        let runtime = if here { tokio::runtime::Handle::current() } else { runtime::io_runtime() };
        runtime.spawn(driver::run(broker, dial.clone(), rx));
        Ok(tx)
    }

    /// The driver's channel; in a forked child, a fresh driver (new runtime,
    /// new connections) is started on first use.
    fn sender(&self) -> Result<mpsc::Sender<Cmd>> {
        let pid = std::process::id();
        let mut link = self.link.lock().unwrap_or_else(|p| p.into_inner());
        if link.pid != pid {
            let fresh = Self::spawn_driver(&self.config, &self.dial, self.here)?;
            if let Some(old) = link.tx.replace(fresh) {
                std::mem::forget(old);
            }
            link.pid = pid;
        }
        link.tx.clone().ok_or(Error::Closed)
    }

    /// The driver's channel if it belongs to this process (never starts one).
    fn sender_here(&self) -> Option<mpsc::Sender<Cmd>> {
        let link = self.link.lock().unwrap_or_else(|p| p.into_inner());
        if link.pid == std::process::id() {
            link.tx.clone()
        } else {
            None
        }
    }

    /// Sends a command, waiting while the driver's queue is full (back-pressure).
    async fn send(&self, cmd: Cmd) -> Result<()> {
        self.sender()?.send(cmd).await.map_err(|_| Error::Closed)
    }
}

/// Sends a command from a `Drop` (which cannot wait): when the driver's
/// queue is full, a task on the client runtime waits for room, so the
/// command (a cancel or a best-effort release) is never lost.
fn send_from_drop(tx: mpsc::Sender<Cmd>, cmd: Cmd) {
    match tx.try_send(cmd) {
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        Err(mpsc::error::TrySendError::Full(cmd)) => {
            runtime().spawn(async move {
                let _ = tx.send(cmd).await;
            });
        }
    }
}

/// A connection pool to a Ticketing server or cluster. Cheap to clone; all
/// clones share one driver task. Create one at application start and share it.
#[derive(Clone)]
pub struct TicketBroker {
    shared: Arc<Shared>,
}

impl fmt::Debug for TicketBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketBroker")
            .field("addrs", &self.shared.config.addrs)
            .field("tls", &matches!(self.shared.dial, Dial::Tcp(Some(_))))
            .field("closed", &self.shared.closed.load(Ordering::Relaxed))
            .finish()
    }
}

/// Options of a [`TicketBroker`].
#[derive(Debug, Clone)]
pub struct Builder {
    addrs: Vec<String>,
    /// `Debug` prints it redacted.
    token: ticketing_proto::auth::Secret,
    tls: Tls,
    tls_client_cert: Option<PathBuf>,
    tls_client_key: Option<PathBuf>,
    connector: Option<Arc<dyn Connect>>,
    here: bool,
}

impl Builder {
    /// The connections dial through `net` instead of TCP (and without TLS):
    /// a simulated network in a simulation of the cluster. `build` then
    /// starts the broker's tasks on the tokio runtime it is called on (the
    /// simulated host's), not on the library's own.
    pub fn connector(mut self, net: Arc<dyn Connect>) -> Builder {
        self.connector = Some(net);
        self.here = true;
        self
    }

    /// The shared client token (default: none, i.e. the empty token). It never crosses the network.
    pub fn token(mut self, token: impl Into<String>) -> Builder {
        self.token = ticketing_proto::auth::Secret::from(token.into());
        self
    }

    /// TLS mode (default [`Tls::Off`]).
    pub fn tls(mut self, tls: Tls) -> Builder {
        self.tls = tls;
        self
    }

    /// A client certificate chain (PEM file) to present to a server that
    /// requires one (`--tls-client-ca`); needs [`Builder::tls_client_key`]
    /// and a TLS mode other than [`Tls::Off`] (else `build` fails with
    /// [`Error::InvalidArgument`]).
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>) -> Builder {
        self.tls_client_cert = Some(cert.into());
        self
    }

    /// The private key (PEM file) of [`Builder::tls_client_cert`].
    pub fn tls_client_key(mut self, key: impl Into<PathBuf>) -> Builder {
        self.tls_client_key = Some(key.into());
        self
    }

    /// The options a language binding passes through, each optional: a
    /// token, a client certificate and its key (`None` leaves that option
    /// as it is).
    pub fn with_optional(
        mut self,
        token: Option<String>,
        tls_client_cert: Option<impl Into<PathBuf>>,
        tls_client_key: Option<impl Into<PathBuf>>,
    ) -> Builder {
        if let Some(token) = token {
            self = self.token(token);
        }
        if let Some(cert) = tls_client_cert {
            self = self.tls_client_cert(cert);
        }
        if let Some(key) = tls_client_key {
            self = self.tls_client_key(key);
        }
        self
    }

    /// Validates the options and starts the driver on the process-wide
    /// runtime (connections start at once; this does not wait for them).
    /// Works from inside or outside any tokio runtime.
    pub fn build(self) -> Result<TicketBroker> {
        let config = BrokerConfig::new(self.addrs, self.token.expose());
        config.validate()?;
        let client_cert = match (self.tls_client_cert, self.tls_client_key) {
            (Some(cert), Some(key)) => Some(tls::ClientCert { cert, key }),
            (None, None) => None,
            _ => return Err(TlsError::CertWithoutKey.into()),
        };
        let tls = tls::client_config(&self.tls, client_cert.as_ref())?;
        if tls.is_some() {
            for a in &config.addrs {
                tls::server_name(a)?;
            }
        }
        let dial = match self.connector {
            Some(net) => Dial::Other(net),
            None => Dial::Tcp(tls),
        };
        let tx = Shared::spawn_driver(&config, &dial, self.here)?;
        let shared = Shared {
            config,
            dial,
            here: self.here,
            link: Mutex::new(Link { pid: std::process::id(), tx: Some(tx) }),
            closed: AtomicBool::new(false),
            next_cid: AtomicU64::new(1),
        };
        Ok(TicketBroker { shared: Arc::new(shared) })
    }

    /// [`Builder::build`], then waits as [`TicketBroker::connect`] does: until
    /// a request could be routed, or every first connection attempt has
    /// settled (at most the 5 s handshake limit), whichever comes first.
    pub async fn connect(self) -> Result<TicketBroker> {
        let broker = self.build()?;
        broker.first_usable().await;
        Ok(broker)
    }
}

/// The addresses of `addrs` as a list: every item split at its commas,
/// each part trimmed, empty parts dropped, so `["a:1,b:2", "c:3"]`,
/// `["a:1", "b:2", "c:3"]` and `["a:1, b:2,c:3,"]` are the same three
/// addresses (an address has no comma in it). What each language's
/// `connect` and broker constructor do with one string or a list.
pub fn addr_list<I, S>(addrs: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    addrs
        .into_iter()
        .flat_map(|a| {
            a.into().split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect::<Vec<_>>()
        })
        .collect()
}

/// Cancels an acquire whose future is dropped (docs/client.md, Acquire step 7).
struct CancelGuard {
    shared: Arc<Shared>,
    cid: u64,
    rx: Option<oneshot::Receiver<std::result::Result<Option<Grant>, ticketing_proto::broker::Failure>>>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        rx.close();
        let Some(tx) = self.shared.sender_here() else { return };
        match rx.try_recv() {
            // Granted, but the caller is gone: the lane releases it.
            Ok(Ok(Some(grant))) => send_from_drop(tx, Cmd::Abandon { grant, purpose: Purpose::Compensation }),
            Ok(_) => {}
            Err(_) => send_from_drop(tx, Cmd::Cancel { cid: self.cid }),
        }
    }
}

impl TicketBroker {
    /// A broker for one address, or several as one comma-separated string
    /// (`"10.0.0.1:5225,10.0.0.2:5225"`, as `TICKETING_ADDR` and the CLI take
    /// them; two connections to each). Resolves as soon as
    /// a request could be routed (what [`TicketBroker::wait_ready`] waits
    /// for), or once every first connection attempt has settled — refused,
    /// auth failure, or the 5 s handshake limit — whichever comes first, and
    /// returns the broker either way: a dead connection never breaks the
    /// broker, it keeps reconnecting with backoff. Only a bad address is an
    /// error ([`Error::InvalidArgument`]).
    pub async fn connect(addr: &str) -> Result<TicketBroker> {
        TicketBroker::builder([addr]).connect().await
    }

    /// The addresses this broker connects to, as [`TicketBroker::builder`]
    /// took them apart.
    pub fn addrs(&self) -> &[String] {
        &self.shared.config.addrs
    }

    /// A snapshot of the pool: whether a request could be routed now, the
    /// leader hint, and whether authentication is what failed. `None` once
    /// the broker is closed.
    pub async fn status(&self) -> Option<Status> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return None;
        }
        let (reply, rx) = oneshot::channel();
        self.shared.send(Cmd::Status { reply }).await.ok()?;
        rx.await.ok()
    }

    /// Waits until a request could be routed, or every connection's first
    /// attempt since the broker was built has settled (at most about 5 s, the
    /// handshake limit), whichever comes first.
    async fn first_usable(&self) {
        let (reply, rx) = oneshot::channel();
        if self.shared.send(Cmd::WaitUsable { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }

    /// A builder for several addresses (`host:port`; also the leader-hint
    /// allowlist). Each item may itself be a comma-separated list, as
    /// `TICKETING_ADDR` is ([`addr_list`]).
    pub fn builder<I, S>(addrs: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Builder {
            addrs: addr_list(addrs),
            token: Default::default(),
            tls: Tls::Off,
            tls_client_cert: None,
            tls_client_key: None,
            connector: None,
            here: false,
        }
    }

    /// Waits until a request can be routed (a ready leader connection), at
    /// most `timeout`. False on timeout or when closed.
    pub async fn wait_ready(&self, timeout: Duration) -> bool {
        if self.shared.closed.load(Ordering::SeqCst) {
            return false;
        }
        let (reply, rx) = oneshot::channel();
        let deadline = later(crate::driver::now(), timeout);
        if self.shared.send(Cmd::WaitReady { deadline, reply }).await.is_err() {
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// [`TicketBroker::wait_ready`] with the timeout as `f64` seconds (for
    /// the bindings): NaN, infinite, negative or unrepresentable values are
    /// [`Error::InvalidArgument`].
    pub async fn wait_ready_secs(&self, timeout: f64) -> Result<bool> {
        let timeout = params::timeout("timeout", timeout)?;
        Ok(self.wait_ready(timeout).await)
    }

    /// Acquires `key` (docs/client.md, Acquire). `wait`: at most this long in the server's
    /// queue (0 = one immediate attempt; also the budget for finding a
    /// connection); `lease`: 1–250 s; `budget`: the least work time the
    /// ticket must leave (0–lease). Fractions round up to whole seconds.
    ///
    /// `wait` is a hard bound on finding a connection too: with no routable
    /// connection the acquire fails with [`Error::Unavailable`] once `wait`
    /// has passed, nothing sent. So `wait` 0 right after
    /// [`Builder::build`] (no handshake done yet) fails at once: call
    /// [`TicketBroker::wait_ready`] first, or use [`TicketBroker::connect`].
    ///
    /// `Ok(None)`: not granted within `wait` (`T`). Errors: [`Error::Busy`],
    /// [`Error::Indeterminate`], [`Error::InsufficientTime`],
    /// [`Error::Unavailable`], [`Error::AuthFailed`], [`Error::Closed`],
    /// [`Error::InvalidArgument`]. Dropping the future cancels the acquire.
    pub async fn acquire(
        &self,
        key: &str,
        wait: Duration,
        lease: Duration,
        budget: Duration,
    ) -> Result<Option<Ticket>> {
        self.acquire_secs(key, wait.as_secs_f64(), lease.as_secs_f64(), budget.as_secs_f64()).await
    }

    /// [`TicketBroker::acquire`] with durations as `f64` seconds (for the
    /// bindings): NaN, infinite, negative or out-of-range values are
    /// [`Error::InvalidArgument`] and nothing is sent.
    pub async fn acquire_secs(&self, key: &str, wait: f64, lease: f64, budget: f64) -> Result<Option<Ticket>> {
        let params = params::acquire(key, wait, lease, budget)?;
        self.start(AcquireReq::Exclusive(params)).await
    }

    /// Sends a validated acquire and waits for its result (dropping the
    /// future cancels it, docs/client.md, Acquire step 7).
    async fn start(&self, params: AcquireReq) -> Result<Option<Ticket>> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed);
        }
        let cid = self.shared.next_cid.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = oneshot::channel();
        self.shared.send(Cmd::Acquire { cid, params, reply }).await?;
        let mut guard = CancelGuard { shared: self.shared.clone(), cid, rx: Some(rx) };
        let result = match guard.rx.as_mut() {
            Some(rx) => rx.await,
            None => return Err(Error::Closed),
        };
        guard.rx = None;
        match result {
            Ok(Ok(Some(grant))) => Ok(Some(Ticket::new(self.shared.clone(), grant))),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(f)) => Err(f.into()),
            Err(_) => Err(Error::Closed),
        }
    }

    /// Closes the broker: pending acquires fail with [`Error::Closed`], live
    /// tickets are released best-effort (at most 5 s), then every connection
    /// is dropped. Later calls fail with [`Error::Closed`].
    pub async fn close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        let (reply, rx) = oneshot::channel();
        if self.shared.send(Cmd::Close { reply }).await.is_ok() {
            let _ = rx.await;
        }
    }
}

/// A snapshot of a broker's connection pool ([`TicketBroker::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// A request could be routed now (a ready connection that is not a known follower).
    pub ready: bool,
    /// The leader hint: a configured address (from `OK leader`, `M` or `L`).
    pub leader: Option<String>,
    /// Some connection's last handshake failed authentication.
    pub auth_failed: bool,
    /// Every connection's first attempt since the broker was built has settled.
    pub settled: bool,
    /// The last transport failure (TCP connect or TLS handshake), as
    /// `host:port: error`, e.g. an unknown certificate issuer.
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn public_types_are_send_and_sync() {
        assert_send_sync::<TicketBroker>();
        assert_send_sync::<Ticket>();
        assert_send_sync::<Error>();
    }

    #[test]
    fn a_full_command_queue_pushes_back_and_drops_lose_nothing() {
        let rt = runtime();
        let (tx, mut rx) = mpsc::channel::<Cmd>(1);
        tx.try_send(Cmd::Cancel { cid: 1 }).unwrap();
        let tx2 = tx.clone();
        let waiting = rt.spawn(async move { tx2.send(Cmd::Cancel { cid: 2 }).await.is_ok() });
        // A Drop cannot wait: its command goes to a task that does.
        send_from_drop(tx.clone(), Cmd::Cancel { cid: 3 });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiting.is_finished(), "a full queue makes the sender wait");
        let got = rt.block_on(async {
            let mut got = Vec::new();
            for _ in 0..3 {
                match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                    Ok(Some(Cmd::Cancel { cid })) => got.push(cid),
                    _ => break,
                }
            }
            got
        });
        assert_eq!(got.len(), 3, "every command arrives: {got:?}");
        assert!(got.contains(&1) && got.contains(&2) && got.contains(&3), "{got:?}");
        assert!(rt.block_on(waiting).unwrap());
        drop(rx);
        send_from_drop(tx, Cmd::Cancel { cid: 4 });
    }

    #[test]
    fn an_address_list_is_split_at_commas_and_trimmed() {
        let want = ["a:1", "b:2", "c:3"];
        assert_eq!(addr_list(["a:1,b:2", "c:3"]), want);
        assert_eq!(addr_list(["a:1, b:2,c:3,"]), want);
        assert_eq!(addr_list(want), want);
        assert_eq!(addr_list(["[::1]:5225"]), ["[::1]:5225"]);
        assert!(addr_list([" , "]).is_empty());
        assert_eq!(TicketBroker::builder([","]).build().unwrap_err().code(), "invalid_argument");
    }

    #[test]
    fn the_token_is_redacted_in_debug() {
        let b = TicketBroker::builder(["127.0.0.1:1"]).token("s3cr3t-client-token");
        let text = format!("{b:?}");
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("redacted"), "{text}");
    }

    #[test]
    fn bad_arguments_are_invalid_argument() {
        assert_eq!(TicketBroker::builder(Vec::<String>::new()).build().unwrap_err().code(), "invalid_argument");
        assert_eq!(TicketBroker::builder(["no-port"]).build().unwrap_err().code(), "invalid_argument");
        let e = TicketBroker::builder(["no-port"]).build().unwrap_err();
        assert_eq!(e, ConfigError::AddressPort { addr: "no-port".into() }.into());
        let cause = std::error::Error::source(&e).expect("a cause");
        assert_eq!(cause.to_string(), r#"address "no-port" must be host:port with a port in 1-65535"#);
        let e = TicketBroker::builder(["127.0.0.1:1"]).tls_client_cert("c.pem").build().unwrap_err();
        assert_eq!(e, TlsError::CertWithoutKey.into());
        let b = TicketBroker::builder(["127.0.0.1:1"]).build().unwrap();
        let e = runtime().block_on(b.acquire_secs("k", f64::NAN, 1.0, 0.0)).unwrap_err();
        assert_eq!(e.code(), "invalid_argument");
        let e = runtime().block_on(b.acquire_secs("bad key", 0.0, 1.0, 0.0)).unwrap_err();
        assert_eq!(e, ParamError::Key { key: "bad key".into() }.into());
        let e = runtime().block_on(b.acquire_secs("k", 0.0, 1.0, 2.0)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)));
        runtime().block_on(b.close());
        assert_eq!(runtime().block_on(b.acquire_secs("k", 0.0, 1.0, 0.0)).unwrap_err(), Error::Closed);
        assert!(!runtime().block_on(b.wait_ready(Duration::from_millis(10))));
    }
}
