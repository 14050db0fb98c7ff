//! What goes in and out of a [`Session`](super::Session): its timing, the
//! requests it sends, the answers and events it reports, and its errors.

use crate::frame::{Addr, ErrorCode, Key, KeySet, Owner, Role, Token};
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
    /// `S <id> <key> <owner> <wait> <lease> <n>`: a counted acquire, answered
    /// `G` (or `T`, `B`) echoing `key` and, on `G`, `owner`.
    AcquireShared {
        /// Key.
        key: Key,
        /// Fresh owner of this logical acquire.
        owner: Owner,
        /// Whole seconds 0–255.
        wait: u8,
        /// Whole seconds 1–250.
        lease: u8,
        /// Holders accepted at once, 1–65535.
        n: u16,
    },
    /// `K <id> <owner> <wait> <lease> <key1> … <keyN>`: every key at once,
    /// answered `A` (or `T`, `B`) echoing the FIRST key and, on `A`, `owner`.
    AcquireAll {
        /// 2–16 distinct keys.
        keys: KeySet,
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

impl Request {
    /// True for the three acquires (`A`, `S`, `K`).
    pub fn is_acquire(&self) -> bool {
        matches!(self, Request::Acquire { .. } | Request::AcquireShared { .. } | Request::AcquireAll { .. })
    }

    /// An acquire's owner and every key it asks for (first key first); `None`
    /// for a release or a query.
    pub fn acquire_keys(&self) -> Option<(&Owner, Vec<Key>)> {
        match self {
            Request::Acquire { key, owner, .. } | Request::AcquireShared { key, owner, .. } => {
                Some((owner, vec![key.clone()]))
            }
            Request::AcquireAll { keys, owner, .. } => Some((owner, keys.as_slice().to_vec())),
            Request::Release { .. } | Request::Query { .. } => None,
        }
    }
}

/// A definite answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `A` (answering `A` or `K`) or `G` (answering `S`): granted.
    Granted {
        /// Key (as registered and echoed; the first key of a `K`).
        key: Key,
        /// Owner (as registered and echoed).
        owner: Owner,
        /// The fencing token (one for every key of a `K`).
        token: Token,
        /// Server-side milliseconds from reading the request to the commit.
        waited_ms: u32,
        /// When the request was registered (≤ the moment it was written).
        t_send: Instant,
        /// The slot of a counted grant (`G`); `None` for an exclusive one.
        slot: Option<u16>,
        /// The other keys of a `K`, in the order sent (empty for `A` and `S`):
        /// granted with the same token.
        other_keys: Vec<Key>,
    },
    /// `T`: not granted within `wait`.
    Timeout,
    /// `B`: refused for capacity (final).
    Busy,
    /// `F`: the principal may not use `key` (final; for a `K`, the first
    /// such key).
    Forbidden {
        /// The key named in the answer.
        key: Key,
    },
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
    /// An `A` or `G` with no pending (written) entry: its exact grant, for the
    /// release lane. Always followed by [`SessionEvent::Closed`].
    OrphanGrant {
        /// Key as echoed.
        key: Key,
        /// Owner as echoed.
        owner: Owner,
        /// Token as echoed.
        token: Token,
        /// When the grant's id names a registered `K` whose bytes were never
        /// handed out, its other keys (same owner, same token); otherwise empty:
        /// an `A` names only a `K`'s first key, and any other key of an unknown
        /// request returns at lease end.
        other_keys: Vec<Key>,
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
