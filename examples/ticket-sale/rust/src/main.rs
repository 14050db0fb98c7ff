//! A ticket seller in Rust: sells seats of one event until none is left.
//!
//! Each sale: take the lock on the event key, read the stock, then in ONE
//! database transaction guarded by the fence (`docs/fencing.md`) record the
//! seat and decrement the stock; commit; release. Run by
//! `examples/ticket-sale/demo`; the arguments are described in
//! `examples/README.md`.

use clap::Parser;
use rand_core::{OsRng, RngCore};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ticketing_client::{Error, TicketBroker};

mod store;
use store::Store;

/// A fenced ticket seller (Rust).
#[derive(Parser)]
struct Args {
    /// Comma-separated server addresses.
    #[arg(long)]
    addrs: String,
    /// `sqlite:///path.db` (or a path) or `postgres://…`.
    #[arg(long)]
    db: String,
    /// The event: lock key and fence key.
    #[arg(long)]
    event: String,
    /// This seller's name (written with each sale).
    #[arg(long)]
    name: String,
    /// Lease in seconds.
    #[arg(long, default_value_t = 5)]
    lease: u64,
    /// Queue wait in seconds.
    #[arg(long, default_value_t = 10)]
    wait: u64,
    /// Simulated work between the read and the write, in milliseconds.
    #[arg(long, default_value_t = 10)]
    work_ms: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300.0)]
    deadline: f64,
    /// Once connected: print `READY` and wait for a line on stdin before selling.
    #[arg(long)]
    wait_start: bool,
    /// After this many sales, at the next grant: print `HOLDING token=… seat=…` and wait for a line on stdin.
    #[arg(long)]
    pause_after_sales: Option<u64>,
    /// Write without the fence (demonstration only).
    #[arg(long)]
    no_fence: bool,
}

#[derive(Default)]
struct Counts {
    sold: u64,
    fence_refusals: u64,
    timeouts: u64,
    busy: u64,
    indeterminate: u64,
    unavailable: u64,
    insufficient_time: u64,
    release_failures: u64,
    db_errors: u64,
}

impl Counts {
    fn result_line(&self, name: &str) -> String {
        format!(
            "RESULT name={name} sold={} fence_refusals={} timeouts={} busy={} indeterminate={} unavailable={} \
             insufficient_time={} release_failures={} db_errors={}",
            self.sold,
            self.fence_refusals,
            self.timeouts,
            self.busy,
            self.indeterminate,
            self.unavailable,
            self.insufficient_time,
            self.release_failures,
            self.db_errors
        )
    }
}

/// Exponential backoff with jitter, 50 ms up to 1 s.
struct Backoff(Duration);

impl Backoff {
    fn reset(&mut self) {
        self.0 = Duration::from_millis(50);
    }

    fn sleep(&mut self) {
        let jitter = 0.5 + f64::from(OsRng.next_u32()) / f64::from(u32::MAX);
        std::thread::sleep(self.0.mul_f64(jitter));
        self.0 = (self.0 * 2).min(Duration::from_secs(1));
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !(args.deadline.is_finite() && args.deadline > 0.0) {
        eprintln!("--deadline must be a positive number of seconds");
        return ExitCode::from(2);
    }
    let mut store = match Store::open(&args.db) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: cannot open {}: {e}", args.name, args.db);
            return ExitCode::from(1);
        }
    };
    // The client's futures need no particular runtime; a small one drives them here.
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start a tokio runtime: {e}", args.name);
            return ExitCode::from(1);
        }
    };
    let broker = match TicketBroker::builder(args.addrs.split(',')).build() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{}: {e}", args.name);
            return ExitCode::from(2);
        }
    };
    let code = sell(&args, &mut store, &rt, &broker);
    rt.block_on(broker.close());
    code
}

fn sell(args: &Args, store: &mut Store, rt: &tokio::runtime::Runtime, broker: &TicketBroker) -> ExitCode {
    let log = |msg: String| eprintln!("{}: {msg}", args.name);
    let (wait, lease, budget) =
        (Duration::from_secs(args.wait), Duration::from_secs(args.lease), Duration::from_secs(1));
    let end = Instant::now() + Duration::from_secs_f64(args.deadline);
    let mut counts = Counts::default();
    let mut backoff = Backoff(Duration::from_millis(50));
    let mut paused = false;
    if !rt.block_on(broker.wait_ready(Duration::from_secs(10))) {
        log("no leader within 10 s; trying anyway".into());
    }
    if args.wait_start {
        println!("READY");
        let _ = std::io::stdout().flush();
        let _ = std::io::stdin().lock().read_line(&mut String::new());
    }
    loop {
        if Instant::now() > end {
            log(format!("deadline of {} s passed", args.deadline));
            println!("{}", counts.result_line(&args.name));
            return ExitCode::from(3);
        }
        let ticket = match rt.block_on(broker.acquire(&args.event, wait, lease, budget)) {
            Ok(Some(t)) => t,
            Ok(None) => {
                counts.timeouts += 1;
                continue;
            }
            Err(e) => {
                match e {
                    Error::Busy => counts.busy += 1,
                    // Maybe granted, maybe not: never enter. A grant returns at lease end.
                    Error::Indeterminate => counts.indeterminate += 1,
                    Error::Unavailable => counts.unavailable += 1,
                    Error::InsufficientTime => counts.insufficient_time += 1,
                    other => {
                        log(format!("acquire failed: {other}"));
                        println!("{}", counts.result_line(&args.name));
                        return ExitCode::from(1);
                    }
                }
                backoff.sleep();
                continue;
            }
        };
        backoff.reset();
        let token = ticket.token();
        let mut done = false;
        match store.read_stock(&args.event) {
            Ok((remaining, _)) if remaining <= 0 => done = true,
            Ok((remaining, seats)) => {
                let seat = seats - remaining + 1;
                if !paused && args.pause_after_sales.is_some_and(|n| counts.sold >= n) {
                    paused = true;
                    println!("HOLDING token={token} seat={seat}");
                    let _ = std::io::stdout().flush();
                    let _ = std::io::stdin().lock().read_line(&mut String::new());
                }
                std::thread::sleep(Duration::from_millis(args.work_ms)); // e.g. the payment provider's answer
                match store.sell(&args.event, token, seat, remaining, &args.name, !args.no_fence) {
                    Ok(true) => counts.sold += 1,
                    Ok(false) => {
                        counts.fence_refusals += 1;
                        log(format!("fence refused token {token} (seat {seat}): a newer holder wrote first"));
                    }
                    Err(e) => {
                        counts.db_errors += 1;
                        log(format!("database error, rolled back: {e}"));
                    }
                }
            }
            Err(e) => {
                counts.db_errors += 1;
                log(format!("database error: {e}"));
            }
        }
        if let Err(e) = rt.block_on(ticket.release()) {
            counts.release_failures += 1;
            log(format!("release: {e}"));
        }
        if done {
            println!("{}", counts.result_line(&args.name));
            return ExitCode::SUCCESS;
        }
    }
}
