//! A durable standalone server (`--data-dir`) killed with `kill -9` and
//! restarted on its DIR keeps every holder with its token and lease, forgets
//! its waiters (their connections died with it), and issues tokens above
//! every earlier one (docs/deployment.md, "Durability").

mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn holders_and_tokens_survive_a_kill_9_waiters_do_not() {
    let dir = temp_data_dir("standalone-restart");
    let d = dir.to_str().unwrap();
    let server = Server::with(&[], &["--data-dir", d]);
    let mut a = server.client().await;
    let t1 = a.grab(1, "k1", "o1", 120).await;
    let t2 = a.grab(2, "k2", "o2", 120).await;
    a.release(3, "k2", "o2", t2).await;
    a.expect("R 3 k2").await;
    let t3 = a.grab(4, "k3", "o3", 120).await;
    // A waiter on k1: queued, no answer.
    let mut w = server.client().await;
    w.acquire(1, "k1", "ow", 60, 10).await;
    w.silent(Duration::from_millis(300)).await;
    server.kill9();

    let server = Server::with(&[], &["--data-dir", d]);
    let mut c = server.client().await;
    let (tok, remaining) = c.query(1, "k1", "o1").await.expect("k1 still held by o1");
    assert_eq!(tok, t1);
    assert!(remaining > 100_000 && remaining <= 120_000, "lease end kept in domain time: {remaining} ms left");
    assert_eq!(c.query(2, "k3", "o3").await.map(|h| h.0), Some(t3));
    assert_eq!(c.query(3, "k2", "o2").await, None, "a release before the crash stays released");
    // The waiter is gone: releasing k1 hands it to nobody, the key is free.
    c.release(4, "k1", "o1", t1).await;
    c.expect("R 4 k1").await;
    assert_eq!(c.query(5, "k1", "ow").await, None, "the dead waiter was not granted");
    let t4 = c.grab(6, "k1", "o4", 10).await;
    assert!(t4 > t3 && t3 > t2 && t2 > t1, "tokens keep increasing across the restart: {t1} {t2} {t3} {t4}");
    drop(server);
    std::fs::remove_dir_all(&dir).unwrap();
}
