//! One timer table per state machine (quinn's `TimerTable`): every timer of a
//! [`Session`](crate::session::Session), [`Lane`](crate::lane::Lane) or
//! [`Broker`](crate::broker::Broker) lives in its table, keyed by a timer
//! kind, and `poll_timeout()` is the table's minimum.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::Instant;

/// Timers keyed by `K`; at most one deadline per key.
#[derive(Debug, Clone)]
pub struct TimerTable<K: Ord + Hash + Copy> {
    by_key: HashMap<K, Instant>,
    by_time: BTreeSet<(Instant, K)>,
}

impl<K: Ord + Hash + Copy> Default for TimerTable<K> {
    fn default() -> Self {
        TimerTable { by_key: HashMap::new(), by_time: BTreeSet::new() }
    }
}

impl<K: Ord + Hash + Copy> TimerTable<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets (or moves) the timer `key` to fire at `at`.
    pub fn set(&mut self, key: K, at: Instant) {
        if let Some(old) = self.by_key.insert(key, at) {
            self.by_time.remove(&(old, key));
        }
        self.by_time.insert((at, key));
    }

    /// Sets the timer `key` to `at`, or clears it when `at` is `None`.
    pub fn set_opt(&mut self, key: K, at: Option<Instant>) {
        match at {
            Some(at) => self.set(key, at),
            None => self.clear(key),
        }
    }

    /// Removes the timer `key` if it is set.
    pub fn clear(&mut self, key: K) {
        if let Some(old) = self.by_key.remove(&key) {
            self.by_time.remove(&(old, key));
        }
    }

    /// When `key` fires, if it is set.
    pub fn get(&self, key: K) -> Option<Instant> {
        self.by_key.get(&key).copied()
    }

    /// The earliest deadline of the table.
    #[must_use]
    pub fn next_deadline(&self) -> Option<Instant> {
        self.by_time.first().map(|(at, _)| *at)
    }

    /// Removes and returns one timer whose deadline is `<= now` (earliest first).
    #[must_use]
    pub fn pop_expired(&mut self, now: Instant) -> Option<K> {
        let &(at, key) = self.by_time.first()?;
        if at > now {
            return None;
        }
        self.by_time.remove(&(at, key));
        self.by_key.remove(&key);
        Some(key)
    }

    /// Number of timers set.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True when no timer is set.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn min_set_move_clear_pop() {
        let t0 = Instant::now();
        let mut t = TimerTable::new();
        assert_eq!(t.next_deadline(), None);
        t.set(1u8, t0 + Duration::from_secs(3));
        t.set(2u8, t0 + Duration::from_secs(1));
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(1)));
        t.set(2u8, t0 + Duration::from_secs(5));
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(3)));
        assert_eq!(t.pop_expired(t0 + Duration::from_secs(2)), None);
        assert_eq!(t.pop_expired(t0 + Duration::from_secs(3)), Some(1));
        assert_eq!(t.len(), 1);
        t.clear(2);
        assert!(t.is_empty());
        t.set_opt(3, Some(t0));
        assert_eq!(t.get(3), Some(t0));
        t.set_opt(3, None);
        assert_eq!(t.get(3), None);
    }
}
