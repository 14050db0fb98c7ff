//! A cluster of real `ticketing-server` processes on loopback whose peer
//! traffic crosses the proxies of [`crate::proxy::Net`].
//!
//! How a node finds itself among `--peers` (docs/deployment.md): its
//! `--peer-listen` is its real port, which is NOT in `--peers`; `--peers`
//! lists the proxies. The node then finds its own entry by dialing the
//! entries and recognizing its NodeId in the handshake (that dial crosses
//! its own proxy, the link `i → i`, which no fault touches). No server
//! change is needed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::proxy::Net;
use ticketing_testkit::faultfs::FaultFs;

pub use ticketing_testkit::PEER_TOKEN;

/// A free loopback port below the kernel's ephemeral range
/// ([`ticketing_testkit::try_free_port`]).
pub fn free_port() -> anyhow::Result<u16> {
    ticketing_testkit::try_free_port().ok_or_else(|| anyhow::anyhow!("no free loopback port below 32000"))
}

/// One node slot: fixed addresses, the current process.
pub struct Node {
    /// Client port.
    pub client: u16,
    /// Real peer port (`--peer-listen`).
    pub peer: u16,
    /// Admin HTTP port.
    pub admin: u16,
    /// The running process.
    pub child: Option<Child>,
    /// Starts so far (names the log files).
    pub starts: u32,
    /// Durable mode: which data dir the node runs on (a node removed from
    /// the membership comes back as a new node on a new, empty one).
    pub generation: u32,
    /// The server binary its next start runs (the run's, or the earlier
    /// release's until a rolling upgrade reaches this node).
    pub bin: PathBuf,
}

/// The cluster.
pub struct Cluster {
    /// Node slots.
    pub nodes: Vec<Node>,
    /// The run's server binary (what a rolling upgrade installs).
    pub bin: PathBuf,
    /// The proxies of the peer links.
    pub net: Net,
    /// The proxies between the clients and each node's client port (what
    /// the nodes advertise, so redirects lead through them too).
    pub clients: Net,
    dir: PathBuf,
    /// Durable mode: node `i` runs with `--data-dir <run dir>/node<i>-data`,
    /// or on its faultfs mount ([`Cluster::mount_disks`]).
    pub durable: bool,
    /// Durable mode: each node's disk, a faultfs mount that loses what was
    /// not fsynced on a power cut (ticketing-testkit/faultfs); empty when
    /// the data dirs are plain directories.
    pub disks: Vec<FaultFs>,
    /// Flags for every start of every node (the run's principals).
    pub args: Vec<String>,
    /// Extra flags for the next starts (a fault's; cleared after it).
    pub extra: Vec<String>,
}

impl Cluster {
    /// Allocates addresses and starts the proxies (no node runs yet).
    pub async fn new(n: usize, bin: &Path, dir: &Path, seed: u64) -> anyhow::Result<Cluster> {
        let mut nodes = Vec::new();
        for _ in 0..n {
            nodes.push(Node {
                client: free_port()?,
                peer: free_port()?,
                admin: free_port()?,
                child: None,
                starts: 0,
                generation: 0,
                bin: bin.to_owned(),
            });
        }
        let targets: Vec<SocketAddr> = nodes.iter().map(|n| SocketAddr::from(([127, 0, 0, 1], n.peer))).collect();
        let net = Net::start(targets, seed).await?;
        let client_targets: Vec<SocketAddr> =
            nodes.iter().map(|n| SocketAddr::from(([127, 0, 0, 1], n.client))).collect();
        let clients = Net::start_clients(client_targets, seed ^ 0x5eed).await?;
        Ok(Cluster {
            nodes,
            net,
            clients,
            bin: bin.to_owned(),
            dir: dir.to_owned(),
            durable: false,
            disks: Vec::new(),
            args: Vec::new(),
            extra: Vec::new(),
        })
    }

    /// Puts every node's data dir on a faultfs mount of its own (durable
    /// mode), for the power-loss faults.
    pub fn mount_disks(&mut self) -> anyhow::Result<()> {
        for i in 0..self.nodes.len() {
            let fs = FaultFs::mount(&format!("verify-node{i}")).map_err(|e| anyhow::anyhow!(e))?;
            self.disks.push(fs);
        }
        Ok(())
    }

    /// Client addresses of all nodes, as the clients reach them: through the
    /// client proxies.
    pub fn client_addrs(&self) -> Vec<String> {
        self.clients.addrs.iter().map(|a| a.to_string()).collect()
    }

    /// Starts node `i` (memory mode: a fresh process, new NodeId; durable
    /// mode: on its data dir). A 1-node "cluster" is a standalone server.
    pub fn start(&mut self, i: usize, bootstrap: bool) -> anyhow::Result<()> {
        let peers = self.net.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
        let standalone = self.nodes.len() == 1;
        let name = match self.nodes[i].generation {
            0 => format!("node{i}-data"),
            g => format!("node{i}-data-{g}"),
        };
        let data = match self.disks.get(i) {
            Some(fs) => fs.path().join(name),
            None => self.dir.join(name),
        };
        let node = &mut self.nodes[i];
        node.starts += 1;
        let log = std::fs::File::create(self.dir.join(format!("node{}-{}.log", i, node.starts)))?;
        let advertise = self.clients.addrs[i].to_string();
        let spec = ticketing_testkit::NodeArgs {
            client: node.client,
            advertise: Some(&advertise),
            peer: node.peer,
            admin: node.admin,
            peers: if standalone { "" } else { &peers },
            bootstrap,
        };
        let mut cmd = ticketing_testkit::node_command(&node.bin, &spec, log);
        if self.durable {
            cmd.arg("--data-dir").arg(&data);
        }
        cmd.args(&self.args).args(&self.extra);
        let child = cmd.spawn().map_err(|e| anyhow::anyhow!("cannot start {}: {e}", node.bin.display()))?;
        self.net.set_pid(i, Some(child.id()));
        node.child = Some(child);
        Ok(())
    }

    /// `kill -9` of node `i`; returns once the process is gone.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.net.set_pid(i, None);
    }

    /// SIGTERM to node `i`, then waits up to 10 s (then `kill -9`).
    pub async fn stop(&mut self, i: usize) {
        if let Some(c) = &mut self.nodes[i].child {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end {
                if c.try_wait().ok().flatten().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.kill9(i);
    }

    /// SIGSTOP / SIGCONT of node `i`.
    pub fn signal(&self, i: usize, sig: Signal) {
        if let Some(c) = &self.nodes[i].child {
            let _ = kill(Pid::from_raw(c.id() as i32), sig);
        }
    }

    /// `/status` of node `i`, parsed (None if not reachable within 1 s).
    pub async fn status(&self, i: usize) -> Option<serde_json::Value> {
        self.nodes[i].child.as_ref()?;
        let body = http_get(self.nodes[i].admin, "/status").await?;
        serde_json::from_str(&body).ok()
    }

    /// Nodes whose `/status` says serving leader.
    pub async fn serving_leaders(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            if let Some(s) = self.status(i).await {
                if s["role"] == "leader" && s["serving"] == true {
                    out.push(i);
                }
            }
        }
        out
    }

    /// Waits until exactly one node is the serving leader.
    pub async fn wait_leader(&self, limit: Duration) -> Option<usize> {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            let l = self.serving_leaders().await;
            if l.len() == 1 {
                return Some(l[0]);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Waits until node `i` lists itself as a voter.
    pub async fn wait_voter(&self, i: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if let Some(s) = self.status(i).await {
                let me = s["node_id"].as_u64();
                let voter = s["members"]
                    .as_array()
                    .is_some_and(|ms| ms.iter().any(|m| m["id"].as_u64() == me && m["voter"] == true));
                if voter {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    /// Waits until node `i` follows a leader (or is the serving leader) and
    /// has applied every entry the serving leader had committed when the
    /// wait began: a restarted node is back, not only listed as a voter (a
    /// durable node lists itself from its own disk at once).
    pub async fn wait_caught_up(&self, i: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        let mut target = None;
        while Instant::now() < end {
            if target.is_none() {
                match self.serving_leaders().await.as_slice() {
                    [l] if *l == i => return true,
                    [l] => target = self.status(*l).await.and_then(|s| s["commit_index"].as_u64()),
                    _ => {}
                }
            }
            if let (Some(t), Some(s)) = (target, self.status(i).await) {
                if s["leader_id"].is_u64() && s["applied_index"].as_u64().is_some_and(|a| a >= t) {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Whether node `i` still says it serves.
    pub async fn is_serving(&self, i: usize) -> bool {
        self.status(i).await.is_some_and(|s| s["serving"] == true)
    }

    /// A `POST` of the JSON `body` to node `i`'s admin `path` (a membership
    /// change; up to 60 s): the answer's body, or an error with its status.
    pub async fn admin_post(&self, i: usize, path: &str, body: String) -> anyhow::Result<String> {
        let (port, p) = (self.nodes[i].admin, path.to_owned());
        let answer = tokio::task::spawn_blocking(move || {
            ticketing_testkit::http_post_json(port, &p, &body, Duration::from_secs(60))
        })
        .await?;
        match answer {
            Some((200, body)) => Ok(body),
            Some((code, body)) => anyhow::bail!("node {i} {path}: {code} {}", body.trim()),
            None => anyhow::bail!("node {i} {path}: no answer"),
        }
    }

    /// Kills every node.
    pub fn kill_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.signal(i, Signal::SIGCONT);
            self.kill9(i);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        self.net.shutdown();
        self.clients.shutdown();
    }
}

/// A raw HTTP/1.1 GET on 127.0.0.1:`port`; the body of a 200 answer
/// within 1 s ([`ticketing_testkit::http_get_async`]).
pub async fn http_get(port: u16, path: &str) -> Option<String> {
    ticketing_testkit::http_get_async(port, path).await
}
