//! docs/protocol.md, "Counted and multi-key grants", on the wire of a
//! standalone server: `S` and its answer `G` (permits, slots, FIFO without
//! overtaking, readers and writers), `K` (all keys or none, one token,
//! release per key, no deadlock whatever the key order), `Q` per key.

mod common;
use common::*;

/// `S <id> <key> <owner> <wait> <lease> <n>`.
async fn shared(c: &mut Client<tokio::net::TcpStream>, id: u64, key: &str, owner: &str, wait: u8, n: u16) {
    c.send(format!("S {id} {key} {owner} {wait} 30 {n}\n").as_bytes()).await;
}

/// Reads `G <id> <key> <owner> <token> <waited_ms> <slot>`: (token, slot).
async fn expect_g(c: &mut Client<tokio::net::TcpStream>, id: u64, key: &str, owner: &str) -> (u64, u16) {
    let line = c.line().await;
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f.len(), 7, "{line}");
    assert_eq!((f[0], f[1], f[2], f[3]), ("G", &*id.to_string(), key, owner), "{line}");
    (f[4].parse().unwrap(), f[6].parse().unwrap())
}

/// A ping answered proves every earlier frame of the connection was read.
async fn sync(c: &mut Client<tokio::net::TcpStream>) {
    c.send(b"P 999999\n").await;
    c.expect("P 999999").await;
}

#[tokio::test]
async fn a_semaphore_grants_n_holders_on_distinct_slots_and_reuses_a_freed_slot() {
    let s = Server::start();
    let mut c = s.client().await;
    let owners: Vec<String> = (0..4).map(|_| owner()).collect();
    let mut held = Vec::new();
    for (i, o) in owners[..3].iter().enumerate() {
        shared(&mut c, i as u64, "sem", o, 0, 3).await;
        held.push(expect_g(&mut c, i as u64, "sem", o).await);
    }
    let slots: Vec<u16> = held.iter().map(|h| h.1).collect();
    assert_eq!(slots, vec![0, 1, 2], "the lowest free slot each time");
    assert!(held.windows(2).all(|w| w[0].0 < w[1].0), "one increasing token per grant: {held:?}");
    // Full: a fourth with wait 0 is answered T at once.
    shared(&mut c, 10, "sem", &owners[3], 0, 3).await;
    c.expect("T 10 sem").await;
    // An exclusive acquire cannot join counted holders.
    c.acquire(11, "sem", &owner(), 0, 5).await;
    c.expect("T 11 sem").await;
    // A waiting fourth gets the slot the release frees, in the release's commit.
    shared(&mut c, 12, "sem", &owners[3], 10, 3).await;
    sync(&mut c).await;
    c.release(13, "sem", &owners[1], held[1].0).await;
    let mut lines = vec![c.line().await, c.line().await];
    lines.sort();
    assert_eq!(lines[1], "R 13 sem", "{lines:?}");
    let g: Vec<&str> = lines[0].split(' ').collect();
    assert_eq!((g[0], g[1], g[6]), ("G", "12", "1"), "slot 1 is reused: {lines:?}");
    assert!(g[4].parse::<u64>().unwrap() > held[2].0);
    // Q names one holder of the key.
    c.send(format!("Q 14 sem {}\n", owners[2]).as_bytes()).await;
    let h = c.line().await;
    assert!(h.starts_with(&format!("H 14 sem {} {} ", owners[2], held[2].0)), "{h}");
}

#[tokio::test]
async fn readers_share_and_a_writer_is_not_overtaken_by_later_readers() {
    let s = Server::start();
    let mut c = s.client().await;
    let (r1, r2, w, r3) = (owner(), owner(), owner(), owner());
    shared(&mut c, 1, "rw", &r1, 0, 65535).await;
    let (t1, _) = expect_g(&mut c, 1, "rw", &r1).await;
    shared(&mut c, 2, "rw", &r2, 0, 65535).await;
    let (t2, _) = expect_g(&mut c, 2, "rw", &r2).await;
    // The writer waits for both readers; a reader after it waits for it.
    let mut wc = s.client().await;
    wc.acquire(3, "rw", &w, 30, 30).await;
    sync(&mut wc).await;
    let mut rc = s.client().await;
    shared(&mut rc, 4, "rw", &r3, 30, 65535).await;
    sync(&mut rc).await;
    // A reader with wait 0 does not overtake the queued writer either.
    shared(&mut c, 5, "rw", &owner(), 0, 65535).await;
    c.expect("T 5 rw").await;
    c.release(6, "rw", &r1, t1).await;
    c.expect("R 6 rw").await;
    wc.silent(std::time::Duration::from_millis(200)).await;
    c.release(7, "rw", &r2, t2).await;
    c.expect("R 7 rw").await;
    let (tw, _) = wc.expect_grant(3, "rw", &w).await;
    assert!(tw > t2);
    rc.silent(std::time::Duration::from_millis(200)).await;
    wc.release(8, "rw", &w, tw).await;
    wc.expect("R 8 rw").await;
    let (t3, slot) = expect_g(&mut rc, 4, "rw", &r3).await;
    assert!(t3 > tw);
    assert_eq!(slot, 0);
}

#[tokio::test]
async fn a_release_hands_over_to_every_reader_that_became_grantable() {
    let s = Server::start();
    let mut c = s.client().await;
    let w = owner();
    let tw = c.grab(1, "batch", &w, 30).await;
    let mut readers = Vec::new();
    for i in 0..3u64 {
        let mut rc = s.client().await;
        let o = owner();
        shared(&mut rc, 10 + i, "batch", &o, 30, 2).await;
        sync(&mut rc).await;
        readers.push((rc, o, 10 + i));
    }
    c.release(2, "batch", &w, tw).await;
    c.expect("R 2 batch").await;
    // n = 2: the first two readers get slots 0 and 1 in the same commit, the third waits.
    let mut slots = Vec::new();
    for (rc, o, id) in readers.iter_mut().take(2) {
        slots.push(expect_g(rc, *id, "batch", o).await.1);
    }
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 1]);
    readers[2].0.silent(std::time::Duration::from_millis(200)).await;
}

#[tokio::test]
async fn a_multi_key_grant_takes_every_key_with_one_token_or_waits() {
    let s = Server::start();
    let mut c = s.client().await;
    let (a, b) = (owner(), owner());
    c.send(format!("K 1 {a} 0 30 m1 m2 m3\n").as_bytes()).await;
    let (ta, _) = c.expect_grant(1, "m1", &a).await;
    // Every key is held with that token.
    for key in ["m1", "m2", "m3"] {
        assert_eq!(c.query(2, key, &a).await.map(|h| h.0), Some(ta), "{key}");
    }
    // An overlapping basket, in another order, waits; one of another key set is free.
    let mut w = s.client().await;
    w.send(format!("K 5 {b} 30 30 m3 m9\n").as_bytes()).await;
    sync(&mut w).await;
    c.send(format!("K 3 {} 0 30 m8 m7\n", owner()).as_bytes()).await;
    let l = c.line().await;
    assert!(l.starts_with("A 3 m8 "), "{l}");
    // m9 is free but m9's queue has the basket at its head: a later A waits behind it.
    c.acquire(4, "m9", &owner(), 0, 30).await;
    c.expect("T 4 m9").await;
    // Released key by key: the waiting basket gets both its keys once m3 is free.
    c.release(6, "m1", &a, ta).await;
    c.expect("R 6 m1").await;
    c.release(7, "m3", &a, ta).await;
    c.expect("R 7 m3").await;
    let (tb, _) = w.expect_grant(5, "m3", &b).await;
    assert!(tb > ta);
    assert_eq!(w.query(8, "m9", &b).await.map(|h| h.0), Some(tb));
    // m2 is still held by the first basket.
    assert_eq!(c.query(9, "m2", &a).await.map(|h| h.0), Some(ta));
    c.release(10, "m2", &a, ta).await;
    c.expect("R 10 m2").await;
}

#[tokio::test]
async fn crossing_baskets_do_not_deadlock() {
    let s = Server::start();
    let mut h = s.client().await;
    let (x, y) = (owner(), owner());
    let tx = h.grab(1, "dx", &x, 30).await;
    let ty = h.grab(2, "dy", &y, 30).await;
    let (p, q) = (owner(), owner());
    let mut c1 = s.client().await;
    c1.send(format!("K 1 {p} 30 30 dx dy\n").as_bytes()).await;
    sync(&mut c1).await;
    let mut c2 = s.client().await;
    c2.send(format!("K 1 {q} 30 30 dy dx\n").as_bytes()).await;
    sync(&mut c2).await;
    h.release(3, "dx", &x, tx).await;
    h.expect("R 3 dx").await;
    c1.silent(std::time::Duration::from_millis(100)).await;
    h.release(4, "dy", &y, ty).await;
    h.expect("R 4 dy").await;
    // The earlier basket first, then the other.
    let (tp, _) = c1.expect_grant(1, "dx", &p).await;
    c2.silent(std::time::Duration::from_millis(100)).await;
    c1.release(2, "dx", &p, tp).await;
    c1.expect("R 2 dx").await;
    c1.release(3, "dy", &p, tp).await;
    c1.expect("R 3 dy").await;
    let (tq, _) = c2.expect_grant(1, "dy", &q).await;
    assert!(tq > tp);
}

#[tokio::test]
async fn malformed_counted_and_multi_key_frames_close_the_connection() {
    let s = Server::start();
    for line in ["S 1 k o 5 30 0\n", "S 1 k o 5 30 65536\n", "K 1 o 5 30 a\n", "K 1 o 5 30 a b a\n"] {
        let mut c = s.client().await;
        c.send(line.as_bytes()).await;
        c.expect_error("bad_frame").await;
    }
    // The server still serves.
    let mut c = s.client().await;
    let o = owner();
    c.send(format!("S 1 k {o} 0 5 1\n").as_bytes()).await;
    assert_eq!(expect_g(&mut c, 1, "k", &o).await.1, 0);
}
