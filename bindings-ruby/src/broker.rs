//! `Ticketing::TicketBroker` (native part), wrapping
//! `ticketing_client::TicketBroker`. Every method converts its arguments,
//! calls the client and maps the error; blocking calls go through
//! `gvl::block_on` (GVL released, interruptible).
#![forbid(unsafe_code)]

use std::time::Duration;

use magnus::{Error, Ruby, Value};
use ticketing_client::{TicketBroker, Tls};

use crate::error::{key, secs, to_rb};
use crate::gvl;
use crate::ticket::Ticket;

/// Connection pool and router; one instance is shared by every Ruby thread
/// (all methods take `&self`, the client is `Send + Sync`).
#[magnus::wrap(class = "Ticketing::TicketBroker", free_immediately, size)]
pub(crate) struct Broker {
    inner: TicketBroker,
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

    /// `_connect(addr)`: one address; returns once a request could be
    /// routed or the first connection attempts have settled.
    pub(crate) fn connect(ruby: &Ruby, addr: String) -> Result<Self, Error> {
        let inner = gvl::block_on(ruby, async move { TicketBroker::connect(&addr).await })?;
        Ok(Broker { inner: inner.map_err(|e| to_rb(ruby, e))? })
    }

    /// `_wait_ready(seconds)` → true/false.
    pub(crate) fn wait_ready(ruby: &Ruby, rb_self: &Self, seconds: Value) -> Result<bool, Error> {
        let s = secs(ruby, "seconds", seconds)?;
        let timeout = Duration::try_from_secs_f64(s)
            .map_err(|e| Error::new(ruby.exception_arg_error(), format!("seconds: {e} (got {s})")))?;
        let inner = rb_self.inner.clone();
        gvl::block_on(ruby, async move { inner.wait_ready(timeout).await })
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
        let (wait, lease, budget) =
            (secs(ruby, "wait", wait)?, secs(ruby, "lease", lease)?, secs(ruby, "budget", budget)?);
        let inner = rb_self.inner.clone();
        let got = gvl::block_on(ruby, async move { inner.acquire_secs(&key, wait, lease, budget).await })?;
        Ok(got.map_err(|e| to_rb(ruby, e))?.map(Ticket::new))
    }

    /// `_close`: best-effort releases of live tickets, then the connections
    /// close. Idempotent.
    pub(crate) fn close(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        let inner = rb_self.inner.clone();
        gvl::block_on(ruby, async move { inner.close().await })
    }
}
