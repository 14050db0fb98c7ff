//! Maps the client's typed `Error` to the Python exception hierarchy.
//!
//! The classes are defined once, in `ticketing/_errors.py`; this module only
//! imports them (lazily, by name) and picks the class for each variant.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use ticketing_client::Error;

pyo3::import_exception!(ticketing._errors, TicketingError);
pyo3::import_exception!(ticketing._errors, BusyError);
pyo3::import_exception!(ticketing._errors, ForbiddenError);
pyo3::import_exception!(ticketing._errors, IndeterminateError);
pyo3::import_exception!(ticketing._errors, InsufficientTimeError);
pyo3::import_exception!(ticketing._errors, UnavailableError);
pyo3::import_exception!(ticketing._errors, ReleaseUnconfirmedError);
pyo3::import_exception!(ticketing._errors, ClosedError);
pyo3::import_exception!(ticketing._errors, AuthFailedError);

/// The Python exception for a client error. `InvalidArgument` becomes
/// `ValueError` (nothing was sent); every other variant its own subclass of
/// `TicketingError`, carrying the client's message.
pub(crate) fn to_pyerr(err: Error) -> PyErr {
    let msg = err.to_string();
    match err {
        Error::InvalidArgument(cause) => PyValueError::new_err(cause.to_string()),
        Error::Busy => BusyError::new_err(msg),
        Error::Forbidden { key } => ForbiddenError::new_err((msg, key)),
        Error::Indeterminate => IndeterminateError::new_err(msg),
        Error::InsufficientTime => InsufficientTimeError::new_err(msg),
        Error::Unavailable => UnavailableError::new_err(msg),
        Error::ReleaseUnconfirmed => ReleaseUnconfirmedError::new_err(msg),
        Error::Closed => ClosedError::new_err(msg),
        Error::AuthFailed => AuthFailedError::new_err(msg),
        // `Error` is non-exhaustive: a variant added later still gets a typed
        // base-class error with the client's code in its message.
        other => TicketingError::new_err(format!("{} ({})", msg, other.code())),
    }
}

/// The client task ended without producing a result (its runtime shut
/// down, or it panicked): reported as the base `TicketingError`.
pub(crate) fn task_lost() -> PyErr {
    TicketingError::new_err("the client task ended without a result (runtime shut down)")
}

/// Converts a Python number of seconds to `f64` for the client. A number too
/// large for a float is a `ValueError` (out of range), like every other
/// out-of-range duration; a non-number stays a `TypeError`.
pub(crate) fn secs(name: &str, value: &Bound<'_, PyAny>) -> PyResult<f64> {
    if value.is_instance_of::<pyo3::types::PyString>() || value.is_instance_of::<pyo3::types::PyBytes>() {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name} must be a number of seconds, not a string"
        )));
    }
    value.extract::<f64>().map_err(|e| {
        if e.is_instance_of::<PyOverflowError>(value.py()) {
            PyValueError::new_err(format!("{name} is out of range: {e}"))
        } else {
            e
        }
    })
}
