//! `ticketing-verify`: the fault suite's one command (docs/verification.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use ticketing_verify::checker::{self, last_line};
use ticketing_verify::nemesis::Nemesis;
use ticketing_verify::run::{self, Plan};
use ticketing_verify::workload::{self, ClientArgs, Workload};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Profile {
    /// ≤ 5 min: fixed seeds, every fault at least once: 3 durable nodes, 5 memory-mode nodes, a durable standalone server.
    Ci,
    /// Long manual runs: random faults until --duration; writes its table to docs/soak-runs.md.
    Soak,
}

#[derive(Debug, Parser)]
#[command(name = "ticketing-verify", version, about = "Jepsen-style fault suite for Ticketing")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// ci or soak.
    #[arg(long, value_enum, default_value = "ci")]
    profile: Profile,
    /// Seed of every choice (ci: the 3-node run uses it, the 5-node run seed + 1, the standalone run seed + 2; each runs every fault it can take once, in an order drawn from its seed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Only this cluster size (3 or 5, or 1: a durable standalone server): with ci, that size runs every fault it can take.
    #[arg(long)]
    nodes: Option<usize>,
    /// With --nodes 3 or 5: durable mode (`--data-dir` per node on a faultfs
    /// mount; adds restart-all and the power-loss faults). 1 is always durable.
    #[arg(long)]
    durable: bool,
    /// ci: only these faults, in this order (comma-separated names, e.g.
    /// `power-loss-leader,torn-tail`), each run that can take them.
    #[arg(long, value_delimiter = ',')]
    nemesis: Vec<String>,
    /// Soak length: `30m`, `90s`, `1h` or seconds.
    #[arg(long, value_parser = parse_duration, default_value = "30m")]
    duration: Duration,
    /// `sqlite` (default: a file in the run's directory) or a PostgreSQL URL
    /// (`postgres://user@127.0.0.1:5432/db`; the run drops and creates its
    /// tables `fence`, `counter` and `writes` there).
    #[arg(long, default_value = "sqlite")]
    db: String,
    /// The server binary (default: `ticketing-server` next to this binary).
    #[arg(long)]
    server: Option<PathBuf>,
    /// An earlier release's server binary: every node starts on it, and the
    /// `rolling-upgrade` fault moves the nodes one by one to --server (needs
    /// --nodes 3 or 5; default faults: rolling-upgrade, then kill-leader).
    #[arg(long)]
    upgrade_from: Option<PathBuf>,
    /// Where runs keep their files (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Soak: the file its table goes into.
    #[arg(long, default_value = "docs/soak-runs.md")]
    report: PathBuf,
    /// The failover bound after a heal, in seconds (also the longest a key
    /// may go without a grant while acquires of it wait and no fault runs).
    #[arg(long, default_value_t = 15)]
    bound: u64,
    /// What the clients ask for: `combined` (3 exclusive, 2 semaphore, 2
    /// read/write, 2 basket and 1 mixed client), or one of `exclusive`,
    /// `semaphore`, `rw`, `baskets`, `mixed` for every one of --clients.
    #[arg(long, default_value = "combined", value_parser = parse_workload)]
    workload: WorkloadArg,
    /// With a single --workload: how many client processes.
    #[arg(long, default_value_t = 4)]
    clients: usize,
}

/// The `combined` workload: every kind of request in one run, on keys that
/// overlap (baskets take the exclusive keys, the semaphore's and the
/// read/write lock's).
const COMBINED: [Workload; 10] = [
    Workload::Exclusive,
    Workload::Exclusive,
    Workload::Exclusive,
    Workload::Semaphore,
    Workload::Semaphore,
    Workload::ReadWrite,
    Workload::ReadWrite,
    Workload::Baskets,
    Workload::Baskets,
    Workload::Mixed,
];

/// `--workload`: the combined set or one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkloadArg {
    Combined,
    One(Workload),
}

fn parse_workload(s: &str) -> Result<WorkloadArg, String> {
    if s == "combined" {
        return Ok(WorkloadArg::Combined);
    }
    Workload::parse(s).map(WorkloadArg::One).ok_or_else(|| {
        let names: Vec<&str> = Workload::ALL.iter().map(|w| w.name()).collect();
        format!("unknown workload {s:?}: combined, {}", names.join(", "))
    })
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// One workload client process (spawned by a run).
    #[command(hide = true)]
    Client {
        #[arg(long)]
        id: u32,
        #[arg(long, value_delimiter = ',')]
        addrs: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        keys: Vec<String>,
        #[arg(long, default_value = "exclusive", value_parser = parse_one_workload)]
        workload: Workload,
        #[arg(long)]
        db: String,
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        duration_ms: u64,
        #[arg(long)]
        wait_ms: u64,
        #[arg(long)]
        lease_ms: u64,
        #[arg(long)]
        budget_ms: u64,
        /// The client token (its principal).
        #[arg(long)]
        token: Option<String>,
    },
}

fn parse_one_workload(s: &str) -> Result<Workload, String> {
    match parse_workload(s)? {
        WorkloadArg::One(w) => Ok(w),
        WorkloadArg::Combined => Err("a client runs one workload".to_owned()),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("bad duration {s:?}: use 30m, 90s, 1h or seconds"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("bad duration unit in {s:?}: s, m or h")),
    };
    if secs == 0 {
        return Err("the duration must be positive".into());
    }
    Ok(Duration::from_secs(secs))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Cmd::Client {
        id,
        addrs,
        keys,
        workload,
        db,
        dir,
        seed,
        duration_ms,
        wait_ms,
        lease_ms,
        budget_ms,
        token,
    }) = cli.cmd
    {
        let ms = Duration::from_millis;
        let args = ClientArgs {
            id,
            addrs,
            keys,
            workload,
            db: ticketing_verify::db::Target::parse(&db),
            dir,
            seed,
            duration: ms(duration_ms),
            wait: ms(wait_ms),
            lease: ms(lease_ms),
            budget: ms(budget_ms),
            token,
        };
        return match workload::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ticketing-verify client {id}: {e}");
                ExitCode::from(1)
            }
        };
    }
    match main_run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ticketing-verify: {e}");
            ExitCode::from(2)
        }
    }
}

fn main_run(cli: Cli) -> anyhow::Result<ExitCode> {
    let db = match ticketing_verify::db::Target::parse(&cli.db) {
        _ if cli.db == "sqlite" => None,
        ticketing_verify::db::Target::Postgres(url) => Some(url),
        ticketing_verify::db::Target::Sqlite(_) => {
            anyhow::bail!("--db {:?}: give `sqlite` or a postgres://… URL", cli.db)
        }
    };
    if let Some(n) = cli.nodes {
        if n != 1 && n != 3 && n != 5 {
            anyhow::bail!("--nodes must be 3 or 5 (or 1: a durable standalone server), got {n}");
        }
    }
    let server = match cli.server {
        Some(s) => s,
        None => std::env::current_exe()?.with_file_name("ticketing-server"),
    };
    if !server.is_file() {
        anyhow::bail!(
            "server binary {} not found: build it with `cargo build --release -p ticketing-server` or pass --server",
            server.display()
        );
    }
    let bound = Duration::from_secs(cli.bound);
    let workloads = match cli.workload {
        WorkloadArg::Combined => COMBINED.to_vec(),
        WorkloadArg::One(_) if cli.clients == 0 || cli.clients > 64 => {
            anyhow::bail!("--clients must be 1 to 64, got {}", cli.clients)
        }
        WorkloadArg::One(w) => vec![w; cli.clients],
    };
    let base = Plan {
        nodes: 3,
        seed: cli.seed,
        nemeses: Vec::new(),
        duration: None,
        workloads,
        keys: 3,
        bound,
        db,
        durable: false,
        upgrade_from: None,
    };
    // Every fault a run can take, in an order drawn from its seed.
    let all = |nodes: usize, durable: bool, seed: u64| {
        let mut v = Nemesis::for_run(nodes, durable);
        ticketing_verify::rng::Rng::new(seed).shuffle(&mut v);
        v
    };
    let mut chosen = Vec::new();
    for name in &cli.nemesis {
        chosen.push(Nemesis::parse(name).ok_or_else(|| anyhow::anyhow!("--nemesis: no fault named {name:?}"))?);
    }
    let all = |nodes: usize, durable: bool, seed: u64| {
        if chosen.is_empty() {
            all(nodes, durable, seed)
        } else {
            let can = Nemesis::for_run(nodes, durable);
            chosen.iter().copied().filter(|n| can.contains(n)).collect()
        }
    };
    let upgrading = chosen.contains(&Nemesis::RollingUpgrade);
    let plans: Vec<Plan> = match (&cli.upgrade_from, cli.profile) {
        (None, _) if upgrading => anyhow::bail!("--nemesis rolling-upgrade needs --upgrade-from OLD_SERVER"),
        (Some(old), Profile::Ci) => {
            if !old.is_file() {
                anyhow::bail!("--upgrade-from {}: no such file", old.display());
            }
            let nodes = match cli.nodes {
                Some(n @ (3 | 5)) => n,
                _ => anyhow::bail!("--upgrade-from needs --nodes 3 or 5"),
            };
            let nemeses = match chosen.as_slice() {
                [] => vec![Nemesis::RollingUpgrade, Nemesis::KillLeader],
                c if upgrading => c.to_vec(),
                _ => anyhow::bail!("--upgrade-from: the faults must include rolling-upgrade"),
            };
            vec![Plan { nodes, durable: cli.durable, nemeses, upgrade_from: Some(old.clone()), ..base.clone() }]
        }
        (Some(_), Profile::Soak) => anyhow::bail!("--upgrade-from runs with the ci profile"),
        (None, Profile::Ci) => match cli.nodes {
            Some(n) => {
                let durable = cli.durable || n == 1;
                vec![Plan { nodes: n, durable, nemeses: all(n, durable, cli.seed), ..base.clone() }]
            }
            // The 3-node run is durable (its kills restart nodes as
            // themselves, and restart-all), the 5-node run memory mode (its
            // kills exercise learner replacement, and rebuild), then a durable standalone server.
            None => vec![
                Plan { nodes: 3, durable: true, nemeses: all(3, true, cli.seed), ..base.clone() },
                Plan {
                    nodes: 5,
                    seed: cli.seed.wrapping_add(1),
                    nemeses: all(5, false, cli.seed.wrapping_add(1)),
                    ..base.clone()
                },
                Plan {
                    nodes: 1,
                    durable: true,
                    seed: cli.seed.wrapping_add(2),
                    nemeses: all(1, true, cli.seed.wrapping_add(2)),
                    ..base.clone()
                },
            ],
        },
        (None, Profile::Soak) => {
            let nodes = cli.nodes.unwrap_or(3);
            vec![Plan { nodes, durable: cli.durable || nodes == 1, duration: Some(cli.duration), ..base.clone() }]
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build()?;
    let (mut v, mut g, mut f, mut fr, mut ih) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut failed_runs = 0;
    for plan in &plans {
        let mode = if plan.durable { "durable" } else { "memory" };
        let upgrade = if plan.upgrade_from.is_some() { "-upgrade" } else { "" };
        let name = format!("{}-nodes-{mode}{upgrade}-seed-{}", plan.nodes, plan.seed);
        let dir = run::run_dir(cli.dir.as_deref(), &name);
        println!(
            "== {name}: {} clients ({}), {} keys and a semaphore's and a read/write lock's, history in {}",
            plan.workloads.len(),
            workload_summary(&plan.workloads),
            plan.keys,
            dir.display()
        );
        let out = rt.block_on(run::run(plan, &server, &dir))?;
        for l in &out.log[out.log.len().saturating_sub(1)..] {
            println!("{l}");
        }
        let table = checker::table(&out.report.rows);
        println!("\n{table}");
        println!(
            "accepted writes: {}, counted grants: {}, multi-key grants: {}, real duration: {:.1} s",
            out.report.accepted,
            out.report.counted,
            out.report.baskets,
            out.elapsed.as_secs_f64()
        );
        println!(
            "FIFO pairs checked: {}; Indeterminate acquires found held: {}, not held: {}, unresolved: {}",
            out.report.fifo_pairs,
            out.report.indeterminate_held,
            out.report.indeterminate_not_held,
            out.report.indeterminate_unresolved
        );
        for e in &out.errors {
            println!("RUN ERROR: {e}");
        }
        for viol in &out.report.violations {
            println!("VIOLATION: {viol}");
        }
        if !out.errors.is_empty() {
            failed_runs += 1;
        }
        if cli.profile == Profile::Soak {
            write_soak_report(&cli.report, plan, &out, &table)?;
        }
        v += out.report.violations.len() as u64;
        g += out.report.grants;
        f += out.report.faults;
        fr += out.report.fence_refusals;
        ih += out.report.indeterminate_held;
    }
    println!("{}", last_line(v, g, f, fr, ih));
    Ok(if v > 0 || failed_runs > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// `3 exclusive, 2 semaphore, …`, in order of first appearance.
fn workload_summary(ws: &[Workload]) -> String {
    let mut parts: Vec<(Workload, usize)> = Vec::new();
    for w in ws {
        match parts.iter_mut().find(|(x, _)| x == w) {
            Some((_, n)) => *n += 1,
            None => parts.push((*w, 1)),
        }
    }
    parts.iter().map(|(w, n)| format!("{n} {}", w.name())).collect::<Vec<_>>().join(", ")
}

const BEGIN: &str = "<!-- soak:begin -->";
const END: &str = "<!-- soak:end -->";

/// Puts the soak's table between the markers of `path` (appends them if missing).
fn write_soak_report(path: &std::path::Path, plan: &Plan, out: &run::Outcome, table: &str) -> anyhow::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let mins = out.elapsed.as_secs_f64() / 60.0;
    let section = format!(
        "{BEGIN}\nLast soak: {} nodes, {} clients ({}), seed {}, real duration {:.1} min, {} faults, {} grants, {} accepted writes, \
         {} fence refusals, {} violations{}.\n\nPer fault kind:\n\n{}\nEvery fault in order:\n\n{}\n```text\n{}\n```\n{END}",
        plan.nodes,
        plan.workloads.len(),
        workload_summary(&plan.workloads),
        plan.seed,
        mins,
        out.report.faults,
        out.report.grants,
        out.report.accepted,
        out.report.fence_refusals,
        out.report.violations.len(),
        if out.errors.is_empty() { String::new() } else { format!(", run errors: {}", out.errors.join("; ")) },
        checker::by_fault(&out.report.rows),
        table,
        out.log.join("\n")
    );
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(a), Some(b)) if a < b => format!("{}{}{}", &old[..a], section, &old[b + END.len()..]),
        _ => format!("{old}\n{section}\n"),
    };
    std::fs::write(path, new)?;
    Ok(())
}
