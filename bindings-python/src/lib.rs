//! Python binding of the Ticketing client: the native module
//! `ticketing._native`, wrapped by the pure-Python package `ticketing`
//! (sync API, context managers) and `ticketing.aio` (asyncio).
//!
//! Every method converts types, calls `ticketing_client` and maps its
//! errors; no rule of docs/client.md lives here.
#![forbid(unsafe_code)]

mod bridge;
mod broker;
mod error;
mod ticket;

use pyo3::prelude::*;

/// The native module. Use the public package `ticketing` instead.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<broker::Broker>()?;
    m.add_class::<ticket::Ticket>()?;
    m.add_class::<bridge::Pending>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let close_gate = wrap_pyfunction!(bridge::_close_gate, m)?;
    m.add_function(close_gate.clone())?;
    m.py().import("atexit")?.call_method1("register", (close_gate,))?;
    Ok(())
}
