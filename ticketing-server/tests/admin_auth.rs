//! The admin port's token (docs/security.md, "The admin port"): with
//! `--admin-token-file`, every path but `/healthz` and `/readyz` answers
//! 401 without `Authorization: Bearer <token>` (or with a wrong one) and 200
//! with any token of the file (the console's pages and scripts load
//! without it and send it with their reads); a file with no token is refused at start and
//! kept out on SIGHUP.

mod common;
use common::*;
use std::time::{Duration, Instant};
use ticketing_testkit::http_get_bearer;

const GUARDED: [&str; 5] = ["/status", "/metrics", "/locks/k", "/ui/api/series", "/ui/api/locks/k"];

fn start(tokens: &str) -> (Server, u16, std::path::PathBuf) {
    let file = temp_file(tokens);
    let admin = ticketing_testkit::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let server = Server::with(&[], &["--admin-listen", &admin_addr, "--admin-token-file", file.to_str().unwrap()]);
    // The admin port binds after the client port: wait for its probe.
    let end = Instant::now() + Duration::from_secs(10);
    while code(admin, "/healthz", None) != 200 {
        assert!(Instant::now() < end, "the admin port did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, admin, file)
}

fn code(admin: u16, path: &str, bearer: Option<&str>) -> u16 {
    http_get_bearer(admin, path, bearer).map_or(0, |(c, _)| c)
}

#[test]
fn every_path_but_the_probes_needs_the_token() {
    let (_server, admin, _file) = start("old-admin-token\nnew-admin-token\n");
    for path in GUARDED {
        assert_eq!(code(admin, path, None), 401, "{path} without a token");
        assert_eq!(code(admin, path, Some("wrong")), 401, "{path} with a wrong token");
        assert_eq!(code(admin, path, Some("old-admin-token")), 200, "{path} with the first token");
        assert_eq!(code(admin, path, Some("new-admin-token")), 200, "{path} with the second token");
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(code(admin, path, None), 200, "{path} needs no token");
    }
    // The console's pages and scripts hold no data: they load, then ask for the token.
    for path in ["/ui/", "/ui/locks", "/ui/static/common.js"] {
        assert_eq!(code(admin, path, None), 200, "{path} is a console asset");
    }
    let (_, body) = http_get_bearer(admin, "/status", None).unwrap();
    assert!(body.contains("Bearer"), "the 401 says what is needed: {body}");
}

#[test]
fn an_empty_admin_token_file_is_refused_at_start() {
    let path = temp_file("\n \n");
    let (code, err) =
        run_failing(&[], &["--admin-listen", "127.0.0.1:0", "--admin-token-file", path.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--admin-token-file") && err.contains("holds no token"), "{err}");
}

#[tokio::test]
async fn a_reload_rotates_the_token_and_an_empty_file_keeps_the_old_one() {
    let (server, admin, file) = start("first\n");
    let hup = || {
        let ok = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().unwrap();
        assert!(ok.success());
    };
    // Rotated: the new token works once the reload is done, the old one no more.
    std::fs::write(&file, "second\n").unwrap();
    hup();
    let end = Instant::now() + Duration::from_secs(10);
    while code(admin, "/status", Some("second")) != 200 {
        assert!(Instant::now() < end, "the new admin token was not loaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code(admin, "/status", Some("first")), 401);
    // Emptied: the reload fails, the token stays, no token still gets 401.
    let failed = |admin| {
        http_get_bearer(admin, "/metrics", Some("second"))
            .and_then(|(_, m)| {
                m.lines()
                    .find(|l| l.starts_with("ticketing_reloads_total{result=\"failed\"}"))
                    .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    let before = failed(admin);
    std::fs::write(&file, "").unwrap();
    hup();
    while failed(admin) <= before {
        assert!(Instant::now() < end, "the reload was not counted as failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(code(admin, "/status", Some("second")), 200);
    assert_eq!(code(admin, "/status", None), 401);
}

fn start_with(args: &[&str]) -> (Server, u16) {
    let admin = ticketing_testkit::free_port();
    let admin_addr = format!("127.0.0.1:{admin}");
    let mut all = vec!["--admin-listen", admin_addr.as_str()];
    all.extend_from_slice(args);
    let server = Server::with(&[], &all);
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", admin)).is_err() {
        assert!(Instant::now() < end, "the admin port did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, admin)
}

/// `--admin-tls-cert`/`--admin-tls-key`: the admin port speaks HTTPS, with
/// the token inside; plain HTTP gets no answer.
#[tokio::test]
async fn the_admin_port_over_tls() {
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::{self, pki_types::ServerName, RootCertStore};
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = temp_file(&ck.cert.pem());
    let key = temp_file(&ck.key_pair.serialize_pem());
    let tokens = temp_file("tls-admin-token\n");
    let (_server, admin) = start_with(&[
        "--admin-tls-cert",
        cert.to_str().unwrap(),
        "--admin-tls-key",
        key.to_str().unwrap(),
        "--admin-token-file",
        tokens.to_str().unwrap(),
    ]);
    let mut roots = RootCertStore::empty();
    roots.add(ck.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let get = |path: &'static str, bearer: Option<&'static str>| {
        let connector = connector.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", admin)).await.unwrap();
            let mut tls = connector.connect(ServerName::try_from("localhost").unwrap(), tcp).await.unwrap();
            let auth = bearer.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
            let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
            tls.write_all(req.as_bytes()).await.unwrap();
            let mut out = Vec::new();
            let _ = tls.read_to_end(&mut out).await;
            String::from_utf8_lossy(&out).into_owned()
        }
    };
    assert!(get("/healthz", None).await.starts_with("HTTP/1.1 200"));
    assert!(get("/status", None).await.starts_with("HTTP/1.1 401"));
    assert!(get("/status", Some("tls-admin-token")).await.starts_with("HTTP/1.1 200"));
    // Plain HTTP on the TLS admin port: no HTTP answer.
    assert_eq!(code(admin, "/healthz", None), 0);
}

/// `--admin-max-connections`: idle connections beyond the cap are closed at
/// once and counted; a connection that sends half a request head is closed
/// by the header timeout; once the idle ones go, the port serves again.
#[test]
fn admin_connections_are_capped_and_slow_ones_closed() {
    use std::io::{Read, Write};
    let (_server, admin) = start_with(&["--admin-max-connections", "8"]);
    // A quarter of the cap from one address: 2 idle connections fill it.
    let idle: Vec<std::net::TcpStream> =
        (0..2).map(|_| std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap()).collect();
    let mut third = std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap();
    third.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = third.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut buf = [0u8; 64];
    assert!(matches!(third.read(&mut buf), Ok(0) | Err(_)), "a connection over the cap was served");
    drop(idle);
    let end = Instant::now() + Duration::from_secs(10);
    while code(admin, "/healthz", None) != 200 {
        assert!(Instant::now() < end, "the admin port did not serve once the idle connections closed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused = http_get_bearer(admin, "/metrics", None)
        .and_then(|(_, m)| {
            m.lines()
                .find(|l| l.starts_with("ticketing_admin_connections_refused_total "))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    assert!(refused >= 1, "refused connections counted: {refused}");
    // Half a request head: closed by the header timeout (bounded only to catch a hang).
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    slow.write_all(b"GET /healthz HT").unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    assert!(started.elapsed() < Duration::from_secs(30), "the slow connection was not closed");
    assert!(!String::from_utf8_lossy(&rest).contains("200 OK"), "{}", String::from_utf8_lossy(&rest));
}
