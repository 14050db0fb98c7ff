//! The binary snapshot of a [`LockState`] (docs/cluster-protocol.md,
//! "Snapshots"): deterministic (holders sorted by key), versioned, and
//! validated field by field on the way in, so garbage is refused with a
//! clear error instead of being installed.
//!
//! ```text
//! "TKLS" version:u8 last_token:u64 dt:u64 count:u64
//! count × ( key_len:u8 key owner_len:u8 owner token:u64 lease_s:u8 granted_dt:u64 )
//! version 3 only: counted:u64
//! counted × ( key_len:u8 key owner_len:u8 owner token:u64 lease_s:u8 granted_dt:u64 slot:u16 )
//! ```
//! Integers are little-endian. The first list holds the exclusive holders,
//! keys strictly increasing (bytewise); the second the counted holders,
//! `(key, slot)` strictly increasing, no key of the first list among them.
//! Version 2 (no counted holders) is written whenever there are none, so a
//! node of an earlier build reads it; this build reads both. An owner
//! of lowercase hex (what the clients generate: 32 characters) is stored as
//! its raw bytes, `owner_len = 0x80 | raw length`; any other owner as its
//! text, `owner_len` < 0x80 (owners are at most 64 bytes).

use super::{Holder, LockState};
use std::fmt;
use ticketing_proto::limits::TOKEN_MAX;
use ticketing_proto::{Key, Owner, Token};

/// The magic bytes that open a snapshot.
pub const MAGIC: &[u8; 4] = b"TKLS";
/// The snapshot format version this build writes when there are counted
/// holders (and reads, as it reads [`VERSION_EXCLUSIVE`]).
pub const VERSION: u8 = 3;
/// The format without counted holders: written when there are none.
pub const VERSION_EXCLUSIVE: u8 = 2;

/// Why a snapshot was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError(pub String);

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid lock-state snapshot: {}", self.0)
    }
}

impl std::error::Error for SnapshotError {}

fn bad(why: impl Into<String>) -> SnapshotError {
    SnapshotError(why.into())
}

impl LockState {
    /// The part of a snapshot taken while the state cannot change: one
    /// linear pass that copies every holder's record, unsorted, into one
    /// buffer (the counted holders, usually few, are encoded whole).
    /// [`SnapshotDraft::finish`] sorts and assembles it afterwards, so a
    /// caller holding the state's lock holds it for the copy only, not for
    /// the sort (docs/benchmarks.md, "A million held keys").
    pub fn snapshot_draft(&self) -> SnapshotDraft {
        let mut records = Vec::with_capacity(self.held.iter().map(|h| 19 + h.key.len() + h.owner.len()).sum());
        let mut starts = Vec::with_capacity(self.held.len());
        for h in self.held.iter() {
            starts.push(records.len());
            put_holder(&mut records, h.key, h.owner, h.token, h.lease_s, h.granted_dt);
        }
        let mut counted: Vec<(&Key, &Holder)> =
            self.counted.iter().flat_map(|(k, hs)| hs.iter().map(move |h| (k, h))).collect();
        counted.sort_unstable_by(|a, b| (a.0.as_bytes(), a.1.slot).cmp(&(b.0.as_bytes(), b.1.slot)));
        let mut tail = Vec::new();
        if !counted.is_empty() {
            tail.extend_from_slice(&(counted.len() as u64).to_le_bytes());
            for (key, h) in counted {
                put_holder(&mut tail, key.as_bytes(), h.owner.as_bytes(), h.token.get(), h.lease_s, h.granted_dt);
                tail.extend_from_slice(&h.slot.unwrap_or(0).to_le_bytes());
            }
        }
        SnapshotDraft { last_token: self.last_token, dt: self.dt, records, starts, counted: tail }
    }

    /// Appends the binary snapshot of this state to `out` (see the module docs).
    pub fn encode_snapshot(&self, out: &mut Vec<u8>) {
        self.snapshot_draft().finish_into(out);
    }

    /// The binary snapshot of this state.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_snapshot(&mut out);
        out
    }

    /// Reads a snapshot written by [`LockState::encode_snapshot`], refusing
    /// anything else: wrong magic or version, truncation, trailing bytes,
    /// invalid keys/owners/tokens, tokens above the counter, keys out of order.
    pub fn from_snapshot(data: &[u8]) -> Result<LockState, SnapshotError> {
        let mut r = Reader { data, at: 0 };
        if r.take(4)? != MAGIC {
            return Err(bad("does not start with TKLS"));
        }
        let version = r.u8()?;
        if version != VERSION && version != VERSION_EXCLUSIVE {
            return Err(bad(format!("format version {version}, this build reads {VERSION_EXCLUSIVE} and {VERSION}")));
        }
        let last_token = r.u64()?;
        if last_token > TOKEN_MAX {
            return Err(bad(format!("token counter {last_token} is not below 2^63")));
        }
        let dt = r.u64()?;
        let count = r.u64()?;
        // Each holder takes at least 21 bytes: a count above that is a lie.
        if count > (data.len() as u64) / 21 {
            return Err(bad(format!("{count} holders cannot fit in {} bytes", data.len())));
        }
        let mut state = LockState { last_token, held: Default::default(), counted: Default::default(), dt };
        let mut prev: Option<&[u8]> = None;
        for i in 0..count {
            let h = r.holder(i, last_token, dt)?;
            if prev.is_some_and(|p| p >= h.key) {
                return Err(bad(format!("holder {i}: keys not in strictly increasing order")));
            }
            prev = Some(h.key);
            state.held.insert(h.key, h.owner.as_bytes(), h.token, h.lease_s, h.granted_dt);
        }
        if version == VERSION {
            let counted = r.u64()?;
            if counted > (data.len() as u64) / 23 {
                return Err(bad(format!("{counted} counted holders cannot fit in {} bytes", data.len())));
            }
            let mut prev: Option<(&[u8], u16)> = None;
            for i in count..count + counted {
                let h = r.holder(i, last_token, dt)?;
                let slot = r.u16()?;
                if slot == u16::MAX {
                    return Err(bad(format!("holder {i}: slot {slot} is not below any n")));
                }
                if prev.is_some_and(|p| p >= (h.key, slot)) {
                    return Err(bad(format!("holder {i}: (key, slot) not in strictly increasing order")));
                }
                if state.held.contains(h.key) {
                    return Err(bad(format!("holder {i}: a key held both exclusively and counted")));
                }
                prev = Some((h.key, slot));
                let key =
                    Key::new(bytes::Bytes::copy_from_slice(h.key)).map_err(|e| bad(format!("holder {i}: {e}")))?;
                let holder = Holder {
                    owner: h.owner,
                    token: h.token,
                    lease_s: h.lease_s,
                    granted_dt: h.granted_dt,
                    slot: Some(slot),
                };
                state.counted.entry(key).or_default().push(holder);
            }
        }
        if r.at != data.len() {
            return Err(bad(format!("{} trailing bytes", data.len() - r.at)));
        }
        Ok(state)
    }
}

impl LockState {
    /// The state a backup's snapshot `data` restores (docs/operating.md,
    /// "Backup and disaster recovery"): its holders and token counter, its
    /// domain time moved to `dt`, each holder's grant moved with it, so that
    /// every lease keeps the time it had left when the backup was taken
    /// (a grant older than `dt` allows starts at 0: a little more, never less).
    pub fn restored(data: &[u8], dt: u64) -> Result<LockState, SnapshotError> {
        let old = LockState::from_snapshot(data)?;
        let moved = |granted: u64| granted.saturating_add(dt).saturating_sub(old.dt);
        let mut state =
            LockState { last_token: old.last_token, held: Default::default(), counted: Default::default(), dt };
        for h in old.held.iter() {
            let key = h.key;
            let holder = h.to_holder().ok_or_else(|| bad("a holder that does not read back"))?;
            state.held.insert(key, holder.owner.as_bytes(), holder.token, holder.lease_s, moved(holder.granted_dt));
        }
        for (key, holders) in old.counted {
            let moved_holders = holders.into_iter().map(|h| Holder { granted_dt: moved(h.granted_dt), ..h }).collect();
            state.counted.insert(key, moved_holders);
        }
        Ok(state)
    }

    /// The longest time (ms of domain time) any holder still has, 0 when
    /// none holds: how long a restored domain waits before its first grant.
    pub fn longest_lease_left(&self) -> u64 {
        self.holders().map(|(_, h)| h.end_dt().saturating_sub(self.dt)).max().unwrap_or(0)
    }
}

/// A snapshot copied out of a [`LockState`] but not yet in key order
/// ([`LockState::snapshot_draft`]); owns its bytes, so it can be finished
/// on another thread while the state moves on.
#[derive(Debug)]
pub struct SnapshotDraft {
    last_token: u64,
    dt: u64,
    /// The exclusive holders' records (`put_holder`), in table order.
    records: Vec<u8>,
    /// Where each record of `records` starts.
    starts: Vec<usize>,
    /// The counted section (its count and records, sorted), or nothing.
    counted: Vec<u8>,
}

impl SnapshotDraft {
    /// The snapshot: the same bytes [`LockState::encode_snapshot`] writes.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::new();
        self.finish_into(&mut out);
        out
    }

    fn finish_into(mut self, out: &mut Vec<u8>) {
        let records = &self.records;
        let key_at = |start: usize| &records[start + 1..start + 1 + usize::from(records[start])];
        self.starts.sort_unstable_by(|&a, &b| key_at(a).cmp(key_at(b)));
        out.reserve(29 + records.len() + self.counted.len());
        out.extend_from_slice(MAGIC);
        out.push(if self.counted.is_empty() { VERSION_EXCLUSIVE } else { VERSION });
        out.extend_from_slice(&self.last_token.to_le_bytes());
        out.extend_from_slice(&self.dt.to_le_bytes());
        out.extend_from_slice(&(self.starts.len() as u64).to_le_bytes());
        for &start in &self.starts {
            out.extend_from_slice(&records[start..start + record_len(&records[start..])]);
        }
        out.extend_from_slice(&self.counted);
    }
}

/// The length of the `put_holder` record at the start of `rec`.
fn record_len(rec: &[u8]) -> usize {
    let key_len = usize::from(rec[0]);
    let owner_len = usize::from(rec[1 + key_len] & 0x7F);
    1 + key_len + 1 + owner_len + 8 + 1 + 8
}

/// One holder's common fields (key ≤ 250 and owner ≤ 64 bytes, validated
/// types, so the lengths fit a byte).
fn put_holder(out: &mut Vec<u8>, key: &[u8], owner: &[u8], token: u64, lease_s: u8, granted_dt: u64) {
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    put_owner(out, owner);
    out.extend_from_slice(&token.to_le_bytes());
    out.push(lease_s);
    out.extend_from_slice(&granted_dt.to_le_bytes());
}

/// A holder's common fields as read, validated.
struct ReadHolder<'a> {
    key: &'a [u8],
    owner: Owner,
    token: Token,
    lease_s: u8,
    granted_dt: u64,
}

/// An even length (whole bytes).
fn hex_len_ok(len: usize) -> bool {
    len / 2 * 2 == len
}

/// Lowercase hex of even length: its raw bytes with the 0x80 flag; else the text.
fn put_owner(out: &mut Vec<u8>, owner: &[u8]) {
    let hex = owner.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) && hex_len_ok(owner.len());
    let mut raw = [0u8; 32];
    let raw = &mut raw[..owner.len() / 2];
    if hex && hex::decode_to_slice(owner, raw).is_ok() {
        out.push(0x80 | raw.len() as u8);
        out.extend_from_slice(raw);
    } else {
        out.push(owner.len() as u8);
        out.extend_from_slice(owner);
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SnapshotError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len()).ok_or_else(|| bad("truncated"))?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }
    fn u8(&mut self) -> Result<u8, SnapshotError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, SnapshotError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    /// Holder `i`'s common fields, each validated (`put_holder`).
    fn holder(&mut self, i: u64, last_token: u64, dt: u64) -> Result<ReadHolder<'a>, SnapshotError> {
        let key_len = usize::from(self.u8()?);
        let key = self.take(key_len)?;
        Key::new(bytes::Bytes::copy_from_slice(key)).map_err(|e| bad(format!("holder {i}: {e}")))?;
        let owner_len = self.u8()?;
        let owner = match owner_len & 0x80 {
            0 => self.take(usize::from(owner_len))?.to_vec(),
            _ => hex::encode(self.take(usize::from(owner_len & 0x7F))?).into_bytes(),
        };
        let owner = Owner::new(owner).map_err(|e| bad(format!("holder {i}: {e}")))?;
        let token = Token::new(self.u64()?).map_err(|e| bad(format!("holder {i}: {e}")))?;
        if token.get() > last_token {
            return Err(bad(format!("holder {i}: token {} above the counter {last_token}", token.get())));
        }
        let lease_s = self.u8()?;
        let granted_dt = self.u64()?;
        if granted_dt > dt {
            return Err(bad(format!("holder {i}: granted at {granted_dt} ms, after the domain time {dt}")));
        }
        Ok(ReadHolder { key, owner, token, lease_s, granted_dt })
    }
    fn u64(&mut self) -> Result<u64, SnapshotError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::{Command, FreeReason, NextHolder};

    use crate::test_fields::{k, o};

    fn sample() -> LockState {
        let mut s = LockState::new();
        for (i, key) in ["b", "a", "zz", "k-1"].iter().enumerate() {
            let g = Command::Grant { key: k(key), owner: o(&format!("o{i}")), lease_s: 5, micros: 10, dt: i as u64 };
            s.apply(&g);
        }
        let h = s.holder(&k("a")).unwrap();
        let next = vec![NextHolder::exclusive(o("next"), 9)];
        s.apply(&Command::Free {
            reason: FreeReason::Release,
            key: k("a"),
            owner: h.owner,
            token: h.token,
            next,
            micros: 99,
            dt: 7,
        });
        s
    }

    #[test]
    fn round_trips_the_full_state_deterministically() {
        let s = sample();
        let bytes = s.to_snapshot();
        let back = LockState::from_snapshot(&bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!((back.last_token(), back.domain_time(), back.held_count()), (s.last_token(), 7, 4));
        for (key, h) in s.holders() {
            assert_eq!(back.holder(&key), Some(h));
        }
        // Built in another insertion order: the same bytes.
        let mut other = LockState::from_snapshot(&bytes).unwrap();
        other.held = Default::default();
        let mut hs: Vec<_> = s.holders().collect();
        hs.reverse();
        for (key, h) in hs {
            other.held.insert(key.as_bytes(), h.owner.as_bytes(), h.token, h.lease_s, h.granted_dt);
        }
        assert_eq!(other.to_snapshot(), bytes);
        assert_eq!(LockState::from_snapshot(&LockState::new().to_snapshot()).unwrap(), LockState::new());
    }

    #[test]
    fn a_draft_is_the_snapshot_of_the_state_it_was_taken_from() {
        let mut s = sample();
        let want = s.to_snapshot();
        let draft = s.snapshot_draft();
        // The state moves on (a new holder, a new counter) before the draft is finished.
        s.apply(&Command::Grant { key: k("later"), owner: o("o9"), lease_s: 5, micros: 10, dt: 8 });
        assert_ne!(s.to_snapshot(), want);
        let bytes = draft.finish();
        assert_eq!(bytes, want);
        let back = LockState::from_snapshot(&bytes).unwrap();
        assert_eq!((back.held_count(), back.holder(&k("later"))), (4, None));
    }

    #[test]
    fn hex_owners_are_stored_raw_and_others_as_text() {
        let mut s = LockState::new();
        let owners = ["0123456789abcdef0123456789abcdef", "ABCD", "abc", "x", &"f".repeat(64)];
        for (i, owner) in owners.iter().enumerate() {
            s.apply(&Command::Grant { key: k(&format!("k{i}")), owner: o(owner), lease_s: 5, micros: 1, dt: 0 });
        }
        let bytes = s.to_snapshot();
        let back = LockState::from_snapshot(&bytes).unwrap();
        assert_eq!(back, s);
        let text: usize = owners.iter().map(|o| o.len()).sum();
        assert_eq!(bytes.len(), 29 + owners.len() * 19 + 5 * 2 + text - 16 - 32, "hex owners not halved");
    }

    #[test]
    fn garbage_is_refused_with_a_clear_error() {
        let good = sample().to_snapshot();
        let err = |d: &[u8]| LockState::from_snapshot(d).unwrap_err().to_string();
        assert!(err(b"garbage").contains("TKLS"), "{}", err(b"garbage"));
        assert!(err(b"").contains("truncated"));
        let mut v = good.clone();
        v[4] = 9;
        assert!(err(&v).contains("version 9"), "{}", err(&v));
        for cut in [5, 20, 28, 29, 30, good.len() - 1] {
            let e = err(&good[..cut]);
            assert!(e.contains("truncated") || e.contains("cannot fit"), "cut {cut}: {e}");
        }
        let mut v = good.clone();
        v.push(0);
        assert!(err(&v).contains("trailing"));
        // The counter below a holder's token.
        let mut v = good.clone();
        v[5..13].copy_from_slice(&1u64.to_le_bytes());
        assert!(err(&v).contains("above the counter"), "{}", err(&v));
        // A key byte outside 0x21-0x7E.
        let mut v = good.clone();
        v[30] = b' ';
        assert!(err(&v).contains("holder 0"), "{}", err(&v));
        // A huge count.
        let mut v = good.clone();
        v[21..29].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(err(&v).contains("cannot fit"), "{}", err(&v));
        // Two holders swapped: out of order.
        let s = sample();
        let mut swapped = Vec::new();
        let mut hs: Vec<_> = s.holders().collect();
        hs.sort_by(|a, b| b.0.cmp(&a.0));
        swapped.extend_from_slice(&good[..29]);
        for (key, h) in hs {
            swapped.push(key.as_bytes().len() as u8);
            swapped.extend_from_slice(key.as_bytes());
            put_owner(&mut swapped, h.owner.as_bytes());
            swapped.extend_from_slice(&h.token.get().to_le_bytes());
            swapped.push(h.lease_s);
            swapped.extend_from_slice(&h.granted_dt.to_le_bytes());
        }
        assert_eq!(swapped.len(), good.len());
        assert!(err(&swapped).contains("order"), "{}", err(&swapped));
    }

    #[test]
    fn counted_holders_need_version_3_and_exclusive_states_stay_version_2() {
        let mut s = sample();
        assert_eq!(s.to_snapshot()[4], VERSION_EXCLUSIVE, "no counted holder: readable by earlier builds");
        let shared =
            |owner: &str, dt| Command::GrantShared { key: k("sem"), owner: o(owner), n: 3, lease_s: 5, micros: 1, dt };
        s.apply(&shared("r1", 7));
        s.apply(&shared("r2", 7));
        s.apply(&shared("r3", 7));
        let h = s.holders_of(&k("sem"));
        assert_eq!(h.iter().map(|h| h.slot).collect::<Vec<_>>(), vec![Some(0), Some(1), Some(2)]);
        // Free slot 1: the next counted holder takes it.
        s.apply(&Command::Free {
            reason: FreeReason::Release,
            key: k("sem"),
            owner: o("r2"),
            token: h[1].token,
            next: vec![],
            micros: 1,
            dt: 7,
        });
        let bytes = s.to_snapshot();
        assert_eq!(bytes[4], VERSION);
        let back = LockState::from_snapshot(&bytes).unwrap();
        assert_eq!(back, s);
        assert_eq!(back.holders_of(&k("sem")).iter().map(|h| h.slot).collect::<Vec<_>>(), vec![Some(0), Some(2)]);
        let mut again = back.clone();
        again.apply(&shared("r4", 7));
        assert_eq!(again.holders_of(&k("sem"))[1].slot, Some(1));
        // Garbage in the counted part is refused too.
        let err = |d: &[u8]| LockState::from_snapshot(d).unwrap_err().to_string();
        let mut v = bytes.clone();
        let n = v.len();
        v[n - 2..].copy_from_slice(&0u16.to_le_bytes()); // the last holder's slot 2 -> 0: a duplicate
        assert!(err(&v).contains("increasing"), "{}", err(&v));
        let mut v = bytes.clone();
        v.truncate(n - 1);
        assert!(err(&v).contains("truncated"), "{}", err(&v));
        let mut v = bytes;
        v[4] = VERSION_EXCLUSIVE; // a version-2 reader finds trailing bytes
        assert!(err(&v).contains("trailing"), "{}", err(&v));
    }
}
