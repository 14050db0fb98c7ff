//! The admin port's token (docs/security.md, "The admin port"): with
//! `--admin-token-file`, every path but `/healthz` and `/readyz` answers
//! 401 without `Authorization: Bearer <token>` (or with a wrong one) and 200
//! with any token of the file (the console's pages and scripts load
//! without it and send it with their reads); a file with no token is refused at start and
//! kept out on SIGHUP.

mod common;
use common::*;
/// The `ticketing locks` command's reads of the admin port (the CLI binary
/// is built by its own crate; its exit codes are tested there).
#[path = "../../ticketing-client/src/cli_admin.rs"]
#[allow(dead_code)]
mod cli_admin;
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

/// `ticketing locks --admin-token-file F`: the holder table with any token
/// of the file; without one or with a wrong one, an auth failure (exit 80).
#[tokio::test]
async fn the_cli_admin_command_sends_the_admin_token() {
    let (_server, admin, _file) = start("old-admin-token\nnew-admin-token\n");
    let at = format!("127.0.0.1:{admin}");
    for token in ["old-admin-token", "new-admin-token"] {
        match cli_admin::fetch(&at, "k", Some(token), None).await {
            Ok(v) => assert!(cli_admin::table("k", &v).contains("holder       none"), "{v}"),
            Err(_) => panic!("ticketing locks with {token} failed"),
        }
    }
    for token in [None, Some("wrong")] {
        match cli_admin::fetch(&at, "k", token, None).await {
            Err(cli_admin::Failure::AuthFailed(m)) => assert!(m.contains(&at), "{m}"),
            _ => panic!("ticketing locks with {token:?} was not refused"),
        }
    }
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
    // `ticketing locks --admin-ca CA --admin-token-file F` over HTTPS.
    let ca = cli_admin::tls(&cert).unwrap();
    let at = format!("localhost:{admin}");
    let v = match cli_admin::fetch(&at, "k", Some("tls-admin-token"), Some(&ca)).await {
        Ok(v) => v,
        Err(_) => panic!("ticketing locks over HTTPS with the token failed"),
    };
    assert!(cli_admin::table("k", &v).contains("holder       none"), "{v}");
    assert!(matches!(cli_admin::fetch(&at, "k", None, Some(&ca)).await, Err(cli_admin::Failure::AuthFailed(_))));
    assert!(matches!(
        cli_admin::fetch(&at, "k", Some("tls-admin-token"), None).await,
        Err(cli_admin::Failure::Unavailable(_))
    ));
}

/// The value of a counter in the admin port's `/metrics` (0 if absent).
fn counter(admin: u16, bearer: Option<&str>, name: &str) -> u64 {
    http_get_bearer(admin, "/metrics", bearer)
        .and_then(|(_, m)| {
            m.lines().find(|l| l.starts_with(&format!("{name} "))).and_then(|l| l.rsplit(' ').next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// Whether the server closed `s` (or reset it) without an HTTP answer, read
/// with a bound that only catches a hang.
fn closed_without_answer(mut s: std::net::TcpStream) -> bool {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => out.is_empty(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// Idle connections (no request head yet) hold places of the admin port's
/// unauthenticated budget, an eighth of `--admin-max-connections` from one
/// address: a newer one pushes the oldest out (counted), so however many
/// are opened, a request with the token is served at once.
#[test]
fn idle_connections_never_keep_the_admin_token_out() {
    let tokens = temp_file("flood-admin-token\n");
    let (_server, admin) = start_with(&["--admin-token-file", tokens.to_str().unwrap()]);
    // The default 64 slots: 8 idle ones from one address at most.
    let mut idle = std::collections::VecDeque::new();
    for _ in 0..40 {
        idle.push_back(std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap());
        if idle.len() > 8 {
            assert!(closed_without_answer(idle.pop_front().unwrap()), "the oldest idle connection stayed open");
        }
    }
    assert_eq!(code(admin, "/status", Some("flood-admin-token")), 200);
    let evicted = counter(admin, Some("flood-admin-token"), "ticketing_admin_preauth_evicted_total");
    assert!(evicted >= 33, "evictions counted: {evicted}");
    assert_eq!(counter(admin, Some("flood-admin-token"), "ticketing_admin_connections_refused_total"), 0);
    drop(idle);
}

/// A connection that sends half a request head is closed by the header
/// timeout (10 s; the wait is bounded only to catch a hang).
#[test]
fn a_slow_request_head_is_closed() {
    use std::io::Write;
    let (_server, admin) = start_with(&[]);
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", admin)).unwrap();
    slow.write_all(b"GET /healthz HT").unwrap();
    assert!(closed_without_answer(slow), "the slow connection got an answer or was not closed");
}

#[test]
fn admin_max_connections_below_8_is_refused_at_start() {
    let (code, err) = run_failing(&[], &["--admin-listen", "127.0.0.1:0", "--admin-max-connections", "4"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--admin-max-connections") && err.contains("must be in 8-"), "{err}");
}
