//! TLS on the client port (--tls-cert/--tls-key): the same protocol inside TLS from the first byte.

mod common;
use common::*;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types::ServerName, RootCertStore};

#[tokio::test]
async fn handshake_and_requests_over_tls() {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = temp_file(&ck.cert.pem());
    let key = temp_file(&ck.key_pair.serialize_pem());
    let s = Server::with(&[("TICKETING_TLS_KEY", key.to_str().unwrap())], &["--tls-cert", cert.to_str().unwrap()]);

    let mut roots = RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(&s.addr).await.unwrap();
    let tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
    let mut c = Client::over(tls);
    c.auth(b"").await.unwrap();
    c.expect(&format!("L {}", s.addr)).await;
    let me = owner();
    let token = c.grab(1, "tls", &me, 5).await;
    c.release(2, "tls", &me, token).await;
    c.expect("R 2 tls").await;
    c.send(b"P 1 \n").await;
    c.expect_error("bad_frame").await;

    // Plain text on a TLS port: no greeting in clear, just a TLS alert or a close.
    let mut plain = TcpStream::connect(&s.addr).await.unwrap();
    let _ = plain.write_all(b"AUTH x y\n").await;
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), plain.read(&mut buf)).await.unwrap().unwrap_or(0);
    assert!(!buf[..n].starts_with(b"TICKETING"), "{:?}", &buf[..n]);
}

#[tokio::test]
async fn bad_tls_files_exit_2_or_fail_clearly() {
    let (code, err) = run_failing(&[], &["--tls-cert", "/nonexistent/cert.pem"]);
    assert_eq!(code, Some(2), "{err}");
    let empty = temp_file("");
    let (code, err) = run_failing(&[], &["--tls-cert", empty.to_str().unwrap(), "--tls-key", empty.to_str().unwrap()]);
    assert_ne!(code, Some(0));
    assert!(err.contains("certificate"), "{err}");
}
