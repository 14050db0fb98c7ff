//! The release lane of docs/client.md, Release lane: a bounded queue of exact-token releases
//! (explicit releases, compensations, best-effort releases), each with an
//! absolute deadline of 5 s from enqueue.
//!
//! The lane only keeps the books: which entries wait for a connection, which
//! are in flight and where, and when each one gives up. The
//! [`Broker`](crate::broker::Broker) routes its entries (on the leader first,
//! then other connections), gives each connection reserved in-flight slots
//! for them, and feeds the answers back.

use crate::field::{Key, Owner, Token};
use crate::op::OpId;
use crate::timer::TimerTable;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Default number of entries (queued + in flight).
pub const DEFAULT_CAPACITY: usize = 1024;
/// Absolute deadline of every entry, from its enqueue.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// Why a release is in the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `ticket.release()`: the caller waits for the result.
    Explicit,
    /// A grant the caller never got (InsufficientTime, unsolicited `A`,
    /// a grant recognized after a cancel).
    Compensation,
    /// A dropped ticket or a closing broker (result only logged).
    BestEffort,
    /// An acquire that ended Indeterminate: the lane asks with `Q` whether
    /// its owner holds the key and, on `H`, releases that exact token
    /// (docs/client.md, Release lane).
    Resolve,
}

/// The exact grant to release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExactGrant {
    /// Key.
    pub key: Key,
    /// Owner.
    pub owner: Owner,
    /// Token.
    pub token: Token,
}

/// How an entry ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// `R`: released.
    Released,
    /// `N`: not the current holder (expired, or released before).
    NotHolder,
    /// No final answer within the deadline.
    Unconfirmed,
    /// `F`: the principal may not use the key (a reload narrowed its keys
    /// after the grant): the lock stays held until its lease ends.
    Forbidden,
}

/// The lane is full; nothing was enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneFull;

/// Where an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State<C> {
    /// Waiting for a connection.
    Queued,
    /// Sent on connection `C`.
    InFlight(C),
}

/// One entry.
#[derive(Debug, Clone)]
pub struct Entry<C> {
    /// Key.
    pub key: Key,
    /// Owner.
    pub owner: Owner,
    /// The exact token to release; `None` while a [`Purpose::Resolve`]
    /// entry still has to ask (`Q`) whether its owner holds the key.
    pub token: Option<Token>,
    /// Why.
    pub purpose: Purpose,
    /// Absolute deadline.
    pub deadline: Instant,
    /// Where it is.
    pub state: State<C>,
    /// The connections it was lost on (to try others first).
    pub tried: Vec<C>,
}

/// The lane. `C` names a connection.
#[derive(Debug)]
pub struct Lane<C> {
    capacity: usize,
    entries: HashMap<OpId, Entry<C>>,
    queue: VecDeque<OpId>,
    timers: TimerTable<OpId>,
    done: VecDeque<(OpId, Entry<C>, Outcome)>,
}

impl<C> Entry<C> {
    /// The exact grant, once the token is known.
    pub fn grant(&self) -> Option<ExactGrant> {
        Some(ExactGrant { key: self.key.clone(), owner: self.owner.clone(), token: self.token? })
    }
}

impl<C: Copy + PartialEq> Lane<C> {
    /// An empty lane holding at most `capacity` entries.
    pub fn new(capacity: usize) -> Lane<C> {
        Lane {
            capacity,
            entries: HashMap::new(),
            queue: VecDeque::new(),
            timers: TimerTable::new(),
            done: VecDeque::new(),
        }
    }

    /// Entries queued or in flight.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// How many more entries fit.
    pub fn room(&self) -> usize {
        self.capacity.saturating_sub(self.entries.len())
    }

    /// True when nothing is queued or in flight.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Enqueues a release due by `now + 5 s`. A full lane refuses.
    pub fn enqueue(&mut self, now: Instant, id: OpId, grant: ExactGrant, purpose: Purpose) -> Result<(), LaneFull> {
        let ExactGrant { key, owner, token } = grant;
        self.insert(now, id, key, owner, Some(token), purpose)
    }

    /// Enqueues the resolution of an Indeterminate acquire, due by `now + 5 s`:
    /// first `Q` for (key, owner), then, on `H`, the exact release. A full lane refuses.
    pub fn enqueue_query(&mut self, now: Instant, id: OpId, key: Key, owner: Owner) -> Result<(), LaneFull> {
        self.insert(now, id, key, owner, None, Purpose::Resolve)
    }

    fn insert(
        &mut self,
        now: Instant,
        id: OpId,
        key: Key,
        owner: Owner,
        token: Option<Token>,
        purpose: Purpose,
    ) -> Result<(), LaneFull> {
        if self.entries.len() >= self.capacity {
            return Err(LaneFull);
        }
        let deadline = now + DEADLINE;
        self.entries
            .insert(id, Entry { key, owner, token, purpose, deadline, state: State::Queued, tried: Vec::new() });
        self.queue.push_back(id);
        self.timers.set(id, deadline);
        Ok(())
    }

    /// `H`: the queried owner holds the key with `token`. The entry goes back
    /// to the front of the queue as the exact release of that token, within
    /// its original deadline.
    pub fn held(&mut self, id: OpId, token: Token) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.token = Some(token);
            e.tried.clear();
            if e.state != State::Queued {
                e.state = State::Queued;
                self.queue.push_front(id);
            }
        }
    }

    /// The queued entries, oldest first (for routing).
    pub fn queued(&self) -> impl Iterator<Item = (OpId, &Entry<C>)> + '_ {
        self.queue.iter().filter_map(move |id| self.entries.get(id).map(|e| (*id, e)))
    }

    /// Records that `id` was sent on `conn`.
    pub fn mark_sent(&mut self, id: OpId, conn: C) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.state = State::InFlight(conn);
            self.queue.retain(|q| *q != id);
        }
    }

    /// Its session ended before a final answer: back to the queue (if still due).
    pub fn requeue(&mut self, id: OpId, lost_on: Option<C>) {
        if let Some(e) = self.entries.get_mut(&id) {
            if let Some(c) = lost_on {
                if !e.tried.contains(&c) {
                    e.tried.push(c);
                }
            }
            if e.state != State::Queued {
                e.state = State::Queued;
                self.queue.push_back(id);
            }
        }
    }

    /// A final answer (`R` → released, `N` → not holder). Answers for entries
    /// that already gave up are ignored.
    pub fn answer(&mut self, id: OpId, released: bool) {
        let outcome = if released { Outcome::Released } else { Outcome::NotHolder };
        self.finish(id, outcome);
    }

    /// Entry `id` was answered `F` (final: nothing is retried).
    pub fn forbidden(&mut self, id: OpId) {
        self.finish(id, Outcome::Forbidden);
    }

    /// Whether `id` is a live entry.
    pub fn contains(&self, id: OpId) -> bool {
        self.entries.contains_key(&id)
    }

    /// Gives up every entry whose deadline is `<= now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(id) = self.timers.pop_expired(now) {
            self.finish(id, Outcome::Unconfirmed);
        }
    }

    /// Gives up every entry now (the broker is closing for good).
    pub fn give_up_all(&mut self) {
        let mut ids: Vec<OpId> = self.entries.keys().copied().collect();
        ids.sort();
        for id in ids {
            self.finish(id, Outcome::Unconfirmed);
        }
    }

    /// The next finished entry.
    #[must_use]
    pub fn poll_done(&mut self) -> Option<(OpId, Entry<C>, Outcome)> {
        self.done.pop_front()
    }

    /// The earliest entry deadline.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    fn finish(&mut self, id: OpId, outcome: Outcome) {
        if let Some(e) = self.entries.remove(&id) {
            self.timers.clear(id);
            if e.state == State::Queued {
                self.queue.retain(|q| *q != id);
            }
            self.done.push_back((id, e, outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(t: u64) -> ExactGrant {
        ExactGrant { key: Key::new("k").unwrap(), owner: Owner::new("o").unwrap(), token: Token::new(t).unwrap() }
    }

    #[test]
    fn bounded_and_deadline_is_absolute_from_enqueue() {
        let t0 = Instant::now();
        let mut lane: Lane<u8> = Lane::new(2);
        lane.enqueue(t0, OpId(1), grant(1), Purpose::Explicit).unwrap();
        lane.enqueue(t0 + Duration::from_secs(1), OpId(2), grant(2), Purpose::BestEffort).unwrap();
        assert_eq!(lane.enqueue(t0, OpId(3), grant(3), Purpose::Explicit), Err(LaneFull));
        lane.mark_sent(OpId(1), 7);
        assert_eq!(lane.queued().count(), 1);
        lane.requeue(OpId(1), Some(7));
        assert_eq!(lane.queued().map(|(id, _)| id).collect::<Vec<_>>(), vec![OpId(2), OpId(1)]);
        assert_eq!(lane.poll_timeout(), Some(t0 + DEADLINE));
        lane.handle_timeout(t0 + Duration::from_millis(4999));
        assert!(lane.poll_done().is_none());
        lane.handle_timeout(t0 + DEADLINE);
        let (id, e, out) = lane.poll_done().unwrap();
        assert_eq!((id, out, e.tried), (OpId(1), Outcome::Unconfirmed, vec![7]));
        lane.answer(OpId(1), true); // late answer ignored
        assert!(lane.poll_done().is_none());
        lane.answer(OpId(2), false);
        assert_eq!(lane.poll_done().unwrap().2, Outcome::NotHolder);
        assert!(lane.is_empty());
        assert_eq!(lane.poll_timeout(), None);
    }

    #[test]
    fn a_query_becomes_the_exact_release_on_held_within_its_deadline() {
        let t0 = Instant::now();
        let mut lane: Lane<u8> = Lane::new(4);
        let (key, owner) = (Key::new("k").unwrap(), Owner::new("o").unwrap());
        lane.enqueue_query(t0, OpId(1), key.clone(), owner.clone()).unwrap();
        lane.enqueue(t0, OpId(2), grant(2), Purpose::BestEffort).unwrap();
        let first = lane.queued().next().map(|(id, e)| (id, e.token, e.purpose));
        assert_eq!(first, Some((OpId(1), None, Purpose::Resolve)));
        lane.mark_sent(OpId(1), 3);
        lane.held(OpId(1), Token::new(77).unwrap());
        let (id, e) = lane.queued().next().unwrap();
        assert_eq!((id, e.grant()), (OpId(1), Some(grant(77))));
        assert_eq!(e.deadline, t0 + DEADLINE, "H does not extend the 5 s window");
        lane.mark_sent(OpId(1), 3);
        lane.answer(OpId(1), true);
        let (id, e, out) = lane.poll_done().unwrap();
        assert_eq!((id, e.token.map(Token::get), out), (OpId(1), Some(77), Outcome::Released));
        // N to a query: done, no token.
        lane.enqueue_query(t0, OpId(3), key, owner).unwrap();
        lane.mark_sent(OpId(3), 3);
        lane.answer(OpId(3), false);
        let (_, e, out) = lane.poll_done().unwrap();
        assert_eq!((e.token, out), (None, Outcome::NotHolder));
    }
}
