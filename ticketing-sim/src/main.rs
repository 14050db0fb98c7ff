//! `ticketing-sim`: runs seeds of the simulation (docs/verification.md,
//! "Simulation") and prints `seeds=N violations=V`; on a violation, the
//! seed and the command that replays it.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ticketing_sim::run::{self, Plan};

#[derive(Debug, Parser)]
#[command(name = "ticketing-sim", version, about = "Deterministic simulation of a Ticketing cluster")]
struct Cli {
    /// How many seeds (from --seed on).
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// 3 or 5 nodes (default: 3 for even seeds, 5 for odd ones).
    #[arg(long)]
    nodes: Option<usize>,
    /// Simulated seconds the clients run per seed.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Client brokers.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// memory or durable (default: memory for seeds 0 and 1 modulo 4, durable for 2 and 3).
    #[arg(long, value_parser = ["memory", "durable"])]
    mode: Option<String>,
    /// Node and client logs at info on stderr (with one seed).
    #[arg(long)]
    log: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.log {
        // RUST_LOG, if set, picks what is logged (e.g. `turmoil=debug`).
        let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".to_owned());
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    }
    let mut violations = 0u64;
    let mut grants = 0u64;
    for seed in cli.seed..cli.seed + cli.seeds {
        let mut plan = Plan::for_seed(seed, Duration::from_secs(cli.seconds));
        plan.nodes = cli.nodes.unwrap_or(plan.nodes);
        plan.clients = cli.clients;
        if let Some(mode) = &cli.mode {
            plan.durable = mode == "durable";
        }
        let (nodes, mode) = (plan.nodes, if plan.durable { "durable" } else { "memory" });
        let dir = run::run_dir(None, seed);
        // A panic in a node or a client (openraft asserts what its storage
        // promised) is this seed's failure, not the end of the run.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run::run(&plan, &dir)));
        let out = match ran {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                eprintln!("seed {seed}: {e}");
                return ExitCode::from(2);
            }
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic");
                run::Outcome::panicked(format!("a host panicked: {why}"))
            }
        };
        // The token files and data dirs of the seed (a replay makes them again).
        let _ = std::fs::remove_dir_all(&dir);
        let v = out.report.violations.len() as u64 + u64::from(out.error.is_some());
        grants += out.report.grants;
        if v > 0 || cli.seeds == 1 {
            println!(
                "seed={seed} nodes={nodes} mode={mode} grants={} faults={} violations={v} history={}",
                out.report.grants,
                out.faults.len(),
                out.digest
            );
            for f in &out.faults {
                println!("  fault: {f}");
            }
            for viol in &out.report.violations {
                println!("  VIOLATION: {viol}");
            }
            if let Some(e) = &out.error {
                println!("  SIMULATION ERROR: {e}");
            }
            if v > 0 {
                println!(
                    "  replay: scripts/simulate --seed {seed} --seeds 1 --nodes {nodes} --mode {mode} --seconds {}",
                    cli.seconds
                );
            }
        }
        violations += v;
    }
    println!("seeds={} violations={violations} grants={grants}", cli.seeds);
    if violations > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
