//! A client tokens file that holds no token never turns authentication off
//! (docs/security.md, "Client tokens"): at start the server refuses to run
//! (exit 2, the path and the reason); on a SIGHUP reload it keeps the
//! tokens it has, counts the reload as failed, and a client without a
//! token is still refused.

mod common;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn an_empty_or_blank_tokens_file_is_refused_at_start() {
    for text in ["", "\n  \n\t\n"] {
        let path = temp_file(text);
        let (code, err) = run_failing(&[], &["--client-tokens-file", path.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{text:?}: {err}");
        assert!(err.contains("holds no token") && err.contains(path.to_str().unwrap()), "{text:?}: {err}");
    }
}

fn reloads_failed(admin: u16) -> u64 {
    ticketing_testkit::metric(admin, "ticketing_reloads_total{result=\"failed\"}").map_or(0, |v| v as u64)
}

#[tokio::test]
async fn a_reload_that_finds_no_token_keeps_the_old_ones() {
    let path = temp_file("the-old-token\n");
    let admin = ticketing_testkit::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let server = Server::with(&[], &["--client-tokens-file", path.to_str().unwrap(), "--admin-listen", &admin_addr]);
    let before = reloads_failed(admin);
    std::fs::write(&path, "\n").unwrap();
    let ok = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
    assert!(ok.success());
    let end = Instant::now() + Duration::from_secs(10);
    while reloads_failed(admin) <= before {
        assert!(Instant::now() < end, "the reload was not counted as failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The old token still authenticates; no token does not.
    let mut c = Client::connect(&server.addr, b"the-old-token").await;
    c.grab(1, "k", "o", 5).await;
    let mut anon = Client::raw(&server.addr).await;
    assert!(anon.auth(b"").await.is_err(), "a client without a token was let in after the reload");
}
