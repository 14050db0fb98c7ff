//! The projection's invariants, checked against a recount (tests, and the
//! `leader` fuzz target through [`crate::leader::Leader::check`]).

use super::{Holding, KeyState, Projection};
use crate::leader::timers::TimerKind;
use std::collections::HashSet;

impl Projection {
    /// Checks every counter against a recount, and every timer against what
    /// it belongs to (tests; also the fuzz target, through [`super::Leader::check`]).
    pub fn check(&self) {
        let counted = |k: &KeyState| k.holders.iter().filter(|h| h.counts()).count();
        assert_eq!(self.held, self.keys.values().map(counted).sum::<usize>() + self.dormant_len, "held");
        assert_eq!(self.dormant_len, self.dormant.values().map(|d| d.n as usize).sum::<usize>(), "dormant");
        let per_key: usize = self.waiters.values().map(|w| w.keys().len()).sum();
        assert_eq!(self.total_waiters, per_key, "total_waiters");
        assert_eq!(self.total_waiters, self.keys.values().map(KeyState::live).sum::<usize>(), "live");
        assert_eq!(self.waiters.len(), self.by_conn.values().map(HashSet::len).sum::<usize>(), "by_conn");
        let mut by_principal = std::collections::HashMap::new();
        for w in self.waiters.values() {
            if let Some(p) = &w.principal {
                *by_principal.entry(p.clone()).or_insert(0) += w.keys().len();
            }
        }
        assert_eq!(self.by_principal, by_principal, "by_principal");
        let mut held_by = std::collections::HashMap::new();
        for p in self.keys.values().flat_map(|ks| ks.holders.iter()).filter_map(Holding::counts_for) {
            *held_by.entry(p.clone()).or_insert(0) += 1;
        }
        for slot in self.dormant.values() {
            assert!(slot.n == 1 || slot.principal == 0, "a shared dormant entry keeps a principal");
            if let Some(i) = slot.principal.checked_sub(1) {
                let name = self.names.get(i as usize).expect("a dormant principal without its name");
                *held_by.entry(name.clone()).or_insert(0) += 1;
            }
        }
        assert_eq!(self.held_by, held_by, "held_by");
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
