//! A ticket seller in Rust: sells seats of one event until none is left.
//!
//! Each sale: take the lock on the event key, read the stock, then in ONE
//! database transaction guarded by the fence (`docs/fencing.md`) record the
//! seat and decrement the stock; commit; release. With `--basket K`: K
//! unsold seats at once, under the locks of every seat (`acquire_all`),
//! fenced per seat. With `--general N`: a permit of a semaphore of N on the
//! event key (`acquire_shared`), and a seat of the box-office window of its
//! slot, fenced per (key, slot). Run by `examples/ticket-sale/demo`; the
//! arguments are described in `examples/README.md`.

use clap::Parser;
use rand_core::{OsRng, RngCore};
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ticketing_client::{Error, Ticket, TicketBroker};

mod store;
use store::{seat_key, Store};

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
    /// Basket mode: K seats (2-16) at once, under the lock of every seat.
    #[arg(long, value_parser = clap::value_parser!(u16).range(2..=16), conflicts_with = "general")]
    basket: Option<u16>,
    /// General admission: a semaphore of N permits (1-1000) on the event key, one box-office window per slot.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    general: Option<u16>,
}

#[derive(Default)]
struct Counts {
    /// Seats sold (a basket counts each of its seats).
    sold: u64,
    fence_refusals: u64,
    timeouts: u64,
    busy: u64,
    indeterminate: u64,
    unavailable: u64,
    insufficient_time: u64,
    release_failures: u64,
    db_errors: u64,
    /// Basket mode: a seat of the basket was sold by another seller before the locks were granted.
    basket_conflicts: u64,
}

impl Counts {
    fn result_line(&self, name: &str) -> String {
        format!(
            "RESULT name={name} sold={} fence_refusals={} timeouts={} busy={} indeterminate={} unavailable={} \
             insufficient_time={} release_failures={} db_errors={} basket_conflicts={}",
            self.sold,
            self.fence_refusals,
            self.timeouts,
            self.busy,
            self.indeterminate,
            self.unavailable,
            self.insufficient_time,
            self.release_failures,
            self.db_errors,
            self.basket_conflicts
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

/// What one acquire came to.
enum Got {
    Ticket(Box<Ticket>),
    /// Not granted, or a failure to retry (counted, backed off).
    Again,
    /// A failure no retry helps.
    Fatal,
}

impl Counts {
    /// Counts and handles every outcome of an acquire the libraries define.
    fn outcome(&mut self, got: Result<Option<Ticket>, Error>, backoff: &mut Backoff, log: &dyn Fn(String)) -> Got {
        match got {
            Ok(Some(t)) => {
                backoff.reset();
                Got::Ticket(Box::new(t))
            }
            Ok(None) => {
                self.timeouts += 1;
                Got::Again
            }
            Err(e) => {
                match e {
                    Error::Busy => self.busy += 1,
                    // Maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
                    Error::Indeterminate => self.indeterminate += 1,
                    Error::Unavailable => self.unavailable += 1,
                    Error::InsufficientTime => self.insufficient_time += 1,
                    other => {
                        log(format!("acquire failed: {other}"));
                        return Got::Fatal;
                    }
                }
                backoff.sleep();
                Got::Again
            }
        }
    }
}

/// The `HOLDING` pause of `--pause-after-sales`: once, at the first grant after that many sales.
fn maybe_pause(args: &Args, counts: &Counts, paused: &mut bool, what: std::fmt::Arguments<'_>) {
    if !*paused && args.pause_after_sales.is_some_and(|n| counts.sold >= n) {
        *paused = true;
        println!("HOLDING {what}");
        let _ = std::io::stdout().flush();
        let _ = std::io::stdin().lock().read_line(&mut String::new());
    }
}

/// `k` distinct seats of `unsold`, drawn at random, in random order.
fn pick(mut unsold: Vec<i64>, k: usize) -> Vec<i64> {
    let k = k.min(unsold.len());
    for i in 0..k {
        let j = i + (OsRng.next_u64() % (unsold.len() - i) as u64) as usize;
        unsold.swap(i, j);
    }
    unsold.truncate(k);
    unsold
}

fn release(rt: &tokio::runtime::Runtime, ticket: Ticket, counts: &mut Counts, log: &dyn Fn(String)) {
    if let Err(e) = rt.block_on(ticket.release()) {
        counts.release_failures += 1;
        log(format!("release: {e}"));
    }
}

fn sell(args: &Args, store: &mut Store, rt: &tokio::runtime::Runtime, broker: &TicketBroker) -> ExitCode {
    if args.basket.is_some() || args.general.is_some() {
        return sell_many(args, store, rt, broker);
    }
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
                    // Maybe granted, maybe not: never enter. The client releases such a grant within 5 s.
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

/// Basket mode (`--basket K`) and general admission (`--general N`).
fn sell_many(args: &Args, store: &mut Store, rt: &tokio::runtime::Runtime, broker: &TicketBroker) -> ExitCode {
    let log = |msg: String| eprintln!("{}: {msg}", args.name);
    let (wait, lease, budget) =
        (Duration::from_secs(args.wait), Duration::from_secs(args.lease), Duration::from_secs(1));
    let end = Instant::now() + Duration::from_secs_f64(args.deadline);
    let mut counts = Counts::default();
    let mut backoff = Backoff(Duration::from_millis(50));
    let mut paused = false;
    // General admission: permits whose window is sold out, kept while the
    // seller asks for another (so the next grant has another slot).
    let mut empty: Vec<Ticket> = Vec::new();
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
        if let Some(k) = args.basket {
            // Basket: K of the seats without a sale, locked all at once.
            let unsold = match store.unsold_seats(&args.event) {
                Ok(u) => u,
                Err(e) => {
                    counts.db_errors += 1;
                    log(format!("database error: {e}"));
                    backoff.sleep();
                    continue;
                }
            };
            if unsold.is_empty() {
                println!("{}", counts.result_line(&args.name));
                return ExitCode::SUCCESS;
            }
            let seats = pick(unsold, usize::from(k));
            let keys: Vec<String> = seats.iter().map(|&s| seat_key(&args.event, s)).collect();
            let got = if keys.len() == 1 {
                rt.block_on(broker.acquire(&keys[0], wait, lease, budget))
            } else {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                rt.block_on(broker.acquire_all(&keys, wait, lease, budget))
            };
            let ticket = match counts.outcome(got, &mut backoff, &log) {
                Got::Ticket(t) => *t,
                Got::Again => continue,
                Got::Fatal => {
                    println!("{}", counts.result_line(&args.name));
                    return ExitCode::from(1);
                }
            };
            let token = ticket.token();
            match store.sold_among(&args.event, &seats) {
                // Another seller sold one of them between our read and our grant.
                Ok(n) if n > 0 => counts.basket_conflicts += 1,
                Ok(_) => {
                    let list = seats.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
                    maybe_pause(args, &counts, &mut paused, format_args!("token={token} seats={list}"));
                    std::thread::sleep(Duration::from_millis(args.work_ms));
                    match store.sell_basket(&args.event, token, &seats, &args.name, !args.no_fence) {
                        Ok(true) => counts.sold += seats.len() as u64,
                        Ok(false) => {
                            counts.fence_refusals += 1;
                            log(format!("fence refused token {token} (seats {list}): a newer holder wrote first"));
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
            release(rt, ticket, &mut counts, &log);
        } else if let Some(n) = args.general {
            // General admission: the event's stock is exact (decremented in
            // the database), so it says when the sale is over.
            match store.read_stock(&args.event) {
                Ok((remaining, _)) if remaining <= 0 => {
                    for t in empty.drain(..) {
                        release(rt, t, &mut counts, &log);
                    }
                    println!("{}", counts.result_line(&args.name));
                    return ExitCode::SUCCESS;
                }
                Ok(_) => {}
                Err(e) => {
                    counts.db_errors += 1;
                    log(format!("database error: {e}"));
                    backoff.sleep();
                    continue;
                }
            }
            let got = rt.block_on(broker.acquire_shared(&args.event, n, wait, lease, budget));
            let ticket = match counts.outcome(got, &mut backoff, &log) {
                Got::Ticket(t) => *t,
                Got::Again => {
                    for t in empty.drain(..) {
                        release(rt, t, &mut counts, &log);
                    }
                    continue;
                }
                Got::Fatal => {
                    println!("{}", counts.result_line(&args.name));
                    return ExitCode::from(1);
                }
            };
            let (token, slot) = (ticket.token(), ticket.slot().unwrap_or(0));
            match store.read_window(&args.event, slot) {
                Ok((remaining, _)) if remaining <= 0 => {
                    // This window is sold out: keep its permit and ask for another.
                    empty.push(ticket);
                    continue;
                }
                Ok((remaining, seats)) => {
                    // Window `slot` sells the seats slot+1, slot+1+N, slot+1+2N, ...
                    let seat = i64::from(slot) + 1 + i64::from(n) * (seats - remaining);
                    maybe_pause(args, &counts, &mut paused, format_args!("token={token} seat={seat} slot={slot}"));
                    std::thread::sleep(Duration::from_millis(args.work_ms));
                    match store.sell_general(&args.event, slot, token, seat, remaining, &args.name, !args.no_fence) {
                        Ok(true) => counts.sold += 1,
                        Ok(false) => {
                            counts.fence_refusals += 1;
                            log(format!(
                                "fence refused token {token} (slot {slot}, seat {seat}): a newer holder of the slot wrote first"
                            ));
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
            release(rt, ticket, &mut counts, &log);
            for t in empty.drain(..) {
                release(rt, t, &mut counts, &log);
            }
        }
    }
}
