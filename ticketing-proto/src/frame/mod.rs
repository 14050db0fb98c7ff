//! Every frame of docs/protocol.md §3–§5 in both directions, and the
//! 512-byte line limit; the field types live in [`crate::field`].
//!
//! Decoding is streaming: [`decode_client`] / [`decode_server`] look at the
//! front of a buffer and return `Ok(None)` while the line is incomplete (no LF
//! yet and fewer than [`MAX_FRAME`] bytes), `Ok(Some((frame, consumed)))` for
//! one complete valid line, and a [`FrameError`] for anything malformed or
//! oversized. The line grammar is parsed with `nom` (`decode`); field rules
//! are checked by the typed constructors ([`Key::new`], [`Owner::new`], …).
//! Encoding (`encode`) cannot fail: every value was validated by its type.

mod code;
mod decode;
mod encode;
#[cfg(test)]
mod tests;

pub use crate::field::{Addr, FieldError, Hex32, Key, KeySet, Owner, RequestId, Role, Token};
pub use crate::limits::{
    MAX_FRAME, MAX_LEASE, MAX_MULTI_KEYS, MAX_PERMITS, MAX_WAIT, MIN_LEASE, MIN_MULTI_KEYS, TOKEN_LIMIT,
};
pub use code::ErrorCode;
pub use decode::{decode_client, decode_server, line_fields, parse_client_line, parse_server_line, LineFields};

use std::fmt;

/// Why a line (or one field of it) is not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// More than [`MAX_FRAME`] bytes without a complete line (`E too_large`).
    TooLarge,
    /// The line breaks a rule of docs/protocol.md §2–§5 (`E bad_frame`); the text says which.
    BadFrame(&'static str),
}

impl FrameError {
    /// The wire error code a server answers this error with.
    pub fn code(&self) -> ErrorCode {
        match self {
            FrameError::TooLarge => ErrorCode::TooLarge,
            FrameError::BadFrame(_) => ErrorCode::BadFrame,
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge => write!(f, "frame longer than {MAX_FRAME} bytes"),
            FrameError::BadFrame(why) => write!(f, "malformed frame: {why}"),
        }
    }
}

impl std::error::Error for FrameError {}

impl From<FieldError> for FrameError {
    fn from(e: FieldError) -> Self {
        FrameError::BadFrame(e.0)
    }
}

/// Frames a client sends (docs/protocol.md §3, §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientFrame {
    /// `AUTH <cnonce> <cmac>`
    Auth {
        /// Client nonce.
        cnonce: Hex32,
        /// `HMAC(token, "ticketing/1 client " + snonce + " " + cnonce)`.
        cmac: Hex32,
    },
    /// `A <id> <key> <owner> <wait> <lease>`
    Acquire {
        /// Request id.
        id: RequestId,
        /// Lock key.
        key: Key,
        /// Owner of this logical acquire.
        owner: Owner,
        /// Seconds to wait in the queue, 0–255.
        wait: u8,
        /// Lease seconds, 1–250.
        lease: u8,
    },
    /// `S <id> <key> <owner> <wait> <lease> <n>`: a counted grant, one of
    /// at most `n` holders of the key that all hold it this way
    /// (docs/protocol.md, "Counted and multi-key grants"); answered `G`.
    AcquireShared {
        /// Request id.
        id: RequestId,
        /// Lock key.
        key: Key,
        /// Owner of this logical acquire.
        owner: Owner,
        /// Seconds to wait in the queue, 0–255.
        wait: u8,
        /// Lease seconds, 1–250.
        lease: u8,
        /// The most counted holders this request accepts beside it, 1–65535.
        n: u16,
    },
    /// `K <id> <owner> <wait> <lease> <key1> … <keyN>`: every key
    /// exclusively, atomically, with one token; answered `A` echoing `key1`.
    AcquireAll {
        /// Request id.
        id: RequestId,
        /// Owner of this logical acquire.
        owner: Owner,
        /// Seconds to wait in the queues, 0–255.
        wait: u8,
        /// Lease seconds, 1–250.
        lease: u8,
        /// 2–16 distinct keys.
        keys: KeySet,
    },
    /// `R <id> <key> <owner> <token>`
    Release {
        /// Request id.
        id: RequestId,
        /// Lock key.
        key: Key,
        /// Owner of the grant.
        owner: Owner,
        /// Token of the grant.
        token: Token,
    },
    /// `P <id>`
    Ping {
        /// Request id.
        id: RequestId,
    },
    /// `Q <id> <key> <owner>`: does `owner` hold `key`? Changes nothing
    /// (docs/protocol.md, "Query").
    Query {
        /// Request id.
        id: RequestId,
        /// Lock key.
        key: Key,
        /// The owner asked about.
        owner: Owner,
    },
}

/// Frames a server sends (docs/protocol.md §3, §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFrame {
    /// `TICKETING 1 <snonce>`
    Greeting {
        /// Server nonce.
        snonce: Hex32,
    },
    /// `OK <role> <smac>`
    Ok {
        /// leader or follower.
        role: Role,
        /// `HMAC(token, "ticketing/1 server " + snonce + " " + cnonce)`.
        smac: Hex32,
    },
    /// `A <id> <key> <owner> <token> <waited_ms>`: granted.
    Granted {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
        /// Echoed owner.
        owner: Owner,
        /// The fencing token.
        token: Token,
        /// Milliseconds from reading the request to committing the grant.
        waited_ms: u32,
    },
    /// `G <id> <key> <owner> <token> <waited_ms> <slot>`: a counted grant
    /// (answers `S`); `slot` is the lowest index in `0..n` no other holder
    /// of the key has.
    GrantedShared {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
        /// Echoed owner.
        owner: Owner,
        /// The fencing token.
        token: Token,
        /// Milliseconds from reading the request to committing the grant.
        waited_ms: u32,
        /// The holder's slot, below the request's `n`.
        slot: u16,
    },
    /// `T <id> <key>`: not granted within `wait`.
    Timeout {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
    },
    /// `B <id> <key>`: refused for capacity. Final.
    Busy {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
    },
    /// `F <id> <key>`: forbidden: the connection's principal may not use
    /// `key` (for a `K`, the first key it may not use). Final, like `T` and
    /// `B`; the connection stays (docs/protocol.md, "The answer F").
    Forbidden {
        /// Echoed request id.
        id: RequestId,
        /// The key the principal may not use.
        key: Key,
    },
    /// `R <id> <key>`: released.
    Released {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
    },
    /// `N <id> <key>`: not the current holder (answers `R` and `Q`).
    NotHolder {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
    },
    /// `H <id> <key> <owner> <token> <remaining_ms>`: `owner` holds `key`
    /// with `token`; its lease ends in `remaining_ms` (domain time). Answers `Q`.
    Held {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
        /// Echoed owner.
        owner: Owner,
        /// The holder's fencing token.
        token: Token,
        /// Milliseconds until the lease ends, by domain time.
        remaining_ms: u32,
    },
    /// `P <id>`: pong.
    Pong {
        /// Echoed request id.
        id: RequestId,
    },
    /// `M <addr>`: not the leader; the leader is `addr`. The server closes.
    Moved {
        /// The leader's client address.
        addr: Addr,
    },
    /// `L <addr>`: the leader is now `addr`.
    Leader {
        /// The leader's client address.
        addr: Addr,
    },
    /// `E <code>[ <text>]`: fatal; the server closes.
    Error {
        /// The code.
        code: ErrorCode,
        /// Optional printable text.
        text: Option<String>,
    },
}
