//! The checker finds each violation it promises, and only those: every
//! history here is hand-made, one rule broken per test.

use ticketing_verify::checker::{check, last_line, table};
use ticketing_verify::db::Final;
use ticketing_verify::history::Event;

const MS: u64 = 1_000_000;
const BOUND: u64 = 15_000 * MS;

fn grant(client: u32, key: &str, token: u64, call: u64, ans: u64, dl: u64) -> Event {
    Event::Grant {
        client,
        key: key.into(),
        token,
        call: call * MS,
        ans: ans * MS,
        dl: dl * MS,
        keys: vec![],
        want: vec![],
        n: None,
        slot: None,
    }
}
/// A counted grant (`S … n`) with its slot.
fn counted(client: u32, key: &str, (n, slot): (u16, u16), token: u64, call: u64, ans: u64, dl: u64) -> Event {
    Event::Grant {
        client,
        key: key.into(),
        token,
        call: call * MS,
        ans: ans * MS,
        dl: dl * MS,
        keys: vec![],
        want: vec![],
        n: Some(n),
        slot: Some(slot),
    }
}
/// A multi-key grant of `keys` (as the ticket lists them) for the request `want`.
fn basket(client: u32, keys: &[&str], want: &[&str], token: u64, call: u64, ans: u64, dl: u64) -> Event {
    Event::Grant {
        client,
        key: keys[0].into(),
        token,
        call: call * MS,
        ans: ans * MS,
        dl: dl * MS,
        keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        want: want.iter().map(|k| (*k).to_owned()).collect(),
        n: None,
        slot: None,
    }
}
fn timeout(client: u32, key: &str, call: u64, ans: u64) -> Event {
    Event::Acquire {
        client,
        key: key.into(),
        call: call * MS,
        ans: ans * MS,
        result: "timeout".into(),
        keys: vec![],
        n: None,
    }
}
fn write(client: u32, key: &str, token: u64, issued: u64, result: &str) -> Event {
    Event::Write {
        client,
        key: key.into(),
        token,
        issued: issued * MS,
        done: (issued + 1) * MS,
        result: result.into(),
        keys: vec![],
        slot: None,
    }
}
fn release(client: u32, key: &str, token: u64, start: u64) -> Event {
    Event::Release {
        client,
        key: key.into(),
        token,
        start: start * MS,
        end: (start + 2) * MS,
        result: "released".into(),
    }
}
fn fin(counters: &[(&str, u64)], writes: &[(&str, u64, u32)]) -> Final {
    Final {
        counters: counters.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
        writes: writes.iter().map(|(k, t, c)| ((*k).to_owned(), *t, *c, None)).collect(),
    }
}
fn violations(ev: &[Event]) -> Vec<String> {
    check(ev, &fin(&[], &[]), BOUND, 0, 10_000 * MS).violations
}
fn has(v: &[String], prefix: &str) -> bool {
    v.iter().any(|x| x.starts_with(prefix))
}

/// Two clients that hold `k` one after the other, each writing once.
fn clean() -> (Vec<Event>, Final) {
    let ev = vec![
        grant(1, "k", 10, 100, 110, 3100),
        write(1, "k", 10, 150, "accepted"),
        release(1, "k", 10, 160),
        grant(2, "k", 20, 105, 170, 3170),
        write(2, "k", 20, 200, "accepted"),
        release(2, "k", 20, 210),
    ];
    (ev, fin(&[("k", 2)], &[("k", 10, 1), ("k", 20, 2)]))
}

#[test]
fn a_clean_history_has_no_violation() {
    let (ev, f) = clean();
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.grants, r.accepted, r.fence_refusals, r.faults), (2, 2, 0, 0));
    assert!(table(&r.rows).contains("| baseline | 2 |"));
    assert_eq!(last_line(0, 2, 0, 0), "violations=0 grants=2 faults=0 fence_refusals=0");
}

#[test]
fn overlapping_owners_are_found() {
    let (mut ev, f) = clean();
    // Client 2's grant answered before client 1 released.
    ev[3] = grant(2, "k", 20, 105, 155, 3155);
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("two owners of k")), "{:?}", r.violations);
}

#[test]
fn a_token_not_above_the_previous_grant_is_found() {
    let (mut ev, _) = clean();
    ev[3] = grant(2, "k", 5, 105, 170, 3170);
    ev[4] = write(2, "k", 5, 200, "refused");
    let f = fin(&[("k", 1)], &[("k", 10, 1)]);
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("token order on k")), "{:?}", r.violations);
    assert_eq!(r.fence_refusals, 1);
}

#[test]
fn a_token_decrease_across_keys_is_found() {
    // Grant on j answered at 120; a later acquire on k (called at 130) gets a smaller token.
    let ev = vec![grant(1, "j", 50, 100, 120, 3100), grant(2, "k", 40, 130, 140, 3140)];
    let r = check(&ev, &fin(&[], &[]), BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("token decrease")), "{:?}", r.violations);
    // Concurrent acquires (the second called before the first answered) may commit in any order.
    let ev = vec![grant(1, "j", 50, 100, 120, 3100), grant(2, "k", 40, 110, 140, 3140)];
    assert!(check(&ev, &fin(&[], &[]), BOUND, 0, 1000 * MS).violations.is_empty());
}

#[test]
fn an_accepted_write_below_an_earlier_one_is_found() {
    let (ev, _) = clean();
    let f = fin(&[("k", 2)], &[("k", 20, 2), ("k", 10, 1)]);
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("accepted write on k with token 10")), "{:?}", r.violations);
}

#[test]
fn a_counter_off_by_one_is_found() {
    let (ev, _) = clean();
    let f = fin(&[("k", 3)], &[("k", 10, 1), ("k", 20, 2)]);
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("counter of k is 3")), "{:?}", r.violations);
}

#[test]
fn a_lost_acknowledged_write_is_found() {
    let (ev, _) = clean();
    let f = fin(&[("k", 1)], &[("k", 10, 1)]);
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("acknowledged write lost: k token 20")), "{:?}", r.violations);
}

#[test]
fn a_stale_write_accepted_is_found_and_a_refused_one_is_fine() {
    let (mut ev, f) = clean();
    ev[4] = write(2, "k", 20, 3200, "accepted");
    ev[5] = release(2, "k", 20, 3300);
    let r = check(&ev, &f, BOUND, 0, 4000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("stale write accepted: k token 20")), "{:?}", r.violations);
    ev[4] = write(2, "k", 20, 3200, "refused");
    let r = check(&ev, &fin(&[("k", 1)], &[("k", 10, 1)]), BOUND, 0, 4000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.fence_refusals, 1);
}

#[test]
fn no_grant_within_the_bound_after_a_heal_is_found() {
    let (mut ev, f) = clean();
    let fault = |heal: u64| Event::Fault {
        name: "kill-leader".into(),
        nodes: 3,
        start: 50 * MS,
        heal: heal * MS,
        detail: String::new(),
    };
    ev.push(fault(60));
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.rows[1].recovery_ms, Some(50));
    ev.pop();
    ev.push(fault(200));
    let r = check(&ev, &f, BOUND, 0, 20_000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("no grant within the failover bound")), "{:?}", r.violations);
    // A heal too close to the end to judge is not a violation.
    assert!(check(&ev, &f, BOUND, 0, 1000 * MS).violations.is_empty());
}

#[test]
fn the_summary_sums_rows_per_fault_kind() {
    let (mut ev, f) = clean();
    for (start, heal) in [(50, 60), (120, 130)] {
        ev.push(Event::Fault {
            name: "kill-leader".into(),
            nodes: 3,
            start: start * MS,
            heal: heal * MS,
            detail: String::new(),
        });
    }
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    let s = ticketing_verify::checker::by_fault(&r.rows);
    assert!(s.contains("| kill-leader | 2 | 2 |"), "{s}");
    assert!(s.contains("| baseline | 1 | 0 |"), "{s}");
}

// --- counted and multi-key grants -------------------------------------------------------

/// Three clients on a semaphore of 2: two hold at once (slots 0 and 1),
/// the third after one left, on the freed slot.
fn semaphore() -> Vec<Event> {
    vec![
        counted(1, "s", (2, 0), 10, 100, 110, 3100),
        release(1, "s", 10, 300),
        counted(2, "s", (2, 1), 11, 100, 120, 3120),
        release(2, "s", 11, 400),
        counted(3, "s", (2, 0), 12, 100, 310, 3310),
        release(3, "s", 12, 500),
    ]
}

#[test]
fn a_semaphore_with_n_holders_at_once_has_no_violation() {
    let v = violations(&semaphore());
    assert!(v.is_empty(), "{v:?}");
    let r = check(&semaphore(), &fin(&[], &[]), BOUND, 0, 1000 * MS);
    assert_eq!((r.grants, r.counted, r.baskets), (3, 3, 0));
}

#[test]
fn n_plus_one_counted_holders_are_found() {
    let mut ev = semaphore();
    // Client 3 granted while both others still hold.
    ev[4] = counted(3, "s", (2, 2), 12, 100, 200, 3200);
    let v = violations(&ev);
    assert!(has(&v, "more counted holders of s than n: 3"), "{v:?}");
}

#[test]
fn each_counted_grant_is_checked_against_its_own_n() {
    // Two holders with n = 3 are fine; a third granted with n = 2 is one too many.
    let ok = vec![counted(1, "s", (3, 0), 10, 100, 110, 3100), counted(2, "s", (3, 1), 11, 100, 120, 3120)];
    assert!(violations(&ok).is_empty());
    let mut ev = ok.clone();
    ev.push(counted(3, "s", (2, 2), 12, 100, 130, 3130));
    let v = violations(&ev);
    assert!(has(&v, "more counted holders of s than n: 3 at 130 ms (tokens 10,11,12), the last granted"), "{v:?}");
    // Requests with different n on one key are each granted by their own
    // (docs/protocol.md, "A key's holders"): two holders of n = 2, then a
    // third of n = 3, is legal.
    let mut ev = vec![counted(1, "s", (2, 0), 10, 100, 110, 3100), counted(2, "s", (2, 1), 11, 100, 120, 3120)];
    ev.push(counted(3, "s", (3, 2), 12, 100, 130, 3130));
    assert!(violations(&ev).is_empty(), "{:?}", violations(&ev));
}

#[test]
fn a_slot_reused_while_held_is_found() {
    let mut ev = semaphore();
    ev[2] = counted(2, "s", (2, 0), 11, 100, 120, 3120);
    let v = violations(&ev);
    assert!(has(&v, "slot 0 of s held twice"), "{v:?}");
    // A slot outside 0..n.
    let v = violations(&[counted(1, "s", (2, 2), 10, 100, 110, 3100)]);
    assert!(has(&v, "slot 2 of s outside 0..2"), "{v:?}");
}

/// A read/write lock: two readers (S 65535) together, then a writer (A), then a reader.
fn read_write() -> Vec<Event> {
    vec![
        counted(1, "rw", (65535, 0), 10, 100, 110, 3100),
        counted(2, "rw", (65535, 1), 11, 100, 115, 3115),
        release(1, "rw", 10, 200),
        release(2, "rw", 11, 210),
        grant(3, "rw", 12, 150, 220, 3220),
        release(3, "rw", 12, 300),
        counted(1, "rw", (65535, 0), 13, 250, 310, 3310),
        release(1, "rw", 13, 400),
    ]
}

#[test]
fn readers_together_then_a_writer_alone_has_no_violation() {
    let v = violations(&read_write());
    assert!(v.is_empty(), "{v:?}");
}

#[test]
fn an_exclusive_holder_beside_a_counted_one_is_found() {
    let mut ev = read_write();
    // The writer granted while reader 2 still holds.
    ev[4] = grant(3, "rw", 12, 150, 205, 3205);
    let v = violations(&ev);
    assert!(has(&v, "exclusive and counted holders of rw at once"), "{v:?}");
    // A reader granted while the writer holds.
    let mut ev = read_write();
    ev[6] = counted(1, "rw", (65535, 0), 13, 250, 260, 3260);
    let v = violations(&ev);
    assert!(has(&v, "exclusive and counted holders of rw at once"), "{v:?}");
}

#[test]
fn counted_grants_of_one_commit_may_be_answered_in_either_order() {
    // Tokens 11 and 10, answered 11 first: both counted, no order between them.
    let ev = vec![counted(1, "s", (2, 0), 11, 100, 110, 3100), counted(2, "s", (2, 1), 10, 100, 112, 3100)];
    assert!(violations(&ev).is_empty());
    // But a counted grant answered after an exclusive one has the larger token.
    let ev =
        vec![grant(1, "s", 11, 100, 110, 3100), release(1, "s", 11, 150), counted(2, "s", (2, 0), 10, 100, 160, 3100)];
    let v = violations(&ev);
    assert!(has(&v, "token order on s: token 10 (client 2) granted after token 11"), "{v:?}");
}

#[test]
fn a_token_going_down_under_counted_and_multi_key_grants_is_found() {
    // A basket answered at 120; a counted acquire called after it gets a smaller token.
    let ev = vec![basket(1, &["a", "b"], &["b", "a"], 50, 100, 120, 3100), counted(2, "s", (2, 0), 40, 130, 140, 3140)];
    let v = violations(&ev);
    assert!(has(&v, "token decrease: token 40 on s"), "{v:?}");
    // The basket's keys each take its token in their order.
    let ev = vec![
        grant(1, "b", 60, 100, 110, 3100),
        release(1, "b", 60, 115),
        basket(2, &["a", "b"], &["a", "b"], 55, 100, 120, 3120),
    ];
    let v = violations(&ev);
    assert!(has(&v, "token order on b: token 55 (client 2) granted after token 60"), "{v:?}");
}

#[test]
fn one_token_on_two_grants_is_found() {
    let ev = vec![grant(1, "a", 50, 100, 110, 3100), grant(2, "b", 50, 100, 120, 3120)];
    let v = violations(&ev);
    assert!(has(&v, "one token on two grants"), "{v:?}");
}

#[test]
fn a_basket_is_exclusive_on_each_of_its_keys() {
    // A basket of a and b, then an exclusive holder of b after the release: clean.
    let ev = vec![
        basket(1, &["a", "b"], &["b", "a"], 10, 100, 110, 3100),
        release(1, "a", 10, 200),
        grant(2, "b", 11, 150, 210, 3210),
    ];
    assert!(violations(&ev).is_empty(), "{:?}", violations(&ev));
    // The same holder of b while the basket still holds it.
    let ev = vec![basket(1, &["a", "b"], &["b", "a"], 10, 100, 110, 3100), grant(2, "b", 11, 150, 160, 3160)];
    let v = violations(&ev);
    assert!(has(&v, "two owners of b"), "{v:?}");
    // And a reader beside it.
    let ev =
        vec![basket(1, &["a", "b"], &["b", "a"], 10, 100, 110, 3100), counted(2, "a", (65535, 0), 11, 150, 160, 3160)];
    let v = violations(&ev);
    assert!(has(&v, "exclusive and counted holders of a at once"), "{v:?}");
}

#[test]
fn a_partial_basket_is_found() {
    let ev = vec![basket(1, &["a"], &["a", "b"], 10, 100, 110, 3100)];
    let v = violations(&ev);
    assert!(has(&v, "partial basket: client 1 asked for a,b and was granted a with token 10"), "{v:?}");
    let ev = vec![basket(1, &["a", "c"], &["a", "b"], 10, 100, 110, 3100)];
    assert!(has(&violations(&ev), "partial basket"));
    let ev = vec![basket(1, &["b", "a"], &["a", "b"], 10, 100, 110, 3100)];
    assert!(violations(&ev).is_empty(), "the ticket may list its keys in another order");
}

#[test]
fn counted_writes_are_fenced_per_slot_and_below_exclusive_ones() {
    let key = |k: &str| k.to_owned();
    // Slot 1 commits token 11 before slot 0 commits token 10: concurrent holders, fine.
    let mut f = Final {
        counters: vec![(key("s"), 3)],
        writes: vec![(key("s"), 11, 2, Some(1)), (key("s"), 10, 1, Some(0)), (key("s"), 12, 3, None)],
    };
    let ev = vec![
        counted(1, "s", (2, 0), 10, 100, 110, 3100),
        counted(2, "s", (2, 1), 11, 100, 111, 3100),
        write(1, "s", 10, 130, "accepted"),
        write(2, "s", 11, 125, "accepted"),
        release(1, "s", 10, 140),
        release(2, "s", 11, 140),
        grant(3, "s", 12, 100, 150, 3150),
        write(3, "s", 12, 160, "accepted"),
    ];
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A counted write committed after an exclusive write with a larger token.
    f.writes = vec![(key("s"), 12, 3, None), (key("s"), 11, 2, Some(1)), (key("s"), 10, 1, Some(0))];
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(
        r.violations.iter().any(|v| v.starts_with("accepted write on s slot 1 with token 11")),
        "{:?}",
        r.violations
    );
    // Two writes of one slot out of order.
    f.writes = vec![(key("s"), 11, 2, Some(0)), (key("s"), 10, 1, Some(0)), (key("s"), 12, 3, None)];
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(
        r.violations.iter().any(|v| v.starts_with("accepted write on s slot 0 with token 10")),
        "{:?}",
        r.violations
    );
}

#[test]
fn a_multi_key_write_counts_on_every_key() {
    let key = |k: &str| k.to_owned();
    let ev = vec![
        basket(1, &["a", "b"], &["b", "a"], 10, 100, 110, 3100),
        Event::Write {
            client: 1,
            key: "a".into(),
            token: 10,
            issued: 150 * MS,
            done: 151 * MS,
            result: "accepted".into(),
            keys: vec![key("a"), key("b")],
            slot: None,
        },
        release(1, "a", 10, 160),
    ];
    let f = Final {
        counters: vec![(key("a"), 1), (key("b"), 1)],
        writes: vec![(key("a"), 10, 1, None), (key("b"), 10, 1, None)],
    };
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.accepted, r.baskets), (1, 1));
    // The database lost b's half of the transaction.
    let f = Final { counters: vec![(key("a"), 1), (key("b"), 0)], writes: vec![(key("a"), 10, 1, None)] };
    let r = check(&ev, &f, BOUND, 0, 1000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("acknowledged write lost: b token 10")), "{:?}", r.violations);
}

#[test]
fn a_stall_while_acquires_wait_is_found() {
    // Key a granted at 100, then 20 s of acquires timing out (wait 4 s each): a stall.
    let mut ev = vec![grant(1, "a", 10, 90, 100, 3100), release(1, "a", 10, 200)];
    for i in 0..5 {
        let t = 1000 + i * 4000;
        ev.push(timeout(2, "a", t, t + 4000));
    }
    let r = check(&ev, &fin(&[], &[]), BOUND, 0, 25_000 * MS);
    assert!(r.violations.iter().any(|v| v.starts_with("stall on a: no grant of it for")), "{:?}", r.violations);
    // The same stretch under a fault (start to heal) is the fault's, not a stall.
    ev.push(Event::Fault {
        name: "partition-leader".into(),
        nodes: 3,
        start: 900 * MS,
        heal: 12_000 * MS,
        detail: String::new(),
    });
    ev.push(grant(3, "b", 11, 12_500, 12_600, 15_600));
    let r = check(&ev, &fin(&[], &[]), BOUND, 0, 25_000 * MS);
    assert!(!r.violations.iter().any(|v| v.starts_with("stall")), "{:?}", r.violations);
    // Nobody asking for a key for long is not a stall.
    let ev = vec![grant(1, "a", 10, 90, 100, 3100), release(1, "a", 10, 200), timeout(2, "a", 24_000, 24_500)];
    assert!(check(&ev, &fin(&[], &[]), BOUND, 0, 25_000 * MS).violations.is_empty());
}
