//! The Ticketing servers a run starts itself: the release `ticketing-server`
//! binary, standalone or a 3-node cluster, on free 127.0.0.1 ports, stopped
//! (and reaped) when the [`Servers`] value is dropped. Port choice and the
//! admin HTTP reads come from `ticketing-verify/src/cluster.rs`; there is no
//! proxy here, so `--peers` lists the nodes' real peer ports.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Free ports and admin HTTP reads are the fault suite's (one home for both).
pub use ticketing_verify::cluster::{free_port, http_get};

/// One server process.
pub struct Node {
    /// Client port.
    pub client: u16,
    /// Admin HTTP port.
    pub admin: u16,
    /// The process (None once killed).
    pub child: Option<Child>,
}

/// The servers of one run.
pub struct Servers {
    /// The nodes, in `--peers` order.
    pub nodes: Vec<Node>,
    /// How each node is started again ([`Servers::restart`]).
    launch: Launch,
}

/// What starts a node: the binary, the peer ports, the flags, the run's
/// directory and (durable mode) where the data dirs are.
struct Launch {
    bin: PathBuf,
    peer_ports: Vec<u16>,
    extra: Vec<String>,
    dir: PathBuf,
    data: Option<PathBuf>,
    starts: Vec<u32>,
}

/// The `ticketing-server` next to this binary (both come from the same
/// `cargo build --release`), unless `--server-bin` names another.
pub fn default_server_bin() -> PathBuf {
    let me = std::env::current_exe().unwrap_or_default();
    me.with_file_name("ticketing-server")
}

/// The worker threads each node of an `n`-node cluster on this machine gets:
/// its share of the cores, at least one (docs/benchmarks.md, "How the systems
/// are run"; `scripts/bench-peers` gives etcd and ZooKeeper the same).
pub fn node_threads(n: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    (cores / n.max(1)).max(1)
}

impl Servers {
    /// Starts `n` nodes (1 = standalone, 3 = a cluster bootstrapped by node
    /// 0) with `extra` flags on every node, and waits (up to 30 s) for a
    /// serving leader. `data`: durable mode, node `i` keeps `data/node<i>-data`.
    pub async fn start(
        bin: &Path,
        n: usize,
        extra: &[String],
        dir: &Path,
        data: Option<&Path>,
    ) -> anyhow::Result<Servers> {
        if !bin.exists() {
            anyhow::bail!(
                "{} not found: build it with `cargo build --release -p ticketing-server` or pass --server-bin",
                bin.display()
            );
        }
        std::fs::create_dir_all(dir)?;
        let mut nodes = Vec::new();
        let mut peer_ports = Vec::new();
        for _ in 0..n {
            nodes.push(Node { client: free_port()?, admin: free_port()?, child: None });
            peer_ports.push(free_port()?);
        }
        let launch = Launch {
            bin: bin.to_owned(),
            peer_ports,
            extra: extra.to_vec(),
            dir: dir.to_owned(),
            data: data.map(Path::to_owned),
            starts: vec![0; n],
        };
        let mut servers = Servers { nodes, launch };
        for i in 0..n {
            servers.spawn(i, i == 0)?;
        }
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            if servers.leader().await.is_some() {
                if n > 1 && !servers.all_voters().await {
                    // Not all joined yet.
                } else {
                    return Ok(servers);
                }
            }
            for (i, node) in servers.nodes.iter_mut().enumerate() {
                if let Some(c) = node.child.as_mut() {
                    if let Ok(Some(st)) = c.try_wait() {
                        anyhow::bail!("node {i} exited at start ({st}); see {}/node{i}.log", dir.display());
                    }
                }
            }
            if Instant::now() > end {
                anyhow::bail!("no serving leader with every node a voter within 30 s; logs in {}", dir.display());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Client addresses, node order.
    pub fn client_addrs(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.client)).collect()
    }

    /// Admin ports, node order.
    pub fn admin_ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.admin).collect()
    }

    /// Process ids (0 for a killed node), node order.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.child.as_ref().map_or(0, |c| c.id())).collect()
    }

    /// The serving leader's index.
    pub async fn leader(&self) -> Option<usize> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.child.is_none() {
                continue;
            }
            if let Some(s) = status(n.admin).await {
                if s["role"] == "leader" && s["serving"] == true {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Whether node `i`'s own `/status` lists it as a voter.
    async fn is_voter(&self, i: usize) -> bool {
        let Some(s) = status(self.nodes[i].admin).await else { return false };
        let me = s["node_id"].as_u64();
        s["members"].as_array().is_some_and(|ms| ms.iter().any(|m| m["id"].as_u64() == me && m["voter"] == true))
    }

    async fn all_voters(&self) -> bool {
        let Some(l) = self.leader().await else { return false };
        let Some(s) = status(self.nodes[l].admin).await else { return false };
        let voters = s["members"].as_array().map_or(0, |ms| ms.iter().filter(|m| m["voter"] == true).count());
        voters == self.nodes.len()
    }

    /// Starts node `i`'s process (node 0 bootstraps at the first start).
    fn spawn(&mut self, i: usize, bootstrap: bool) -> anyhow::Result<()> {
        let l = &mut self.launch;
        let n = l.peer_ports.len();
        let peers = l.peer_ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        l.starts[i] += 1;
        let name = if l.starts[i] == 1 { format!("node{i}.log") } else { format!("node{i}-{}.log", l.starts[i]) };
        let log = std::fs::File::create(l.dir.join(name))?;
        let node = &self.nodes[i];
        let spec = ticketing_testkit::NodeArgs {
            client: node.client,
            advertise: None,
            peer: l.peer_ports[i],
            admin: node.admin,
            peers: if n > 1 { &peers } else { "" },
            bootstrap,
        };
        let mut cmd = ticketing_testkit::node_command(&l.bin, &spec, log);
        // Warnings only, unless TICKETING_BENCH_SERVER_LOG asks for more (an
        // election's votes are logged at info by openraft).
        let filter = std::env::var("TICKETING_BENCH_SERVER_LOG").unwrap_or_else(|_| "warn".to_owned());
        cmd.args(&l.extra).env("RUST_LOG", filter);
        if let Some(d) = &l.data {
            cmd.arg("--data-dir").arg(d.join(format!("node{i}-data")));
        }
        if n > 1 {
            cmd.arg("--worker-threads").arg(node_threads(n).to_string());
        }
        let child = cmd.spawn().map_err(|e| anyhow::anyhow!("cannot start {}: {e}", l.bin.display()))?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// Starts the killed node `i` again (memory mode: a new node that
    /// replaces it; durable: on its data dir) and waits (up to 30 s) until
    /// a leader serves with every node a voter.
    pub async fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.spawn(i, false)?;
        let end = Instant::now() + Duration::from_secs(30);
        // The old member still counts as a voter until the new one replaces
        // it: wait for the restarted node itself.
        while !(self.is_voter(i).await && self.all_voters().await) {
            if Instant::now() > end {
                anyhow::bail!("node {i} restarted but not every node a voter within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// `kill -9` of node `i` (reaped).
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
                let end = Instant::now() + Duration::from_secs(5);
                while Instant::now() < end && c.try_wait().ok().flatten().is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Resident set size of process `pid` in bytes (from `/proc/PID/status`).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// `/status` of the admin port, parsed (None if not reachable within 1 s).
pub async fn status(port: u16) -> Option<serde_json::Value> {
    serde_json::from_str(&http_get(port, "/status").await?).ok()
}

/// A gauge from the admin `/metrics` text (`name value`).
pub async fn metric(port: u16, name: &str) -> Option<f64> {
    ticketing_testkit::sample(&http_get(port, "/metrics").await?, name)
}
