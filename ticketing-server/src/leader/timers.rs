//! The leader's ONE timer table: every wait timer, every lease timer, the
//! `Tick` and the end of the start grace, keyed by what they belong to.
//!
//! A timer is set and cancelled by its owner's key ([`TimerKind`]), so it
//! leaves with its waiter or holder: the table never holds more than one
//! entry per waiter, one per held key, plus the `Tick` and the grace — its
//! size is bounded by `--max-waiters` + `--max-held-keys` + 2, whatever the
//! request rate (no lazily invalidated heap entries piling up).
//! Pure: times are inputs.

use super::WaiterId;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;
use ticketing_proto::Key;

/// What a timer is for; also its key in the table (at most one timer each).
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

/// Deadlines in order, and each kind's deadline (see the module docs).
#[derive(Debug, Default)]
pub struct Timers {
    /// `(deadline, seq)` → kind; `seq` keeps equal deadlines in arming order.
    by_time: BTreeMap<(Instant, u64), TimerKind>,
    /// kind → its key in `by_time`.
    by_kind: HashMap<TimerKind, (Instant, u64)>,
    seq: u64,
}

impl Timers {
    /// Arms `kind` at `at`, replacing its previous deadline if any.
    pub fn set(&mut self, kind: TimerKind, at: Instant) {
        self.cancel(&kind);
        self.seq += 1;
        let slot = (at, self.seq);
        self.by_time.insert(slot, kind.clone());
        self.by_kind.insert(kind, slot);
    }

    /// Disarms `kind` (nothing if it is not armed).
    pub fn cancel(&mut self, kind: &TimerKind) {
        if let Some(slot) = self.by_kind.remove(kind) {
            self.by_time.remove(&slot);
        }
    }

    /// The deadline of `kind`, if armed.
    pub fn get(&self, kind: &TimerKind) -> Option<Instant> {
        self.by_kind.get(kind).map(|(at, _)| *at)
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.by_time.keys().next().map(|(at, _)| *at)
    }

    /// Takes the earliest timer due at `now` (deadline ≤ `now`), if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<TimerKind> {
        let entry = self.by_time.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        let kind = entry.remove();
        self.by_kind.remove(&kind);
        Some(kind)
    }

    /// Armed timers.
    pub fn len(&self) -> usize {
        self.by_kind.len()
    }

    /// No timer armed.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    /// Every armed kind (tests check them against the live state).
    pub fn kinds(&self) -> impl Iterator<Item = &TimerKind> {
        self.by_time.values()
    }

    /// Disarms every wait and lease timer (a leadership change empties the
    /// projection); the `Tick` and the grace are re-armed by the caller.
    pub fn clear(&mut self) {
        self.by_time.clear();
        self.by_kind.clear();
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
        t.set(TimerKind::Lease(k("a")), at(30));
        t.set(TimerKind::Tick, at(10));
        t.set(TimerKind::Wait(WaiterId(1)), at(20));
        t.set(TimerKind::Lease(k("a")), at(5)); // re-armed: replaces
        assert_eq!(t.len(), 3);
        assert_eq!(t.next(), Some(at(5)));
        assert_eq!(t.pop_due(at(4)), None);
        assert_eq!(t.pop_due(at(25)), Some(TimerKind::Lease(k("a"))));
        t.cancel(&TimerKind::Tick);
        t.cancel(&TimerKind::Tick);
        assert_eq!(t.pop_due(at(25)), Some(TimerKind::Wait(WaiterId(1))));
        assert_eq!(t.pop_due(at(1000)), None);
        assert!(t.is_empty());
        // Equal deadlines leave in the order they were armed.
        t.set(TimerKind::Wait(WaiterId(2)), at(1));
        t.set(TimerKind::Wait(WaiterId(3)), at(1));
        assert_eq!(t.pop_due(at(1)), Some(TimerKind::Wait(WaiterId(2))));
        assert_eq!(t.get(&TimerKind::Wait(WaiterId(3))), Some(at(1)));
    }
}
