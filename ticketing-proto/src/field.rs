//! The fields of docs/protocol.md §2 as types. Each constructor checks its
//! field's rule, so a value that exists is legal on the wire: the client
//! validates with these before anything is sent, and the decoder builds them
//! from a received line.

use crate::limits::TOKEN_LIMIT;
use bytes::Bytes;
use std::fmt;

/// A field that breaks its rule; the text says which. A decoder turns it
/// into [`FrameError::BadFrame`](crate::frame::FrameError::BadFrame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldError(pub &'static str);

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for FieldError {}

fn bad(why: &'static str) -> FieldError {
    FieldError(why)
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
    pub fn new(value: u64) -> Result<Token, FieldError> {
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

/// A byte allowed in a field: visible ASCII, 0x21–0x7E.
pub(crate) fn visible(b: u8) -> bool {
    (0x21..=0x7E).contains(&b)
}

macro_rules! text_field {
    ($(#[$doc:meta])* $name:ident, $max:expr, $what:literal) => {
        text_field!(@type $(#[$doc])* $name, $max, $what);

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
    (@type $(#[$doc:meta])* $name:ident, $max:expr, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Bytes);

        impl $name {
            #[doc = concat!("Validates a ", $what, ": 1 to `", stringify!($max), "` bytes in 0x21–0x7E.")]
            pub fn new(value: impl Into<Bytes>) -> Result<Self, FieldError> {
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
    };
}

text_field!(
    /// A lock key: 1–250 ([`MAX_KEY_LEN`](crate::limits::MAX_KEY_LEN)) visible ASCII bytes.
    Key, crate::limits::MAX_KEY_LEN, "key"
);
text_field!(
    @type
    /// The owner of one logical acquire: 1–64 ([`MAX_OWNER_LEN`](crate::limits::MAX_OWNER_LEN)) visible ASCII bytes.
    ///
    /// Owner and token together release a lock, so the owner is redacted
    /// everywhere but on the wire: `Debug` and `Display` show only
    /// [`Owner::prefix`] followed by `…` (what the admin view shows); the
    /// whole value is [`Owner::as_str`] / [`Owner::as_bytes`].
    Owner, crate::limits::MAX_OWNER_LEN, "owner"
);

impl Owner {
    /// What may be shown of an owner (logs, the admin view): its first 8
    /// characters and never more than half of it (a client's owners are 32
    /// hex digits, so their first 8).
    pub fn prefix(&self) -> &str {
        let s = self.as_str();
        &s[..(s.len() / 2).min(8)]
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner(\"{}…\")", self.prefix())
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.prefix())
    }
}
text_field!(
    /// A client address `host:port` as announced in `M` and `L`: 1–255 visible ASCII bytes.
    Addr, 255, "addr"
);

/// The keys of a multi-key acquire (`K`, docs/protocol.md, "Counted and multi-key grants"): 2–16
/// ([`MIN_MULTI_KEYS`](crate::limits::MIN_MULTI_KEYS)–[`MAX_MULTI_KEYS`](crate::limits::MAX_MULTI_KEYS))
/// distinct keys, in the order given (the answer echoes the first).
/// Whether the whole frame fits 512 bytes depends on the other fields too:
/// [`crate::frame::ClientFrame::encoded_len`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeySet(Vec<Key>);

/// Why keys do not make a [`KeySet`] (the detail the client's argument errors name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySetError {
    /// Not 2–16 keys: how many there were.
    Count(usize),
    /// This key is given more than once.
    Repeated(Key),
}

impl KeySet {
    /// Validates the count (2–16) and that no key appears twice (a frame's field error).
    pub fn new(keys: Vec<Key>) -> Result<KeySet, FieldError> {
        KeySet::check(keys).map_err(|e| match e {
            KeySetError::Count(_) => bad("a multi-key acquire takes 2-16 keys"),
            KeySetError::Repeated(_) => bad("a key appears twice in a multi-key acquire"),
        })
    }

    /// THE rule of a multi-key acquire's keys: [`KeySet::check_count`], and no key twice.
    pub fn check(keys: Vec<Key>) -> Result<KeySet, KeySetError> {
        KeySet::check_count(keys.len())?;
        for (i, k) in keys.iter().enumerate() {
            if keys[..i].contains(k) {
                return Err(KeySetError::Repeated(k.clone()));
            }
        }
        Ok(KeySet(keys))
    }

    /// Whether `n` keys are a multi-key acquire's count (2–16).
    pub fn check_count(n: usize) -> Result<(), KeySetError> {
        use crate::limits::{MAX_MULTI_KEYS, MIN_MULTI_KEYS};
        if (MIN_MULTI_KEYS..=MAX_MULTI_KEYS).contains(&n) {
            Ok(())
        } else {
            Err(KeySetError::Count(n))
        }
    }

    /// The keys, in the order given.
    pub fn as_slice(&self) -> &[Key] {
        &self.0
    }

    /// The first key: the one every answer echoes.
    pub fn first(&self) -> &Key {
        &self.0[0]
    }

    /// The keys, owned.
    pub fn into_vec(self) -> Vec<Key> {
        self.0
    }

    /// Number of keys (2–16).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true (a set has at least 2 keys); for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// 32 bytes written as exactly 64 lowercase hex characters (nonces and MACs).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hex32(pub [u8; 32]);

impl Hex32 {
    /// Parses exactly 64 lowercase hex characters.
    pub fn parse(text: &[u8]) -> Result<Hex32, FieldError> {
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
    /// `leader` or `follower`, as on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Follower => "follower",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_shows_only_its_prefix() {
        let o = Owner::new("0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(o.prefix(), "01234567");
        assert_eq!(format!("{o}"), "01234567…");
        assert_eq!(format!("{o:?}"), "Owner(\"01234567…\")");
        assert_eq!(format!("{:?}", Some(&o)), "Some(Owner(\"01234567…\"))");
        assert_eq!(o.as_str(), "0123456789abcdef0123456789abcdef", "the whole value is still there");
        // Never more than half of a short owner.
        assert_eq!(Owner::new("abcdef").unwrap().prefix(), "abc");
        assert_eq!(format!("{}", Owner::new("z").unwrap()), "…");
        // Keys and addresses are not secret.
        assert_eq!(format!("{:?}", Key::new("k1").unwrap()), "Key(\"k1\")");
    }
}
