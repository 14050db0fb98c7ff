//! `ticketing`: run a command while holding a Ticketing lock, or check a server.
//!
//! ```text
//! ticketing [--addr HOST:PORT]... [--token-file F] [--tls MODE] [--tls-client-cert F --tls-client-key F] lock KEY [--shared N] --wait S --lease S [--budget S] -- CMD ARGS...
//! ticketing [--addr HOST:PORT]... [--token-file F] [--tls MODE] [--tls-client-cert F --tls-client-key F] lock --all KEY KEY... --wait S --lease S [--budget S] -- CMD ARGS...
//! ticketing [--addr HOST:PORT]... [--token-file F] [--tls MODE] [--tls-client-cert F --tls-client-key F] ping [--timeout S]
//! ticketing locks KEY --admin HOST:PORT [--admin-token-file F] [--admin-ca F]
//! ticketing cluster list|add PEER PEER|remove NODE NODE --admin HOST:PORT [--admin-token-file F] [--admin-ca F]
//! ticketing snapshot save FILE --admin HOST:PORT [--admin-token-file F] [--admin-ca F]
//! ```
//!
//! Exit codes (also in `docs/client.md`): CMD's own status once it ran, else
//! 64 usage / invalid argument, 69 unavailable, 70 internal, 73 cannot write the backup file, 75 not granted
//! within `--wait` (`T`), 76 busy (`B`), 77 indeterminate, 78 insufficient
//! time, 79 the lease ran out while CMD ran (CMD got SIGTERM), 80 auth failed,
//! 81 forbidden, 82 a membership change refused, 126 CMD could not be run, 127 CMD not found.
#![forbid(unsafe_code)]

#[path = "../cli_admin.rs"]
mod admin;

use clap::{Args, Parser, Subcommand};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ticketing_client::{Builder, Error, Ticket, TicketBroker, Tls};
use tokio::signal::unix::{signal, SignalKind};

/// Exit codes of `ticketing` (documented in docs/client.md).
mod code {
    pub const OK: u8 = 0;
    pub const USAGE: u8 = 64;
    pub const UNAVAILABLE: u8 = 69;
    pub const INTERNAL: u8 = 70;
    pub const TIMEOUT: u8 = 75;
    pub const BUSY: u8 = 76;
    pub const INDETERMINATE: u8 = 77;
    pub const INSUFFICIENT_TIME: u8 = 78;
    pub const LEASE_LOST: u8 = 79;
    pub const AUTH_FAILED: u8 = 80;
    pub const FORBIDDEN: u8 = 81;
    pub const REFUSED: u8 = 82;
    pub const CANNOT_WRITE: u8 = 73;
    pub const CANNOT_RUN: u8 = 126;
    pub const NOT_FOUND: u8 = 127;
}

/// Run a command while holding a Ticketing lock (the Ticketing answer to
/// `etcdctl lock` and `consul lock`), or check a server with `ping`.
#[derive(Debug, Parser)]
#[command(name = "ticketing", version)]
struct Cli {
    /// Server address host:port; repeat for a cluster; the env var is comma-separated.
    #[arg(
        long = "addr",
        value_name = "HOST:PORT",
        global = true,
        env = "TICKETING_ADDR",
        value_delimiter = ',',
        default_value = "127.0.0.1:5225"
    )]
    addrs: Vec<String>,
    /// File holding the client token on its first line.
    /// The token is never taken from the command line. Without it: no token.
    #[arg(long, value_name = "FILE", global = true, env = "TICKETING_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// TLS: off, system-roots, insecure-skip-verify, or the path of a CA file (PEM).
    #[arg(long, value_name = "MODE", global = true, env = "TICKETING_TLS", default_value = "off")]
    tls: String,
    /// Client certificate (PEM) for a server that requires one (with --tls-client-key and a TLS mode).
    #[arg(long, value_name = "FILE", global = true, env = "TICKETING_TLS_CLIENT_CERT")]
    tls_client_cert: Option<PathBuf>,
    /// Private key (PEM) of --tls-client-cert.
    #[arg(long, value_name = "FILE", global = true, env = "TICKETING_TLS_CLIENT_KEY")]
    tls_client_key: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Acquire KEY (one of N counted holders with --shared N; every KEY at
    /// once with --all), run CMD with TICKETING_TOKEN, TICKETING_KEY,
    /// TICKETING_KEYS, TICKETING_SLOT and TICKETING_DEADLINE_MS in its
    /// environment, release, exit with CMD's status. CMD gets SIGTERM when
    /// the lock's conservative deadline passes (exit 79).
    Lock(LockArgs),
    /// Connect, wait until a request could be routed, report the leader and the time it took.
    Ping(PingArgs),
    /// Who holds KEY and who waits for it, in FIFO order (owner prefixes only),
    /// from the leader's admin HTTP (a follower's is followed to the leader's).
    Locks(LocksArgs),
    /// The cluster's members (`list`), or a membership change asked of the leader: grow 3 → 5 voters with
    /// the nodes at two peer addresses (`add`), shrink 5 → 3 without two nodes (`remove`, NodeIds or peer
    /// addresses).
    Cluster(ClusterArgs),
    /// Backups: `save FILE` writes a checked backup of the leader's lock state (one log index, its domain and
    /// token high-water) for `ticketing-server --restore FILE`.
    Snapshot(SnapshotArgs),
}

#[derive(Debug, Args)]
struct SnapshotArgs {
    #[command(subcommand)]
    action: SnapshotAction,
}

#[derive(Debug, Subcommand)]
enum SnapshotAction {
    /// Write a backup of the leader's lock state to FILE (atomically: FILE appears whole or not at all).
    Save {
        /// Where to write it.
        file: PathBuf,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Args)]
struct AdminArgs {
    /// Admin HTTP address (a server's --admin-listen) host:port.
    #[arg(long, value_name = "HOST:PORT", env = "TICKETING_ADMIN")]
    admin: String,
    /// File holding the admin token on its first line (a server with --admin-token-file).
    #[arg(long, value_name = "FILE", env = "TICKETING_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// HTTPS to the admin port (a server with --admin-tls-cert), its certificate verified against the CA
    /// certificates (PEM) in FILE.
    #[arg(long, value_name = "FILE", env = "TICKETING_ADMIN_CA")]
    admin_ca: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ClusterArgs {
    #[command(subcommand)]
    change: ClusterChange,
}

#[derive(Debug, Subcommand)]
enum ClusterChange {
    /// The members: NodeId, voter or learner (the leader marked), peer, client and admin addresses.
    List {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Grow 3 → 5 voters: the two new nodes (started without --bootstrap, --peers listing all five)
    /// join as learners, catch up, then become voters in one step.
    Add {
        /// The new nodes' peer addresses.
        #[arg(num_args = 2, required = true, value_name = "PEER_ADDR")]
        peers: Vec<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Shrink 5 → 3 voters: two voters leave in one step (refused if it would lose the majority).
    Remove {
        /// NodeIds or peer addresses of the two voters that leave.
        #[arg(num_args = 2, required = true, value_name = "NODE")]
        nodes: Vec<String>,
        #[command(flatten)]
        admin: AdminArgs,
    },
}

#[derive(Debug, Args)]
struct LocksArgs {
    /// The lock's key.
    key: String,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Args)]
struct LockArgs {
    /// The lock's key (1-250 visible ASCII bytes, no space); 2-16 keys with --all.
    #[arg(required = true, num_args = 1.., value_name = "KEY")]
    keys: Vec<String>,
    /// Hold KEY as one of at most N counted holders (1-65535): a semaphore of N permits.
    #[arg(long, value_name = "N", conflicts_with = "all", allow_negative_numbers = true)]
    shared: Option<i64>,
    /// Hold every KEY at once (2-16 keys), with one token.
    #[arg(long)]
    all: bool,
    /// Seconds to wait in the server's queue (0-255; 0 = one immediate attempt). Fractions round up.
    #[arg(long, value_name = "SECS")]
    wait: f64,
    /// Lease in seconds (1-250). Fractions round up.
    #[arg(long, value_name = "SECS")]
    lease: f64,
    /// Least work time the lock must leave when granted (0-lease), else exit 78.
    #[arg(long, value_name = "SECS", default_value_t = 0.0)]
    budget: f64,
    /// After the SIGTERM sent at the deadline, send SIGKILL if CMD still runs this many seconds later
    /// (default: never).
    #[arg(long, value_name = "SECS")]
    kill_after: Option<f64>,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
struct PingArgs {
    /// Seconds to wait for a ready connection.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    timeout: f64,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { code::USAGE } else { code::OK });
        }
    };
    let status = ticketing_client::runtime().block_on(run(cli));
    ExitCode::from(status)
}

/// A usage error: message on stderr, exit 64.
fn usage(msg: impl std::fmt::Display) -> u8 {
    eprintln!("ticketing: {msg}");
    code::USAGE
}

/// The admin token and TLS roots of `--admin-token-file` / `--admin-ca`.
fn admin_access(a: &AdminArgs) -> Result<(Option<String>, Option<std::sync::Arc<rustls::ClientConfig>>), u8> {
    let token = a.admin_token_file.as_ref().map(read_token).transpose().map_err(usage)?;
    let tls = a.admin_ca.as_deref().map(admin::tls).transpose().map_err(usage)?;
    Ok((token, tls))
}

/// The exit code of an admin failure, its message on stderr.
fn admin_failure(what: &str, f: admin::Failure) -> u8 {
    let (m, status) = match f {
        admin::Failure::Usage(m) => return usage(m),
        admin::Failure::Unavailable(m) => (m, code::UNAVAILABLE),
        admin::Failure::AuthFailed(m) => (m, code::AUTH_FAILED),
        admin::Failure::Refused(m) => (m, code::REFUSED),
    };
    eprintln!("ticketing: {what}: {m}");
    status
}

/// `ticketing locks KEY`.
async fn locks(args: &LocksArgs) -> u8 {
    let (token, tls) = match admin_access(&args.admin) {
        Ok(a) => a,
        Err(c) => return c,
    };
    match admin::fetch(&args.admin.admin, &args.key, token.as_deref(), tls.as_ref()).await {
        Ok(v) => {
            print!("{}", admin::table(&args.key, &v));
            code::OK
        }
        Err(f) => admin_failure(&format!("locks {}", args.key), f),
    }
}

/// `ticketing cluster list|add|remove`.
async fn cluster(args: &ClusterArgs) -> u8 {
    let (what, change, at) = match &args.change {
        ClusterChange::List { admin } => ("cluster list", admin::Change::List, admin),
        ClusterChange::Add { peers, admin } => ("cluster add", admin::Change::Add(peers.clone()), admin),
        ClusterChange::Remove { nodes, admin } => ("cluster remove", admin::Change::Remove(nodes.clone()), admin),
    };
    let (token, tls) = match admin_access(at) {
        Ok(a) => a,
        Err(c) => return c,
    };
    match admin::cluster(&at.admin, &change, token.as_deref(), tls.as_ref()).await {
        Ok(v) => {
            print!("{}", admin::members_table(&v));
            code::OK
        }
        Err(f) => admin_failure(what, f),
    }
}

/// `ticketing snapshot save FILE`.
async fn snapshot(args: &SnapshotArgs) -> u8 {
    let SnapshotAction::Save { file, admin: at } = &args.action;
    let (token, tls) = match admin_access(at) {
        Ok(a) => a,
        Err(c) => return c,
    };
    let (bytes, header) = match admin::snapshot(&at.admin, token.as_deref(), tls.as_ref()).await {
        Ok(b) => b,
        Err(f) => return admin_failure("snapshot save", f),
    };
    let tmp = file.with_extension("partial");
    let written = std::fs::write(&tmp, &bytes)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        eprintln!("ticketing: snapshot save: cannot write {}: {e}", file.display());
        return code::CANNOT_WRITE;
    }
    println!(
        "saved {}: domain {}, applied index {}, {} held keys, token high-water {}, longest lease left {} ms",
        file.display(),
        header["domain"].as_str().unwrap_or("?"),
        header["applied_index"],
        header["held_keys"],
        header["last_token"],
        header["longest_lease_ms"],
    );
    code::OK
}

fn seconds(name: &str, v: f64) -> Result<Duration, u8> {
    Duration::try_from_secs_f64(v).map_err(|_| usage(format!("--{name} must be a finite number of seconds >= 0")))
}

async fn run(cli: Cli) -> u8 {
    match &cli.command {
        Command::Locks(args) => return locks(args).await,
        Command::Cluster(args) => return cluster(args).await,
        Command::Snapshot(args) => return snapshot(args).await,
        Command::Lock(_) | Command::Ping(_) => {}
    }
    let builder = match builder(&cli) {
        Ok(b) => b,
        Err(c) => return c,
    };
    // `lock` connects first (like `TicketBroker::connect`: until a request could
    // be routed or the first attempts settled), so `--wait 0` is one attempt at
    // the lock, not at the socket; `ping` measures the connection itself.
    let broker = match cli.command {
        Command::Lock(_) => builder.connect().await,
        Command::Ping(_) | Command::Locks(_) | Command::Cluster(_) | Command::Snapshot(_) => builder.build(),
    };
    let broker = match broker {
        Ok(b) => b,
        Err(e) => return usage(e),
    };
    let status = match cli.command {
        Command::Lock(args) => lock(&broker, args).await,
        Command::Ping(args) => ping(&broker, args).await,
        Command::Locks(_) | Command::Cluster(_) | Command::Snapshot(_) => code::INTERNAL, // answered above
    };
    broker.close().await;
    status
}

fn builder(cli: &Cli) -> Result<Builder, u8> {
    let tls: Tls = cli.tls.parse().map_err(usage)?;
    let mut builder = TicketBroker::builder(cli.addrs.iter().map(|a| a.trim().to_owned())).tls(tls);
    if let Some(path) = &cli.token_file {
        builder = builder.token(read_token(path).map_err(usage)?);
    }
    if let Some(cert) = &cli.tls_client_cert {
        builder = builder.tls_client_cert(cert);
    }
    if let Some(key) = &cli.tls_client_key {
        builder = builder.tls_client_key(key);
    }
    Ok(builder)
}

/// The token is the first line of the file (a trailing CR is dropped).
fn read_token(path: &PathBuf) -> Result<String, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("token file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim_end_matches('\r');
    if token.is_empty() {
        return Err(format!("token file {}: the first line is empty", path.display()));
    }
    Ok(token.to_owned())
}

/// The exit code and message of a failed acquire.
fn acquire_failure(key: &str, e: &Error) -> u8 {
    let c = match e {
        Error::Busy => code::BUSY,
        Error::Indeterminate => code::INDETERMINATE,
        Error::InsufficientTime => code::INSUFFICIENT_TIME,
        Error::Unavailable => code::UNAVAILABLE,
        Error::AuthFailed => code::AUTH_FAILED,
        Error::Forbidden { .. } => code::FORBIDDEN,
        Error::InvalidArgument(_) => code::USAGE,
        _ => code::INTERNAL,
    };
    eprintln!("ticketing: lock {key}: {e}");
    c
}

async fn lock(broker: &TicketBroker, args: LockArgs) -> u8 {
    let kill_after = match args.kill_after.map(|v| seconds("kill-after", v)).transpose() {
        Ok(k) => k,
        Err(c) => return c,
    };
    let label = args.keys.join(" ");
    let acquired = match (args.keys.as_slice(), args.shared, args.all) {
        (keys, _, true) => broker.acquire_all_secs(keys, args.wait, args.lease, args.budget).await,
        ([key], Some(n), false) => broker.acquire_shared_secs(key, n, args.wait, args.lease, args.budget).await,
        ([key], None, false) => broker.acquire_secs(key, args.wait, args.lease, args.budget).await,
        (_, Some(_), false) => return usage("--shared takes one KEY"),
        (_, None, false) => return usage("several KEYs are held together only with --all"),
    };
    let ticket = match acquired {
        Ok(Some(t)) => t,
        Ok(None) => {
            eprintln!("ticketing: lock {label}: not granted within --wait {} s", args.wait);
            return code::TIMEOUT;
        }
        Err(e) => {
            let c = acquire_failure(&label, &e);
            if e == Error::Unavailable {
                if let Some(last) = broker.status().await.and_then(|s| s.last_error) {
                    eprintln!("ticketing: last connection error: {last}");
                }
            }
            return c;
        }
    };
    let status = run_locked(&ticket, &args.command, kill_after).await;
    match ticket.release().await {
        Ok(true) => {}
        Ok(false) => {
            eprintln!("ticketing: lock {label}: the server no longer counted the lock as ours at release (expired)")
        }
        Err(e) => eprintln!("ticketing: lock {label}: {e}; the lock returns at lease end"),
    }
    status
}

/// Runs CMD under the lock; returns the exit code to report.
async fn run_locked(ticket: &Ticket, command: &[String], kill_after: Option<Duration>) -> u8 {
    let (program, rest) = match command.split_first() {
        Some(p) => p,
        None => return usage("a command is required after --"),
    };
    let (child, pid) = match spawn_locked(ticket, program, rest) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let (status, lost) = match supervise(ticket, program, child, pid, kill_after).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    if lost {
        return code::LEASE_LOST;
    }
    match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c & 0xff).unwrap_or(code::INTERNAL),
        (None, Some(sig)) => u8::try_from(128 + (sig & 0x7f)).unwrap_or(code::INTERNAL),
        (None, None) => code::INTERNAL,
    }
}

/// Starts CMD with the ticket in its environment; the exit code on failure.
fn spawn_locked(ticket: &Ticket, program: &str, rest: &[String]) -> Result<(tokio::process::Child, Pid), u8> {
    let deadline_ms = ticket.remaining().as_millis().min(u128::from(u64::MAX));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest)
        .env("TICKETING_TOKEN", ticket.token().to_string())
        .env("TICKETING_KEY", ticket.key())
        .env("TICKETING_KEYS", ticket.keys().join(" "))
        .env("TICKETING_DEADLINE_MS", deadline_ms.to_string());
    match ticket.slot() {
        Some(slot) => cmd.env("TICKETING_SLOT", slot.to_string()),
        None => cmd.env_remove("TICKETING_SLOT"),
    };
    let spawned = cmd.spawn();
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ticketing: cannot run {program}: {e}");
            return Err(if e.kind() == std::io::ErrorKind::NotFound { code::NOT_FOUND } else { code::CANNOT_RUN });
        }
    };
    let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw) else {
        eprintln!("ticketing: {program} has no process id");
        return Err(code::INTERNAL);
    };
    Ok((child, pid))
}

/// Waits for CMD, passing SIGTERM and SIGHUP on, and stops it (SIGTERM, then
/// SIGKILL after `kill_after`) when the lease runs out. Its exit status and
/// whether the lease was lost; the exit code on failure.
async fn supervise(
    ticket: &Ticket,
    program: &str,
    mut child: tokio::process::Child,
    pid: Pid,
    kill_after: Option<Duration>,
) -> Result<(std::process::ExitStatus, bool), u8> {
    let (mut sigterm, mut sighup, mut sigint) =
        match (signal(SignalKind::terminate()), signal(SignalKind::hangup()), signal(SignalKind::interrupt())) {
            (Ok(t), Ok(h), Ok(i)) => (t, h, i),
            _ => {
                eprintln!("ticketing: cannot install signal handlers; stopping {program}");
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(code::INTERNAL);
            }
        };
    let expired = ticket.expired();
    tokio::pin!(expired);
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        let kill_sleep = async {
            match kill_at {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = child.wait() => break status,
            _ = &mut expired, if !lost => {
                lost = true;
                // The child is not reaped yet (its wait did not complete), so the pid is still its own.
                let _ = kill(pid, Signal::SIGTERM);
                eprintln!(
                    "ticketing: lock {}: the lease ran out (conservative deadline); sent SIGTERM to {program} (pid {pid}); \
                     work from now on is protected only by the fencing token {}",
                    ticket.key(),
                    ticket.token()
                );
                kill_at = kill_after.map(|d| Instant::now() + d);
            }
            _ = kill_sleep => {
                kill_at = None;
                let _ = kill(pid, Signal::SIGKILL);
                eprintln!("ticketing: {program} (pid {pid}) still running after SIGTERM; sent SIGKILL");
            }
            _ = sigterm.recv() => { let _ = kill(pid, Signal::SIGTERM); }
            _ = sighup.recv() => { let _ = kill(pid, Signal::SIGHUP); }
            // Ctrl-C already reached CMD through the terminal's process group; keep waiting for it.
            _ = sigint.recv() => {}
        }
    };
    match status {
        Ok(s) => Ok((s, lost)),
        Err(e) => {
            eprintln!("ticketing: waiting for {program}: {e}");
            Err(code::INTERNAL)
        }
    }
}

async fn ping(broker: &TicketBroker, args: PingArgs) -> u8 {
    let timeout = match seconds("timeout", args.timeout) {
        Ok(t) => t,
        Err(c) => return c,
    };
    let start = Instant::now();
    let end = start.checked_add(timeout);
    loop {
        // In slices, so an authentication failure is reported at once, not after the timeout.
        let left = end.map(|e| e.saturating_duration_since(Instant::now())).unwrap_or(Duration::MAX);
        let ready = broker.wait_ready(left.min(Duration::from_millis(100))).await;
        let took = start.elapsed();
        let Some(status) = broker.status().await else {
            eprintln!("ticketing: ping: the broker closed");
            return code::INTERNAL;
        };
        if ready {
            println!(
                "ready in {:.1} ms (connect + handshake); leader {}",
                took.as_secs_f64() * 1000.0,
                status.leader.as_deref().unwrap_or("unknown")
            );
            return code::OK;
        }
        if status.settled && status.auth_failed {
            eprintln!(
                "ticketing: ping: authentication failed (wrong token, or the server could not prove it knows it)"
            );
            return code::AUTH_FAILED;
        }
        if left.is_zero() || end.map(|e| Instant::now() >= e).unwrap_or(false) {
            eprintln!("ticketing: ping: no ready connection within {:.1} s", timeout.as_secs_f64());
            if let Some(e) = status.last_error {
                eprintln!("ticketing: last connection error: {e}");
            }
            return code::UNAVAILABLE;
        }
    }
}
