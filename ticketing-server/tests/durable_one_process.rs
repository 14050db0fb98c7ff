//! One process per data dir: a second server on a DIR in use exits non-zero
//! with a clear message, and the first keeps serving with its state
//! (docs/deployment.md, "Durability").

mod common;
use common::*;

#[tokio::test]
async fn a_second_server_on_a_dir_in_use_is_refused() {
    let dir = temp_data_dir("one-process");
    let d = dir.to_str().unwrap();
    let first = Server::with(&[], &["--data-dir", d]);
    let mut c = first.client().await;
    let token = c.grab(1, "k", "o1", 60).await;
    let identity = std::fs::read(dir.join("identity.json")).unwrap();

    let (code, stderr) = run_failing(&[], &["--data-dir", d]);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}: {stderr}");
    assert!(stderr.contains("in use by another ticketing-server process"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
    assert_eq!(std::fs::read(dir.join("identity.json")).unwrap(), identity);

    // The first server is unaffected.
    assert_eq!(c.query(2, "k", "o1").await.map(|h| h.0), Some(token));
    c.acquire(3, "k2", "o2", 0, 5).await;
    c.expect_grant(3, "k2", "o2").await;
    drop(first);
    std::fs::remove_dir_all(&dir).unwrap();
}
