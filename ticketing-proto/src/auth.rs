//! The challenge–response handshake of docs/protocol.md §3 (client port) and
//! docs/cluster-protocol.md §1 (peer port): nonces from an injected RNG,
//! `cmac`/`smac` with HMAC-SHA256, constant-time verification, and the
//! [`Secret`] that holds a token.

use crate::field::Hex32;
use hmac::{Hmac, Mac};
use rand_core::{CryptoRng, RngCore};
use sha2::Sha256;
use std::fmt;
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

/// A client or peer token. Its bytes never leave through `Debug` or
/// `Display` (both print `<redacted>`), equality is constant-time, and the
/// bytes are zeroed when it is dropped. [`Secret::expose`] is the one way
/// to read them (to compute a MAC).
#[derive(Clone, Default)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// Wraps `bytes`.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// The token's bytes: only for computing or checking a MAC.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// True for the empty token (auth off).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl AsRef<[u8]> for Secret {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Secret {
    fn from(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Secret {
        Secret(text.as_bytes().to_vec())
    }
}

impl From<String> for Secret {
    fn from(text: String) -> Secret {
        Secret(text.into_bytes())
    }
}

/// Constant-time in the contents (the length is not secret).
impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

type HmacSha256 = Hmac<Sha256>;

/// Which side of which port a MAC belongs to; the label is part of the MAC input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// `ticketing/1 client` — the client's proof on the client port.
    Client,
    /// `ticketing/1 server` — the server's proof on the client port.
    Server,
    /// `ticketing/1 peer-client` — the dialing node's proof on the peer port.
    PeerClient,
    /// `ticketing/1 peer-server` — the accepting node's proof on the peer port.
    PeerServer,
    /// `ticketing/1 peer-frames-dialer ` — the key of the frames the dialing
    /// node sends after the handshake ([`FrameMac`]).
    PeerFramesDialer,
    /// `ticketing/1 peer-frames-acceptor ` — the key of the frames the
    /// accepting node sends.
    PeerFramesAcceptor,
}

impl Label {
    fn prefix(self) -> &'static [u8] {
        match self {
            Label::Client => b"ticketing/1 client ",
            Label::Server => b"ticketing/1 server ",
            Label::PeerClient => b"ticketing/1 peer-client ",
            Label::PeerServer => b"ticketing/1 peer-server ",
            Label::PeerFramesDialer => b"ticketing/1 peer-frames-dialer ",
            Label::PeerFramesAcceptor => b"ticketing/1 peer-frames-acceptor ",
        }
    }
}

/// A fresh 32-byte nonce from `rng` (the OS CSPRNG in production).
pub fn nonce<R: RngCore + CryptoRng>(rng: &mut R) -> Hex32 {
    let mut n = [0u8; 32];
    rng.fill_bytes(&mut n);
    Hex32(n)
}

fn mac_state(token: &[u8], label: Label, snonce: &Hex32, cnonce: &Hex32) -> HmacSha256 {
    // HMAC accepts keys of any length, the empty one included.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(token).unwrap_or_else(|_| unreachable!());
    mac.update(label.prefix());
    mac.update(&snonce.to_hex());
    mac.update(b" ");
    mac.update(&cnonce.to_hex());
    mac
}

/// `HMAC-SHA256(key = token, msg = label + " " + snonce_hex + " " + cnonce_hex)`.
pub fn mac(token: &[u8], label: Label, snonce: &Hex32, cnonce: &Hex32) -> Hex32 {
    Hex32(mac_state(token, label, snonce, cnonce).finalize().into_bytes().into())
}

/// Constant-time check of `candidate` against the MAC for `token`.
pub fn verify(token: &[u8], label: Label, snonce: &Hex32, cnonce: &Hex32, candidate: &Hex32) -> bool {
    mac_state(token, label, snonce, cnonce).verify_slice(&candidate.0).is_ok()
}

/// Server side: the index of the first token in `tokens` whose MAC matches
/// `cmac` (every token is checked, in constant time each). With an empty list
/// auth is off: any `cmac` is accepted and `Some(None)` says to answer with
/// the empty token. `None`: refused.
pub fn check_client<T: AsRef<[u8]>>(
    tokens: &[T],
    label: Label,
    snonce: &Hex32,
    cnonce: &Hex32,
    cmac: &Hex32,
) -> Option<Option<usize>> {
    if tokens.is_empty() {
        return Some(None);
    }
    let mut found = None;
    for (i, t) in tokens.iter().enumerate() {
        if verify(t.as_ref(), label, snonce, cnonce, cmac) && found.is_none() {
            found = Some(i);
        }
    }
    found.map(Some)
}

/// Bytes of the tag after every peer frame ([`FrameMac`]).
pub const FRAME_TAG_LEN: usize = 16;

/// The integrity of one direction of a peer connection after its handshake
/// (docs/cluster-protocol.md, "Frame integrity"): every frame is followed by
/// `HMAC-SHA256(key, seq_be64 ‖ frame)[..16]`, where the key is derived from
/// the peer token and both handshake nonces (one key per direction) and
/// `seq` counts the frames of that direction from 0. Both sides count, so a
/// forged, altered, replayed, reordered or dropped frame fails its tag.
pub struct FrameMac {
    key: [u8; 32],
    seq: u64,
}

impl fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrameMac").field("key", &"<redacted>").field("seq", &self.seq).finish()
    }
}

impl Drop for FrameMac {
    fn drop(&mut self) {
        self.key.zeroize();
    }
}

impl FrameMac {
    /// The two directions' MACs of a connection whose handshake used
    /// `token`, `snonce` and `cnonce`: (frames the dialer sends, frames the
    /// acceptor sends).
    pub fn pair(token: &[u8], snonce: &Hex32, cnonce: &Hex32) -> (FrameMac, FrameMac) {
        let key = |label| mac(token, label, snonce, cnonce).0;
        (
            FrameMac { key: key(Label::PeerFramesDialer), seq: 0 },
            FrameMac { key: key(Label::PeerFramesAcceptor), seq: 0 },
        )
    }

    fn compute(&self, frame: &[u8]) -> [u8; FRAME_TAG_LEN] {
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!());
        m.update(&self.seq.to_be_bytes());
        m.update(frame);
        let full = m.finalize().into_bytes();
        let mut tag = [0u8; FRAME_TAG_LEN];
        tag.copy_from_slice(&full[..FRAME_TAG_LEN]);
        tag
    }

    /// The tag of the next frame sent (`frame`: its length prefix and body).
    pub fn seal(&mut self, frame: &[u8]) -> [u8; FRAME_TAG_LEN] {
        let tag = self.compute(frame);
        self.seq += 1;
        tag
    }

    /// Whether `tag` is the tag of the next frame received (compared in
    /// constant time); only a good frame advances the count.
    pub fn open(&mut self, frame: &[u8], tag: &[u8]) -> bool {
        let ok = bool::from(self.compute(frame).ct_eq(tag));
        if ok {
            self.seq += 1;
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_rng::Counter;

    #[test]
    fn known_vector() {
        // Computed independently with openssl:
        // printf 'ticketing/1 client <64 x "0"> <32 x "11">' | openssl dgst -sha256 -hmac 123
        let s = Hex32([0; 32]);
        let c = Hex32([0x11; 32]);
        let m = mac(b"123", Label::Client, &s, &c);
        let expect = Hex32::parse(b"086cd71a6639ca5db98351ec2edd5b82644febc29c545e0786b3b1756f9babe9").unwrap();
        assert_eq!(m, expect);
        assert_ne!(m, mac(b"123", Label::Server, &s, &c));
        assert_ne!(m, mac(b"124", Label::Client, &s, &c));
        assert_ne!(mac(b"", Label::PeerClient, &s, &c), mac(b"", Label::PeerServer, &s, &c));
    }

    #[test]
    fn secret_never_prints_its_bytes() {
        let s = Secret::from("hunter2-token");
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(format!("{s}"), "<redacted>");
        assert_eq!(format!("{:?}", Some(vec![s.clone()])), "Some([Secret(<redacted>)])");
        assert_eq!(s.expose(), b"hunter2-token");
        assert_eq!(s, Secret::from("hunter2-token".to_owned()));
        assert_ne!(s, Secret::from("hunter2-tokem"));
        assert_ne!(s, Secret::from("hunter2"));
        assert!(Secret::default().is_empty() && !s.is_empty());
    }

    #[test]
    fn injected_rng_is_deterministic() {
        let a = nonce(&mut Counter(0));
        let b = nonce(&mut Counter(0));
        assert_eq!(a, b);
        assert_eq!(a.0[0], 1);
        assert_ne!(a, nonce(&mut Counter(7)));
    }

    #[test]
    fn rotation_and_off() {
        let s = nonce(&mut Counter(1));
        let c = nonce(&mut Counter(50));
        let tokens = vec![b"old".to_vec(), b"new".to_vec()];
        let good = mac(b"new", Label::Client, &s, &c);
        assert_eq!(check_client(&tokens, Label::Client, &s, &c, &good), Some(Some(1)));
        let bad = mac(b"other", Label::Client, &s, &c);
        assert_eq!(check_client(&tokens, Label::Client, &s, &c, &bad), None);
        assert_eq!(check_client::<Secret>(&[], Label::Client, &s, &c, &bad), Some(None));
        let secrets = [Secret::from("old"), Secret::from("new")];
        assert_eq!(check_client(&secrets, Label::Client, &s, &c, &good), Some(Some(1)));
        // replay against a new snonce fails
        let s2 = nonce(&mut Counter(9));
        assert_eq!(check_client(&tokens, Label::Client, &s2, &c, &good), None);
        assert!(verify(b"new", Label::Client, &s, &c, &good));
    }

    #[test]
    fn frame_macs_catch_forged_replayed_and_reordered_frames() {
        let (s, c) = (nonce(&mut Counter(1)), nonce(&mut Counter(2)));
        // Each side derives both keys; the dialer seals with the first, the
        // acceptor opens the dialer's frames with its own copy of the first.
        let (mut dialer_sends, mut acceptor_sends) = FrameMac::pair(b"peer-token", &s, &c);
        let (mut acceptor_reads, mut dialer_reads) = FrameMac::pair(b"peer-token", &s, &c);
        let t0 = dialer_sends.seal(b"frame zero");
        let t1 = dialer_sends.seal(b"frame one");
        assert!(!acceptor_reads.open(b"frame one", &t1), "reordered");
        assert!(!acceptor_reads.open(b"frame zero", &t1), "another frame's tag");
        assert!(!acceptor_reads.open(b"frame zerO", &t0), "altered");
        assert!(acceptor_reads.open(b"frame zero", &t0));
        assert!(!acceptor_reads.open(b"frame zero", &t0), "replayed");
        assert!(acceptor_reads.open(b"frame one", &t1));
        // One key per direction: an acceptor's tag is not a dialer's.
        let a0 = acceptor_sends.seal(b"answer");
        let mut other_direction = FrameMac::pair(b"peer-token", &s, &c).0;
        assert!(!other_direction.open(b"answer", &a0), "the other direction's key");
        assert!(dialer_reads.open(b"answer", &a0));
        // Another token or another handshake: other keys.
        let mut other_token = FrameMac::pair(b"other-token", &s, &c).1;
        let mut other_nonces = FrameMac::pair(b"peer-token", &c, &s).1;
        let a1 = acceptor_sends.seal(b"x");
        assert!(!other_token.open(b"x", &a1) && !other_nonces.open(b"x", &a1));
        assert!(format!("{acceptor_sends:?}").contains("<redacted>"));
    }
}
