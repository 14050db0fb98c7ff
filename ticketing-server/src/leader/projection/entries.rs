//! What the projection keeps: a queued acquire ([`Waiter`]), a key's
//! projected holder ([`Holding`], [`Grant`]), and the `R`/`Q` requests
//! waiting for a key's in-flight proposal.

use crate::leader::ConnId;
use crate::locks::GrantKind;
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
    /// The name of its connection's principal (its waiters and, once
    /// granted, its held keys are counted).
    pub principal: Option<std::sync::Arc<str>>,
    /// The keys its principal may hold at once, by the principal's
    /// definition when the request was read (docs/security.md, "Several
    /// teams: principals"); checked again when it is handed a key.
    pub held_cap: Option<usize>,
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
    /// The principal it was granted to by this leader (its held keys are
    /// counted); `None` with auth off, and for grants of an earlier leader
    /// (the replicated state does not record principals).
    pub principal: Option<std::sync::Arc<str>>,
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
        /// Its lease, whole seconds (its domain-time end is `granted_dt + lease_s`).
        lease_s: u8,
    },
    /// Its release or expiry is being committed: no longer a holder the
    /// key's waiters wait for, nor one a new request conflicts with. It
    /// counts toward `--max-held-keys` until the command commits unless
    /// the command hands the key over (`counted: false`: the next holder
    /// takes its place), so a failure that puts it back never exceeds the cap.
    /// The same for its principal's `max_held_keys`, where only a next holder
    /// of the same principal takes its place.
    Freeing {
        /// Its fencing token.
        token: Token,
        /// Still counted as held.
        counted: bool,
        /// Still counted as held by its principal.
        counted_for_principal: bool,
    },
}

impl Holding {
    /// A grant being committed.
    pub fn committing(owner: Owner, shared: bool) -> Holding {
        Holding { owner, shared, grant: Grant::Committing, principal: None }
    }

    /// The same, granted to `principal`.
    pub fn of(self, principal: Option<std::sync::Arc<str>>) -> Holding {
        Holding { principal, ..self }
    }

    /// A committed grant of `lease_s` seconds whose lease ends at `deadline`
    /// (`slot`: a counted one's).
    pub fn until(
        owner: Owner,
        token: Token,
        granted_dt: u64,
        slot: Option<u16>,
        lease_s: u8,
        deadline: Instant,
    ) -> Holding {
        Holding {
            owner,
            shared: slot.is_some(),
            grant: Grant::Committed { token, deadline, granted_dt, slot, lease_s },
            principal: None,
        }
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
        Holding::until(owner, token, granted_dt, slot, lease, now + Duration::from_secs(u64::from(lease)))
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
    pub(super) fn counts(&self) -> bool {
        !matches!(self.grant, Grant::Freeing { counted: false, .. })
    }

    /// The principal it counts for, toward its `max_held_keys`.
    pub(super) fn counts_for(&self) -> Option<&std::sync::Arc<str>> {
        match self.grant {
            Grant::Freeing { counted_for_principal: false, .. } => None,
            _ => self.principal.as_ref(),
        }
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
