//! The cross-client mutual-exclusion check of W1–W3: every client records
//! each hold it had — key, client, token, the instant the grant's answer
//! arrived and the instant it sent the release — and after the run the
//! holds of each key, from every client, are checked for overlap and for
//! token order. All instants come from one monotonic clock, and a correct
//! lock grants a key only after its previous holder's release reached the
//! server, so on a correct lock the holds of a key never overlap and their
//! tokens rise in grant order: any overlap or token out of order is a
//! duplicate grant.

use std::time::Instant;

/// One hold: grant answer received → release sent.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    /// The key's id in the run (the workload maps key names to ids).
    pub key: u64,
    /// The workload client that held it.
    pub client: u32,
    /// Fencing token, 0 where the system has none.
    pub token: u64,
    /// When the grant's answer arrived.
    pub granted: Instant,
    /// When the holder sent its release (or gave the hold up).
    pub released: Instant,
}

/// What the check found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Holds checked.
    pub holds: u64,
    /// Distinct keys among them.
    pub keys: u64,
    /// Keys held by more than one client over the run (the check compares
    /// holds of different clients on those).
    pub shared_keys: u64,
    /// Holds that began before an earlier hold of the same key ended.
    pub overlaps: u64,
    /// Holds whose token is not above the token of the key's previous hold.
    pub token_regressions: u64,
}

impl Verdict {
    /// Duplicate grants: overlaps plus token regressions.
    pub fn duplicates(&self) -> u64 {
        self.overlaps + self.token_regressions
    }
}

/// Checks `holds` (from every client of a run, in any order).
pub fn check(mut holds: Vec<Hold>) -> Verdict {
    holds.sort_unstable_by_key(|h| (h.key, h.granted));
    let mut v = Verdict { holds: holds.len() as u64, ..Verdict::default() };
    let mut i = 0;
    while i < holds.len() {
        let key = holds[i].key;
        let mut j = i;
        while j < holds.len() && holds[j].key == key {
            j += 1;
        }
        let group = &holds[i..j];
        v.keys += 1;
        if group.iter().any(|h| h.client != group[0].client) {
            v.shared_keys += 1;
        }
        // The latest end so far: a hold starting before it overlaps an
        // earlier hold (not only its predecessor).
        let mut end = group[0].released;
        for w in group.windows(2) {
            let (prev, h) = (&w[0], &w[1]);
            if h.granted < end {
                v.overlaps += 1;
            }
            end = end.max(h.released);
            if prev.token != 0 && h.token != 0 && h.token <= prev.token {
                v.token_regressions += 1;
            }
        }
        i = j;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hold(base: Instant, key: u64, client: u32, token: u64, from_us: u64, to_us: u64) -> Hold {
        Hold {
            key,
            client,
            token,
            granted: base + Duration::from_micros(from_us),
            released: base + Duration::from_micros(to_us),
        }
    }

    #[test]
    fn back_to_back_holds_of_many_clients_pass() {
        let t = Instant::now();
        let v = check(vec![
            hold(t, 1, 0, 1, 0, 10),
            hold(t, 1, 1, 2, 11, 20),
            hold(t, 1, 2, 5, 25, 30),
            hold(t, 2, 1, 3, 0, 40),
        ]);
        assert_eq!(v, Verdict { holds: 4, keys: 2, shared_keys: 1, overlaps: 0, token_regressions: 0 });
        assert_eq!(v.duplicates(), 0);
    }

    #[test]
    fn overlapping_holds_of_two_clients_are_duplicates() {
        let t = Instant::now();
        // Client 1 is granted while client 0 still holds (5 < 10), even in
        // token order; given in reverse order to show the check sorts.
        let v = check(vec![hold(t, 7, 1, 2, 5, 12), hold(t, 7, 0, 1, 0, 10)]);
        assert_eq!(v.overlaps, 1);
        assert_eq!(v.token_regressions, 0);
        assert_eq!(v.duplicates(), 1);
    }

    #[test]
    fn an_overlap_with_an_earlier_long_hold_is_seen() {
        let t = Instant::now();
        // The second hold is inside the first; the third starts after the
        // second ended but before the first did.
        let v = check(vec![hold(t, 1, 0, 1, 0, 100), hold(t, 1, 1, 2, 10, 20), hold(t, 1, 2, 3, 30, 40)]);
        assert_eq!(v.overlaps, 2);
    }

    #[test]
    fn a_token_not_above_the_previous_holds_is_a_duplicate() {
        let t = Instant::now();
        let v = check(vec![hold(t, 1, 0, 9, 0, 10), hold(t, 1, 1, 9, 20, 30), hold(t, 1, 0, 4, 40, 50)]);
        assert_eq!(v.overlaps, 0);
        assert_eq!(v.token_regressions, 2);
        // Systems without tokens (0) are checked for overlap only.
        let v = check(vec![hold(t, 1, 0, 0, 0, 10), hold(t, 1, 1, 0, 20, 30)]);
        assert_eq!(v.duplicates(), 0);
    }

    #[test]
    fn holds_of_different_keys_never_conflict() {
        let t = Instant::now();
        let v = check(vec![hold(t, 1, 0, 5, 0, 100), hold(t, 2, 1, 1, 10, 20)]);
        assert_eq!(v.duplicates(), 0);
        assert_eq!(v.shared_keys, 0);
    }
}
