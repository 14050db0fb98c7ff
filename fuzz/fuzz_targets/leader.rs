//! The pure leader (`ticketing_server::leader::Leader`) driven by arbitrary
//! bytes on a simulated clock, with a `LockState` as its replicator: each
//! byte pair is one step (a request from one of three connections, a
//! commit, a failed or lost batch, time passing, EOF, a close, a leadership
//! change). Acquires are exclusive (`A`), counted (`S`, n 1–3) or
//! multi-key (`K`, two keys). Checked after every step: no panic, the
//! leader's internal counts and its timer table match its state
//! (`Leader::check`), no request is answered twice, caps hold, tokens
//! strictly increase, the applied holders of every key are one exclusive or
//! counted ones on distinct slots.
#![no_main]
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use ticketing_proto::{Addr, Key, Owner, RequestId, ServerFrame, Token};
use ticketing_server::config::Limits;
use ticketing_server::leader::{Batch, ConnId, Delivery, Leader, Request};
use ticketing_server::locks::{GrantKind, LockState};
use ticketing_server::replication::{Leadership, ProposeError};

fn key(n: u8) -> Key {
    Key::new(format!("k{}", n % 4)).unwrap()
}

fuzz_target!(|data: &[u8]| {
    let me = Addr::new("127.0.0.1:1".to_owned()).unwrap();
    let limits = Limits {
        max_waiters_per_key: 3,
        max_waiters: 6,
        max_held_keys: 3,
        tick_ms: 300,
        start_grace: Duration::from_millis(u64::from(data.first().copied().unwrap_or(0) % 4) * 500),
        ..Limits::default()
    };
    let mut now = Instant::now();
    // A fixed wall clock: the same input takes the same path.
    let mut leader = Leader::new(limits.clone(), me.clone(), now, Arc::new(|| 1_700_000_000_000_000));
    // Half the inputs let every idle held key leave the projection (dormant).
    if data.first().is_some_and(|b| b & 0x80 != 0) {
        leader.set_dormant_above(0);
    }
    let mut state = LockState::new();
    let mut epoch = 1;
    let serving = |epoch, serving| Leadership { serving, active: true, leader: Some(me.clone()), epoch };
    leader.handle_leadership(now, &serving(epoch, true), &state);
    let mut conns = [ConnId(1), ConnId(2), ConnId(3)];
    let mut next_conn = 4;
    for c in conns {
        leader.handle_conn_opened(now, c, "10.0.0.1:1".into());
    }
    let mut pending: VecDeque<Batch> = VecDeque::new();
    let mut answered: HashMap<(ConnId, RequestId), ()> = HashMap::new();
    let mut kinds: HashMap<RequestId, GrantKind> = HashMap::new();
    let mut granted: HashMap<Key, Vec<(Owner, Token)>> = HashMap::new();
    let mut last_token = 0;
    let mut next_id = 0u64;

    for step in data.chunks(2).skip(1) {
        let (op, arg) = (step[0], step.get(1).copied().unwrap_or(0));
        let conn = conns[usize::from(arg % 3)];
        match op % 10 {
            0 | 1 => {
                next_id += 1;
                let kind = match op >> 6 {
                    1 => GrantKind::Shared { n: 1 + u16::from(arg & 3) % 3 },
                    2 => GrantKind::All { keys: vec![key(arg >> 2), key((arg >> 2) + 1)] },
                    _ => GrantKind::Exclusive,
                };
                kinds.insert(RequestId(next_id), kind.clone());
                let r = Request::Acquire {
                    id: RequestId(next_id),
                    key: key(arg >> 2),
                    kind,
                    owner: Owner::new(format!("o{next_id}")).unwrap(),
                    wait: (arg >> 4) % 4,
                    lease: 1 + (op >> 4) % 3,
                    read_at: now,
                    // Half of the acquires belong to a principal with a
                    // waiters cap of 2 and a held-keys cap of 3 (its counts
                    // are checked by `check`).
                    principal: (next_id % 2 == 1).then(|| ticketing_server::principal::PrincipalCap {
                        name: std::sync::Arc::from("team"),
                        max_waiters: Some(2),
                        max_held_keys: Some(3),
                    }),
                };
                leader.handle_request(now, conn, r, &state);
            }
            2 => {
                next_id += 1;
                let k = key(arg >> 2);
                let given = granted.get(&k).cloned().unwrap_or_default();
                let (owner, token) = given
                    .get(usize::from(op >> 4) % (given.len() + 1))
                    .cloned()
                    .unwrap_or_else(|| (Owner::new("nobody").unwrap(), Token::new(7).unwrap()));
                leader.handle_request(now, conn, Request::Release { id: RequestId(next_id), key: k, owner, token }, &state);
            }
            3 => {
                next_id += 1;
                let owner = Owner::new(format!("o{}", op >> 2)).unwrap();
                leader.handle_request(now, conn, Request::Holds { id: RequestId(next_id), key: key(arg >> 2), owner }, &state);
            }
            4 | 5 => {
                if let Some(b) = pending.pop_front() {
                    let outcome = state.apply_all(&b.cmds);
                    leader.handle_committed(now, b.id, Ok(outcome), &state);
                }
            }
            6 => {
                if let Some(b) = pending.pop_front() {
                    if arg & 1 == 1 {
                        state.apply_all(&b.cmds); // committed, but the outcome was lost
                    }
                    leader.handle_committed(now, b.id, Err(ProposeError::Unknown), &state);
                }
            }
            7 => {
                let until = now + Duration::from_millis(u64::from(arg) * 20);
                while let Some(at) = leader.poll_timeout().filter(|at| *at <= until) {
                    now = now.max(at);
                    leader.handle_timeout(now, &state);
                    while let Some((c, d)) = leader.poll_delivery() {
                        check_delivery(c, d, &mut answered, &mut granted, &mut last_token, &kinds);
                    }
                    while let Some(b) = leader.poll_proposal() {
                        pending.push_back(b);
                    }
                }
                now = until;
            }
            8 => {
                if arg & 1 == 0 {
                    leader.handle_leave_queues(now, conn);
                } else {
                    leader.handle_conn_closed(now, conn);
                    conns[usize::from(arg % 3)] = ConnId(next_conn);
                    leader.handle_conn_opened(now, ConnId(next_conn), "10.0.0.2:1".into());
                    next_conn += 1;
                }
            }
            _ => {
                // Batches in flight commit first or are lost; their outcomes come later.
                for b in pending.iter() {
                    if arg & 2 == 2 {
                        state.apply_all(&b.cmds);
                    }
                }
                epoch += 1;
                leader.handle_leadership(now, &serving(epoch, arg & 1 == 0), &state);
                for b in pending.drain(..) {
                    leader.handle_committed(now, b.id, Err(ProposeError::NotLeader(None)), &state);
                }
            }
        }
        while let Some((c, d)) = leader.poll_delivery() {
            check_delivery(c, d, &mut answered, &mut granted, &mut last_token, &kinds);
        }
        while let Some(b) = leader.poll_proposal() {
            assert!(!b.cmds.is_empty() && b.cmds.len() <= 128);
            pending.push_back(b);
        }
        leader.check();
        // An acquire of a free key whose no-op release is being committed
        // waits uncapped (it queues behind no one: tests/matrix.rs), at most
        // one per key: 4 keys here.
        assert!(leader.held() <= limits.max_held_keys && leader.waiters() <= limits.max_waiters + 4);
        assert!(leader.timers_len() <= leader.held() + leader.waiters() + 2);
        let mut by_key: HashMap<Key, Vec<Option<u16>>> = HashMap::new();
        for (k, h) in state.holders() {
            by_key.entry(k).or_default().push(h.slot);
        }
        for (k, slots) in by_key {
            assert!(slots.len() == 1 || slots.iter().all(Option::is_some), "{k}: an exclusive holder beside another");
            let mut distinct = slots.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), slots.len(), "{k}: two holders on one slot");
        }
    }
});

fn check_delivery(
    conn: ConnId,
    d: Delivery,
    answered: &mut HashMap<(ConnId, RequestId), ()>,
    granted: &mut HashMap<Key, Vec<(Owner, Token)>>,
    last_token: &mut u64,
    kinds: &HashMap<RequestId, GrantKind>,
) {
    let id = match &d {
        Delivery::Reply { id, .. } | Delivery::Dropped(id) => *id,
        Delivery::Fatal(_) => return,
    };
    assert!(answered.insert((conn, id), ()).is_none(), "request {id} answered twice");
    let (key, owner, token) = match d {
        Delivery::Reply { frame: ServerFrame::Granted { key, owner, token, .. }, .. } => (key, owner, token),
        Delivery::Reply { frame: ServerFrame::GrantedShared { key, owner, token, slot, .. }, .. } => {
            let Some(GrantKind::Shared { n }) = kinds.get(&id) else { panic!("G answers S only") };
            assert!(slot < *n, "slot {slot} of n = {n}");
            (key, owner, token)
        }
        _ => return,
    };
    assert!(token.get() > *last_token, "tokens strictly increase");
    *last_token = token.get();
    match kinds.get(&id) {
        Some(GrantKind::All { keys }) => {
            for k in keys {
                granted.entry(k.clone()).or_default().push((owner.clone(), token));
            }
        }
        _ => granted.entry(key).or_default().push((owner, token)),
    }
}
