//! Test harness: the real `ticketing-server` binary on 127.0.0.1:0 and a
//! raw line-protocol client that checks every byte (`ticketing_testkit::line`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use ticketing_proto::auth;
use tokio::net::TcpStream;

/// The raw line client (one home: `ticketing_testkit::line`).
#[allow(unused_imports)]
pub use ticketing_testkit::line::{parse_grant, Client, LINE_TIMEOUT};

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
