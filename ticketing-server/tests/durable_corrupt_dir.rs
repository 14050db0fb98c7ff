//! A data dir damaged before its last record, of an unknown format
//! version, or of another mode is refused: exit 2, a message with the path
//! and the reason, and every byte of DIR left as it was (docs/deployment.md,
//! "Durability").

mod common;
use common::*;
use std::time::Duration;

/// A durable standalone DIR with a few grants, cleanly stopped.
async fn filled_dir(name: &str) -> std::path::PathBuf {
    let dir = temp_data_dir(name);
    let mut server = Server::with(&[], &["--data-dir", dir.to_str().unwrap()]);
    let mut c = server.client().await;
    for i in 0..20u64 {
        c.grab(i, &format!("k{i}"), &format!("damageable{i:02}"), 60).await;
    }
    server.sigterm();
    assert!(server.wait_exit(Duration::from_secs(10)).success());
    dir
}

fn refused(dir: &std::path::Path, args: &[&str], reason: &str) {
    let before = dir_bytes(dir);
    let mut all = vec!["--data-dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    // A peer token, so that a cluster node gets past the peer-authentication rule to the DIR.
    let (code, stderr) = run_failing(&[("TICKETING_PEER_TOKEN", "durable-corrupt-dir-peer-token")], &all);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(dir.to_str().unwrap()), "names the path: {stderr}");
    assert!(stderr.contains(reason), "says why ({reason}): {stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    assert_eq!(dir_bytes(dir), before, "the refused DIR was changed");
}

#[tokio::test]
async fn a_damaged_record_before_the_last_is_exit_2_and_nothing_is_rewritten() {
    let dir = filled_dir("corrupt").await;
    let chunk = last_log_chunk(&dir);
    let mut bytes = std::fs::read(&chunk).unwrap();
    // Flip one byte inside an early grant's owner: that record fails its checksum.
    let at = bytes.windows(12).position(|w| w == b"damageable03").expect("record in the log");
    bytes[at + 3] ^= 0x20;
    std::fs::write(&chunk, &bytes).unwrap();
    refused(&dir, &[], "corrupt");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn an_unknown_format_version_is_exit_2() {
    let dir = filled_dir("version").await;
    let id = dir.join("identity.json");
    let text = std::fs::read_to_string(&id).unwrap();
    assert!(text.contains("\"version\": 1"), "{text}");
    std::fs::write(&id, text.replace("\"version\": 1", "\"version\": 7")).unwrap();
    refused(&dir, &[], "format version 7");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_standalone_dir_is_refused_to_a_cluster_node() {
    let dir = filled_dir("mode").await;
    let peers = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
    refused(&dir, &["--peers", peers, "--peer-listen", "127.0.0.1:0"], "standalone");
    std::fs::remove_dir_all(&dir).unwrap();
}
