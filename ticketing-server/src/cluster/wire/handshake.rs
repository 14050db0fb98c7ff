//! The text handshake of a peer connection, accepting and dialing side.

use super::{HandshakeRefusal, RefusalCode, Violation, WireError, VERSION};
use crate::cluster::types::{DomainId, NodeId};
use std::time::Duration;
use ticketing_proto::auth::{self, FrameMac, Label, Secret};
use ticketing_proto::frame::{decode_client, line_fields};
use ticketing_proto::limits::MAX_FRAME;
use ticketing_proto::{ClientFrame, Hex32};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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

/// The frame tags of a link authenticated by a peer token: the MAC of the
/// frames this side sends and of those it receives.
#[derive(Debug)]
pub struct Macs {
    /// Seals the frames this side sends.
    pub send: FrameMac,
    /// Opens the frames this side receives.
    pub recv: FrameMac,
}

/// Accepting side: greeting, AUTH check with the peer tokens (any of them),
/// `OK <domain|-> <node_id> <smac>` with the matching one. `tokens: None`:
/// no token is checked (the peers authenticate by mutual TLS alone, or
/// deliberately not at all): any well-formed AUTH is accepted and the proof
/// is all zeros, which a dialer with a token refuses. `Some(&[])` accepts
/// no peer. Returns the frame tags' keys when a token was checked.
pub async fn accept_handshake<R, W>(
    r: &mut R,
    w: &mut W,
    tokens: Option<&[Secret]>,
    own_id: NodeId,
    domain: Option<DomainId>,
    limit: Duration,
) -> Result<Option<Macs>, WireError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let snonce = auth::nonce(&mut ticketing_proto::entropy::ThreadOr(rand_core::OsRng));
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
    let (smac, macs) = match tokens {
        None => (Hex32([0; 32]), None),
        Some(tokens) => {
            let Some(token) =
                tokens.iter().find(|t| auth::verify(t.expose(), Label::PeerClient, &snonce, &cnonce, &cmac))
            else {
                let _ = w.write_all(b"E auth_failed\n").await;
                let _ = w.flush().await;
                return Err(HandshakeRefusal::AuthFailed.into());
            };
            let (dialer, acceptor) = FrameMac::pair(token.expose(), &snonce, &cnonce);
            (
                auth::mac(token.expose(), Label::PeerServer, &snonce, &cnonce),
                Some(Macs { send: acceptor, recv: dialer }),
            )
        }
    };
    w.write_all(format!("OK {} {own_id} {}\n", domain_text(domain), smac.to_hex_string()).as_bytes()).await?;
    w.flush().await?;
    Ok(macs)
}

/// Dialing side: answers the greeting, verifies the acceptor's proof, and
/// refuses an acceptor of another domain (`E wrong_domain`). Returns the
/// acceptor's NodeId and domain. `token: None`: no token (mutual TLS alone,
/// or deliberately unauthenticated): the MAC sent is all zeros and the
/// acceptor's proof is not checked. With a token, also the frame tags' keys.
pub async fn dial_handshake<R, W>(
    r: &mut R,
    w: &mut W,
    token: Option<&[u8]>,
    own_domain: Option<DomainId>,
) -> Result<(NodeId, Option<DomainId>, Option<Macs>), WireError>
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
    let cnonce = auth::nonce(&mut ticketing_proto::entropy::ThreadOr(rand_core::OsRng));
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
            let macs = token.map(|t| {
                let (dialer, acceptor) = FrameMac::pair(t, &snonce, &cnonce);
                Macs { send: dialer, recv: acceptor }
            });
            Ok((id, domain, macs))
        }
        ["E", code, detail @ ..] => {
            Err(HandshakeRefusal::ByPeer { code: RefusalCode::parse(code), detail: detail.join(" ") }.into())
        }
        _ => Err(Violation::BadAnswer(answer).into()),
    }
}
