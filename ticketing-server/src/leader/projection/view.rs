//! Read-only views of the projection: the most contended keys and
//! `/locks/<key>`.

use super::{Grant, Projection};
use crate::leader::{owner_prefix, ConnId, HolderInfo, LockInfo, WaiterInfo};
use crate::locks::GrantKind;
use std::time::{Duration, Instant};
use ticketing_proto::Key;

impl Projection {
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
                Grant::Committed { token, deadline, granted_dt, slot, .. } => Some(HolderInfo {
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
                kind: w.kind.name(),
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
}
