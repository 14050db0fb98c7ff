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
