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
    /// Node and client logs at info on stderr (with one seed).
    #[arg(long)]
    log: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.log {
        tracing_subscriber::fmt().with_env_filter("info").with_writer(std::io::stderr).init();
    }
    let mut violations = 0u64;
    let mut grants = 0u64;
    for seed in cli.seed..cli.seed + cli.seeds {
        let nodes = cli.nodes.unwrap_or(if seed % 2 == 0 { 3 } else { 5 });
        let plan = Plan { seed, nodes, clients: cli.clients, keys: 5, duration: Duration::from_secs(cli.seconds) };
        let dir = run::run_dir(None, seed);
        let out = match run::run(&plan, &dir) {
            Ok(out) => out,
            Err(e) => {
                eprintln!("seed {seed}: {e}");
                return ExitCode::from(2);
            }
        };
        let v = out.report.violations.len() as u64 + u64::from(out.error.is_some());
        grants += out.report.grants;
        if v > 0 || cli.seeds == 1 {
            println!(
                "seed={seed} nodes={nodes} grants={} faults={} violations={v} history={}",
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
                    "  replay: scripts/simulate --seed {seed} --seeds 1 --nodes {nodes} --seconds {}",
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
