//! What the project ships is restart-safe (docs/deployment.md, "What each
//! shipped file runs"): the server run exactly as the systemd unit runs it
//! (`deploy/systemd/ticketing-server.service`'s ExecStart) with the packaged
//! configuration (`deploy/ticketing.toml`, /etc/ticketing/ticketing.toml of
//! the Debian package), killed with SIGKILL and restarted at once with the same
//! command (as `Restart=on-failure` does), never grants a key whose holder is
//! still inside its lease. Only the machine-specific values of the sample
//! change: `listen` (a free loopback port) and `data_dir` (a fresh empty
//! directory, as systemd's StateDirectory creates); every other line is the
//! sample's, byte for byte.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use ticketing_testkit::line::{parse_grant, Client};

/// How long a start may take to print its ready line, or a log line to come.
const START_TIMEOUT: Duration = Duration::from_secs(20);

fn repo_file(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The value of `Key=` in the `[Service]` section of the unit (one line each).
fn unit_value(unit: &str, key: &str) -> String {
    let prefix = format!("{key}=");
    let mut found = unit.lines().filter_map(|l| l.strip_prefix(&prefix));
    let value = found.next().unwrap_or_else(|| panic!("the unit has no {key}="));
    assert!(found.next().is_none(), "the unit sets {key}= twice");
    value.to_owned()
}

/// The sample with the string value of each uncommented `key = "…"` in
/// `values` replaced (the rest of its line kept), every other line byte for
/// byte; panics unless each key is set exactly once.
fn rewrite(sample: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rewritten = Vec::new();
    for line in sample.split_inclusive('\n') {
        let key = line.split_once('=').map(|(k, _)| k.trim()).filter(|_| !line.trim_start().starts_with('#'));
        match values.iter().find(|(k, _)| Some(*k) == key) {
            Some((k, v)) => {
                let open = line.find('"').unwrap_or_else(|| panic!("{k}: not a string value: {line:?}"));
                let close = open + 1 + line[open + 1..].find('"').unwrap_or_else(|| panic!("{k}: {line:?}"));
                out.push_str(&line[..=open]);
                out.push_str(v);
                out.push_str(&line[close..]);
                rewritten.push(*k);
            }
            None => out.push_str(line),
        }
    }
    rewritten.sort_unstable();
    let mut wanted: Vec<&str> = values.iter().map(|(k, _)| *k).collect();
    wanted.sort_unstable();
    assert_eq!(rewritten, wanted, "deploy/ticketing.toml must set each of these keys once");
    out
}

/// A server process started as the unit starts it; SIGKILLed on drop.
struct Node {
    child: Child,
    /// The server's log (stderr), line by line.
    log: Receiver<String>,
    /// What the ready line announced.
    addr: String,
}

impl Node {
    /// `program args…` with the environment of a unit (no TICKETING_*
    /// variable, no RUST_LOG: the server's default log level), waiting for
    /// the ready line on stdout.
    fn start(program: &Path, args: &[String]) -> Node {
        let mut cmd = Command::new(program);
        for (k, _) in std::env::vars() {
            if k.starts_with("TICKETING_") || k == "RUST_LOG" {
                cmd.env_remove(k);
            }
        }
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn ticketing-server");
        let (stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
        let (ready_tx, ready) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = ready_tx.send(line);
            }
            for _ in lines {} // keep the pipe drained
        });
        let (log_tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                let _ = log_tx.send(line);
            }
        });
        let mut node = Node { child, log, addr: String::new() };
        let line = match ready.recv_timeout(START_TIMEOUT) {
            Ok(line) => line,
            Err(_) => panic!("no ready line within {START_TIMEOUT:?}: {:?}", node.child.try_wait()),
        };
        node.addr =
            line.strip_prefix("ticketing-server listening on ").unwrap_or_else(|| panic!("{line:?}")).to_owned();
        node
    }

    /// Waits (bounded) for a log line containing every one of `parts`.
    fn expect_log(&self, parts: &[&str]) -> String {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if parts.iter().all(|p| line.contains(p)) => return line,
                Ok(_) => {}
                Err(e) => panic!("no log line with {parts:?}: {e}"),
            }
        }
    }

    /// SIGKILL, and waits until the process is gone.
    fn kill9(mut self) {
        self.child.kill().expect("SIGKILL");
        let status = self.child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "{status}");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn the_packaged_config_under_the_unit_keeps_a_held_key_across_a_kill_9_and_a_restart() {
    // The unit: what it runs, and that systemd restarts it after a SIGKILL.
    let unit = repo_file("deploy/systemd/ticketing-server.service");
    let exec: Vec<String> = unit_value(&unit, "ExecStart").split_whitespace().map(str::to_owned).collect();
    assert_eq!(exec[0], "/usr/bin/ticketing-server", "{exec:?}");
    assert_eq!(unit_value(&unit, "Restart"), "on-failure", "a SIGKILL is a failure: systemd restarts the server");
    let restart_sec: u64 = unit_value(&unit, "RestartSec").parse().expect("RestartSec= in seconds");

    // The packaged config with its machine-specific values rewritten.
    let base = std::env::temp_dir().join(format!("ticketing-packaged-config-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let data = base.join("var-lib-ticketing");
    std::fs::create_dir_all(&data).unwrap(); // empty, as StateDirectory= leaves it
    let port = ticketing_testkit::free_port();
    let listen = format!("127.0.0.1:{port}");
    let sample = repo_file("deploy/ticketing.toml");
    let config = rewrite(&sample, &[("listen", &listen), ("data_dir", data.to_str().unwrap())]);
    let changed = sample.lines().zip(config.lines()).filter(|(a, b)| a != b).count();
    assert_eq!((sample.lines().count(), changed), (config.lines().count(), 2), "only listen and data_dir change");
    let config_path = base.join("ticketing.toml");
    std::fs::write(&config_path, &config).unwrap();

    // ExecStart's arguments, the packaged config's path replaced by ours.
    let args: Vec<String> = exec[1..]
        .iter()
        .map(
            |a| if a == "/etc/ticketing/ticketing.toml" { config_path.to_str().unwrap().to_owned() } else { a.clone() },
        )
        .collect();
    assert!(
        args.iter().any(|a| Path::new(a) == config_path),
        "ExecStart names /etc/ticketing/ticketing.toml: {exec:?}"
    );
    let program = PathBuf::from(env!("CARGO_BIN_EXE_ticketing-server"));

    let node = Node::start(&program, &args);
    assert_eq!(node.addr, listen);
    node.expect_log(&["durable mode: data dir open", data.to_str().unwrap()]);
    let mut a = Client::connect(&node.addr, b"").await;
    a.send(b"A 1 seat-1 owner-1 0 60\n").await;
    let (first, _) = parse_grant(&a.line().await, 1, "seat-1", "owner-1");

    // Killed, and started again at once with the same command (systemd waits
    // RestartSec, well inside the holder's 60 s lease).
    assert!(restart_sec < 60, "RestartSec={restart_sec}: the restart this test covers comes inside the lease");
    node.kill9();
    let node = Node::start(&program, &args);
    assert_eq!(node.addr, listen);

    let mut b = Client::connect(&node.addr, b"").await;
    b.send(b"Q 1 seat-1 owner-1\n").await;
    let held = b.line().await;
    let rest = held.strip_prefix(&format!("H 1 seat-1 owner-1 {first} ")).unwrap_or_else(|| {
        panic!("the holder must still hold seat-1 with token {first} after the restart, got {held:?}")
    });
    let remaining: u64 = rest.parse().unwrap_or_else(|_| panic!("remaining ms: {held:?}"));
    assert!(remaining > 40_000 && remaining <= 60_000, "the lease end is kept: {remaining} ms left");
    b.send(b"A 2 seat-1 owner-2 0 60\n").await;
    b.expect("T 2 seat-1").await;
    b.send(b"A 3 seat-2 owner-3 0 60\n").await;
    let (second, _) = parse_grant(&b.line().await, 3, "seat-2", "owner-3");
    assert!(second > first, "tokens keep increasing across the restart: {first} then {second}");

    drop((a, b, node));
    std::fs::remove_dir_all(&base).unwrap();
}
