//! `Ticketing::TicketBroker` (native part), wrapping
//! `ticketing_client::TicketBroker`. Every method converts its arguments,
//! calls the client and maps the error; blocking calls go through
//! `gvl::block_on` (GVL released, interruptible).
#![forbid(unsafe_code)]

use magnus::{Error, Ruby, Value};
use ticketing_client::{TicketBroker, Tls};

use crate::error::{key, keys, permits, secs, to_rb};
use crate::gvl;
use crate::ticket::Ticket;

/// Connection pool and router; one instance is shared by every Ruby thread
/// (all methods take `&self`, the client is `Send + Sync`).
#[magnus::wrap(class = "Ticketing::TicketBroker", free_immediately, size)]
pub(crate) struct Broker {
    inner: TicketBroker,
}

/// The durations of an acquire (seconds) as the client's `*_secs` methods
/// take them.
fn times(ruby: &Ruby, wait: Value, lease: Value, budget: Value) -> Result<(f64, f64, f64), Error> {
    Ok((secs(ruby, "wait", wait)?, secs(ruby, "lease", lease)?, secs(ruby, "budget", budget)?))
}

impl Broker {
    /// `_build(addrs, token, tls, tls_client_cert, tls_client_key)`:
    /// validates the options and starts the driver; does not wait for a
    /// connection.
    pub(crate) fn build(
        ruby: &Ruby,
        addrs: Vec<String>,
        token: Option<String>,
        tls: String,
        tls_client_cert: Option<String>,
        tls_client_key: Option<String>,
    ) -> Result<Self, Error> {
        let tls: Tls = tls.parse().map_err(|e| to_rb(ruby, e))?;
        let builder = TicketBroker::builder(addrs).tls(tls).with_optional(token, tls_client_cert, tls_client_key);
        Ok(Broker { inner: builder.build().map_err(|e| to_rb(ruby, e))? })
    }

    /// `_connect(addrs)`: returns once a request could be routed or the
    /// first connection attempts have settled.
    pub(crate) fn connect(ruby: &Ruby, addrs: Vec<String>) -> Result<Self, Error> {
        let inner = gvl::block_on(ruby, async move { TicketBroker::builder(addrs).connect().await })?;
        Ok(Broker { inner: inner.map_err(|e| to_rb(ruby, e))? })
    }

    /// `_addrs` → the addresses, each comma-separated item taken apart.
    pub(crate) fn addrs(&self) -> Vec<String> {
        self.inner.addrs().to_vec()
    }

    /// `_wait_ready(seconds)` → true/false.
    pub(crate) fn wait_ready(ruby: &Ruby, rb_self: &Self, seconds: Value) -> Result<bool, Error> {
        let timeout = secs(ruby, "seconds", seconds)?;
        let inner = rb_self.inner.clone();
        gvl::block_on(ruby, async move { inner.wait_ready_secs(timeout).await })?.map_err(|e| to_rb(ruby, e))
    }

    /// `_acquire(key, wait, lease, budget)` → Ticket or nil. The client
    /// normalizes (fractions round up) and validates before sending.
    pub(crate) fn acquire(
        ruby: &Ruby,
        rb_self: &Self,
        key_v: Value,
        wait: Value,
        lease: Value,
        budget: Value,
    ) -> Result<Option<Ticket>, Error> {
        let key = key(ruby, key_v)?;
        let (wait, lease, budget) = times(ruby, wait, lease, budget)?;
        let inner = rb_self.inner.clone();
        let got = gvl::block_on(ruby, async move { inner.acquire_secs(&key, wait, lease, budget).await })?;
        Ok(got.map_err(|e| to_rb(ruby, e))?.map(Ticket::new))
    }

    /// `_acquire_shared(key, n, wait, lease, budget)` → Ticket or nil: one
    /// of `n` counted permits; the client checks `n` (1–65535).
    pub(crate) fn acquire_shared(
        ruby: &Ruby,
        rb_self: &Self,
        key_v: Value,
        n: Value,
        wait: Value,
        lease: Value,
        budget: Value,
    ) -> Result<Option<Ticket>, Error> {
        let key = key(ruby, key_v)?;
        let n = permits(ruby, n)?;
        let (wait, lease, budget) = times(ruby, wait, lease, budget)?;
        let inner = rb_self.inner.clone();
        let got = gvl::block_on(ruby, async move { inner.acquire_shared_secs(&key, n, wait, lease, budget).await })?;
        Ok(got.map_err(|e| to_rb(ruby, e))?.map(Ticket::new))
    }

    /// `_acquire_all(keys, wait, lease, budget)` → Ticket or nil: every key
    /// at once, one token; the client checks the keys (2–16, distinct).
    pub(crate) fn acquire_all(
        ruby: &Ruby,
        rb_self: &Self,
        keys_v: Value,
        wait: Value,
        lease: Value,
        budget: Value,
    ) -> Result<Option<Ticket>, Error> {
        let keys = keys(ruby, keys_v)?;
        let (wait, lease, budget) = times(ruby, wait, lease, budget)?;
        let inner = rb_self.inner.clone();
        let got = gvl::block_on(ruby, async move { inner.acquire_all_secs(&keys, wait, lease, budget).await })?;
        Ok(got.map_err(|e| to_rb(ruby, e))?.map(Ticket::new))
    }

    /// `_read_lock(key, wait, lease, budget)` → Ticket or nil: the shared
    /// side of a read/write lock.
    pub(crate) fn read_lock(
        ruby: &Ruby,
        rb_self: &Self,
        key_v: Value,
        wait: Value,
        lease: Value,
        budget: Value,
    ) -> Result<Option<Ticket>, Error> {
        let key = key(ruby, key_v)?;
        let (wait, lease, budget) = times(ruby, wait, lease, budget)?;
        let inner = rb_self.inner.clone();
        let got = gvl::block_on(ruby, async move { inner.read_lock_secs(&key, wait, lease, budget).await })?;
        Ok(got.map_err(|e| to_rb(ruby, e))?.map(Ticket::new))
    }

    /// `_write_lock(key, wait, lease, budget)` → Ticket or nil: the
    /// exclusive side of a read/write lock.
    pub(crate) fn write_lock(
        ruby: &Ruby,
        rb_self: &Self,
        key_v: Value,
        wait: Value,
        lease: Value,
        budget: Value,
    ) -> Result<Option<Ticket>, Error> {
        let key = key(ruby, key_v)?;
        let (wait, lease, budget) = times(ruby, wait, lease, budget)?;
        let inner = rb_self.inner.clone();
        let got = gvl::block_on(ruby, async move { inner.write_lock_secs(&key, wait, lease, budget).await })?;
        Ok(got.map_err(|e| to_rb(ruby, e))?.map(Ticket::new))
    }

    /// `_close`: best-effort releases of live tickets, then the connections
    /// close. Idempotent.
    pub(crate) fn close(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        let inner = rb_self.inner.clone();
        gvl::block_on(ruby, async move { inner.close().await })
    }
}
