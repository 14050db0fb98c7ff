//! docs/configuration.md, "Sources and precedence": flag > environment > config file > default; the peer-count rule.

mod common;
use common::*;

async fn waiters_allowed(s: &Server, key: &str) -> usize {
    let mut h = s.client().await;
    h.grab(1, key, &owner(), 30).await;
    let mut c = s.client().await;
    for i in 0..10u64 {
        c.acquire(i, key, &owner(), 30, 5).await;
        // A grant of a free key is answered after any B for the acquire before it.
        let barrier = owner();
        let bkey = format!("{key}-barrier-{i}");
        c.acquire(100 + i, &bkey, &barrier, 0, 5).await;
        let line = c.line().await;
        if line == format!("B {i} {key}") {
            return i as usize;
        }
        parse_grant(&line, 100 + i, &bkey, &barrier);
    }
    10
}

#[tokio::test]
async fn flag_beats_env_beats_file_beats_default() {
    let file = temp_file("max-waiters-per-key = 3\n");
    let f = file.to_str().unwrap();
    let s = Server::with(&[], &["--config", f]);
    assert_eq!(waiters_allowed(&s, "p").await, 3);
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "2")], &["--config", f]);
    assert_eq!(waiters_allowed(&s, "p").await, 2);
    let s = Server::with(&[("TICKETING_MAX_WAITERS_PER_KEY", "2")], &["--config", f, "--max-waiters-per-key", "1"]);
    assert_eq!(waiters_allowed(&s, "p").await, 1);
    let file = temp_file("max_waiters_per_key = 4\n");
    let s = Server::with(&[("TICKETING_CONFIG", file.to_str().unwrap())], &[]);
    assert_eq!(waiters_allowed(&s, "p").await, 4);
}

#[tokio::test]
async fn wrong_peer_counts_exit_2() {
    for peers in ["a:1", "a:1,b:1", "a:1,b:1,c:1,d:1", "a:1,b:1,c:1,d:1,e:1,f:1"] {
        let (code, err) = run_failing(&[], &["--peers", peers]);
        assert_eq!(code, Some(2), "{peers}: {err}");
        assert!(err.contains("3 or 5"), "{err}");
        let (code, _) = run_failing(&[("TICKETING_PEERS", peers)], &[]);
        assert_eq!(code, Some(2));
    }
}

#[tokio::test]
async fn bad_configuration_exits_2_with_a_message() {
    let (code, err) = run_failing(&[("TICKETING_HANDSHAKE_TIMEOUT", "soon")], &[]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run_failing(&[], &["--client-tokens-file", "/nonexistent/ticketing-tokens"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/ticketing-tokens"), "{err}");
    let file = temp_file("unknown_setting = 1\n");
    let (code, err) = run_failing(&[], &["--config", file.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown_setting"), "{err}");
    // Addresses that cannot be listened on are configuration errors too.
    for (var, addr) in [("TICKETING_LISTEN", "nonsense"), ("TICKETING_LISTEN", "127.0.0.1:99999")] {
        // Without run_failing's `--listen 127.0.0.1:0`, which would win over the variable.
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ticketing-server"))
            .env_clear()
            .env(var, addr)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > std::time::Duration::from_secs(10) {
                let _ = child.kill();
                panic!("{addr}: the server should have exited");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(status.code(), Some(2), "{addr}: {err}");
        assert!(err.contains("--listen") && err.contains(addr), "{err}");
    }
    let (code, err) = run_failing(&[], &["--admin-listen", "127.0.0.1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--admin-listen"), "{err}");
    let (code, err) = run_failing(&[], &["--peers", "a:1,b:1,c:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--peer-listen"), "{err}");
    // Tokens never go on the command line.
    let (code, _) = run_failing(&[], &["--client-tokens", "secret"]);
    assert_eq!(code, Some(2));
}

/// The runtime's worker threads of the process `pid` once there are `want`
/// (or, after 10 s, however many there are): tokio names them
/// `tokio-rt-worker`. Waited for, because the runtime starts its workers
/// while the server already serves, and a new thread takes its name only once
/// it runs.
fn worker_threads_of(pid: u32, want: usize) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .filter(|name| name.trim() == "tokio-rt-worker")
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut n = count();
    while n != want && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        n = count();
    }
    n
}

#[tokio::test]
async fn worker_threads_sets_the_runtime_threads() {
    // docs/configuration.md, "Threads": the flag, its variable, and the default of one per core.
    let s = Server::with(&[], &["--worker-threads", "3"]);
    assert_eq!(waiters_allowed(&s, "t").await, 10, "serves");
    assert_eq!(worker_threads_of(s.pid(), 3), 3);
    let s = Server::with(&[("TICKETING_WORKER_THREADS", "1")], &[]);
    assert_eq!(waiters_allowed(&s, "t").await, 10);
    assert_eq!(worker_threads_of(s.pid(), 1), 1);
    let s = Server::with(&[], &[]);
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(worker_threads_of(s.pid(), cores), cores);
    let (code, err) = run_failing(&[], &["--worker-threads", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--worker-threads: must be in 1-1024"), "{err}");
}
