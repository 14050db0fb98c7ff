//! The peer protocol on the wire: the text handshake and the
//! length-prefixed binary frames. The byte layout is in
//! `docs/cluster-protocol.md`.
//!
//! The handshake is the client port's (docs/protocol.md §3) with its own
//! greeting, labels and `OK` line: its `AUTH` line is decoded by the client
//! port's decoder ([`decode_client`]), lines are bounded by the same
//! [`MAX_FRAME`] (512 bytes, LF included).
//!
//! A frame is a 4-byte big-endian length `N` (1 ≤ N ≤ 16 MiB) followed by `N`
//! bytes of UTF-8 JSON: one [`Envelope`].

use super::types::{DomainId, NodeId, NodeInfo, TypeConfig};
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

/// Version of the envelope format.
pub const VERSION: u8 = 1;
/// Largest frame body.
pub const MAX_BODY: usize = 16 * 1024 * 1024;

impl Serialize for DomainId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for DomainId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<DomainId, D::Error> {
        let text = String::deserialize(d)?;
        DomainId::parse(&text).ok_or_else(|| serde::de::Error::custom("domain id must be 32 lowercase hex digits"))
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
    /// Its admin HTTP address (`--admin-listen`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
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
    /// Raft InstallSnapshot (one chunk).
    SnapshotReq(InstallSnapshotRequest<TypeConfig>),
    /// Join (docs/cluster-protocol.md §3).
    JoinReq(JoinRequest),
    /// Status.
    StatusReq,
    /// Bootstrap: join the new domain `domain` (docs/cluster-protocol.md §3).
    BootstrapReq(DomainId),
    /// Answer to `AppendReq`.
    AppendResp(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// Answer to `VoteReq`.
    VoteResp(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// Answer to `SnapshotReq`.
    SnapshotResp(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
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

/// Encodes one frame (length prefix + JSON).
pub fn encode(env: &Envelope) -> Result<Vec<u8>, WireError> {
    let json = serde_json::to_vec(env).map_err(|e| WireError::Protocol(format!("cannot encode: {e}")))?;
    if json.is_empty() || json.len() > MAX_BODY {
        return Err(WireError::Protocol(format!("frame of {} bytes is out of range", json.len())));
    }
    let mut out = Vec::with_capacity(4 + json.len());
    out.extend_from_slice(&(json.len() as u32).to_be_bytes());
    out.extend_from_slice(&json);
    Ok(out)
}

/// Reads one frame. `Ok(None)` at a clean end of stream before a frame.
/// The body buffer grows as bytes arrive (a length prefix alone never
/// allocates 16 MiB); a length out of range is refused before any body byte
/// is read.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Envelope>, WireError> {
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Ok(None);
    }
    read_rest(r, first[0]).await.map(Some)
}

/// [`read_frame`] where a frame, once its first byte arrived, must arrive
/// whole within `limit` (`--peer-frame-timeout`): a peer trickling an
/// endless frame is cut off with [`WireError::Timeout`]. Waiting for the
/// first byte is not limited (an idle connection is fine).
pub async fn read_frame_within<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: Duration,
) -> Result<Option<Envelope>, WireError> {
    let mut first = [0u8; 1];
    if r.read(&mut first).await? == 0 {
        return Ok(None);
    }
    match tokio::time::timeout(limit, read_rest(r, first[0])).await {
        Ok(result) => result.map(Some),
        Err(_) => Err(WireError::Timeout),
    }
}

/// The rest of a frame whose first length byte is `first`.
async fn read_rest<R: AsyncRead + Unpin>(r: &mut R, first: u8) -> Result<Envelope, WireError> {
    let mut len = [first, 0, 0, 0];
    r.read_exact(&mut len[1..]).await.map_err(|_| WireError::Protocol("stream ended inside a frame".into()))?;
    let n = u32::from_be_bytes(len) as usize;
    if n == 0 || n > MAX_BODY {
        return Err(WireError::Protocol(format!("frame length {n} out of range 1..=16MiB")));
    }
    let mut buf = Vec::with_capacity(n.min(64 * 1024));
    (&mut *r).take(n as u64).read_to_end(&mut buf).await?;
    if buf.len() < n {
        return Err(WireError::Protocol("stream ended inside a frame".into()));
    }
    decode_body(&buf)
}

/// Parses a frame body.
pub fn decode_body(buf: &[u8]) -> Result<Envelope, WireError> {
    serde_json::from_slice(buf).map_err(|e| WireError::Protocol(format!("bad message: {e}")))
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
    w.write_all(format!("TICKETING-PEER 1 {}\n", snonce.to_hex_string()).as_bytes()).await?;
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
        Ok(l) => l?,
        Err(_) => {
            let _ = w.write_all(b"E handshake_timeout\n").await;
            return Err(WireError::Timeout);
        }
    };
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
    let snonce = match greeting.as_slice() {
        [magic, version, n] if magic == "TICKETING-PEER" && version == "1" => Hex32::parse(n.as_bytes()).ok(),
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

    #[test]
    fn frame_round_trip_and_layout() {
        let env = Envelope { v: VERSION, id: 7, to: NodeId(42), domain: Some(DomainId(5)), body: Body::StatusReq };
        let bytes = encode(&env).unwrap();
        let n = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(n, bytes.len() - 4);
        let text = std::str::from_utf8(&bytes[4..]).unwrap();
        assert_eq!(text, r#"{"v":1,"id":7,"to":42,"domain":"00000000000000000000000000000005","body":"StatusReq"}"#);
        let back = decode_body(&bytes[4..]).unwrap();
        assert_eq!((back.v, back.id, back.to, back.domain), (1, 7, NodeId(42), Some(DomainId(5))));
    }

    #[tokio::test]
    async fn bad_frames_are_errors() {
        let mut zero: &[u8] = &[0, 0, 0, 0];
        assert!(matches!(read_frame(&mut zero).await, Err(WireError::Protocol(_))));
        let mut huge: &[u8] = &[0x01, 0x00, 0x00, 0x01];
        assert!(matches!(read_frame(&mut huge).await, Err(WireError::Protocol(_))));
        let mut junk: &[u8] = &[0, 0, 0, 3, b'a', b'b', b'c'];
        assert!(matches!(read_frame(&mut junk).await, Err(WireError::Protocol(_))));
        let mut empty: &[u8] = &[];
        assert!(matches!(read_frame(&mut empty).await, Ok(None)));
        let mut cut: &[u8] = &[0, 0, 0, 9, b'{'];
        assert!(matches!(read_frame(&mut cut).await, Err(WireError::Protocol(_))));
    }

    #[tokio::test]
    async fn an_endless_frame_times_out() {
        let (mut a, b) = duplex(64);
        let mut b = b;
        // A length prefix of 1000 bytes, then only 3 of them, then silence.
        a.write_all(&[0, 0, 0x03, 0xe8, b'{', b'"', b'v']).await.unwrap();
        let r = read_frame_within(&mut b, Duration::from_millis(100)).await;
        assert!(matches!(r, Err(WireError::Timeout)), "{r:?}");
        drop(a);
        // An idle connection is not a frame: only the started frame is timed.
        let (a2, mut b2) = duplex(64);
        let idle =
            tokio::time::timeout(Duration::from_millis(200), read_frame_within(&mut b2, Duration::from_millis(50)))
                .await;
        assert!(idle.is_err(), "waiting for the first byte is not limited");
        drop(a2);
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
