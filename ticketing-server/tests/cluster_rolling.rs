//! Rolling restart of all three nodes, one at a time, each restarted without
//! `--bootstrap` (new NodeId, no state) and rejoining as a learner that
//! replaces its old self (docs/deployment.md, rolling restart), under a running workload that keeps a
//! fenced counter in SQLite (the fencing recipe of docs/client.md): no double grant, no token
//! regression, and the counter equals the number of fenced increments.

mod cluster_common;
use cluster_common::*;
use rusqlite::{params, Connection};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
struct Tally {
    in_critical: AtomicBool,
    double_grants: AtomicU64,
    stale: AtomicU64,
    increments: AtomicU64,
    grants: AtomicU64,
    max_token: AtomicU64,
}

fn fenced_increment(db: &mut Connection, token: u64) -> rusqlite::Result<bool> {
    let tx = db.transaction()?;
    tx.execute("INSERT OR IGNORE INTO fence (key, high_water) VALUES ('ctr', 0)", [])?;
    let n =
        tx.execute("UPDATE fence SET high_water = ?1 WHERE key = 'ctr' AND high_water < ?1", params![token as i64])?;
    if n == 0 {
        tx.rollback()?;
        return Ok(false);
    }
    tx.execute("UPDATE counter SET value = value + 1 WHERE key = 'ctr'", [])?;
    tx.commit()?;
    Ok(true)
}

fn worker(w: usize, ports: Vec<u16>, db_path: &Path, stop: Arc<AtomicBool>, t: Arc<Tally>) {
    let mut db = Connection::open(db_path).unwrap();
    db.busy_timeout(Duration::from_secs(10)).unwrap();
    let mut seq = 0u64;
    let mut conn: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = conn.as_mut() else {
            conn = ports.iter().filter_map(|&p| hello(p).ok()).find(|c| c.ok.starts_with("OK leader"));
            if conn.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        seq += 1;
        let owner = format!("w{w}-{seq}");
        if c.send(&format!("A {seq} ctr {owner} 3 5")).is_err() {
            conn = None;
            continue;
        }
        let ans = c.answer(Duration::from_secs(10)).unwrap_or_default();
        let Some(token) = granted_token(&ans) else {
            if !ans.starts_with("T ") {
                conn = None; // M, E no_leader, closed: find the leader again
            }
            continue;
        };
        t.grants.fetch_add(1, Ordering::Relaxed);
        t.max_token.fetch_max(token, Ordering::Relaxed);
        if t.in_critical.swap(true, Ordering::AcqRel) {
            t.double_grants.fetch_add(1, Ordering::Relaxed);
        }
        match fenced_increment(&mut db, token) {
            Ok(true) => {
                t.increments.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {
                t.stale.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("sqlite: {e}"),
        }
        std::thread::sleep(Duration::from_millis(5));
        t.in_critical.store(false, Ordering::Release);
        if c.send(&format!("R {seq} ctr {owner} {token}")).is_err() {
            conn = None;
            continue;
        }
        let r = c.answer(Duration::from_secs(5)).unwrap_or_default();
        if !(r.starts_with("R ") || r.starts_with("N ")) {
            conn = None;
        }
    }
}

#[test]
fn rolling_restart_under_load_with_fenced_counter() {
    let mut c = Cluster::new("rolling", 3);
    c.start_all();
    c.wait_leader(Duration::from_secs(20)).expect("a leader");
    for i in 0..3 {
        assert!(c.wait_voter(i, Duration::from_secs(10)));
    }

    let db_path = log_dir().join("rolling-fence.sqlite");
    let _ = std::fs::remove_file(&db_path);
    {
        let db = Connection::open(&db_path).unwrap();
        db.execute_batch(
            "PRAGMA journal_mode=WAL;
             CREATE TABLE fence (key TEXT PRIMARY KEY, high_water INTEGER NOT NULL);
             CREATE TABLE counter (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
             INSERT INTO counter VALUES ('ctr', 0);",
        )
        .unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let ports: Vec<u16> = c.nodes.iter().map(|n| n.client).collect();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (ports, db_path, stop, tally) = (ports.clone(), db_path.clone(), stop.clone(), tally.clone());
            std::thread::spawn(move || worker(w, ports, &db_path, stop, tally))
        })
        .collect();

    // The workload is writing before the first restart.
    let end = Instant::now() + Duration::from_secs(20);
    while tally.increments.load(Ordering::Relaxed) < 5 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let t0 = Instant::now();
    for i in 0..3 {
        let before = tally.increments.load(Ordering::Relaxed);
        c.kill(i);
        // Down for a moment, as a restart by a supervisor is.
        std::thread::sleep(Duration::from_millis(300));
        c.start(i, false);
        assert!(c.wait_voter(i, Duration::from_secs(30)), "node {i} rejoined as a voter");
        assert!(c.wait_leader(Duration::from_secs(15)).is_some(), "a leader after restarting node {i}");
        // Let the workload run on the new membership before the next restart.
        let end = Instant::now() + Duration::from_secs(15);
        while tally.increments.load(Ordering::Relaxed) < before + 5 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        println!("node {i} restarted and rejoined; increments so far {}", tally.increments.load(Ordering::Relaxed));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let db = Connection::open(&db_path).unwrap();
    let counter: i64 = db.query_row("SELECT value FROM counter WHERE key = 'ctr'", [], |r| r.get(0)).unwrap();
    let high: i64 = db.query_row("SELECT high_water FROM fence WHERE key = 'ctr'", [], |r| r.get(0)).unwrap();
    let t = &tally;
    println!(
        "rolling restart took {:.1} s; grants {}, fenced increments {}, stale {}, double grants {}, counter {counter}",
        t0.elapsed().as_secs_f64(),
        t.grants.load(Ordering::Relaxed),
        t.increments.load(Ordering::Relaxed),
        t.stale.load(Ordering::Relaxed),
        t.double_grants.load(Ordering::Relaxed),
    );
    assert_eq!(t.double_grants.load(Ordering::Relaxed), 0, "a key was granted twice at once");
    assert_eq!(t.stale.load(Ordering::Relaxed), 0, "a token went backwards");
    assert_eq!(counter as u64, t.increments.load(Ordering::Relaxed));
    assert_eq!(high as u64, t.max_token.load(Ordering::Relaxed));
    assert!(counter >= 15, "the workload made progress through the rolling restart ({counter})");
    // Every node is now a fresh process and the domain still serves.
    let leader = c.wait_leader(Duration::from_secs(10)).expect("a leader at the end");
    let a = acquire_once(c.nodes[leader].client, "after", "o", 0, 5);
    assert!(granted_token(&a).unwrap_or(0) > high as u64, "{a}");
}
