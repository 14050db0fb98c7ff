//! The error codes of `E <code>`.

use std::fmt;

/// The error codes of `E <code>` (docs/protocol.md §5, plus `wrong_domain` of docs/cluster-protocol.md §1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Bad `cmac` (or, on the client side, bad `smac`).
    AuthFailed,
    /// The node serves no domain.
    NotActive,
    /// No leader is known.
    NoLeader,
    /// A malformed frame.
    BadFrame,
    /// A frame over 512 bytes.
    TooLarge,
    /// A request id equal to an in-flight one.
    DuplicateId,
    /// More than `max_pending_per_conn` requests in flight.
    TooManyPending,
    /// No AUTH within the handshake timeout.
    HandshakeTimeout,
    /// Connection limit reached.
    Overloaded,
    /// The server is stopping.
    ShuttingDown,
    /// An internal error.
    Internal,
    /// A peer of another fencing domain (peer protocol only).
    WrongDomain,
    /// A code this version does not know (kept verbatim).
    Other(String),
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::NotActive => "not_active",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::DuplicateId => "duplicate_id",
            ErrorCode::TooManyPending => "too_many_pending",
            ErrorCode::HandshakeTimeout => "handshake_timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Internal => "internal",
            ErrorCode::WrongDomain => "wrong_domain",
            ErrorCode::Other(s) => s,
        }
    }

    pub(super) fn parse(text: &[u8]) -> ErrorCode {
        match text {
            b"auth_failed" => ErrorCode::AuthFailed,
            b"not_active" => ErrorCode::NotActive,
            b"no_leader" => ErrorCode::NoLeader,
            b"bad_frame" => ErrorCode::BadFrame,
            b"too_large" => ErrorCode::TooLarge,
            b"duplicate_id" => ErrorCode::DuplicateId,
            b"too_many_pending" => ErrorCode::TooManyPending,
            b"handshake_timeout" => ErrorCode::HandshakeTimeout,
            b"overloaded" => ErrorCode::Overloaded,
            b"shutting_down" => ErrorCode::ShuttingDown,
            b"internal" => ErrorCode::Internal,
            b"wrong_domain" => ErrorCode::WrongDomain,
            other => ErrorCode::Other(String::from_utf8_lossy(other).into_owned()),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
