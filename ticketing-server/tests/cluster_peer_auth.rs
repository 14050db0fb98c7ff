//! docs/security.md, "Peer authentication": a cluster node with neither a
//! peer token nor peer mutual TLS does not start (exit 2, one line naming
//! the fix); `--insecure-unauthenticated-peers` starts it, with a warning in
//! the log, and its peer port then authenticates nobody.

mod cluster_common;
mod common;
use cluster_common::{free_port, log_dir, peer_closed, peer_connect, BIN, PEER_TOKEN};
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn cluster_args(peer_ports: &[u16]) -> Vec<String> {
    let peers = peer_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    vec!["--peers".into(), peers, "--peer-listen".into(), format!("127.0.0.1:{}", peer_ports[0])]
}

#[test]
fn a_node_without_peer_authentication_exits_2_with_one_line() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let args = cluster_args(&ports);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    for extra_env in [&[][..], &[("TICKETING_PEER_TOKEN", "  ")][..]] {
        let (code, err) = common::run_failing(extra_env, &args);
        assert_eq!(code, Some(2), "{err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "one line: {err:?}");
        for fix in ["--peer-token-file", "TICKETING_PEER_TOKEN", "--peer-tls-cert"] {
            assert!(lines[0].contains(fix), "the line names {fix}: {err:?}");
        }
    }
    // With a token it starts (the same addresses).
    let s = common::Server::with(&[("TICKETING_PEER_TOKEN", PEER_TOKEN)], &args);
    drop(s);
}

#[test]
fn the_opt_out_starts_warns_and_authenticates_nobody() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    for start in 1..=2 {
        let log = log_dir().join(format!("peer-auth-opt-out-{start}.log"));
        let mut cmd = Command::new(BIN);
        for (k, _) in std::env::vars() {
            if k.starts_with("TICKETING_") {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd
            .args(["--listen", "127.0.0.1:0", "--insecure-unauthenticated-peers"])
            .args(cluster_args(&ports))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // Every start warns.
        let deadline = Instant::now() + Duration::from_secs(20);
        let text = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("cluster node started") || Instant::now() > deadline {
                break text;
            }
            assert!(child.try_wait().unwrap().is_none(), "the node exited: {text}");
            std::thread::sleep(Duration::from_millis(50));
        };
        let warning = text.lines().find(|l| l.contains("--insecure-unauthenticated-peers"));
        assert!(warning.is_some_and(|l| l.contains("WARN")), "start {start}: no warning in {text}");
        // What the warning says is true: a dialer that knows no token is accepted.
        let (mut s, mut r, _snonce) = peer_connect(ports[0]);
        s.write_all(format!("AUTH {} {}\n", "11".repeat(32), "00".repeat(32)).as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("OK "), "{line:?}");
        drop((s, r));
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_node_with_a_token_refuses_the_empty_key() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let args = cluster_args(&ports);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _s = common::Server::with(&[("TICKETING_PEER_TOKEN", PEER_TOKEN)], &args);
    let (mut s, mut r, snonce) = peer_connect(ports[0]);
    let cnonce = ticketing_proto::auth::nonce(&mut rand_core::OsRng);
    let empty_key = ticketing_proto::auth::mac(b"", ticketing_proto::auth::Label::PeerClient, &snonce, &cnonce);
    s.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), empty_key.to_hex_string()).as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "E auth_failed\n");
    assert!(peer_closed(&mut r));
}
