//! docs/deployment.md, "Start grace": a new domain grants nothing for
//! `--start-grace` seconds — requests queue, wait timers run (`wait` 0 is
//! `T`) — and the setting is range-checked. The FIFO grants at the grace's
//! end are tested on a simulated clock (ticketing-server/src/leader/tests.rs).

mod common;
use common::*;

#[tokio::test]
async fn nothing_is_granted_during_the_grace_and_waits_still_end() {
    // From the environment; 250 s outlasts the test.
    let s = Server::with(&[("TICKETING_START_GRACE", "250")], &[]);
    let mut c = s.client().await;
    c.acquire(1, "free", &owner(), 0, 5).await;
    c.expect("T 1 free").await;
    c.acquire(2, "free", &owner(), 1, 5).await;
    c.expect("T 2 free").await;
    c.send(b"Q 3 free someone\n").await;
    c.expect("N 3 free").await;
}

#[tokio::test]
async fn the_grace_is_checked_like_the_other_durations() {
    for bad in ["251", "-1", "x"] {
        let (code, err) = run_failing(&[], &[&format!("--start-grace={bad}")]);
        assert_eq!(code, Some(2), "{bad}: {err}");
        assert!(err.contains("--start-grace") || err.contains("start-grace"), "{bad}: {err}");
    }
    let p = temp_file("start_grace = 300\n");
    let (code, err) = run_failing(&[], &["--config", p.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("0-250"), "{err}");
}
