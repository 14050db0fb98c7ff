//! Tests of the configuration: sources, precedence, defaults and refusals.

use super::*;
use clap::Parser;

fn cli(args: &[&str]) -> Cli {
    let mut all = vec!["ticketing-server"];
    all.extend_from_slice(args);
    Cli::try_parse_from(all).unwrap()
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ticketing-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The opt-out, for the tests of other rules of cluster mode.
const INSECURE: &str = "--insecure-unauthenticated-peers";

#[test]
fn a_cluster_node_needs_peer_authentication() {
    let base = ["--peer-listen", "127.0.0.1:1", "--peers", "a:1,b:1,c:1"];
    let e = Config::resolve(cli(&base)).unwrap_err();
    assert_eq!(e.to_string(), format!("--peer-token-file: {PEER_AUTH_MISSING}"));
    assert!(!e.to_string().contains('\n'), "one line");
    for fix in ["--peer-token-file", "TICKETING_PEER_TOKEN", "--peer-tls-cert"] {
        assert!(e.to_string().contains(fix), "the line names {fix}: {e}");
    }
    let token = tmp("peer-auth-token", "s3cret\n");
    let with_token = [&base[..], &["--peer-token-file", token.to_str().unwrap()]].concat();
    assert!(Config::resolve(cli(&with_token)).is_ok());
    let (cert, key, ca) = (tmp("c.pem", ""), tmp("k.pem", ""), tmp("ca.pem", ""));
    let tls = ["--peer-tls-cert", cert.to_str().unwrap(), "--peer-tls-key", key.to_str().unwrap()];
    let with_tls = [&base[..], &tls, &["--peer-tls-ca", ca.to_str().unwrap()]].concat();
    assert!(Config::resolve(cli(&with_tls)).is_ok(), "mutual TLS alone authenticates the peers");
    let c = Config::resolve(cli(&[&base[..], &[INSECURE]].concat())).unwrap();
    assert!(c.insecure_unauthenticated_peers && c.peer_tokens.is_empty());
    assert!(Config::resolve(cli(&[])).is_ok(), "standalone needs no peer authentication");
}

#[test]
fn peer_byte_budgets() {
    let d = Limits::default();
    assert_eq!((d.max_peer_in_flight_bytes_per_conn, d.max_peer_in_flight_bytes), (128 << 20, 256 << 20));
    let c = Config::resolve(cli(&["--max-peer-in-flight-bytes-per-conn", "1048576"])).unwrap();
    assert_eq!(c.limits.max_peer_in_flight_bytes_per_conn, 1 << 20);
    for bad in [
        &["--max-peer-in-flight-bytes-per-conn", "1048575"][..],
        &["--max-peer-in-flight-bytes-per-conn", "536870912"],
        &["--max-peer-in-flight-bytes", "1048576"],
    ] {
        let e = Config::resolve(cli(bad)).unwrap_err();
        assert!(e.to_string().starts_with("--max-peer-in-flight-bytes"), "{bad:?}: {e}");
    }
}

#[test]
fn defaults() {
    let c = Config::resolve(cli(&[])).unwrap();
    assert_eq!(c.listen, "127.0.0.1:5225");
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.handshake_timeout, Duration::from_secs(5));
    assert!(c.is_standalone());
    assert_eq!((c.heartbeat_ms, c.election_timeout_min_ms, c.election_timeout_max_ms), (50, 1160, 1200));
}

#[test]
fn peer_count_rule() {
    for (list, ok) in [("a:1", false), ("a:1,b:1", false), ("a:1,b:1,c:1", true), ("a:1,b:1,c:1,d:1", false)] {
        let r = Config::resolve(cli(&["--peer-listen", "127.0.0.1:1", "--peers", list, INSECURE]));
        assert_eq!(r.is_ok(), ok, "{list}");
    }
    assert!(Config::resolve(cli(&["--peer-listen", "127.0.0.1:1", "--peers", "a:1,b:1,c:1,d:1,e:1", INSECURE])).is_ok());
    assert!(Config::resolve(cli(&["--peers", "a:1,b:1,c:1"])).is_err(), "cluster mode needs --peer-listen");
    assert!(Config::resolve(cli(&["--peers", "a:1,b:1,c:1,d:1,e:1,f:1"])).is_err());
    assert!(Config::resolve(cli(&["--peers", "a:1,a:1,c:1"])).is_err());
}

#[test]
fn file_keys_with_dashes_or_underscores_and_flag_wins() {
    let p = tmp(
        "c.toml",
        "max-waiters-per-key = 7\nmax_waiters = 9\nhandshake-timeout = 0.25\nlisten = \"127.0.0.1:1\"\n\
         peers = \"a:1,b:1,c:1\"\npeer-listen = \"127.0.0.1:7\"\n",
    );
    let c = Config::resolve(cli(&["--config", p.to_str().unwrap(), "--max-waiters", "3", INSECURE])).unwrap();
    assert_eq!(c.limits.max_waiters_per_key, 7);
    assert_eq!(c.limits.max_waiters, 3);
    assert_eq!(c.handshake_timeout, Duration::from_millis(250));
    assert_eq!(c.listen, "127.0.0.1:1");
    assert_eq!(c.peers.len(), 3);
    let bad = tmp("bad.toml", "no_such_key = 1\n");
    let e = Config::resolve(cli(&["--config", bad.to_str().unwrap()])).unwrap_err();
    assert!(matches!(&e, ConfigError::File { problem, .. } if problem.contains("no_such_key")), "{e}");
}

#[test]
fn file_lists_bootstrap_and_types() {
    let p = tmp("list.toml", "peers = [\"a:1\", \"b:1\", \"c:1\"]\nbootstrap = true\npeer_listen = \"127.0.0.1:7\"\n");
    let c = Config::resolve(cli(&["--config", p.to_str().unwrap(), INSECURE])).unwrap();
    assert_eq!(c.peers, ["a:1", "b:1", "c:1"]);
    assert!(c.bootstrap, "bootstrap from the file");
    let five = ["--config", p.to_str().unwrap(), "--peers", "x:1,y:1,z:1,v:1,w:1", INSECURE];
    let c = Config::resolve(cli(&five)).unwrap();
    assert_eq!(c.peers.len(), 5, "the flag beats the file");
    let bad = tmp("type.toml", "max_waiters = \"many\"\n");
    let e = Config::resolve(cli(&["--config", bad.to_str().unwrap()])).unwrap_err();
    assert!(matches!(&e, ConfigError::File { problem, .. } if problem.contains("max_waiters")), "{e}");
    let twice = tmp("twice.toml", "max-waiters = 1\nmax_waiters = 2\n");
    assert!(matches!(Config::resolve(cli(&["--config", twice.to_str().unwrap()])), Err(ConfigError::File { .. })));
    let huge = ["--config", p.to_str().unwrap(), "--max-connections", "18446744073709551615"];
    assert!(Config::resolve(cli(&huge)).is_err());
}

#[test]
fn token_file_lines() {
    let p = tmp("tokens", "  one \n\n two\n");
    let c = Config::resolve(cli(&["--client-tokens-file", p.to_str().unwrap()])).unwrap();
    assert_eq!(c.client_tokens, vec![Secret::from("one"), Secret::from("two")]);
    let p = tmp("tokens2", "zq-secret-77\n");
    let c = Config::resolve(cli(&["--client-tokens-file", p.to_str().unwrap()])).unwrap();
    let debug = format!("{c:?}");
    // Neither the text nor the bytes (as `Vec<u8>` would print them).
    assert!(!debug.contains("zq-secret") && !debug.contains("122, 113"), "{debug}");
    assert!(debug.contains("Secret(<redacted>)"), "{debug}");
    assert!(Config::resolve(cli(&["--client-tokens-file", "/nonexistent/tokens"])).is_err());
    let two = tmp("peer-two", "new\nold\n");
    let c = Config::resolve(cli(&["--peer-token-file", two.to_str().unwrap()])).unwrap();
    assert_eq!(c.peer_tokens, vec![Secret::from("new"), Secret::from("old")]);
    let three = tmp("peer-three", "a\nb\nc\n");
    assert!(Config::resolve(cli(&["--peer-token-file", three.to_str().unwrap()])).is_err());
    let none = tmp("peer-none", "\n");
    assert!(Config::resolve(cli(&["--peer-token-file", none.to_str().unwrap()])).is_err());
}

#[test]
fn bad_values_are_refused() {
    assert!(Config::resolve(cli(&["--handshake-timeout", "0"])).is_err());
    assert!(Config::resolve(cli(&["--handshake-timeout", "NaN"])).is_err());
    assert!(Config::resolve(cli(&["--tls-cert", "x"])).is_err());
    assert!(Config::resolve(cli(&["--tls-client-ca", "x"])).is_err(), "client CA without --tls-cert");
    for partial in [
        &["--peer-tls-cert", "c"][..],
        &["--peer-tls-key", "k", "--peer-tls-ca", "a"],
        &["--peer-tls-cert", "c", "--peer-tls-ca", "a"],
    ] {
        let e = Config::resolve(cli(partial)).unwrap_err();
        assert!(e.to_string().contains("all three"), "{e}");
    }
    let all = ["--peer-tls-cert", "c", "--peer-tls-key", "k", "--peer-tls-ca", "a"];
    assert_eq!(Config::resolve(cli(&all)).unwrap().peer_tls_ca, Some(PathBuf::from("a")));
    assert!(Config::resolve(cli(&["--advertise", "a b"])).is_err());
    assert!(matches!(
        Config::resolve(cli(&["--listen", "nonsense"])),
        Err(ConfigError::Invalid { setting: "--listen", .. })
    ));
    assert!(Config::resolve(cli(&["--election-timeout-min-ms", "2000"])).is_err());
    assert!(Config::resolve(cli(&["--max-connections", "18446744073709551615"])).is_err());
    assert!(Config::resolve(cli(&["--max-pending-per-conn", "0"])).is_ok());
    assert!(Config::resolve(cli(&["--max-write-buffer-bytes", "100"])).is_err());
    assert!(Config::resolve(cli(&["--max-peer-connections", "0"])).is_err());
    assert!(Config::resolve(cli(&["--peer-handshake-timeout", "0"])).is_err());
    assert!(Config::resolve(cli(&["--peer-frame-timeout", "inf"])).is_err());
    let c = Config::resolve(cli(&[
        "--max-write-buffer-bytes",
        "4096",
        "--max-peer-connections",
        "3",
        "--peer-handshake-timeout",
        "0.5",
        "--peer-frame-timeout",
        "2",
    ]))
    .unwrap();
    assert_eq!((c.limits.max_write_buffer_bytes, c.limits.max_peer_connections), (4096, 3));
    assert_eq!((c.peer_handshake_timeout, c.peer_frame_timeout), (Duration::from_millis(500), Duration::from_secs(2)));
    assert!(Cli::try_parse_from(["ticketing-server", "--max-waiters", "-1"]).is_err());
    assert!(Cli::try_parse_from(["ticketing-server", "--client-token", "x"]).is_err());
}

#[test]
fn tick_ms_from_flag_and_file_and_its_range() {
    assert_eq!(Config::resolve(cli(&[])).unwrap().limits.tick_ms, 500);
    assert_eq!(Config::resolve(cli(&["--tick-ms", "120"])).unwrap().limits.tick_ms, 120);
    let p = tmp("tick.toml", "tick-ms = 250\n");
    assert_eq!(Config::resolve(cli(&["--config", p.to_str().unwrap()])).unwrap().limits.tick_ms, 250);
    for bad in ["0", "9", "60001"] {
        assert!(
            matches!(Config::resolve(cli(&["--tick-ms", bad])), Err(ConfigError::Invalid { setting: "--tick-ms", .. })),
            "{bad}"
        );
    }
}

#[test]
fn start_grace_from_flag_and_file_and_its_range() {
    assert_eq!(Config::resolve(cli(&[])).unwrap().limits.start_grace, Duration::ZERO);
    let c = Config::resolve(cli(&["--start-grace", "2.5"])).unwrap();
    assert_eq!(c.limits.start_grace, Duration::from_millis(2_500));
    assert_eq!(Config::resolve(cli(&["--start-grace", "250"])).unwrap().limits.start_grace, Duration::from_secs(250));
    let p = tmp("grace.toml", "start_grace = 30\n");
    let c = Config::resolve(cli(&["--config", p.to_str().unwrap()])).unwrap();
    assert_eq!(c.limits.start_grace, Duration::from_secs(30));
    for bad in ["-1", "250.5", "NaN", "inf"] {
        match Config::resolve(cli(&[&format!("--start-grace={bad}")])) {
            Err(e @ ConfigError::Invalid { setting: "--start-grace", .. }) => {
                assert!(e.to_string().contains("0-250"), "{e}");
            }
            other => panic!("{bad}: {other:?}"),
        }
    }
}

#[test]
fn worker_threads() {
    assert_eq!(Config::resolve(cli(&[])).unwrap().worker_threads, None, "default: tokio's, one per core");
    assert_eq!(Config::resolve(cli(&["--worker-threads", "3"])).unwrap().worker_threads, Some(3));
    for bad in ["0", "1025"] {
        let e = Config::resolve(cli(&["--worker-threads", bad])).unwrap_err();
        assert_eq!(e.to_string(), format!("--worker-threads: must be in 1-1024, got {bad}"));
    }
    let file = tmp("threads.toml", "worker_threads = 2\n");
    let c = Config::resolve(cli(&["--config", file.to_str().unwrap()])).unwrap();
    assert_eq!(c.worker_threads, Some(2));
}

#[test]
fn memory_mode_without_a_grace_beyond_loopback_is_warned_about_standalone_and_cluster() {
    let warning = |listen: &str, data_dir: bool, grace: u64, peers: &[&str]| {
        let mut c = Config { peers: peers.iter().map(|p| p.to_string()).collect(), ..Config::default() };
        c.data_dir = data_dir.then(|| PathBuf::from("/var/lib/ticketing"));
        c.limits.start_grace = Duration::from_secs(grace);
        c.restart_hazard_warning(listen.parse().unwrap())
    };
    // Standalone, memory mode, no grace: loopback is development, anything else is warned about.
    for (listen, warned) in [
        ("127.0.0.1:5225", false),
        ("127.0.0.2:5225", false),
        ("[::1]:5225", false),
        ("[::ffff:127.0.0.1]:5225", false),
        ("0.0.0.0:5225", true),
        ("[::]:5225", true),
        ("10.0.0.1:5225", true),
    ] {
        let w = warning(listen, false, 0, &[]);
        assert_eq!(w.is_some(), warned, "{listen}: {w:?}");
        if let Some(w) = w {
            let bound: std::net::SocketAddr = listen.parse().unwrap();
            assert_eq!(
                w,
                format!(
                    "memory mode (no --data-dir) listening on {bound} with --start-grace 0: after a crash and a \
                     restart this server {RESTART_HAZARD}"
                )
            );
            assert!(w.contains("--data-dir DIR") && w.contains("--start-grace to your longest lease"), "{w}");
            assert!(!w.contains('\n'), "one line");
        }
    }
    // Durable mode, or a grace: nothing to warn about, wherever it listens.
    for listen in ["0.0.0.0:5225", "127.0.0.1:5225"] {
        assert_eq!(warning(listen, true, 0, &[]), None, "durable {listen}");
        assert_eq!(warning(listen, false, 30, &[]), None, "grace {listen}");
        assert_eq!(warning(listen, true, 30, &[]), None, "durable with a grace {listen}");
    }
    // A cluster: the same rule, its peers count as reach (a cluster on one machine is development).
    let local = ["127.0.0.1:5226", "localhost:5227", "[::1]:5228"];
    let spread = ["10.0.0.1:5226", "10.0.0.2:5226", "10.0.0.3:5226"];
    let named = ["127.0.0.1:5226", "127.0.0.1:5227", "node-c:5226"];
    assert_eq!(warning("127.0.0.1:5225", false, 0, &local), None);
    let w = warning("0.0.0.0:5225", false, 0, &local).expect("a cluster node listening beyond loopback");
    assert!(w.contains("after a restart of every node this cluster") && w.contains(RESTART_HAZARD), "{w}");
    assert!(warning("127.0.0.1:5225", false, 0, &spread).is_some(), "peers on other machines");
    assert!(warning("127.0.0.1:5225", false, 0, &named).is_some(), "a host name is not loopback");
    assert_eq!(warning("0.0.0.0:5225", true, 0, &spread), None, "durable cluster");
    assert_eq!(warning("0.0.0.0:5225", false, 250, &spread), None, "cluster with a grace");
}

#[test]
fn a_restore_holds_grants_back_for_the_backups_longest_lease_unless_told_otherwise() {
    let mut s = crate::locks::LockState::new();
    let key = ticketing_proto::Key::new("k").unwrap();
    let owner = ticketing_proto::Owner::new("o").unwrap();
    s.apply(&crate::locks::Command::Grant { key, owner, lease_s: 90, micros: 1, dt: 1_000 });
    s.apply(&crate::locks::Command::Tick { dt: 31_000 });
    let file = crate::backup::encode("00", 7, &s, &s.to_snapshot(), 0);
    let dir = std::env::temp_dir().join(format!("ticketing-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("restore.backup");
    std::fs::write(&path, file).unwrap();
    let p = path.to_str().unwrap();
    let cluster = ["--peers", "a:1,b:1,c:1", "--peer-listen", "127.0.0.1:1", "--insecure-unauthenticated-peers"];
    let c = Config::resolve(cli(&[&["--bootstrap", "--restore", p][..], &cluster].concat())).unwrap();
    assert_eq!(c.limits.start_grace, Duration::from_secs(60), "the 60 s left of the 90 s lease");
    assert_eq!(c.restore.as_ref().unwrap().header.applied_index, 7);
    let c =
        Config::resolve(cli(&[&["--bootstrap", "--restore", p, "--start-grace", "0"][..], &cluster].concat())).unwrap();
    assert_eq!(c.limits.start_grace, Duration::ZERO);
    match Config::resolve(cli(&[&["--restore", p][..], &cluster].concat())) {
        Err(ConfigError::Invalid { setting: "--restore", .. }) => {}
        other => panic!("{other:?}"),
    }
}
