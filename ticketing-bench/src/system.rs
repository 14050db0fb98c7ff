//! What a workload drives: a lock service behind [`Backend`]. Ticketing is
//! driven through the Rust `ticketing-client`; the peers (feature `peers`)
//! live in `crate::peers`.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ticketing_client::{Error, TicketBroker};

/// A boxed future (the trait is used as `dyn Backend`).
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The outcome of one acquire.
pub enum Acq {
    /// Granted: the fencing token (0 where the system has none) and what release needs.
    Granted(Held),
    /// Not granted within the wait.
    NotGranted,
    /// May or may not have been granted (Ticketing's `Indeterminate`).
    Indeterminate,
    /// Any other failure (its code).
    Failed(String),
}

/// A held lock.
pub struct Held {
    /// Fencing token, or 0.
    pub token: u64,
    /// The slot of a counted grant ([`Backend::acquire_shared`]); `None` otherwise.
    pub slot: Option<u16>,
    /// Backend-specific state.
    pub inner: Box<dyn Any + Send>,
}

/// A lock service as the workloads see it. `client` is the index of the
/// workload's client (backends with per-client sessions use it).
pub trait Backend: Send + Sync {
    /// Acquires `key`, waiting at most `wait` in the queue; `lease` bounds the hold.
    fn acquire<'a>(&'a self, client: usize, key: &'a str, wait: Duration, lease: Duration) -> Fut<'a, Acq>;
    /// Releases a lock from [`Backend::acquire`], [`Backend::acquire_shared`]
    /// or [`Backend::acquire_all`] (every key of it).
    fn release<'a>(&'a self, client: usize, held: Held) -> Fut<'a, Result<(), String>>;
    /// One of `n` permits of `key` (a counted grant: its slot in `0..n` in
    /// [`Held::slot`]). Systems without counted grants answer `Failed`.
    fn acquire_shared<'a>(
        &'a self,
        _client: usize,
        _key: &'a str,
        _n: u16,
        _wait: Duration,
        _lease: Duration,
    ) -> Fut<'a, Acq> {
        Box::pin(async { Acq::Failed("unsupported".to_owned()) })
    }
    /// Every key of `keys` exclusively, atomically (one token). Systems
    /// without multi-key grants answer `Failed`.
    fn acquire_all<'a>(
        &'a self,
        _client: usize,
        _keys: &'a [String],
        _wait: Duration,
        _lease: Duration,
    ) -> Fut<'a, Acq> {
        Box::pin(async { Acq::Failed("unsupported".to_owned()) })
    }
    /// Index (in the order of the node list) of the node that leads now, if known.
    fn leader(&self) -> Fut<'_, Option<usize>> {
        Box::pin(async { None })
    }
    /// Closes connections (end of run).
    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async {})
    }
}

/// Ticketing through one shared [`TicketBroker`] (the documented way: one
/// broker per application, requests pipelined on its connections).
pub struct Ticketing {
    /// The broker.
    pub broker: TicketBroker,
    /// Admin ports of the nodes, in node order (for `leader`).
    pub admin_ports: Vec<u16>,
}

/// The outcome of a Ticketing acquire of any kind (the slot of a counted grant kept).
fn ticket(got: ticketing_client::Result<Option<ticketing_client::Ticket>>) -> Acq {
    match got {
        Ok(Some(t)) => Acq::Granted(Held { token: t.token(), slot: t.slot(), inner: Box::new(t) }),
        Ok(None) => Acq::NotGranted,
        Err(Error::Indeterminate) => Acq::Indeterminate,
        Err(e) => Acq::Failed(e.code().to_owned()),
    }
}

impl Backend for Ticketing {
    fn acquire<'a>(&'a self, _client: usize, key: &'a str, wait: Duration, lease: Duration) -> Fut<'a, Acq> {
        Box::pin(async move { ticket(self.broker.acquire(key, wait, lease, Duration::ZERO).await) })
    }

    fn acquire_shared<'a>(
        &'a self,
        _client: usize,
        key: &'a str,
        n: u16,
        wait: Duration,
        lease: Duration,
    ) -> Fut<'a, Acq> {
        Box::pin(async move { ticket(self.broker.acquire_shared(key, n, wait, lease, Duration::ZERO).await) })
    }

    fn acquire_all<'a>(&'a self, _client: usize, keys: &'a [String], wait: Duration, lease: Duration) -> Fut<'a, Acq> {
        Box::pin(async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            ticket(self.broker.acquire_all(&keys, wait, lease, Duration::ZERO).await)
        })
    }

    fn release<'a>(&'a self, _client: usize, held: Held) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            let t = held.inner.downcast::<ticketing_client::Ticket>().map_err(|_| "not a ticket".to_owned())?;
            match t.release().await {
                Ok(true) => Ok(()),
                Ok(false) => Err("not_held".to_owned()),
                Err(e) => Err(e.code().to_owned()),
            }
        })
    }

    fn leader(&self) -> Fut<'_, Option<usize>> {
        Box::pin(async move {
            for (i, port) in self.admin_ports.iter().enumerate() {
                if let Some(s) = crate::procs::status(*port).await {
                    if s["role"] == "leader" && s["serving"] == true {
                        return Some(i);
                    }
                }
            }
            None
        })
    }

    fn close(&self) -> Fut<'_, ()> {
        Box::pin(async move { self.broker.close().await })
    }
}

/// A deliberately broken lock for the smoke test of the checker
/// (`--system test-grant-all`, hidden): it grants every acquire at once,
/// whoever holds the key, with tokens from one rising counter (and counted
/// grants the slots of a rising counter modulo `n`, whoever holds them). The
/// bench's cross-client check must report its duplicate grants
/// (ticketing-bench/run-smoke.sh asserts it does).
#[derive(Default)]
pub struct GrantAll {
    next: std::sync::atomic::AtomicU64,
}

impl GrantAll {
    async fn grant(&self, slot: Option<u16>) -> Acq {
        // A round trip's worth of scheduling, as a network call has.
        tokio::task::yield_now().await;
        let token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let slot = slot.map(|n| (token % u64::from(n.max(1))) as u16);
        Acq::Granted(Held { token, slot, inner: Box::new(()) })
    }
}

impl Backend for GrantAll {
    fn acquire<'a>(&'a self, _client: usize, _key: &'a str, _wait: Duration, _lease: Duration) -> Fut<'a, Acq> {
        Box::pin(self.grant(None))
    }

    fn acquire_shared<'a>(
        &'a self,
        _client: usize,
        _key: &'a str,
        n: u16,
        _wait: Duration,
        _lease: Duration,
    ) -> Fut<'a, Acq> {
        Box::pin(self.grant(Some(n)))
    }

    fn acquire_all<'a>(
        &'a self,
        _client: usize,
        _keys: &'a [String],
        _wait: Duration,
        _lease: Duration,
    ) -> Fut<'a, Acq> {
        Box::pin(self.grant(None))
    }

    fn release<'a>(&'a self, _client: usize, _held: Held) -> Fut<'a, Result<(), String>> {
        Box::pin(async {
            tokio::task::yield_now().await;
            Ok(())
        })
    }
}

/// A deliberately deadlock-prone multi-key lock for the smoke test of W6's
/// stall detector (`--system test-multilock`, hidden): in-process FIFO
/// mutexes, one per key, and a multi-key acquire that takes them one at a
/// time in the order given (as Redisson's `MultiLock` does), giving up when
/// `wait` has passed. With baskets in random key order two clients end up
/// each holding a key the other waits for, and the clients behind them
/// queue on their keys: no grant for a long window while requests wait.
#[derive(Default)]
pub struct MultiLock {
    keys: std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    next: std::sync::atomic::AtomicU64,
}

impl MultiLock {
    fn mutex(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        m.entry(key.to_owned()).or_default().clone()
    }

    async fn lock_in_order(&self, keys: &[String], wait: Duration) -> Acq {
        let mut guards = Vec::with_capacity(keys.len());
        let take = async {
            for k in keys {
                guards.push(self.mutex(k).lock_owned().await);
            }
        };
        if tokio::time::timeout(wait, take).await.is_err() {
            return Acq::NotGranted; // the guards taken so far drop here
        }
        let token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        Acq::Granted(Held { token, slot: None, inner: Box::new(guards) })
    }
}

impl Backend for MultiLock {
    fn acquire<'a>(&'a self, _client: usize, key: &'a str, wait: Duration, _lease: Duration) -> Fut<'a, Acq> {
        Box::pin(async move { self.lock_in_order(&[key.to_owned()], wait).await })
    }

    fn acquire_all<'a>(&'a self, _client: usize, keys: &'a [String], wait: Duration, _lease: Duration) -> Fut<'a, Acq> {
        Box::pin(self.lock_in_order(keys, wait))
    }

    fn release<'a>(&'a self, _client: usize, held: Held) -> Fut<'a, Result<(), String>> {
        Box::pin(async move {
            drop(held);
            Ok(())
        })
    }
}
