//! Completing and validating the settings: [`Config::resolve`] and its steps.

use super::{admin_tokens, client_tokens, invalid, peer_tokens, Cli, Config, ConfigError, Limits};
use clap::{CommandFactory, FromArgMatches};
use std::net::ToSocketAddrs;
use std::time::Duration;
use ticketing_proto::limits::MAX_FRAME;
use ticketing_proto::Addr;

/// Why a cluster node without peer authentication does not start
/// (docs/security.md, "Peer authentication").
pub const PEER_AUTH_MISSING: &str = "cluster mode needs peer authentication (else anyone who reaches the peer port \
     joins the cluster): give a peer token (--peer-token-file FILE, or the environment variable \
     TICKETING_PEER_TOKEN) and/or mutual TLS between peers (--peer-tls-cert, --peer-tls-key, --peer-tls-ca)";

/// The most `--worker-threads` (tokio's own cap is far above any machine's cores).
const MAX_WORKER_THREADS: usize = 1024;

/// A listen address must be `host:port` that resolves (`--listen nonsense`
/// is a configuration error, exit 2; a port in use is a run-time error).
/// `--peers` trimmed, checked for the 3-or-5 rule and duplicates; `--bootstrap` needs them.
fn resolve_peers(peers: Vec<String>, bootstrap: bool) -> Result<Vec<String>, ConfigError> {
    let peers: Vec<String> = peers.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();
    if !peers.is_empty() && !crate::cluster::peer_count_ok(peers.len()) {
        return Err(invalid(
            "--peers",
            format!(
                "must list all members of the cluster, self included: exactly 3 or 5 addresses \
                 (or none for standalone mode), got {}",
                peers.len()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for p in &peers {
        if !seen.insert(p) {
            return Err(invalid("--peers", format!("lists {p:?} twice")));
        }
    }
    if bootstrap && peers.is_empty() {
        return Err(invalid("--bootstrap", "needs --peers (cluster mode)"));
    }
    Ok(peers)
}

/// The TLS options that only work together.
fn check_tls_options(cli: &Cli) -> Result<(), ConfigError> {
    if cli.tls_cert.is_some() != cli.tls_key.is_some() {
        return Err(invalid("--tls-cert", "--tls-cert and --tls-key must be given together"));
    }
    if cli.tls_client_ca.is_some() && cli.tls_cert.is_none() {
        return Err(invalid("--tls-client-ca", "client certificates need TLS on the client port (--tls-cert)"));
    }
    let given = [cli.peer_tls_cert.is_some(), cli.peer_tls_key.is_some(), cli.peer_tls_ca.is_some()];
    if given.iter().any(|g| *g) && !given.iter().all(|g| *g) {
        return Err(invalid(
            "--peer-tls-cert",
            "mutual TLS between peers needs all three of --peer-tls-cert, --peer-tls-key and --peer-tls-ca (or none)",
        ));
    }
    Ok(())
}

/// The limits with their defaults, each within its range.
fn resolve_limits(cli: &Cli) -> Result<Limits, ConfigError> {
    let dl = Limits::default();
    let limits = Limits {
        max_waiters_per_key: cli.max_waiters_per_key.unwrap_or(dl.max_waiters_per_key),
        max_waiters: cli.max_waiters.unwrap_or(dl.max_waiters),
        max_held_keys: cli.max_held_keys.unwrap_or(dl.max_held_keys),
        max_pending_per_conn: cli.max_pending_per_conn.unwrap_or(dl.max_pending_per_conn),
        max_connections: cli.max_connections.unwrap_or(dl.max_connections),
        max_write_buffer_bytes: cli.max_write_buffer_bytes.unwrap_or(dl.max_write_buffer_bytes),
        max_total_write_buffer_bytes: cli.max_total_write_buffer_bytes.unwrap_or(dl.max_total_write_buffer_bytes),
        max_peer_connections: cli.max_peer_connections.unwrap_or(dl.max_peer_connections),
        max_preauth_connections: cli.max_preauth_connections.unwrap_or(dl.max_preauth_connections),
        max_preauth_per_address: cli.max_preauth_per_address.unwrap_or(dl.max_preauth_per_address),
        max_peer_preauth_connections: cli.max_peer_preauth_connections.unwrap_or(dl.max_peer_preauth_connections),
        max_peer_preauth_per_address: cli.max_peer_preauth_per_address.unwrap_or(dl.max_peer_preauth_per_address),
        max_snapshot_bytes: cli.max_snapshot_bytes.unwrap_or(dl.max_snapshot_bytes),
        max_peer_in_flight_bytes_per_conn: cli
            .max_peer_in_flight_bytes_per_conn
            .unwrap_or(dl.max_peer_in_flight_bytes_per_conn),
        max_peer_in_flight_bytes: cli.max_peer_in_flight_bytes.unwrap_or(dl.max_peer_in_flight_bytes),
        tick_ms: cli.tick_ms.unwrap_or(dl.tick_ms),
        start_grace: start_grace(cli.start_grace)?,
    };

    if !(10..=60_000).contains(&limits.tick_ms) {
        return Err(invalid("--tick-ms", format!("must be in 10-60000 ms, got {}", limits.tick_ms)));
    }
    const MAX_LIMIT: usize = 1 << 30;
    for (name, value) in [
        ("--max-waiters-per-key", limits.max_waiters_per_key),
        ("--max-waiters", limits.max_waiters),
        ("--max-held-keys", limits.max_held_keys),
        ("--max-pending-per-conn", limits.max_pending_per_conn),
        ("--max-connections", limits.max_connections),
        ("--max-write-buffer-bytes", limits.max_write_buffer_bytes),
        ("--max-total-write-buffer-bytes", limits.max_total_write_buffer_bytes),
        ("--max-peer-connections", limits.max_peer_connections),
    ] {
        if value > MAX_LIMIT {
            return Err(invalid(name, format!("must be at most {MAX_LIMIT}, got {value}")));
        }
    }
    // A write buffer must hold at least one whole frame.
    if limits.max_write_buffer_bytes < MAX_FRAME {
        return Err(invalid(
            "--max-write-buffer-bytes",
            format!("must be at least {MAX_FRAME} (one frame), got {}", limits.max_write_buffer_bytes),
        ));
    }
    if limits.max_peer_connections == 0 {
        return Err(invalid("--max-peer-connections", "must be at least 1"));
    }
    if !(1 << 20..=1 << 40).contains(&limits.max_snapshot_bytes) {
        return Err(invalid(
            "--max-snapshot-bytes",
            format!("must be in {}-{} (1 MiB to 1 TiB), got {}", 1u64 << 20, 1u64 << 40, limits.max_snapshot_bytes),
        ));
    }
    for (name, value) in [
        ("--max-preauth-connections", limits.max_preauth_connections),
        ("--max-preauth-per-address", limits.max_preauth_per_address),
        ("--max-peer-preauth-connections", limits.max_peer_preauth_connections),
        ("--max-peer-preauth-per-address", limits.max_peer_preauth_per_address),
    ] {
        if !(1..=MAX_LIMIT).contains(&value) {
            return Err(invalid(name, format!("must be in 1-{MAX_LIMIT}, got {value}")));
        }
    }
    // A frame larger than the connection's budget closes it: keep the
    // budget above the largest frame (docs/configuration.md, "Limits").
    let (per_conn, total) = (limits.max_peer_in_flight_bytes_per_conn, limits.max_peer_in_flight_bytes);
    const MIN_PEER_BUDGET: usize = 1024 * 1024;
    if !(MIN_PEER_BUDGET..=1 << 40).contains(&per_conn) {
        return Err(invalid(
            "--max-peer-in-flight-bytes-per-conn",
            format!("must be in {MIN_PEER_BUDGET}-{} (1 MiB to 1 TiB), got {per_conn}", 1u64 << 40),
        ));
    }
    if !(per_conn..=1 << 40).contains(&total) {
        return Err(invalid(
            "--max-peer-in-flight-bytes",
            format!("must be in {per_conn}-{} (at least --max-peer-in-flight-bytes-per-conn), got {total}", 1u64 << 40),
        ));
    }
    Ok(limits)
}

/// Raft's heartbeat and election timeouts (ms), in the order they must keep.
fn raft_timing(cli: &Cli, d: &Config) -> Result<(u64, u64, u64), ConfigError> {
    let heartbeat_ms = cli.heartbeat_ms.unwrap_or(d.heartbeat_ms);
    let election_timeout_min_ms = cli.election_timeout_min_ms.unwrap_or(d.election_timeout_min_ms);
    let election_timeout_max_ms = cli.election_timeout_max_ms.unwrap_or(d.election_timeout_max_ms);
    if heartbeat_ms == 0 {
        return Err(invalid("--heartbeat-ms", "must be at least 1"));
    }
    if election_timeout_min_ms <= heartbeat_ms || election_timeout_max_ms <= election_timeout_min_ms {
        return Err(invalid(
            "--election-timeout-min-ms",
            format!(
                "timing must satisfy heartbeat-ms < election-timeout-min-ms < election-timeout-max-ms, \
                 got {heartbeat_ms} / {election_timeout_min_ms} / {election_timeout_max_ms}"
            ),
        ));
    }
    Ok((heartbeat_ms, election_timeout_min_ms, election_timeout_max_ms))
}

fn check_address(setting: &'static str, addr: &str) -> Result<(), ConfigError> {
    match addr.to_socket_addrs().map(|mut addrs| addrs.next()) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(invalid(setting, format!("{addr:?} resolves to no address"))),
        Err(e) => Err(invalid(setting, format!("{addr:?} is not a host:port address ({e})"))),
    }
}

/// A duration setting in seconds (fractions allowed): in (0, 3600].
fn seconds(setting: &'static str, given: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match given {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(invalid(setting, format!("must be a number of seconds in (0, 3600], got {s}"))),
    }
}

/// `--start-grace`: seconds (fractions allowed) in [0, the longest lease];
/// 0 when not given (docs/deployment.md, "Start grace").
fn start_grace(given: Option<f64>) -> Result<Duration, ConfigError> {
    let max = f64::from(ticketing_proto::limits::MAX_LEASE);
    match given {
        None => Ok(Duration::ZERO),
        Some(s) if s.is_finite() && (0.0..=max).contains(&s) => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(invalid("--start-grace", format!("must be a number of seconds in 0-{max}, got {s}"))),
    }
}

impl Config {
    /// Parses the process's arguments and environment, reads the config
    /// file and token files, validates. `--help`/`--version` and clap's
    /// usage errors exit the process (usage errors with code 2).
    pub fn load() -> Result<Config, ConfigError> {
        let matches = Config::command().get_matches();
        Config::resolve(Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit()))
    }

    /// The command line, its help texts completed with the defaults of [`Config::default`].
    pub fn command() -> clap::Command {
        let d = Config::default();
        let defaults = [
            ("listen", d.listen.clone()),
            ("admin_max_connections", d.admin_max_connections.to_string()),
            ("max_waiters_per_key", d.limits.max_waiters_per_key.to_string()),
            ("max_waiters", d.limits.max_waiters.to_string()),
            ("max_held_keys", d.limits.max_held_keys.to_string()),
            ("max_pending_per_conn", d.limits.max_pending_per_conn.to_string()),
            ("max_connections", d.limits.max_connections.to_string()),
            ("handshake_timeout", d.handshake_timeout.as_secs_f64().to_string()),
            ("max_write_buffer_bytes", d.limits.max_write_buffer_bytes.to_string()),
            ("max_total_write_buffer_bytes", d.limits.max_total_write_buffer_bytes.to_string()),
            ("max_peer_connections", d.limits.max_peer_connections.to_string()),
            ("max_preauth_connections", d.limits.max_preauth_connections.to_string()),
            ("max_preauth_per_address", d.limits.max_preauth_per_address.to_string()),
            ("max_peer_preauth_connections", d.limits.max_peer_preauth_connections.to_string()),
            ("max_peer_preauth_per_address", d.limits.max_peer_preauth_per_address.to_string()),
            ("max_snapshot_bytes", d.limits.max_snapshot_bytes.to_string()),
            ("max_peer_in_flight_bytes_per_conn", d.limits.max_peer_in_flight_bytes_per_conn.to_string()),
            ("max_peer_in_flight_bytes", d.limits.max_peer_in_flight_bytes.to_string()),
            ("peer_handshake_timeout", d.peer_handshake_timeout.as_secs_f64().to_string()),
            ("peer_frame_timeout", d.peer_frame_timeout.as_secs_f64().to_string()),
            ("heartbeat_ms", d.heartbeat_ms.to_string()),
            ("election_timeout_min_ms", d.election_timeout_min_ms.to_string()),
            ("election_timeout_max_ms", d.election_timeout_max_ms.to_string()),
            ("tick_ms", d.limits.tick_ms.to_string()),
            ("start_grace", d.limits.start_grace.as_secs_f64().to_string()),
        ];
        let mut cmd = Cli::command();
        for (id, value) in defaults {
            cmd = cmd.mut_arg(id, |a| {
                let help = a.get_help().map(ToString::to_string).unwrap_or_default();
                a.help(format!("{help} [default: {value}]"))
            });
        }
        cmd
    }

    /// Completes `cli` (flags and environment) with the config file and
    /// defaults, reads the token files and validates everything. Steps:
    /// the file, the TLS options, the limits, the timing, the cluster
    /// membership, the token files, the addresses.
    pub fn resolve(cli: Cli) -> Result<Config, ConfigError> {
        let cli = cli.with_file()?;
        let d = Config::default();
        check_tls_options(&cli)?;
        let mut limits = resolve_limits(&cli)?;
        let restore = match &cli.restore {
            None => None,
            Some(_) if !cli.bootstrap => {
                return Err(invalid("--restore", "builds a new domain: it needs --bootstrap (and --peers)"))
            }
            Some(path) => {
                let (header, data) = crate::backup::read(path).map_err(|e| invalid("--restore", e))?;
                Some(std::sync::Arc::new(super::Restore { path: path.clone(), header, data }))
            }
        };
        // A restored domain holds back its grants for the backup's longest
        // lease unless --start-grace says otherwise.
        if let (Some(r), None) = (&restore, cli.start_grace) {
            limits.start_grace = Duration::from_millis(r.header.longest_lease_ms);
        }
        let handshake_timeout = seconds("--handshake-timeout", cli.handshake_timeout, d.handshake_timeout)?;
        let peer_handshake_timeout =
            seconds("--peer-handshake-timeout", cli.peer_handshake_timeout, d.peer_handshake_timeout)?;
        let peer_frame_timeout = seconds("--peer-frame-timeout", cli.peer_frame_timeout, d.peer_frame_timeout)?;
        let (heartbeat_ms, election_timeout_min_ms, election_timeout_max_ms) = raft_timing(&cli, &d)?;

        let listen = cli.listen.unwrap_or(d.listen);
        let advertise = match cli.advertise {
            Some(a) => Some(Addr::new(a.clone()).map_err(|_| {
                invalid("--advertise", format!("{a:?} must be host:port, 1-255 visible ASCII bytes without spaces"))
            })?),
            None => None,
        };
        let peers = resolve_peers(cli.peers.unwrap_or_default(), cli.bootstrap)?;
        let client_tokens = client_tokens(cli.client_tokens_file.as_deref())?;
        let principals = crate::principal::Principals::load(client_tokens.clone(), &cli.principal)?;
        let peer_tokens = peer_tokens(cli.peer_token_file.as_deref())?;
        let admin_tokens = admin_tokens(cli.admin_token_file.as_deref())?;
        if cli.admin_tls_cert.is_some() != cli.admin_tls_key.is_some() {
            return Err(invalid("--admin-tls-cert", "--admin-tls-cert and --admin-tls-key go together"));
        }
        let admin_max_connections = cli.admin_max_connections.unwrap_or(d.admin_max_connections);
        let min_admin = crate::admin::accept::MIN_CONNECTIONS;
        if !(min_admin..=1 << 20).contains(&admin_max_connections) {
            return Err(invalid(
                "--admin-max-connections",
                format!("must be in {min_admin}-{}, got {admin_max_connections}", 1 << 20),
            ));
        }
        let data_dir = cli.data_dir;
        if data_dir.as_ref().is_some_and(|d| d.as_os_str().is_empty()) {
            return Err(invalid("--data-dir", "must name a directory"));
        }

        let peer_listen = cli.peer_listen;
        if !peers.is_empty() && peer_listen.is_none() {
            return Err(invalid("--peer-listen", "cluster mode (--peers) needs --peer-listen"));
        }
        let insecure_unauthenticated_peers = cli.insecure_unauthenticated_peers;
        if !peers.is_empty() && peer_tokens.is_empty() && cli.peer_tls_cert.is_none() && !insecure_unauthenticated_peers
        {
            return Err(invalid("--peer-token-file", PEER_AUTH_MISSING));
        }
        let admin_listen = cli.admin_listen;
        let worker_threads = match cli.worker_threads {
            Some(n) if !(1..=MAX_WORKER_THREADS).contains(&n) => {
                return Err(invalid("--worker-threads", format!("must be in 1-{MAX_WORKER_THREADS}, got {n}")));
            }
            n => n,
        };
        check_address("--listen", &listen)?;
        for (setting, addr) in [("--peer-listen", &peer_listen), ("--admin-listen", &admin_listen)] {
            if let Some(addr) = addr {
                check_address(setting, addr)?;
            }
        }

        Ok(Config {
            listen,
            advertise,
            peer_listen,
            peers,
            bootstrap: cli.bootstrap,
            restore,
            data_dir,
            client_tokens,
            client_tokens_file: cli.client_tokens_file,
            principals,
            config_file: cli.config,
            peer_tokens,
            peer_token_file: cli.peer_token_file,
            insecure_unauthenticated_peers,
            tls_cert: cli.tls_cert,
            tls_key: cli.tls_key,
            tls_client_ca: cli.tls_client_ca,
            peer_tls_cert: cli.peer_tls_cert,
            peer_tls_key: cli.peer_tls_key,
            peer_tls_ca: cli.peer_tls_ca,
            admin_listen,
            admin_tokens,
            admin_token_file: cli.admin_token_file,
            admin_tls_cert: cli.admin_tls_cert,
            admin_tls_key: cli.admin_tls_key,
            admin_max_connections,
            limits,
            handshake_timeout,
            peer_handshake_timeout,
            peer_frame_timeout,
            heartbeat_ms,
            election_timeout_min_ms,
            election_timeout_max_ms,
            worker_threads,
        })
    }

    /// Standalone mode: no peers.
    pub fn is_standalone(&self) -> bool {
        self.peers.is_empty()
    }
}
