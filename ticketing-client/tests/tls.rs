//! TLS end to end: a fake server behind tokio-rustls with an rcgen test CA.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::*;
use ticketing_client::{Error, TicketBroker, Tls};

fn granting() -> Behavior {
    Behavior::script(|r| match r.op() {
        "A" => vec![grant(r, 515, 0)],
        _ => vec![line(format!("R {} {}", r.id(), r.key()))],
    })
}

/// Writes `pem` to a fresh file in the temp dir.
fn ca_file(name: &str, pem: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("ticketing-tls-{}-{name}.pem", std::process::id()));
    std::fs::write(&p, pem).unwrap();
    p
}

async fn grant_and_release(b: &TicketBroker) {
    let t = b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert_eq!(t.token(), 515);
    assert!(t.release().await.unwrap());
}

#[tokio::test]
async fn ca_file_mode_verifies_the_server_and_works() {
    let pki = pki();
    let fake = Fake::start_tls(granting(), pki.server.clone()).await;
    let ca = ca_file("ca", &pki.ca_pem);
    let b = TicketBroker::builder([fake.addr.clone()]).tls(Tls::CaFile(ca.clone())).connect().await.unwrap();
    grant_and_release(&b).await;
    assert!(String::from_utf8_lossy(&fake.raw()).contains("AUTH "), "the protocol ran inside TLS");
    b.close().await;
    // The same through the string form the bindings and the CLI use.
    let b =
        TicketBroker::builder([fake.addr.clone()]).tls(ca.to_str().unwrap().parse().unwrap()).connect().await.unwrap();
    grant_and_release(&b).await;
    b.close().await;
    let _ = std::fs::remove_file(ca);
}

#[tokio::test]
async fn insecure_skip_verify_works_without_the_ca() {
    let pki = pki();
    let fake = Fake::start_tls(granting(), pki.server.clone()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).tls(Tls::InsecureSkipVerify).connect().await.unwrap();
    grant_and_release(&b).await;
    b.close().await;
}

#[tokio::test]
async fn wrong_ca_is_unavailable_with_a_clear_error_and_sends_nothing() {
    let pki = pki();
    let other = support::pki();
    let fake = Fake::start_tls(granting(), pki.server.clone()).await;
    let ca = ca_file("wrong-ca", &other.ca_pem);
    let b = TicketBroker::builder([fake.addr.clone()]).tls(Tls::CaFile(ca.clone())).connect().await.unwrap();
    let start = Instant::now();
    assert_eq!(b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap_err(), Error::Unavailable);
    // At once: not after the 5 s handshake limit.
    assert!(start.elapsed() < secs(4.5), "a failed TLS handshake settles at once: {:?}", start.elapsed());
    let status = b.status().await.unwrap();
    assert!(!status.ready);
    let why = status.last_error.expect("the TLS failure is reported");
    assert!(why.contains("tls handshake") && why.contains("certificate"), "{why}");
    assert!(fake.requests().is_empty());
    b.close().await;
    let _ = std::fs::remove_file(ca);
}

#[tokio::test]
async fn tls_off_against_a_tls_server_fails_cleanly() {
    let pki = pki();
    // The fake hangs up on a client that does not start TLS within 300 ms.
    let fake = Fake::start_tls(granting(), pki.server.clone()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).tls(Tls::Off).connect().await.unwrap();
    assert!(!b.wait_ready(Duration::from_millis(500)).await);
    let e = b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap_err();
    assert_eq!(e, Error::Unavailable);
    assert!(fake.requests().is_empty());
    b.close().await;
}

#[tokio::test]
async fn tls_against_a_plain_server_fails_cleanly() {
    let fake = Fake::start(granting()).await;
    let b = TicketBroker::builder([fake.addr.clone()]).tls(Tls::InsecureSkipVerify).connect().await.unwrap();
    let start = Instant::now();
    assert_eq!(b.acquire_secs("k", 0.0, 5.0, 0.0).await.unwrap_err(), Error::Unavailable);
    assert!(start.elapsed() < secs(4.5), "not after the 5 s handshake limit: {:?}", start.elapsed());
    let why = b.status().await.unwrap().last_error.expect("reported");
    assert!(why.contains("tls handshake"), "{why}");
    assert!(fake.requests().is_empty());
    b.close().await;
}

#[tokio::test]
async fn cli_ping_over_tls() {
    let pki = pki();
    let fake = Fake::start_tls(granting(), pki.server.clone()).await;
    let ca = ca_file("cli-ca", &pki.ca_pem);
    let wrong = ca_file("cli-wrong-ca", &support::pki().ca_pem);
    let run = |tls: String| {
        let addr = fake.addr.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_ticketing"))
                .args(["--addr", &addr, "--tls", &tls, "ping", "--timeout", "1"])
                .env_remove("TICKETING_ADDR")
                .env_remove("TICKETING_TLS")
                .env_remove("TICKETING_TOKEN_FILE")
                .output()
                .await
                .unwrap()
        }
    };
    let ok = run(ca.to_str().unwrap().to_owned()).await;
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let bad = run(wrong.to_str().unwrap().to_owned()).await;
    assert_eq!(bad.status.code(), Some(69));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("tls handshake"), "{err}");
    let _ = (std::fs::remove_file(ca), std::fs::remove_file(wrong));
}
