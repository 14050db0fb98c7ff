//! Tests of the projection: FIFO order, counts, holders and their lease
//! timer, and random sequences against a recount.

use super::*;
use crate::leader::{HolderInfo, LockInfo};
use proptest::prelude::*;
use std::time::{Duration, Instant};
use ticketing_proto::RequestId;

use crate::test_fields::{k, o};
fn waiter(conn: u64, id: u64, key: &str, at: Instant) -> Waiter {
    Waiter {
        conn: ConnId(conn),
        id: RequestId(id),
        key: k(key),
        owner: o("w"),
        lease: 5,
        read_at: at,
        wait_until: at + Duration::from_secs(10),
        kind: GrantKind::Exclusive,
        principal: None,
        held_cap: None,
    }
}

#[test]
fn fifo_order_and_counts() {
    let now = crate::test_fields::t0();
    let mut p = Projection::new();
    for id in 1..=3 {
        p.enqueue(waiter(1, id, "a", now), true);
    }
    p.enqueue(waiter(2, 9, "b", now), true);
    assert_eq!((p.waiters(), p.queued(&k("a")), p.queued(&k("b"))), (4, 3, 1));
    assert_eq!(p.pop_head(&k("a")).map(|w| w.id), Some(RequestId(1)));
    let back = p.pop_head(&k("a")).unwrap();
    p.requeue_front(back);
    assert_eq!(p.pop_head(&k("a")).map(|w| w.id), Some(RequestId(2)));
    assert_eq!(p.pop_head(&k("a")).map(|w| w.id), Some(RequestId(3)));
    assert!(p.pop_head(&k("a")).is_none());
    p.check();
    assert_eq!(p.waiters(), 1);
}

#[test]
fn removed_waiters_are_skipped_and_idle_keys_forgotten() {
    let now = crate::test_fields::t0();
    let mut p = Projection::new();
    let w1 = p.enqueue(waiter(1, 1, "a", now), true);
    p.enqueue(waiter(2, 2, "a", now), true);
    assert_eq!(p.remove_waiter(w1).map(|w| w.id), Some(RequestId(1)));
    assert!(p.remove_waiter(w1).is_none(), "a waiter is removed once");
    assert_eq!(p.remove_conn_waiters(ConnId(2)).len(), 1);
    p.check();
    assert_eq!(p.lock_info(&k("a"), now, &|_| String::new()), LockInfo::default());
    assert!(p.keys.is_empty(), "idle key kept");
}

#[test]
fn holder_counts_and_lock_info() {
    let now = crate::test_fields::t0();
    let mut p = Projection::new();
    let owner = o("0123456789abcdef0123456789abcdef");
    p.add_holder(&k("a"), Holding::committing(owner.clone(), false));
    assert_eq!(p.held(), 1);
    let none = |_| String::new();
    assert!(p.lock_info(&k("a"), now, &none).holder.is_none(), "a grant in flight is not shown");
    let t = Token::new(7).unwrap();
    let h = Holding::committed(owner.clone(), t, 3, 4_000, None, now);
    p.commit_holder(&k("a"), &owner, h);
    assert_eq!(p.held(), 1, "committing a holder keeps the count");
    let info = p.lock_info(&k("a"), now + Duration::from_secs(1), &none);
    let want =
        HolderInfo { owner_prefix: "01234567".into(), token: t, remaining_ms: 2000, granted_dt: 4_000, slot: None };
    assert_eq!(info.holder, Some(want.clone()));
    assert_eq!(info.holders, vec![want]);
    p.remove_holder(&k("a"), &owner, t);
    p.set_holders(&k("zzz"), Vec::new());
    assert_eq!(p.held(), 0);
    p.check();
    // Counted holders: one lease timer per key, at the earliest end.
    let (t1, t2) = (Token::new(8).unwrap(), Token::new(9).unwrap());
    p.add_holder(&k("s"), Holding::committed(o("r1"), t1, 9, 0, Some(0), now));
    p.add_holder(&k("s"), Holding::committed(o("r2"), t2, 3, 0, Some(1), now));
    assert_eq!(p.held(), 2);
    assert_eq!(p.timers().get(&TimerKind::Lease(k("s"))), Some(now + Duration::from_secs(3)));
    let slots: Vec<_> = p.lock_info(&k("s"), now, &none).holders.iter().map(|h| h.slot).collect();
    assert_eq!(slots, vec![Some(0), Some(1)]);
    assert!(p.compatible(&k("s"), &GrantKind::Shared { n: 3 }));
    assert!(!p.compatible(&k("s"), &GrantKind::Shared { n: 2 }));
    assert!(!p.compatible(&k("s"), &GrantKind::Exclusive));
    p.remove_holder(&k("s"), &o("r2"), t2);
    assert_eq!(p.timers().get(&TimerKind::Lease(k("s"))), Some(now + Duration::from_secs(9)));
    p.check();
}

#[test]
fn an_idle_held_key_goes_dormant_above_the_threshold_and_comes_back_from_the_applied_holder() {
    use crate::domain_time::DomainClock;
    use crate::locks::Holder;
    let now = crate::test_fields::t0();
    let clock = DomainClock::start(10_000, now);
    let mut p = Projection::new();
    p.set_dormant_above(1);
    let t = Token::new(7).unwrap();
    // Two keys held: at the threshold, so the first stays; the second goes.
    p.add_holder(&k("a"), Holding::committed(o("oa"), t, 3, 10_000, None, now));
    p.remove_if_idle(&k("a"));
    assert!(p.knows(&k("a")));
    p.add_holder(&k("b"), Holding::committed(o("ob"), t, 3, 10_000, None, now));
    p.remove_if_idle(&k("b"));
    assert!(!p.knows(&k("b")));
    assert_eq!((p.held(), p.dormant(), p.timers().len()), (2, 1, 1), "b keeps its count, not its timer");
    assert_eq!(p.first_dormant(), Some((13_000, crate::locks::key_hash(&k("b")))));
    assert!(p.is_free(&k("b")), "a dormant key is only known after hydrate");
    p.check();
    // Another applied holder of b (a different lease end) is not the dormant one.
    let applied = |lease_s| Holder { owner: o("ob"), token: t, lease_s, granted_dt: 10_000, slot: None };
    assert!(!p.hydrate(&k("b"), vec![applied(4)], &clock, now));
    assert!(p.hydrate(&k("b"), vec![applied(3)], &clock, now + Duration::from_secs(1)));
    assert_eq!((p.held(), p.dormant()), (2, 0));
    assert!(!p.is_free(&k("b")) && p.holders(&k("b"))[0].is(&o("ob"), t));
    assert_eq!(p.timers().get(&TimerKind::Lease(k("b"))), Some(now + Duration::from_secs(3)), "at its domain-time end");
    assert!(!p.hydrate(&k("b"), vec![applied(3)], &clock, now), "only once");
    p.check();
    // Counted holders never go dormant.
    p.add_holder(&k("s"), Holding::committed(o("r1"), t, 9, 0, Some(0), now));
    p.remove_if_idle(&k("s"));
    assert!(p.knows(&k("s")));
    // A dormant entry no applied holder matches stops counting.
    p.remove_if_idle(&k("b"));
    let entry = p.first_dormant().unwrap();
    p.drop_dormant(entry);
    assert_eq!((p.held(), p.dormant()), (2, 0));
    p.check();
}

#[test]
fn lock_info_lists_waiters_in_fifo_order_with_prefixes_only() {
    let now = crate::test_fields::t0();
    let mut p = Projection::new();
    let owners = ["aaaaaaaa11111111", "bbbbbbbb22222222", "cccccccc33333333", "dd"];
    let mut ids = Vec::new();
    for (i, owner) in owners.iter().enumerate() {
        let mut w = waiter(i as u64 + 1, i as u64, "a", now + Duration::from_millis(10 * i as u64));
        w.owner = o(owner);
        ids.push(p.enqueue(w, true));
    }
    p.remove_waiter(ids[1]);
    let back = p.pop_head(&k("a")).unwrap();
    p.requeue_front(back);
    let client = |c: ConnId| format!("10.0.0.{}:999", c.0);
    let info = p.lock_info(&k("a"), now + Duration::from_millis(100), &client);
    let got: Vec<_> = info
        .waiters
        .iter()
        .map(|w| (w.owner_prefix.as_str(), w.client.as_str(), w.waited_ms, w.wait_left_ms))
        .collect();
    assert_eq!(
        got,
        vec![
            ("aaaaaaaa", "10.0.0.1:999", 100, 9_900),
            ("cccccccc", "10.0.0.3:999", 80, 9_920),
            ("d", "10.0.0.4:999", 70, 9_930),
        ]
    );
    let text = serde_json::to_string(&info).unwrap();
    for owner in owners {
        assert!(!text.contains(owner), "full owner {owner} in {text}");
    }
}

#[test]
fn many_timed_out_waiters_are_compacted() {
    let now = crate::test_fields::t0();
    let mut p = Projection::new();
    let ids: Vec<_> = (0..200).map(|i| p.enqueue(waiter(1, i, "a", now), true)).collect();
    for wid in &ids[..190] {
        p.remove_waiter(*wid);
    }
    assert!(p.keys[&k("a")].rare.as_ref().unwrap().queue.len() <= 2 * 10 + 32 + 1, "queue not compacted");
    p.check();
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue { conn: u64, key: u8 },
    Requeue { conn: u64, key: u8 },
    PopHead { key: u8 },
    Remove { nth: usize },
    LeaveConn { conn: u64 },
    Hold { key: u8 },
    Free { key: u8 },
    Busy { key: u8, busy: bool },
    Clear,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4u64, 0..4u8).prop_map(|(conn, key)| Op::Enqueue { conn, key }),
        1 => (0..4u64, 0..4u8).prop_map(|(conn, key)| Op::Requeue { conn, key }),
        2 => (0..4u8).prop_map(|key| Op::PopHead { key }),
        2 => (0..64usize).prop_map(|nth| Op::Remove { nth }),
        1 => (0..4u64).prop_map(|conn| Op::LeaveConn { conn }),
        2 => (0..4u8).prop_map(|key| Op::Hold { key }),
        2 => (0..4u8).prop_map(|key| Op::Free { key }),
        1 => (0..4u8, any::<bool>()).prop_map(|(key, busy)| Op::Busy { key, busy }),
        1 => Just(Op::Clear),
    ]
}

proptest! {
    /// Whatever the sequence, the counters match a recount and FIFO order holds.
    #[test]
    fn counters_stay_in_step(ops in proptest::collection::vec(op(), 1..200)) {
        let now = crate::test_fields::t0();
        let mut p = Projection::new();
        let mut ids = Vec::new();
        let mut next_req = 0u64;
        for op in ops {
            let key = |n: u8| k(&format!("k{n}"));
            match op {
                Op::Enqueue { conn, key: n } => {
                    next_req += 1;
                    let mut w = waiter(conn, next_req, "x", now);
                    w.key = key(n);
                    ids.push(p.enqueue(w, true));
                }
                Op::Requeue { conn, key: n } => {
                    next_req += 1;
                    let mut w = waiter(conn, next_req, "x", now);
                    w.key = key(n);
                    let wid = p.requeue_front(w);
                    prop_assert_eq!(p.keys[&key(n)].rare.as_ref().unwrap().queue.front(), Some(&wid));
                    ids.push(wid);
                }
                Op::PopHead { key: n } => {
                    let before: Vec<_> = p.keys.get(&key(n)).and_then(|ks| ks.rare.as_ref()).map(|q| q.queue.iter()
                        .filter_map(|id| p.waiters.get(id).map(|w| w.id)).collect()).unwrap_or_default();
                    let got = p.pop_head(&key(n)).map(|w| w.id);
                    prop_assert_eq!(got, before.first().copied());
                }
                Op::Remove { nth } => {
                    if let Some(wid) = ids.get(nth % ids.len().max(1)).copied() {
                        p.remove_waiter(wid);
                    }
                }
                Op::LeaveConn { conn } => {
                    let gone = p.remove_conn_waiters(ConnId(conn));
                    prop_assert!(gone.iter().all(|w| w.conn == ConnId(conn)));
                }
                Op::Hold { key: n } => {
                    if p.holders(&key(n)).is_empty() {
                        p.add_holder(&key(n), Holding::committing(o("h"), false));
                    }
                }
                Op::Free { key: n } => {
                    p.set_holders(&key(n), Vec::new());
                    p.remove_if_idle(&key(n));
                }
                Op::Busy { key: n, busy } => p.set_busy(&key(n), busy),
                Op::Clear => {
                    let n = p.waiters();
                    prop_assert_eq!(p.clear().len(), n);
                }
            }
            p.check();
        }
    }
}

#[test]
fn held_keys_count_for_their_principal_dormant_or_not() {
    use crate::domain_time::DomainClock;
    use crate::locks::Holder;
    let now = crate::test_fields::t0();
    let clock = DomainClock::start(10_000, now);
    let mut p = Projection::new();
    p.set_dormant_above(0);
    let team: Option<std::sync::Arc<str>> = Some("team".into());
    let t = Token::new(7).unwrap();
    // Being committed, committed, dormant, back: one key of "team" throughout.
    p.add_holder(&k("a"), Holding::committing(o("oa"), false).of(team.clone()));
    assert_eq!((p.held_of("team"), p.held_of("other")), (1, 0));
    p.commit_holder(&k("a"), &o("oa"), Holding::committed(o("oa"), t, 3, 10_000, None, now).of(team.clone()));
    p.remove_if_idle(&k("a"));
    assert_eq!((p.dormant(), p.held_of("team")), (1, 1));
    p.check();
    let applied = Holder { owner: o("oa"), token: t, lease_s: 3, granted_dt: 10_000, slot: None };
    assert!(p.hydrate(&k("a"), vec![applied], &clock, now));
    assert_eq!(p.holders(&k("a"))[0].principal, team);
    assert_eq!(p.held_of("team"), 1);
    // Being freed by a hand-over to another principal: counted for its own
    // until the command commits (a failure puts it back)...
    p.mark_freeing(&k("a"), &o("oa"), t, false, true);
    assert_eq!((p.held(), p.held_of("team")), (0, 1));
    p.check();
    // ...to one of the same principal: its place is taken.
    p.mark_freeing(&k("a"), &o("oa"), t, false, false);
    assert_eq!((p.held(), p.held_of("team")), (0, 0));
    p.remove_holder(&k("a"), &o("oa"), t);
    p.check();
    // A dormant entry no applied holder matches stops counting for its principal.
    p.add_holder(&k("b"), Holding::committed(o("ob"), t, 3, 10_000, None, now).of(team.clone()));
    p.remove_if_idle(&k("b"));
    p.drop_dormant(p.first_dormant().unwrap());
    assert_eq!((p.held(), p.held_of("team")), (0, 0));
    p.check();
    // Two keys in one dormant entry (equal hashes and lease ends): both
    // stop counting for their principals when the second arrives, and are
    // uncounted once.
    p.add_holder(&k("c"), Holding::committed(o("oc"), t, 3, 10_000, None, now).of(team.clone()));
    p.remove_if_idle(&k("c"));
    let entry = p.first_dormant().unwrap();
    let other: std::sync::Arc<str> = "other".into();
    p.set_dormant_above(usize::MAX);
    p.add_holder(&k("d"), Holding::committed(o("od"), t, 3, 10_000, None, now).of(Some(other.clone())));
    assert_eq!((p.held_of("team"), p.held_of("other")), (1, 1));
    // As `remove_if_idle` would if d's hash were c's.
    p.timers.disarm(TimerKind::Lease(k("d")), now + Duration::from_secs(3));
    p.keys.remove(&k("d"));
    p.put_dormant(entry, Some(&other));
    assert_eq!((p.held(), p.dormant(), p.held_of("team"), p.held_of("other")), (2, 2, 0, 0));
    p.check();
    p.drop_dormant(entry);
    p.drop_dormant(entry);
    assert_eq!((p.held(), p.dormant(), p.held_of("team"), p.held_of("other")), (0, 0, 0, 0));
    p.check();
    // A new term forgets every count.
    p.add_holder(&k("e"), Holding::committing(o("oe"), false).of(team));
    p.clear();
    assert_eq!(p.held_of("team"), 0);
    p.check();
}
