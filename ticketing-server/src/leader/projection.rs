//! The leader's projection of the lock state: per key the projected holder,
//! the FIFO queue of waiters and the releases waiting for the key's
//! in-flight proposal; the waiters by id and by connection; the server-wide
//! counts the limits are checked against (held keys, queued waiters).
//!
//! It also owns the leader's one timer table ([`Timers`]), so a timer
//! leaves with what it belongs to: a waiter's wait timer is armed in
//! `insert_waiter` and disarmed in `take_waiter`, a holder's lease timer is
//! armed and disarmed in [`Projection::set_holder`].
//!
//! A plain struct: no I/O, no runtime, no clock reads (times are inputs),
//! so every rule here is unit-tested directly. Its counters are maintained
//! in one place each: `held` only in [`Projection::set_holder`] and
//! [`Projection::clear`]; a key's `live` count, `total_waiters` and the
//! per-connection index only in `insert_waiter` and `take_waiter`.

use super::contention::Contention;
use super::timers::{TimerKind, Timers};
use super::{owner_prefix, ConnId, HolderInfo, LockInfo, WaiterId, WaiterInfo};
use crate::locks::GrantKind;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use ticketing_proto::{Key, Owner, RequestId, Token};

/// A queued (or about to be granted) acquire.
#[derive(Debug, Clone)]
pub struct Waiter {
    /// The connection that sent the `A`.
    pub conn: ConnId,
    /// Its request id.
    pub id: RequestId,
    /// The key.
    pub key: Key,
    /// The owner.
    pub owner: Owner,
    /// Lease, whole seconds.
    pub lease: u8,
    /// When the server read the request.
    pub read_at: Instant,
    /// When its wait ends.
    pub wait_until: Instant,
    /// Exclusive (`A`), counted (`S … n`) or every key of a set (`K`, whose
    /// first key is `key`).
    pub kind: GrantKind,
}

impl Waiter {
    /// Every key it waits for: `key`, or all keys of a multi-key acquire.
    pub fn keys(&self) -> &[Key] {
        match &self.kind {
            GrantKind::All { keys } => keys,
            _ => std::slice::from_ref(&self.key),
        }
    }

    /// Whether it waits for `key`.
    pub fn has_key(&self, key: &Key) -> bool {
        self.keys().contains(key)
    }
}

/// One projected holder of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// Owner of the grant.
    pub owner: Owner,
    /// A counted holder (`S`); else it holds the key exclusively.
    pub shared: bool,
    /// Being committed, or committed with its token and lease.
    pub grant: Grant,
}

/// Where a projected grant is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The grant is being committed (the key counts as held meanwhile).
    Committing,
    /// The grant is committed.
    Committed {
        /// Its fencing token.
        token: Token,
        /// Its lease end at the leader (its lease timer).
        deadline: Instant,
        /// Domain time (ms) of the grant.
        granted_dt: u64,
        /// A counted holder's slot.
        slot: Option<u16>,
    },
    /// Its release or expiry is being committed: no longer a holder the
    /// key's waiters wait for, nor one a new request conflicts with. It
    /// counts toward `--max-held-keys` until the command commits unless
    /// the command hands the key over (`counted: false`: the next holder
    /// takes its place), so a failure that puts it back never exceeds the cap.
    Freeing {
        /// Its fencing token.
        token: Token,
        /// Still counted as held.
        counted: bool,
    },
}

impl Holding {
    /// A grant being committed.
    pub fn committing(owner: Owner, shared: bool) -> Holding {
        Holding { owner, shared, grant: Grant::Committing }
    }

    /// A committed grant whose lease ends at `deadline` (`slot`: a counted one's).
    pub fn until(owner: Owner, token: Token, granted_dt: u64, slot: Option<u16>, deadline: Instant) -> Holding {
        Holding { owner, shared: slot.is_some(), grant: Grant::Committed { token, deadline, granted_dt, slot } }
    }

    /// A committed grant whose lease runs `lease` seconds from `now` (its
    /// commit at this leader), granted at domain time `granted_dt`.
    pub fn committed(
        owner: Owner,
        token: Token,
        lease: u8,
        granted_dt: u64,
        slot: Option<u16>,
        now: Instant,
    ) -> Holding {
        Holding::until(owner, token, granted_dt, slot, now + Duration::from_secs(u64::from(lease)))
    }

    /// Whether this is the committed grant `(owner, token)` (not one being freed).
    pub fn is(&self, owner: &Owner, token: Token) -> bool {
        self.owner == *owner && matches!(self.grant, Grant::Committed { token: t, .. } if t == token)
    }

    /// The token, once committed (also while being freed).
    pub fn token(&self) -> Option<Token> {
        match self.grant {
            Grant::Committed { token, .. } | Grant::Freeing { token, .. } => Some(token),
            Grant::Committing => None,
        }
    }

    /// The lease end, once committed (none while being freed).
    pub fn deadline(&self) -> Option<Instant> {
        match self.grant {
            Grant::Committed { deadline, .. } => Some(deadline),
            Grant::Committing | Grant::Freeing { .. } => None,
        }
    }

    /// A holder waiters and requests must reckon with (not one being freed).
    pub fn holds(&self) -> bool {
        !matches!(self.grant, Grant::Freeing { .. })
    }

    /// Counts toward `--max-held-keys`.
    fn counts(&self) -> bool {
        !matches!(self.grant, Grant::Freeing { counted: false, .. })
    }
}

/// A `Q` waiting for the key's in-flight proposal (so a grant being
/// committed is answered by its outcome, not `N`).
#[derive(Debug, Clone)]
pub struct QueuedQuery {
    /// The connection that sent the `Q`.
    pub conn: ConnId,
    /// Its request id.
    pub id: RequestId,
    /// Owner named in the `Q`.
    pub owner: Owner,
}

/// An `R` waiting for the key's in-flight proposal.
#[derive(Debug, Clone)]
pub struct QueuedRelease {
    /// The connection that sent the `R`.
    pub conn: ConnId,
    /// Its request id.
    pub id: RequestId,
    /// Owner named in the `R`.
    pub owner: Owner,
    /// Token named in the `R`.
    pub token: Token,
}

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
    /// Live waiters per key, ranked (the console's most contended keys).
    contention: Contention,
}

impl Projection {
    /// An empty projection.
    pub fn new() -> Projection {
        Projection::default()
    }

    /// Holders over all keys, grants being committed included.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Waiters queued over all keys, a multi-key waiter once per key.
    pub fn waiters(&self) -> usize {
        self.total_waiters
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

    /// Changes the holders of `key` with `f`: THE place `held` changes (with
    /// [`Projection::clear`]), and THE place its lease timer is set — at the
    /// earliest lease end of its committed holders, or disarmed when none.
    fn update_holders(&mut self, key: &Key, f: impl FnOnce(&mut Vec<Holding>)) {
        let ks = self.keys.entry(key.clone()).or_default();
        let before = ks.holders.iter().filter(|h| h.counts()).count();
        let was = ks.holders.iter().filter_map(Holding::deadline).min();
        f(&mut ks.holders);
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
    /// counts toward `--max-held-keys` (see [`Grant::Freeing`]).
    pub fn mark_freeing(&mut self, key: &Key, owner: &Owner, token: Token, counted: bool) {
        self.update_holders(key, |hs| {
            for h in hs.iter_mut().filter(|h| h.owner == *owner && h.token() == Some(token)) {
                h.grant = Grant::Freeing { token, counted };
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

    fn insert_waiter(&mut self, w: Waiter, front: bool, timed: bool) -> WaiterId {
        self.next_waiter += 1;
        let wid = WaiterId(self.next_waiter);
        if timed {
            self.timers.arm(TimerKind::Wait(wid), w.wait_until);
        }
        for key in w.keys() {
            let q = self.keys.entry(key.clone()).or_default().queues();
            if front {
                q.queue.push_front(wid);
            } else {
                q.queue.push_back(wid);
            }
            q.live += 1;
            self.total_waiters += 1;
            self.contention.waiter_added(key);
        }
        self.by_conn.entry(w.conn).or_default().insert(wid);
        self.waiters.insert(wid, w);
        wid
    }

    /// Takes a live waiter out of every index (its id stays in its keys'
    /// queues as a dead entry, skipped or compacted later).
    fn take_waiter(&mut self, wid: WaiterId) -> Option<Waiter> {
        let w = self.waiters.remove(&wid)?;
        self.timers.disarm(TimerKind::Wait(wid), w.wait_until);
        for key in w.keys() {
            self.total_waiters -= 1;
            self.contention.waiter_removed(key);
            if let Some(q) = self.keys.get_mut(key).and_then(|ks| ks.rare.as_mut()) {
                q.live -= 1;
            }
        }
        if let Some(set) = self.by_conn.get_mut(&w.conn) {
            set.remove(&wid);
            if set.is_empty() {
                self.by_conn.remove(&w.conn);
            }
        }
        Some(w)
    }

    /// Puts `w` at the tail of its key's queue, with a wait timer (at
    /// `w.wait_until`) if `timed`.
    pub fn enqueue(&mut self, w: Waiter, timed: bool) -> WaiterId {
        self.insert_waiter(w, false, timed)
    }

    /// Puts `w` back at the head of its key's queue (a hand-over to it did
    /// not happen), with its wait timer.
    pub fn requeue_front(&mut self, w: Waiter) -> WaiterId {
        self.insert_waiter(w, true, true)
    }

    /// Takes the first live waiter off the key's queue.
    pub fn pop_head(&mut self, key: &Key) -> Option<Waiter> {
        let wid = self.head(key)?;
        self.remove_waiter(wid)
    }

    /// Removes a live waiter (granted, its wait ended, its connection left)
    /// from every key it waits for; a key left idle is forgotten.
    pub fn remove_waiter(&mut self, wid: WaiterId) -> Option<Waiter> {
        let w = self.take_waiter(wid)?;
        for key in w.keys() {
            if let Some(ks) = self.keys.get_mut(key) {
                if let Some(q) = ks.rare.as_mut() {
                    // Drop dead entries at the head at once; compact when dead
                    // entries dominate, so a long-held key with many timed-out
                    // waiters does not grow its queue without bound.
                    let waiters = &self.waiters;
                    while q.queue.front().is_some_and(|id| !waiters.contains_key(id)) {
                        q.queue.pop_front();
                    }
                    if q.live == 0 {
                        q.queue.clear();
                    } else if q.queue.len() > 2 * q.live + 32 {
                        q.queue.retain(|id| waiters.contains_key(id));
                    }
                }
                ks.shrink();
            }
            self.remove_if_idle(key);
        }
        Some(w)
    }

    /// Removes every waiter of `conn`, in no particular order.
    pub fn remove_conn_waiters(&mut self, conn: ConnId) -> Vec<Waiter> {
        let ids = self.by_conn.remove(&conn).unwrap_or_default();
        ids.into_iter().filter_map(|wid| self.remove_waiter(wid)).collect()
    }

    /// Every key with a live waiter (the end of the start grace; O(keys)).
    pub fn keys_with_waiters(&self) -> Vec<Key> {
        self.keys.iter().filter(|(_, ks)| ks.live() > 0).map(|(k, _)| k.clone()).collect()
    }

    /// Forgets `key` if nothing refers to it any more.
    pub fn remove_if_idle(&mut self, key: &Key) {
        if self.keys.get(key).is_some_and(KeyState::is_idle) {
            self.keys.remove(key);
        }
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
        self.contention.clear();
        waiters
    }

    /// The `n` keys with the most live waiters, most first.
    pub fn contended(&self, n: usize) -> Vec<(Key, usize)> {
        self.contention.top(n)
    }

    /// The read-only view of `key` for `/locks/<key>` (a grant still being
    /// committed is not shown): its holders and every waiter in FIFO order,
    /// with owner prefixes only; `client` names a waiter's connection.
    pub fn lock_info(&self, key: &Key, now: Instant, client: &dyn Fn(ConnId) -> String) -> LockInfo {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let Some(ks) = self.keys.get(key) else { return LockInfo::default() };
        let mut holders: Vec<HolderInfo> = ks
            .holders
            .iter()
            .filter_map(|h| match h.grant {
                Grant::Committed { token, deadline, granted_dt, slot } => Some(HolderInfo {
                    owner_prefix: owner_prefix(&h.owner),
                    token,
                    remaining_ms: ms(deadline.saturating_duration_since(now)),
                    granted_dt,
                    slot,
                }),
                Grant::Committing | Grant::Freeing { .. } => None,
            })
            .collect();
        holders.sort_by_key(|h| h.slot);
        let waiters = ks
            .rare
            .iter()
            .flat_map(|q| q.queue.iter())
            .filter_map(|wid| self.waiters.get(wid))
            .filter(|w| w.has_key(key))
            .map(|w| WaiterInfo {
                owner_prefix: owner_prefix(&w.owner),
                client: client(w.conn),
                waited_ms: ms(now.saturating_duration_since(w.read_at)),
                wait_left_ms: ms(w.wait_until.saturating_duration_since(now)),
                kind: match w.kind {
                    GrantKind::Exclusive => "exclusive",
                    GrantKind::Shared { .. } => "shared",
                    GrantKind::All { .. } => "all",
                },
                n: match w.kind {
                    GrantKind::Shared { n } => Some(n),
                    _ => None,
                },
                keys: match &w.kind {
                    GrantKind::All { keys } => Some(keys.iter().map(|k| k.as_str().to_owned()).collect()),
                    _ => None,
                },
            })
            .collect();
        LockInfo { holder: holders.first().cloned(), holders, waiters, domain_time_ms: 0 }
    }

    /// Checks every counter against a recount, and every timer against what
    /// it belongs to (tests; also the fuzz target, through [`super::Leader::check`]).
    pub fn check(&self) {
        let counted = |k: &KeyState| k.holders.iter().filter(|h| h.counts()).count();
        assert_eq!(self.held, self.keys.values().map(counted).sum::<usize>(), "held");
        let per_key: usize = self.waiters.values().map(|w| w.keys().len()).sum();
        assert_eq!(self.total_waiters, per_key, "total_waiters");
        assert_eq!(self.total_waiters, self.keys.values().map(KeyState::live).sum::<usize>(), "live");
        assert_eq!(self.waiters.len(), self.by_conn.values().map(HashSet::len).sum::<usize>(), "by_conn");
        for (key, ks) in &self.keys {
            assert_eq!(self.contention.waiters(key), ks.live(), "contention of {key:?}");
            let holding: Vec<_> = ks.holders.iter().filter(|h| h.holds()).collect();
            let exclusive = holding.iter().filter(|h| !h.shared).count();
            assert!(exclusive == 0 || holding.len() == 1, "an exclusive holder of {key} beside another");
        }
        assert_eq!(self.contention.keys(), self.keys.values().filter(|ks| ks.live() > 0).count(), "contended keys");
        for (key, ks) in &self.keys {
            let queue = ks.rare.iter().flat_map(|q| q.queue.iter());
            let live = queue.filter(|id| self.waiters.get(id).is_some_and(|w| w.has_key(key))).count();
            assert_eq!(live, ks.live(), "live of {key}");
            assert!(ks.rare.as_ref().is_none_or(|q| !q.is_empty()), "empty queues kept for {key}");
        }
        // No timer outlives what it belongs to, and none is armed twice.
        let mut seen = HashSet::new();
        for kind in self.timers.kinds() {
            assert!(seen.insert(kind), "{kind:?} armed twice");
            match kind {
                TimerKind::Wait(wid) => {
                    let w = self.waiters.get(wid).expect("a wait timer without its waiter");
                    assert!(self.timers.is_armed(kind.clone(), w.wait_until), "wait timer of {wid:?}");
                }
                TimerKind::Lease(key) => {
                    let first = self.holders(key).iter().filter_map(Holding::deadline).min();
                    let first = first.unwrap_or_else(|| panic!("a lease timer of {key} without a committed holder"));
                    assert!(
                        self.timers.is_armed(kind.clone(), first),
                        "lease timer of {key} not at its first lease end"
                    );
                }
                TimerKind::Tick | TimerKind::GraceEnd => {}
            }
        }
        assert!(self.timers.len() <= self.keys.len() + self.waiters.len() + 2, "timer table larger than the state");
    }
}

#[cfg(test)]
mod tests;
