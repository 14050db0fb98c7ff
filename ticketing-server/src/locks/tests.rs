//! Tests of the lock state machine: each rule, and replicas fed random
//! histories of every command kind.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use ticketing_proto::limits::{MAX_LEASE, MIN_LEASE};

use crate::test_fields::{k, o};
fn grant(key: &str, owner: &str, micros: u64) -> Command {
    Command::Grant { key: k(key), owner: o(owner), lease_s: 5, micros, dt: 0 }
}

#[test]
fn token_is_max_of_last_plus_one_and_clock() {
    let mut s = LockState::new();
    assert_eq!(s.apply(&grant("a", "o1", 1000)), Applied::Granted(Token::new(1000).unwrap()));
    // clock went backwards: still strictly increasing
    assert_eq!(s.apply(&grant("b", "o2", 10)), Applied::Granted(Token::new(1001).unwrap()));
    assert_eq!(s.apply(&grant("c", "o3", 5000)), Applied::Granted(Token::new(5000).unwrap()));
    assert_eq!(s.last_token(), 5000);
}

#[test]
fn grants_record_their_domain_time_and_the_state_keeps_the_largest() {
    let mut s = LockState::new();
    let g = Command::Grant { key: k("a"), owner: o("o1"), lease_s: 10, micros: 1, dt: 5_000 };
    let Applied::Granted(t1) = s.apply(&g) else { panic!() };
    assert_eq!(s.holder(&k("a")).unwrap().granted_dt, 5_000);
    assert_eq!(s.holder(&k("a")).unwrap().end_dt(), 15_000);
    assert_eq!(s.apply(&Command::Tick { dt: 5_500 }), Applied::Ticked);
    // A proposal that was overtaken in the log does not move the time back.
    assert_eq!(s.apply(&Command::Tick { dt: 5_400 }), Applied::Ticked);
    assert_eq!(s.domain_time(), 5_500);
    let next = vec![NextHolder::exclusive(o("o2"), 3)];
    let r = Command::Free {
        reason: FreeReason::Release,
        key: k("a"),
        owner: o("o1"),
        token: t1,
        next,
        micros: 2,
        dt: 6_000,
    };
    assert!(
        matches!(s.apply(&r), Applied::Freed { reason: FreeReason::Release, ref handed_over } if handed_over[0].is_ok())
    );
    let h = s.holder(&k("a")).unwrap();
    assert_eq!((h.granted_dt, h.end_dt()), (6_000, 9_000), "a hand-over is granted at the release's time");
    let snap = LockState::from_snapshot(&s.to_snapshot()).unwrap();
    assert_eq!(snap, s);
    assert_eq!(snap.domain_time(), 6_000, "snapshots carry the domain time");
}

#[test]
fn grant_on_held_key_changes_nothing() {
    let mut s = LockState::new();
    s.apply(&grant("a", "o1", 1));
    let before = s.clone();
    assert_eq!(s.apply(&grant("a", "o2", 2)), Applied::AlreadyHeld);
    assert_eq!(s, before);
}

#[test]
fn release_hands_over_in_the_same_command() {
    let mut s = LockState::new();
    let Applied::Granted(t1) = s.apply(&grant("a", "o1", 1)) else { panic!() };
    let next = vec![NextHolder::exclusive(o("o2"), 9)];
    let r = Command::Free {
        reason: FreeReason::Release,
        key: k("a"),
        owner: o("o1"),
        token: t1,
        next: next.clone(),
        micros: 1,
        dt: 0,
    };
    let Applied::Freed { reason: FreeReason::Release, handed_over } = s.apply(&r) else { panic!() };
    let t2 = handed_over[0].clone().unwrap().token;
    assert!(t2 > t1);
    let want = Holder { owner: o("o2"), token: t2, lease_s: 9, granted_dt: 0, slot: None };
    assert_eq!(s.holder(&k("a")).unwrap(), want);
    // the same release again does not match any more, and an expiry of the old grant neither
    assert_eq!(s.apply(&r), Applied::NotHolder);
    let e = Command::Free {
        reason: FreeReason::Expiry,
        key: k("a"),
        owner: o("o1"),
        token: t1,
        next: vec![],
        micros: 1,
        dt: 0,
    };
    assert_eq!(s.apply(&e), Applied::NotHolder);
    assert_eq!(s.holder(&k("a")).unwrap().token, t2);
}

#[test]
fn release_needs_exact_owner_token_and_key() {
    let mut s = LockState::new();
    let Applied::Granted(t) = s.apply(&grant("a", "o1", 1)) else { panic!() };
    let other = Token::new(t.get() + 1).unwrap();
    for cmd in [
        Command::Free {
            reason: FreeReason::Release,
            key: k("a"),
            owner: o("o2"),
            token: t,
            next: vec![],
            micros: 0,
            dt: 0,
        },
        Command::Free {
            reason: FreeReason::Release,
            key: k("a"),
            owner: o("o1"),
            token: other,
            next: vec![],
            micros: 0,
            dt: 0,
        },
        Command::Free {
            reason: FreeReason::Release,
            key: k("b"),
            owner: o("o1"),
            token: t,
            next: vec![],
            micros: 0,
            dt: 0,
        },
    ] {
        assert_eq!(s.apply(&cmd), Applied::NotHolder);
    }
    let e = Command::Free {
        reason: FreeReason::Expiry,
        key: k("a"),
        owner: o("o1"),
        token: t,
        next: vec![],
        micros: 0,
        dt: 0,
    };
    assert_eq!(s.apply(&e), Applied::Freed { reason: FreeReason::Expiry, handed_over: vec![] });
    assert_eq!(s.held_count(), 0);
}

#[test]
fn token_never_reaches_2_pow_63() {
    let mut s = LockState::new();
    assert!(matches!(s.apply(&grant("a", "o", u64::MAX)), Applied::Granted(t) if t.get() == TOKEN_MAX));
    assert_eq!(s.apply(&grant("b", "o", u64::MAX)), Applied::TokensExhausted, "exhaustion is reported as itself");
    assert_eq!(s.last_token(), TOKEN_MAX);
}

/// One step of a random history; `pick` chooses between the current
/// holder's grant (so releases and expiries do match) and a stale one.
#[derive(Debug, Clone)]
enum Step {
    Tick { dt: u64 },
    Grant { key: u8, owner: u8, lease_s: u8, micros: u64 },
    GrantShared { key: u8, owner: u8, n: u16, micros: u64 },
    GrantAll { first: u8, more: u8, owner: u8, micros: u64 },
    Release { key: u8, pick: u8, next: Vec<(u8, u8, u8)>, micros: u64 },
    Expire { key: u8, pick: u8, next: Vec<(u8, u8, u8)>, micros: u64 },
}

/// A next holder's kind from a number: exclusive, counted (n 1–3) or
/// multi-key (its key and one more).
fn kind_of(n: u8) -> GrantKind {
    match n % 6 {
        0 | 1 => GrantKind::Exclusive,
        2..=4 => GrantKind::Shared { n: u16::from(n % 6 - 1) },
        _ => GrantKind::All { keys: vec![k(&format!("k{}", n % 4)), k(&format!("k{}", (n / 6) % 4 + 4))] },
    }
}

/// The holder rules of docs/protocol.md ("A key's holders") on a state:
/// an exclusive holder alone, counted holders on distinct slots.
fn check_holders(s: &LockState) -> Result<(), TestCaseError> {
    let mut by_key: HashMap<Key, Vec<Holder>> = HashMap::new();
    for (key, h) in s.holders() {
        by_key.entry(key).or_default().push(h);
    }
    for (key, hs) in by_key {
        let exclusive = hs.iter().filter(|h| h.slot.is_none()).count();
        prop_assert!(exclusive == 0 || hs.len() == 1, "{key}: an exclusive holder beside another");
        let mut slots: Vec<_> = hs.iter().filter_map(|h| h.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        prop_assert_eq!(slots.len(), hs.len() - exclusive, "{}: two holders on one slot", key);
        prop_assert!(hs.len() <= 3 || exclusive == 1, "{key}: more counted holders than any n allows");
    }
    Ok(())
}

fn step() -> impl Strategy<Value = Step> {
    let micros = prop_oneof![0..2000u64, Just(u64::MAX), any::<u64>()];
    let next = proptest::collection::vec((0..3u8, MIN_LEASE..=MAX_LEASE, any::<u8>()), 0..3);
    prop_oneof![
        (0..100_000u64).prop_map(|dt| Step::Tick { dt }),
        (0..4u8, 0..3u8, MIN_LEASE..=MAX_LEASE, micros.clone()).prop_map(|(key, owner, lease_s, micros)| Step::Grant {
            key,
            owner,
            lease_s,
            micros
        }),
        (0..4u8, 0..3u8, 1..=3u16, micros.clone()).prop_map(|(key, owner, n, micros)| Step::GrantShared {
            key,
            owner,
            n,
            micros
        }),
        (0..4u8, 4..8u8, 0..3u8, micros.clone()).prop_map(|(first, more, owner, micros)| Step::GrantAll {
            first,
            more,
            owner,
            micros
        }),
        (0..8u8, any::<u8>(), next.clone(), micros.clone()).prop_map(|(key, pick, next, micros)| Step::Release {
            key,
            pick,
            next,
            micros
        }),
        (0..8u8, any::<u8>(), next, micros).prop_map(|(key, pick, next, micros)| Step::Expire {
            key,
            pick,
            next,
            micros
        }),
    ]
}

/// Turns a step into a command the way a leader would: against its own
/// view `s` (the holder's exact grant, or a wrong owner/token).
fn command(s: &LockState, step: &Step) -> Command {
    let key = |n: u8| k(&format!("k{n}"));
    let owner = |n: u8| o(&format!("o{n}"));
    let grant_of = |n: u8, pick: u8| match (s.holders_of(&key(n)).get(usize::from(pick / 3) % 4).cloned(), pick % 3) {
        (Some(h), 0 | 1) => (h.owner, h.token),
        (Some(h), _) => (h.owner, Token::new(h.token.get() - 1).unwrap_or(h.token)),
        (None, _) => (owner(pick % 3), Token::new(u64::from(pick) + 1).unwrap()),
    };
    let next = |n: &Vec<(u8, u8, u8)>| -> Vec<NextHolder> {
        n.iter().map(|&(o, lease_s, kind)| NextHolder { owner: owner(o), lease_s, kind: kind_of(kind) }).collect()
    };
    // A domain time that jumps around (leader changes, reordered proposals).
    let dt = |micros: &u64| micros % 100_000;
    match step {
        Step::Tick { dt } => Command::Tick { dt: *dt },
        Step::Grant { key: n, owner: w, lease_s, micros } => {
            Command::Grant { key: key(*n), owner: owner(*w), lease_s: *lease_s, micros: *micros, dt: dt(micros) }
        }
        Step::GrantShared { key: n, owner: w, n: permits, micros } => Command::GrantShared {
            key: key(*n),
            owner: owner(*w),
            n: *permits,
            lease_s: 5,
            micros: *micros,
            dt: dt(micros),
        },
        Step::GrantAll { first, more, owner: w, micros } => Command::GrantAll {
            keys: vec![key(*first), key(*more)],
            owner: owner(*w),
            lease_s: 5,
            micros: *micros,
            dt: dt(micros),
        },
        Step::Release { key: n, pick, next: nx, micros } => {
            let (owner, token) = grant_of(*n, *pick);
            Command::Free {
                reason: FreeReason::Release,
                key: key(*n),
                owner,
                token,
                next: next(nx),
                micros: *micros,
                dt: dt(micros),
            }
        }
        Step::Expire { key: n, pick, next: nx, micros } => {
            let (owner, token) = grant_of(*n, *pick);
            Command::Free {
                reason: FreeReason::Expiry,
                key: key(*n),
                owner,
                token,
                next: next(nx),
                micros: *micros,
                dt: dt(micros),
            }
        }
    }
}

proptest! {
    /// Replicas fed the same commands end identical (holders, tokens,
    /// counter, every effect), also one restored from a snapshot midway;
    /// and every token issued is larger than every token before it.
    #[test]
    fn same_commands_same_state(
        steps in proptest::collection::vec(step(), 1..120),
        cut in any::<prop::sample::Index>(),
        batches in proptest::collection::vec(1..8usize, 1..40),
    ) {
        let mut leader = LockState::new();
        let cmds: Vec<Command> = steps.iter().map(|st| {
            let c = command(&leader, st);
            leader.apply(&c);
            c
        }).collect();
        let cut = cut.index(cmds.len());
        let (mut a, mut b) = (LockState::new(), LockState::new());
        let mut last = 0u64;
        let mut effects = Vec::new();
        for (i, c) in cmds.iter().enumerate() {
            if i == cut {
                b = LockState::from_snapshot(&b.to_snapshot()).unwrap();
            }
            let ea = a.apply(c);
            prop_assert_eq!(&ea, &b.apply(c));
            effects.push(ea.clone());
            let issued: Vec<Token> = match &ea {
                Applied::Granted(t) | Applied::GrantedShared { token: t, .. } => vec![*t],
                Applied::Freed { handed_over, .. } => handed_over.iter().filter_map(|h| h.as_ref().ok().map(|i| i.token)).collect(),
                _ => vec![],
            };
            for t in issued {
                prop_assert!(t.get() > last, "token {} after {}", t.get(), last);
                prop_assert!(t.get() <= TOKEN_MAX);
                last = t.get();
            }
            check_holders(&a)?;
        }
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(&a, &leader);
        // A replica fed the same commands in batches (one Raft entry
        // each, cut at random sizes) has the same effects and state.
        let (mut batched, mut batched_effects, mut rest) = (LockState::new(), Vec::new(), &cmds[..]);
        for n in batches.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (batch, tail) = rest.split_at((*n).min(rest.len()));
            batched_effects.extend(crate::cluster::types::Batch(batch.to_vec()).apply(&mut batched));
            rest = tail;
        }
        prop_assert_eq!(&batched_effects, &effects);
        prop_assert_eq!(&batched, &a);
        prop_assert_eq!(a.last_token(), last);
        // The domain time is the largest dt applied, and every holder's
        // grant time is one that was applied.
        prop_assert_eq!(a.domain_time(), cmds.iter().map(Command::dt).max().unwrap_or(0));
        for (_, h) in a.holders() {
            prop_assert!(h.granted_dt <= a.domain_time());
        }
    }
}

#[test]
fn grant_kind_names() {
    let all = GrantKind::All { keys: vec![k("a"), k("b")] };
    let names: Vec<_> = [GrantKind::Exclusive, GrantKind::Shared { n: 3 }, all].iter().map(GrantKind::name).collect();
    assert_eq!(names, ["exclusive", "shared", "all"]);
}
