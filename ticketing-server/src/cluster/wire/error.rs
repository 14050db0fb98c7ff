//! The failures of the peer protocol: [`WireError`] and its causes.

use super::VERSION;
use crate::cluster::types::DomainId;
use std::fmt;

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
    /// A frame whose tag does not match (docs/cluster-protocol.md, "Frame
    /// integrity"): forged, altered, replayed, reordered, or after a lost frame.
    BadTag,
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
            Violation::BadTag => {
                f.write_str("bad frame tag: a forged, altered, replayed or reordered frame (the link is closed)")
            }
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
    pub(super) fn by_peer(line: &str) -> HandshakeRefusal {
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
