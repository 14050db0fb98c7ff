//! Client errors as JS errors for the JS layer to re-type.
//!
//! napi-rs rejects a promise with a plain `Error`; the stable code travels
//! as a `[CODE] ` prefix of its message, which `index.js` strips to build
//! the typed error (`BusyError`, `RangeError`, …). The prefix format is
//! private to this package.

use ticketing_client::Error;

/// Why a bridged operation ended without a value.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The client's typed error.
    Client(Error),
    /// Cancelled through the acquire's `Canceller` (an `AbortSignal`): the
    /// client future was dropped before this was reported.
    Aborted,
    /// The task ended without a result (only when the runtime shuts down).
    Lost,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Client(e)
    }
}

/// The stable code of a client error, as the JS `TicketingError.code`.
fn code(err: &Error) -> &'static str {
    match err {
        Error::InvalidArgument(_) => "INVALID_ARGUMENT",
        Error::Busy => "BUSY",
        Error::Indeterminate => "INDETERMINATE",
        Error::InsufficientTime => "INSUFFICIENT_TIME",
        Error::Unavailable => "UNAVAILABLE",
        Error::ReleaseUnconfirmed => "RELEASE_UNCONFIRMED",
        Error::Closed => "CLOSED",
        Error::AuthFailed => "AUTH_FAILED",
        // `Error` is non-exhaustive: a later variant is still a TicketingError.
        _ => "TICKETING",
    }
}

/// The JS error for a failure: `[CODE] message`.
pub(crate) fn to_napi(f: Failure) -> napi::Error {
    let text = match f {
        Failure::Client(Error::InvalidArgument(why)) => format!("[INVALID_ARGUMENT] {why}"),
        Failure::Client(e) => format!("[{}] {e}", code(&e)),
        Failure::Aborted => "[ABORTED] the operation was aborted".to_string(),
        Failure::Lost => "[TICKETING] the client task ended without a result (runtime shut down)".to_string(),
    };
    napi::Error::from_reason(text)
}

/// A synchronous client error (constructor arguments, TLS option).
pub(crate) fn client(e: Error) -> napi::Error {
    to_napi(Failure::Client(e))
}

/// A bad argument found by the binding itself (before the client).
pub(crate) fn invalid(why: impl std::fmt::Display) -> napi::Error {
    to_napi(Failure::Client(Error::InvalidArgument(why.to_string())))
}
