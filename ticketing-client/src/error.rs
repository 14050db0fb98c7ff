//! The client's typed errors (docs/client.md, Rust API).

use std::fmt;
use ticketing_proto::broker::Failure;
use ticketing_proto::params::ParamError;

/// Everything a client call can fail with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `B`: refused for capacity. Final: no internal retry; a new acquire
    /// (with a new owner) after the caller's own backoff is fine.
    Busy,
    /// The request may have been sent and no definite answer came: the lock
    /// may have been granted. Do NOT enter the critical section; a grant, if
    /// any, returns at lease end.
    Indeterminate,
    /// Granted, but less than the work budget (or nothing) was left of the
    /// conservative lease; the grant was handed to the release lane.
    InsufficientTime,
    /// No ready connection within the budget: nothing was sent, definitely
    /// not acquired.
    Unavailable,
    /// No final answer to a release within 5 s (or the release lane was
    /// full). Never an assumed success; the lease is the last safety net.
    ReleaseUnconfirmed,
    /// The broker is closed (or, for a ticket, it belongs to another process
    /// after a fork).
    Closed,
    /// Authentication failed: the server refused the token, or it could not
    /// prove it knows the token (a possible fake server). Nothing was sent.
    AuthFailed,
    /// A bad key, duration, address or TLS option; nothing was sent.
    InvalidArgument(String),
}

impl Error {
    /// A stable machine-readable code: `busy`, `indeterminate`,
    /// `insufficient_time`, `unavailable`, `release_unconfirmed`, `closed`,
    /// `auth_failed`, `invalid_argument`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Busy => "busy",
            Error::Indeterminate => "indeterminate",
            Error::InsufficientTime => "insufficient_time",
            Error::Unavailable => "unavailable",
            Error::ReleaseUnconfirmed => "release_unconfirmed",
            Error::Closed => "closed",
            Error::AuthFailed => "auth_failed",
            Error::InvalidArgument(_) => "invalid_argument",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy => f.write_str("busy: the server refused the acquire for capacity"),
            Error::Indeterminate => f.write_str(
                "indeterminate: the acquire may have been granted; do not enter the critical section \
                 (a grant returns at lease end)",
            ),
            Error::InsufficientTime => {
                f.write_str("insufficient time: the grant left less than the work budget; it is being released")
            }
            Error::Unavailable => f.write_str("unavailable: no ready connection within the budget; nothing was sent"),
            Error::ReleaseUnconfirmed => f.write_str("release unconfirmed: no final answer within 5 s"),
            Error::Closed => f.write_str("closed: the broker is closed"),
            Error::AuthFailed => {
                f.write_str("auth failed: the server refused the token or could not prove it knows it")
            }
            Error::InvalidArgument(why) => write!(f, "invalid argument: {why}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ParamError> for Error {
    fn from(e: ParamError) -> Self {
        Error::InvalidArgument(e.to_string())
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Busy => Error::Busy,
            Failure::Indeterminate => Error::Indeterminate,
            Failure::InsufficientTime => Error::InsufficientTime,
            Failure::Unavailable => Error::Unavailable,
            Failure::AuthFailed => Error::AuthFailed,
            Failure::ReleaseUnconfirmed => Error::ReleaseUnconfirmed,
            Failure::Closed => Error::Closed,
        }
    }
}

/// `Result` with the client's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
