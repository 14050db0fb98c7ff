//! Client tokens through the real Rust client: right, wrong and missing
//! tokens, and a token against an auth-off server.

mod client_common;
mod cluster_common;
mod common;

use client_common::grab;
use cluster_common::{secs, within};
use common::{temp_file, Server};
use std::time::{Duration, Instant};
use ticketing_client::{Error, TicketBroker};

#[tokio::test]
async fn auth_right_wrong_and_missing_token() {
    let tokens = temp_file("s3cret\nrotated\n");
    let s = Server::with(&[], &["--client-tokens-file", tokens.to_str().unwrap()]);

    for token in ["s3cret", "rotated"] {
        let b = TicketBroker::builder([s.addr.clone()]).token(token).build().unwrap();
        assert!(within(secs(10), "wait_ready", b.wait_ready(secs(5))).await, "token {token}");
        let t = grab(&b, "auth", 0, 5).await;
        assert_eq!(t.release().await, Ok(true));
        b.close().await;
    }

    // Wrong token: AuthFailed promptly, well before the 5 s wait budget.
    let bad = TicketBroker::builder([s.addr.clone()]).token("wrong").build().unwrap();
    let start = Instant::now();
    let r = within(secs(10), "acquire wrong token", bad.acquire("auth", secs(5), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    assert!(start.elapsed() < secs(4), "AuthFailed after {:?}", start.elapsed());
    assert!(!within(secs(5), "wait_ready", bad.wait_ready(secs(1))).await);
    // Still AuthFailed later (after the first attempts), and at once.
    let start = Instant::now();
    let r = within(secs(10), "acquire wrong token again", bad.acquire("auth", secs(5), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    assert!(start.elapsed() < secs(4), "second AuthFailed after {:?}", start.elapsed());
    bad.close().await;

    // No token at all.
    let none = within(secs(10), "connect", TicketBroker::connect(&s.addr)).await.unwrap();
    let start = Instant::now();
    let r = within(secs(10), "acquire no token", none.acquire("auth", secs(5), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    assert!(start.elapsed() < secs(4), "AuthFailed after {:?}", start.elapsed());
    none.close().await;
}

#[tokio::test]
async fn token_against_an_auth_off_server_fails_the_server_proof() {
    // Auth off: the server accepts any cmac but proves itself with the empty
    // token (docs/protocol.md §3), so a client holding a token cannot verify it.
    let s = Server::start();
    let b = TicketBroker::builder([s.addr.clone()]).token("s3cret").build().unwrap();
    let r = within(secs(10), "acquire", b.acquire("k", secs(2), secs(5), Duration::ZERO)).await;
    assert!(matches!(r, Err(Error::AuthFailed)), "{r:?}");
    b.close().await;
}
