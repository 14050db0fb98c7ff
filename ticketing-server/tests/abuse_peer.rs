//! docs/configuration.md, "Limits" on the peer port: the connection limit
//! (`E overloaded`), the peer handshake timeout, and a peer that sends an
//! oversized or an endless frame is closed; each is counted in /metrics.

mod cluster_common;
mod common;
use cluster_common::{peer_authed, peer_closed, peer_connect};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// A cluster-mode node (no bootstrap: it waits to join, its peer port
/// serves) with the given extra flags; (server, peer port, admin port).
fn node(extra: &[&str]) -> (common::Server, u16, u16) {
    let ports: Vec<u16> = (0..3).map(|_| cluster_common::free_port()).collect();
    let admin = cluster_common::free_port();
    let peers = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let mut args = vec![
        "--peers".to_owned(),
        peers,
        "--peer-listen".to_owned(),
        format!("127.0.0.1:{}", ports[0]),
        "--admin-listen".to_owned(),
        format!("127.0.0.1:{admin}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = common::Server::with(&[("TICKETING_PEER_TOKEN", cluster_common::PEER_TOKEN)], &args);
    (s, ports[0], admin)
}

fn metric(admin: u16, name: &str) -> Option<u64> {
    ticketing_testkit::metric(admin, name).map(|v| v as u64)
}

/// Waits (bounded) until the metric reaches `want`; its last value.
fn metric_reaches(admin: u16, name: &str, want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = metric(admin, name).unwrap_or(0);
        if v >= want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn peer_connection_limit() {
    let (_s, port, admin) = node(&["--max-peer-connections", "2"]);
    // Authenticated: unauthenticated ones hold at most half of the slots
    // (and push each other out), docs/security.md, "Unauthenticated connections".
    let a = peer_authed(port);
    let b = peer_authed(port);
    // The third gets `E overloaded` and is closed.
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "E overloaded\n");
    assert!(peer_closed(&mut r));
    assert_eq!(metric_reaches(admin, "ticketing_peer_connections_refused_total", 1), 1);
    assert_eq!(metric(admin, "ticketing_peer_connections"), Some(2));
    // A slot frees when a connection closes.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, "ticketing_peer_connections") != Some(1) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _d = peer_authed(port);
    drop(b);
}

#[test]
fn peer_handshake_timeout() {
    let (_s, port, admin) = node(&["--peer-handshake-timeout", "0.5"]);
    let (_w, mut r, _) = peer_connect(port);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "E handshake_timeout\n");
    assert!(peer_closed(&mut r));
    assert_eq!(metric_reaches(admin, "ticketing_peer_handshake_timeouts_total", 1), 1);
}

#[test]
fn oversized_and_endless_frames_close_the_peer() {
    let (_s, port, admin) = node(&["--peer-frame-timeout", "1"]);
    // A length prefix over 16 MiB: closed at once, nothing allocated.
    let (mut s, mut r) = peer_authed(port);
    s.write_all(&(16 * 1024 * 1024 + 1u32).to_be_bytes()).unwrap();
    assert!(peer_closed(&mut r), "an oversized frame must close the connection");
    // A frame that never ends (1000 bytes announced, 3 sent): closed by --peer-frame-timeout.
    let (mut s, mut r) = peer_authed(port);
    s.write_all(&1000u32.to_be_bytes()).unwrap();
    s.write_all(b"{\"v").unwrap();
    let start = Instant::now();
    assert!(peer_closed(&mut r), "an endless frame must close the connection");
    assert!(start.elapsed() >= Duration::from_millis(500), "closed before the frame timeout: {:?}", start.elapsed());
    // An idle authenticated peer (no frame started) stays open.
    let (_s2, mut r2) = peer_authed(port);
    r2.get_ref().set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    assert!(!peer_closed(&mut r2), "an idle peer connection must stay open");
    assert_eq!(metric_reaches(admin, "ticketing_peer_bad_frames_total", 2), 2);
}

/// Announces a frame of `len` body bytes and sends one of them: the frame is
/// started (its bytes count against the budgets) and never finishes.
fn start_frame(s: &mut TcpStream, len: u32) {
    s.write_all(&len.to_be_bytes()).unwrap();
    s.write_all(b"x").unwrap();
}

#[test]
fn a_frame_over_the_connection_budget_closes_the_peer() {
    let (_s, port, admin) = node(&["--max-peer-in-flight-bytes-per-conn", "1048576"]);
    // Within the budget: the started frame is waited for.
    let (mut ok, mut ok_r) = peer_authed(port);
    start_frame(&mut ok, 1024 * 1024);
    // Over it: closed before the body is read, logged and counted.
    let (mut s, mut r) = peer_authed(port);
    start_frame(&mut s, 1024 * 1024 + 1);
    assert!(peer_closed(&mut r), "a frame over --max-peer-in-flight-bytes-per-conn must close the connection");
    assert_eq!(metric_reaches(admin, "ticketing_peer_budget_closed_total", 1), 1);
    ok_r.get_ref().set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    assert!(!peer_closed(&mut ok_r), "a frame within the budget is not refused");
    assert_eq!(metric(admin, "ticketing_peer_bad_frames_total"), Some(0), "a budget close is not a bad frame");
}

#[test]
fn frames_over_the_node_budget_close_the_peer_that_crossed_it() {
    let mib = 1024 * 1024;
    let (_s, port, admin) = node(&[
        "--max-peer-in-flight-bytes-per-conn",
        &(12 * mib).to_string(),
        "--max-peer-in-flight-bytes",
        &(16 * mib).to_string(),
    ]);
    // 10 MiB started on one connection: within both budgets.
    let (mut a, mut a_r) = peer_authed(port);
    start_frame(&mut a, 10 * mib as u32);
    assert_eq!(metric_reaches(admin, "ticketing_peer_in_flight_bytes", 10 * mib as u64), 10 * mib as u64);
    // 10 MiB more on another: the node's 16 MiB are crossed, that one is closed.
    let (mut b, mut b_r) = peer_authed(port);
    start_frame(&mut b, 10 * mib as u32);
    assert!(peer_closed(&mut b_r), "crossing --max-peer-in-flight-bytes must close the connection");
    assert_eq!(metric_reaches(admin, "ticketing_peer_budget_closed_total", 1), 1);
    a_r.get_ref().set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    assert!(!peer_closed(&mut a_r), "the connection within the budget stays");
    // Once the first connection is gone its bytes leave the node's count: 10 MiB fit again.
    drop((a, a_r));
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(admin, "ticketing_peer_in_flight_bytes") != Some(0) {
        assert!(Instant::now() < deadline, "the node's count never went down");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (mut c, mut c_r) = peer_authed(port);
    start_frame(&mut c, 10 * mib as u32);
    assert_eq!(metric_reaches(admin, "ticketing_peer_in_flight_bytes", 10 * mib as u64), 10 * mib as u64);
    c_r.get_ref().set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(!peer_closed(&mut c_r));
    assert_eq!(metric(admin, "ticketing_peer_budget_closed_total"), Some(1));
}
