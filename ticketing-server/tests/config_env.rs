//! SPEC §9: flag > environment > config file > default; the peer-count rule.

mod common;
use common::*;

async fn waiters_allowed(s: &Server, key: &str) -> usize {
    let mut h = s.client().await;
    h.grab(1, key, &owner(), 30).await;
    let mut c = s.client().await;
    for i in 0..10u64 {
        c.acquire(i, key, &owner(), 30, 5).await;
        // A grant of a free key is answered after any B for the acquire before it.
        let barrier = owner();
        let bkey = format!("{key}-barrier-{i}");
        c.acquire(100 + i, &bkey, &barrier, 0, 5).await;
        let line = c.line().await;
        if line == format!("B {i} {key}") {
            return i as usize;
        }
        parse_grant(&line, 100 + i, &bkey, &barrier);
    }
    10
}

#[tokio::test]
async fn flag_beats_env_beats_file_beats_default() {
    let file = temp_file("max-waiters-per-key = 3\n");
    let f = file.to_str().unwrap();
    let s = Server::with(&[], &["--config", f]);
    assert_eq!(waiters_allowed(&s, "p").await, 3);
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "2")], &["--config", f]);
    assert_eq!(waiters_allowed(&s, "p").await, 2);
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "2")], &["--config", f, "--max-waiters-per-key", "1"]);
    assert_eq!(waiters_allowed(&s, "p").await, 1);
    let file = temp_file("max_waiters_per_key = 4\n");
    let s = Server::with(&[("TICKETING_CONFIG", file.to_str().unwrap())], &[]);
    assert_eq!(waiters_allowed(&s, "p").await, 4);
}

#[tokio::test]
async fn wrong_peer_counts_exit_2() {
    for peers in ["a:1", "a:1,b:1", "a:1,b:1,c:1,d:1", "a:1,b:1,c:1,d:1,e:1,f:1"] {
        let (code, err) = run_failing(&[], &["--peers", peers]);
        assert_eq!(code, Some(2), "{peers}: {err}");
        assert!(err.contains("3 or 5"), "{err}");
        let (code, _) = run_failing(&[("TICKETING_PEERS", peers)], &[]);
        assert_eq!(code, Some(2));
    }
}

#[tokio::test]
async fn bad_configuration_exits_2_with_a_message() {
    let (code, err) = run_failing(&[("TICKETING_HANDSHAKE_TIMEOUT", "soon")], &[]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run_failing(&[], &["--client-tokens-file", "/nonexistent/ticketing-tokens"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/ticketing-tokens"), "{err}");
    let file = temp_file("unknown_setting = 1\n");
    let (code, err) = run_failing(&[], &["--config", file.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown_setting"), "{err}");
    // Tokens never go on the command line.
    let (code, _) = run_failing(&[], &["--client-tokens", "secret"]);
    assert_eq!(code, Some(2));
}
