//! The checker finds each violation it promises, and only those: every
//! history here is hand-made, one rule broken per test.

use ticketing_verify::checker::{check, last_line, table};
use ticketing_verify::db::Final;
use ticketing_verify::history::Event;

const MS: u64 = 1_000_000;
const BOUND: u64 = 15_000 * MS;

fn grant(client: u32, key: &str, token: u64, call: u64, ans: u64, dl: u64) -> Event {
    Event::Grant { client, key: key.into(), token, call: call * MS, ans: ans * MS, dl: dl * MS }
}
fn write(client: u32, key: &str, token: u64, issued: u64, result: &str) -> Event {
    Event::Write { client, key: key.into(), token, issued: issued * MS, done: (issued + 1) * MS, result: result.into() }
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
        writes: writes.iter().map(|(k, t, c)| ((*k).to_owned(), *t, *c)).collect(),
    }
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
