//! The peer protocol on the wire: the text handshake and the
//! length-prefixed binary frames. The byte layout is in
//! `docs/cluster-protocol.md`.
//!
//! The handshake is the client port's (docs/protocol.md §3) with its own
//! greeting, labels and `OK` line: its `AUTH` line is decoded by the client
//! port's decoder ([`decode_client`](ticketing_proto::frame::decode_client)), lines are bounded by the same
//! [`MAX_FRAME`](ticketing_proto::limits::MAX_FRAME) (512 bytes, LF included). The greeting names the peer
//! protocol version ([`VERSION`]): a dialer of another version is refused
//! before any frame, never misparsed.
//!
//! A frame is a 4-byte big-endian length `N` (1 ≤ N ≤ 16 MiB) followed by `N`
//! bytes: one [`Envelope`] in postcard's compact binary serde format.
//! Snapshot chunks travel as raw bytes; an openraft error inside an answer
//! travels as JSON text (its `AnyError` nests without bound; serde_json
//! stops at 128 levels, postcard has no such limit).
//!
//! `messages` holds the message types, `error` the failures ([`WireError`],
//! [`Violation`], [`HandshakeRefusal`], …), `codec` the binary frames
//! (encoding, [`FrameReader`]), `handshake` the text handshake; `fields` the
//! envelope fields with a hand-written encoding.

mod codec;
mod error;
mod fields;
mod handshake;
mod messages;
#[cfg(test)]
mod tests;

pub use codec::seal;
pub use codec::{decode_body, encode, encode_into, read_frame, FrameReader, Read};
pub use error::{HandshakeRefusal, RefusalCode, TlsFailure, Violation, WireError};
pub use handshake::{accept_handshake, dial_handshake, Macs};
pub use messages::{Body, BootstrapAnswer, Envelope, JoinAnswer, JoinRequest, PeerStatus, Refusal};

/// Version of the peer protocol: the number in the greeting and every
/// envelope's `v`. Version 1 carried JSON frames; 2 carries postcard; 3
/// follows every frame of a token-authenticated link with its tag
/// (docs/cluster-protocol.md, "Frame integrity").
pub const VERSION: u8 = 3;
/// Largest frame body.
pub const MAX_BODY: usize = 16 * 1024 * 1024;
