//! The binary frames: a 4-byte length prefix and a postcard body; encoding and the frame reader.

use super::{Envelope, Violation, WireError, MAX_BODY};
use bytes::{Buf, BytesMut};
use std::time::Duration;
use ticketing_proto::auth::{FrameMac, FRAME_TAG_LEN};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

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

/// Appends the tag of the frame that starts at `start` of `out` (its length
/// prefix and body, just encoded), when the link has frame tags.
pub fn seal(out: &mut Vec<u8>, start: usize, mac: Option<&mut FrameMac>) {
    if let Some(mac) = mac {
        let tag = mac.seal(&out[start..]);
        out.extend_from_slice(&tag);
    }
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
    /// The frame tags of a token-authenticated link: every frame is
    /// followed by its tag, checked before the body is decoded.
    mac: Option<FrameMac>,
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
        FrameReader { r, buf: BytesMut::with_capacity(8 * 1024), deadline: None, admitted: false, mac: None }
    }

    /// Checks every frame's tag with `mac` (`None`: the link has no tags).
    pub fn with_mac(mut self, mac: Option<FrameMac>) -> FrameReader<R> {
        self.mac = mac;
        self
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
            let tag = if self.mac.is_some() { FRAME_TAG_LEN } else { 0 };
            if self.buf.len() >= 4 + n + tag {
                if let Some(mac) = &mut self.mac {
                    if !mac.open(&self.buf[..4 + n], &self.buf[4 + n..4 + n + tag]) {
                        return Err(Violation::BadTag.into());
                    }
                }
                let env = decode_body(&self.buf[4..4 + n]);
                self.buf.advance(4 + n + tag);
                self.admitted = false;
                self.deadline = None;
                if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
                    // Do not keep a snapshot chunk's buffer on an idle link.
                    self.buf = BytesMut::with_capacity(8 * 1024);
                }
                return env.map(|env| Taken::Frame(env, n));
            }
            4 + n + tag - self.buf.len()
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
