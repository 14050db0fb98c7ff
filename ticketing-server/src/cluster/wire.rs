//! The peer protocol on the wire: the text handshake and the
//! length-prefixed binary frames. The byte layout is in
//! `docs/cluster-protocol.md`.
//!
//! The handshake is the client port's (docs/protocol.md §3) with its own
//! greeting, labels and `OK` line: its `AUTH` line is decoded by the client
//! port's decoder ([`decode_client`]), lines are bounded by the same
//! [`MAX_FRAME`] (512 bytes, LF included). The greeting names the peer
//! protocol version ([`VERSION`]): a dialer of another version is refused
//! before any frame, never misparsed.
//!
//! A frame is a 4-byte big-endian length `N` (1 ≤ N ≤ 16 MiB) followed by `N`
//! bytes: one [`Envelope`] in postcard's compact binary serde format.
//! Snapshot chunks travel as raw bytes; an openraft error inside an answer
//! travels as JSON text (its `AnyError` nests without bound; serde_json
//! stops at 128 levels, postcard has no such limit).

use super::types::{DomainId, NodeId, NodeInfo, TypeConfig};
use bytes::{Buf, BytesMut};
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::Duration;
use ticketing_proto::auth::{self, Label, Secret};
use ticketing_proto::frame::{decode_client, line_fields};
use ticketing_proto::limits::MAX_FRAME;
use ticketing_proto::{ClientFrame, Hex32};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// Version of the peer protocol: the number in the greeting and every
/// envelope's `v`. Version 1 carried JSON frames; 2 carries postcard.
pub const VERSION: u8 = 2;
/// Largest frame body.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

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

mod fields;
use fields::{json_err, snapshot_chunk};

/// One message on a peer connection.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// Format version ([`VERSION`]).
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

/// A peer-protocol failure, by fault (docs/cluster-protocol.md): transport
/// ([`WireError::Io`], [`WireError::Disconnected`], [`WireError::Timeout`],
/// [`WireError::Tls`]), a peer that broke the protocol
/// ([`WireError::Protocol`]), or a handshake refused by either side
/// ([`WireError::Refused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// I/O error.
    Io(std::io::ErrorKind),
    /// The connection closed in the middle of the handshake.
    Disconnected,
    /// The peer broke the protocol.
    Protocol(Violation),
    /// The handshake was refused.
    Refused(HandshakeRefusal),
    /// Timed out.
    Timeout,
    /// The TLS handshake failed (a plain-TCP peer, or a certificate the
    /// peer CA did not sign or that does not name the peer's host).
    Tls(TlsFailure),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(kind) => write!(f, "peer i/o: {kind}"),
            WireError::Disconnected => f.write_str("connection closed during the handshake"),
            WireError::Protocol(e) => write!(f, "peer protocol violation: {e}"),
            WireError::Refused(e) => write!(f, "peer handshake refused: {e}"),
            WireError::Timeout => f.write_str("peer timed out"),
            WireError::Tls(e) => write!(f, "peer TLS handshake failed: {e}"),
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Protocol(e) => Some(e),
            WireError::Refused(e) => Some(e),
            WireError::Tls(e) => Some(e),
            _ => None,
        }
    }
}

/// How a peer broke the peer protocol (or, for [`Violation::Encode`], a
/// frame this node could not build; nothing was sent).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// postcard could not encode a frame.
    Encode(postcard::Error),
    /// A frame length (announced or encoded) outside 1 byte–16 MiB.
    FrameLength(usize),
    /// A frame body that is not one envelope.
    BadMessage(postcard::Error),
    /// Bytes left over after the envelope.
    TrailingBytes(usize),
    /// The stream ended inside a frame.
    CutFrame,
    /// A handshake line of 512 bytes without LF.
    LineTooLong,
    /// A handshake line that is not fields of visible ASCII (shown escaped).
    MalformedLine(String),
    /// A TLS ClientHello where `AUTH` was expected.
    TlsClientHello,
    /// The dialer closed the connection after the greeting without `AUTH`.
    NoAuth,
    /// A line other than `AUTH` after the greeting (shown escaped).
    ExpectedAuth(String),
    /// A greeting that is not `TICKETING-PEER <version> <nonce>`.
    BadGreeting(Vec<String>),
    /// A field of the `OK` answer that does not parse.
    BadAnswerField {
        /// `domain`, `node id` or `smac`.
        field: &'static str,
        /// Its text.
        value: String,
    },
    /// An answer that is neither `OK …` nor `E <code>`.
    BadAnswer(Vec<String>),
    /// A frame refused by the peer byte budgets (its announced length).
    FrameRefused(usize),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Encode(e) => write!(f, "cannot encode: {e}"),
            Violation::FrameLength(n) => write!(f, "frame length {n} out of range 1..=16MiB"),
            Violation::BadMessage(e) => write!(f, "bad message: {e}"),
            Violation::TrailingBytes(n) => write!(f, "bad message: {n} bytes after the envelope"),
            Violation::CutFrame => f.write_str("stream ended inside a frame"),
            Violation::LineTooLong => f.write_str("handshake line too long"),
            Violation::MalformedLine(line) => write!(f, "malformed handshake line \"{line}\""),
            Violation::TlsClientHello => {
                f.write_str("expected AUTH, got a TLS ClientHello: the peer uses --peer-tls-*, this node does not")
            }
            Violation::NoAuth => write!(
                f,
                "the dialer closed the connection after our greeting \"TICKETING-PEER {VERSION}\" without AUTH \
                 (a node speaking another peer protocol version does this: every node must run the same version)"
            ),
            Violation::ExpectedAuth(line) => write!(f, "expected AUTH, got \"{line}\""),
            Violation::BadGreeting(fields) => write!(f, "bad peer greeting {fields:?}"),
            Violation::BadAnswerField { field, value } => write!(f, "bad {field} {value:?}"),
            Violation::BadAnswer(fields) => write!(f, "bad handshake answer {fields:?}"),
            Violation::FrameRefused(n) => write!(f, "frame of {n} bytes refused"),
        }
    }
}

impl std::error::Error for Violation {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Violation::Encode(e) | Violation::BadMessage(e) => Some(e),
            _ => None,
        }
    }
}

/// The code of a handshake refusal: the word after `E ` on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalCode {
    /// `auth_failed`: no peer token matched (or the acceptor's proof did not).
    AuthFailed,
    /// `wrong_version`: another peer protocol version.
    WrongVersion,
    /// `wrong_domain`: a node of another fencing domain.
    WrongDomain,
    /// `handshake_timeout`.
    HandshakeTimeout,
    /// `bad_frame`: not an `AUTH` line.
    BadFrame,
    /// `overloaded`: the peer connection limit.
    Overloaded,
    /// A code this version does not know.
    Other(String),
}

impl RefusalCode {
    /// The code of `word` (`auth_failed`, …; a trailing `:` is ignored).
    pub fn parse(word: &str) -> RefusalCode {
        match word.trim_end_matches(':') {
            "auth_failed" => RefusalCode::AuthFailed,
            "wrong_version" => RefusalCode::WrongVersion,
            "wrong_domain" => RefusalCode::WrongDomain,
            "handshake_timeout" => RefusalCode::HandshakeTimeout,
            "bad_frame" => RefusalCode::BadFrame,
            "overloaded" => RefusalCode::Overloaded,
            other => RefusalCode::Other(other.to_owned()),
        }
    }

    /// The code as on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            RefusalCode::AuthFailed => "auth_failed",
            RefusalCode::WrongVersion => "wrong_version",
            RefusalCode::WrongDomain => "wrong_domain",
            RefusalCode::HandshakeTimeout => "handshake_timeout",
            RefusalCode::BadFrame => "bad_frame",
            RefusalCode::Overloaded => "overloaded",
            RefusalCode::Other(code) => code,
        }
    }
}

impl fmt::Display for RefusalCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a peer handshake was refused, and by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandshakeRefusal {
    /// The other side answered `E <code> [detail]`.
    ByPeer {
        /// The code.
        code: RefusalCode,
        /// The rest of its line (empty when it gave none).
        detail: String,
    },
    /// (Acceptor) the dialer's `AUTH` matched none of our peer tokens; we
    /// answered `E auth_failed`.
    AuthFailed,
    /// (Dialer) the acceptor's proof does not match our token.
    BadProof,
    /// (Dialer) the acceptor speaks another peer protocol version; we
    /// answered `E wrong_version`.
    WrongVersion {
        /// The version in its greeting.
        theirs: String,
    },
    /// (Dialer) the acceptor is in another fencing domain; we answered `E wrong_domain`.
    WrongDomain {
        /// This node's domain.
        ours: DomainId,
        /// The acceptor's.
        theirs: DomainId,
    },
    /// (Dialer) this node has no peer token and no peer TLS, so it dials no
    /// peer (docs/security.md, "Peer authentication").
    NoPeerAuth,
}

impl HandshakeRefusal {
    /// The wire code of the refusal.
    pub fn code(&self) -> RefusalCode {
        match self {
            HandshakeRefusal::ByPeer { code, .. } => code.clone(),
            HandshakeRefusal::AuthFailed | HandshakeRefusal::BadProof | HandshakeRefusal::NoPeerAuth => {
                RefusalCode::AuthFailed
            }
            HandshakeRefusal::WrongVersion { .. } => RefusalCode::WrongVersion,
            HandshakeRefusal::WrongDomain { .. } => RefusalCode::WrongDomain,
        }
    }

    /// `E <code> [detail]` as received.
    fn by_peer(line: &str) -> HandshakeRefusal {
        let (code, detail) = line.split_once(' ').unwrap_or((line, ""));
        HandshakeRefusal::ByPeer { code: RefusalCode::parse(code), detail: detail.trim().to_owned() }
    }
}

impl fmt::Display for HandshakeRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeRefusal::ByPeer { code, detail } if detail.is_empty() => write!(f, "the peer answered E {code}"),
            HandshakeRefusal::ByPeer { code, detail } => write!(f, "the peer answered E {code} {detail}"),
            HandshakeRefusal::AuthFailed => {
                f.write_str("auth_failed (the peer's AUTH matches none of our peer tokens)")
            }
            HandshakeRefusal::BadProof => f.write_str("auth_failed (the peer's proof does not match)"),
            HandshakeRefusal::WrongVersion { theirs } => write!(
                f,
                "wrong_version: the peer speaks peer protocol {theirs}, this node {VERSION}; \
                 every node of a cluster must run the same version"
            ),
            HandshakeRefusal::WrongDomain { ours, theirs } => {
                write!(f, "wrong_domain (peer is in {theirs}, we are in {ours})")
            }
            HandshakeRefusal::NoPeerAuth => f.write_str("no peer token and no peer TLS: this node dials no peer"),
        }
    }
}

impl std::error::Error for HandshakeRefusal {}

/// Why the TLS layer of a peer connection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsFailure {
    /// The host of a `--peers` address is not a TLS server name.
    ServerName {
        /// The address.
        addr: String,
    },
    /// The TLS handshake failed.
    Handshake {
        /// The I/O error kind it ended with.
        kind: std::io::ErrorKind,
        /// rustls's reason.
        reason: String,
    },
    /// (Dialer) the acceptor closed after the TLS handshake, before its
    /// greeting: with TLS 1.3 it checks our certificate only then.
    ClosedBeforeGreeting,
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFailure::ServerName { addr } => write!(f, "peer address {addr:?}: not a TLS server name"),
            TlsFailure::Handshake { reason, .. } => f.write_str(reason),
            TlsFailure::ClosedBeforeGreeting => f.write_str(
                "the peer closed the connection before its greeting: did its --peer-tls-ca refuse our certificate?",
            ),
        }
    }
}

impl std::error::Error for TlsFailure {}

impl From<std::io::Error> for TlsFailure {
    fn from(e: std::io::Error) -> TlsFailure {
        TlsFailure::Handshake { kind: e.kind(), reason: e.to_string() }
    }
}

impl From<Violation> for WireError {
    fn from(v: Violation) -> WireError {
        WireError::Protocol(v)
    }
}

impl From<HandshakeRefusal> for WireError {
    fn from(r: HandshakeRefusal) -> WireError {
        WireError::Refused(r)
    }
}

impl From<std::io::Error> for WireError {
    fn from(e: std::io::Error) -> WireError {
        WireError::Io(e.kind())
    }
}

/// A postcard output that appends to a `Vec` (several frames share one
/// buffer: one socket write per batch).
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();
    fn try_push(&mut self, b: u8) -> postcard::Result<()> {
        self.0.push(b);
        Ok(())
    }
    fn try_extend(&mut self, b: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(b);
        Ok(())
    }
    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// Appends one frame (length prefix + postcard body) to `out`. On an error
/// `out` is left as it was.
pub fn encode_into(env: &Envelope, out: &mut Vec<u8>) -> Result<(), WireError> {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    if let Err(e) = postcard::serialize_with_flavor(env, Append(out)) {
        out.truncate(start);
        return Err(Violation::Encode(e).into());
    }
    let n = out.len() - start - 4;
    if n == 0 || n > MAX_BODY {
        out.truncate(start);
        return Err(Violation::FrameLength(n).into());
    }
    out[start..start + 4].copy_from_slice(&(n as u32).to_be_bytes());
    Ok(())
}

/// Encodes one frame (length prefix + postcard body).
pub fn encode(env: &Envelope) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(128);
    encode_into(env, &mut out)?;
    Ok(out)
}

/// Parses a frame body: exactly one envelope, no byte left over.
pub fn decode_body(buf: &[u8]) -> Result<Envelope, WireError> {
    match postcard::take_from_bytes::<Envelope>(buf) {
        Ok((env, [])) => Ok(env),
        Ok((_, rest)) => Err(Violation::TrailingBytes(rest.len()).into()),
        Err(e) => Err(Violation::BadMessage(e).into()),
    }
}

/// The length a frame header announces, checked against `1..=MAX_BODY`.
fn frame_len(header: [u8; 4]) -> Result<usize, WireError> {
    let n = u32::from_be_bytes(header) as usize;
    if n == 0 || n > MAX_BODY {
        return Err(Violation::FrameLength(n).into());
    }
    Ok(n)
}

/// Reads the frames of one connection through one buffer: a read takes
/// whatever the socket has (many frames at once under load), frames are
/// decoded in place. [`FrameReader::next`] is cancel-safe, so a connection
/// task can wait for the next frame and for its answers at once.
pub struct FrameReader<R> {
    r: R,
    buf: BytesMut,
    /// When the started frame in `buf` must be complete (`--peer-frame-timeout`).
    deadline: Option<Instant>,
    /// The started frame's length was admitted (`next_admitted`).
    admitted: bool,
}

/// What [`FrameReader::next_admitted`] read. (Returned by value once per
/// frame, never stored: boxing the envelope would only add an allocation.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Read {
    /// A whole frame (its body was this many bytes).
    Frame(Envelope, usize),
    /// A clean end of stream between frames.
    End,
    /// `admit` refused a frame of this body length; its body was not read.
    Refused(usize),
}

/// Read size while no frame is started, and the most the buffer grows by
/// in one read: a length prefix alone never allocates 16 MiB.
const READ_CHUNK: usize = 64 * 1024;

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads frames from `r`.
    pub fn new(r: R) -> FrameReader<R> {
        FrameReader { r, buf: BytesMut::with_capacity(8 * 1024), deadline: None, admitted: false }
    }

    /// The next frame; `Ok(None)` at a clean end of stream between frames.
    /// Once a frame's first byte arrived, the frame must be whole within
    /// `limit` ([`WireError::Timeout`]); waiting for a first byte is not
    /// limited (an idle connection is fine). A length out of range is
    /// refused before its body is read. Cancel-safe: dropping the future
    /// loses nothing.
    pub async fn next(&mut self, limit: Duration) -> Result<Option<Envelope>, WireError> {
        match self.next_admitted(limit, &mut |_| true).await? {
            Read::Frame(env, _) => Ok(Some(env)),
            Read::End => Ok(None),
            Read::Refused(n) => Err(WireError::Protocol(Violation::FrameRefused(n))),
        }
    }

    /// [`FrameReader::next`], asking `admit(body_len)` once per frame as soon
    /// as its length prefix is in, before its body is read (so a budget can
    /// count the bytes a started frame will hold). Cancel-safe like `next`.
    pub async fn next_admitted(
        &mut self,
        limit: Duration,
        admit: &mut (dyn FnMut(usize) -> bool + Send),
    ) -> Result<Read, WireError> {
        loop {
            match self.take(admit)? {
                Taken::Frame(env, n) => return Ok(Read::Frame(env, n)),
                Taken::Refused(n) => return Ok(Read::Refused(n)),
                Taken::More => {}
            }
            if !self.buf.is_empty() && self.deadline.is_none() {
                self.deadline = Some(Instant::now() + limit);
            }
            let n = match self.deadline {
                None => self.r.read_buf(&mut self.buf).await?,
                Some(at) => match tokio::time::timeout_at(at, self.r.read_buf(&mut self.buf)).await {
                    Ok(n) => n?,
                    Err(_) => return Err(WireError::Timeout),
                },
            };
            if n == 0 {
                return if self.buf.is_empty() { Ok(Read::End) } else { Err(WireError::Protocol(Violation::CutFrame)) };
            }
        }
    }

    /// A whole frame from the buffer, if there is one; otherwise makes room
    /// for the rest of the started one (once `admit` took its length).
    fn take(&mut self, admit: &mut (dyn FnMut(usize) -> bool + Send)) -> Result<Taken, WireError> {
        let need = if self.buf.len() >= 4 {
            let n = frame_len([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])?;
            if !self.admitted {
                if !admit(n) {
                    return Ok(Taken::Refused(n));
                }
                self.admitted = true;
            }
            if self.buf.len() >= 4 + n {
                let env = decode_body(&self.buf[4..4 + n]);
                self.buf.advance(4 + n);
                self.admitted = false;
                self.deadline = None;
                if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
                    // Do not keep a snapshot chunk's buffer on an idle link.
                    self.buf = BytesMut::with_capacity(8 * 1024);
                }
                return env.map(|env| Taken::Frame(env, n));
            }
            4 + n - self.buf.len()
        } else {
            16 * 1024
        };
        let spare = self.buf.capacity() - self.buf.len();
        if spare < need.min(READ_CHUNK) {
            self.buf.reserve(need.min(READ_CHUNK));
        }
        Ok(Taken::More)
    }
}

/// What [`FrameReader::take`] found in the buffer.
#[allow(clippy::large_enum_variant)]
enum Taken {
    Frame(Envelope, usize),
    Refused(usize),
    More,
}

/// Reads one frame straight from `r` (no read-ahead: bytes after the frame
/// stay unread). `Ok(None)` at a clean end of stream before a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Envelope>, WireError> {
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Ok(None);
    }
    let mut len = [first[0], 0, 0, 0];
    r.read_exact(&mut len[1..]).await.map_err(|_| WireError::Protocol(Violation::CutFrame))?;
    let n = frame_len(len)?;
    let mut buf = Vec::with_capacity(n.min(READ_CHUNK));
    (&mut *r).take(n as u64).read_to_end(&mut buf).await?;
    if buf.len() < n {
        return Err(WireError::Protocol(Violation::CutFrame));
    }
    decode_body(&buf).map(Some)
}

/// Reads one handshake line (LF included, at most [`MAX_FRAME`] bytes).
async fn read_raw_line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Vec<u8>, WireError> {
    let mut line = Vec::new();
    let mut limited = r.take(MAX_FRAME as u64);
    limited.read_until(b'\n', &mut line).await?;
    if line.last() != Some(&b'\n') {
        return Err(if line.len() >= MAX_FRAME {
            WireError::Protocol(Violation::LineTooLong)
        } else {
            WireError::Disconnected
        });
    }
    Ok(line)
}

/// Reads one handshake line as its fields (the client port's line rules:
/// `ticketing_proto::frame::line_fields`).
async fn read_fields<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<Vec<String>, WireError> {
    let line = read_raw_line(r).await?;
    match line_fields(&line) {
        // Fields are visible ASCII: the lossy conversion never loses anything.
        Ok(Some((fields, _))) => Ok(fields.iter().map(|f| String::from_utf8_lossy(f).into_owned()).collect()),
        _ => Err(Violation::MalformedLine(escaped(&line)).into()),
    }
}

/// A handshake line as text, non-printable bytes escaped.
fn escaped(line: &[u8]) -> String {
    line.iter().flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect()
}

fn bad_field(field: &'static str, value: &str) -> WireError {
    Violation::BadAnswerField { field, value: value.to_owned() }.into()
}

fn domain_text(d: Option<DomainId>) -> String {
    d.map(|d| d.to_string()).unwrap_or_else(|| "-".to_owned())
}

/// Accepting side: greeting, AUTH check with the peer tokens (any of them),
/// `OK <domain|-> <node_id> <smac>` with the matching one. `tokens: None`:
/// no token is checked (the peers authenticate by mutual TLS alone, or
/// deliberately not at all): any well-formed AUTH is accepted and the proof
/// is all zeros, which a dialer with a token refuses. `Some(&[])` accepts
/// no peer.
pub async fn accept_handshake<R, W>(
    r: &mut R,
    w: &mut W,
    tokens: Option<&[Secret]>,
    own_id: NodeId,
    domain: Option<DomainId>,
    limit: Duration,
) -> Result<(), WireError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let snonce = auth::nonce(&mut rand_core::OsRng);
    w.write_all(format!("TICKETING-PEER {VERSION} {}\n", snonce.to_hex_string()).as_bytes()).await?;
    let first_line = async {
        // 0x16 opens a TLS handshake record: say so instead of waiting for an LF.
        if r.fill_buf().await?.first() == Some(&0x16) {
            return Err(Violation::TlsClientHello.into());
        }
        read_raw_line(r).await
    };
    let line = match tokio::time::timeout(limit, first_line).await {
        Ok(Err(WireError::Disconnected)) => return Err(Violation::NoAuth.into()),
        Ok(l) => l?,
        Err(_) => {
            let _ = w.write_all(b"E handshake_timeout\n").await;
            return Err(WireError::Timeout);
        }
    };
    // A dialer that refuses our greeting says why (`E wrong_version …`).
    if let Some(reason) = line.strip_prefix(b"E ") {
        return Err(HandshakeRefusal::by_peer(&String::from_utf8_lossy(reason.trim_ascii_end())).into());
    }
    // The AUTH line of the client port's handshake, byte for byte.
    let Ok(Some((ClientFrame::Auth { cnonce, cmac }, _))) = decode_client(&line) else {
        let _ = w.write_all(b"E bad_frame\n").await;
        return Err(Violation::ExpectedAuth(escaped(&line[..line.len().min(80)])).into());
    };
    let smac = match tokens {
        None => Hex32([0; 32]),
        Some(tokens) => {
            let Some(token) =
                tokens.iter().find(|t| auth::verify(t.expose(), Label::PeerClient, &snonce, &cnonce, &cmac))
            else {
                let _ = w.write_all(b"E auth_failed\n").await;
                let _ = w.flush().await;
                return Err(HandshakeRefusal::AuthFailed.into());
            };
            auth::mac(token.expose(), Label::PeerServer, &snonce, &cnonce)
        }
    };
    w.write_all(format!("OK {} {own_id} {}\n", domain_text(domain), smac.to_hex_string()).as_bytes()).await?;
    w.flush().await?;
    Ok(())
}

/// Dialing side: answers the greeting, verifies the acceptor's proof, and
/// refuses an acceptor of another domain (`E wrong_domain`). Returns the
/// acceptor's NodeId and domain. `token: None`: no token (mutual TLS alone,
/// or deliberately unauthenticated): the MAC sent is all zeros and the
/// acceptor's proof is not checked.
pub async fn dial_handshake<R, W>(
    r: &mut R,
    w: &mut W,
    token: Option<&[u8]>,
    own_domain: Option<DomainId>,
) -> Result<(NodeId, Option<DomainId>), WireError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let greeting = read_fields(r).await?;
    let version = VERSION.to_string();
    let snonce = match greeting.as_slice() {
        [magic, v, _] if magic == "TICKETING-PEER" && *v != version => {
            // Another encoding of the frames: refuse before any frame, and say
            // why to the acceptor (it logs the line).
            let _ =
                w.write_all(format!("E wrong_version: this node speaks peer protocol {VERSION}\n").as_bytes()).await;
            let _ = w.flush().await;
            return Err(HandshakeRefusal::WrongVersion { theirs: v.clone() }.into());
        }
        [magic, _, n] if magic == "TICKETING-PEER" => Hex32::parse(n.as_bytes()).ok(),
        _ => None,
    }
    .ok_or_else(|| Violation::BadGreeting(greeting.clone()))?;
    let cnonce = auth::nonce(&mut rand_core::OsRng);
    let cmac = token.map_or(Hex32([0; 32]), |t| auth::mac(t, Label::PeerClient, &snonce, &cnonce));
    w.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string()).as_bytes()).await?;
    w.flush().await?;
    let answer = read_fields(r).await?;
    let parts: Vec<&str> = answer.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["OK", domain, id, smac] => {
            let domain = match *domain {
                "-" => None,
                d => Some(DomainId::parse(d).ok_or_else(|| bad_field("domain", d))?),
            };
            let id: NodeId = id.parse().map_err(|_| bad_field("node id", id))?;
            let smac = Hex32::parse(smac.as_bytes()).map_err(|_| bad_field("smac", smac))?;
            if token.is_some_and(|t| !auth::verify(t, Label::PeerServer, &snonce, &cnonce, &smac)) {
                return Err(HandshakeRefusal::BadProof.into());
            }
            if let (Some(mine), Some(theirs)) = (own_domain, domain) {
                if mine != theirs {
                    let _ = w.write_all(b"E wrong_domain\n").await;
                    return Err(HandshakeRefusal::WrongDomain { ours: mine, theirs }.into());
                }
            }
            Ok((id, domain))
        }
        ["E", code, detail @ ..] => {
            Err(HandshakeRefusal::ByPeer { code: RefusalCode::parse(code), detail: detail.join(" ") }.into())
        }
        _ => Err(Violation::BadAnswer(answer).into()),
    }
}

#[cfg(test)]
mod tests;
