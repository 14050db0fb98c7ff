//! The most contended keys right now (the console's "most contended keys",
//! docs/operating.md): live waiters per key, kept ranked as they change so
//! the top N costs O(N) and no scan of all keys. Self-contained: the
//! projection calls [`Contention::waiter_added`] / [`Contention::waiter_removed`]
//! wherever a waiter enters or leaves a queue, and [`Contention::clear`] when it
//! is emptied. Every update costs O(log k) for k keys with waiters; a key
//! leaves the structure with its last waiter.

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};
use ticketing_proto::Key;

/// Waiters per key, ranked (see the module docs).
#[derive(Debug, Default)]
pub struct Contention {
    counts: HashMap<Key, usize>,
    /// (waiters, descending; then key, ascending): the order of [`Contention::top`].
    ranked: BTreeSet<(Reverse<usize>, Key)>,
}

impl Contention {
    /// One more waiter queued on `key`.
    pub fn waiter_added(&mut self, key: &Key) {
        let n = self.counts.entry(key.clone()).or_insert(0);
        if *n > 0 {
            self.ranked.remove(&(Reverse(*n), key.clone()));
        }
        *n += 1;
        self.ranked.insert((Reverse(*n), key.clone()));
    }

    /// One waiter of `key` left its queue (granted, timed out, gone). A key
    /// this structure has no waiter for is ignored.
    pub fn waiter_removed(&mut self, key: &Key) {
        let Some(n) = self.counts.get_mut(key) else { return };
        self.ranked.remove(&(Reverse(*n), key.clone()));
        *n -= 1;
        if *n == 0 {
            self.counts.remove(key);
        } else {
            self.ranked.insert((Reverse(*n), key.clone()));
        }
    }

    /// Forgets every waiter (the projection was emptied).
    pub fn clear(&mut self) {
        self.counts.clear();
        self.ranked.clear();
    }

    /// The `n` keys with the most waiters, most first (ties by key), with their counts.
    pub fn top(&self, n: usize) -> Vec<(Key, usize)> {
        self.ranked.iter().take(n).map(|(Reverse(c), k)| (k.clone(), *c)).collect()
    }

    /// Keys with at least one waiter.
    pub fn keys(&self) -> usize {
        self.counts.len()
    }

    /// Waiters of `key`.
    pub fn waiters(&self, key: &Key) -> usize {
        self.counts.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(s: &str) -> Key {
        Key::new(s.to_owned()).unwrap()
    }

    #[test]
    fn ranks_by_waiters_then_key_and_forgets_empty_keys() {
        let mut c = Contention::default();
        for key in ["b", "a", "b", "c", "b", "a"] {
            c.waiter_added(&k(key));
        }
        assert_eq!(c.top(10), vec![(k("b"), 3), (k("a"), 2), (k("c"), 1)]);
        assert_eq!(c.top(1), vec![(k("b"), 3)]);
        c.waiter_removed(&k("b"));
        c.waiter_removed(&k("b"));
        c.waiter_removed(&k("c"));
        c.waiter_removed(&k("zzz"));
        assert_eq!(c.top(10), vec![(k("a"), 2), (k("b"), 1)]);
        assert_eq!(c.keys(), 2);
        c.clear();
        assert!(c.top(10).is_empty());
        assert_eq!(c.waiters(&k("a")), 0);
    }

    proptest! {
        /// The ranking always equals a recount sorted the same way.
        #[test]
        fn top_matches_a_recount(ops in proptest::collection::vec((any::<bool>(), 0u8..6), 1..300)) {
            let mut c = Contention::default();
            let mut model: HashMap<Key, usize> = HashMap::new();
            for (add, i) in ops {
                let key = k(&format!("k{i}"));
                if add {
                    c.waiter_added(&key);
                    *model.entry(key).or_default() += 1;
                } else if let Some(n) = model.get_mut(&key) {
                    c.waiter_removed(&key);
                    *n -= 1;
                    if *n == 0 {
                        model.remove(&key);
                    }
                }
                let mut want: Vec<(Key, usize)> = model.iter().map(|(k, n)| (k.clone(), *n)).collect();
                want.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
                prop_assert_eq!(c.top(3), want.iter().take(3).cloned().collect::<Vec<_>>());
                prop_assert_eq!(c.keys(), model.len());
            }
        }
    }
}
