//! The leader's ONE timer table: every wait timer, every lease timer, the
//! `Tick` and the end of the start grace, keyed by what they belong to.
//!
//! A timer is set and cancelled by its owner ([`TimerKind`]) with the
//! deadline the owner keeps (a waiter's `wait_until`, the earliest lease end
//! of a key's holders), so it leaves with its waiter or holder: the table
//! never holds more than one entry per waiter, one per held key, plus the
//! `Tick` and the grace — its size is bounded by `--max-waiters` +
//! `--max-held-keys` + 2, whatever the request rate (no lazily invalidated
//! heap entries piling up). One ordered set of `(deadline, kind)` and no
//! index by kind: at a million held keys an index would be a hash table of
//! two million 64-byte slots (docs/benchmarks.md, "Optimizations: memory").
//! Timers due at the same instant leave in `TimerKind` order (waits by
//! arrival, then leases by key). Pure: times are inputs.

use super::WaiterId;
use std::collections::BTreeSet;
use std::time::Instant;
use ticketing_proto::Key;

/// What a timer is for (at most one timer each).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimerKind {
    /// The waiter's `wait` ends: it is answered `T`.
    Wait(WaiterId),
    /// The committed lease of the key's holder ends: the key is expired.
    Lease(Key),
    /// Commit a `Tick` if nothing was proposed for `--tick-ms`.
    Tick,
    /// The start grace ends: the queued waiters are granted in FIFO order.
    GraceEnd,
}

impl TimerKind {
    /// The leader's own timers, whose deadlines the table keeps.
    fn is_single(&self) -> bool {
        matches!(self, TimerKind::Tick | TimerKind::GraceEnd)
    }
}

/// Deadlines in order (see the module docs).
#[derive(Debug, Default)]
pub struct Timers {
    by_time: BTreeSet<(Instant, TimerKind)>,
    /// The deadlines of the `Tick` and the grace, if armed.
    tick: Option<Instant>,
    grace: Option<Instant>,
}

impl Timers {
    fn single(&mut self, kind: &TimerKind) -> Option<&mut Option<Instant>> {
        match kind {
            TimerKind::Tick => Some(&mut self.tick),
            TimerKind::GraceEnd => Some(&mut self.grace),
            _ => None,
        }
    }

    /// Arms the `Tick` or the grace at `at`, replacing its previous deadline.
    pub fn set(&mut self, kind: TimerKind, at: Instant) {
        debug_assert!(kind.is_single(), "{kind:?}: use arm/disarm with its owner's deadline");
        if let Some(old) = self.single(&kind).and_then(|d| d.replace(at)) {
            self.by_time.remove(&(old, kind.clone()));
        }
        self.by_time.insert((at, kind));
    }

    /// Arms a waiter's or a key's timer at `at` (its owner disarms any
    /// earlier deadline first, [`Timers::disarm`]).
    pub fn arm(&mut self, kind: TimerKind, at: Instant) {
        debug_assert!(!kind.is_single(), "{kind:?}: use set");
        self.by_time.insert((at, kind));
    }

    /// Disarms `kind` armed at `at` (nothing if it is not armed there).
    pub fn disarm(&mut self, kind: TimerKind, at: Instant) {
        self.by_time.remove(&(at, kind));
    }

    /// Whether `kind` is armed at `at`.
    pub fn is_armed(&self, kind: TimerKind, at: Instant) -> bool {
        self.by_time.contains(&(at, kind))
    }

    /// The deadline of `kind`, if armed (a scan: for checks and tests).
    pub fn get(&self, kind: &TimerKind) -> Option<Instant> {
        self.by_time.iter().find(|(_, k)| k == kind).map(|(at, _)| *at)
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Takes the earliest timer due at `now` (deadline ≤ `now`), if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<TimerKind> {
        if self.by_time.first()?.0 > now {
            return None;
        }
        let (_, kind) = self.by_time.pop_first()?;
        if let Some(d) = self.single(&kind) {
            *d = None;
        }
        Some(kind)
    }

    /// Armed timers.
    pub fn len(&self) -> usize {
        self.by_time.len()
    }

    /// No timer armed.
    pub fn is_empty(&self) -> bool {
        self.by_time.is_empty()
    }

    /// Every armed kind (tests check them against the live state).
    pub fn kinds(&self) -> impl Iterator<Item = &TimerKind> {
        self.by_time.iter().map(|(_, k)| k)
    }

    /// Disarms every timer (a leadership change empties the projection);
    /// the `Tick` and the grace are re-armed by the caller.
    pub fn clear(&mut self) {
        self.by_time.clear();
        self.tick = None;
        self.grace = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fields::k;
    use std::time::Duration;

    #[test]
    fn one_timer_per_kind_in_deadline_order() {
        let t0 = crate::test_fields::t0();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut t = Timers::default();
        t.arm(TimerKind::Lease(k("a")), at(30));
        t.set(TimerKind::Tick, at(10));
        t.arm(TimerKind::Wait(WaiterId(1)), at(20));
        t.disarm(TimerKind::Lease(k("a")), at(30)); // re-armed earlier by its owner
        t.arm(TimerKind::Lease(k("a")), at(5));
        t.set(TimerKind::Tick, at(12)); // the Tick replaces its own deadline
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&TimerKind::Tick), Some(at(12)));
        assert!(t.is_armed(TimerKind::Lease(k("a")), at(5)));
        assert!(!t.is_armed(TimerKind::Lease(k("a")), at(30)));
        assert_eq!(t.next(), Some(at(5)));
        assert_eq!(t.pop_due(at(4)), None);
        assert_eq!(t.pop_due(at(25)), Some(TimerKind::Lease(k("a"))));
        assert_eq!(t.pop_due(at(25)), Some(TimerKind::Tick));
        t.set(TimerKind::Tick, at(40)); // popped: arming again leaves one entry
        assert_eq!(t.len(), 2);
        t.disarm(TimerKind::Wait(WaiterId(9)), at(20)); // not armed: nothing
        assert_eq!(t.pop_due(at(25)), Some(TimerKind::Wait(WaiterId(1))));
        assert_eq!(t.pop_due(at(1000)), Some(TimerKind::Tick));
        assert_eq!(t.pop_due(at(1000)), None);
        assert!(t.is_empty());
        // Equal deadlines: waits in arrival order, then leases by key.
        t.arm(TimerKind::Lease(k("b")), at(1));
        t.arm(TimerKind::Wait(WaiterId(3)), at(1));
        t.arm(TimerKind::Wait(WaiterId(2)), at(1));
        assert_eq!(t.pop_due(at(1)), Some(TimerKind::Wait(WaiterId(2))));
        assert_eq!(t.pop_due(at(1)), Some(TimerKind::Wait(WaiterId(3))));
        assert_eq!(t.pop_due(at(1)), Some(TimerKind::Lease(k("b"))));
        t.set(TimerKind::GraceEnd, at(7));
        t.clear();
        assert!(t.is_empty() && t.get(&TimerKind::GraceEnd).is_none());
    }
}
