//! `Ticket`: a granted lock, wrapping `ticketing_client::Ticket`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bridge::{self, Pending};
use crate::error::to_pyerr;

/// A granted lock: the fencing ``token``, the ``key`` (``keys`` for a
/// multi-key grant), the ``slot`` of a counted grant, the time left of the
/// conservative lease, and ``release()``.
///
/// A ticket that is garbage-collected without ``release()`` is released
/// best-effort in the background (the result is only logged); so is every
/// live ticket when its broker is closed. Tickets stay with the process that
/// acquired them (a forked child cannot release its parent's tickets).
#[pyclass(frozen, module = "ticketing._native")]
pub struct Ticket {
    inner: Arc<ticketing_client::Ticket>,
}

impl Ticket {
    pub(crate) fn new(inner: ticketing_client::Ticket) -> Self {
        Ticket { inner: Arc::new(inner) }
    }
}

#[pymethods]
impl Ticket {
    /// The fencing token of this grant: ``1 <= token < 2**63``, strictly
    /// increasing over all grants of the lock service. Store it with your
    /// write and refuse writes carrying a lower token.
    #[getter]
    fn token(&self) -> u64 {
        self.inner.token()
    }

    /// The key this ticket holds.
    #[getter]
    fn key(&self) -> &str {
        self.inner.key()
    }

    /// Every key this ticket holds, in the order they were asked for: one
    /// for ``acquire`` and ``acquire_shared``, all of them for
    /// ``acquire_all`` (``key`` is the first).
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.keys())
    }

    /// The permit index of a counted grant (``acquire_shared``,
    /// ``read_lock``): the lowest index in ``0..n`` no other holder of the
    /// key had when it was granted, so a resource can be fenced per
    /// (key, slot). None for an exclusive grant.
    #[getter]
    fn slot(&self) -> Option<u16> {
        self.inner.slot()
    }

    /// Seconds left until the conservative deadline of the lease (never
    /// negative). Work still running after it is no longer protected by the
    /// lock, only by the database fence.
    fn remaining(&self) -> f64 {
        self.inner.remaining().as_secs_f64()
    }

    /// True once the conservative deadline has passed (``remaining() == 0``).
    #[getter]
    fn expired(&self) -> bool {
        self.inner.is_expired()
    }

    /// Releases exactly this grant (every key of a multi-key grant).
    /// Returns ``True`` when released, ``False`` when this ticket no longer
    /// held the lock (expired, or released before; for several keys: any
    /// of them). Raises ``ReleaseUnconfirmedError`` without a final
    /// answer within 5 s. A second call returns the first definite result.
    /// Blocks with the GIL released.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        let inner = Arc::clone(&self.inner);
        bridge::block_on(py, async move { inner.release().await })?.map_err(to_pyerr)
    }

    /// asyncio form of ``release()``: starts it and calls
    /// ``done(ok, value)`` from a client thread when it finishes.
    fn release_start(&self, done: Py<PyAny>) -> Pending {
        let inner = Arc::clone(&self.inner);
        bridge::start(async move { inner.release().await }, done, |py, released| {
            Ok(pyo3::types::PyBool::new(py, released).to_owned().into_any().unbind())
        })
    }

    fn __repr__(&self) -> String {
        let keys = self.inner.keys();
        let what = match keys {
            [one] => format!("key={one:?}"),
            many => format!("keys={many:?}"),
        };
        let slot = self.inner.slot().map(|s| format!(", slot={s}")).unwrap_or_default();
        format!(
            "Ticket({what}, token={}{slot}, remaining={:.3})",
            self.inner.token(),
            self.inner.remaining().as_secs_f64()
        )
    }
}
