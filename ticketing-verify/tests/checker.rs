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
        sent: None,
        wait_ms: None,
        lease_ms: None,
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
        sent: None,
        wait_ms: None,
        lease_ms: None,
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
        sent: None,
        wait_ms: None,
        lease_ms: None,
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
        sent: None,
        wait_ms: None,
        lease_ms: None,
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
    assert_eq!(last_line(0, 2, 0, 0, 0), "violations=0 grants=2 faults=0 fence_refusals=0 indeterminate_held=0");
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

// --- FIFO (rule 10) ---------------------------------------------------------------------

/// A grant of an acquire called at `call` whose request was handed to a
/// connection by `sent`, with `start` = send time + the server's `waited_ms`
/// (its deadline is `start` + lease × 0.999; wait 4 s, lease 3 s). The server
/// read it by `sent + (ans − start)` and committed it after `start`.
fn queued(client: u32, key: &str, token: u64, (call, sent): (u64, u64), start: u64, ans: u64) -> Event {
    Event::Grant {
        client,
        key: key.into(),
        token,
        call: call * MS,
        ans: ans * MS,
        dl: (start + 2997) * MS,
        keys: vec![],
        want: vec![],
        n: None,
        slot: None,
        sent: Some(sent * MS),
        wait_ms: Some(4000),
        lease_ms: Some(3000),
    }
}
/// The same for a counted grant (`S … n`).
fn queued_counted(
    client: u32,
    key: &str,
    (n, slot): (u16, u16),
    token: u64,
    times: (u64, u64),
    start: u64,
    ans: u64,
) -> Event {
    match queued(client, key, token, times, start, ans) {
        Event::Grant { client, key, token, call, ans, dl, sent, wait_ms, lease_ms, .. } => Event::Grant {
            client,
            key,
            token,
            call,
            ans,
            dl,
            keys: vec![],
            want: vec![],
            n: Some(n),
            slot: Some(slot),
            sent,
            wait_ms,
            lease_ms,
        },
        _ => unreachable!(),
    }
}
/// An acquire (`keys`: a basket's, else one key) that waited its 4 s and got `T`.
fn timed_out(client: u32, keys: &[&str], (call, sent): (u64, u64), ans: u64) -> Event {
    Event::Acquire {
        client,
        key: keys[0].into(),
        call: call * MS,
        ans: ans * MS,
        result: "timeout".into(),
        keys: if keys.len() > 1 { keys.iter().map(|k| (*k).to_owned()).collect() } else { vec![] },
        n: None,
        sent: Some(sent * MS),
        wait_ms: Some(4000),
        lease_ms: Some(3000),
    }
}
fn indeterminate(client: u32, key: &str, call: u64, ans: u64) -> Event {
    Event::Acquire {
        client,
        key: key.into(),
        call: call * MS,
        ans: ans * MS,
        result: "indeterminate".into(),
        keys: vec![],
        n: None,
        sent: None,
        wait_ms: Some(4000),
        lease_ms: Some(3000),
    }
}
fn fault(start: u64, heal: u64) -> Event {
    Event::Fault { name: "kill-leader".into(), nodes: 3, start: start * MS, heal: heal * MS, detail: String::new() }
}

/// Client 9 holds `k` until 1400. Client 1 asks at 100 (its request read by
/// 103) and waits; client 2 asks at 1000 and is granted at 1450, before
/// client 1 (granted at 1612, after client 2 released): overtaken.
fn overtaken() -> Vec<Event> {
    vec![
        grant(9, "k", 10, 0, 5, 3000),
        release(9, "k", 10, 1400),
        queued(1, "k", 12, (100, 101), 1610, 1612),
        release(1, "k", 12, 1700),
        queued(2, "k", 11, (1000, 1001), 1440, 1450),
        release(2, "k", 11, 1600),
    ]
}

fn check_fifo(ev: &[Event]) -> ticketing_verify::checker::Report {
    check(ev, &fin(&[], &[]), BOUND, 0, 10_000 * MS)
}

#[test]
fn a_waiter_overtaken_by_a_later_request_is_found() {
    let r = check_fifo(&overtaken());
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(
        has(&r.violations, "FIFO on k: client 2 (called at 1000 ms) was granted by 1450 ms while client 1, whose request the server had read by 103 ms, still waited (granted at 1612 ms)"),
        "{:?}",
        r.violations
    );
    assert_eq!(r.fifo_pairs, 1);
    // The same, client 1 in its own order: clean (it is granted first).
    let mut ev = overtaken();
    ev[2] = queued(1, "k", 11, (100, 101), 1440, 1450);
    ev[3] = release(1, "k", 11, 1600);
    ev[4] = queued(2, "k", 12, (1000, 1001), 1610, 1612);
    ev[5] = release(2, "k", 12, 1700);
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.fifo_pairs, 1, "the pair was judged");
}

#[test]
fn a_waiter_that_timed_out_after_being_overtaken_is_found() {
    // Client 1 waits its whole 4 s and gets T at 4101; client 2, called at
    // 1000, is granted at 1450 meanwhile.
    let mut ev = overtaken();
    ev[2] = timed_out(1, &["k"], (100, 101), 4101);
    ev.remove(3);
    let r = check_fifo(&ev);
    assert!(has(&r.violations, "FIFO on k: client 2 (called at 1000 ms) was granted by 1450 ms while client 1, whose request the server had read by 101 ms, still waited (answered timeout at 4101 ms)"), "{:?}", r.violations);
    // Its wait was over (call + 4 s) before client 2's grant: nothing.
    let ev = vec![
        grant(9, "k", 10, 0, 5, 3000),
        timed_out(1, &["k"], (100, 101), 4101),
        queued(2, "k", 11, (1000, 1001), 4110, 4150),
    ];
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn overtaking_is_found_whatever_the_kinds() {
    // A basket waiting for k and j is not overtaken on k by a later lock of k.
    let mut ev = overtaken();
    ev[2] = timed_out(1, &["j", "k"], (100, 101), 4101);
    ev.remove(3);
    let r = check_fifo(&ev);
    assert!(has(&r.violations, "FIFO on k: client 2"), "{:?}", r.violations);
    // A reader arriving behind a waiting writer waits behind it, although it
    // could hold the key beside the readers already there.
    let ev = vec![
        counted(9, "rw", (65535, 0), 10, 0, 5, 3000),
        release(9, "rw", 10, 1400),
        queued(1, "rw", 12, (100, 101), 1610, 1612),
        queued_counted(2, "rw", (65535, 1), 11, (1000, 1001), 1002, 1004),
        release(2, "rw", 11, 1050),
    ];
    let r = check_fifo(&ev);
    assert!(
        has(&r.violations, "FIFO on rw: client 2 (called at 1000 ms) was granted by 1004 ms while client 1"),
        "{:?}",
        r.violations
    );
    // Two readers granted by one command (the second's start is not after the first's answer): no order between them.
    let ev = vec![
        grant(9, "rw", 10, 0, 5, 3000),
        release(9, "rw", 10, 1400),
        queued_counted(1, "rw", (65535, 0), 11, (100, 101), 1440, 1452),
        queued_counted(2, "rw", (65535, 1), 12, (1000, 1001), 1440, 1450),
    ];
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.fifo_pairs, 1);
}

#[test]
fn requests_not_certainly_in_order_are_not_judged() {
    // Client 2 called 247 ms after the server had read client 1's request: within the margin (300 ms).
    let mut ev = overtaken();
    ev[4] = queued(2, "k", 11, (350, 351), 1440, 1450);
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.fifo_pairs, 0);
    // Client 1's request may have waited in the client for a connection (no `sent`).
    let mut ev = overtaken();
    if let Event::Grant { sent, .. } = &mut ev[2] {
        *sent = None;
    }
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // A long time between the send and the grant's start that is not the
    // server's waiting: the server may have read it late (it read it by 1101 here).
    let mut ev = overtaken();
    ev[2] = queued(1, "k", 12, (100, 101), 1610, 2610);
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    // Other keys, or the same client, are no pair.
    let mut ev = overtaken();
    ev[4] = queued(2, "j", 11, (1000, 1001), 1440, 1450);
    ev[5] = release(2, "j", 11, 1600);
    assert!(check_fifo(&ev).violations.is_empty());
}

#[test]
fn a_fault_or_a_disturbance_near_the_pair_exempts_it() {
    // A fault between client 1's call and client 2's grant: the leader may have changed.
    let mut ev = overtaken();
    ev.push(fault(1200, 1300));
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.fifo_pairs, 0);
    // One that healed less than 2 s before client 1's call: a cut-off leader may still answer.
    let mut ev = overtaken();
    ev.push(fault(0, 50));
    assert!(check_fifo(&ev).violations.is_empty());
    // One that healed long before, or started after client 2's grant: judged.
    for (start, heal) in [(0, 1), (4460, 4500)] {
        let mut ev = overtaken();
        ev.iter_mut().for_each(|e| shift(e, 3000));
        ev.push(fault(start, heal));
        let r = check_fifo(&ev);
        assert!(has(&r.violations, "FIFO on k"), "fault {start}–{heal}: {:?}", r.violations);
    }
    // A fault on the client links only changes no leader: judged.
    let mut ev = overtaken();
    ev.push(Event::Fault {
        name: "client-flaky".into(),
        nodes: 3,
        start: 1200 * MS,
        heal: 1300 * MS,
        detail: String::new(),
    });
    assert!(has(&check_fifo(&ev).violations, "FIFO on k"));
    // Another client's acquire ending Indeterminate (a session died) meanwhile: not judged.
    let mut ev = overtaken();
    ev.push(indeterminate(5, "other", 900, 950));
    let r = check_fifo(&ev);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

/// Moves a grant or release `by` ms later.
fn shift(e: &mut Event, by: u64) {
    match e {
        Event::Grant { call, ans, dl, sent, .. } => {
            for t in [call, ans, dl] {
                *t += by * MS;
            }
            if let Some(s) = sent {
                *s += by * MS;
            }
        }
        Event::Release { start, end, .. } => {
            *start += by * MS;
            *end += by * MS;
        }
        _ => {}
    }
}

// --- Indeterminate grants (rule 11) -------------------------------------------------------

/// An acquire of `key` called at `call` that ended Indeterminate at `ans`,
/// found held with `token` before `at` (the lane released it).
fn held(client: u32, key: &str, token: u64, (call, ans, at): (u64, u64, u64), n: Option<u16>) -> Vec<Event> {
    vec![
        indeterminate(client, key, call, ans),
        Event::IndeterminateHeld {
            client,
            key: key.into(),
            token,
            call: call * MS,
            ans: ans * MS,
            at: at * MS,
            released: true,
            keys: vec![],
            n,
        },
    ]
}

/// Client 1 holds k (token 10) until 200; client 2's acquire, called at 150,
/// ends Indeterminate at 400 and is found held with token 20 before 500;
/// client 3 is granted k (token 30) after.
fn indeterminate_history() -> Vec<Event> {
    let mut ev = vec![grant(1, "k", 10, 100, 110, 3110), release(1, "k", 10, 200)];
    ev.extend(held(2, "k", 20, (150, 400, 500), None));
    ev.push(grant(3, "k", 30, 600, 610, 3610));
    ev
}

#[test]
fn an_indeterminate_grant_found_held_counts_and_a_clean_one_passes() {
    let mut ev = indeterminate_history();
    ev.push(Event::IndeterminateNotHeld {
        client: 4,
        key: "k".into(),
        call: 700 * MS,
        ans: 800 * MS,
        at: 900 * MS,
        result: "not_held".into(),
        keys: vec![],
        n: None,
    });
    let r = check(&ev, &fin(&[], &[]), BOUND, 0, 1000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.indeterminate_held, r.indeterminate_not_held, r.indeterminate_unresolved), (1, 1, 0));
    assert_eq!(
        last_line(0, 2, 0, 0, r.indeterminate_held),
        "violations=0 grants=2 faults=0 fence_refusals=0 indeterminate_held=1"
    );
    // A basket found held on both of its keys is one grant with one token.
    let mut ev = indeterminate_history();
    ev.extend(held(2, "j", 20, (150, 400, 500), None).into_iter().skip(1));
    let r = check(&ev, &fin(&[], &[]), BOUND, 0, 1000 * MS);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.indeterminate_held, 1);
}

#[test]
fn an_indeterminate_grant_beside_another_holder_is_found() {
    // Client 1 still holds k (token 10) until 1000, past the moment client 2's
    // grant (token 20, so committed after it) was found held.
    let mut ev = indeterminate_history();
    ev[1] = release(1, "k", 10, 1000);
    ev[4] = grant(3, "k", 30, 1100, 1110, 4110);
    let v = violations(&ev);
    assert!(has(&v, "two holders of k at once: token 10 (client 1) held until 1000 ms, and token 20 (client 2, Indeterminate: called at 150 ms, found held before 500 ms), granted after it"), "{v:?}");
    // Two counted holders may hold together; a counted one beside an exclusive one may not.
    let mut ev = vec![counted(1, "s", (2, 0), 10, 100, 110, 3110), release(1, "s", 10, 1000)];
    ev.extend(held(2, "s", 20, (150, 400, 500), Some(2)));
    assert!(violations(&ev).is_empty(), "{:?}", violations(&ev));
    let mut ev = vec![grant(1, "s", 10, 100, 110, 3110), release(1, "s", 10, 1000)];
    ev.extend(held(2, "s", 20, (150, 400, 500), Some(2)));
    assert!(has(&violations(&ev), "two holders of s at once"), "{:?}", violations(&ev));
    // A holder that left before the grant was found held may have left before its commit: nothing.
    let mut ev = indeterminate_history();
    ev[1] = release(1, "k", 10, 450);
    assert!(violations(&ev).is_empty(), "{:?}", violations(&ev));
}

#[test]
fn an_indeterminate_grant_out_of_token_order_is_found() {
    // A grant answered before the acquire was called has a larger token.
    let mut ev = indeterminate_history();
    ev[0] = grant(1, "k", 25, 100, 110, 3110);
    ev[1] = release(1, "k", 25, 120);
    let v = violations(&ev);
    assert!(has(&v, "token decrease: token 20 (client 2, Indeterminate: called at 150 ms, found held before 500 ms) on k is not above token 25 on k (answered at 110 ms)"), "{v:?}");
    // A grant called after it was found held has a smaller token (any key).
    let mut ev = indeterminate_history();
    ev[4] = grant(3, "other", 15, 600, 610, 3610);
    let v = violations(&ev);
    assert!(has(&v, "token decrease: token 15 on other (called at 600 ms) is not above token 20"), "{v:?}");
    // Its token on another grant.
    let mut ev = indeterminate_history();
    ev[4] = grant(3, "other", 20, 100, 120, 3120);
    let v = violations(&ev);
    assert!(
        has(&v, "one token on two grants: token 20 (client 3) on other and token 20 (client 2, Indeterminate"),
        "{v:?}"
    );
}
