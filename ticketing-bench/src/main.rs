//! `ticketing-bench`: workloads W1–W7 against Ticketing (standalone or a
//! 3-node cluster the bench starts itself from the release
//! `ticketing-server`), and W1–W3 against etcd, ZooKeeper and Redis through
//! the adapters of feature `peers` (scripts/bench-peers starts those).
//! One line per run: `system=… workload=… ops_s=… p50_us=… p99_us=… …`.
//! docs/benchmarks.md describes every field.

mod grants;
mod holds;
mod procs;
mod stats;
mod system;
mod w4;
mod w7;
mod workloads;

#[cfg(feature = "peers")]
mod peers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use ticketing_client::TicketBroker;

use crate::procs::Servers;
use crate::system::{Backend, GrantAll, MultiLock, Ticketing};
use crate::workloads::{Killer, Report};

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum SystemArg {
    /// A 3-node Ticketing cluster (started by the bench).
    Ticketing,
    /// One standalone Ticketing server (started by the bench).
    TicketingStandalone,
    /// etcd v3 lock API with a lease (feature `peers`; `--endpoints`).
    Etcd,
    /// ZooKeeper ephemeral-sequential lock recipe (feature `peers`; `--endpoints`).
    Zookeeper,
    /// Redis `SET NX PX` + compare-and-delete (feature `peers`; `--endpoints`).
    Redis,
    /// Test only: a broken lock that grants every acquire (the smoke shows
    /// the duplicate-grant check catches it).
    #[value(hide = true)]
    TestGrantAll,
    /// Test only: multi-key locks taken one key at a time in the order
    /// given, which deadlock (the smoke shows W6's stall detector sees it).
    #[value(hide = true)]
    TestMultilock,
}

impl SystemArg {
    fn name(self) -> &'static str {
        match self {
            SystemArg::Ticketing => "ticketing",
            SystemArg::TicketingStandalone => "ticketing-standalone",
            SystemArg::Etcd => "etcd",
            SystemArg::Zookeeper => "zookeeper",
            SystemArg::Redis => "redis",
            SystemArg::TestGrantAll => "test-grant-all",
            SystemArg::TestMultilock => "test-multilock",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Failover {
    /// The server defaults (heartbeat 50 ms, election timeout 1160–1200 ms).
    Default,
    /// Heartbeat 50 ms, election timeout 200–250 ms (docs/benchmarks.md, "Fast failover profile").
    Fast,
}

/// Benchmark workloads for Ticketing and its peers (docs/benchmarks.md).
#[derive(Parser, Debug)]
#[command(name = "ticketing-bench", version)]
struct Args {
    /// The system under test.
    #[arg(long, value_enum, default_value = "ticketing")]
    system: SystemArg,
    /// Workloads, comma-separated: w1 … w7.
    #[arg(long, value_delimiter = ',', default_value = "w1,w2,w3")]
    workload: Vec<String>,
    /// Seconds per run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// W1 client counts, comma-separated: one W1 run each.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    clients: Vec<usize>,
    /// W1/W3 key space: keys shared by all clients (0: one per client; fewer
    /// than the clients makes them contend).
    #[arg(long, default_value_t = 0)]
    key_space: usize,
    /// W2 clients on the one key.
    #[arg(long, default_value_t = 16)]
    w2_clients: usize,
    /// W3 clients.
    #[arg(long, default_value_t = 8)]
    w3_clients: usize,
    /// W3 (Ticketing): kill the leader this many times in one run, starting the killed node again between
    /// kills; the report adds the min, median and max time from a kill to the first grant.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// W5 clients on the semaphore of 4 permits.
    #[arg(long, default_value_t = 16)]
    w5_clients: usize,
    /// W6 clients taking baskets of 4 keys out of 64.
    #[arg(long, default_value_t = 16)]
    w6_clients: usize,
    /// 2 s per run, and a small W4 (2 000 keys, 1 000 waiters, 20 connections).
    #[arg(long)]
    smoke: bool,
    /// Raft timing of the Ticketing cluster the bench starts.
    #[arg(long, value_enum, default_value = "default")]
    failover: Failover,
    /// W4: held keys to fill.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// W4: waiters to queue on held keys.
    #[arg(long, default_value_t = 10_000)]
    waiters: usize,
    /// W7: grant/release pairs (250 s leases) over which the leader's RSS is sampled.
    #[arg(long, default_value_t = 1_000_000)]
    pairs: u64,
    /// W4: client connections to hold.
    #[arg(long, default_value_t = 1_000)]
    conns: usize,
    /// The ticketing-server binary (default: next to this binary).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Directory for server logs (default: a new directory under /tmp).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Peers: client endpoints (host:port), comma-separated, node order.
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// Peers: process ids of the nodes in `--endpoints` order (W3 kills the leader's).
    #[arg(long, value_delimiter = ',')]
    pids: Vec<u32>,
    /// Ticketing in durable mode: every node with its own `--data-dir` (fsync per batch).
    #[arg(long)]
    durable: bool,
    /// Peers: the system was started without fsync (etcd `--unsafe-no-fsync`);
    /// the lines then say `fsync=no`.
    #[arg(long)]
    peer_no_fsync: bool,
}

/// Whether the system under test fsyncs before it answers, as the bench and
/// scripts/bench-peers start it (`fsync=` on every line: memory-mode rows do
/// not compare with fsync'd ones).
fn fsync_field(args: &Args) -> &'static str {
    let fsyncs = match args.system {
        // Durable mode (`--durable`) fsyncs per batch; memory mode does not.
        SystemArg::Ticketing | SystemArg::TicketingStandalone => args.durable,
        SystemArg::TestGrantAll | SystemArg::TestMultilock => false,
        // etcd and ZooKeeper fsync their log before they answer (their
        // defaults), unless started otherwise.
        SystemArg::Etcd | SystemArg::Zookeeper => !args.peer_no_fsync,
        // Redis as scripts/bench-peers starts it: no AOF, no snapshots.
        SystemArg::Redis => false,
    };
    if fsyncs {
        "yes"
    } else {
        "no"
    }
}

/// The server flags of a failover profile.
fn failover_flags(f: Failover) -> Vec<String> {
    match f {
        Failover::Default => Vec::new(),
        Failover::Fast => {
            ["--heartbeat-ms", "50", "--election-timeout-min-ms", "200", "--election-timeout-max-ms", "250"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        }
    }
}

/// W3 runs at least this long: the kill comes after a third, and the
/// default failover takes about 2.4 s.
const W3_MIN: Duration = Duration::from_secs(9);

struct Ctx {
    args: Args,
    duration: Duration,
    bin: PathBuf,
    dir: PathBuf,
    runs: u32,
}

impl Ctx {
    /// Fresh Ticketing servers for one run, and a ready broker.
    async fn ticketing(&mut self, extra: Vec<String>) -> anyhow::Result<(Servers, Arc<Ticketing>)> {
        let n = if self.args.system == SystemArg::Ticketing { 3 } else { 1 };
        self.runs += 1;
        let mut flags = failover_flags(self.args.failover);
        flags.extend(extra);
        let run_dir = self.dir.join(format!("run{}", self.runs));
        let data = self.args.durable.then(|| run_dir.clone());
        let servers = Servers::start(&self.bin, n, &flags, &run_dir, data.as_deref()).await?;
        let broker = TicketBroker::builder(servers.client_addrs()).build()?;
        if !broker.wait_ready(Duration::from_secs(10)).await {
            anyhow::bail!("the client found no serving leader within 10 s");
        }
        let backend = Arc::new(Ticketing { broker, admin_ports: servers.admin_ports() });
        Ok((servers, backend))
    }

    async fn run(&mut self, workload: &str) -> anyhow::Result<Vec<Report>> {
        let system = self.args.system.name();
        let d = self.duration;
        let ticketing = matches!(self.args.system, SystemArg::Ticketing | SystemArg::TicketingStandalone);
        let mut out = Vec::new();
        match workload {
            "w1" | "w2" => {
                let counts = if workload == "w1" { self.args.clients.clone() } else { vec![self.args.w2_clients] };
                for c in counts {
                    let ks = self.key_space(c);
                    if matches!(self.args.system, SystemArg::TestGrantAll | SystemArg::TestMultilock) {
                        let b: Arc<dyn Backend> = if self.args.system == SystemArg::TestGrantAll {
                            Arc::new(GrantAll::default())
                        } else {
                            Arc::new(MultiLock::default())
                        };
                        out.push(if workload == "w1" {
                            workloads::w1(system, b, c, ks, d).await
                        } else {
                            workloads::w2(system, b, c, d).await
                        });
                    } else if ticketing {
                        let (_servers, backend) = self.ticketing(Vec::new()).await?;
                        let b: Arc<dyn Backend> = backend.clone();
                        out.push(if workload == "w1" {
                            workloads::w1(system, b, c, ks, d).await
                        } else {
                            workloads::w2(system, b, c, d).await
                        });
                        backend.close().await;
                    } else {
                        let b = self.peer(c).await?;
                        out.push(if workload == "w1" {
                            workloads::w1(system, b.clone(), c, ks, d).await
                        } else {
                            workloads::w2(system, b.clone(), c, d).await
                        });
                        b.close().await;
                    }
                }
            }
            "w3" => {
                let c = self.args.w3_clients;
                let ks = self.key_space(c);
                if matches!(
                    self.args.system,
                    SystemArg::TicketingStandalone | SystemArg::TestGrantAll | SystemArg::TestMultilock
                ) {
                    anyhow::bail!("W3 kills the leader of a cluster: use --system ticketing");
                }
                if ticketing {
                    let (servers, backend) = self.ticketing(Vec::new()).await?;
                    let servers = Arc::new(tokio::sync::Mutex::new(servers));
                    let s2 = servers.clone();
                    // Never contended: W3 kills and restarts one node at a time.
                    let kill: Killer = Box::new(move |i| {
                        if let Ok(mut s) = s2.try_lock() {
                            s.kill9(i);
                        }
                    });
                    let s3 = servers.clone();
                    let restart: workloads::Restarter = Box::new(move |i| {
                        let s = s3.clone();
                        Box::pin(async move { s.lock().await.restart(i).await })
                    });
                    let kills = workloads::Kills { kill, kills: self.args.repeat, restart: Some(restart) };
                    let mut r = workloads::w3(system, backend.clone(), c, ks, d.max(W3_MIN), kills).await;
                    r.set("failover", format!("{:?}", self.args.failover).to_lowercase());
                    out.push(r);
                    backend.close().await;
                } else {
                    if self.args.pids.len() != self.args.endpoints.len() || self.args.pids.len() < 3 {
                        anyhow::bail!("W3 on {system} needs --pids, one per --endpoints entry (3 or more)");
                    }
                    let pids = self.args.pids.clone();
                    let kill: Killer = Box::new(move |i| {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pids[i] as i32),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    });
                    let b = self.peer(c).await?;
                    let kills = workloads::Kills { kill, kills: 1, restart: None };
                    out.push(workloads::w3(system, b.clone(), c, ks, d.max(W3_MIN), kills).await);
                    b.close().await;
                }
            }
            "w4" => {
                if !ticketing {
                    anyhow::bail!("W4 runs against Ticketing only");
                }
                let p = if self.args.smoke {
                    w4::W4 { keys: 2000, waiters: 1000, conns: 20, clients: 64 }
                } else {
                    w4::W4 { keys: self.args.keys, waiters: self.args.waiters, conns: self.args.conns, clients: 64 }
                };
                let (servers, backend) = self.ticketing(w4::server_flags(&p)).await?;
                out.push(w4::w4(system, &servers, &backend.broker, &p).await);
                backend.close().await;
            }
            "w5" | "w6" => {
                let c = if workload == "w5" { self.args.w5_clients } else { self.args.w6_clients };
                let (servers, b): (Option<Servers>, Arc<dyn Backend>) = match self.args.system {
                    SystemArg::TestGrantAll => (None, Arc::new(GrantAll::default())),
                    SystemArg::TestMultilock => (None, Arc::new(MultiLock::default())),
                    _ if ticketing => {
                        let (servers, backend) = self.ticketing(Vec::new()).await?;
                        (Some(servers), backend)
                    }
                    _ => anyhow::bail!(
                        "{} runs against Ticketing only (counted and multi-key grants)",
                        workload.to_uppercase()
                    ),
                };
                out.push(if workload == "w5" {
                    grants::w5(system, b.clone(), c, d).await
                } else {
                    grants::w6(system, b.clone(), c, d).await
                });
                b.close().await;
                drop(servers);
            }
            "w7" => {
                if !ticketing {
                    anyhow::bail!("W7 runs against Ticketing only");
                }
                let pairs = if self.args.smoke { 50_000 } else { self.args.pairs };
                let (servers, backend) = self.ticketing(Vec::new()).await?;
                let b: Arc<dyn Backend> = backend.clone();
                out.push(w7::w7(system, &servers, b, 64, pairs).await);
                backend.close().await;
            }
            other => anyhow::bail!("unknown workload {other:?}: w1, w2, w3, w4, w5, w6 or w7"),
        }
        Ok(out)
    }

    /// The W1/W3 key space for `clients` clients.
    fn key_space(&self, clients: usize) -> usize {
        if self.args.key_space == 0 {
            clients
        } else {
            self.args.key_space
        }
    }

    #[cfg(feature = "peers")]
    async fn peer(&self, clients: usize) -> anyhow::Result<Arc<dyn Backend>> {
        peers::connect(self.args.system.name(), &self.args.endpoints, clients).await
    }

    #[cfg(not(feature = "peers"))]
    async fn peer(&self, _clients: usize) -> anyhow::Result<Arc<dyn Backend>> {
        anyhow::bail!(
            "{} needs the peer adapters: build with `cargo build --release -p ticketing-bench --features peers` (scripts/bench-peers does)",
            self.args.system.name()
        )
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    if !args.duration.is_finite() || args.duration <= 0.0 || args.duration > 3600.0 {
        eprintln!("ticketing-bench: --duration must be seconds in (0, 3600]");
        std::process::exit(2);
    }
    if args
        .clients
        .iter()
        .chain([&args.w2_clients, &args.w3_clients, &args.w5_clients, &args.w6_clients])
        .any(|&c| c == 0 || c > 10_000)
    {
        eprintln!("ticketing-bench: client counts must be 1..=10000");
        std::process::exit(2);
    }
    if args.key_space > 1_000_000 {
        eprintln!("ticketing-bench: --key-space must be 0..=1000000");
        std::process::exit(2);
    }
    let duration = if args.smoke { Duration::from_secs(2) } else { Duration::from_secs_f64(args.duration) };
    let bin = args.server_bin.clone().unwrap_or_else(procs::default_server_bin);
    let dir = args
        .log_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("ticketing-bench-{}", std::process::id())));
    let workloads: Vec<String> = args.workload.iter().map(|w| w.trim().to_lowercase()).collect();
    let mut ctx = Ctx { args, duration, bin, dir, runs: 0 };
    let mut failed = false;
    for w in workloads {
        match ctx.run(&w).await {
            Ok(reports) => {
                for mut r in reports {
                    r.set("fsync", fsync_field(&ctx.args));
                    println!("{}", r.line());
                }
            }
            Err(e) => {
                println!(
                    "system={} workload={} error={}",
                    ctx.args.system.name(),
                    w.to_uppercase(),
                    e.to_string().replace(' ', "_")
                );
                eprintln!("ticketing-bench: {w}: {e:#}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
