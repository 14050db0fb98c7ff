//! Every client TLS mode of `ticketing-client` against the real server with
//! TLS on its client port, with and without required client certificates
//! (`--tls-client-ca`, docs/security.md).

mod common;
use common::*;
use std::time::Duration;
use ticketing_client::{Error, TicketBroker, Tls};
use ticketing_testkit::Pki;

fn tls_server(pki: &Pki, client_ca: Option<&str>) -> Server {
    let mut args =
        vec!["--tls-cert".to_owned(), pki.path("node1.pem"), "--tls-key".to_owned(), pki.path("node1-key.pem")];
    if let Some(ca) = client_ca {
        args.extend(["--tls-client-ca".to_owned(), ca.to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::with(&[], &args)
}

async fn works(b: TicketBroker) {
    assert!(b.wait_ready(Duration::from_secs(10)).await, "{:?}", b.status().await.and_then(|s| s.last_error));
    let t = b.acquire_secs("tls-mode", 1.0, 5.0, 0.0).await.unwrap().expect("granted");
    assert!(t.release().await.unwrap());
    b.close().await;
}

/// The broker never becomes ready; an acquire is `Unavailable`; returns the reported transport error.
async fn refused(b: TicketBroker) -> String {
    assert!(!b.wait_ready(Duration::from_millis(1500)).await);
    assert_eq!(b.acquire_secs("tls-mode", 0.0, 5.0, 0.0).await.unwrap_err(), Error::Unavailable);
    let why = b.status().await.unwrap().last_error.unwrap_or_default();
    b.close().await;
    why
}

#[tokio::test]
async fn server_certificate_modes() {
    let pki = Pki::new();
    let other = Pki::new();
    let s = tls_server(&pki, None);
    let builder = || TicketBroker::builder([s.addr.clone()]);
    works(builder().tls(Tls::CaFile(pki.path("ca.pem").into())).build().unwrap()).await;
    works(builder().tls(Tls::InsecureSkipVerify).build().unwrap()).await;
    // A client certificate the server does not ask for is harmless.
    let with_cert = builder().tls(Tls::CaFile(pki.path("ca.pem").into()));
    works(
        with_cert.tls_client_cert(pki.path("client.pem")).tls_client_key(pki.path("client-key.pem")).build().unwrap(),
    )
    .await;
    let why = refused(builder().tls(Tls::CaFile(other.path("ca.pem").into())).build().unwrap()).await;
    assert!(why.contains("tls handshake") && why.contains("certificate"), "{why}");
    // A plain client on a TLS port never completes the handshake.
    refused(builder().tls(Tls::Off).build().unwrap()).await;
}

#[tokio::test]
async fn client_certificates_required() {
    let pki = Pki::new();
    let other = Pki::new();
    let s = tls_server(&pki, Some(&pki.path("ca.pem")));
    let ca = || Tls::CaFile(pki.path("ca.pem").into());
    let builder = || TicketBroker::builder([s.addr.clone()]).tls(ca());
    works(
        builder().tls_client_cert(pki.path("client.pem")).tls_client_key(pki.path("client-key.pem")).build().unwrap(),
    )
    .await;
    // No client certificate, or one from another CA: refused by the server.
    let why = refused(builder().build().unwrap()).await;
    assert!(why.contains("CertificateRequired"), "the server's alert is reported: {why}");
    let foreign = builder().tls_client_cert(other.path("client.pem")).tls_client_key(other.path("client-key.pem"));
    let why = refused(foreign.build().unwrap()).await;
    assert!(why.contains("alert"), "the server's alert is reported: {why}");
    // skip-verify still has to present a certificate.
    let skip = TicketBroker::builder([s.addr.clone()]).tls(Tls::InsecureSkipVerify);
    works(skip.tls_client_cert(pki.path("client.pem")).tls_client_key(pki.path("client-key.pem")).build().unwrap())
        .await;
    // Bad client options fail at build time, nothing sent.
    let e = builder().tls_client_cert(pki.path("client.pem")).build().unwrap_err();
    assert!(e.to_string().contains("together"), "{e}");
    let off = TicketBroker::builder([s.addr.clone()]).tls_client_cert(pki.path("client.pem"));
    assert!(off.tls_client_key(pki.path("client-key.pem")).build().is_err());
}

#[tokio::test]
async fn config_errors_exit_2() {
    let pki = Pki::new();
    let (code, err) = run_failing(&[], &["--peer-tls-cert", &pki.path("node1.pem")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("all three"), "{err}");
    let (code, err) = run_failing(&[], &["--tls-client-ca", &pki.path("ca.pem")]);
    assert_eq!(code, Some(2), "{err}");
    let bad_ca = [
        "--tls-cert",
        &pki.path("node1.pem"),
        "--tls-key",
        &pki.path("node1-key.pem"),
        "--tls-client-ca",
        "/nonexistent/ca.pem",
    ];
    let (code, err) = run_failing(&[], &bad_ca);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--tls-client-ca"), "{err}");
    // A key that does not fit the certificate.
    let swapped = [
        "--peer-listen",
        "127.0.0.1:0",
        "--peers",
        "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
        "--peer-tls-cert",
        &pki.path("node1.pem"),
        "--peer-tls-key",
        &pki.path("node2-key.pem"),
        "--peer-tls-ca",
        &pki.path("ca.pem"),
    ];
    let (code, err) = run_failing(&[], &swapped);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("do not fit together"), "{err}");
}
