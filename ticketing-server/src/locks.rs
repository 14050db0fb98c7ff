//! THE lock state machine (docs/protocol.md §6): the only place where a grant, a
//! release or an expiry takes effect.
//!
//! [`LockState::apply`] is pure and deterministic: it reads no clock (the
//! proposing leader's wall-clock microseconds and its domain time `dt` travel
//! inside the command) and gives the same [`Applied`] on every node for the
//! same sequence of commands. Standalone mode applies commands directly; cluster mode applies
//! the same commands after Raft commits them. Waiters, wait timers and lease
//! timers are leader-local and live in `leader`; only holders (with the
//! domain time of their grant), the token counter and the largest applied
//! domain time are replicated (docs/protocol.md, "Domain time").

mod snapshot;
mod table;
pub mod wire;

pub use snapshot::SnapshotError;

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use table::HeldTable;
use ticketing_proto::limits::TOKEN_MAX;
use ticketing_proto::{Key, Owner, Token};

/// How a grant holds its key(s) (docs/protocol.md, "Counted and multi-key grants").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum GrantKind {
    /// The key alone, exclusively (`A`).
    Exclusive,
    /// One of at most `n` counted holders of the key (`S … n`).
    Shared {
        /// The request's permit count, 1–65535.
        n: u16,
    },
    /// Every one of `keys` exclusively, with one token (`K`); the key a
    /// command names is one of them.
    All {
        /// 2–16 distinct keys, in the request's order.
        keys: Vec<Key>,
    },
}

/// Who a key is handed to in the same command that frees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextHolder {
    /// The waiter's owner.
    pub owner: Owner,
    /// The waiter's lease, whole seconds.
    pub lease_s: u8,
    /// How it holds the key (and, for [`GrantKind::All`], which other keys).
    pub kind: GrantKind,
}

impl NextHolder {
    /// An exclusive waiter of the key.
    pub fn exclusive(owner: Owner, lease_s: u8) -> NextHolder {
        NextHolder { owner, lease_s, kind: GrantKind::Exclusive }
    }
}

/// Why a grant is freed: its holder's `R`, or the end of its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FreeReason {
    /// Its holder released it (`R`).
    Release,
    /// Its lease ended.
    Expiry,
}

/// A replicated command. Every variant carries the proposing leader's domain
/// time `dt` (ms, docs/protocol.md "Domain time"); those that can issue a
/// token also carry its wall clock (`micros` since the Unix epoch) for the
/// token rule of docs/protocol.md §6.
///
/// On the wire (a Raft log entry) every command keeps the encoding of
/// [`wire::WireCommand`]: a [`Command::Free`] that hands over to at most one
/// exclusive waiter is the `Release` or `Expire` command peers have always
/// read; the counted and multi-key forms have variants of their own
/// (docs/cluster-protocol.md "Log entries").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Grant a free key exclusively.
    Grant {
        /// The key.
        key: Key,
        /// The new holder.
        owner: Owner,
        /// Lease, whole seconds.
        lease_s: u8,
        /// Proposer's wall clock, µs since the epoch.
        micros: u64,
        /// Proposer's domain time, ms.
        dt: u64,
    },
    /// A counted grant of `key`: taken when every holder is counted and
    /// fewer than `n` hold; the holder gets the lowest slot no other has.
    GrantShared {
        /// The key.
        key: Key,
        /// The new holder.
        owner: Owner,
        /// The request's permit count, 1–65535.
        n: u16,
        /// Lease, whole seconds.
        lease_s: u8,
        /// Proposer's wall clock, µs since the epoch.
        micros: u64,
        /// Proposer's domain time, ms.
        dt: u64,
    },
    /// Grant every key of `keys` exclusively with ONE token, or none of them.
    GrantAll {
        /// 2–16 distinct keys.
        keys: Vec<Key>,
        /// The new holder.
        owner: Owner,
        /// Lease, whole seconds.
        lease_s: u8,
        /// Proposer's wall clock, µs since the epoch.
        micros: u64,
        /// Proposer's domain time, ms.
        dt: u64,
    },
    /// Free the exact grant `(owner, token)` of `key` — released by its
    /// holder or expired — and hand the key over to every holder of `next`,
    /// in order, in this same command.
    Free {
        /// Why: a release or an expiry (only the outcome's name differs).
        reason: FreeReason,
        /// The key.
        key: Key,
        /// Holder's owner.
        owner: Owner,
        /// Holder's token.
        token: Token,
        /// Queue heads to grant in this same command, in FIFO order.
        next: Vec<NextHolder>,
        /// Proposer's wall clock, µs since the epoch.
        micros: u64,
        /// Proposer's domain time, ms.
        dt: u64,
    },
    /// Nothing but the domain time: committed after `--tick-ms` without any
    /// other commit, so a new leader's domain time starts at most one tick
    /// (plus the failover) behind.
    Tick {
        /// Proposer's domain time, ms.
        dt: u64,
    },
}

impl Command {
    /// Every key the command can change: its key, every key of a
    /// multi-key grant, and every key of a multi-key waiter it hands over to.
    pub fn keys(&self) -> Vec<&Key> {
        match self {
            Command::Grant { key, .. } | Command::GrantShared { key, .. } => vec![key],
            Command::GrantAll { keys, .. } => keys.iter().collect(),
            Command::Free { key, next, .. } => {
                let mut out = vec![key];
                for n in next {
                    if let GrantKind::All { keys } = &n.kind {
                        out.extend(keys.iter().filter(|k| *k != key));
                    }
                }
                out
            }
            Command::Tick { .. } => Vec::new(),
        }
    }

    /// The proposer's domain time, ms.
    pub fn dt(&self) -> u64 {
        match self {
            Command::Grant { dt, .. }
            | Command::GrantShared { dt, .. }
            | Command::GrantAll { dt, .. }
            | Command::Free { dt, .. }
            | Command::Tick { dt } => *dt,
        }
    }
}

impl Serialize for Command {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        wire::WireCommandRef::from(self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Command {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Command, D::Error> {
        wire::WireCommand::deserialize(d).map(Command::from)
    }
}

/// A grant that took effect: its token, and its slot if counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issued {
    /// The new token.
    pub token: Token,
    /// The counted holder's slot (`None` for an exclusive grant).
    pub slot: Option<u16>,
}

/// What applying a command did (its effect on the replicated state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    /// `Grant` or `GrantAll` took effect with this token.
    Granted(Token),
    /// `GrantShared` took effect with this token and slot.
    GrantedShared {
        /// The new token.
        token: Token,
        /// The holder's slot.
        slot: u16,
    },
    /// A grant found its key (or one of its keys) not grantable: nothing changed.
    AlreadyHeld,
    /// A grant was grantable but the token counter is at its end
    /// (2^63 − 1): nothing changed, and no grant can ever take effect again.
    TokensExhausted,
    /// `Free` matched and took effect; `handed_over` has one entry per
    /// holder of `next`, in order: what it was granted, or why not
    /// ([`Applied::AlreadyHeld`] or [`Applied::TokensExhausted`]).
    Freed {
        /// The command's reason.
        reason: FreeReason,
        /// One entry per next holder.
        handed_over: Vec<Result<Issued, Applied>>,
    },
    /// `Free` did not match a current holder: nothing changed.
    NotHolder,
    /// `Tick`: only the domain time moved.
    Ticked,
}

/// One holder of a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Owner of the grant.
    pub owner: Owner,
    /// Token of the grant.
    pub token: Token,
    /// Lease of the grant, whole seconds.
    pub lease_s: u8,
    /// Domain time (ms) of the command that granted it: the lease ends at
    /// domain time `granted_dt + lease_s × 1000`, on whichever leader serves then.
    pub granted_dt: u64,
    /// A counted holder's slot; `None` for the exclusive holder.
    pub slot: Option<u16>,
}

impl Holder {
    /// The domain time (ms) at which the lease ends.
    pub fn end_dt(&self) -> u64 {
        self.granted_dt.saturating_add(u64::from(self.lease_s) * 1000)
    }
}

/// The replicated lock state: holders, the domain's token counter and the
/// largest domain time applied. Exclusive holders live in a compact table
/// (one slot and one allocation per held key, docs/benchmarks.md
/// "Optimizations: memory"), the counted holders of a key in a list by
/// slot; a key is in one of them or none. Snapshots are binary
/// ([`LockState::encode_snapshot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockState {
    last_token: u64,
    held: HeldTable,
    /// Counted holders by key, each list sorted by slot and never empty.
    counted: HashMap<Key, Vec<Holder>>,
    /// The largest `dt` applied (ms); a new leader's domain time starts here.
    dt: u64,
}

impl LockState {
    /// An empty state (no holders, no token issued yet).
    pub fn new() -> LockState {
        LockState::default()
    }

    /// The last token issued (0 before the first grant).
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// The largest domain time applied (ms; 0 before the first command).
    pub fn domain_time(&self) -> u64 {
        self.dt
    }

    /// Applies `cmds` in order, one outcome each: exactly applying them one by
    /// one (a Raft entry's batch, or a standalone proposal, is only a unit of
    /// commitment; docs/cluster-protocol.md, "Log entries").
    pub fn apply_all(&mut self, cmds: &[Command]) -> Vec<Applied> {
        cmds.iter().map(|cmd| self.apply(cmd)).collect()
    }

    /// The exclusive holder of `key`, or else its counted holder of the lowest slot.
    pub fn holder(&self, key: &Key) -> Option<Holder> {
        match self.held.get(key.as_bytes()) {
            Some(h) => h.to_holder(),
            None => self.counted.get(key).and_then(|hs| hs.first().cloned()),
        }
    }

    /// Every holder of `key`: the exclusive one, or the counted ones by slot.
    pub fn holders_of(&self, key: &Key) -> Vec<Holder> {
        match self.held.get(key.as_bytes()) {
            Some(h) => h.to_holder().into_iter().collect(),
            None => self.counted.get(key).cloned().unwrap_or_default(),
        }
    }

    /// Number of holders (a counted holder counts as one held key).
    pub fn held_count(&self) -> usize {
        self.held.len() + self.counted.values().map(Vec::len).sum::<usize>()
    }

    /// Every holder, in no particular order (used when a node becomes leader).
    pub fn holders(&self) -> impl Iterator<Item = (Key, Holder)> + '_ {
        let exclusive = self.held.iter().filter_map(|h| Some((h.to_key()?, h.to_holder()?)));
        let counted = self.counted.iter().flat_map(|(k, hs)| hs.iter().map(move |h| (k.clone(), h.clone())));
        exclusive.chain(counted)
    }

    fn is_free(&self, key: &Key) -> bool {
        !self.held.contains(key.as_bytes()) && !self.counted.contains_key(key)
    }

    /// `max(last + 1, micros)`, kept below 2^63. At the (unreachable in
    /// practice) top of the range the counter stays put rather than wrap, and
    /// the grant is refused by the caller through `None`.
    fn next_token(&mut self, micros: u64) -> Option<Token> {
        let t = self.last_token.checked_add(1)?.max(micros.min(TOKEN_MAX));
        let token = Token::new(t).ok()?;
        self.last_token = t;
        Some(token)
    }

    /// Grants `key`/`keys` to `owner` as `kind` if that is compatible with
    /// the current holders (docs/protocol.md, "A key's holders"); the
    /// `Err` says why not.
    fn try_grant(
        &mut self,
        key: &Key,
        owner: &Owner,
        lease_s: u8,
        kind: &GrantKind,
        micros: u64,
        dt: u64,
    ) -> Result<Issued, Applied> {
        match kind {
            GrantKind::Exclusive => {
                if !self.is_free(key) {
                    return Err(Applied::AlreadyHeld);
                }
                let token = self.next_token(micros).ok_or(Applied::TokensExhausted)?;
                self.held.insert(key.as_bytes(), owner.as_bytes(), token, lease_s, dt);
                Ok(Issued { token, slot: None })
            }
            GrantKind::Shared { n } => {
                if self.held.contains(key.as_bytes()) {
                    return Err(Applied::AlreadyHeld);
                }
                let holders = self.counted.get(key).map_or(&[][..], Vec::as_slice);
                if holders.len() >= usize::from(*n) {
                    return Err(Applied::AlreadyHeld);
                }
                // The lowest slot no holder has: holders are sorted by slot,
                // so it is the first gap.
                let slot = holders
                    .iter()
                    .enumerate()
                    .find(|(i, h)| h.slot != u16::try_from(*i).ok())
                    .map_or(holders.len(), |(i, _)| i);
                let slot = u16::try_from(slot).map_err(|_| Applied::AlreadyHeld)?;
                let token = self.next_token(micros).ok_or(Applied::TokensExhausted)?;
                let h = Holder { owner: owner.clone(), token, lease_s, granted_dt: dt, slot: Some(slot) };
                let list = self.counted.entry(key.clone()).or_default();
                list.insert(usize::from(slot), h);
                Ok(Issued { token, slot: Some(slot) })
            }
            GrantKind::All { keys } => {
                if !keys.iter().all(|k| self.is_free(k)) {
                    return Err(Applied::AlreadyHeld);
                }
                let token = self.next_token(micros).ok_or(Applied::TokensExhausted)?;
                for k in keys {
                    self.held.insert(k.as_bytes(), owner.as_bytes(), token, lease_s, dt);
                }
                Ok(Issued { token, slot: None })
            }
        }
    }

    /// Removes the holder `(owner, token)` of `key`; false if there is none.
    fn remove_holder(&mut self, key: &Key, owner: &Owner, token: Token) -> bool {
        if let Some(h) = self.held.get(key.as_bytes()) {
            if h.owner == owner.as_bytes() && h.token == token.get() {
                self.held.remove(key.as_bytes());
                return true;
            }
            return false;
        }
        let Some(list) = self.counted.get_mut(key) else { return false };
        let Some(at) = list.iter().position(|h| h.owner == *owner && h.token == token) else { return false };
        list.remove(at);
        if list.is_empty() {
            self.counted.remove(key);
        }
        true
    }

    /// Applies one command. Deterministic: depends only on the state and the command.
    pub fn apply(&mut self, cmd: &Command) -> Applied {
        self.dt = self.dt.max(cmd.dt());
        match cmd {
            Command::Tick { .. } => Applied::Ticked,
            Command::Grant { key, owner, lease_s, micros, dt } => {
                match self.try_grant(key, owner, *lease_s, &GrantKind::Exclusive, *micros, *dt) {
                    Ok(i) => Applied::Granted(i.token),
                    Err(e) => e,
                }
            }
            Command::GrantShared { key, owner, n, lease_s, micros, dt } => {
                match self.try_grant(key, owner, *lease_s, &GrantKind::Shared { n: *n }, *micros, *dt) {
                    Ok(Issued { token, slot }) => Applied::GrantedShared { token, slot: slot.unwrap_or(0) },
                    Err(e) => e,
                }
            }
            Command::GrantAll { keys, owner, lease_s, micros, dt } => {
                let Some(first) = keys.first() else { return Applied::AlreadyHeld };
                let kind = GrantKind::All { keys: keys.clone() };
                match self.try_grant(first, owner, *lease_s, &kind, *micros, *dt) {
                    Ok(i) => Applied::Granted(i.token),
                    Err(e) => e,
                }
            }
            Command::Free { reason, key, owner, token, next, micros, dt } => {
                if !self.remove_holder(key, owner, *token) {
                    return Applied::NotHolder;
                }
                let handed_over =
                    next.iter().map(|n| self.try_grant(key, &n.owner, n.lease_s, &n.kind, *micros, *dt)).collect();
                Applied::Freed { reason: *reason, handed_over }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;
    use ticketing_proto::limits::{MAX_LEASE, MIN_LEASE};

    use crate::test_fields::{k, o};
    fn grant(key: &str, owner: &str, micros: u64) -> Command {
        Command::Grant { key: k(key), owner: o(owner), lease_s: 5, micros, dt: 0 }
    }

    #[test]
    fn token_is_max_of_last_plus_one_and_clock() {
        let mut s = LockState::new();
        assert_eq!(s.apply(&grant("a", "o1", 1000)), Applied::Granted(Token::new(1000).unwrap()));
        // clock went backwards: still strictly increasing
        assert_eq!(s.apply(&grant("b", "o2", 10)), Applied::Granted(Token::new(1001).unwrap()));
        assert_eq!(s.apply(&grant("c", "o3", 5000)), Applied::Granted(Token::new(5000).unwrap()));
        assert_eq!(s.last_token(), 5000);
    }

    #[test]
    fn grants_record_their_domain_time_and_the_state_keeps_the_largest() {
        let mut s = LockState::new();
        let g = Command::Grant { key: k("a"), owner: o("o1"), lease_s: 10, micros: 1, dt: 5_000 };
        let Applied::Granted(t1) = s.apply(&g) else { panic!() };
        assert_eq!(s.holder(&k("a")).unwrap().granted_dt, 5_000);
        assert_eq!(s.holder(&k("a")).unwrap().end_dt(), 15_000);
        assert_eq!(s.apply(&Command::Tick { dt: 5_500 }), Applied::Ticked);
        // A proposal that was overtaken in the log does not move the time back.
        assert_eq!(s.apply(&Command::Tick { dt: 5_400 }), Applied::Ticked);
        assert_eq!(s.domain_time(), 5_500);
        let next = vec![NextHolder::exclusive(o("o2"), 3)];
        let r = Command::Free {
            reason: FreeReason::Release,
            key: k("a"),
            owner: o("o1"),
            token: t1,
            next,
            micros: 2,
            dt: 6_000,
        };
        assert!(
            matches!(s.apply(&r), Applied::Freed { reason: FreeReason::Release, ref handed_over } if handed_over[0].is_ok())
        );
        let h = s.holder(&k("a")).unwrap();
        assert_eq!((h.granted_dt, h.end_dt()), (6_000, 9_000), "a hand-over is granted at the release's time");
        let snap = LockState::from_snapshot(&s.to_snapshot()).unwrap();
        assert_eq!(snap, s);
        assert_eq!(snap.domain_time(), 6_000, "snapshots carry the domain time");
    }

    #[test]
    fn grant_on_held_key_changes_nothing() {
        let mut s = LockState::new();
        s.apply(&grant("a", "o1", 1));
        let before = s.clone();
        assert_eq!(s.apply(&grant("a", "o2", 2)), Applied::AlreadyHeld);
        assert_eq!(s, before);
    }

    #[test]
    fn release_hands_over_in_the_same_command() {
        let mut s = LockState::new();
        let Applied::Granted(t1) = s.apply(&grant("a", "o1", 1)) else { panic!() };
        let next = vec![NextHolder::exclusive(o("o2"), 9)];
        let r = Command::Free {
            reason: FreeReason::Release,
            key: k("a"),
            owner: o("o1"),
            token: t1,
            next: next.clone(),
            micros: 1,
            dt: 0,
        };
        let Applied::Freed { reason: FreeReason::Release, handed_over } = s.apply(&r) else { panic!() };
        let t2 = handed_over[0].clone().unwrap().token;
        assert!(t2 > t1);
        let want = Holder { owner: o("o2"), token: t2, lease_s: 9, granted_dt: 0, slot: None };
        assert_eq!(s.holder(&k("a")).unwrap(), want);
        // the same release again does not match any more, and an expiry of the old grant neither
        assert_eq!(s.apply(&r), Applied::NotHolder);
        let e = Command::Free {
            reason: FreeReason::Expiry,
            key: k("a"),
            owner: o("o1"),
            token: t1,
            next: vec![],
            micros: 1,
            dt: 0,
        };
        assert_eq!(s.apply(&e), Applied::NotHolder);
        assert_eq!(s.holder(&k("a")).unwrap().token, t2);
    }

    #[test]
    fn release_needs_exact_owner_token_and_key() {
        let mut s = LockState::new();
        let Applied::Granted(t) = s.apply(&grant("a", "o1", 1)) else { panic!() };
        let other = Token::new(t.get() + 1).unwrap();
        for cmd in [
            Command::Free {
                reason: FreeReason::Release,
                key: k("a"),
                owner: o("o2"),
                token: t,
                next: vec![],
                micros: 0,
                dt: 0,
            },
            Command::Free {
                reason: FreeReason::Release,
                key: k("a"),
                owner: o("o1"),
                token: other,
                next: vec![],
                micros: 0,
                dt: 0,
            },
            Command::Free {
                reason: FreeReason::Release,
                key: k("b"),
                owner: o("o1"),
                token: t,
                next: vec![],
                micros: 0,
                dt: 0,
            },
        ] {
            assert_eq!(s.apply(&cmd), Applied::NotHolder);
        }
        let e = Command::Free {
            reason: FreeReason::Expiry,
            key: k("a"),
            owner: o("o1"),
            token: t,
            next: vec![],
            micros: 0,
            dt: 0,
        };
        assert_eq!(s.apply(&e), Applied::Freed { reason: FreeReason::Expiry, handed_over: vec![] });
        assert_eq!(s.held_count(), 0);
    }

    #[test]
    fn token_never_reaches_2_pow_63() {
        let mut s = LockState::new();
        assert!(matches!(s.apply(&grant("a", "o", u64::MAX)), Applied::Granted(t) if t.get() == TOKEN_MAX));
        assert_eq!(s.apply(&grant("b", "o", u64::MAX)), Applied::TokensExhausted, "exhaustion is reported as itself");
        assert_eq!(s.last_token(), TOKEN_MAX);
    }

    /// One step of a random history; `pick` chooses between the current
    /// holder's grant (so releases and expiries do match) and a stale one.
    #[derive(Debug, Clone)]
    enum Step {
        Tick { dt: u64 },
        Grant { key: u8, owner: u8, lease_s: u8, micros: u64 },
        GrantShared { key: u8, owner: u8, n: u16, micros: u64 },
        GrantAll { first: u8, more: u8, owner: u8, micros: u64 },
        Release { key: u8, pick: u8, next: Vec<(u8, u8, u8)>, micros: u64 },
        Expire { key: u8, pick: u8, next: Vec<(u8, u8, u8)>, micros: u64 },
    }

    /// A next holder's kind from a number: exclusive, counted (n 1–3) or
    /// multi-key (its key and one more).
    fn kind_of(n: u8) -> GrantKind {
        match n % 6 {
            0 | 1 => GrantKind::Exclusive,
            2..=4 => GrantKind::Shared { n: u16::from(n % 6 - 1) },
            _ => GrantKind::All { keys: vec![k(&format!("k{}", n % 4)), k(&format!("k{}", (n / 6) % 4 + 4))] },
        }
    }

    /// The holder rules of docs/protocol.md ("A key's holders") on a state:
    /// an exclusive holder alone, counted holders on distinct slots.
    fn check_holders(s: &LockState) -> Result<(), TestCaseError> {
        let mut by_key: HashMap<Key, Vec<Holder>> = HashMap::new();
        for (key, h) in s.holders() {
            by_key.entry(key).or_default().push(h);
        }
        for (key, hs) in by_key {
            let exclusive = hs.iter().filter(|h| h.slot.is_none()).count();
            prop_assert!(exclusive == 0 || hs.len() == 1, "{key}: an exclusive holder beside another");
            let mut slots: Vec<_> = hs.iter().filter_map(|h| h.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            prop_assert_eq!(slots.len(), hs.len() - exclusive, "{}: two holders on one slot", key);
            prop_assert!(hs.len() <= 3 || exclusive == 1, "{key}: more counted holders than any n allows");
        }
        Ok(())
    }

    fn step() -> impl Strategy<Value = Step> {
        let micros = prop_oneof![0..2000u64, Just(u64::MAX), any::<u64>()];
        let next = proptest::collection::vec((0..3u8, MIN_LEASE..=MAX_LEASE, any::<u8>()), 0..3);
        prop_oneof![
            (0..100_000u64).prop_map(|dt| Step::Tick { dt }),
            (0..4u8, 0..3u8, MIN_LEASE..=MAX_LEASE, micros.clone())
                .prop_map(|(key, owner, lease_s, micros)| Step::Grant { key, owner, lease_s, micros }),
            (0..4u8, 0..3u8, 1..=3u16, micros.clone()).prop_map(|(key, owner, n, micros)| Step::GrantShared {
                key,
                owner,
                n,
                micros
            }),
            (0..4u8, 4..8u8, 0..3u8, micros.clone()).prop_map(|(first, more, owner, micros)| Step::GrantAll {
                first,
                more,
                owner,
                micros
            }),
            (0..8u8, any::<u8>(), next.clone(), micros.clone()).prop_map(|(key, pick, next, micros)| Step::Release {
                key,
                pick,
                next,
                micros
            }),
            (0..8u8, any::<u8>(), next, micros).prop_map(|(key, pick, next, micros)| Step::Expire {
                key,
                pick,
                next,
                micros
            }),
        ]
    }

    /// Turns a step into a command the way a leader would: against its own
    /// view `s` (the holder's exact grant, or a wrong owner/token).
    fn command(s: &LockState, step: &Step) -> Command {
        let key = |n: u8| k(&format!("k{n}"));
        let owner = |n: u8| o(&format!("o{n}"));
        let grant_of = |n: u8, pick: u8| match (s.holders_of(&key(n)).get(usize::from(pick / 3) % 4).cloned(), pick % 3)
        {
            (Some(h), 0 | 1) => (h.owner, h.token),
            (Some(h), _) => (h.owner, Token::new(h.token.get() - 1).unwrap_or(h.token)),
            (None, _) => (owner(pick % 3), Token::new(u64::from(pick) + 1).unwrap()),
        };
        let next = |n: &Vec<(u8, u8, u8)>| -> Vec<NextHolder> {
            n.iter().map(|&(o, lease_s, kind)| NextHolder { owner: owner(o), lease_s, kind: kind_of(kind) }).collect()
        };
        // A domain time that jumps around (leader changes, reordered proposals).
        let dt = |micros: &u64| micros % 100_000;
        match step {
            Step::Tick { dt } => Command::Tick { dt: *dt },
            Step::Grant { key: n, owner: w, lease_s, micros } => {
                Command::Grant { key: key(*n), owner: owner(*w), lease_s: *lease_s, micros: *micros, dt: dt(micros) }
            }
            Step::GrantShared { key: n, owner: w, n: permits, micros } => Command::GrantShared {
                key: key(*n),
                owner: owner(*w),
                n: *permits,
                lease_s: 5,
                micros: *micros,
                dt: dt(micros),
            },
            Step::GrantAll { first, more, owner: w, micros } => Command::GrantAll {
                keys: vec![key(*first), key(*more)],
                owner: owner(*w),
                lease_s: 5,
                micros: *micros,
                dt: dt(micros),
            },
            Step::Release { key: n, pick, next: nx, micros } => {
                let (owner, token) = grant_of(*n, *pick);
                Command::Free {
                    reason: FreeReason::Release,
                    key: key(*n),
                    owner,
                    token,
                    next: next(nx),
                    micros: *micros,
                    dt: dt(micros),
                }
            }
            Step::Expire { key: n, pick, next: nx, micros } => {
                let (owner, token) = grant_of(*n, *pick);
                Command::Free {
                    reason: FreeReason::Expiry,
                    key: key(*n),
                    owner,
                    token,
                    next: next(nx),
                    micros: *micros,
                    dt: dt(micros),
                }
            }
        }
    }

    proptest! {
        /// Replicas fed the same commands end identical (holders, tokens,
        /// counter, every effect), also one restored from a snapshot midway;
        /// and every token issued is larger than every token before it.
        #[test]
        fn same_commands_same_state(
            steps in proptest::collection::vec(step(), 1..120),
            cut in any::<prop::sample::Index>(),
            batches in proptest::collection::vec(1..8usize, 1..40),
        ) {
            let mut leader = LockState::new();
            let cmds: Vec<Command> = steps.iter().map(|st| {
                let c = command(&leader, st);
                leader.apply(&c);
                c
            }).collect();
            let cut = cut.index(cmds.len());
            let (mut a, mut b) = (LockState::new(), LockState::new());
            let mut last = 0u64;
            let mut effects = Vec::new();
            for (i, c) in cmds.iter().enumerate() {
                if i == cut {
                    b = LockState::from_snapshot(&b.to_snapshot()).unwrap();
                }
                let ea = a.apply(c);
                prop_assert_eq!(&ea, &b.apply(c));
                effects.push(ea.clone());
                let issued: Vec<Token> = match &ea {
                    Applied::Granted(t) | Applied::GrantedShared { token: t, .. } => vec![*t],
                    Applied::Freed { handed_over, .. } => handed_over.iter().filter_map(|h| h.as_ref().ok().map(|i| i.token)).collect(),
                    _ => vec![],
                };
                for t in issued {
                    prop_assert!(t.get() > last, "token {} after {}", t.get(), last);
                    prop_assert!(t.get() <= TOKEN_MAX);
                    last = t.get();
                }
                check_holders(&a)?;
            }
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(&a, &leader);
            // A replica fed the same commands in batches (one Raft entry
            // each, cut at random sizes) has the same effects and state.
            let (mut batched, mut batched_effects, mut rest) = (LockState::new(), Vec::new(), &cmds[..]);
            for n in batches.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (batch, tail) = rest.split_at((*n).min(rest.len()));
                batched_effects.extend(crate::cluster::types::Batch(batch.to_vec()).apply(&mut batched));
                rest = tail;
            }
            prop_assert_eq!(&batched_effects, &effects);
            prop_assert_eq!(&batched, &a);
            prop_assert_eq!(a.last_token(), last);
            // The domain time is the largest dt applied, and every holder's
            // grant time is one that was applied.
            prop_assert_eq!(a.domain_time(), cmds.iter().map(Command::dt).max().unwrap_or(0));
            for (_, h) in a.holders() {
                prop_assert!(h.granted_dt <= a.domain_time());
            }
        }
    }
}
