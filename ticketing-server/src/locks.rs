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
mod wire;

pub use snapshot::{SnapshotDraft, SnapshotError};

/// The domain time (ms) at which a lease of `lease_s` seconds granted at
/// `granted_dt` ends (docs/protocol.md, "Domain time").
pub fn lease_end_dt(granted_dt: u64, lease_s: u8) -> u64 {
    if crate::mutation::on("lease-early") {
        return granted_dt.saturating_add(u64::from(lease_s) * 500);
    }
    granted_dt.saturating_add(u64::from(lease_s) * 1000)
}

/// The hash of `key` that the holder table finds it by
/// ([`LockState::exclusive_by_hash`]): the same for the process's life, in
/// every state of it, and in no other process.
pub fn key_hash(key: &Key) -> u64 {
    table::HeldTable::hash_of(key.as_bytes())
}

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

impl GrantKind {
    /// Every kind's name, in [`GrantKind::index`] order: a waiter's `kind` in
    /// `/locks/<key>` and the label of `ticketing_grants_by_kind_total`.
    pub const NAMES: [&'static str; 3] = ["exclusive", "shared", "all"];

    /// Its position in [`GrantKind::NAMES`].
    pub fn index(&self) -> usize {
        match self {
            GrantKind::Exclusive => 0,
            GrantKind::Shared { .. } => 1,
            GrantKind::All { .. } => 2,
        }
    }

    /// Its name: `exclusive`, `shared` or `all`.
    pub fn name(&self) -> &'static str {
        GrantKind::NAMES[self.index()]
    }
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
/// `wire::WireCommand`: a [`Command::Free`] that hands over to at most one
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
    /// The first command of a domain restored from a backup
    /// (docs/operating.md, "Backup and disaster recovery"): an empty state
    /// becomes the snapshot's holders and token counter, its domain time
    /// moved to `dt` (each lease keeps what it had left). A no-op on a state
    /// that holds anything.
    Restore {
        /// The lock-state snapshot (docs/cluster-protocol.md, "Snapshots").
        state: Vec<u8>,
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
            Command::Tick { .. } | Command::Restore { .. } => Vec::new(),
        }
    }

    /// The proposer's domain time, ms.
    pub fn dt(&self) -> u64 {
        match self {
            Command::Grant { dt, .. }
            | Command::GrantShared { dt, .. }
            | Command::GrantAll { dt, .. }
            | Command::Free { dt, .. }
            | Command::Tick { dt }
            | Command::Restore { dt, .. } => *dt,
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
        lease_end_dt(self.granted_dt, self.lease_s)
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

    /// The exclusive holders whose key has the hash `hash` ([`key_hash`]).
    pub fn exclusive_by_hash(&self, hash: u64) -> Vec<(Key, Holder)> {
        self.held.by_hash(hash).filter_map(|h| Some((h.to_key()?, h.to_holder()?))).collect()
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
        let t = if crate::mutation::on("token-from-clock") { micros.clamp(1, TOKEN_MAX) } else { t };
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
            Command::Restore { state, dt } => {
                if self.held_count() == 0 {
                    if let Ok(mut restored) = LockState::restored(state, *dt) {
                        restored.last_token = restored.last_token.max(self.last_token);
                        restored.dt = restored.dt.max(self.dt);
                        *self = restored;
                    }
                }
                Applied::Ticked
            }
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
mod tests;
