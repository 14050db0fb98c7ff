//! What goes in and out of a [`Session`](super::Session): its timing, the
//! requests it sends, the answers and events it reports, and its errors.

use crate::frame::{Addr, ErrorCode, Key, Owner, Role, Token};
use crate::op::OpId;
use std::fmt;
use std::time::{Duration, Instant};

/// Timing of one session. The defaults are the handshake limit of
/// docs/protocol.md §3 and the keepalive and answer deadline of docs/client.md
/// (Connections; Acquire step 6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// The handshake (connect, TLS, greeting, AUTH, OK) must finish within this (5 s).
    pub handshake_timeout: Duration,
    /// Send `P` after this much silence on a ready connection (1 s).
    pub keepalive_idle: Duration,
    /// The session is dead after this much more silence (3 s).
    pub keepalive_dead: Duration,
    /// An acquire must be answered within `wait` plus this (5 s).
    pub answer_grace: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            handshake_timeout: crate::limits::HANDSHAKE_TIMEOUT,
            keepalive_idle: Duration::from_secs(1),
            keepalive_dead: Duration::from_secs(3),
            answer_grace: Duration::from_secs(5),
        }
    }
}

/// A request the caller can send on a ready session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `A <id> <key> <owner> <wait> <lease>`
    Acquire {
        /// Key.
        key: Key,
        /// Fresh owner of this logical acquire.
        owner: Owner,
        /// Whole seconds 0–255.
        wait: u8,
        /// Whole seconds 1–250.
        lease: u8,
    },
    /// `R <id> <key> <owner> <token>`
    Release {
        /// Key.
        key: Key,
        /// Owner of the grant.
        owner: Owner,
        /// Token of the grant.
        token: Token,
    },
    /// `Q <id> <key> <owner>`: does `owner` hold `key`? (release lane only)
    Query {
        /// Key.
        key: Key,
        /// The owner asked about.
        owner: Owner,
    },
}

/// A definite answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `A`: granted.
    Granted {
        /// Key (as registered and echoed).
        key: Key,
        /// Owner (as registered and echoed).
        owner: Owner,
        /// The fencing token.
        token: Token,
        /// Server-side milliseconds from reading the request to the commit.
        waited_ms: u32,
        /// When the request was registered (≤ the moment it was written).
        t_send: Instant,
    },
    /// `T`: not granted within `wait`.
    Timeout,
    /// `B`: refused for capacity (final).
    Busy,
    /// `R`: released.
    Released,
    /// `N`: not the current holder (answers a release or a query).
    NotHolder,
    /// `H`: the queried owner holds the key with `token`.
    Held {
        /// The holder's token.
        token: Token,
        /// Milliseconds until its lease ends, by the leader's domain time.
        remaining_ms: u32,
    },
}

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The transport ended (EOF, I/O error, connect or TLS failure).
    TransportLost,
    /// The handshake did not finish in time.
    HandshakeTimeout,
    /// `E auth_failed`, or the server's `smac` was wrong.
    AuthFailed,
    /// `E not_active`.
    NotActive,
    /// `E no_leader`.
    NoLeader,
    /// `M <addr>`: the node is not the leader.
    Moved(Addr),
    /// Any other `E <code>`.
    ServerError(ErrorCode),
    /// A malformed, oversized, unknown, mismatched or unsolicited frame.
    Protocol(&'static str),
    /// Nothing arrived for `keepalive_idle + keepalive_dead`.
    KeepaliveTimeout,
    /// An acquire was not answered within `wait + answer_grace`.
    AnswerTimeout,
    /// A possibly-sent acquire was cancelled (docs/client.md, Acquire step 7).
    Cancelled,
}

impl CloseReason {
    /// `auth_failed` and `not_active` make the reconnect backoff jump to its cap (docs/client.md, Connections).
    pub fn backoff_to_cap(&self) -> bool {
        matches!(self, CloseReason::AuthFailed | CloseReason::NotActive)
    }
}

/// The end of a session, with everything that was still pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    /// Why.
    pub reason: CloseReason,
    /// Registered requests whose bytes were never handed out.
    pub unsent: Vec<(OpId, Request)>,
    /// Requests whose bytes were handed out (any byte may have been written).
    pub possibly_sent: Vec<(OpId, Request)>,
}

/// What a session reports; drain with [`Session::poll_event`](crate::session::Session::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionEvent {
    /// The handshake succeeded (the server's proof was verified).
    Ready {
        /// The role from `OK`.
        role: Role,
    },
    /// A definite, correctly matched answer.
    Answer {
        /// The operation the request belongs to.
        op: OpId,
        /// The answer.
        answer: Answer,
    },
    /// `L <addr>`: the leader is now `addr` (not filtered; the broker applies the allowlist).
    Leader(Addr),
    /// An `A` with no pending entry: its exact grant, for the release lane.
    /// Always followed by [`SessionEvent::Closed`].
    OrphanGrant {
        /// Key as echoed.
        key: Key,
        /// Owner as echoed.
        owner: Owner,
        /// Token as echoed.
        token: Token,
    },
    /// The session is over (reported exactly once).
    Closed(Closed),
}

/// Why [`Session::send`](crate::session::Session::send) refused a request (nothing was registered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The handshake has not finished.
    NotReady,
    /// The session is closed.
    Closed,
    /// The operation already has a request pending on this session.
    DuplicateOp,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendError::NotReady => "the session's handshake has not finished",
            SendError::Closed => "the session is closed",
            SendError::DuplicateOp => "the operation already has a request pending on this session",
        })
    }
}

impl std::error::Error for SendError {}

/// What [`Session::cancel`](crate::session::Session::cancel) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The bytes were never handed out: the request is gone, nothing was sent.
    Unsent,
    /// Bytes may have been written: the caller must close the session (docs/client.md, Acquire step 7).
    PossiblySent,
    /// No such pending request.
    NotFound,
}
