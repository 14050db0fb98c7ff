//! Every frame of SPEC §3 in both directions, the field rules of §2, and the
//! 512-byte line limit.
//!
//! Decoding is streaming: [`decode_client`] / [`decode_server`] look at the
//! front of a buffer and return `Ok(None)` while the line is incomplete (no LF
//! yet and fewer than [`MAX_FRAME`] bytes), `Ok(Some((frame, consumed)))` for
//! one complete valid line, and a [`FrameError`] for anything malformed or
//! oversized. The line grammar is parsed with `nom`; field rules are checked
//! by the typed constructors ([`Key::new`], [`Owner::new`], …), which the
//! client also uses before anything is sent.

use bytes::{BufMut, Bytes, BytesMut};
use nom::bytes::complete::{tag, take_while1};
use nom::combinator::all_consuming;
use nom::multi::separated_list1;
use nom::IResult;
use nom::Parser;
use std::fmt;

pub use crate::limits::{MAX_FRAME, MAX_LEASE, MAX_WAIT, MIN_LEASE, TOKEN_LIMIT};

/// Why a line (or one field of it) is not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// More than [`MAX_FRAME`] bytes without a complete line (`E too_large`).
    TooLarge,
    /// The line breaks a rule of SPEC §2/§3 (`E bad_frame`); the text says which.
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

fn bad(why: &'static str) -> FrameError {
    FrameError::BadFrame(why)
}

/// Request id, unique among the in-flight requests of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A fencing token: `1 ≤ token < 2^63`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(u64);

impl Token {
    /// A token, if `value` is in `1..2^63`.
    pub fn new(value: u64) -> Result<Token, FrameError> {
        if value == 0 || value >= TOKEN_LIMIT {
            return Err(bad("token out of range"));
        }
        Ok(Token(value))
    }

    /// The number.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

fn visible(b: u8) -> bool {
    (0x21..=0x7E).contains(&b)
}

macro_rules! text_field {
    ($(#[$doc:meta])* $name:ident, $max:expr, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Bytes);

        impl $name {
            #[doc = concat!("Validates a ", $what, ": 1–", stringify!($max), " bytes in 0x21–0x7E.")]
            pub fn new(value: impl Into<Bytes>) -> Result<Self, FrameError> {
                let value = value.into();
                if value.is_empty() || value.len() > $max {
                    return Err(bad(concat!($what, " length out of range")));
                }
                if !value.iter().copied().all(visible) {
                    return Err(bad(concat!($what, " has a byte outside 0x21-0x7E")));
                }
                Ok($name(value))
            }

            /// The raw bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            /// The value as text (always ASCII).
            pub fn as_str(&self) -> &str {
                std::str::from_utf8(&self.0).unwrap_or_default()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.as_str())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

text_field!(
    /// A lock key: 1–250 visible ASCII bytes.
    Key, 250, "key"
);
text_field!(
    /// The owner of one logical acquire: 1–64 visible ASCII bytes.
    Owner, 64, "owner"
);
text_field!(
    /// A client address `host:port` as announced in `M` and `L`: 1–255 visible ASCII bytes.
    Addr, 255, "addr"
);

/// 32 bytes written as exactly 64 lowercase hex characters (nonces and MACs).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hex32(pub [u8; 32]);

impl Hex32 {
    /// Parses exactly 64 lowercase hex characters.
    pub fn parse(text: &[u8]) -> Result<Hex32, FrameError> {
        if text.len() != 64 {
            return Err(bad("nonce/mac must be 64 hex characters"));
        }
        // The `hex` crate also takes upper case; the wire allows lower case only.
        if !text.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad("nonce/mac must be lowercase hex"));
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).map_err(|_| bad("nonce/mac must be lowercase hex"))?;
        Ok(Hex32(out))
    }

    /// The lowercase hex text (64 bytes).
    pub fn to_hex(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        hex::encode_to_slice(self.0, &mut out).unwrap_or_else(|_| unreachable!("64 = 2 x 32"));
        out
    }

    /// The lowercase hex text as a `String`.
    pub fn to_hex_string(&self) -> String {
        String::from_utf8_lossy(&self.to_hex()).into_owned()
    }
}

impl fmt::Debug for Hex32 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hex32({})", self.to_hex_string())
    }
}

/// The role a node announces in `OK`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// The node is the Raft leader (or standalone).
    Leader,
    /// The node is a follower; it answers requests with `M`/`E no_leader`.
    Follower,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
        }
    }
}

/// The error codes of `E <code>` (SPEC §3.3, plus `wrong_domain` of §8.4).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// Bad `cmac` (or, on the client side, bad `smac`).
    AuthFailed,
    /// The node serves no domain.
    NotActive,
    /// No leader is known.
    NoLeader,
    /// A malformed frame.
    BadFrame,
    /// A frame over 512 bytes.
    TooLarge,
    /// A request id equal to an in-flight one.
    DuplicateId,
    /// More than `max_pending_per_conn` requests in flight.
    TooManyPending,
    /// No AUTH within the handshake timeout.
    HandshakeTimeout,
    /// Connection limit reached.
    Overloaded,
    /// The server is stopping.
    ShuttingDown,
    /// An internal error.
    Internal,
    /// A peer of another fencing domain (peer protocol only).
    WrongDomain,
    /// A code this version does not know (kept verbatim).
    Other(String),
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(&self) -> &str {
        match self {
            ErrorCode::AuthFailed => "auth_failed",
            ErrorCode::NotActive => "not_active",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::BadFrame => "bad_frame",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::DuplicateId => "duplicate_id",
            ErrorCode::TooManyPending => "too_many_pending",
            ErrorCode::HandshakeTimeout => "handshake_timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::Internal => "internal",
            ErrorCode::WrongDomain => "wrong_domain",
            ErrorCode::Other(s) => s,
        }
    }

    fn parse(text: &[u8]) -> ErrorCode {
        match text {
            b"auth_failed" => ErrorCode::AuthFailed,
            b"not_active" => ErrorCode::NotActive,
            b"no_leader" => ErrorCode::NoLeader,
            b"bad_frame" => ErrorCode::BadFrame,
            b"too_large" => ErrorCode::TooLarge,
            b"duplicate_id" => ErrorCode::DuplicateId,
            b"too_many_pending" => ErrorCode::TooManyPending,
            b"handshake_timeout" => ErrorCode::HandshakeTimeout,
            b"overloaded" => ErrorCode::Overloaded,
            b"shutting_down" => ErrorCode::ShuttingDown,
            b"internal" => ErrorCode::Internal,
            b"wrong_domain" => ErrorCode::WrongDomain,
            other => ErrorCode::Other(String::from_utf8_lossy(other).into_owned()),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Frames a client sends (SPEC §3.1, §3.2).
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
}

/// Frames a server sends (SPEC §3.1, §3.3).
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
    /// `R <id> <key>`: released.
    Released {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
    },
    /// `N <id> <key>`: not the current holder.
    NotHolder {
        /// Echoed request id.
        id: RequestId,
        /// Echoed key.
        key: Key,
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

fn put_u64(buf: &mut BytesMut, n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut n = n;
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.put_slice(&tmp[i..]);
}

fn put_field(buf: &mut BytesMut, field: &[u8]) {
    buf.put_u8(b' ');
    buf.put_slice(field);
}

fn put_num(buf: &mut BytesMut, n: u64) {
    buf.put_u8(b' ');
    put_u64(buf, n);
}

impl ClientFrame {
    /// Appends the frame, LF included, to `buf`. Every value was validated by
    /// its type, so the result is always a legal frame (at most 512 bytes).
    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            ClientFrame::Auth { cnonce, cmac } => {
                buf.put_slice(b"AUTH");
                put_field(buf, &cnonce.to_hex());
                put_field(buf, &cmac.to_hex());
            }
            ClientFrame::Acquire { id, key, owner, wait, lease } => {
                buf.put_u8(b'A');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, u64::from(*wait));
                put_num(buf, u64::from(*lease));
            }
            ClientFrame::Release { id, key, owner, token } => {
                buf.put_u8(b'R');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, token.0);
            }
            ClientFrame::Ping { id } => {
                buf.put_u8(b'P');
                put_num(buf, id.0);
            }
        }
        buf.put_u8(b'\n');
    }

    /// The frame as bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(128);
        self.encode(&mut buf);
        buf.freeze()
    }
}

impl ServerFrame {
    /// Appends the frame, LF included, to `buf`. An `E` text is cut to fit
    /// the 512-byte limit and bytes outside 0x20–0x7E become `?`.
    pub fn encode(&self, buf: &mut BytesMut) {
        match self {
            ServerFrame::Greeting { snonce } => {
                buf.put_slice(b"TICKETING 1");
                put_field(buf, &snonce.to_hex());
            }
            ServerFrame::Ok { role, smac } => {
                buf.put_slice(b"OK");
                put_field(buf, role.as_str().as_bytes());
                put_field(buf, &smac.to_hex());
            }
            ServerFrame::Granted { id, key, owner, token, waited_ms } => {
                buf.put_u8(b'A');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, token.0);
                put_num(buf, u64::from(*waited_ms));
            }
            ServerFrame::Timeout { id, key } => put_id_key(buf, b'T', *id, key),
            ServerFrame::Busy { id, key } => put_id_key(buf, b'B', *id, key),
            ServerFrame::Released { id, key } => put_id_key(buf, b'R', *id, key),
            ServerFrame::NotHolder { id, key } => put_id_key(buf, b'N', *id, key),
            ServerFrame::Pong { id } => {
                buf.put_u8(b'P');
                put_num(buf, id.0);
            }
            ServerFrame::Moved { addr } => {
                buf.put_u8(b'M');
                put_field(buf, addr.as_bytes());
            }
            ServerFrame::Leader { addr } => {
                buf.put_u8(b'L');
                put_field(buf, addr.as_bytes());
            }
            ServerFrame::Error { code, text } => {
                buf.put_u8(b'E');
                let code = code.as_str().as_bytes();
                put_field(buf, &code[..code.len().min(64)]);
                if let Some(text) = text {
                    let clean = clean_text(text, MAX_FRAME - 4 - code.len().min(64));
                    if !clean.is_empty() {
                        put_field(buf, &clean);
                    }
                }
            }
        }
        buf.put_u8(b'\n');
    }

    /// The frame as bytes.
    pub fn to_bytes(&self) -> Bytes {
        let mut buf = BytesMut::with_capacity(128);
        self.encode(&mut buf);
        buf.freeze()
    }

    /// `E <code>` without text.
    pub fn error(code: ErrorCode) -> ServerFrame {
        ServerFrame::Error { code, text: None }
    }
}

/// Printable ASCII, single spaces, no leading or trailing space, at most `max` bytes.
fn clean_text(text: &str, max: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len().min(max));
    for b in text.bytes() {
        if out.len() >= max {
            break;
        }
        let b = if (0x20..=0x7E).contains(&b) { b } else { b'?' };
        if b == b' ' && (out.is_empty() || out.last() == Some(&b' ')) {
            continue;
        }
        out.push(b);
    }
    while out.last() == Some(&b' ') {
        out.pop();
    }
    out
}

fn put_id_key(buf: &mut BytesMut, op: u8, id: RequestId, key: &Key) {
    buf.put_u8(op);
    put_num(buf, id.0);
    put_field(buf, key.as_bytes());
}

// ---------------------------------------------------------------------------
// Decoding

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

fn parse_lease(field: &[u8]) -> Result<u8, FrameError> {
    match parse_u64(field)? {
        n if (u64::from(MIN_LEASE)..=u64::from(MAX_LEASE)).contains(&n) => Ok(n as u8),
        _ => Err(bad("lease out of range 1-250")),
    }
}

fn parse_token(field: &[u8]) -> Result<Token, FrameError> {
    Token::new(parse_u64(field)?)
}

fn key(field: &[u8]) -> Result<Key, FrameError> {
    Key::new(Bytes::copy_from_slice(field))
}

fn owner(field: &[u8]) -> Result<Owner, FrameError> {
    Owner::new(Bytes::copy_from_slice(field))
}

fn addr(field: &[u8]) -> Result<Addr, FrameError> {
    Addr::new(Bytes::copy_from_slice(field))
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
        (b"R", 5) => Ok(ClientFrame::Release {
            id: parse_id(f[1])?,
            key: key(f[2])?,
            owner: owner(f[3])?,
            token: parse_token(f[4])?,
        }),
        (b"P", 2) => Ok(ClientFrame::Ping { id: parse_id(f[1])? }),
        (b"AUTH" | b"A" | b"R" | b"P", _) => Err(bad("wrong number of fields")),
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
            Some(t) if t.is_empty() || !t.iter().all(|b| (0x20..=0x7E).contains(b)) => {
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
        (b"T", 3) => Ok(ServerFrame::Timeout { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"B", 3) => Ok(ServerFrame::Busy { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"R", 3) => Ok(ServerFrame::Released { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"N", 3) => Ok(ServerFrame::NotHolder { id: parse_id(f[1])?, key: key(f[2])? }),
        (b"P", 2) => Ok(ServerFrame::Pong { id: parse_id(f[1])? }),
        (b"M", 2) => Ok(ServerFrame::Moved { addr: addr(f[1])? }),
        (b"L", 2) => Ok(ServerFrame::Leader { addr: addr(f[1])? }),
        (b"E", _) => Err(bad("bad error frame")),
        (b"TICKETING" | b"OK" | b"A" | b"T" | b"B" | b"R" | b"N" | b"P" | b"M" | b"L", _) => {
            Err(bad("wrong number of fields"))
        }
        _ => Err(bad("unknown frame type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(line: &[u8]) -> Result<Option<(ClientFrame, usize)>, FrameError> {
        decode_client(line)
    }

    fn k(s: &str) -> Key {
        Key::new(s.to_owned()).unwrap()
    }

    fn o(s: &str) -> Owner {
        Owner::new(s.to_owned()).unwrap()
    }

    #[test]
    fn acquire_round_trip_bytes() {
        let f = ClientFrame::Acquire { id: RequestId(7), key: k("seat-1"), owner: o("ab12"), wait: 5, lease: 30 };
        assert_eq!(&f.to_bytes()[..], b"A 7 seat-1 ab12 5 30\n");
        assert_eq!(client(b"A 7 seat-1 ab12 5 30\n").unwrap(), Some((f, 21)));
    }

    #[test]
    fn release_and_ping_bytes() {
        let r = ClientFrame::Release { id: RequestId(0), key: k("k"), owner: o("o"), token: Token::new(9).unwrap() };
        assert_eq!(&r.to_bytes()[..], b"R 0 k o 9\n");
        assert_eq!(client(b"R 0 k o 9\n").unwrap().unwrap().0, r);
        assert_eq!(
            &ClientFrame::Ping { id: RequestId(18446744073709551615) }.to_bytes()[..],
            b"P 18446744073709551615\n"
        );
        assert_eq!(client(b"P 3\n").unwrap().unwrap().0, ClientFrame::Ping { id: RequestId(3) });
    }

    #[test]
    fn incomplete_is_not_an_error() {
        assert_eq!(client(b"").unwrap(), None);
        assert_eq!(client(b"A 1 k o 0").unwrap(), None);
        assert_eq!(client(&[b'x'; 511]).unwrap(), None);
    }

    #[test]
    fn too_large_versus_legal_512() {
        assert_eq!(client(&[b'x'; 512]), Err(FrameError::TooLarge));
        // 512 bytes including LF is legal size: a 250-byte key and 64-byte owner fit.
        let mut line = b"A 1 ".to_vec();
        line.extend(std::iter::repeat_n(b'k', 250));
        line.push(b' ');
        line.extend(std::iter::repeat_n(b'o', 64));
        line.extend(b" 255 250\n");
        assert!(line.len() < 512);
        assert!(client(&line).unwrap().is_some());
        // exactly 512 with the LF: size is fine, content decides (here: unknown type).
        let mut exact = vec![b'x'; 511];
        exact.push(b'\n');
        assert!(matches!(client(&exact), Err(FrameError::BadFrame(_))));
        let mut over = vec![b'x'; 512];
        over.push(b'\n');
        assert_eq!(client(&over), Err(FrameError::TooLarge));
    }

    #[test]
    fn malformed_cases_are_bad_frame() {
        let cases: &[&[u8]] = &[
            b"\n",
            b"A 1 k o 0 5\r\n",
            b"A 1 k o 0  5\n",
            b"A 1 k o 0 5 \n",
            b" A 1 k o 0 5\n",
            b"A\t1 k o 0 5\n",
            b"A 01 k o 0 5\n",
            b"A -1 k o 0 5\n",
            b"A +1 k o 0 5\n",
            b"A 1 k o 00 5\n",
            b"A 1 k o 256 5\n",
            b"A 1 k o 0 0\n",
            b"A 1 k o 0 251\n",
            b"A 1 k o 0 05\n",
            b"A 1 k o 0\n",
            b"A 1 k o 0 5 6\n",
            b"A 18446744073709551616 k o 0 5\n",
            b"A 1 k\x80 o 0 5\n",
            b"A 1 k o\x7f 0 5\n",
            b"R 1 k o 0\n",
            b"R 1 k o 9223372036854775808\n",
            b"R 1 k o 01\n",
            b"R 1 k o\n",
            b"P\n",
            b"P 1 2\n",
            b"P x\n",
            b"Q 1\n",
            b"a 1 k o 0 5\n",
            b"AUTH 00 11\n",
            b"AUTH\n",
        ];
        for case in cases {
            assert!(matches!(client(case), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(case));
        }
        let long_key = format!("A 1 {} o 0 5\n", "k".repeat(251));
        assert!(matches!(client(long_key.as_bytes()), Err(FrameError::BadFrame(_))));
        let long_owner = format!("A 1 k {} 0 5\n", "o".repeat(65));
        assert!(matches!(client(long_owner.as_bytes()), Err(FrameError::BadFrame(_))));
        let upper = format!("AUTH {} {}\n", "A".repeat(64), "0".repeat(64));
        assert!(matches!(client(upper.as_bytes()), Err(FrameError::BadFrame(_))));
        assert!(matches!(client(b"\0\n"), Err(FrameError::BadFrame(_))));
    }

    #[test]
    fn limits_accepted() {
        assert!(client(b"A 0 k o 255 250\n").unwrap().is_some());
        assert!(client(b"A 1 k o 0 1\n").unwrap().is_some());
        assert!(client(b"R 1 k o 9223372036854775807\n").unwrap().is_some());
        assert!(client(b"R 1 ~!#$ o 1\n").unwrap().is_some());
    }

    #[test]
    fn auth_frame() {
        let line = format!("AUTH {} {}\n", "ab".repeat(32), "01".repeat(32));
        let (f, n) = client(line.as_bytes()).unwrap().unwrap();
        assert_eq!(n, line.len());
        assert_eq!(f, ClientFrame::Auth { cnonce: Hex32([0xab; 32]), cmac: Hex32([0x01; 32]) });
        assert_eq!(f.to_bytes(), line.as_bytes());
    }

    #[test]
    fn server_frames_bytes() {
        let t = Token::new(1700000000000000).unwrap();
        let cases: Vec<(ServerFrame, &[u8])> = vec![
            (
                ServerFrame::Granted { id: RequestId(1), key: k("k"), owner: o("o"), token: t, waited_ms: 12 },
                b"A 1 k o 1700000000000000 12\n",
            ),
            (ServerFrame::Timeout { id: RequestId(2), key: k("k") }, b"T 2 k\n"),
            (ServerFrame::Busy { id: RequestId(3), key: k("k") }, b"B 3 k\n"),
            (ServerFrame::Released { id: RequestId(4), key: k("k") }, b"R 4 k\n"),
            (ServerFrame::NotHolder { id: RequestId(5), key: k("k") }, b"N 5 k\n"),
            (ServerFrame::Pong { id: RequestId(6) }, b"P 6\n"),
            (ServerFrame::Moved { addr: Addr::new("10.0.0.1:5225").unwrap() }, b"M 10.0.0.1:5225\n"),
            (ServerFrame::Leader { addr: Addr::new("h:1").unwrap() }, b"L h:1\n"),
            (ServerFrame::error(ErrorCode::BadFrame), b"E bad_frame\n"),
            (
                ServerFrame::Error { code: ErrorCode::Internal, text: Some("oops it broke".into()) },
                b"E internal oops it broke\n",
            ),
            (ServerFrame::Ok { role: Role::Follower, smac: Hex32([0xff; 32]) }, b""),
            (ServerFrame::Greeting { snonce: Hex32([0; 32]) }, b""),
        ];
        for (frame, bytes) in cases {
            let enc = frame.to_bytes();
            if !bytes.is_empty() {
                assert_eq!(&enc[..], bytes);
            }
            assert_eq!(decode_server(&enc).unwrap(), Some((frame, enc.len())));
        }
        assert_eq!(
            decode_server(b"E what ever\n").unwrap().unwrap().0,
            ServerFrame::Error { code: ErrorCode::Other("what".into()), text: Some("ever".into()) }
        );
    }

    #[test]
    fn server_malformed() {
        for case in [
            &b"A 1 k o 0 5\n"[..],
            b"A 1 k o 5 4294967296\n",
            b"TICKETING 2 00\n",
            b"OK boss 00\n",
            b"E\n",
            b"E \n",
            b"E x \n",
            b"T 1\n",
            b"M\n",
            b"Z\n",
        ] {
            assert!(matches!(decode_server(case), Err(FrameError::BadFrame(_))), "{:?}", String::from_utf8_lossy(case));
        }
    }

    #[test]
    fn error_text_is_sanitized_and_bounded() {
        let f = ServerFrame::Error { code: ErrorCode::Internal, text: Some(format!("a\tb  c \n{}", "x".repeat(900))) };
        let enc = f.to_bytes();
        assert!(enc.len() <= MAX_FRAME);
        assert!(enc.starts_with(b"E internal a?b c ?xxx"));
        assert!(decode_server(&enc).unwrap().is_some());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn field(max: usize) -> impl Strategy<Value = String> {
            proptest::collection::vec(0x21u8..=0x7E, 1..=max).prop_map(|v| String::from_utf8(v).unwrap())
        }

        fn client_frame() -> impl Strategy<Value = ClientFrame> {
            prop_oneof![
                (any::<u64>(), field(250), field(64), any::<u8>(), 1u8..=250).prop_map(
                    |(id, key, owner, wait, lease)| {
                        ClientFrame::Acquire { id: RequestId(id), key: k(&key), owner: o(&owner), wait, lease }
                    }
                ),
                (any::<u64>(), field(250), field(64), 1u64..TOKEN_LIMIT).prop_map(|(id, key, owner, t)| {
                    ClientFrame::Release {
                        id: RequestId(id),
                        key: k(&key),
                        owner: o(&owner),
                        token: Token::new(t).unwrap(),
                    }
                }),
                any::<u64>().prop_map(|id| ClientFrame::Ping { id: RequestId(id) }),
                (any::<[u8; 32]>(), any::<[u8; 32]>())
                    .prop_map(|(a, b)| ClientFrame::Auth { cnonce: Hex32(a), cmac: Hex32(b) }),
            ]
        }

        fn server_frame() -> impl Strategy<Value = ServerFrame> {
            prop_oneof![
                (any::<u64>(), field(250), field(64), 1u64..TOKEN_LIMIT, any::<u32>()).prop_map(
                    |(id, key, owner, t, w)| ServerFrame::Granted {
                        id: RequestId(id),
                        key: k(&key),
                        owner: o(&owner),
                        token: Token::new(t).unwrap(),
                        waited_ms: w
                    }
                ),
                (any::<u64>(), field(250))
                    .prop_map(|(id, key)| ServerFrame::Timeout { id: RequestId(id), key: k(&key) }),
                (any::<u64>(), field(250))
                    .prop_map(|(id, key)| ServerFrame::NotHolder { id: RequestId(id), key: k(&key) }),
                field(255).prop_map(|a| ServerFrame::Leader { addr: Addr::new(a).unwrap() }),
                "[a-z_]{1,20}( [!-~]{1,10}( [!-~]{1,10}){0,3})?".prop_map(|s| {
                    let mut it = s.splitn(2, ' ');
                    let code = ErrorCode::parse(it.next().unwrap().as_bytes());
                    ServerFrame::Error { code, text: it.next().map(str::to_owned) }
                }),
            ]
        }

        proptest! {
            #[test]
            fn client_round_trip(f in client_frame()) {
                let enc = f.to_bytes();
                prop_assert!(enc.len() <= MAX_FRAME);
                prop_assert_eq!(decode_client(&enc).unwrap(), Some((f, enc.len())));
            }

            #[test]
            fn server_round_trip(f in server_frame()) {
                let enc = f.to_bytes();
                prop_assert!(enc.len() <= MAX_FRAME);
                prop_assert_eq!(decode_server(&enc).unwrap(), Some((f, enc.len())));
            }

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
                let c = decode_client(&bytes);
                let s = decode_server(&bytes);
                if let Ok(Some((_, n))) = c { prop_assert!(n <= MAX_FRAME && bytes[n - 1] == b'\n'); }
                if let Ok(Some((_, n))) = s { prop_assert!(n <= MAX_FRAME && bytes[n - 1] == b'\n'); }
            }
        }
    }
}

#[cfg(feature = "serde")]
mod serde_impls {
    //! Text fields serialize as strings and are validated again on the way in;
    //! tokens as numbers.
    use super::{Addr, Key, Owner, Token};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    macro_rules! text_serde {
        ($name:ident) => {
            impl Serialize for $name {
                fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_str(self.as_str())
                }
            }
            impl<'de> Deserialize<'de> for $name {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                    let text = String::deserialize(d)?;
                    $name::new(text).map_err(D::Error::custom)
                }
            }
        };
    }
    text_serde!(Key);
    text_serde!(Owner);
    text_serde!(Addr);

    impl Serialize for Token {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_u64(self.0)
        }
    }
    impl<'de> Deserialize<'de> for Token {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Token::new(u64::deserialize(d)?).map_err(D::Error::custom)
        }
    }
}
