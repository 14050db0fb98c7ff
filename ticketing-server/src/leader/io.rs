//! What goes into and comes out of the [`Leader`](super::Leader): the
//! connections and waiters it names, the requests it takes and what it
//! delivers to a connection.

use std::fmt;
use std::time::Instant;
use ticketing_proto::{Key, Owner, RequestId, ServerFrame, Token};

use crate::locks::GrantKind;

/// Identifies one client connection for the lifetime of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Identifies one queued acquire inside the leader (never reused; a
/// waiter put back at the head of its queue gets a new one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaiterId(pub(super) u64);

/// What the leader delivers to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The final answer to request `id` (`A`, `T`, `B`, `R`, `N` or `H`).
    Reply {
        /// The request this answers.
        id: RequestId,
        /// The frame to write.
        frame: ServerFrame,
    },
    /// Write this frame (`M`, `E no_leader`, …) and close the connection.
    Fatal(ServerFrame),
    /// Request `id` left its queue unanswered (its connection sent EOF).
    Dropped(RequestId),
}

/// A client request, as the leader takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `A <id> <key> <owner> <wait> <lease>`, `S … <n>` or `K` (docs/protocol.md §4).
    Acquire {
        /// Request id.
        id: RequestId,
        /// Key (a multi-key acquire's first key: the one its answer echoes).
        key: Key,
        /// Exclusive (`A`), counted (`S`) or every key of a set (`K`).
        kind: GrantKind,
        /// Owner.
        owner: Owner,
        /// Wait, whole seconds.
        wait: u8,
        /// Lease, whole seconds.
        lease: u8,
        /// When the server read the request (for `waited_ms` and the wait timer).
        read_at: Instant,
        /// The connection's principal and its caps (`None`: auth off,
        /// docs/security.md, "Several teams: principals").
        principal: Option<crate::principal::PrincipalCap>,
    },
    /// `R <id> <key> <owner> <token>`.
    Release {
        /// Request id.
        id: RequestId,
        /// Key.
        key: Key,
        /// Owner of the grant.
        owner: Owner,
        /// Token of the grant.
        token: Token,
    },
    /// `Q <id> <key> <owner>`: answered `H` (that owner holds the key) or
    /// `N`; changes nothing (docs/protocol.md, "Query").
    Holds {
        /// Request id.
        id: RequestId,
        /// Key.
        key: Key,
        /// The owner asked about.
        owner: Owner,
    },
}
