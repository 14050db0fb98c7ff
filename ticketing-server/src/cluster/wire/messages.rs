//! The messages of the peer protocol: the envelope, its bodies and their answers.

use super::fields::{json_err, snapshot_chunk};
use crate::cluster::types::{DomainId, NodeId, NodeInfo, TypeConfig};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Text (32 hex digits) in a human-readable format, a `u128` in the binary frames.
impl Serialize for DomainId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&self.to_string())
        } else {
            s.serialize_u128(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for DomainId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DomainId, D::Error> {
        if d.is_human_readable() {
            let text = String::deserialize(d)?;
            DomainId::parse(&text).ok_or_else(|| serde::de::Error::custom("domain id must be 32 lowercase hex digits"))
        } else {
            u128::deserialize(d).map(DomainId)
        }
    }
}

/// One message on a peer connection.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// Format version ([`VERSION`](super::VERSION)).
    pub v: u8,
    /// Request id, chosen by the dialer; an answer echoes it.
    pub id: u64,
    /// The NodeId the message is for (requests), or the answering node (answers).
    pub to: NodeId,
    /// The sender's fencing domain, if it has one.
    pub domain: Option<DomainId>,
    /// The message.
    pub body: Body,
}

/// A join request of a restarted (or fresh) node (docs/cluster-protocol.md §3).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    /// The joiner's NodeId (new at every process start).
    pub node_id: NodeId,
    /// The joiner's addresses (its `--peers` entry and its client address).
    pub node: NodeInfo,
}

/// The answer to a [`JoinRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum JoinAnswer {
    /// The leader is replacing the old member at that address by the joiner
    /// (or the joiner already is a voter).
    Accepted(DomainId),
    /// Another replacement is running; ask again later.
    Busy,
    /// This node is not the serving leader.
    NotLeader,
    /// Refused, with the reason.
    Refused(String),
}

/// What a node says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerStatus {
    /// Its NodeId.
    pub node_id: NodeId,
    /// Its fencing domain, if any.
    pub domain: Option<DomainId>,
    /// Its client (advertise) address.
    pub client: String,
    /// Its admin HTTP address (`--admin-listen`), if any. (Never skipped
    /// when `None`: postcard is not self-describing, every field is there.)
    #[serde(default)]
    pub admin: Option<String>,
    /// Whether its Raft state is initialized (it is or was a member of a domain).
    pub initialized: bool,
    /// Its Raft role: `leader`, `follower`, `candidate`, `learner`, `shutdown`.
    pub role: String,
    /// The leader it knows.
    pub leader: Option<NodeId>,
}

/// The answer to a bootstrap request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum BootstrapAnswer {
    /// The node joined the new domain (it had none).
    Ok,
    /// The node already belongs to this domain.
    AlreadyInDomain(DomainId),
}

/// Why a message was not processed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Refusal {
    /// The message was addressed to another NodeId.
    WrongTarget {
        /// The NodeId of the node that answers.
        actual: NodeId,
    },
    /// The sender belongs to another fencing domain.
    WrongDomain,
    /// Unknown envelope version.
    BadVersion,
    /// A request the node cannot serve (an answer sent as a request, or Raft not running).
    Unsupported,
}

/// Every message of the peer protocol.
#[derive(Debug, Serialize, Deserialize)]
pub enum Body {
    /// Raft AppendEntries.
    AppendReq(AppendEntriesRequest<TypeConfig>),
    /// Raft RequestVote.
    VoteReq(VoteRequest<NodeId>),
    /// Raft InstallSnapshot (one chunk; its data as raw bytes).
    SnapshotReq(#[serde(with = "snapshot_chunk")] InstallSnapshotRequest<TypeConfig>),
    /// Join (docs/cluster-protocol.md §3).
    JoinReq(JoinRequest),
    /// Status.
    StatusReq,
    /// Bootstrap: join the new domain `domain` (docs/cluster-protocol.md §3).
    BootstrapReq(DomainId),
    /// Answer to `AppendReq`.
    AppendResp(#[serde(with = "json_err")] Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// Answer to `VoteReq`.
    VoteResp(#[serde(with = "json_err")] Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// Answer to `SnapshotReq`.
    SnapshotResp(
        #[serde(with = "json_err")] Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    /// Answer to `JoinReq`.
    JoinResp(JoinAnswer),
    /// Answer to `StatusReq`.
    StatusResp(PeerStatus),
    /// Answer to `BootstrapReq`.
    BootstrapResp(BootstrapAnswer),
    /// The request was refused.
    Refused(Refusal),
}
