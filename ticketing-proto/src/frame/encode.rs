//! Frames to bytes. Cannot fail: every value was validated by its type.

use super::*;
use bytes::{BufMut, Bytes, BytesMut};

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
            ClientFrame::AcquireShared { id, key, owner, wait, lease, n } => {
                buf.put_u8(b'S');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, u64::from(*wait));
                put_num(buf, u64::from(*lease));
                put_num(buf, u64::from(*n));
            }
            ClientFrame::AcquireAll { id, owner, wait, lease, keys } => {
                buf.put_u8(b'K');
                put_num(buf, id.0);
                put_field(buf, owner.as_bytes());
                put_num(buf, u64::from(*wait));
                put_num(buf, u64::from(*lease));
                for key in keys.as_slice() {
                    put_field(buf, key.as_bytes());
                }
            }
            ClientFrame::Release { id, key, owner, token } => {
                buf.put_u8(b'R');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, token.get());
            }
            ClientFrame::Ping { id } => {
                buf.put_u8(b'P');
                put_num(buf, id.0);
            }
            ClientFrame::Query { id, key, owner } => {
                buf.put_u8(b'Q');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
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

    /// Bytes of the encoded frame, LF included. Every frame but `K` is at
    /// most [`MAX_FRAME`] by its types; a `K` of many long keys can be
    /// longer, so a client checks this before sending one
    /// (docs/protocol.md, "Counted and multi-key grants": the frame within 512 bytes).
    pub fn encoded_len(&self) -> usize {
        self.to_bytes().len()
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
                put_num(buf, token.get());
                put_num(buf, u64::from(*waited_ms));
            }
            ServerFrame::GrantedShared { id, key, owner, token, waited_ms, slot } => {
                buf.put_u8(b'G');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, token.get());
                put_num(buf, u64::from(*waited_ms));
                put_num(buf, u64::from(*slot));
            }
            ServerFrame::Timeout { id, key } => put_id_key(buf, b'T', *id, key),
            ServerFrame::Busy { id, key } => put_id_key(buf, b'B', *id, key),
            ServerFrame::Forbidden { id, key } => put_id_key(buf, b'F', *id, key),
            ServerFrame::Released { id, key } => put_id_key(buf, b'R', *id, key),
            ServerFrame::NotHolder { id, key } => put_id_key(buf, b'N', *id, key),
            ServerFrame::Held { id, key, owner, token, remaining_ms } => {
                buf.put_u8(b'H');
                put_num(buf, id.0);
                put_field(buf, key.as_bytes());
                put_field(buf, owner.as_bytes());
                put_num(buf, token.get());
                put_num(buf, u64::from(*remaining_ms));
            }
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
