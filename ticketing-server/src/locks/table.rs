//! The compact table of holders behind [`LockState`](super::LockState)
//! (docs/benchmarks.md, "Optimizations: memory").
//!
//! One hash-table slot per held key: a boxed byte string
//! `[key_len][lease_s][key][owner]` (one allocation holding both texts) and
//! the two numbers `(token, granted_dt)`: 32 bytes per slot plus one
//! allocation of `2 + key + owner` bytes, instead of a `Key` and an `Owner`
//! (32 bytes each, each with its own reference-counted buffer) and padding.
//! Lookups hash the key bytes only.

use super::Holder;
use std::hash::BuildHasher;
use ticketing_proto::{Key, Owner, Token};

/// `[key_len][lease_s][key][owner]`; the table hashes and compares its key only.
#[derive(Debug, Clone)]
struct Slot(Box<[u8]>);

impl Slot {
    fn new(key: &[u8], owner: &[u8], lease_s: u8) -> Slot {
        let mut v = Vec::with_capacity(2 + key.len() + owner.len());
        // A key is at most 250 bytes (docs/protocol.md), so its length fits a byte.
        v.push(u8::try_from(key.len()).unwrap_or(u8::MAX));
        v.push(lease_s);
        v.extend_from_slice(key);
        v.extend_from_slice(owner);
        Slot(v.into_boxed_slice())
    }
    fn key(&self) -> &[u8] {
        &self.0[2..2 + usize::from(self.0[0])]
    }
    fn owner(&self) -> &[u8] {
        &self.0[2 + usize::from(self.0[0])..]
    }
    fn lease_s(&self) -> u8 {
        self.0[1]
    }
}

/// Holders by key, compactly (see the module docs). A raw hash table, so a
/// holder can also be found by the hash of its key ([`HeldTable::hash_of`],
/// [`HeldTable::by_hash`]): one hasher, seeded at random once per process,
/// so a key has the same hash in every table of the process (a snapshot
/// installed, a state rebuilt) and in no other process.
#[derive(Clone, Default)]
pub(super) struct HeldTable {
    /// Per held key: its slot and `(token, granted_dt)`.
    table: hashbrown::HashTable<(Slot, (u64, u64))>,
}

fn hasher() -> &'static std::collections::hash_map::RandomState {
    static HASHER: std::sync::OnceLock<std::collections::hash_map::RandomState> = std::sync::OnceLock::new();
    HASHER.get_or_init(Default::default)
}

impl std::fmt::Debug for HeldTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldTable").field("len", &self.table.len()).finish()
    }
}

/// One holder as the table stores it, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HolderRef<'a> {
    pub key: &'a [u8],
    pub owner: &'a [u8],
    pub token: u64,
    pub lease_s: u8,
    pub granted_dt: u64,
}

impl HolderRef<'_> {
    /// The owned [`Holder`] (`None` only if the stored bytes were not a
    /// valid owner or token, which `insert` never stores).
    pub fn to_holder(self) -> Option<Holder> {
        Some(Holder {
            owner: Owner::new(bytes::Bytes::copy_from_slice(self.owner)).ok()?,
            token: Token::new(self.token).ok()?,
            lease_s: self.lease_s,
            granted_dt: self.granted_dt,
            slot: None,
        })
    }

    /// The owned key.
    pub fn to_key(self) -> Option<Key> {
        Key::new(bytes::Bytes::copy_from_slice(self.key)).ok()
    }
}

fn holder_ref((slot, (token, granted_dt)): &(Slot, (u64, u64))) -> HolderRef<'_> {
    HolderRef { key: slot.key(), owner: slot.owner(), token: *token, lease_s: slot.lease_s(), granted_dt: *granted_dt }
}

impl HeldTable {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// The hash of `key` (the same in every table of this process, and
    /// meaningless in any other).
    pub fn hash_of(key: &[u8]) -> u64 {
        hasher().hash_one(key)
    }

    fn find(&self, key: &[u8]) -> Option<&(Slot, (u64, u64))> {
        self.table.find(Self::hash_of(key), |(slot, _)| slot.key() == key)
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.find(key).is_some()
    }

    pub fn get(&self, key: &[u8]) -> Option<HolderRef<'_>> {
        self.find(key).map(holder_ref)
    }

    /// Every holder whose key has the hash `hash` ([`HeldTable::hash_of`]).
    pub fn by_hash(&self, hash: u64) -> impl Iterator<Item = HolderRef<'_>> {
        self.table.iter_hash(hash).filter(move |(slot, _)| Self::hash_of(slot.key()) == hash).map(holder_ref)
    }

    /// Sets the holder of `key` (replacing any).
    pub fn insert(&mut self, key: &[u8], owner: &[u8], token: Token, lease_s: u8, granted_dt: u64) {
        let hash = Self::hash_of(key);
        let entry = (Slot::new(key, owner, lease_s), (token.get(), granted_dt));
        match self.table.entry(hash, |(slot, _)| slot.key() == key, |(slot, _)| Self::hash_of(slot.key())) {
            hashbrown::hash_table::Entry::Occupied(mut o) => *o.get_mut() = entry,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(entry);
            }
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> bool {
        match self.table.find_entry(Self::hash_of(key), |(slot, _)| slot.key() == key) {
            Ok(o) => {
                o.remove();
                true
            }
            Err(_) => false,
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = HolderRef<'_>> {
        self.table.iter().map(holder_ref)
    }
}

impl PartialEq for HeldTable {
    fn eq(&self, other: &HeldTable) -> bool {
        self.len() == other.len() && self.iter().all(|h| other.get(h.key) == Some(h))
    }
}
impl Eq for HeldTable {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_holders_by_key_and_by_the_hash_of_their_key() {
        let mut t = HeldTable::default();
        let token = |n| Token::new(n).unwrap();
        for i in 1..=1000u64 {
            t.insert(format!("k{i}").as_bytes(), format!("o{i}").as_bytes(), token(i), 5, i);
        }
        t.insert(b"k7", b"again", token(2000), 9, 3);
        assert_eq!(t.len(), 1000);
        for i in 1..=1000u64 {
            let key = format!("k{i}");
            let found: Vec<_> = t.by_hash(HeldTable::hash_of(key.as_bytes())).collect();
            assert_eq!(found.len(), 1, "{key}");
            assert_eq!(found[0], t.get(key.as_bytes()).unwrap());
        }
        let k7 = t.get(b"k7").unwrap();
        assert_eq!((k7.owner, k7.token, k7.lease_s, k7.granted_dt), (&b"again"[..], 2000, 9, 3));
        // The same hash in another table of the process.
        let mut other = HeldTable::default();
        other.insert(b"k7", b"x", token(1), 1, 0);
        assert_eq!(other.by_hash(HeldTable::hash_of(b"k7")).count(), 1);
        assert!(t.remove(b"k7") && !t.remove(b"k7"));
        assert_eq!((t.len(), t.by_hash(HeldTable::hash_of(b"k7")).count(), t.get(b"k7")), (999, 0, None));
    }
}
