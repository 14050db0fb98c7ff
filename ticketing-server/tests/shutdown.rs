//! docs/deployment.md, "Shutdown": SIGTERM stops accepting, sends `E shutting_down` to every
//! connection and exits 0.

mod common;
use common::*;
use std::time::Duration;

#[tokio::test]
async fn sigterm_sends_shutting_down_and_exits_zero() {
    let mut s = Server::start();
    let mut holder = s.client().await;
    holder.grab(1, "sd", &owner(), 30).await;
    let mut waiter = s.client().await;
    waiter.acquire(1, "sd", &owner(), 30, 5).await;
    waiter.send(b"P 2\n").await;
    waiter.expect("P 2").await;
    let mut handshaking = Client::raw(&s.addr).await;
    handshaking.greeting().await;

    s.sigterm();
    for c in [&mut holder, &mut waiter, &mut handshaking] {
        c.expect_error("shutting_down").await;
    }
    let status = s.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(tokio::net::TcpStream::connect(&s.addr).await.is_err(), "still accepting");
}

#[tokio::test]
async fn sigterm_right_after_the_ready_line_exits_zero() {
    let mut s = Server::start();
    s.sigterm();
    let status = s.wait_exit(Duration::from_secs(15));
    assert_eq!(status.code(), Some(0), "{status:?}");
}
