//! Test harness: the real `ticketing-server` binary on 127.0.0.1:0 and a
//! raw line-protocol client that checks every byte.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use ticketing_proto::auth::{self, Label};
use ticketing_proto::Hex32;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any single expected line may take.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(5);

/// A running server process; killed on drop.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`
    pub addr: String,
}

impl Server {
    /// Defaults, auth off.
    pub fn start() -> Server {
        Server::with(&[], &[])
    }

    /// With extra environment variables and flags.
    pub fn with(env: &[(&str, &str)], args: &[&str]) -> Server {
        Server::at("127.0.0.1:0", env, args)
    }

    /// Listening on `listen` (e.g. the address of a server that was stopped,
    /// to restart it on the same port), with extra environment and flags.
    pub fn at(listen: &str, env: &[(&str, &str)], args: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ticketing-server"));
        for (k, _) in std::env::vars() {
            if k.starts_with("TICKETING_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(["--listen", listen]).args(args).envs(env.iter().copied());
        cmd.env("RUST_LOG", std::env::var("TEST_SERVER_LOG").unwrap_or_else(|_| "warn".into()));
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).stdin(Stdio::null());
        let mut child = cmd.spawn().expect("spawn ticketing-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {} // keep the pipe drained
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("server did not report its address: {:?}", child.wait());
            }
        };
        let addr = line.strip_prefix("ticketing-server listening on ").expect("ready line").to_owned();
        Server { child, addr }
    }

    /// The process id (e.g. for `kill -STOP`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let ok = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill -TERM failed");
    }

    /// Waits (bounded) for the process to exit.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < within, "server did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An authenticated client (auth off).
    pub async fn client(&self) -> Client<TcpStream> {
        Client::connect(&self.addr, b"").await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a server process with a config error and returns (exit code, stderr).
pub fn run_failing(env: &[(&str, &str)], args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ticketing-server"));
    for (k, _) in std::env::vars() {
        if k.starts_with("TICKETING_") {
            cmd.env_remove(k);
        }
    }
    cmd.args(["--listen", "127.0.0.1:0"]).args(args).envs(env.iter().copied());
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let start = std::time::Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("server should have exited");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A temporary file with `text`, unique per call.
pub fn temp_file(text: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!("ticketing-server-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("f{}", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, text).unwrap();
    path
}

/// A fresh unique owner.
pub fn owner() -> String {
    let n = auth::nonce(&mut rand_core::OsRng);
    n.to_hex_string()[..32].to_owned()
}

/// A raw line client.
pub struct Client<S> {
    stream: S,
    buf: Vec<u8>,
    /// The greeting's server nonce.
    pub snonce: Option<Hex32>,
}

impl Client<TcpStream> {
    /// Connects without reading anything.
    pub async fn raw(addr: &str) -> Client<TcpStream> {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).unwrap();
        Client { stream, buf: Vec::new(), snonce: None }
    }

    /// Connects and completes the handshake with `token` (empty = auth off),
    /// checking `OK leader <smac>` and the `L` line.
    pub async fn connect(addr: &str, token: &[u8]) -> Client<TcpStream> {
        let mut c = Client::raw(addr).await;
        c.auth(token).await.expect("handshake");
        let l = c.line().await;
        assert_eq!(l, format!("L {addr}"));
        c
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Wraps a stream (e.g. TLS).
    pub fn over(stream: S) -> Client<S> {
        Client { stream, buf: Vec::new(), snonce: None }
    }

    /// Reads and checks the greeting; returns the snonce.
    pub async fn greeting(&mut self) -> Hex32 {
        let line = self.line().await;
        let hex = line.strip_prefix("TICKETING 1 ").unwrap_or_else(|| panic!("greeting: {line:?}"));
        let snonce = Hex32::parse(hex.as_bytes()).expect("64 lowercase hex");
        self.snonce = Some(snonce);
        snonce
    }

    /// The AUTH line for `token` on this connection (after the greeting).
    pub fn auth_line(&self, token: &[u8], cnonce: &Hex32) -> String {
        let snonce = self.snonce.expect("greeting first");
        let cmac = auth::mac(token, Label::Client, &snonce, cnonce);
        format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string())
    }

    /// Greeting + AUTH; `Ok(())` when the server answered `OK leader` with a
    /// correct smac, `Err(line)` with the server's line otherwise.
    pub async fn auth(&mut self, token: &[u8]) -> Result<(), String> {
        match self.auth_role(token).await {
            Ok(role) if role == "leader" => Ok(()),
            Ok(role) => Err(format!("OK {role}")),
            Err(line) => Err(line),
        }
    }

    /// Greeting + AUTH; `Ok(role)` after `OK <role> <smac>` with a correct
    /// smac, `Err(line)` with the server's line otherwise.
    pub async fn auth_role(&mut self, token: &[u8]) -> Result<String, String> {
        let snonce = self.greeting().await;
        let cnonce = auth::nonce(&mut rand_core::OsRng);
        let line = self.auth_line(token, &cnonce);
        self.send(line.as_bytes()).await;
        let ok = self.line().await;
        let Some(rest) = ok.strip_prefix("OK ") else { return Err(ok) };
        let (role, smac) = rest.split_once(' ').expect("OK <role> <smac>");
        assert!(role == "leader" || role == "follower", "{ok}");
        let smac = Hex32::parse(smac.as_bytes()).expect("smac hex");
        assert!(auth::verify(token, Label::Server, &snonce, &cnonce, &smac), "smac does not verify");
        Ok(role.to_owned())
    }

    /// Writes bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Closes the sending side (TCP half-close: the server reads EOF).
    pub async fn shut_write(&mut self) {
        self.stream.shutdown().await.expect("shutdown");
    }

    /// Writes bytes, ignoring errors (the server may have closed).
    pub async fn send_lossy(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// The next line (without its LF) within `d`; `None` on timeout; panics on EOF.
    pub async fn line_within(&mut self, d: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            if let Some(n) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=n).collect();
                let text = String::from_utf8(line[..n].to_vec()).expect("ascii line");
                return Some(text);
            }
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return None,
                Ok(Ok(0)) => panic!("connection closed; unread {:?}", String::from_utf8_lossy(&self.buf)),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Ok(Err(e)) => panic!("read error {e}; unread {:?}", String::from_utf8_lossy(&self.buf)),
            }
        }
    }

    /// The next line within `d`; `None` on timeout, EOF or a read error (the server may die).
    pub async fn try_line_within(&mut self, d: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            if let Some(n) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=n).collect();
                return String::from_utf8(line[..n].to_vec()).ok();
            }
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// The next line; panics after [`LINE_TIMEOUT`].
    pub async fn line(&mut self) -> String {
        match self.line_within(LINE_TIMEOUT).await {
            Some(l) => l,
            None => panic!("no line within {LINE_TIMEOUT:?}"),
        }
    }

    /// Asserts the next line.
    pub async fn expect(&mut self, want: &str) {
        let got = self.line().await;
        assert_eq!(got, want);
    }

    /// Asserts that nothing arrives within `d`.
    pub async fn silent(&mut self, d: Duration) {
        if let Some(l) = self.line_within(d).await {
            panic!("unexpected line {l:?}");
        }
    }

    /// Asserts that the server closes the connection with nothing more to read.
    pub async fn expect_closed(&mut self) {
        assert!(self.buf.is_empty(), "unread data {:?}", String::from_utf8_lossy(&self.buf));
        let mut chunk = [0u8; 512];
        match tokio::time::timeout(LINE_TIMEOUT, self.stream.read(&mut chunk)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => panic!("more data: {:?}", String::from_utf8_lossy(&chunk[..n])),
            Ok(Err(e)) => panic!("closed with an error instead of a clean close: {e}"),
            Err(_) => panic!("server did not close the connection"),
        }
    }

    /// Asserts `E <code>` and then a clean close.
    pub async fn expect_error(&mut self, code: &str) {
        self.expect(&format!("E {code}")).await;
        self.expect_closed().await;
    }

    /// Sends an acquire.
    pub async fn acquire(&mut self, id: u64, key: &str, owner: &str, wait: u8, lease: u8) {
        self.send(format!("A {id} {key} {owner} {wait} {lease}\n").as_bytes()).await;
    }

    /// Sends a release.
    pub async fn release(&mut self, id: u64, key: &str, owner: &str, token: u64) {
        self.send(format!("R {id} {key} {owner} {token}\n").as_bytes()).await;
    }

    /// Reads the next line and checks it is the grant `A id key owner ...`; returns (token, waited_ms).
    pub async fn expect_grant(&mut self, id: u64, key: &str, owner: &str) -> (u64, u32) {
        let line = self.line().await;
        parse_grant(&line, id, key, owner)
    }

    /// Acquires a free key (wait 0) and returns the token.
    pub async fn grab(&mut self, id: u64, key: &str, owner: &str, lease: u8) -> u64 {
        self.acquire(id, key, owner, 0, lease).await;
        self.expect_grant(id, key, owner).await.0
    }
}

/// Checks `A id key owner token waited_ms` byte by byte and returns (token, waited_ms).
pub fn parse_grant(line: &str, id: u64, key: &str, owner: &str) -> (u64, u32) {
    let prefix = format!("A {id} {key} {owner} ");
    let rest = line.strip_prefix(&prefix).unwrap_or_else(|| panic!("expected grant {prefix}…, got {line:?}"));
    let mut parts = rest.split(' ');
    let token = parts.next().unwrap();
    let waited = parts.next().unwrap_or_else(|| panic!("no waited_ms in {line:?}"));
    assert!(parts.next().is_none(), "extra fields in {line:?}");
    for n in [token, waited] {
        assert!(!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()), "{line:?}");
        assert!(n == "0" || !n.starts_with('0'), "leading zero in {line:?}");
    }
    let token: u64 = token.parse().unwrap();
    assert!((1..(1 << 63)).contains(&token), "token range {token}");
    (token, waited.parse().unwrap())
}

/// A fresh, absent directory path for a test's `--data-dir`, unique per call.
pub fn temp_data_dir(name: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir()
        .join(format!("ticketing-server-tests-{}", std::process::id()))
        .join(format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every file under `dir` with its bytes (to show a refused DIR was left unchanged).
pub fn dir_bytes(dir: &std::path::Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p.clone());
                out.insert(p, Vec::new());
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The newest chunk file of a data dir's log (`DIR/log/r-*.wal`).
pub fn last_log_chunk(dir: &std::path::Path) -> PathBuf {
    let mut chunks: Vec<PathBuf> = std::fs::read_dir(dir.join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    chunks.sort();
    chunks.pop().expect("a log chunk")
}

impl Server {
    /// `kill -9`, and waits until the process is gone.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Client<TcpStream> {
    /// `Q` for (key, owner): `Some((token, remaining_ms))` when the owner holds the key (`H`), `None` on `N`.
    pub async fn query(&mut self, id: u64, key: &str, owner: &str) -> Option<(u64, u64)> {
        self.send(format!("Q {id} {key} {owner}\n").as_bytes()).await;
        let line = self.line().await;
        if line == format!("N {id} {key}") {
            return None;
        }
        let prefix = format!("H {id} {key} {owner} ");
        let rest = line.strip_prefix(&prefix).unwrap_or_else(|| panic!("expected H or N, got {line:?}"));
        let (token, remaining) = rest.split_once(' ').unwrap_or_else(|| panic!("bad H {line:?}"));
        Some((token.parse().unwrap(), remaining.parse().unwrap()))
    }
}
