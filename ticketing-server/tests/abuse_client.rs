//! docs/configuration.md, "Limits" on the client port: many idle half-open
//! connections (slowloris) and a client that never reads its answers do not
//! delay a normal client; the half-open ones are closed by the handshake
//! timeout, the never-reader once its write buffer is full; both are counted
//! in /metrics.

mod cluster_common;
mod common;
use common::*;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// One normal client: connect, handshake, acquire and release; its time.
async fn normal_round_trip(addr: &str, n: u64) -> Duration {
    let start = Instant::now();
    let mut c = Client::connect(addr, b"").await;
    let me = owner();
    let key = format!("normal{n}");
    let t = c.grab(1, &key, &me, 30).await;
    c.release(2, &key, &me, t).await;
    c.expect(&format!("R 2 {key}")).await;
    start.elapsed()
}

fn metric(admin: u16, name: &str) -> Option<u64> {
    ticketing_testkit::metric(admin, name).map(|v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_does_not_delay_a_normal_client() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--handshake-timeout", "8", "--admin-listen", &format!("127.0.0.1:{admin}")]);
    // Open up to 1 000 connections that never send AUTH, in small batches
    // (this sandbox refuses bursts of new loopback connections).
    let mut idle = Vec::new();
    let started = Instant::now();
    let mut refused = 0;
    for _batch in 0..50 {
        for _ in 0..20 {
            match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(&s.addr)).await {
                Ok(Ok(c)) => idle.push(c),
                _ => refused += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        if started.elapsed() > Duration::from_secs(3) {
            break; // keep well inside the handshake timeout
        }
    }
    let opened = idle.len();
    eprintln!("slowloris: {opened} half-open connections open ({refused} refused) in {:?}", started.elapsed());
    assert!(opened >= 100, "the machine allowed only {opened} connections");
    // A normal client is served while they are all still open.
    let mut worst = Duration::ZERO;
    for n in 0..5 {
        worst = worst.max(normal_round_trip(&s.addr, n).await);
    }
    let still_open_after = started.elapsed();
    eprintln!("slowloris: normal client served, slowest of 5 round trips {worst:?}");
    assert!(still_open_after < Duration::from_secs(8), "the probe ran after the timeout: {still_open_after:?}");
    // Every half-open connection is closed: pushed out by newer ones (at
    // most --max-preauth-per-address stay, docs/security.md,
    // "Unauthenticated connections"), or by the handshake timeout.
    let last = idle.pop().expect("opened");
    let mut c = Client::over(last);
    c.greeting().await;
    match c.line_within(Duration::from_secs(15)).await {
        Some(l) => assert_eq!(l, "E handshake_timeout"),
        None => panic!("no E handshake_timeout"),
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut counted = 0;
    while Instant::now() < deadline {
        counted = tokio::task::spawn_blocking(move || {
            ["ticketing_client_handshake_timeouts_total", "ticketing_client_preauth_evicted_total"]
                .iter()
                .map(|m| metric(admin, m).unwrap_or(0))
                .sum::<u64>()
        })
        .await
        .unwrap();
        if counted >= opened as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(counted >= opened as u64, "{counted} handshake timeouts and evictions counted, {opened} opened");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_closed_without_stalling_others() {
    let admin = cluster_common::free_port();
    let s = Server::with(&[], &["--max-write-buffer-bytes", "65536", "--admin-listen", &format!("127.0.0.1:{admin}")]);
    let mut stream = handshake_only(&s.addr).await;
    // Pings, never reading the pongs, until the server closes (bounded: 256 MiB, 60 s).
    let flood = tokio::spawn(async move {
        let mut batch = Vec::new();
        for id in 1..=2000u64 {
            batch.extend_from_slice(format!("P {id}\n").as_bytes());
        }
        let start = Instant::now();
        let mut sent = 0usize;
        while sent < 256 << 20 && start.elapsed() < Duration::from_secs(60) {
            match tokio::time::timeout(Duration::from_secs(15), stream.write_all(&batch)).await {
                Ok(Ok(())) => sent += batch.len(),
                Ok(Err(_)) => return Some(sent),
                // Blocked: the server stopped reading without closing.
                Err(_) => return None,
            }
        }
        None
    });
    // Meanwhile normal clients are served.
    for n in 0..5 {
        let took = normal_round_trip(&s.addr, n).await;
        // Only a hang bound: served at all while the flood is on.
        assert!(took < Duration::from_secs(60), "normal client took {took:?}");
    }
    let sent = flood.await.unwrap().expect("the never-reading client was not closed");
    eprintln!("never-reader: closed after {} KiB of pings", sent / 1024);
    let overflows =
        tokio::task::spawn_blocking(move || metric(admin, "ticketing_write_buffer_overflows_total")).await.unwrap();
    assert_eq!(overflows, Some(1));
    // And the server still serves.
    normal_round_trip(&s.addr, 99).await;
}

/// Connects and sends AUTH (auth off: any MAC is accepted); reads only the greeting.
async fn handshake_only(addr: &str) -> TcpStream {
    use tokio::io::AsyncReadExt;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut greeting = Vec::new();
    let mut byte = [0u8; 1];
    while greeting.last() != Some(&b'\n') && greeting.len() < 512 {
        assert_eq!(stream.read(&mut byte).await.unwrap(), 1, "greeting");
        greeting.push(byte[0]);
    }
    let cnonce = ticketing_proto::auth::nonce(&mut rand_core::OsRng);
    let cmac = ticketing_proto::auth::mac(b"", ticketing_proto::auth::Label::Client, &cnonce, &cnonce);
    stream.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string()).as_bytes()).await.unwrap();
    stream
}

/// `--max-total-write-buffer-bytes`: answers left unread by all clients
/// together are bounded too. Each connection's own limit (64 MiB here) is
/// never reached: the total (1 MiB) closes the client that does not read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_of_unread_answers_is_bounded() {
    let admin = cluster_common::free_port();
    let s = Server::with(
        &[],
        &[
            "--max-write-buffer-bytes",
            "67108864",
            "--max-total-write-buffer-bytes",
            "1048576",
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ],
    );
    let mut stream = handshake_only(&s.addr).await;
    let mut batch = Vec::new();
    for id in 1..=2000u64 {
        batch.extend_from_slice(format!("P {id}\n").as_bytes());
    }
    // Pings, never reading the pongs: at most 32 MiB (half the connection's
    // own limit) or 60 s.
    let start = Instant::now();
    let mut sent = 0usize;
    let closed = loop {
        if sent >= 32 << 20 || start.elapsed() > Duration::from_secs(60) {
            break false;
        }
        match tokio::time::timeout(Duration::from_secs(15), stream.write_all(&batch)).await {
            Ok(Ok(())) => sent += batch.len(),
            Ok(Err(_)) => break true,
            Err(_) => break false,
        }
    };
    assert!(closed, "not closed after {} KiB of pings", sent / 1024);
    let overflows =
        tokio::task::spawn_blocking(move || metric(admin, "ticketing_write_buffer_overflows_total")).await.unwrap();
    assert_eq!(overflows, Some(1));
    normal_round_trip(&s.addr, 7).await;
}
