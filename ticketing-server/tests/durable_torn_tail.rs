//! A durable standalone server killed while it appends under load, its log
//! then cut short by a few bytes (a torn last record): it restarts cleanly,
//! drops only that record, and every grant before it is still held
//! (docs/deployment.md, "Durability").

mod common;
use common::*;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_torn_last_record_is_dropped_and_the_rest_kept() {
    let dir = temp_data_dir("torn-tail");
    let d = dir.to_str().unwrap();
    let server = Server::with(&[], &["--data-dir", d]);
    // A writer that keeps granting while the process is killed.
    let addr = server.addr.clone();
    let writer = tokio::spawn(async move {
        let mut c = Client::connect(&addr, b"").await;
        let mut granted = Vec::new();
        let end = Instant::now() + Duration::from_secs(20);
        for i in 0..100_000u64 {
            if Instant::now() > end {
                break;
            }
            c.send_lossy(format!("A {i} key{i} owner{i} 0 120\n").as_bytes()).await;
            match c.try_line_within(Duration::from_secs(2)).await {
                Some(line) => granted.push((i, parse_grant(&line, i, &format!("key{i}"), &format!("owner{i}")).0)),
                _ => break,
            }
        }
        granted
    });
    // Kill once a few hundred grants are on disk.
    let deadline = Instant::now() + Duration::from_secs(20);
    let log_len = || {
        let chunks = std::fs::read_dir(dir.join("log")).into_iter().flatten().filter_map(Result::ok);
        chunks
            .filter(|e| e.path().extension().is_some_and(|x| x == "wal"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum::<u64>()
    };
    while log_len() < 40_000 {
        assert!(Instant::now() < deadline, "the log did not grow");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.kill9();
    let granted = writer.await.unwrap();
    assert!(granted.len() > 100, "only {} grants", granted.len());

    // Tear the last record.
    let chunk = last_log_chunk(&dir);
    let len = std::fs::metadata(&chunk).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&chunk).unwrap().set_len(len - 5).unwrap();

    let server = Server::with(&[], &["--data-dir", d]);
    let mut c = server.client().await;
    // Every acknowledged grant but the last (its record may be the torn one) is held.
    let (last, before) = granted.split_last().unwrap();
    for (n, (i, token)) in before.iter().enumerate() {
        let held = c.query(n as u64, &format!("key{i}"), &format!("owner{i}")).await;
        assert_eq!(held.map(|h| h.0), Some(*token), "grant {i} lost");
    }
    let t = c.grab(u64::MAX - 1, "after", "o", 5).await;
    assert!(t > last.1, "new tokens above every earlier one: {t} vs {}", last.1);
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The last record damaged in place, as a power cut can leave it (pages of
/// one write reach the disk out of order): its middle zeroed (a hole), or a
/// byte of it changed. It fails its checksum and is dropped; every record
/// before it is kept (docs/deployment.md, "The data dir").
#[tokio::test]
async fn a_last_record_that_fails_its_checksum_is_dropped() {
    for damage in ["hole", "flip"] {
        let dir = temp_data_dir(&format!("torn-{damage}"));
        let d = dir.to_str().unwrap();
        let server = Server::with(&[], &["--data-dir", d]);
        let mut c = server.client().await;
        let mut granted = Vec::new();
        for i in 0..20u64 {
            granted.push((i, c.grab(i, &format!("key{i}"), &format!("owner{i}"), 120).await));
        }
        let chunk = last_log_chunk(&dir);
        let before = std::fs::read(&chunk).unwrap();
        // One more record: the one to damage.
        let last = c.grab(99, "last", "owner-last", 120).await;
        server.kill9();
        let mut bytes = std::fs::read(&chunk).unwrap();
        assert!(bytes.len() > before.len() + 8, "{damage}: the last record was written to the same chunk");
        let (start, end) = (before.len(), bytes.len());
        match damage {
            "hole" => bytes[start + 4..end - 4].iter_mut().for_each(|b| *b = 0),
            _ => bytes[(start + end) / 2] ^= 0x5a,
        }
        std::fs::write(&chunk, &bytes).unwrap();

        let server = Server::with(&[], &["--data-dir", d]);
        let mut c = server.client().await;
        for (i, token) in &granted {
            let held = c.query(1000 + i, &format!("key{i}"), &format!("owner{i}")).await;
            assert_eq!(held.map(|h| h.0), Some(*token), "{damage}: grant {i} lost");
        }
        assert_eq!(c.query(2000, "last", "owner-last").await, None, "{damage}: the damaged record is dropped");
        let t = c.grab(u64::MAX - 1, "after", "o", 5).await;
        assert!(t > last, "{damage}: new tokens above every earlier one, the dropped grant's too: {t} vs {last}");
        drop(server);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
