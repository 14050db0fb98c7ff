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
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use ticketing_proto::{Key, Owner, Token};

/// `[key_len][lease_s][key][owner]`; hashed and compared by the key only.
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

impl Hash for Slot {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Must hash exactly like the `[u8]` it borrows as.
        self.key().hash(state)
    }
}
impl PartialEq for Slot {
    fn eq(&self, other: &Slot) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Slot {}
impl Borrow<[u8]> for Slot {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

/// Holders by key, compactly (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct HeldTable {
    /// `(token, granted_dt)` per slot.
    map: HashMap<Slot, (u64, u64)>,
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

impl HeldTable {
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.map.contains_key(key)
    }

    pub fn get(&self, key: &[u8]) -> Option<HolderRef<'_>> {
        let (slot, &(token, granted_dt)) = self.map.get_key_value(key)?;
        Some(HolderRef { key: slot.key(), owner: slot.owner(), token, lease_s: slot.lease_s(), granted_dt })
    }

    /// Sets the holder of `key` (replacing any).
    pub fn insert(&mut self, key: &[u8], owner: &[u8], token: Token, lease_s: u8, granted_dt: u64) {
        self.map.remove(key);
        self.map.insert(Slot::new(key, owner, lease_s), (token.get(), granted_dt));
    }

    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.map.remove(key).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = HolderRef<'_>> {
        self.map.iter().map(|(slot, &(token, granted_dt))| HolderRef {
            key: slot.key(),
            owner: slot.owner(),
            token,
            lease_s: slot.lease_s(),
            granted_dt,
        })
    }
}

impl PartialEq for HeldTable {
    fn eq(&self, other: &HeldTable) -> bool {
        self.len() == other.len() && self.iter().all(|h| other.get(h.key) == Some(h))
    }
}
impl Eq for HeldTable {}
