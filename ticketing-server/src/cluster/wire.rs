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

/// Byte vectors as serde bytes (postcard: a varint length, then the bytes
/// as they are), not as a sequence of numbers.
mod raw_bytes {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64 * 1024));
                while let Some(b) = seq.next_element()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// An `InstallSnapshotRequest` whose data travels as raw bytes.
mod snapshot_chunk {
    use super::super::types::{NodeId, NodeInfo, TypeConfig};
    use openraft::raft::InstallSnapshotRequest;
    use openraft::{SnapshotMeta, Vote};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    struct ChunkRef<'a> {
        vote: &'a Vote<NodeId>,
        meta: &'a SnapshotMeta<NodeId, NodeInfo>,
        offset: u64,
        #[serde(with = "super::raw_bytes")]
        data: &'a [u8],
        done: bool,
    }

    #[derive(Deserialize)]
    struct Chunk {
        vote: Vote<NodeId>,
        meta: SnapshotMeta<NodeId, NodeInfo>,
        offset: u64,
        #[serde(deserialize_with = "super::raw_bytes::deserialize")]
        data: Vec<u8>,
        done: bool,
    }

    pub fn serialize<S: Serializer>(r: &InstallSnapshotRequest<TypeConfig>, s: S) -> Result<S::Ok, S::Error> {
        ChunkRef { vote: &r.vote, meta: &r.meta, offset: r.offset, data: &r.data, done: r.done }.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<InstallSnapshotRequest<TypeConfig>, D::Error> {
        let c = Chunk::deserialize(d)?;
        Ok(InstallSnapshotRequest { vote: c.vote, meta: c.meta, offset: c.offset, data: c.data, done: c.done })
    }
}

/// A `Result` whose error travels as JSON text inside the binary frame:
/// openraft's errors carry `AnyError`s that nest without bound, and a
/// crafted frame must not overflow the stack (serde_json stops at 128
/// levels). Errors are rare; the `Ok` side stays binary.
mod json_err {
    use serde::de::{DeserializeOwned, Error};
    use serde::ser::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize)]
    enum WireRef<'a, T> {
        Ok(&'a T),
        Err(#[serde(with = "super::raw_bytes")] &'a [u8]),
    }

    #[derive(Deserialize)]
    enum Wire<T> {
        Ok(T),
        Err(#[serde(deserialize_with = "super::raw_bytes::deserialize")] Vec<u8>),
    }

    pub fn serialize<T: Serialize, E: Serialize, S: Serializer>(r: &Result<T, E>, s: S) -> Result<S::Ok, S::Error> {
        match r {
            Ok(t) => WireRef::Ok(t).serialize(s),
            Err(e) => {
                let text = serde_json::to_vec(e).map_err(S::Error::custom)?;
                WireRef::<T>::Err(&text).serialize(s)
            }
        }
    }

    pub fn deserialize<'de, T, E, D>(d: D) -> Result<Result<T, E>, D::Error>
    where
        T: Deserialize<'de>,
        E: DeserializeOwned,
        D: Deserializer<'de>,
    {
        match Wire::<T>::deserialize(d)? {
            Wire::Ok(t) => Ok(Ok(t)),
            Wire::Err(text) => serde_json::from_slice(&text).map(Err).map_err(D::Error::custom),
        }
    }
}

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

/// A peer-protocol failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// I/O error.
    Io(std::io::ErrorKind),
    /// The connection closed in the middle of the handshake.
    Disconnected,
    /// The peer broke the protocol.
    Protocol(String),
    /// The handshake was refused (`E <code>`).
    Refused(String),
    /// Timed out.
    Timeout,
    /// The TLS handshake failed (a plain-TCP peer, or a certificate the
    /// peer CA did not sign or that does not name the peer's host).
    Tls(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Io(kind) => write!(f, "peer i/o: {kind}"),
            WireError::Disconnected => f.write_str("connection closed during the handshake"),
            WireError::Protocol(e) => write!(f, "peer protocol violation: {e}"),
            WireError::Refused(e) => write!(f, "peer refused the handshake: E {e}"),
            WireError::Timeout => f.write_str("peer timed out"),
            WireError::Tls(e) => write!(f, "peer TLS handshake failed: {e}"),
        }
    }
}

impl std::error::Error for WireError {}

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
        return Err(WireError::Protocol(format!("cannot encode: {e}")));
    }
    let n = out.len() - start - 4;
    if n == 0 || n > MAX_BODY {
        out.truncate(start);
        return Err(WireError::Protocol(format!("frame of {n} bytes is out of range")));
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
        Ok((_, rest)) => Err(WireError::Protocol(format!("bad message: {} bytes after the envelope", rest.len()))),
        Err(e) => Err(WireError::Protocol(format!("bad message: {e}"))),
    }
}

/// The length a frame header announces, checked against `1..=MAX_BODY`.
fn frame_len(header: [u8; 4]) -> Result<usize, WireError> {
    let n = u32::from_be_bytes(header) as usize;
    if n == 0 || n > MAX_BODY {
        return Err(WireError::Protocol(format!("frame length {n} out of range 1..=16MiB")));
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
}

/// Read size while no frame is started, and the most the buffer grows by
/// in one read: a length prefix alone never allocates 16 MiB.
const READ_CHUNK: usize = 64 * 1024;

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Reads frames from `r`.
    pub fn new(r: R) -> FrameReader<R> {
        FrameReader { r, buf: BytesMut::with_capacity(8 * 1024), deadline: None }
    }

    /// The next frame; `Ok(None)` at a clean end of stream between frames.
    /// Once a frame's first byte arrived, the frame must be whole within
    /// `limit` ([`WireError::Timeout`]); waiting for a first byte is not
    /// limited (an idle connection is fine). A length out of range is
    /// refused before its body is read. Cancel-safe: dropping the future
    /// loses nothing.
    pub async fn next(&mut self, limit: Duration) -> Result<Option<Envelope>, WireError> {
        loop {
            if let Some(env) = self.take()? {
                return Ok(Some(env));
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
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(WireError::Protocol("stream ended inside a frame".into()))
                };
            }
        }
    }

    /// A whole frame from the buffer, if there is one; otherwise makes room
    /// for the rest of the started one.
    fn take(&mut self) -> Result<Option<Envelope>, WireError> {
        let need = if self.buf.len() >= 4 {
            let n = frame_len([self.buf[0], self.buf[1], self.buf[2], self.buf[3]])?;
            if self.buf.len() >= 4 + n {
                let env = decode_body(&self.buf[4..4 + n]);
                self.buf.advance(4 + n);
                self.deadline = None;
                if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
                    // Do not keep a snapshot chunk's buffer on an idle link.
                    self.buf = BytesMut::with_capacity(8 * 1024);
                }
                return env.map(Some);
            }
            4 + n - self.buf.len()
        } else {
            16 * 1024
        };
        let spare = self.buf.capacity() - self.buf.len();
        if spare < need.min(READ_CHUNK) {
            self.buf.reserve(need.min(READ_CHUNK));
        }
        Ok(None)
    }
}

/// Reads one frame straight from `r` (no read-ahead: bytes after the frame
/// stay unread). `Ok(None)` at a clean end of stream before a frame.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Envelope>, WireError> {
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Ok(None);
    }
    let mut len = [first[0], 0, 0, 0];
    r.read_exact(&mut len[1..]).await.map_err(|_| WireError::Protocol("stream ended inside a frame".into()))?;
    let n = frame_len(len)?;
    let mut buf = Vec::with_capacity(n.min(READ_CHUNK));
    (&mut *r).take(n as u64).read_to_end(&mut buf).await?;
    if buf.len() < n {
        return Err(WireError::Protocol("stream ended inside a frame".into()));
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
            WireError::Protocol("handshake line too long".into())
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
        _ => Err(WireError::Protocol(format!("malformed handshake line {:?}", String::from_utf8_lossy(&line)))),
    }
}

fn domain_text(d: Option<DomainId>) -> String {
    d.map(|d| d.to_string()).unwrap_or_else(|| "-".to_owned())
}

/// Accepting side: greeting, AUTH check with the peer tokens (any of them;
/// none = the empty token), `OK <domain|-> <node_id> <smac>` with the
/// matching one.
pub async fn accept_handshake<R, W>(
    r: &mut R,
    w: &mut W,
    tokens: &[Secret],
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
            return Err(WireError::Protocol(
                "expected AUTH, got a TLS ClientHello: the peer uses --peer-tls-*, this node does not".into(),
            ));
        }
        read_raw_line(r).await
    };
    let line = match tokio::time::timeout(limit, first_line).await {
        Ok(Err(WireError::Disconnected)) => {
            return Err(WireError::Protocol(format!(
                "the dialer closed the connection after our greeting \"TICKETING-PEER {VERSION}\" without AUTH \
                 (a node speaking another peer protocol version does this: every node must run the same version)"
            )))
        }
        Ok(l) => l?,
        Err(_) => {
            let _ = w.write_all(b"E handshake_timeout\n").await;
            return Err(WireError::Timeout);
        }
    };
    // A dialer that refuses our greeting says why (`E wrong_version …`).
    if let Some(reason) = line.strip_prefix(b"E ") {
        let reason = String::from_utf8_lossy(reason.trim_ascii_end()).into_owned();
        return Err(WireError::Refused(format!("the dialer refused our greeting: {reason}")));
    }
    // The AUTH line of the client port's handshake, byte for byte.
    let Ok(Some((ClientFrame::Auth { cnonce, cmac }, _))) = decode_client(&line) else {
        let _ = w.write_all(b"E bad_frame\n").await;
        let shown: String = line.iter().take(80).flat_map(|b| std::ascii::escape_default(*b)).map(char::from).collect();
        return Err(WireError::Protocol(format!("expected AUTH, got \"{shown}\"")));
    };
    let empty = [Secret::default()];
    let tokens = if tokens.is_empty() { &empty[..] } else { tokens };
    let Some(token) = tokens.iter().find(|t| auth::verify(t.expose(), Label::PeerClient, &snonce, &cnonce, &cmac))
    else {
        let _ = w.write_all(b"E auth_failed\n").await;
        let _ = w.flush().await;
        return Err(WireError::Refused("auth_failed".into()));
    };
    let smac = auth::mac(token.expose(), Label::PeerServer, &snonce, &cnonce);
    w.write_all(format!("OK {} {own_id} {}\n", domain_text(domain), smac.to_hex_string()).as_bytes()).await?;
    w.flush().await?;
    Ok(())
}

/// Dialing side: answers the greeting, verifies the acceptor's proof, and
/// refuses an acceptor of another domain (`E wrong_domain`). Returns the
/// acceptor's NodeId and domain.
pub async fn dial_handshake<R, W>(
    r: &mut R,
    w: &mut W,
    token: &[u8],
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
            return Err(WireError::Refused(format!(
                "wrong_version: the peer speaks peer protocol {v}, this node {VERSION}; \
                 every node of a cluster must run the same version"
            )));
        }
        [magic, _, n] if magic == "TICKETING-PEER" => Hex32::parse(n.as_bytes()).ok(),
        _ => None,
    }
    .ok_or_else(|| WireError::Protocol(format!("bad peer greeting {greeting:?}")))?;
    let cnonce = auth::nonce(&mut rand_core::OsRng);
    let cmac = auth::mac(token, Label::PeerClient, &snonce, &cnonce);
    w.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string()).as_bytes()).await?;
    w.flush().await?;
    let answer = read_fields(r).await?;
    let parts: Vec<&str> = answer.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["OK", domain, id, smac] => {
            let domain = match *domain {
                "-" => None,
                d => Some(DomainId::parse(d).ok_or_else(|| WireError::Protocol(format!("bad domain {d:?}")))?),
            };
            let id: NodeId = id.parse().map_err(|_| WireError::Protocol(format!("bad node id {id:?}")))?;
            let smac = Hex32::parse(smac.as_bytes()).map_err(|_| WireError::Protocol("bad smac".into()))?;
            if !auth::verify(token, Label::PeerServer, &snonce, &cnonce, &smac) {
                return Err(WireError::Refused("auth_failed (the peer's proof does not match)".into()));
            }
            if let (Some(mine), Some(theirs)) = (own_domain, domain) {
                if mine != theirs {
                    let _ = w.write_all(b"E wrong_domain\n").await;
                    return Err(WireError::Refused(format!("wrong_domain (peer is in {theirs}, we are in {mine})")));
                }
            }
            Ok((id, domain))
        }
        ["E", code, ..] => Err(WireError::Refused((*code).to_owned())),
        _ => Err(WireError::Protocol(format!("bad handshake answer {answer:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{duplex, split, BufReader};

    use crate::locks::{Command, NextHolder};
    use openraft::error::Fatal;
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, SnapshotMeta, StoredMembership, Vote};
    use openraft::{StorageError, StorageIOError};
    use std::collections::{BTreeMap, BTreeSet};
    use ticketing_proto::{Key, Owner, Token};

    fn log_id(term: u64, index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(term, NodeId(11)), index)
    }

    fn membership() -> Membership<NodeId, NodeInfo> {
        let nodes = BTreeMap::from([
            (NodeId(11), NodeInfo { peer: "127.0.0.1:1".into(), client: "127.0.0.1:2".into(), admin: None }),
            (
                NodeId(12),
                NodeInfo {
                    peer: "127.0.0.1:3".into(),
                    client: "127.0.0.1:4".into(),
                    admin: Some("127.0.0.1:5".into()),
                },
            ),
        ]);
        Membership::new(vec![BTreeSet::from([NodeId(11), NodeId(12)])], nodes)
    }

    fn entries() -> Vec<Entry<TypeConfig>> {
        let key = || Key::new("orders/42").unwrap();
        let owner = || Owner::new("worker-7").unwrap();
        let commands = [
            Command::Grant { key: key(), owner: owner(), lease_s: 30, micros: 1_700_000_000_000_000, dt: 5 },
            Command::Release {
                key: key(),
                owner: owner(),
                token: Token::new(9).unwrap(),
                next: Some(NextHolder { owner: Owner::new("w8").unwrap(), lease_s: 1 }),
                micros: 1,
                dt: 6,
            },
            Command::Expire {
                key: key(),
                owner: owner(),
                token: Token::new(10).unwrap(),
                next: None,
                micros: 2,
                dt: 7,
            },
            Command::Tick { dt: u64::MAX },
        ];
        let mut out: Vec<Entry<TypeConfig>> = commands
            .into_iter()
            .enumerate()
            .map(|(i, c)| Entry { log_id: log_id(3, i as u64 + 1), payload: EntryPayload::Normal(c) })
            .collect();
        out.push(Entry { log_id: log_id(3, 5), payload: EntryPayload::Membership(membership()) });
        out.push(Entry { log_id: log_id(3, 6), payload: EntryPayload::Blank });
        out
    }

    fn fatal() -> RaftError<NodeId> {
        let io = std::io::Error::other("disk on fire");
        RaftError::Fatal(Fatal::StorageError(StorageError::from(StorageIOError::read_state_machine(&io))))
    }

    /// One envelope of every kind, with real openraft values.
    fn samples() -> Vec<Envelope> {
        let vote = Vote::new_committed(3, NodeId(11));
        let meta = SnapshotMeta {
            last_log_id: Some(log_id(3, 6)),
            last_membership: StoredMembership::new(Some(log_id(3, 5)), membership()),
            snapshot_id: "3-6-1".into(),
        };
        let status = |admin| PeerStatus {
            node_id: NodeId(12),
            domain: None,
            client: "127.0.0.1:4".into(),
            admin,
            initialized: true,
            role: "follower".into(),
            leader: Some(NodeId(11)),
        };
        let bodies = vec![
            Body::AppendReq(AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id(2, 0)),
                entries: entries(),
                leader_commit: Some(log_id(3, 2)),
            }),
            Body::AppendReq(AppendEntriesRequest { vote, prev_log_id: None, entries: vec![], leader_commit: None }),
            Body::VoteReq(VoteRequest::new(vote, Some(log_id(3, 6)))),
            Body::SnapshotReq(InstallSnapshotRequest {
                vote,
                meta,
                offset: 1 << 40,
                data: (0..=255u8).cycle().take(1000).collect(),
                done: true,
            }),
            Body::JoinReq(JoinRequest {
                node_id: NodeId(13),
                node: NodeInfo { peer: "p".into(), client: "c".into(), admin: None },
            }),
            Body::StatusReq,
            Body::BootstrapReq(DomainId(u128::MAX)),
            Body::AppendResp(Ok(AppendEntriesResponse::PartialSuccess(Some(log_id(3, 4))))),
            Body::AppendResp(Ok(AppendEntriesResponse::HigherVote(vote))),
            Body::AppendResp(Err(fatal())),
            Body::VoteResp(Ok(VoteResponse { vote, vote_granted: true, last_log_id: None })),
            Body::VoteResp(Err(RaftError::Fatal(Fatal::Stopped))),
            Body::SnapshotResp(Ok(InstallSnapshotResponse { vote })),
            Body::SnapshotResp(Err(RaftError::Fatal(Fatal::Panicked))),
            Body::JoinResp(JoinAnswer::Accepted(DomainId(7))),
            Body::JoinResp(JoinAnswer::Refused("no".into())),
            Body::StatusResp(status(None)),
            Body::StatusResp(status(Some("127.0.0.1:9".into()))),
            Body::BootstrapResp(BootstrapAnswer::AlreadyInDomain(DomainId(1))),
            Body::Refused(Refusal::WrongTarget { actual: NodeId(1) }),
            Body::Refused(Refusal::BadVersion),
        ];
        bodies
            .into_iter()
            .enumerate()
            .map(|(i, body)| Envelope {
                v: VERSION,
                id: i as u64 * 1_000_003,
                to: NodeId(12),
                domain: (i % 2 == 0).then_some(DomainId(0x0123_4567_89ab_cdef_0011_2233_4455_6677)),
                body,
            })
            .collect()
    }

    #[test]
    fn every_message_round_trips() {
        for env in samples() {
            let bytes = encode(&env).unwrap();
            let n = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
            assert_eq!(n, bytes.len() - 4);
            let back = decode_body(&bytes[4..]).unwrap_or_else(|e| panic!("{e}: {env:?}"));
            assert_eq!(format!("{back:?}"), format!("{env:?}"));
        }
    }

    #[test]
    fn frame_layout() {
        let env = Envelope { v: VERSION, id: 7, to: NodeId(42), domain: Some(DomainId(5)), body: Body::StatusReq };
        // v, id, to (varints), domain: Some + u128 varint, body: variant 4 (StatusReq).
        assert_eq!(encode(&env).unwrap(), [0, 0, 0, 6, 2, 7, 42, 1, 5, 4]);
        let env = Envelope { v: VERSION, id: 300, to: NodeId(1), domain: None, body: Body::StatusReq };
        assert_eq!(encode(&env).unwrap(), [0, 0, 0, 6, 2, 0xac, 0x02, 1, 0, 4]);
    }

    #[test]
    fn snapshot_data_travels_as_raw_bytes() {
        let env = samples().into_iter().find(|e| matches!(e.body, Body::SnapshotReq(_))).unwrap();
        let data: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let bytes = encode(&env).unwrap();
        // A varint length (1000 = e8 07), then the bytes as they are.
        let mut raw = vec![0xe8, 0x07];
        raw.extend_from_slice(&data);
        assert!(bytes.windows(raw.len()).any(|w| w == raw), "the chunk is not one raw run of bytes");
        assert!(bytes.len() < data.len() + 200, "{} bytes for a 1000-byte chunk", bytes.len());
    }

    #[test]
    fn binary_frames_are_smaller_than_json() {
        for env in samples() {
            let binary = encode(&env).unwrap().len() - 4;
            let json = serde_json::to_vec(&env).unwrap().len();
            assert!(binary < json, "{binary} >= {json} for {env:?}");
        }
    }

    #[test]
    fn truncated_trailing_and_garbage_bodies_are_errors() {
        for env in samples() {
            let bytes = encode(&env).unwrap();
            let body = &bytes[4..];
            for cut in 0..body.len() {
                assert!(
                    matches!(decode_body(&body[..cut]), Err(WireError::Protocol(_))),
                    "a body cut at {cut} of {} decoded: {env:?}",
                    body.len()
                );
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert!(matches!(decode_body(&longer), Err(WireError::Protocol(e)) if e.contains("after the envelope")));
        }
        // Deterministic garbage: never a panic (an error, or some envelope).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..2000usize {
            let junk: Vec<u8> = (0..len % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = decode_body(&junk);
        }
        // A JSON frame of peer protocol 1 is refused, not misread.
        let old = br#"{"v":1,"id":7,"to":42,"domain":null,"body":"StatusReq"}"#;
        assert!(matches!(decode_body(old), Err(WireError::Protocol(_))));
    }

    #[test]
    fn a_deeply_nested_error_is_refused_not_a_stack_overflow() {
        // openraft's AnyError nests through `source` without bound; the error
        // text is JSON, whose decoder stops at 128 levels.
        let depth = 200_000;
        let mut json = String::from(
            r#"{"Fatal":{"StorageError":{"IO":{"source":{"subject":"Store","verb":"Read","backtrace":null,"source":"#,
        );
        for _ in 0..depth {
            json.push_str(r#"{"typ":null,"msg":"x","context":[],"backtrace":null,"source":"#);
        }
        json.push_str("null");
        json.push_str(&"}".repeat(depth + 5));
        let env = Envelope { v: VERSION, id: 1, to: NodeId(1), domain: None, body: Body::StatusReq };
        let mut body = encode(&env).unwrap()[4..].to_vec();
        // Body variant 6 = AppendResp, Result variant 1 = Err, then the text as bytes.
        body.pop();
        body.extend_from_slice(&[6, 1]);
        let mut n = json.len();
        while n >= 0x80 {
            body.push((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        body.push(n as u8);
        body.extend_from_slice(json.as_bytes());
        assert!(body.len() <= MAX_BODY);
        // (postcard does not keep a custom error's text.)
        let err = decode_body(&body).unwrap_err();
        assert!(matches!(&err, WireError::Protocol(e) if e.contains("bad message")), "{err:?}");
        // The same frame without the nesting decodes.
        let flat = r#"{"Fatal":"Panicked"}"#;
        let mut ok = encode(&env).unwrap()[4..].to_vec();
        ok.pop();
        ok.extend_from_slice(&[6, 1, flat.len() as u8]);
        ok.extend_from_slice(flat.as_bytes());
        let back = decode_body(&ok);
        assert!(
            matches!(&back, Ok(Envelope { body: Body::AppendResp(Err(RaftError::Fatal(Fatal::Panicked))), .. })),
            "{back:?} {:?}",
            serde_json::to_string(&RaftError::<NodeId>::Fatal(Fatal::Panicked))
        );
    }

    #[tokio::test]
    async fn bad_frames_are_errors() {
        let mut zero: &[u8] = &[0, 0, 0, 0];
        assert!(matches!(read_frame(&mut zero).await, Err(WireError::Protocol(_))));
        let mut huge: &[u8] = &[0x01, 0x00, 0x00, 0x01];
        assert!(matches!(read_frame(&mut huge).await, Err(WireError::Protocol(_))));
        let mut junk: &[u8] = &[0, 0, 0, 3, 0xff, 0xff, 0xff];
        assert!(matches!(read_frame(&mut junk).await, Err(WireError::Protocol(_))));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty).await, Ok(None)));
        let mut cut: &[u8] = &[0, 0, 0, 9, 2];
        assert!(matches!(read_frame(&mut cut).await, Err(WireError::Protocol(_))));
        // The same through the connection reader.
        let t = Duration::from_secs(5);
        for (bytes, clean_end) in [
            (&[0u8, 0, 0, 0][..], false),
            (&[0x01, 0x00, 0x00, 0x01], false),
            (&[0, 0, 0, 3, 0xff, 0xff, 0xff], false),
            (&[0, 0, 0, 9, 2], false),
            (&[0, 0], false),
            (&[], true),
        ] {
            let got = FrameReader::new(bytes).next(t).await;
            if clean_end {
                assert!(matches!(got, Ok(None)), "{bytes:?}: {got:?}");
            } else {
                assert!(matches!(got, Err(WireError::Protocol(_))), "{bytes:?}: {got:?}");
            }
        }
    }

    #[tokio::test]
    async fn the_reader_splits_batches_and_joins_pieces() {
        let envs = samples();
        let mut stream = Vec::new();
        for env in &envs {
            encode_into(env, &mut stream).unwrap();
        }
        // All frames in one read.
        let mut reader = FrameReader::new(&stream[..]);
        for env in &envs {
            let got = reader.next(Duration::from_secs(5)).await.unwrap().unwrap();
            assert_eq!(format!("{got:?}"), format!("{env:?}"));
        }
        assert!(reader.next(Duration::from_secs(5)).await.unwrap().is_none());
        // One byte at a time, the reader's future dropped over and over
        // (cancel safety): every frame still arrives whole.
        let (mut a, b) = duplex(1);
        let writer = tokio::spawn(async move {
            a.write_all(&stream).await.unwrap();
        });
        let mut reader = FrameReader::new(b);
        let mut got = Vec::new();
        let mut cancelled = 0;
        while got.len() < envs.len() {
            match tokio::time::timeout(Duration::from_micros(50), reader.next(Duration::from_secs(30))).await {
                Ok(frame) => got.push(frame.unwrap().unwrap()),
                Err(_) => cancelled += 1,
            }
            assert!(cancelled < 10_000_000);
        }
        writer.await.unwrap();
        for (g, e) in got.iter().zip(&envs) {
            assert_eq!(format!("{g:?}"), format!("{e:?}"));
        }
        assert!(reader.next(Duration::from_secs(5)).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn an_endless_frame_times_out() {
        let (mut a, b) = duplex(64);
        let mut reader = FrameReader::new(b);
        // A length prefix of 1000 bytes, then only 3 of them, then silence.
        a.write_all(&[0, 0, 0x03, 0xe8, 2, 7, 1]).await.unwrap();
        let r = reader.next(Duration::from_millis(100)).await;
        assert!(matches!(r, Err(WireError::Timeout)), "{r:?}");
        drop(a);
        // An idle connection is not a frame: only the started frame is timed.
        let (a2, b2) = duplex(64);
        let mut reader = FrameReader::new(b2);
        let idle = tokio::time::timeout(Duration::from_millis(200), reader.next(Duration::from_millis(50))).await;
        assert!(idle.is_err(), "waiting for the first byte is not limited");
        drop(a2);
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_its_body() {
        // Only the prefix is ever sent: the reader must not wait for 16 MiB.
        let (mut a, b) = duplex(64);
        a.write_all(&(MAX_BODY as u32 + 1).to_be_bytes()).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), FrameReader::new(b).next(Duration::from_secs(60))).await;
        assert!(matches!(&r, Ok(Err(WireError::Protocol(e))) if e.contains("out of range")), "{r:?}");
        drop(a);
    }

    async fn pair(
        server_token: &'static [u8],
        client_token: &'static [u8],
        server_domain: Option<DomainId>,
        client_domain: Option<DomainId>,
    ) -> (Result<(), WireError>, Result<(NodeId, Option<DomainId>), WireError>) {
        let (a, b) = duplex(4096);
        let (ar, mut aw) = split(a);
        let (br, mut bw) = split(b);
        let server = tokio::spawn(async move {
            let mut ar = BufReader::new(ar);
            let tokens = [Secret::new(server_token.to_vec())];
            accept_handshake(&mut ar, &mut aw, &tokens, NodeId(99), server_domain, Duration::from_secs(2)).await
        });
        let mut br = BufReader::new(br);
        let c = dial_handshake(&mut br, &mut bw, client_token, client_domain).await;
        drop(bw);
        drop(br);
        (server.await.unwrap(), c)
    }

    #[tokio::test]
    async fn handshake_paths() {
        let (s, c) = pair(b"t", b"t", Some(DomainId(1)), None).await;
        assert_eq!(s, Ok(()));
        assert_eq!(c, Ok((NodeId(99), Some(DomainId(1)))));
        let (s, c) = pair(b"", b"", None, Some(DomainId(3))).await;
        assert_eq!((s, c), (Ok(()), Ok((NodeId(99), None))));
        let (s, c) = pair(b"t", b"u", None, None).await;
        assert_eq!(s, Err(WireError::Refused("auth_failed".into())));
        assert_eq!(c, Err(WireError::Refused("auth_failed".into())));
        let (_, c) = pair(b"t", b"t", Some(DomainId(1)), Some(DomainId(2))).await;
        assert!(matches!(c, Err(WireError::Refused(e)) if e.starts_with("wrong_domain")));
    }

    #[tokio::test]
    async fn another_peer_protocol_version_is_refused_with_a_reason() {
        // A dialer of this version meets an acceptor of version 1 (JSON frames).
        let (a, b) = duplex(4096);
        let (ar, mut aw) = split(a);
        let old_acceptor = tokio::spawn(async move {
            let mut ar = BufReader::new(ar);
            aw.write_all(format!("TICKETING-PEER 1 {}\n", "ab".repeat(32)).as_bytes()).await.unwrap();
            let mut line = String::new();
            ar.read_line(&mut line).await.unwrap();
            line
        });
        let (br, mut bw) = split(b);
        let mut br = BufReader::new(br);
        let got = dial_handshake(&mut br, &mut bw, b"t", None).await;
        assert!(matches!(&got, Err(WireError::Refused(e)) if e.starts_with("wrong_version")), "{got:?}");
        // The old acceptor is told why (it logs the line it got instead of AUTH).
        assert_eq!(old_acceptor.await.unwrap(), "E wrong_version: this node speaks peer protocol 2\n");

        // An acceptor of this version meets a dialer that refuses its greeting…
        let (a, b) = duplex(4096);
        let (ar, mut aw) = split(a);
        let (br, mut bw) = split(b);
        let acceptor = tokio::spawn(async move {
            let mut ar = BufReader::new(ar);
            accept_handshake(&mut ar, &mut aw, &[], NodeId(1), None, Duration::from_secs(5)).await
        });
        let mut br = BufReader::new(br);
        let mut greeting = String::new();
        br.read_line(&mut greeting).await.unwrap();
        assert!(greeting.starts_with("TICKETING-PEER 2 "), "{greeting}");
        bw.write_all(b"E wrong_version: this node speaks peer protocol 3\n").await.unwrap();
        let got = acceptor.await.unwrap();
        assert!(matches!(&got, Err(WireError::Refused(e)) if e.contains("protocol 3")), "{got:?}");

        // …or closes at it without a word (what a version-1 node does).
        let (a, b) = duplex(4096);
        let (ar, mut aw) = split(a);
        let acceptor = tokio::spawn(async move {
            let mut ar = BufReader::new(ar);
            accept_handshake(&mut ar, &mut aw, &[], NodeId(1), None, Duration::from_secs(5)).await
        });
        let mut b = BufReader::new(b);
        let mut greeting = String::new();
        b.read_line(&mut greeting).await.unwrap();
        drop(b);
        let got = acceptor.await.unwrap();
        assert!(matches!(&got, Err(WireError::Protocol(e)) if e.contains("peer protocol version")), "{got:?}");
    }

    #[tokio::test]
    async fn during_a_rotation_both_tokens_are_accepted_and_the_proof_uses_the_match() {
        for dialer in [&b"old"[..], b"new"] {
            let (a, b) = duplex(4096);
            let (ar, mut aw) = split(a);
            let (br, mut bw) = split(b);
            let server = tokio::spawn(async move {
                let mut ar = BufReader::new(ar);
                let tokens = [Secret::from("new"), Secret::from("old")];
                accept_handshake(&mut ar, &mut aw, &tokens, NodeId(7), None, Duration::from_secs(2)).await
            });
            let mut br = BufReader::new(br);
            assert_eq!(dial_handshake(&mut br, &mut bw, dialer, None).await, Ok((NodeId(7), None)));
            assert_eq!(server.await.unwrap(), Ok(()));
        }
    }
}
