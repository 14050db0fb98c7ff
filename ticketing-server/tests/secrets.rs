//! docs/configuration.md, "Secrets": with trace logging on, no client or peer
//! token appears in any log line, in /status, in /metrics, or in an error
//! message — after good and bad handshakes on the client and the peer port.

mod cluster_common;
mod common;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use ticketing_proto::auth::{mac, nonce, Label};
use ticketing_proto::Hex32;

const CLIENT_TOKEN: &str = "cl1ent-T0KEN-file-5e3d91";
const CLIENT_ENV_TOKEN: &str = "cl1ent-T0KEN-env-a07c22";
const PEER_TOKEN: &str = "p33r-T0KEN-44b1f0";

/// A server process whose stderr (the log) goes to a file; killed on drop.
struct Logged {
    child: Child,
    log: PathBuf,
    client: String,
}

impl Logged {
    fn start(name: &str, env: &[(&str, &str)], args: &[String]) -> Logged {
        let log = cluster_common::log_dir().join(format!("secrets-{name}.log"));
        let mut cmd = Command::new(cluster_common::BIN);
        for (k, _) in std::env::vars() {
            if k.starts_with("TICKETING_") {
                cmd.env_remove(k);
            }
        }
        cmd.args(["--listen", "127.0.0.1:0"]).args(args).envs(env.iter().copied());
        cmd.env("RUST_LOG", "trace");
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(std::fs::File::create(&log).unwrap());
        let mut child = cmd.spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let client = line.trim_end().strip_prefix("ticketing-server listening on ").expect(&line).to_owned();
        std::thread::spawn(move || for _ in out.lines() {});
        Logged { child, log, client }
    }

    /// Stops the process and returns its whole log.
    fn stop(mut self) -> String {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.log).unwrap()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every form a token could leak in: as text, and as the hex of its bytes.
fn assert_absent(what: &str, text: &str, tokens: &[&str]) {
    for t in tokens {
        for form in [t.to_string(), hex::encode(t.as_bytes())] {
            if let Some(line) = text.lines().find(|l| l.contains(&form)) {
                panic!("{what} holds a token: {line}");
            }
        }
    }
}

/// A client-port handshake with `token`: the server's answer line.
fn client_handshake(addr: &str, token: &str) -> String {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut greeting = String::new();
    r.read_line(&mut greeting).unwrap();
    let snonce = Hex32::parse(greeting.trim_end().strip_prefix("TICKETING 1 ").unwrap().as_bytes()).unwrap();
    let cnonce = nonce(&mut rand_core::OsRng);
    let cmac = mac(token.as_bytes(), Label::Client, &snonce, &cnonce);
    w.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), cmac.to_hex_string()).as_bytes()).unwrap();
    let mut answer = String::new();
    r.read_line(&mut answer).unwrap();
    // A request after OK, so its handling is logged too.
    if answer.starts_with("OK") {
        w.write_all(b"P 1\n").unwrap();
        let mut l = String::new();
        while !l.starts_with("P 1") {
            l.clear();
            if r.read_line(&mut l).unwrap_or(0) == 0 {
                break;
            }
        }
    }
    answer
}

#[test]
fn client_tokens_never_leak() {
    let file = common::temp_file(&format!("{CLIENT_TOKEN}\n"));
    let admin = cluster_common::free_port();
    let s = Logged::start(
        "client",
        &[("TICKETING_CLIENT_TOKENS", CLIENT_ENV_TOKEN)],
        &[
            "--client-tokens-file".into(),
            file.display().to_string(),
            "--admin-listen".into(),
            format!("127.0.0.1:{admin}"),
        ],
    );
    let tokens = [CLIENT_TOKEN, CLIENT_ENV_TOKEN];
    assert!(client_handshake(&s.client, CLIENT_TOKEN).starts_with("OK leader "));
    assert!(client_handshake(&s.client, CLIENT_ENV_TOKEN).starts_with("OK leader "));
    assert_eq!(client_handshake(&s.client, "not-the-token"), "E auth_failed\n");
    // A token differing in its last byte only.
    assert_eq!(
        client_handshake(&s.client, &format!("{}X", &CLIENT_TOKEN[..CLIENT_TOKEN.len() - 1])),
        "E auth_failed\n"
    );
    for path in ["/status", "/metrics", "/healthz"] {
        let body = cluster_common::http_get(admin, path).unwrap_or_else(|| panic!("GET {path}"));
        assert_absent(path, &body, &tokens);
    }
    let log = s.stop();
    assert!(log.contains("authenticated"), "trace logging was not captured:\n{log}");
    assert!(log.contains("auth failed"), "the failed handshake was not logged:\n{log}");
    assert_absent("the log", &log, &tokens);

    // Error messages: a bad token file names the file, never its content.
    let (code, stderr) = common::run_failing(&[], &["--peer-token-file", file.to_str().unwrap(), "--peers", "a:1"]);
    assert_eq!(code, Some(2));
    assert_absent("a configuration error", &stderr, &tokens);
    // One line, or two during a rotation: three is an error that must not quote them.
    let two = common::temp_file(&format!("{PEER_TOKEN}\n{CLIENT_TOKEN}\n{PEER_TOKEN}-third\n"));
    let (code, stderr) = common::run_failing(
        &[],
        &[
            "--peer-token-file",
            two.to_str().unwrap(),
            "--peers",
            "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3",
            "--peer-listen",
            "127.0.0.1:1",
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("must hold one token line"), "{stderr}");
    assert_absent("a configuration error", &stderr, &[PEER_TOKEN, CLIENT_TOKEN]);
}

#[test]
fn the_peer_token_never_leaks() {
    let peer_ports: Vec<u16> = (0..3).map(|_| cluster_common::free_port()).collect();
    let admins: Vec<u16> = (0..3).map(|_| cluster_common::free_port()).collect();
    let peers = peer_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
    let nodes: Vec<Logged> = (0..3)
        .map(|i| {
            let mut args = vec![
                "--peers".to_owned(),
                peers.clone(),
                "--peer-listen".to_owned(),
                format!("127.0.0.1:{}", peer_ports[i]),
                "--admin-listen".to_owned(),
                format!("127.0.0.1:{}", admins[i]),
            ];
            if i == 0 {
                args.push("--bootstrap".to_owned());
            }
            Logged::start(&format!("peer{i}"), &[("TICKETING_PEER_TOKEN", PEER_TOKEN)], &args)
        })
        .collect();
    // The cluster forms with the right token: every node joins the domain
    // (over authenticated peer connections) and one serves.
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        let st: Vec<_> = admins.iter().map(|a| cluster_common::status(*a)).collect();
        let joined = st.iter().all(|s| s.as_ref().is_some_and(|s| s["domain"].is_string()));
        let serving = st.iter().position(|s| s.as_ref().is_some_and(|s| s["serving"] == true));
        if let (true, Some(i)) = (joined, serving) {
            break i;
        }
        assert!(Instant::now() < deadline, "the cluster did not form: {st:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // A peer with a wrong token is refused.
    let s = TcpStream::connect(("127.0.0.1", peer_ports[leader])).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut greeting = String::new();
    r.read_line(&mut greeting).unwrap();
    let snonce = Hex32::parse(greeting.trim_end().strip_prefix("TICKETING-PEER 3 ").unwrap().as_bytes()).unwrap();
    let cnonce = nonce(&mut rand_core::OsRng);
    let bad = mac(b"wrong-peer-token", Label::PeerClient, &snonce, &cnonce);
    w.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), bad.to_hex_string()).as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "E auth_failed\n");
    // Clients are served (Raft traffic flows), then every surface is checked.
    assert!(client_handshake(&nodes[leader].client, "").starts_with("OK leader "));
    for a in &admins {
        for path in ["/status", "/metrics"] {
            if let Some(body) = cluster_common::http_get(*a, path) {
                assert_absent(path, &body, &[PEER_TOKEN]);
            }
        }
    }
    let mut all = String::new();
    for n in nodes {
        all.push_str(&n.stop());
    }
    assert!(all.contains("joined a new fencing domain"), "peer logging was not captured");
    assert!(all.contains("auth_failed"), "the refused peer was not logged");
    assert_absent("the logs", &all, &[PEER_TOKEN]);
}
