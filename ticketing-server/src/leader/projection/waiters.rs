//! The waiters: queued in FIFO order on each of their keys, indexed by id
//! and by connection, each with its wait timer. `insert_waiter` and
//! `take_waiter` are the one place a key's `live` count, `total_waiters`,
//! the per-connection index and a wait timer change.

use super::{Projection, Waiter};
use crate::leader::timers::TimerKind;
use crate::leader::{ConnId, WaiterId};
use ticketing_proto::Key;

impl Projection {
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
        if let Some(p) = &w.principal {
            *self.by_principal.entry(p.clone()).or_insert(0) += w.keys().len();
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
        if let Some(p) = &w.principal {
            if let Some(n) = self.by_principal.get_mut(p) {
                *n -= w.keys().len();
                if *n == 0 {
                    self.by_principal.remove(p);
                }
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
}
