//! `Broker`: the native side of `ticketing.TicketBroker` and
//! `ticketing.aio.TicketBroker`, wrapping `ticketing_client::TicketBroker`.
//!
//! Every method converts its arguments, calls the client and maps the
//! error; sync methods block with the GIL released (`bridge::block_on`),
//! `*_start` methods run the same client call for asyncio
//! (`bridge::start`).

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use ticketing_client::{TicketBroker, Tls};

use crate::bridge::{self, Pending};
use crate::error::{secs, to_pyerr};
use crate::ticket::Ticket;

/// Connection pool and router to a Ticketing service (one server or a 3/5
/// node cluster). Cheap to share between threads; all clones of one broker
/// share one driver on the client's background runtime.
#[pyclass(frozen, module = "ticketing._native")]
pub struct Broker {
    inner: TicketBroker,
}

/// The durations of an acquire as the client's `*_secs` methods take them.
struct Times {
    wait: f64,
    lease: f64,
    budget: f64,
}

impl Times {
    fn new(wait: &Bound<'_, PyAny>, lease: &Bound<'_, PyAny>, budget: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Times { wait: secs("wait", wait)?, lease: secs("lease", lease)?, budget: secs("budget", budget)? })
    }
}

/// The acquire arguments of one key as the client's `acquire_secs` takes them.
struct AcquireArgs {
    key: String,
    wait: f64,
    lease: f64,
    budget: f64,
}

impl AcquireArgs {
    fn new(
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let Times { wait, lease, budget } = Times::new(wait, lease, budget)?;
        Ok(AcquireArgs { key, wait, lease, budget })
    }
}

/// A permit count as the client's `acquire_shared_secs` takes it: any
/// Python int; one beyond 64 bits is a `ValueError` (out of range, as the
/// client reports 0 or 65536), a non-int a `TypeError`.
fn permits(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    value.extract::<i64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(value.py()) {
            PyValueError::new_err(format!("n must be 1-65535 permits (got {value})"))
        } else {
            e
        }
    })
}

/// The keys of a multi-key acquire: a list of str (the Python layer turns
/// any iterable of str into one and refuses a bare str).
fn key_list(value: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if value.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err("keys must be a sequence of str, not one str"));
    }
    value.extract::<Vec<String>>()
}

fn ticket_or_none(py: Python<'_>, ticket: Option<ticketing_client::Ticket>) -> PyResult<Py<PyAny>> {
    match ticket {
        Some(t) => Ok(Py::new(py, Ticket::new(t))?.into_any()),
        None => Ok(py.None()),
    }
}

fn py_bool(py: Python<'_>, value: bool) -> PyResult<Py<PyAny>> {
    Ok(pyo3::types::PyBool::new(py, value).to_owned().into_any().unbind())
}

#[pymethods]
impl Broker {
    /// A broker for the given addresses (``host:port``; all members of a
    /// cluster), with an optional client token and a TLS mode: ``"off"``
    /// (default), ``"system-roots"``, a path to a CA file, or
    /// ``"insecure-skip-verify"`` (tests only), and a client certificate and
    /// key (PEM files) for a server that requires one. Does not wait for a
    /// connection; see ``wait_ready``.
    #[new]
    #[pyo3(signature = (addrs, token=None, tls="off", tls_client_cert=None, tls_client_key=None))]
    fn new(
        py: Python<'_>,
        addrs: Vec<String>,
        token: Option<String>,
        tls: &str,
        tls_client_cert: Option<std::path::PathBuf>,
        tls_client_key: Option<std::path::PathBuf>,
    ) -> PyResult<Self> {
        let tls: Tls = tls.parse().map_err(to_pyerr)?;
        let inner = py.detach(move || {
            let builder = TicketBroker::builder(addrs).tls(tls).with_optional(token, tls_client_cert, tls_client_key);
            builder.build()
        });
        Ok(Broker { inner: inner.map_err(to_pyerr)? })
    }

    /// A broker for ``addrs`` (each may hold several, comma-separated; the
    /// client opens two connections to each address).
    #[staticmethod]
    fn connect(py: Python<'_>, addrs: Vec<String>) -> PyResult<Self> {
        let inner =
            bridge::block_on(py, async move { TicketBroker::builder(addrs).connect().await })?.map_err(to_pyerr)?;
        Ok(Broker { inner })
    }

    /// asyncio form of ``connect``.
    #[staticmethod]
    fn connect_start(addrs: Vec<String>, done: Py<PyAny>) -> Pending {
        bridge::start(async move { TicketBroker::builder(addrs).connect().await }, done, |py, inner| {
            Ok(Py::new(py, Broker { inner })?.into_any())
        })
    }

    /// Waits up to ``timeout`` seconds for a ready connection (the leader
    /// preferred); True when there is one.
    fn wait_ready(&self, py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<bool> {
        let timeout = secs("timeout", timeout)?;
        let inner = self.inner.clone();
        bridge::block_on(py, async move { inner.wait_ready_secs(timeout).await })?.map_err(to_pyerr)
    }

    /// asyncio form of ``wait_ready``.
    fn wait_ready_start(&self, timeout: &Bound<'_, PyAny>, done: Py<PyAny>) -> PyResult<Pending> {
        let timeout = secs("timeout", timeout)?;
        let inner = self.inner.clone();
        Ok(bridge::start(async move { inner.wait_ready_secs(timeout).await }, done, py_bool))
    }

    /// Acquires ``key``: a Ticket, or None when the lock was not granted
    /// within ``wait`` seconds. ``lease`` is the lock's lifetime, ``budget``
    /// the least time the caller needs once granted. Fractions round up to
    /// whole seconds; bad values raise ValueError and nothing is sent.
    fn acquire(
        &self,
        py: Python<'_>,
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Ticket>> {
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        let got = bridge::block_on(py, async move { inner.acquire_secs(&a.key, a.wait, a.lease, a.budget).await })?;
        Ok(got.map_err(to_pyerr)?.map(Ticket::new))
    }

    /// asyncio form of ``acquire``; ``Pending.cancel()`` cancels it.
    fn acquire_start(
        &self,
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        Ok(bridge::start(
            async move { inner.acquire_secs(&a.key, a.wait, a.lease, a.budget).await },
            done,
            ticket_or_none,
        ))
    }

    /// Acquires one of ``n`` counted permits of ``key`` (a semaphore):
    /// a Ticket whose ``slot`` is its permit index in ``0..n``, or None when
    /// not granted within ``wait`` seconds. ``n`` is 1-65535; bad values
    /// raise ValueError and nothing is sent.
    fn acquire_shared(
        &self,
        py: Python<'_>,
        key: String,
        n: &Bound<'_, PyAny>,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Ticket>> {
        let n = permits(n)?;
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        let got =
            bridge::block_on(py, async move { inner.acquire_shared_secs(&a.key, n, a.wait, a.lease, a.budget).await })?;
        Ok(got.map_err(to_pyerr)?.map(Ticket::new))
    }

    /// asyncio form of ``acquire_shared``; ``Pending.cancel()`` cancels it.
    #[allow(clippy::too_many_arguments)]
    fn acquire_shared_start(
        &self,
        key: String,
        n: &Bound<'_, PyAny>,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let n = permits(n)?;
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        Ok(bridge::start(
            async move { inner.acquire_shared_secs(&a.key, n, a.wait, a.lease, a.budget).await },
            done,
            ticket_or_none,
        ))
    }

    /// Acquires every key of ``keys`` (2-16 distinct keys) exclusively and
    /// atomically: one Ticket with one token for all of them, or None when
    /// not granted within ``wait`` seconds. Bad keys raise ValueError and
    /// nothing is sent.
    fn acquire_all(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Ticket>> {
        let keys = key_list(keys)?;
        let a = Times::new(wait, lease, budget)?;
        let inner = self.inner.clone();
        let got = bridge::block_on(py, async move { inner.acquire_all_secs(&keys, a.wait, a.lease, a.budget).await })?;
        Ok(got.map_err(to_pyerr)?.map(Ticket::new))
    }

    /// asyncio form of ``acquire_all``; ``Pending.cancel()`` cancels it.
    fn acquire_all_start(
        &self,
        keys: &Bound<'_, PyAny>,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let keys = key_list(keys)?;
        let a = Times::new(wait, lease, budget)?;
        let inner = self.inner.clone();
        Ok(bridge::start(
            async move { inner.acquire_all_secs(&keys, a.wait, a.lease, a.budget).await },
            done,
            ticket_or_none,
        ))
    }

    /// Acquires the shared (read) side of the read/write lock ``key``: a
    /// Ticket, or None when not granted within ``wait`` seconds. Readers
    /// share the key; a writer (``write_lock``) excludes them.
    fn read_lock(
        &self,
        py: Python<'_>,
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Ticket>> {
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        let got = bridge::block_on(py, async move { inner.read_lock_secs(&a.key, a.wait, a.lease, a.budget).await })?;
        Ok(got.map_err(to_pyerr)?.map(Ticket::new))
    }

    /// asyncio form of ``read_lock``; ``Pending.cancel()`` cancels it.
    fn read_lock_start(
        &self,
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        Ok(bridge::start(
            async move { inner.read_lock_secs(&a.key, a.wait, a.lease, a.budget).await },
            done,
            ticket_or_none,
        ))
    }

    /// Acquires the exclusive (write) side of the read/write lock ``key``:
    /// a Ticket, or None when not granted within ``wait`` seconds.
    fn write_lock(
        &self,
        py: Python<'_>,
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Ticket>> {
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        let got = bridge::block_on(py, async move { inner.write_lock_secs(&a.key, a.wait, a.lease, a.budget).await })?;
        Ok(got.map_err(to_pyerr)?.map(Ticket::new))
    }

    /// asyncio form of ``write_lock``; ``Pending.cancel()`` cancels it.
    fn write_lock_start(
        &self,
        key: String,
        wait: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        budget: &Bound<'_, PyAny>,
        done: Py<PyAny>,
    ) -> PyResult<Pending> {
        let a = AcquireArgs::new(key, wait, lease, budget)?;
        let inner = self.inner.clone();
        Ok(bridge::start(
            async move { inner.write_lock_secs(&a.key, a.wait, a.lease, a.budget).await },
            done,
            ticket_or_none,
        ))
    }

    /// Closes the broker: best-effort releases of its live tickets, then
    /// the connections close. Later calls raise ClosedError. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let inner = self.inner.clone();
        bridge::block_on(py, async move { inner.close().await })
    }

    /// asyncio form of ``close``.
    fn close_start(&self, done: Py<PyAny>) -> Pending {
        let inner = self.inner.clone();
        bridge::start(
            async move {
                inner.close().await;
                Ok(())
            },
            done,
            |py, ()| Ok(py.None()),
        )
    }
}
