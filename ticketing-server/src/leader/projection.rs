//! The leader's projection of the lock state: per key the projected holder,
//! the FIFO queue of waiters and the releases waiting for the key's
//! in-flight proposal; the waiters by id and by connection; the server-wide
//! counts the limits are checked against (held keys, queued waiters).
//!
//! It also owns the leader's one timer table ([`Timers`]), so a timer
//! leaves with what it belongs to: a waiter's wait timer is armed in
//! `insert_waiter` and disarmed in `take_waiter` (`waiters.rs`), a key's
//! lease timer is armed and disarmed in `update_holders`.
//!
//! A plain struct: no I/O, no runtime, no clock reads (times are inputs),
//! so every rule here is unit-tested directly. Its counters are maintained
//! in one place each: `held` only in `update_holders` and
//! [`Projection::clear`] (and `drop_dormant`); the held keys per principal
//! (`held_by`) with it, and where a dormant key's principal is kept or
//! dropped (`put_dormant`, `drop_dormant`); a key's `live` count,
//! `total_waiters` and the per-connection index only in `insert_waiter` and
//! `take_waiter`.
//! What it stores is in `entries.rs`, its read-only views in `view.rs`, its
//! invariants in `check.rs`.

mod check;
mod entries;
mod view;
mod waiters;

pub use entries::{Grant, Holding, QueuedQuery, QueuedRelease, Waiter};

use super::contention::Contention;
use super::timers::{TimerKind, Timers};
use super::{ConnId, WaiterId};
use crate::domain_time::DomainClock;
use crate::locks::GrantKind;
use crate::locks::Holder;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use ticketing_proto::{Key, Owner, Token};

/// The projection keeps every key while it has at most this many: above it,
/// a key that is only held (see [`Projection::remove_if_idle`]) leaves it.
pub const DORMANT_ABOVE: usize = 10_000;

/// Per key: what almost every key has (its holders, the in-flight flag) inline,
/// the queues only for the few keys that have any (docs/benchmarks.md,
/// "Optimizations: memory": a held key without waiters costs one small slot).
#[derive(Debug, Default)]
struct KeyState {
    /// One exclusive holder, or counted ones (grants being committed included).
    holders: Vec<Holding>,
    /// A proposal for this key is in flight.
    busy: bool,
    /// Waiters and requests queued on the key; `None` when there are none.
    rare: Option<Box<Queues>>,
}

#[derive(Debug, Default)]
struct Queues {
    /// FIFO of waiter ids; ids no longer in `Projection::waiters` are dead and skipped.
    queue: VecDeque<WaiterId>,
    /// Live waiters in `queue`.
    live: usize,
    /// Releases waiting for the in-flight proposal.
    releases: VecDeque<QueuedRelease>,
    /// Queries waiting for the in-flight proposal.
    queries: VecDeque<QueuedQuery>,
}

impl Queues {
    fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.live == 0 && self.releases.is_empty() && self.queries.is_empty()
    }
}

/// Adds a holder to a key's list. Most keys have one holder all their life
/// (an exclusive grant), so the first takes a list of exactly one instead
/// of `Vec`'s first growth to four (about 240 bytes per held key at a
/// million keys, docs/benchmarks.md "Optimizations: memory"); counted
/// holders after it grow the list as usual.
fn push_holder(hs: &mut Vec<Holding>, h: Holding) {
    if hs.capacity() == 0 {
        hs.reserve_exact(1);
    }
    hs.push(h);
}

impl KeyState {
    fn live(&self) -> usize {
        self.rare.as_ref().map_or(0, |q| q.live)
    }
    fn queues(&mut self) -> &mut Queues {
        self.rare.get_or_insert_with(Box::default)
    }
    /// Frees the queues once nothing is in them.
    fn shrink(&mut self) {
        if self.rare.as_ref().is_some_and(|q| q.is_empty()) {
            self.rare = None;
        }
    }
    fn is_idle(&self) -> bool {
        self.holders.is_empty() && !self.busy && self.rare.as_ref().is_none_or(|q| q.is_empty())
    }
}

/// The leader-local lock projection (see the module docs).
#[derive(Debug, Default)]
pub struct Projection {
    keys: HashMap<Key, KeyState>,
    waiters: HashMap<WaiterId, Waiter>,
    by_conn: HashMap<ConnId, HashSet<WaiterId>>,
    next_waiter: u64,
    /// Every wait and lease timer (and the `Tick` and grace, armed by the leader).
    timers: Timers,
    /// Holders over all keys, grants in flight included (a counted holder
    /// counts as one held key, docs/configuration.md "Limits").
    held: usize,
    /// Live waiters over all keys, a multi-key waiter once per key.
    total_waiters: usize,
    /// The same per principal (waiters of connections with one).
    by_principal: HashMap<Arc<str>, usize>,
    /// Held keys per principal: the holders this leader granted to a
    /// connection with a principal that count toward `held` (dormant ones
    /// included). Holders read from the applied state (a new term) count
    /// for nobody (docs/security.md, "Several teams: principals").
    held_by: HashMap<Arc<str>, usize>,
    /// Live waiters per key, ranked (the console's most contended keys).
    contention: Contention,
    /// Held keys the projection keeps no entry for, by their holder's lease
    /// end (domain time, ms) and the key's hash (`locks::key_hash`): how many
    /// of them have that pair. Their holders are read back from the applied
    /// state when a request or the lease end touches them
    /// ([`Projection::hydrate`]); they count in `held`, and in `held_by`
    /// for the principal they keep.
    dormant: BTreeMap<(u64, u64), Dormant>,
    /// The principals named by `dormant` entries (`Dormant::principal` − 1):
    /// 4 bytes per dormant key instead of a name.
    names: Vec<Arc<str>>,
    /// The index in `names` of each name.
    name_ix: HashMap<Arc<str>, u32>,
    /// The keys in `dormant`.
    dormant_len: usize,
    /// Keys above which idle held keys go dormant ([`DORMANT_ABOVE`]).
    dormant_above: usize,
}

/// The dormant keys of one `dormant` index entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Dormant {
    /// How many (more than one only if two keys' hashes and lease ends
    /// are equal).
    n: u32,
    /// Its holder's principal: 1 + its index in `Projection::names`, 0 for
    /// none. Two keys in one entry keep none (both stop counting for their
    /// principals when the second arrives, so nothing is uncounted twice).
    principal: u32,
}

/// Adds one held key to `principal`'s count.
fn count_held(held_by: &mut HashMap<Arc<str>, usize>, principal: &Arc<str>) {
    match held_by.get_mut(principal) {
        Some(n) => *n += 1,
        None => {
            held_by.insert(principal.clone(), 1);
        }
    }
}

/// Takes one held key off `principal`'s count.
fn uncount_held(held_by: &mut HashMap<Arc<str>, usize>, principal: &str) {
    if let Some(n) = held_by.get_mut(principal) {
        *n -= 1;
        if *n == 0 {
            held_by.remove(principal);
        }
    }
}

/// The `dormant` index entry of `key` held by `h`: only a lone exclusive
/// committed holder can be dormant.
fn dormant_entry(key: &Key, h: &Holding) -> Option<(u64, u64)> {
    match h.grant {
        Grant::Committed { granted_dt, lease_s, slot: None, .. } if !h.shared => {
            Some((crate::locks::lease_end_dt(granted_dt, lease_s), crate::locks::key_hash(key)))
        }
        _ => None,
    }
}

impl Projection {
    /// An empty projection.
    pub fn new() -> Projection {
        Projection { dormant_above: DORMANT_ABOVE, ..Projection::default() }
    }

    /// Sets the key count above which idle held keys go dormant (tests: 0, always).
    pub fn set_dormant_above(&mut self, n: usize) {
        self.dormant_above = n;
    }

    /// Held keys without an entry (see `dormant`).
    pub fn dormant(&self) -> usize {
        self.dormant_len
    }

    /// Whether `key` has an entry.
    pub fn knows(&self, key: &Key) -> bool {
        self.keys.contains_key(key)
    }

    /// The earliest lease end (domain time) and key hash of a dormant key.
    pub fn first_dormant(&self) -> Option<(u64, u64)> {
        self.dormant.keys().next().copied()
    }

    /// Whether the applied holder `h` of `key` is a dormant one.
    pub fn is_dormant(&self, key: &Key, h: &Holder) -> bool {
        h.slot.is_none()
            && !self.keys.contains_key(key)
            && self.dormant.contains_key(&(h.end_dt(), crate::locks::key_hash(key)))
    }

    /// Counts one dormant key with the index entry `entry`, held by a
    /// grant to `principal` (already counted in `held_by`).
    fn put_dormant(&mut self, entry: (u64, u64), principal: Option<&Arc<str>>) {
        self.dormant_len += 1;
        let slot = self.dormant.entry(entry).or_default();
        slot.n += 1;
        if slot.n > 1 {
            // A second key with the same hash and lease end: neither keeps
            // its principal (see `Dormant::principal`).
            if let Some(name) = slot.principal.checked_sub(1).and_then(|i| self.names.get(i as usize)) {
                uncount_held(&mut self.held_by, name);
            }
            slot.principal = 0;
            if let Some(p) = principal {
                uncount_held(&mut self.held_by, p);
            }
            return;
        }
        let Some(p) = principal else { return };
        slot.principal = match self.name_ix.get(p) {
            Some(&i) => i + 1,
            // As many names as principals were configured since this term
            // began: far below u32::MAX (beyond it, the key would count for
            // nobody).
            None => match u32::try_from(self.names.len()).ok().filter(|&i| i < u32::MAX) {
                Some(i) => {
                    self.names.push(p.clone());
                    self.name_ix.insert(p.clone(), i);
                    i + 1
                }
                None => {
                    uncount_held(&mut self.held_by, p);
                    0
                }
            },
        };
    }

    /// Removes one dormant key with the index entry `entry`, if there is
    /// one: `Some` with the principal it still counts for.
    fn take_dormant(&mut self, entry: (u64, u64)) -> Option<Option<Arc<str>>> {
        let slot = self.dormant.get_mut(&entry)?;
        slot.n -= 1;
        let principal = slot.principal.checked_sub(1).and_then(|i| self.names.get(i as usize)).cloned();
        if slot.n == 0 {
            self.dormant.remove(&entry);
        }
        self.dormant_len -= 1;
        Some(principal)
    }

    /// A held key of a new term, from the applied state: dormant when the
    /// state is large and it can be, else an entry with its lease timer.
    pub fn add_applied(&mut self, key: &Key, h: Holder, clock: &DomainClock, now: Instant) {
        let deadline = clock.instant_of(h.end_dt(), now);
        let holding = Holding::until(h.owner, h.token, h.granted_dt, h.slot, h.lease_s, deadline);
        match dormant_entry(key, &holding) {
            Some(entry) if self.keys.len() >= self.dormant_above => {
                self.held += 1;
                self.put_dormant(entry, None);
            }
            _ => self.add_holder(key, holding),
        }
    }

    /// Gives a dormant `key` its entry back from its applied holders
    /// (`applied`), its lease timer at its domain-time end; nothing if the
    /// key has an entry or is not dormant. Whether it was dormant.
    pub fn hydrate(&mut self, key: &Key, applied: Vec<Holder>, clock: &DomainClock, now: Instant) -> bool {
        if self.dormant_len == 0 || self.keys.contains_key(key) {
            return false;
        }
        let hash = crate::locks::key_hash(key);
        for h in applied {
            if h.slot.is_some() {
                continue;
            }
            let Some(principal) = self.take_dormant((h.end_dt(), hash)) else { continue };
            let deadline = clock.instant_of(h.end_dt(), now);
            let ks = self.keys.entry(key.clone()).or_default();
            let holding = Holding::until(h.owner, h.token, h.granted_dt, None, h.lease_s, deadline).of(principal);
            push_holder(&mut ks.holders, holding);
            self.timers.arm(TimerKind::Lease(key.clone()), deadline);
            return true;
        }
        false
    }

    /// Forgets the dormant index entry `entry` that no applied holder
    /// matches (the applied state lost it): it no longer counts as held.
    pub fn drop_dormant(&mut self, entry: (u64, u64)) {
        if let Some(principal) = self.take_dormant(entry) {
            self.held -= 1;
            if let Some(p) = principal {
                uncount_held(&mut self.held_by, &p);
            }
        }
    }

    /// Holders over all keys, grants being committed included.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Keys held by grants of this leader to principal `name` (see `held_by`).
    pub fn held_of(&self, name: &str) -> usize {
        self.held_by.get(name).copied().unwrap_or(0)
    }

    /// Waiters queued over all keys, a multi-key waiter once per key.
    pub fn waiters(&self) -> usize {
        self.total_waiters
    }

    /// Waiters of principal `name` over all keys, a multi-key waiter once per key.
    pub fn waiters_of(&self, name: &str) -> usize {
        self.by_principal.get(name).copied().unwrap_or(0)
    }

    /// Waiters queued on `key`.
    pub fn queued(&self, key: &Key) -> usize {
        self.keys.get(key).map_or(0, KeyState::live)
    }

    /// The projected holders of `key`, those being freed included.
    pub fn holders(&self, key: &Key) -> &[Holding] {
        self.keys.get(key).map_or(&[], |ks| &ks.holders)
    }

    /// Whether `key` has no holder (one being freed does not count).
    pub fn is_free(&self, key: &Key) -> bool {
        !self.holders(key).iter().any(Holding::holds)
    }

    /// Whether a request of `kind` is compatible with the projected holders
    /// of `key` (docs/protocol.md, "A key's holders"): exclusive and
    /// multi-key requests only on a free key; a counted one when every
    /// holder is counted and fewer than `n` hold.
    pub fn compatible(&self, key: &Key, kind: &GrantKind) -> bool {
        let mut holders = self.holders(key).iter().filter(|h| h.holds());
        match kind {
            GrantKind::Exclusive | GrantKind::All { .. } => holders.next().is_none(),
            GrantKind::Shared { n } => {
                let (mut count, mut shared) = (0, true);
                for h in holders {
                    count += 1;
                    shared &= h.shared;
                }
                shared && count < usize::from(*n)
            }
        }
    }

    /// The first live waiter of `key`'s queue.
    pub fn head(&self, key: &Key) -> Option<WaiterId> {
        let q = self.keys.get(key)?.rare.as_ref()?;
        q.queue.iter().copied().find(|wid| self.waiters.contains_key(wid))
    }

    /// Whether a proposal for `key` is in flight.
    pub fn is_busy(&self, key: &Key) -> bool {
        self.keys.get(key).is_some_and(|ks| ks.busy)
    }

    /// Marks a proposal for `key` in flight (or finished).
    pub fn set_busy(&mut self, key: &Key, busy: bool) {
        if busy {
            self.keys.entry(key.clone()).or_default().busy = true;
        } else if let Some(ks) = self.keys.get_mut(key) {
            ks.busy = false;
        }
    }

    /// A live waiter.
    pub fn waiter(&self, wid: WaiterId) -> Option<&Waiter> {
        self.waiters.get(&wid)
    }

    /// The timer table.
    pub fn timers(&self) -> &Timers {
        &self.timers
    }

    /// The timer table, to arm the `Tick` and the grace and to take due timers.
    pub fn timers_mut(&mut self) -> &mut Timers {
        &mut self.timers
    }

    /// Changes the holders of `key` with `f`: THE place `held` and
    /// `held_by` change (with [`Projection::clear`] and the dormant index),
    /// and THE place its lease timer is set — at the earliest lease end of
    /// its committed holders, or disarmed when none.
    fn update_holders(&mut self, key: &Key, f: impl FnOnce(&mut Vec<Holding>)) {
        let ks = self.keys.entry(key.clone()).or_default();
        let before = ks.holders.iter().filter(|h| h.counts()).count();
        let was = ks.holders.iter().filter_map(Holding::deadline).min();
        for p in ks.holders.iter().filter_map(Holding::counts_for) {
            uncount_held(&mut self.held_by, p);
        }
        f(&mut ks.holders);
        for p in ks.holders.iter().filter_map(Holding::counts_for) {
            count_held(&mut self.held_by, p);
        }
        let after = ks.holders.iter().filter(|h| h.counts()).count();
        self.held = self.held + after - before;
        let first = ks.holders.iter().filter_map(Holding::deadline).min();
        // The timer is armed at `was` unless it fired since (then the table
        // no longer has it, and a lease end still pending is armed again).
        let armed = was.filter(|&at| self.timers.is_armed(TimerKind::Lease(key.clone()), at));
        if armed != first {
            if let Some(at) = armed {
                self.timers.disarm(TimerKind::Lease(key.clone()), at);
            }
            if let Some(at) = first {
                self.timers.arm(TimerKind::Lease(key.clone()), at);
            }
        }
        if ks.holders.is_empty() && ks.holders.capacity() > 0 {
            ks.holders = Vec::new();
        }
        self.remove_if_idle(key);
    }

    /// Adds a holder of `key`.
    pub fn add_holder(&mut self, key: &Key, h: Holding) {
        self.update_holders(key, |hs| push_holder(hs, h));
    }

    /// Replaces the grant of `owner` being committed on `key` by `h` (its
    /// outcome); adds `h` if there is none.
    pub fn commit_holder(&mut self, key: &Key, owner: &Owner, h: Holding) {
        self.update_holders(key, |hs| {
            match hs.iter_mut().find(|x| x.owner == *owner && x.grant == Grant::Committing) {
                Some(x) => *x = h,
                None => push_holder(hs, h),
            }
        });
    }

    /// Removes the grant `(owner, token)` of `key` (committed or being
    /// freed), if there.
    pub fn remove_holder(&mut self, key: &Key, owner: &Owner, token: Token) {
        self.update_holders(key, |hs| hs.retain(|h| !(h.owner == *owner && h.token() == Some(token))));
    }

    /// Marks the committed grant `(owner, token)` of `key` as being freed
    /// (its release or expiry is proposed); `counted`: whether it still
    /// counts toward `--max-held-keys`, `for_principal`: toward its
    /// principal's (see [`Grant::Freeing`]).
    pub fn mark_freeing(&mut self, key: &Key, owner: &Owner, token: Token, counted: bool, for_principal: bool) {
        self.update_holders(key, |hs| {
            for h in hs.iter_mut().filter(|h| h.owner == *owner && h.token() == Some(token)) {
                h.grant = Grant::Freeing { token, counted, counted_for_principal: for_principal };
            }
        });
    }

    /// Removes the grant of `owner` being committed on `key`, if there.
    pub fn remove_committing(&mut self, key: &Key, owner: &Owner) {
        self.update_holders(key, |hs| {
            if let Some(at) = hs.iter().position(|h| h.owner == *owner && h.grant == Grant::Committing) {
                hs.remove(at);
            }
        });
    }

    /// Sets every holder of `key` (a resync from the applied state).
    pub fn set_holders(&mut self, key: &Key, holders: Vec<Holding>) {
        self.update_holders(key, |hs| *hs = holders);
    }

    /// Queues an `R` behind the key's in-flight proposal.
    pub fn push_release(&mut self, key: &Key, r: QueuedRelease) {
        self.keys.entry(key.clone()).or_default().queues().releases.push_back(r);
    }

    /// Queues a `Q` behind the key's in-flight proposal.
    pub fn push_query(&mut self, key: &Key, q: QueuedQuery) {
        self.keys.entry(key.clone()).or_default().queues().queries.push_back(q);
    }

    /// Every queued `Q` of `key`, oldest first.
    pub fn take_queries(&mut self, key: &Key) -> Vec<QueuedQuery> {
        let Some(ks) = self.keys.get_mut(key) else { return Vec::new() };
        let Some(q) = ks.rare.as_mut() else { return Vec::new() };
        let out = q.queries.drain(..).collect();
        ks.shrink();
        out
    }

    /// The oldest queued `R` of `key`.
    pub fn pop_release(&mut self, key: &Key) -> Option<QueuedRelease> {
        let ks = self.keys.get_mut(key)?;
        let out = ks.rare.as_mut()?.releases.pop_front();
        ks.shrink();
        out
    }

    /// Forgets `key` if nothing refers to it any more; lets it go dormant
    /// if it is only held (one exclusive committed holder, nothing queued or
    /// in flight) and the projection has more than `dormant_above` keys:
    /// a million held keys then cost the leader an index entry each, not a
    /// copy of what the applied state has (docs/benchmarks.md, "Optimizations: memory").
    pub fn remove_if_idle(&mut self, key: &Key) {
        let Some(ks) = self.keys.get(key) else { return };
        if ks.is_idle() {
            self.keys.remove(key);
            return;
        }
        if self.keys.len() <= self.dormant_above || ks.busy || ks.rare.is_some() || ks.holders.len() != 1 {
            return;
        }
        let h = &ks.holders[0];
        let (Some(entry), Some(deadline)) = (dormant_entry(key, h), h.deadline()) else { return };
        let principal = h.principal.clone();
        self.timers.disarm(TimerKind::Lease(key.clone()), deadline);
        self.keys.remove(key);
        self.put_dormant(entry, principal.as_ref());
    }

    /// Empties the projection and the timer table (a leadership change);
    /// returns the waiters it held.
    pub fn clear(&mut self) -> Vec<Waiter> {
        let waiters = self.waiters.drain().map(|(_, w)| w).collect();
        self.timers.clear();
        self.keys.clear();
        self.by_conn.clear();
        self.held = 0;
        self.total_waiters = 0;
        self.by_principal.clear();
        self.held_by.clear();
        self.contention.clear();
        self.dormant.clear();
        self.dormant_len = 0;
        self.names.clear();
        self.name_ix.clear();
        waiters
    }
}

#[cfg(test)]
mod tests;
