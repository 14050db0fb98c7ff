//! One run: a cluster behind the proxies, the workload processes, the
//! nemesis, then the checker.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::{sleep, Instant};

use crate::checker::{self, Report};
use crate::clock::{mono_ns, ns};
use crate::cluster::Cluster;
use crate::db;
use crate::history::{self, Event, Recorder};
use crate::nemesis::{Nemesis, World};
use crate::rng::Rng;
use crate::workload::Workload;

/// Workload parameters shared by every client.
pub const WAIT: Duration = Duration::from_secs(4);
/// Lease of every acquire.
pub const LEASE: Duration = Duration::from_secs(3);
/// Work budget of every acquire.
pub const BUDGET: Duration = Duration::from_secs(1);

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// 3 or 5.
    pub nodes: usize,
    /// Seed of every choice.
    pub seed: u64,
    /// Faults in order (ci).
    pub nemeses: Vec<Nemesis>,
    /// Soak: keep drawing faults from the seed until this much time passed.
    pub duration: Option<Duration>,
    /// Workload client processes: what each asks for.
    pub workloads: Vec<Workload>,
    /// The run's keys (exclusive and basket requests; the semaphore and the
    /// read/write lock have a key each besides).
    pub keys: usize,
    /// The failover bound after a heal.
    pub bound: Duration,
    /// A PostgreSQL URL for the counter; `None`: a SQLite file in the run's directory.
    pub db: Option<String>,
    /// Durable mode (`--data-dir` per node).
    pub durable: bool,
    /// An earlier release's server binary every node starts on, until a
    /// `rolling-upgrade` fault moves it to the run's.
    pub upgrade_from: Option<PathBuf>,
}

/// The outcome of a run.
pub struct Outcome {
    /// The checker's report.
    pub report: Report,
    /// Fault lines (what each did).
    pub log: Vec<String>,
    /// Problems of the run itself (not violations): a node that did not come
    /// back, a client that had to be killed.
    pub errors: Vec<String>,
    /// Real duration.
    pub elapsed: Duration,
}

/// The config file of the run's two principals (docs/security.md, "Several
/// teams: principals"), with their tokens files, in the run directory.
fn principals_config(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let mut toml = String::new();
    for (name, token) in crate::workload::PRINCIPALS {
        let tokens = dir.join(format!("{name}.tokens"));
        std::fs::write(&tokens, format!("{token}\n"))?;
        toml.push_str(&format!(
            "[[principal]]\nname = \"{name}\"\ntokens_file = {:?}\nkeys = [\"{}\"]\n\n",
            tokens.display().to_string(),
            crate::workload::RUN_PREFIX
        ));
    }
    let path = dir.join("principals.toml");
    std::fs::write(&path, toml)?;
    Ok(path)
}

fn spawn_client(
    plan: &Plan,
    id: usize,
    addrs: &[String],
    keys: &[String],
    dir: &Path,
    dbp: &db::Target,
) -> anyhow::Result<Child> {
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(dir.join(format!("client-{id}.log")))?;
    let child = Command::new(exe)
        .arg("client")
        .args(["--id", &id.to_string()])
        .args(["--addrs", &addrs.join(",")])
        .args(["--keys", &keys.join(",")])
        .args(["--workload", plan.workloads[id].name()])
        .arg("--db")
        .arg(dbp.arg())
        .arg("--dir")
        .arg(dir)
        .args(["--seed", &(plan.seed.wrapping_mul(1000).wrapping_add(id as u64)).to_string()])
        .args(["--duration-ms", "86400000"])
        .args(["--wait-ms", &WAIT.as_millis().to_string()])
        .args(["--lease-ms", &LEASE.as_millis().to_string()])
        .args(["--budget-ms", &BUDGET.as_millis().to_string()])
        // Clients alternate between the run's two principals.
        .args(["--token", crate::workload::PRINCIPALS[id % crate::workload::PRINCIPALS.len()].1])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    Ok(child)
}

/// The counter total, read off the async threads (SQLite blocks).
async fn total(dbp: &db::Target) -> anyhow::Result<u64> {
    let p = dbp.clone();
    tokio::task::spawn_blocking(move || db::open(&p)?.total()).await?
}

/// Waits until the counter total exceeds `than` (bounded).
async fn progress(dbp: &db::Target, than: u64, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if total(dbp).await.unwrap_or(0) > than {
            return true;
        }
        sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Runs `plan` with the server binary `bin`, history in `dir` (emptied first).
pub async fn run(plan: &Plan, bin: &Path, dir: &Path) -> anyhow::Result<Outcome> {
    let t0 = Instant::now();
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let keys: Vec<String> = (0..plan.keys).map(|k| format!("verify-key-{k}")).collect();
    let dbp = match &plan.db {
        Some(url) => db::Target::Postgres(url.clone()),
        None => db::Target::Sqlite(dir.join("counter.sqlite")),
    };
    {
        let (t, k) = (dbp.clone(), crate::workload::run_keys(&keys));
        tokio::task::spawn_blocking(move || db::init(&t, &k)).await??;
    }
    let mut rng = Rng::new(plan.seed);
    let mut cluster = Cluster::new(plan.nodes, bin, dir, rng.next_u64()).await?;
    cluster.durable = plan.durable;
    if let Some(old) = &plan.upgrade_from {
        cluster.nodes.iter_mut().for_each(|n| n.bin = old.clone());
    }
    cluster.args.extend(["--config".to_owned(), principals_config(dir)?.display().to_string()]);
    if plan.durable {
        cluster.mount_disks()?;
    }
    for i in (0..plan.nodes).rev() {
        cluster.start(i, i == 0)?;
    }
    if cluster.wait_leader(Duration::from_secs(40)).await.is_none() {
        anyhow::bail!("the cluster elected no serving leader within 40 s (logs in {})", dir.display());
    }
    let addrs = cluster.client_addrs();
    let mut clients = Vec::new();
    for id in 0..plan.workloads.len() {
        clients.push(spawn_client(plan, id, &addrs, &keys, dir, &dbp)?);
    }
    let begin = mono_ns();
    let mut errors = Vec::new();
    if !progress(&dbp, 2, Duration::from_secs(30)).await {
        errors.push("the workload wrote fewer than 3 times in its first 30 s".to_owned());
    }
    let mut world = World { cluster, clients, dir: dir.to_owned(), db: dbp.clone(), rng: Rng::new(rng.next_u64()) };
    let mut rec = Recorder::open(&dir.join("nemesis.jsonl"))?;
    let mut log = Vec::new();
    let mut queue = plan.nemeses.clone();
    let mut i = 0;
    loop {
        let nem = match plan.duration {
            None if i < queue.len() => queue[i],
            None => break,
            Some(d) if t0.elapsed() < d => {
                let choices = Nemesis::for_run(plan.nodes, plan.durable);
                let n = choices[rng.index(choices.len())];
                queue.push(n);
                n
            }
            Some(_) => break,
        };
        i += 1;
        let start = mono_ns();
        let before = total(&dbp).await?;
        match world.inject(nem).await {
            Ok(done) => {
                let st = world.cluster.net.stats();
                let line = format!(
                    "{:>2}. {}: {} [peer connections open {}, accepted {}, unattributed {}, slowest attribution {} ms]",
                    i,
                    nem.name(),
                    done.detail,
                    world.cluster.net.open_links().len(),
                    st.accepted,
                    st.unattributed,
                    st.max_attribution_ms
                );
                println!("{line}");
                log.push(line);
                rec.record(&Event::Fault {
                    name: nem.name().to_owned(),
                    nodes: plan.nodes as u32,
                    start,
                    heal: done.heal,
                    detail: done.detail,
                })?;
                let at_heal = total(&dbp).await?.max(before);
                progress(&dbp, at_heal, plan.bound).await;
                sleep(Duration::from_millis(1000)).await;
            }
            Err(e) => {
                let line = format!("{:>2}. {}: FAILED: {e}", i, nem.name());
                println!("{line}");
                errors.push(line.clone());
                log.push(line);
                break;
            }
        }
    }
    // Stop the workload: each client finishes its iteration and exits.
    let end = mono_ns();
    std::fs::write(dir.join("stop"), b"")?;
    for (id, c) in world.clients.iter_mut().enumerate() {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGCONT);
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = c.try_wait().ok().flatten() {
                if !status.success() {
                    errors.push(format!("client {id} failed ({status}): see client-{id}.log"));
                }
                break;
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                errors.push(format!("client {id} did not stop within 20 s and was killed"));
                break;
            }
            sleep(Duration::from_millis(50)).await;
        }
    }
    world.cluster.kill_all();
    let s = world.cluster.net.stats();
    let c = world.cluster.clients.stats();
    log.push(format!(
        "proxy: {} peer connections ({} not attributed to a node, slowest attribution {} ms), {} resets, {} bytes dropped; \
         {} client connections, {} resets, {} bytes dropped",
        s.accepted, s.unattributed, s.max_attribution_ms, s.resets, s.dropped_bytes, c.accepted, c.resets, c.dropped_bytes
    ));
    let events = history::load(dir)?;
    let fin = {
        let t = dbp.clone();
        tokio::task::spawn_blocking(move || db::read_final(&t)).await??
    };
    let report = checker::check(&events, &fin, ns(plan.bound), begin, end);
    Ok(Outcome { report, log, errors, elapsed: t0.elapsed() })
}

/// Where a run's files go: `target/verify/<name>` next to the binary, or `base`.
pub fn run_dir(base: Option<&Path>, name: &str) -> PathBuf {
    match base {
        Some(b) => b.join(name),
        None => std::env::temp_dir().join(format!("ticketing-verify-{}", std::process::id())).join(name),
    }
}
