//! A durable standalone server writes a snapshot once enough commands were
//! applied and drops the journal before it; restarted after `kill -9`, it
//! starts from that snapshot plus the journal after it, with every holder
//! and token (docs/deployment.md, "Durability").

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Grants `keys` on `c` in pipelined rounds of 500; the tokens in order.
async fn grant_all(c: &mut Client<tokio::net::TcpStream>, keys: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let all: Vec<u64> = keys.collect();
    for round in all.chunks(500) {
        let mut text = String::new();
        for i in round {
            text.push_str(&format!("A {i} s{i} owner{i} 0 120\n"));
        }
        c.send(text.as_bytes()).await;
        for i in round {
            let line = c.line().await;
            out.push((*i, parse_grant(&line, *i, &format!("s{i}"), &format!("owner{i}")).0));
        }
    }
    out
}

#[tokio::test]
async fn restart_from_a_snapshot_and_the_journal_after_it() {
    let dir = temp_data_dir("snapshot-restart");
    let d = dir.to_str().unwrap();
    let server = Server::with(&[], &["--data-dir", d]);
    let mut c = server.client().await;
    // More commands than the snapshot cadence's minimum (5 000).
    let mut granted = grant_all(&mut c, 0..6000).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("snapshot").exists() {
        assert!(Instant::now() < deadline, "no snapshot written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Grants after the snapshot: only in the journal.
    granted.extend(grant_all(&mut c, 6000..6300).await);
    server.kill9();

    let server = Server::with(&[], &["--data-dir", d]);
    let mut c = server.client().await;
    for (n, (i, token)) in granted.iter().enumerate().step_by(37).chain(granted.iter().enumerate().rev().take(20)) {
        let held = c.query(n as u64, &format!("s{i}"), &format!("owner{i}")).await;
        assert_eq!(held.map(|h| h.0), Some(*token), "grant {i} lost");
    }
    let last = granted.iter().map(|g| g.1).max().unwrap();
    let t = c.grab(1, "after", "o", 5).await;
    assert!(t > last, "{t} > {last}");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}
