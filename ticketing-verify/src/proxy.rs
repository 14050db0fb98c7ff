//! The fault-injecting TCP proxy: one listener per node at the address
//! every `--peers` list names for that node, forwarding to the node's real
//! `--peer-listen`. Rules are per DIRECTED link `from → to` and apply to
//! the bytes flowing from `from` to `to` on every connection between the
//! two (requests `from` dialed, answers on connections `to` dialed).
//!
//! Who dialed: all nodes dial the same address for a node (the membership
//! stores one peer address per member), so the proxy tells dialers apart
//! by the dialing PROCESS: it finds the connection's socket inode in
//! `/proc/net/tcp` and the node process whose `/proc/<pid>/fd` holds it
//! (Linux only; every node process is a child of the run). A connection
//! that cannot be attributed (three tries) is closed and counted: it must
//! never cross a partition.
//!
//! The client proxies ([`Net::start_clients`]) stand between the workload's
//! clients and each node's client port (the nodes advertise them, so a
//! redirect leads through them too): every dialer is a client, the link
//! `clients → i` carries the requests to node `i` and `i → clients` its
//! answers (index `n` stands for the clients).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::rng::Rng;

/// What a directed link does to its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Forward at once.
    Pass,
    /// Discard everything (the connection is reset when the link heals:
    /// a stream with a hole in it is no longer a TCP stream).
    Drop,
    /// Forward each chunk after a random delay in `min..=max` ms, in order.
    Delay {
        /// Least delay.
        min_ms: u64,
        /// Greatest delay.
        max_ms: u64,
    },
    /// Delay as above, and reset the connection with probability
    /// `reset_permille`/1000 per chunk.
    Flaky {
        /// Least delay.
        min_ms: u64,
        /// Greatest delay.
        max_ms: u64,
        /// Reset chance per chunk, in 1/1000.
        reset_permille: u64,
    },
}

/// Counters of the proxy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections whose dialer was not found (forwarded untouched).
    pub unattributed: u64,
    /// Connections reset by a rule or a `reset_all`.
    pub resets: u64,
    /// Bytes discarded by `Drop`.
    pub dropped_bytes: u64,
    /// The slowest attribution of a dialer, in ms.
    pub max_attribution_ms: u64,
}

struct ConnEntry {
    from: Option<usize>,
    to: usize,
    kill: watch::Sender<bool>,
    tainted: Arc<AtomicBool>,
}

struct Inner {
    rules: Mutex<Vec<Vec<Rule>>>,
    pids: Mutex<Vec<Option<u32>>>,
    conns: Mutex<HashMap<u64, ConnEntry>>,
    next: AtomicU64,
    stats: Mutex<Stats>,
    rng: Mutex<Rng>,
    /// Client proxies: every dialer is a client (index n), no attribution.
    clients: bool,
    /// The proxies' own runtime: no blocking call of the run can stall them.
    rt: Mutex<Option<tokio::runtime::Runtime>>,
}

/// The proxies of one cluster.
#[derive(Clone)]
pub struct Net {
    inner: Arc<Inner>,
    /// The address of each node's proxy (what `--peers` lists).
    pub addrs: Vec<SocketAddr>,
}

impl Net {
    /// Binds one proxy per node on 127.0.0.1 (any free port) forwarding to
    /// `targets[i]`, and starts them on a runtime of their own (two threads),
    /// so that nothing the run blocks on can delay the peer traffic. Stop it
    /// with [`Net::shutdown`].
    pub async fn start(targets: Vec<SocketAddr>, seed: u64) -> anyhow::Result<Net> {
        Net::start_mode(targets, seed, false).await
    }

    /// The client proxies: one per node forwarding to its client port
    /// (`targets`), every dialer a client. Link `n → i` (n = the number of
    /// nodes) carries the clients' bytes to node `i`, `i → n` its answers.
    pub async fn start_clients(targets: Vec<SocketAddr>, seed: u64) -> anyhow::Result<Net> {
        Net::start_mode(targets, seed, true).await
    }

    async fn start_mode(targets: Vec<SocketAddr>, seed: u64, clients: bool) -> anyhow::Result<Net> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("verify-proxy")
            .enable_all()
            .build()?;
        let rth = rt.handle().clone();
        let n = targets.len();
        let size = if clients { n + 1 } else { n };
        let inner = Arc::new(Inner {
            rules: Mutex::new(vec![vec![Rule::Pass; size]; size]),
            pids: Mutex::new(vec![None; n]),
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            stats: Mutex::new(Stats::default()),
            rng: Mutex::new(Rng::new(seed)),
            clients,
            rt: Mutex::new(Some(rt)),
        });
        let mut addrs = Vec::new();
        for (to, target) in targets.into_iter().enumerate() {
            let std_l = std::net::TcpListener::bind("127.0.0.1:0")?;
            std_l.set_nonblocking(true)?;
            let addr = std_l.local_addr()?;
            addrs.push(addr);
            let inner = inner.clone();
            let l = {
                let _guard = rth.enter();
                TcpListener::from_std(std_l)?
            };
            rth.spawn(async move {
                loop {
                    let Ok((s, peer)) = l.accept().await else {
                        // Out of descriptors or similar: never spin.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let inner = inner.clone();
                    tokio::spawn(async move { handle(inner, s, peer, addr, to, target).await });
                }
            });
        }
        Ok(Net { inner, addrs })
    }

    /// Stops every proxy and drops its connections (idempotent).
    pub fn shutdown(&self) {
        if let Some(rt) = self.inner.rt.lock().unwrap().take() {
            rt.shutdown_background();
        }
    }

    /// Records the process of node `i` (None: not running).
    pub fn set_pid(&self, i: usize, pid: Option<u32>) {
        self.inner.pids.lock().unwrap()[i] = pid;
    }

    /// Sets the rule of the directed link `from → to`.
    pub fn set(&self, from: usize, to: usize, rule: Rule) {
        self.inner.rules.lock().unwrap()[from][to] = rule;
    }

    /// Sets every link between two different nodes.
    pub fn set_all(&self, rule: Rule) {
        let mut r = self.inner.rules.lock().unwrap();
        let n = r.len();
        for (from, row) in r.iter_mut().enumerate() {
            for (to, cell) in row.iter_mut().enumerate().take(n) {
                if from != to {
                    *cell = rule;
                }
            }
        }
    }

    /// Cuts `node` off from every other node, both directions.
    pub fn isolate(&self, node: usize) {
        let n = self.inner.rules.lock().unwrap().len();
        for other in (0..n).filter(|&o| o != node) {
            self.set(node, other, Rule::Drop);
            self.set(other, node, Rule::Drop);
        }
    }

    /// Every link back to `Pass`; connections that lost bytes are reset.
    pub fn heal(&self) {
        self.set_all(Rule::Pass);
        let conns = self.inner.conns.lock().unwrap();
        let mut resets = 0;
        for c in conns.values() {
            if c.tainted.load(Ordering::SeqCst) {
                let _ = c.kill.send(true);
                resets += 1;
            }
        }
        self.inner.stats.lock().unwrap().resets += resets;
    }

    /// Resets every proxied connection (the nodes redial).
    pub fn reset_all(&self) {
        let conns = self.inner.conns.lock().unwrap();
        for c in conns.values() {
            let _ = c.kill.send(true);
        }
        self.inner.stats.lock().unwrap().resets += conns.len() as u64;
    }

    /// Open connections per (from, to); `from` None when unattributed.
    pub fn open_links(&self) -> Vec<(Option<usize>, usize)> {
        self.inner.conns.lock().unwrap().values().map(|c| (c.from, c.to)).collect()
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        *self.inner.stats.lock().unwrap()
    }
}

async fn handle(
    inner: Arc<Inner>,
    client: TcpStream,
    peer: SocketAddr,
    local: SocketAddr,
    to: usize,
    target: SocketAddr,
) {
    let t = Instant::now();
    let mut from = inner.clients.then(|| inner.rules.lock().unwrap().len() - 1);
    for _ in 0..3 {
        if from.is_some() {
            break;
        }
        let pids = inner.pids.lock().unwrap().clone();
        from = tokio::task::spawn_blocking(move || attribute(peer.port(), local.port(), &pids)).await.ok().flatten();
        if from.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    {
        let mut s = inner.stats.lock().unwrap();
        s.max_attribution_ms = s.max_attribution_ms.max(t.elapsed().as_millis() as u64);
        s.accepted += 1;
        if from.is_none() {
            s.unattributed += 1;
        }
    }
    if from.is_none() {
        // Never let an unknown dialer through: it could cross a partition.
        // Closing looks like a flaky network to the node, which redials.
        return;
    }
    let Ok(Ok(server)) = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(target)).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let id = inner.next.fetch_add(1, Ordering::Relaxed);
    let (kill, kill_rx) = watch::channel(false);
    let tainted = Arc::new(AtomicBool::new(false));
    inner.conns.lock().unwrap().insert(id, ConnEntry { from, to, kill, tainted: tainted.clone() });
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = from.map(|f| (f, to));
    let down = from.map(|f| (to, f));
    let a = pump(inner.clone(), cr, sw, up, kill_rx.clone(), tainted.clone(), id);
    let b = pump(inner.clone(), sr, cw, down, kill_rx, tainted, id);
    let _ = tokio::join!(a, b);
    inner.conns.lock().unwrap().remove(&id);
}

/// Forwards one direction under the link's current rule.
async fn pump(
    inner: Arc<Inner>,
    mut r: OwnedReadHalf,
    w: OwnedWriteHalf,
    link: Option<(usize, usize)>,
    mut kill: watch::Receiver<bool>,
    tainted: Arc<AtomicBool>,
    id: u64,
) {
    let (tx, rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(write_side(w, rx, kill.clone()));
    let mut buf = vec![0u8; 16 * 1024];
    let mut last = Instant::now();
    loop {
        let n = tokio::select! {
            r = r.read(&mut buf) => match r { Ok(0) | Err(_) => break, Ok(n) => n },
            _ = kill.changed() => break,
        };
        let rule = link.map(|(f, t)| inner.rules.lock().unwrap()[f][t]).unwrap_or(Rule::Pass);
        let now = Instant::now();
        let at = match rule {
            Rule::Pass => now,
            Rule::Drop => {
                tainted.store(true, Ordering::SeqCst);
                inner.stats.lock().unwrap().dropped_bytes += n as u64;
                continue;
            }
            Rule::Delay { min_ms, max_ms } => {
                now + Duration::from_millis(inner.rng.lock().unwrap().range(min_ms, max_ms))
            }
            Rule::Flaky { min_ms, max_ms, reset_permille } => {
                let (reset, d) = {
                    let mut g = inner.rng.lock().unwrap();
                    (g.chance(reset_permille), g.range(min_ms, max_ms))
                };
                if reset {
                    if let Some(c) = inner.conns.lock().unwrap().get(&id) {
                        let _ = c.kill.send(true);
                    }
                    inner.stats.lock().unwrap().resets += 1;
                    break;
                }
                now + Duration::from_millis(d)
            }
        };
        last = last.max(at);
        if tx.send((last, buf[..n].to_vec())).is_err() {
            break;
        }
    }
    drop(tx);
    let _ = writer.await;
}

async fn write_side(
    mut w: OwnedWriteHalf,
    mut rx: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    mut kill: watch::Receiver<bool>,
) {
    loop {
        let item = tokio::select! {
            i = rx.recv() => i,
            _ = kill.changed() => { abort(&w); return; }
        };
        let Some((at, bytes)) = item else { break };
        tokio::select! {
            _ = tokio::time::sleep_until(at) => {}
            _ = kill.changed() => { abort(&w); return; }
        }
        tokio::select! {
            r = w.write_all(&bytes) => if r.is_err() { return },
            _ = kill.changed() => { abort(&w); return; }
        }
    }
    let _ = w.shutdown().await;
}

/// Makes the close of this socket a reset (RST), as a failing network would.
#[allow(deprecated)]
fn abort(w: &OwnedWriteHalf) {
    let _ = w.as_ref().set_linger(Some(Duration::ZERO));
}

/// Which node process dialed the connection from 127.0.0.1:`peer_port` to
/// 127.0.0.1:`proxy_port`: its socket's inode in `/proc/net/tcp`, then the
/// process holding that inode.
pub fn attribute(peer_port: u16, proxy_port: u16, pids: &[Option<u32>]) -> Option<usize> {
    use std::io::BufRead;
    // Read line by line and stop at the match: on a busy machine the table
    // holds thousands of sockets, and the kernel renders it as it is read.
    let tcp = std::io::BufReader::new(std::fs::File::open("/proc/net/tcp").ok()?);
    let port = |f: &str| f.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
    let inode = tcp.lines().skip(1).map_while(Result::ok).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && port(f[1]) == Some(peer_port) && port(f[2]) == Some(proxy_port)).then(|| f[9].to_owned())
    })?;
    let want = format!("socket:[{inode}]");
    pids.iter().enumerate().find_map(|(i, pid)| {
        let dir = std::fs::read_dir(format!("/proc/{}/fd", (*pid)?)).ok()?;
        dir.filter_map(|e| e.ok())
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
            .then_some(i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy attributes a connection to the process that dialed it,
    /// forwards under Pass, discards under Drop, resets on heal.
    #[tokio::test]
    async fn attributes_forwards_drops_and_heals() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 64];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        // Node 0 is this very process, node 1 is the echo server's side.
        let net = Net::start(vec![target, target], 1).await.unwrap();
        net.set_pid(0, Some(std::process::id()));
        let mut c = TcpStream::connect(net.addrs[1]).await.unwrap();
        let mut b = [0u8; 5];
        c.write_all(b"hello").await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut b)).await.unwrap().unwrap();
        assert_eq!(&b, b"hello");
        assert_eq!(net.open_links(), vec![(Some(0), 1)]);
        net.set(0, 1, Rule::Drop);
        c.write_all(b"lost!").await.unwrap();
        let r = tokio::time::timeout(Duration::from_millis(300), c.read(&mut b)).await;
        assert!(r.is_err(), "a dropped link delivered bytes");
        net.heal();
        let r = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b)).await.unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "a connection that lost bytes must be reset on heal: {r:?}");
        let s = net.stats();
        assert_eq!((s.accepted, s.unattributed, s.dropped_bytes), (1, 0, 5));
        assert!(s.resets >= 1);
        // A dialer that is no known node is never let through.
        net.set_pid(0, None);
        let mut c = TcpStream::connect(net.addrs[1]).await.unwrap();
        let _ = c.write_all(b"hello").await;
        let r = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b)).await.unwrap();
        assert!(matches!(r, Ok(0) | Err(_)), "an unattributed connection was forwarded: {r:?}");
        assert_eq!(net.stats().unattributed, 1);
        net.shutdown();
    }
}
