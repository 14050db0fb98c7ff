//! The openraft type configuration of the cluster: a log entry carries a
//! [`Batch`] of the lock [`Command`]s of `locks`, its response is their
//! [`Applied`]s in order, and every member's node data carries both its peer
//! and its client address.

use crate::locks::{Applied, Command, LockState};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::Cursor;

/// A node's identity in Raft: random, non-zero, below 2^63, drawn at every
/// process start. Serialized as its number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeId(pub u64);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u64> for NodeId {
    fn from(id: u64) -> NodeId {
        NodeId(id)
    }
}

impl std::str::FromStr for NodeId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<NodeId, Self::Err> {
        s.parse().map(NodeId)
    }
}

/// What the membership stores about a member.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Peer address (`--peers` entry of that node).
    pub peer: String,
    /// Client address announced in `M`/`L` (that node's `--advertise`).
    pub client: String,
    /// That node's `--admin-listen`, if any: a follower's `/locks/<key>`
    /// names the leader's. Never skipped when `None`: the peer frames are
    /// postcard (not self-describing), where every field must be there.
    #[serde(default)]
    pub admin: Option<String>,
}

impl fmt::Display for NodeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "peer={} client={}", self.peer, self.client)
    }
}

/// The payload of one normal Raft log entry: the commands the leader's
/// manager proposed together (docs/cluster-protocol.md, "Log entries"), at
/// most one per key, applied in order. Serialized as a JSON array of commands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Batch(pub Vec<Command>);

impl Batch {
    /// Applies every command in order; one outcome per command. The same as
    /// applying them one by one (the entry is only a unit of commitment).
    pub fn apply(&self, state: &mut LockState) -> Vec<Applied> {
        state.apply_all(&self.0)
    }
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch of {} commands", self.0.len())
    }
}

openraft::declare_raft_types!(
    /// The Raft types of a Ticketing cluster.
    pub TypeConfig:
        D = Batch,
        // One outcome per command of a normal entry; empty for blank and membership entries.
        R = Vec<Applied>,
        NodeId = NodeId,
        Node = NodeInfo,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The Raft instance of a node.
pub type Raft = openraft::Raft<TypeConfig>;

/// A 128-bit fencing-domain id, shown as 32 lowercase hex digits.
/// Serialized as its text form (see `wire`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DomainId(pub u128);

impl DomainId {
    /// Parses 32 lowercase hex digits.
    pub fn parse(text: &str) -> Option<DomainId> {
        if text.bytes().any(|b| b.is_ascii_uppercase()) {
            return None;
        }
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(text, &mut bytes).ok()?;
        Some(DomainId(u128::from_be_bytes(bytes)))
    }
}

impl fmt::Display for DomainId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0.to_be_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_id_text_round_trip() {
        let d = DomainId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(d.to_string(), "0123456789abcdef0011223344556677");
        assert_eq!(DomainId::parse(&d.to_string()), Some(d));
        assert_eq!(DomainId::parse("0123456789ABCDEF0011223344556677"), None);
        assert_eq!(DomainId::parse("-"), None);
        assert_eq!(DomainId::parse(""), None);
    }
}
