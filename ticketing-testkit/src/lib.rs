//! One home for the test infrastructure that launches, watches and talks to
//! real `ticketing-server` processes on loopback: used by the server's
//! integration tests (`ticketing-server/tests/common`, `cluster_common`),
//! the client's tests (the PKI), the fault suite (`ticketing-verify`) and
//! the benchmark (`ticketing-bench`).
//!
//! - [`free_port`]: a free loopback port below the ephemeral range;
//! - [`node_command`]: the command line of one node (standalone or cluster
//!   mode), with the test peer token [`PEER_TOKEN`];
//! - [`http_get`] / [`http_get_async`] / [`http_get_any`]: a raw admin HTTP GET;
//! - [`Pki`]: the test CA and its node and client certificates;
//! - [`line`]: the raw line-protocol client of the wire tests;
//! - [`faultfs`]: a FUSE file system that simulates power loss and disk
//!   faults (unsynced writes lost, failing fsync/write) under a durable
//!   server's data dir (`faultfs/README.md`).

#![forbid(unsafe_code)]

pub mod faultfs;
pub mod line;
mod pki;
pub use pki::{pki, Pki};

use std::fs::File;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The peer token of every test cluster (`TICKETING_PEER_TOKEN`): a
/// cluster node refuses to start without peer authentication
/// (docs/security.md, "Peer authentication"). A node's own
/// `--peer-token-file` takes precedence over it.
pub const PEER_TOKEN: &str = "ticketing-tests-peer-token";

/// A free loopback port below the kernel's ephemeral range (32768+), so an
/// outgoing connection of a running node cannot take it between this check
/// and the node's bind. Distinct within a process; spread by process id
/// across processes. `None` when none of 12 000 candidates is free.
pub fn try_free_port() -> Option<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let base = 20_000 + (std::process::id() % 100) * 120;
    for _ in 0..12_000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = base + n % 12_000;
        let port = if port >= 32_000 { port - 12_000 } else { port } as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Some(port);
        }
    }
    None
}

/// [`try_free_port`], panicking when there is none (tests only).
pub fn free_port() -> u16 {
    try_free_port().expect("no free loopback port below 32000")
}

/// The addresses of one node.
#[derive(Debug, Clone)]
pub struct NodeArgs<'a> {
    /// Client port (`--listen`, and `--advertise` unless `advertise` is set, on 127.0.0.1).
    pub client: u16,
    /// `--advertise` instead of the client port (e.g. a proxy in front of it).
    pub advertise: Option<&'a str>,
    /// Real peer port (`--peer-listen`); ignored when `peers` is empty.
    pub peer: u16,
    /// Admin HTTP port (`--admin-listen`).
    pub admin: u16,
    /// `--peers` (comma separated); empty = standalone.
    pub peers: &'a str,
    /// `--bootstrap`.
    pub bootstrap: bool,
}

/// The command that starts one node: its addresses on 127.0.0.1,
/// `RUST_LOG=info` (callers may override), no client tokens, the peer token
/// [`PEER_TOKEN`], stdin and stdout closed, stderr (the log) into `log`.
/// Add further flags with `.args(…)` before spawning.
pub fn node_command(bin: &Path, a: &NodeArgs<'_>, log: File) -> Command {
    let mut cmd = Command::new(bin);
    cmd.arg("--listen")
        .arg(format!("127.0.0.1:{}", a.client))
        .arg("--advertise")
        .arg(a.advertise.map_or_else(|| format!("127.0.0.1:{}", a.client), str::to_owned));
    if !a.peers.is_empty() {
        cmd.arg("--peer-listen").arg(format!("127.0.0.1:{}", a.peer)).arg("--peers").arg(a.peers);
        if a.bootstrap {
            cmd.arg("--bootstrap");
        }
    }
    cmd.arg("--admin-listen")
        .arg(format!("127.0.0.1:{}", a.admin))
        .env("RUST_LOG", "info")
        .env_remove("TICKETING_CLIENT_TOKENS")
        .env("TICKETING_PEER_TOKEN", PEER_TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    cmd
}

/// The request of every GET here.
fn request(path: &str) -> String {
    request_with(path, None)
}

/// A `GET` of `path`, with `Authorization: Bearer <token>` when given.
fn request_with(path: &str, bearer: Option<&str>) -> String {
    let auth = bearer.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n")
}

/// (status code, body) of a whole HTTP/1.1 answer.
fn parse_answer(raw: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let code = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some((code, body.to_owned()))
}

/// A raw HTTP/1.1 GET on 127.0.0.1:`port` (1 s to connect, 3 s to answer):
/// (status code, body) whatever the status; `None` if no answer.
pub fn http_get_any(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_bearer(port, path, None)
}

/// The value of the sample `name` (its full name with any labels, as the
/// Prometheus text of `/metrics` prints it) in `text`.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The sample `name` of the `/metrics` of the admin port `admin` on
/// 127.0.0.1 ([`sample`]); `None` when there is no answer or no such sample.
pub fn metric(admin: u16, name: &str) -> Option<f64> {
    sample(&http_get(admin, "/metrics")?, name)
}

/// [`http_get_any`] with `Authorization: Bearer <token>` when given (an
/// admin port with an admin token).
pub fn http_get_bearer(port: u16, path: &str, bearer: Option<&str>) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    s.write_all(request_with(path, bearer).as_bytes()).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    parse_answer(&out)
}

/// A raw HTTP/1.1 `POST` of the JSON `body` to `path` on 127.0.0.1:`port`
/// (1 s to connect, `limit` to answer): (status code, body); `None` if no
/// answer.
pub fn http_post_json(port: u16, path: &str, body: &str, limit: Duration) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(limit)).ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    s.write_all(format!("{head}Connection: close\r\n\r\n{body}").as_bytes()).ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).ok()?;
    parse_answer(&out)
}

/// [`http_get_any`]: the body of a 200 answer.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    http_get_any(port, path).and_then(|(code, body)| (code == 200).then_some(body))
}

/// [`http_get`] for async code: the body of a 200 answer within 1 s.
pub async fn http_get_async(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(request(path).as_bytes()).await.ok()?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.ok()?;
        parse_answer(&out)
    };
    match tokio::time::timeout(Duration::from_secs(1), fut).await {
        Ok(Some((200, body))) => Some(body),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_with_any_status() {
        assert_eq!(parse_answer(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n{}"), Some((200, "{}".into())));
        assert_eq!(parse_answer(b"HTTP/1.1 503 Service Unavailable\r\n\r\nno"), Some((503, "no".into())));
        assert_eq!(parse_answer(b"HTTP/1.1 200 OK\r\n"), None, "no end of the head");
        assert_eq!(parse_answer(b"garbage\r\n\r\n"), None);
    }

    #[test]
    fn ports_are_free_and_distinct() {
        let (a, b) = (free_port(), free_port());
        assert_ne!(a, b);
        assert!(a < 32_000 && b < 32_000);
    }
}
