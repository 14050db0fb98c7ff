//! Bytes to frames: the line grammar (nom) and the field rules.

use super::*;
use crate::field::visible;
use bytes::Bytes;
use nom::bytes::complete::{tag, take_while1};
use nom::combinator::all_consuming;
use nom::multi::separated_list1;
use nom::IResult;
use nom::Parser;

fn bad(why: &'static str) -> FrameError {
    FrameError::BadFrame(why)
}

/// Finds the end of the first line. `Ok(None)`: incomplete; `Ok(Some(n))`:
/// the line is `buf[..n]` and the LF is at `buf[n]`.
fn find_line(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    let window = &buf[..buf.len().min(MAX_FRAME)];
    match window.iter().position(|&b| b == b'\n') {
        Some(n) => Ok(Some(n)),
        None if buf.len() >= MAX_FRAME => Err(FrameError::TooLarge),
        None => Ok(None),
    }
}

/// `field (SP field)*` where a field is 1+ bytes in 0x21–0x7E, consuming the
/// whole line. Any other byte (CR, TAB, a second SP, a trailing SP, a control
/// or non-ASCII byte) makes the line malformed.
fn fields(line: &[u8]) -> IResult<&[u8], Vec<&[u8]>> {
    all_consuming(separated_list1(tag(&b" "[..]), take_while1(visible))).parse(line)
}

fn split_fields(line: &[u8]) -> Result<Vec<&[u8]>, FrameError> {
    match fields(line) {
        Ok((_, fields)) => Ok(fields),
        Err(_) if line.is_empty() => Err(bad("empty line")),
        Err(_) => Err(bad("fields must be visible ASCII separated by single spaces")),
    }
}

/// One line's fields and the bytes the line used, LF included.
pub type LineFields<'a> = (Vec<&'a [u8]>, usize);

/// The first complete line of `buf` split into its fields, and the bytes it
/// used (LF included): the line rules of docs/protocol.md §2 (at most
/// [`MAX_FRAME`] bytes, visible-ASCII fields separated by single spaces)
/// without any frame grammar. `Ok(None)` while the line is incomplete. For
/// line-based exchanges that are not client frames, e.g. the peer handshake.
pub fn line_fields(buf: &[u8]) -> Result<Option<LineFields<'_>>, FrameError> {
    let Some(n) = find_line(buf)? else { return Ok(None) };
    Ok(Some((split_fields(&buf[..n])?, n + 1)))
}

/// A decimal without sign or leading zeros that fits a u64.
fn parse_u64(field: &[u8]) -> Result<u64, FrameError> {
    if field.is_empty() || field.len() > 20 || !field.iter().all(u8::is_ascii_digit) {
        return Err(bad("number expected"));
    }
    if field.len() > 1 && field[0] == b'0' {
        return Err(bad("leading zero"));
    }
    let mut n: u64 = 0;
    for &d in field {
        n = n.checked_mul(10).and_then(|n| n.checked_add(u64::from(d - b'0'))).ok_or(bad("number too large"))?;
    }
    Ok(n)
}

fn parse_id(field: &[u8]) -> Result<RequestId, FrameError> {
    parse_u64(field).map(RequestId)
}

fn parse_wait(field: &[u8]) -> Result<u8, FrameError> {
    let n = parse_u64(field)?;
    u8::try_from(n).map_err(|_| bad("wait out of range 0-255"))
}

// The message below names the range of `limits`.
const _: () = assert!(MIN_LEASE == 1 && MAX_LEASE == 250);

fn parse_lease(field: &[u8]) -> Result<u8, FrameError> {
    match parse_u64(field)? {
        n if (u64::from(MIN_LEASE)..=u64::from(MAX_LEASE)).contains(&n) => Ok(n as u8),
        _ => Err(bad("lease out of range 1-250")),
    }
}

// The messages below name the ranges of `limits`.
const _: () = assert!(MAX_PERMITS == 65535);

/// `n` of a counted acquire: 1–65535.
fn parse_permits(field: &[u8]) -> Result<u16, FrameError> {
    match u16::try_from(parse_u64(field)?) {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(bad("n out of range 1-65535")),
    }
}

/// A slot is below some `n`, so at most 65534.
fn parse_slot(field: &[u8]) -> Result<u16, FrameError> {
    match u16::try_from(parse_u64(field)?) {
        Ok(slot) if slot < MAX_PERMITS => Ok(slot),
        _ => Err(bad("slot out of range 0-65534")),
    }
}

fn parse_token(field: &[u8]) -> Result<Token, FrameError> {
    Token::new(parse_u64(field)?).map_err(FrameError::from)
}

fn key(field: &[u8]) -> Result<Key, FrameError> {
    Key::new(Bytes::copy_from_slice(field)).map_err(FrameError::from)
}

fn owner(field: &[u8]) -> Result<Owner, FrameError> {
    Owner::new(Bytes::copy_from_slice(field)).map_err(FrameError::from)
}

fn addr(field: &[u8]) -> Result<Addr, FrameError> {
    Addr::new(Bytes::copy_from_slice(field)).map_err(FrameError::from)
}

/// Decodes one client frame from the front of `buf` (server side).
///
/// Returns `Ok(None)` while no complete line is there (and fewer than 512
/// bytes are), `Ok(Some((frame, consumed)))` with `consumed` counting the LF.
pub fn decode_client(buf: &[u8]) -> Result<Option<(ClientFrame, usize)>, FrameError> {
    let Some(n) = find_line(buf)? else { return Ok(None) };
    let frame = parse_client_line(&buf[..n])?;
    Ok(Some((frame, n + 1)))
}

/// Parses one client line (without its LF).
pub fn parse_client_line(line: &[u8]) -> Result<ClientFrame, FrameError> {
    let f = split_fields(line)?;
    match (f[0], f.len()) {
        (b"AUTH", 3) => Ok(ClientFrame::Auth { cnonce: Hex32::parse(f[1])?, cmac: Hex32::parse(f[2])? }),
        (b"A", 6) => Ok(ClientFrame::Acquire {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            wait: parse_wait(f[4])?,
            lease: parse_lease(f[5])?,
        }),
        (b"S", 7) => Ok(ClientFrame::AcquireShared {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            wait: parse_wait(f[4])?,
            lease: parse_lease(f[5])?,
            n: parse_permits(f[6])?,
        }),
        (b"K", n) if n >= 5 => Ok(ClientFrame::AcquireAll {
            id: parse_id(f[1])?,
            owner: owner(f[2])?,
            wait: parse_wait(f[3])?,
            lease: parse_lease(f[4])?,
            keys: KeySet::new(f[5..].iter().map(|k| key(k)).collect::<Result<_, _>>()?)?,
        }),
        (b"R", 5) => Ok(ClientFrame::Release {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            token: parse_token(f[4])?,
        }),
        (b"P", 2) => Ok(ClientFrame::Ping { id: parse_id(f[1])? }),
        (b"Q", 4) => Ok(ClientFrame::Query { id: parse_id(f[1])?, key: key(f[2])?, owner: owner(f[3])? }),
        (b"AUTH" | b"A" | b"S" | b"K" | b"R" | b"P" | b"Q", _) => Err(bad("wrong number of fields")),
        _ => Err(bad("unknown frame type")),
    }
}

/// Decodes one server frame from the front of `buf` (client side). Same
/// contract as [`decode_client`].
pub fn decode_server(buf: &[u8]) -> Result<Option<(ServerFrame, usize)>, FrameError> {
    let Some(n) = find_line(buf)? else { return Ok(None) };
    let frame = parse_server_line(&buf[..n])?;
    Ok(Some((frame, n + 1)))
}

/// Parses one server line (without its LF).
pub fn parse_server_line(line: &[u8]) -> Result<ServerFrame, FrameError> {
    // `E <code> <text>`: the text may hold single spaces; check it apart.
    if let Some(rest) = line.strip_prefix(b"E ") {
        let (code, text) = match rest.iter().position(|&b| b == b' ') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        if code.is_empty() || !code.iter().copied().all(visible) {
            return Err(bad("bad error code"));
        }
        let text = match text {
            None => None,
            // Printable ASCII with the line rules of every field: no leading,
            // trailing or double space (docs/protocol.md §2).
            Some(t)
                if t.is_empty()
                    || !t.iter().all(|b| (0x20..=0x7E).contains(b))
                    || t.first() == Some(&b' ')
                    || t.last() == Some(&b' ')
                    || t.windows(2).any(|w| w == b"  ") =>
            {
                return Err(bad("bad error text"))
            }
            Some(t) => Some(String::from_utf8_lossy(t).into_owned()),
        };
        return Ok(ServerFrame::Error { code: ErrorCode::parse(code), text });
    }
    let f = split_fields(line)?;
    match (f[0], f.len()) {
        (b"TICKETING", 3) if f[1] == b"1" => Ok(ServerFrame::Greeting { snonce: Hex32::parse(f[2])? }),
        (b"TICKETING", 3) => Err(bad("unsupported protocol version")),
        (b"OK", 3) => {
            let role = match f[1] {
                b"leader" => Role::Leader,
                b"follower" => Role::Follower,
                _ => return Err(bad("role must be leader or follower")),
            };
            Ok(ServerFrame::Ok { role, smac: Hex32::parse(f[2])? })
        }
        (b"A", 6) => Ok(ServerFrame::Granted {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            token: parse_token(f[4])?,
            waited_ms: u32::try_from(parse_u64(f[5])?).map_err(|_| bad("waited_ms out of range"))?,
        }),
        (b"G", 7) => Ok(ServerFrame::GrantedShared {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            token: parse_token(f[4])?,
            waited_ms: u32::try_from(parse_u64(f[5])?).map_err(|_| bad("waited_ms out of range"))?,
            slot: parse_slot(f[6])?,
        }),
        (b"T", 3) => Ok(ServerFrame::Timeout { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"B", 3) => Ok(ServerFrame::Busy { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"F", 3) => Ok(ServerFrame::Forbidden { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"R", 3) => Ok(ServerFrame::Released { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"N", 3) => Ok(ServerFrame::NotHolder { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"H", 6) => Ok(ServerFrame::Held {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            token: parse_token(f[4])?,
            remaining_ms: u32::try_from(parse_u64(f[5])?).map_err(|_| bad("remaining_ms out of range"))?,
        }),
        (b"P", 2) => Ok(ServerFrame::Pong { id: parse_id(f[1])? }),
        (b"M", 2) => Ok(ServerFrame::Moved { addr: addr(f[1])? }),
        (b"L", 2) => Ok(ServerFrame::Leader { addr: addr(f[1])? }),
        (b"E", _) => Err(bad("bad error frame")),
        (b"TICKETING" | b"OK" | b"A" | b"G" | b"T" | b"B" | b"R" | b"N" | b"H" | b"P" | b"M" | b"L", _) => {
            Err(bad("wrong number of fields"))
        }
        _ => Err(bad("unknown frame type")),
    }
}
