//! The read-only view of a key that `/locks/<key>` shows (docs/deployment.md,
//! "Admin HTTP"), built from the leader's projection.

use std::time::Instant;
use ticketing_proto::{Key, Owner, Token};

use super::{AppliedView, ConnId, Leader};

/// What `/locks/<key>` shows of an owner: its first 8 characters, and never
/// more than half of it — owner and token together could release the lock,
/// so the full owner never leaves the leader (docs/deployment.md, "Admin HTTP").
pub fn owner_prefix(owner: &Owner) -> String {
    owner.prefix().to_owned()
}

/// The current holder of a key, as the leader projects it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HolderInfo {
    /// The owner's prefix ([`owner_prefix`]), never the full owner.
    pub owner_prefix: String,
    /// Its fencing token.
    pub token: Token,
    /// Milliseconds until its lease ends (at the leader, by domain time).
    pub remaining_ms: u64,
    /// Domain time (ms) of the grant; the lease ends at `granted_dt + lease`.
    pub granted_dt: u64,
    /// A counted holder's slot (`null` for an exclusive holder).
    pub slot: Option<u16>,
}

/// One waiter of a key, as the leader projects it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WaiterInfo {
    /// The owner's prefix ([`owner_prefix`]), never the full owner.
    pub owner_prefix: String,
    /// The waiting client's address (`ip:port`).
    pub client: String,
    /// Milliseconds since the server read its `A`.
    pub waited_ms: u64,
    /// Milliseconds until its `wait` ends (then it is answered `T`).
    pub wait_left_ms: u64,
    /// `exclusive` (`A`), `shared` (`S`) or `all` (`K`).
    pub kind: &'static str,
    /// A counted waiter's `n`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n: Option<u16>,
    /// Every key of a multi-key waiter, in its request's order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys: Option<Vec<String>>,
}

/// A read-only snapshot of one key (the body of `/locks/<key>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LockInfo {
    /// The first of `holders` (the exclusive holder, or the counted one of
    /// the lowest slot), for readers of one holder per key.
    pub holder: Option<HolderInfo>,
    /// Every committed holder, by slot (a grant still being committed is not shown).
    pub holders: Vec<HolderInfo>,
    /// Every waiter, in FIFO order (the head is granted next).
    pub waiters: Vec<WaiterInfo>,
    /// The leader's domain time (ms) when the snapshot was taken.
    pub domain_time_ms: u64,
}

impl Leader {
    /// The read-only view of `key` for `/locks/<key>` at `now`.
    pub fn lock_info(&self, now: Instant, key: &Key, applied: &dyn AppliedView) -> LockInfo {
        let clients = &self.clients;
        let client = |c: ConnId| clients.get(&c).cloned().unwrap_or_default();
        let mut info = self.proj.lock_info(key, now, &client);
        info.domain_time_ms = self.domain_now(now);
        if self.proj.dormant() > 0 && !self.proj.knows(key) {
            // A dormant key: its holder as the applied state has it.
            let dt = info.domain_time_ms;
            info.holders = applied
                .applied_holders(key)
                .into_iter()
                .filter(|h| self.proj.is_dormant(key, h))
                .map(|h| HolderInfo {
                    owner_prefix: owner_prefix(&h.owner),
                    token: h.token,
                    remaining_ms: h.end_dt().saturating_sub(dt),
                    granted_dt: h.granted_dt,
                    slot: None,
                })
                .collect();
            info.holder = info.holders.first().cloned();
        }
        info
    }
}
