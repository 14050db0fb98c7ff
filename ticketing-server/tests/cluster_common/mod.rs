//! Shared helpers of the cluster tests: spawn real `ticketing-server`
//! processes on loopback, the raw line-protocol client (blocking), a raw admin HTTP GET.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_ticketing-server");

#[allow(unused_imports)]
pub use ticketing_testkit::line::blocking::{hello, Client};
pub use ticketing_testkit::{free_port, http_get, PEER_TOKEN};

pub fn log_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("ticketing-cluster-tests-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One node's fixed addresses and its current process.
pub struct Node {
    pub client: u16,
    pub peer: u16,
    pub admin: u16,
    pub child: Option<Child>,
    pub starts: u32,
    /// Extra flags for this node's next starts (TLS files, token files).
    pub args: Vec<String>,
    /// Extra environment for this node's next starts (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// Start without `--peers` (a standalone server with this slot's ports).
    pub standalone: bool,
    /// `--peers` when not every node of the cluster (a node of a cluster
    /// that grows later).
    pub peers: Option<String>,
}

impl Node {
    pub fn client_addr(&self) -> String {
        format!("127.0.0.1:{}", self.client)
    }
}

/// A cluster of real processes; every process is killed on drop.
pub struct Cluster {
    pub nodes: Vec<Node>,
    pub name: String,
}

impl Cluster {
    /// Addresses for `n` nodes; nothing started.
    pub fn new(name: &str, n: usize) -> Cluster {
        let nodes = (0..n)
            .map(|_| Node {
                client: free_port(),
                peer: free_port(),
                admin: free_port(),
                child: None,
                starts: 0,
                args: Vec::new(),
                env: Vec::new(),
                standalone: false,
                peers: None,
            })
            .collect();
        Cluster { nodes, name: name.to_owned() }
    }

    pub fn peers(&self) -> String {
        self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.peer)).collect::<Vec<_>>().join(",")
    }

    /// Starts node `i` (fresh process, new NodeId).
    pub fn start(&mut self, i: usize, bootstrap: bool) {
        let peers = self.peers();
        let node = &mut self.nodes[i];
        node.starts += 1;
        let log = log_dir().join(format!("{}-node{}-{}.log", self.name, i, node.starts));
        let spec = ticketing_testkit::NodeArgs {
            client: node.client,
            advertise: None,
            peer: node.peer,
            admin: node.admin,
            peers: if node.standalone { "" } else { node.peers.as_deref().unwrap_or(&peers) },
            bootstrap,
        };
        let mut cmd = ticketing_testkit::node_command(BIN.as_ref(), &spec, std::fs::File::create(log).unwrap());
        cmd.args(&node.args);
        cmd.envs(node.env.iter().map(|(k, v)| (k, v)));
        node.child = Some(cmd.spawn().expect("spawn ticketing-server"));
    }

    /// The log (stderr) of node `i`'s latest start.
    pub fn log(&self, i: usize) -> String {
        let path = log_dir().join(format!("{}-node{}-{}.log", self.name, i, self.nodes[i].starts));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// Sends `signal` (`HUP`, `TERM`, …) to node `i`.
    pub fn signal(&self, i: usize, signal: &str) {
        let pid = self.nodes[i].child.as_ref().expect("node running").id();
        let ok = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().unwrap().success();
        assert!(ok, "kill -{signal} {pid}");
    }

    /// Waits until exactly one running node's admin `/status` says `serving`; its index.
    pub fn wait_serving(&self, limit: Duration) -> Option<usize> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            let serving: Vec<usize> = (0..self.nodes.len())
                .filter(|&i| self.nodes[i].child.is_some())
                .filter(|&i| status(self.nodes[i].admin).is_some_and(|s| s["serving"] == true))
                .collect();
            if serving.len() == 1 {
                return Some(serving[0]);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Starts every node, node 0 with `--bootstrap`.
    pub fn start_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.start(i, i == 0);
        }
    }

    /// `kill -9` of node `i`; returns when the process is gone.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The exit status of node `i` if it has exited.
    pub fn try_exit(&mut self, i: usize) -> Option<ExitStatus> {
        self.nodes[i].child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// Indexes of the nodes that answer the handshake with `OK leader`.
    pub fn leaders(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .filter(|&i| hello(self.nodes[i].client).map(|h| h.ok.starts_with("OK leader")).unwrap_or(false))
            .collect()
    }

    /// Waits until exactly one node says `OK leader`; its index.
    pub fn wait_leader(&self, limit: Duration) -> Option<usize> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            let l = self.leaders();
            if l.len() == 1 {
                return Some(l[0]);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Waits until node `i`'s admin `/status` lists it as a voter.
    pub fn wait_voter(&self, i: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(s) = status(self.nodes[i].admin) {
                let me = s["node_id"].as_u64();
                let voter = s["members"]
                    .as_array()
                    .map(|ms| ms.iter().any(|m| m["id"].as_u64() == me && m["voter"].as_bool() == Some(true)))
                    .unwrap_or(false);
                if voter {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}

/// `GET /status` on an admin port, parsed.
pub fn status(port: u16) -> Option<serde_json::Value> {
    let body = http_get(port, "/status")?;
    serde_json::from_str(&body).ok()
}

/// Parses `A <id> <key> <owner> <token> <waited_ms>` → token.
pub fn granted_token(line: &str) -> Option<u64> {
    let f: Vec<&str> = line.split(' ').collect();
    if f.len() == 6 && f[0] == "A" {
        f[4].parse().ok()
    } else {
        None
    }
}

/// Acquire on a fresh connection to `port`: the answer line (or the handshake's failure).
pub fn acquire_once(port: u16, key: &str, owner: &str, wait: u32, lease: u32) -> String {
    match hello(port) {
        Ok(mut c) if c.ok.starts_with("OK ") => {
            if c.send(&format!("A 1 {key} {owner} {wait} {lease}")).is_err() {
                return String::new();
            }
            c.answer(Duration::from_secs(u64::from(wait) + 5)).unwrap_or_default()
        }
        Ok(c) => c.ok,
        Err(_) => String::new(),
    }
}

/// `s` seconds.
pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `m` milliseconds.
pub fn ms(m: u64) -> Duration {
    Duration::from_millis(m)
}

/// Awaits `fut`, failing the test after `limit` (no test ever hangs).
pub async fn within<T>(limit: Duration, what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what}: no result within {limit:?}"),
    }
}

// ----- raw peer-port clients (the peer protocol's handshake, docs/cluster-protocol.md §1) -----

/// Connects (retrying while the peer port comes up) and reads the greeting.
pub fn peer_connect(port: u16) -> (TcpStream, BufReader<TcpStream>, ticketing_proto::Hex32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("peer port: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut greeting = String::new();
    r.read_line(&mut greeting).unwrap();
    let snonce = greeting.trim_end().strip_prefix("TICKETING-PEER 3 ").unwrap_or_else(|| panic!("{greeting:?}"));
    (s, r, ticketing_proto::Hex32::parse(snonce.as_bytes()).unwrap())
}

/// A peer link opened with the peer token [`PEER_TOKEN`]: the socket, its
/// reader, and the frame tags of both directions (docs/cluster-protocol.md,
/// "Frame integrity").
pub struct PeerLink {
    pub s: TcpStream,
    pub r: BufReader<TcpStream>,
    /// Seals the frames this side sends.
    pub send: ticketing_proto::auth::FrameMac,
    /// Opens the frames the node sends.
    pub recv: ticketing_proto::auth::FrameMac,
}

impl PeerLink {
    /// Sends `env` as one tagged frame.
    pub fn send(&mut self, env: &ticketing_server::cluster::wire::Envelope) {
        let bytes = self.sealed(env);
        self.s.write_all(&bytes).unwrap();
    }

    /// The bytes of `env` as the next tagged frame (counted as sent).
    pub fn sealed(&mut self, env: &ticketing_server::cluster::wire::Envelope) -> Vec<u8> {
        let mut bytes = ticketing_server::cluster::wire::encode(env).unwrap();
        ticketing_server::cluster::wire::seal(&mut bytes, 0, Some(&mut self.send));
        bytes
    }

    /// Reads one tagged frame; panics if its tag is wrong.
    pub fn read(&mut self) -> ticketing_server::cluster::wire::Envelope {
        let mut frame = vec![0u8; 4];
        self.r.read_exact(&mut frame).unwrap();
        let n = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        frame.resize(4 + n, 0);
        self.r.read_exact(&mut frame[4..]).unwrap();
        let mut tag = [0u8; ticketing_proto::auth::FRAME_TAG_LEN];
        self.r.read_exact(&mut tag).unwrap();
        assert!(self.recv.open(&frame, &tag), "the node's frame has a bad tag");
        ticketing_server::cluster::wire::decode_body(&frame[4..]).unwrap()
    }
}

/// Connects and completes the handshake with the peer token [`PEER_TOKEN`].
pub fn peer_link(port: u16) -> PeerLink {
    let (mut s, mut r, snonce) = peer_connect(port);
    let cnonce = ticketing_proto::auth::nonce(&mut rand_core::OsRng);
    let good =
        ticketing_proto::auth::mac(PEER_TOKEN.as_bytes(), ticketing_proto::auth::Label::PeerClient, &snonce, &cnonce);
    s.write_all(format!("AUTH {} {}\n", cnonce.to_hex_string(), good.to_hex_string()).as_bytes()).unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("OK "), "{line:?}");
    let (send, recv) = ticketing_proto::auth::FrameMac::pair(PEER_TOKEN.as_bytes(), &snonce, &cnonce);
    PeerLink { s, r, send, recv }
}

/// Connects and completes the handshake with the peer token [`PEER_TOKEN`]
/// (for tests that send raw bytes: its frames would need [`peer_link`]'s tags).
pub fn peer_authed(port: u16) -> (TcpStream, BufReader<TcpStream>) {
    let link = peer_link(port);
    (link.s, link.r)
}

/// True once the server has closed the connection (EOF or reset) within the read timeout.
pub fn peer_closed(r: &mut BufReader<TcpStream>) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// A peer token file shared by a test cluster's nodes: `--peer-token-file` and its path.
pub fn peer_token_args(name: &str) -> Vec<String> {
    let path = log_dir().join(format!("{name}-peer-token"));
    std::fs::write(&path, "test-peer-token-for-durable-clusters\n").unwrap();
    vec!["--peer-token-file".into(), path.display().to_string()]
}

/// A fresh `--data-dir` path for node `i` of cluster `name`.
pub fn node_data_dir(name: &str, i: usize) -> PathBuf {
    let d = log_dir().join(format!("{name}-data{i}"));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A durable cluster of `n` nodes sharing a peer token file, node `i` on
/// the data dir `dir(i)`: started (node 0 bootstraps), a leader serving and
/// every node a voter. Returns it with the leader's index.
pub fn durable_cluster(name: &str, n: usize, dir: impl Fn(usize) -> PathBuf) -> (Cluster, usize) {
    let mut c = Cluster::new(name, n);
    let token_args = peer_token_args(name);
    for i in 0..n {
        let data = dir(i).display().to_string();
        c.nodes[i].args = token_args.iter().cloned().chain(["--data-dir".into(), data]).collect();
    }
    c.start_all();
    let leader = c.wait_serving(secs(30)).expect("a leader");
    for i in 0..n {
        assert!(c.wait_voter(i, secs(15)), "node {i} a voter");
    }
    (c, leader)
}

/// `/status` of node `i`: (node_id, domain), once it answers.
pub fn identity(c: &Cluster, i: usize, limit: Duration) -> Option<(u64, String)> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some(s) = status(c.nodes[i].admin) {
            if let (Some(id), Some(d)) = (s["node_id"].as_u64(), s["domain"].as_str()) {
                return Some((id, d.to_owned()));
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// `Q 1 key owner` on a fresh connection: the answer line.
pub fn query_once(port: u16, key: &str, owner: &str) -> String {
    match hello(port) {
        Ok(mut c) if c.ok.starts_with("OK ") => {
            if c.send(&format!("Q 1 {key} {owner}")).is_err() {
                return String::new();
            }
            c.answer(Duration::from_secs(5)).unwrap_or_default()
        }
        Ok(c) => c.ok,
        Err(_) => String::new(),
    }
}
