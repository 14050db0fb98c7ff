//! Configuration (docs/configuration.md, "Sources and precedence" and "Limits"): every
//! flag, its `TICKETING_<FLAG>` environment variable and its key in the
//! `--config` TOML file.
//!
//! Precedence: flag > environment > config file > default. Each setting is
//! defined once, as a field of [`Cli`]: its flag, its variable and its file
//! key (clap reads flag and environment; serde reads the same struct from the
//! TOML file, and [`Cli::with_file`] lays the given flags over it).
//! [`Config::resolve`] then fills what is still missing from the defaults and
//! validates. Tokens never go on the command
//! line: client tokens come from `--client-tokens-file` and/or
//! `TICKETING_CLIENT_TOKENS`, the peer token from `--peer-token-file` or
//! `TICKETING_PEER_TOKEN`. The defaults are defined once, in
//! [`Config::default`] (the protocol's shared numbers come from
//! `ticketing_proto::limits`); the help texts show them from there.

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::io;
use std::net::ToSocketAddrs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use ticketing_proto::auth::Secret;
use ticketing_proto::limits::{HANDSHAKE_TIMEOUT, MAX_FRAME, MAX_PENDING_PER_CONN};
use ticketing_proto::Addr;

/// Default client address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5225";

/// A configuration error. The binary prints it and exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file named by a setting cannot be read.
    Read {
        /// What the file is (`config file`, `token file`, …).
        what: &'static str,
        /// Its path.
        path: PathBuf,
        /// Why.
        kind: io::ErrorKind,
    },
    /// The config file is not valid TOML, or has an unknown key or a value of the wrong type.
    File {
        /// Its path.
        path: PathBuf,
        /// What is wrong, as the TOML parser says it.
        problem: String,
    },
    /// An environment variable is not valid UTF-8.
    NotUnicode(&'static str),
    /// A setting's value breaks its rule.
    Invalid {
        /// The flag (`--peers`, …).
        setting: &'static str,
        /// The rule and the value given.
        problem: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { what, path, kind } => write!(f, "cannot read {what} {}: {kind}", path.display()),
            ConfigError::File { path, problem } => write!(f, "config file {}: {problem}", path.display()),
            ConfigError::NotUnicode(var) => write!(f, "{var} is not valid UTF-8"),
            ConfigError::Invalid { setting, problem } => write!(f, "{setting}: {problem}"),
        }
    }
}

impl std::error::Error for ConfigError {}

fn invalid(setting: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { setting, problem: problem.into() }
}

fn read(what: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError::Read { what, path: path.to_owned(), kind: e.kind() })
}

/// Every setting of `ticketing-server`, defined once: a flag, the variable
/// `TICKETING_<FLAG>` and a key of the `--config` file (the flag's name, `_`
/// or `-`). `None` = not given.
#[derive(Debug, Default, Parser, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(
    name = "ticketing-server",
    version,
    about = "Ticketing: a distributed FIFO lock service with fencing tokens",
    after_help = "SIGHUP re-reads the token files and every certificate, key and CA file.\n\
                  Test certificates: ticketing-server gen-certs --dir DIR [--nodes N] [--hosts H1,H2,...] \
                  (see gen-certs --help)."
)]
pub struct Cli {
    /// TOML file with any of the settings below (keys = flag names, `_` or `-`).
    #[arg(long, env = "TICKETING_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Client address to listen on.
    #[arg(long, env = "TICKETING_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// Client address announced in `M` and `L` [default: the bound listen address].
    #[arg(long, env = "TICKETING_ADVERTISE", value_name = "ADDR")]
    pub advertise: Option<String>,
    /// Peer port address (cluster mode).
    #[arg(long, env = "TICKETING_PEER_LISTEN", value_name = "ADDR")]
    pub peer_listen: Option<String>,
    /// Peer addresses of ALL members, self included: 3 or 5, comma separated.
    #[arg(long, env = "TICKETING_PEERS", value_name = "A,B,C", value_delimiter = ',')]
    #[serde(deserialize_with = "peer_list")]
    pub peers: Option<Vec<String>>,
    /// Create a new fencing domain (first start of a new cluster only).
    #[arg(long, env = "TICKETING_BOOTSTRAP", action = ArgAction::SetTrue)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub bootstrap: bool,
    /// Durable mode: keep identity, Raft vote, log and snapshots (or the standalone journal) in DIR, fsynced (docs/deployment.md, "Durability").
    #[arg(long, env = "TICKETING_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// File with the accepted client tokens, one per line (also env TICKETING_CLIENT_TOKENS, comma separated).
    #[arg(long, env = "TICKETING_CLIENT_TOKENS_FILE", value_name = "FILE")]
    pub client_tokens_file: Option<PathBuf>,
    /// File with the peer token (or env TICKETING_PEER_TOKEN); during a rotation two lines: the first is sent, both are accepted.
    #[arg(long, env = "TICKETING_PEER_TOKEN_FILE", value_name = "FILE")]
    pub peer_token_file: Option<PathBuf>,
    /// Run a cluster node with NO peer authentication (no peer token, no peer TLS): anyone who reaches the peer
    /// port can join the cluster and forge grants. For throw-away tests only; warned about at every start.
    #[arg(long, env = "TICKETING_INSECURE_UNAUTHENTICATED_PEERS", action = ArgAction::SetTrue)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub insecure_unauthenticated_peers: bool,
    /// PEM certificate chain: TLS on the client port (with --tls-key).
    #[arg(long, env = "TICKETING_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "TICKETING_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA file (PEM): clients must present a certificate it signed (mutual TLS on the client port; needs --tls-cert).
    #[arg(long, env = "TICKETING_TLS_CLIENT_CA", value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// PEM certificate chain of this node on the peer port (mutual TLS between peers: with --peer-tls-key and --peer-tls-ca).
    #[arg(long, env = "TICKETING_PEER_TLS_CERT", value_name = "FILE")]
    pub peer_tls_cert: Option<PathBuf>,
    /// PEM private key for --peer-tls-cert.
    #[arg(long, env = "TICKETING_PEER_TLS_KEY", value_name = "FILE")]
    pub peer_tls_key: Option<PathBuf>,
    /// CA file (PEM) that signed every peer's certificate (mutual TLS between peers).
    #[arg(long, env = "TICKETING_PEER_TLS_CA", value_name = "FILE")]
    pub peer_tls_ca: Option<PathBuf>,
    /// Admin HTTP address (/metrics, /healthz, /status, /locks/<key>).
    #[arg(long, env = "TICKETING_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Waiters per key; over it → `B`.
    #[arg(long, env = "TICKETING_MAX_WAITERS_PER_KEY", value_name = "N")]
    pub max_waiters_per_key: Option<usize>,
    /// Waiters per server; over it → `B`.
    #[arg(long, env = "TICKETING_MAX_WAITERS", value_name = "N")]
    pub max_waiters: Option<usize>,
    /// Held keys per server; over it → `B`.
    #[arg(long, env = "TICKETING_MAX_HELD_KEYS", value_name = "N")]
    pub max_held_keys: Option<usize>,
    /// In-flight requests per connection; over it → `E too_many_pending`.
    #[arg(long, env = "TICKETING_MAX_PENDING_PER_CONN", value_name = "N")]
    pub max_pending_per_conn: Option<usize>,
    /// Client connections; over it → `E overloaded`.
    #[arg(long, env = "TICKETING_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds (fractions allowed) to complete AUTH.
    #[arg(long, env = "TICKETING_HANDSHAKE_TIMEOUT", value_name = "SECONDS")]
    pub handshake_timeout: Option<f64>,
    /// Answer bytes a client may leave unread; over it the connection is closed.
    #[arg(long, env = "TICKETING_MAX_WRITE_BUFFER_BYTES", value_name = "BYTES")]
    pub max_write_buffer_bytes: Option<usize>,
    /// Connections on the peer port (handshaking included); over it → `E overloaded`, close.
    #[arg(long, env = "TICKETING_MAX_PEER_CONNECTIONS", value_name = "N")]
    pub max_peer_connections: Option<usize>,
    /// Request bytes one accepted peer connection may have in flight (read, not yet answered); over it → closed.
    #[arg(long, env = "TICKETING_MAX_PEER_IN_FLIGHT_BYTES_PER_CONN", value_name = "BYTES")]
    pub max_peer_in_flight_bytes_per_conn: Option<usize>,
    /// Request bytes all accepted peer connections together may have in flight; over it → the connection that
    /// crossed it is closed.
    #[arg(long, env = "TICKETING_MAX_PEER_IN_FLIGHT_BYTES", value_name = "BYTES")]
    pub max_peer_in_flight_bytes: Option<usize>,
    /// Seconds (fractions allowed) an accepted peer has to complete its handshake.
    #[arg(long, env = "TICKETING_PEER_HANDSHAKE_TIMEOUT", value_name = "SECONDS")]
    pub peer_handshake_timeout: Option<f64>,
    /// Seconds (fractions allowed) a started peer frame has to arrive whole.
    #[arg(long, env = "TICKETING_PEER_FRAME_TIMEOUT", value_name = "SECONDS")]
    pub peer_frame_timeout: Option<f64>,
    /// Raft heartbeat interval, ms.
    #[arg(long, env = "TICKETING_HEARTBEAT_MS", value_name = "MS")]
    pub heartbeat_ms: Option<u64>,
    /// Raft election timeout lower bound, ms.
    #[arg(long, env = "TICKETING_ELECTION_TIMEOUT_MIN_MS", value_name = "MS")]
    pub election_timeout_min_ms: Option<u64>,
    /// Raft election timeout upper bound, ms.
    #[arg(long, env = "TICKETING_ELECTION_TIMEOUT_MAX_MS", value_name = "MS")]
    pub election_timeout_max_ms: Option<u64>,
    /// The leader commits a `Tick` after this many ms without any other commit (domain time), ms.
    #[arg(long, env = "TICKETING_TICK_MS", value_name = "MS")]
    pub tick_ms: Option<u64>,
    /// Seconds (0-250, fractions allowed) a new domain grants nothing after it can serve (memory mode restarts).
    #[arg(long, env = "TICKETING_START_GRACE", value_name = "SECONDS")]
    pub start_grace: Option<f64>,
}

/// `peers` in the TOML file: a list or one comma-separated string.
fn peer_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum PeerList {
        List(Vec<String>),
        Text(String),
    }
    Ok(Option::<PeerList>::deserialize(d)?.map(|p| match p {
        PeerList::List(list) => list,
        PeerList::Text(text) => text.split(',').map(str::to_owned).collect(),
    }))
}

impl Cli {
    /// The settings of the `--config` file with the given flags and
    /// variables laid over them (a flag or variable beats the file).
    pub fn with_file(self) -> Result<Cli, ConfigError> {
        let Some(path) = self.config.clone() else { return Ok(self) };
        let text = read("config file", &path)?;
        let file_error = |problem: String| ConfigError::File { path: path.clone(), problem };
        let table: toml::Table = text.parse().map_err(|e| file_error(format!("not valid TOML: {e}")))?;
        let mut merged = toml::Table::new();
        for (k, v) in table {
            let key = k.replace('-', "_");
            if merged.insert(key.clone(), v).is_some() {
                return Err(file_error(format!("key {key:?} given twice")));
            }
        }
        // Type-check the file alone first, so its errors name the file.
        let _: Cli =
            toml::Value::Table(merged.clone()).try_into().map_err(|e: toml::de::Error| file_error(e.to_string()))?;
        // Settings not given serialize to nothing and leave the file's value.
        let given = toml::Table::try_from(&self)
            .map_err(|e| invalid("command line", format!("a value does not fit a setting: {e}")))?;
        merged.extend(given);
        let mut cli: Cli =
            toml::Value::Table(merged).try_into().map_err(|e: toml::de::Error| file_error(e.to_string()))?;
        cli.config = Some(path);
        Ok(cli)
    }
}

/// The limits of docs/configuration.md, "Limits".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Waiters per key; over it → `B`.
    pub max_waiters_per_key: usize,
    /// Waiters per server; over it → `B`.
    pub max_waiters: usize,
    /// Held keys per server; over it → `B`.
    pub max_held_keys: usize,
    /// In-flight requests per connection; over it → `E too_many_pending`.
    pub max_pending_per_conn: usize,
    /// Client connections; over it → `E overloaded`.
    pub max_connections: usize,
    /// Answer bytes waiting for a client that does not read them; over it → closed.
    pub max_write_buffer_bytes: usize,
    /// Peer-port connections; over it → `E overloaded`, closed.
    pub max_peer_connections: usize,
    /// Request bytes in flight on one accepted peer connection; over it → closed.
    pub max_peer_in_flight_bytes_per_conn: usize,
    /// Request bytes in flight on all accepted peer connections; over it → the one that crossed it is closed.
    pub max_peer_in_flight_bytes: usize,
    /// Domain time (docs/protocol.md, "Domain time"): the leader commits a
    /// `Tick` after this many ms without any other commit.
    pub tick_ms: u64,
    /// The start grace (docs/deployment.md, "Start grace"): a new domain
    /// grants nothing before its domain time reaches this. A durable node
    /// (it remembers its holders) sets 0.
    pub start_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_waiters_per_key: 1024,
            max_waiters: 100_000,
            max_held_keys: 1_000_000,
            max_pending_per_conn: MAX_PENDING_PER_CONN,
            max_connections: 10_000,
            max_write_buffer_bytes: 1024 * 1024,
            max_peer_connections: 64,
            // One leader's AppendEntries (openraft keeps up to 9 in flight
            // with the late answers, each ≤ 300 entries of ≤ 32 KiB) plus a
            // 3 MiB snapshot chunk: about 90 MiB (docs/configuration.md, "Limits").
            max_peer_in_flight_bytes_per_conn: 128 * 1024 * 1024,
            max_peer_in_flight_bytes: 256 * 1024 * 1024,
            tick_ms: 500,
            start_grace: Duration::ZERO,
        }
    }
}

/// The resolved configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Client address to bind (`host:port`).
    pub listen: String,
    /// Client address announced in `M`/`L`; `None` = the bound listen address.
    pub advertise: Option<Addr>,
    /// Peer port address (cluster mode).
    pub peer_listen: Option<String>,
    /// Peer addresses of all members, self included: empty (standalone), 3 or 5.
    pub peers: Vec<String>,
    /// Create a new fencing domain.
    pub bootstrap: bool,
    /// Durable mode's directory (docs/deployment.md, "Durability"); `None` = memory mode.
    pub data_dir: Option<PathBuf>,
    /// Accepted client tokens (empty = auth off).
    pub client_tokens: Vec<Secret>,
    /// The `--client-tokens-file` the tokens were read from, if any.
    pub client_tokens_file: Option<PathBuf>,
    /// The peer tokens (cluster mode): the first is sent when dialing, any
    /// is accepted; empty = no token (then peer mutual TLS, or
    /// `insecure_unauthenticated_peers`, is required). `Debug` prints them redacted.
    pub peer_tokens: Vec<Secret>,
    /// The `--peer-token-file` the peer tokens were read from, if any.
    pub peer_token_file: Option<PathBuf>,
    /// `--insecure-unauthenticated-peers`: a cluster node may run with
    /// neither a peer token nor peer TLS (throw-away tests only).
    pub insecure_unauthenticated_peers: bool,
    /// TLS certificate chain for the client port.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key for the client port.
    pub tls_key: Option<PathBuf>,
    /// CA of the client certificates (mutual TLS on the client port).
    pub tls_client_ca: Option<PathBuf>,
    /// This node's certificate on the peer port (mutual TLS between peers).
    pub peer_tls_cert: Option<PathBuf>,
    /// The key of `peer_tls_cert`.
    pub peer_tls_key: Option<PathBuf>,
    /// The CA of every peer's certificate.
    pub peer_tls_ca: Option<PathBuf>,
    /// Admin HTTP address.
    pub admin_listen: Option<String>,
    /// The limits of docs/configuration.md, "Limits".
    pub limits: Limits,
    /// Time to complete the handshake.
    pub handshake_timeout: Duration,
    /// Time an accepted peer has to complete the peer handshake.
    pub peer_handshake_timeout: Duration,
    /// Time a started peer frame has to arrive whole.
    pub peer_frame_timeout: Duration,
    /// Raft heartbeat interval, ms.
    pub heartbeat_ms: u64,
    /// Raft election timeout lower bound, ms.
    pub election_timeout_min_ms: u64,
    /// Raft election timeout upper bound, ms.
    pub election_timeout_max_ms: u64,
}

impl Default for Config {
    /// Standalone on 127.0.0.1:5225, auth off, default limits.
    fn default() -> Config {
        Config {
            listen: DEFAULT_LISTEN.to_owned(),
            advertise: None,
            peer_listen: None,
            peers: Vec::new(),
            bootstrap: false,
            data_dir: None,
            client_tokens: Vec::new(),
            client_tokens_file: None,
            peer_tokens: Vec::new(),
            peer_token_file: None,
            insecure_unauthenticated_peers: false,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            peer_tls_cert: None,
            peer_tls_key: None,
            peer_tls_ca: None,
            admin_listen: None,
            limits: Limits::default(),
            handshake_timeout: HANDSHAKE_TIMEOUT,
            peer_handshake_timeout: HANDSHAKE_TIMEOUT,
            peer_frame_timeout: Duration::from_secs(30),
            heartbeat_ms: 50,
            election_timeout_min_ms: 1160,
            election_timeout_max_ms: 1200,
        }
    }
}

/// Why a cluster node without peer authentication does not start
/// (docs/security.md, "Peer authentication").
pub const PEER_AUTH_MISSING: &str = "cluster mode needs peer authentication (else anyone who reaches the peer port \
     joins the cluster): give a peer token (--peer-token-file FILE, or the environment variable \
     TICKETING_PEER_TOKEN) and/or mutual TLS between peers (--peer-tls-cert, --peer-tls-key, --peer-tls-ca)";

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
        max_peer_connections: cli.max_peer_connections.unwrap_or(dl.max_peer_connections),
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

/// Reads a token file: one token per line, surrounding whitespace trimmed, blank lines skipped.
fn read_token_lines(path: &Path) -> Result<Vec<Secret>, ConfigError> {
    let text = zeroize::Zeroizing::new(read("token file", path)?);
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(Secret::from).collect())
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

/// The client tokens: the lines of `file` (if given), then the
/// comma-separated `TICKETING_CLIENT_TOKENS`, duplicates removed. Read at
/// start and on every reload.
pub fn client_tokens(file: Option<&Path>) -> Result<Vec<Secret>, ConfigError> {
    let mut client_tokens = Vec::new();
    if let Some(path) = file {
        client_tokens.extend(read_token_lines(path)?);
    }
    if let Some(inline) = env_var("TICKETING_CLIENT_TOKENS")?.map(zeroize::Zeroizing::new) {
        client_tokens.extend(inline.split(',').map(str::trim).filter(|t| !t.is_empty()).map(Secret::from));
    }
    // Duplicates dropped (Secret compares in constant time).
    let mut unique: Vec<Secret> = Vec::with_capacity(client_tokens.len());
    for t in client_tokens {
        if !unique.contains(&t) {
            unique.push(t);
        }
    }
    Ok(unique)
}

/// The peer tokens: the lines of `file` (one, or during a rotation two: the
/// first is sent, every line is accepted), else `TICKETING_PEER_TOKEN`.
/// Read at start and on every reload.
pub fn peer_tokens(file: Option<&Path>) -> Result<Vec<Secret>, ConfigError> {
    match file {
        Some(path) => {
            let lines = read_token_lines(path)?;
            if lines.is_empty() || lines.len() > 2 {
                return Err(invalid(
                    "--peer-token-file",
                    format!("{} must hold one token line (two during a rotation), got {}", path.display(), lines.len()),
                ));
            }
            Ok(lines)
        }
        None => Ok(env_var("TICKETING_PEER_TOKEN")?
            .map(zeroize::Zeroizing::new)
            .map(|t| Secret::from(t.trim()))
            .filter(|t| !t.is_empty())
            .into_iter()
            .collect()),
    }
}

fn env_var(name: &'static str) -> Result<Option<String>, ConfigError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::NotUnicode(name)),
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
            ("max_waiters_per_key", d.limits.max_waiters_per_key.to_string()),
            ("max_waiters", d.limits.max_waiters.to_string()),
            ("max_held_keys", d.limits.max_held_keys.to_string()),
            ("max_pending_per_conn", d.limits.max_pending_per_conn.to_string()),
            ("max_connections", d.limits.max_connections.to_string()),
            ("handshake_timeout", d.handshake_timeout.as_secs_f64().to_string()),
            ("max_write_buffer_bytes", d.limits.max_write_buffer_bytes.to_string()),
            ("max_peer_connections", d.limits.max_peer_connections.to_string()),
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
        let limits = resolve_limits(&cli)?;
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
        let peer_tokens = peer_tokens(cli.peer_token_file.as_deref())?;
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
            data_dir,
            client_tokens,
            client_tokens_file: cli.client_tokens_file,
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
            limits,
            handshake_timeout,
            peer_handshake_timeout,
            peer_frame_timeout,
            heartbeat_ms,
            election_timeout_min_ms,
            election_timeout_max_ms,
        })
    }

    /// Standalone mode: no peers.
    pub fn is_standalone(&self) -> bool {
        self.peers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli(args: &[&str]) -> Cli {
        let mut all = vec!["ticketing-server"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap()
    }

    fn tmp(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ticketing-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The opt-out, for the tests of other rules of cluster mode.
    const INSECURE: &str = "--insecure-unauthenticated-peers";

    #[test]
    fn a_cluster_node_needs_peer_authentication() {
        let base = ["--peer-listen", "127.0.0.1:1", "--peers", "a:1,b:1,c:1"];
        let e = Config::resolve(cli(&base)).unwrap_err();
        assert_eq!(e.to_string(), format!("--peer-token-file: {PEER_AUTH_MISSING}"));
        assert!(!e.to_string().contains('\n'), "one line");
        for fix in ["--peer-token-file", "TICKETING_PEER_TOKEN", "--peer-tls-cert"] {
            assert!(e.to_string().contains(fix), "the line names {fix}: {e}");
        }
        let token = tmp("peer-auth-token", "s3cret\n");
        let with_token = [&base[..], &["--peer-token-file", token.to_str().unwrap()]].concat();
        assert!(Config::resolve(cli(&with_token)).is_ok());
        let (cert, key, ca) = (tmp("c.pem", ""), tmp("k.pem", ""), tmp("ca.pem", ""));
        let tls = ["--peer-tls-cert", cert.to_str().unwrap(), "--peer-tls-key", key.to_str().unwrap()];
        let with_tls = [&base[..], &tls, &["--peer-tls-ca", ca.to_str().unwrap()]].concat();
        assert!(Config::resolve(cli(&with_tls)).is_ok(), "mutual TLS alone authenticates the peers");
        let c = Config::resolve(cli(&[&base[..], &[INSECURE]].concat())).unwrap();
        assert!(c.insecure_unauthenticated_peers && c.peer_tokens.is_empty());
        assert!(Config::resolve(cli(&[])).is_ok(), "standalone needs no peer authentication");
    }

    #[test]
    fn peer_byte_budgets() {
        let d = Limits::default();
        assert_eq!((d.max_peer_in_flight_bytes_per_conn, d.max_peer_in_flight_bytes), (128 << 20, 256 << 20));
        let c = Config::resolve(cli(&["--max-peer-in-flight-bytes-per-conn", "1048576"])).unwrap();
        assert_eq!(c.limits.max_peer_in_flight_bytes_per_conn, 1 << 20);
        for bad in [
            &["--max-peer-in-flight-bytes-per-conn", "1048575"][..],
            &["--max-peer-in-flight-bytes-per-conn", "536870912"],
            &["--max-peer-in-flight-bytes", "1048576"],
        ] {
            let e = Config::resolve(cli(bad)).unwrap_err();
            assert!(e.to_string().starts_with("--max-peer-in-flight-bytes"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn defaults() {
        let c = Config::resolve(cli(&[])).unwrap();
        assert_eq!(c.listen, "127.0.0.1:5225");
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.handshake_timeout, Duration::from_secs(5));
        assert!(c.is_standalone());
        assert_eq!((c.heartbeat_ms, c.election_timeout_min_ms, c.election_timeout_max_ms), (50, 1160, 1200));
    }

    #[test]
    fn peer_count_rule() {
        for (list, ok) in [("a:1", false), ("a:1,b:1", false), ("a:1,b:1,c:1", true), ("a:1,b:1,c:1,d:1", false)] {
            let r = Config::resolve(cli(&["--peer-listen", "127.0.0.1:1", "--peers", list, INSECURE]));
            assert_eq!(r.is_ok(), ok, "{list}");
        }
        assert!(
            Config::resolve(cli(&["--peer-listen", "127.0.0.1:1", "--peers", "a:1,b:1,c:1,d:1,e:1", INSECURE])).is_ok()
        );
        assert!(Config::resolve(cli(&["--peers", "a:1,b:1,c:1"])).is_err(), "cluster mode needs --peer-listen");
        assert!(Config::resolve(cli(&["--peers", "a:1,b:1,c:1,d:1,e:1,f:1"])).is_err());
        assert!(Config::resolve(cli(&["--peers", "a:1,a:1,c:1"])).is_err());
    }

    #[test]
    fn file_keys_with_dashes_or_underscores_and_flag_wins() {
        let p = tmp(
            "c.toml",
            "max-waiters-per-key = 7\nmax_waiters = 9\nhandshake-timeout = 0.25\nlisten = \"127.0.0.1:1\"\n\
             peers = \"a:1,b:1,c:1\"\npeer-listen = \"127.0.0.1:7\"\n",
        );
        let c = Config::resolve(cli(&["--config", p.to_str().unwrap(), "--max-waiters", "3", INSECURE])).unwrap();
        assert_eq!(c.limits.max_waiters_per_key, 7);
        assert_eq!(c.limits.max_waiters, 3);
        assert_eq!(c.handshake_timeout, Duration::from_millis(250));
        assert_eq!(c.listen, "127.0.0.1:1");
        assert_eq!(c.peers.len(), 3);
        let bad = tmp("bad.toml", "no_such_key = 1\n");
        let e = Config::resolve(cli(&["--config", bad.to_str().unwrap()])).unwrap_err();
        assert!(matches!(&e, ConfigError::File { problem, .. } if problem.contains("no_such_key")), "{e}");
    }

    #[test]
    fn file_lists_bootstrap_and_types() {
        let p =
            tmp("list.toml", "peers = [\"a:1\", \"b:1\", \"c:1\"]\nbootstrap = true\npeer_listen = \"127.0.0.1:7\"\n");
        let c = Config::resolve(cli(&["--config", p.to_str().unwrap(), INSECURE])).unwrap();
        assert_eq!(c.peers, ["a:1", "b:1", "c:1"]);
        assert!(c.bootstrap, "bootstrap from the file");
        let five = ["--config", p.to_str().unwrap(), "--peers", "x:1,y:1,z:1,v:1,w:1", INSECURE];
        let c = Config::resolve(cli(&five)).unwrap();
        assert_eq!(c.peers.len(), 5, "the flag beats the file");
        let bad = tmp("type.toml", "max_waiters = \"many\"\n");
        let e = Config::resolve(cli(&["--config", bad.to_str().unwrap()])).unwrap_err();
        assert!(matches!(&e, ConfigError::File { problem, .. } if problem.contains("max_waiters")), "{e}");
        let twice = tmp("twice.toml", "max-waiters = 1\nmax_waiters = 2\n");
        assert!(matches!(Config::resolve(cli(&["--config", twice.to_str().unwrap()])), Err(ConfigError::File { .. })));
        let huge = ["--config", p.to_str().unwrap(), "--max-connections", "18446744073709551615"];
        assert!(Config::resolve(cli(&huge)).is_err());
    }

    #[test]
    fn token_file_lines() {
        let p = tmp("tokens", "  one \n\n two\n");
        let c = Config::resolve(cli(&["--client-tokens-file", p.to_str().unwrap()])).unwrap();
        assert_eq!(c.client_tokens, vec![Secret::from("one"), Secret::from("two")]);
        let p = tmp("tokens2", "zq-secret-77\n");
        let c = Config::resolve(cli(&["--client-tokens-file", p.to_str().unwrap()])).unwrap();
        let debug = format!("{c:?}");
        // Neither the text nor the bytes (as `Vec<u8>` would print them).
        assert!(!debug.contains("zq-secret") && !debug.contains("122, 113"), "{debug}");
        assert!(debug.contains("Secret(<redacted>)"), "{debug}");
        assert!(Config::resolve(cli(&["--client-tokens-file", "/nonexistent/tokens"])).is_err());
        let two = tmp("peer-two", "new\nold\n");
        let c = Config::resolve(cli(&["--peer-token-file", two.to_str().unwrap()])).unwrap();
        assert_eq!(c.peer_tokens, vec![Secret::from("new"), Secret::from("old")]);
        let three = tmp("peer-three", "a\nb\nc\n");
        assert!(Config::resolve(cli(&["--peer-token-file", three.to_str().unwrap()])).is_err());
        let none = tmp("peer-none", "\n");
        assert!(Config::resolve(cli(&["--peer-token-file", none.to_str().unwrap()])).is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Config::resolve(cli(&["--handshake-timeout", "0"])).is_err());
        assert!(Config::resolve(cli(&["--handshake-timeout", "NaN"])).is_err());
        assert!(Config::resolve(cli(&["--tls-cert", "x"])).is_err());
        assert!(Config::resolve(cli(&["--tls-client-ca", "x"])).is_err(), "client CA without --tls-cert");
        for partial in [
            &["--peer-tls-cert", "c"][..],
            &["--peer-tls-key", "k", "--peer-tls-ca", "a"],
            &["--peer-tls-cert", "c", "--peer-tls-ca", "a"],
        ] {
            let e = Config::resolve(cli(partial)).unwrap_err();
            assert!(e.to_string().contains("all three"), "{e}");
        }
        let all = ["--peer-tls-cert", "c", "--peer-tls-key", "k", "--peer-tls-ca", "a"];
        assert_eq!(Config::resolve(cli(&all)).unwrap().peer_tls_ca, Some(PathBuf::from("a")));
        assert!(Config::resolve(cli(&["--advertise", "a b"])).is_err());
        assert!(matches!(
            Config::resolve(cli(&["--listen", "nonsense"])),
            Err(ConfigError::Invalid { setting: "--listen", .. })
        ));
        assert!(Config::resolve(cli(&["--election-timeout-min-ms", "2000"])).is_err());
        assert!(Config::resolve(cli(&["--max-connections", "18446744073709551615"])).is_err());
        assert!(Config::resolve(cli(&["--max-pending-per-conn", "0"])).is_ok());
        assert!(Config::resolve(cli(&["--max-write-buffer-bytes", "100"])).is_err());
        assert!(Config::resolve(cli(&["--max-peer-connections", "0"])).is_err());
        assert!(Config::resolve(cli(&["--peer-handshake-timeout", "0"])).is_err());
        assert!(Config::resolve(cli(&["--peer-frame-timeout", "inf"])).is_err());
        let c = Config::resolve(cli(&[
            "--max-write-buffer-bytes",
            "4096",
            "--max-peer-connections",
            "3",
            "--peer-handshake-timeout",
            "0.5",
            "--peer-frame-timeout",
            "2",
        ]))
        .unwrap();
        assert_eq!((c.limits.max_write_buffer_bytes, c.limits.max_peer_connections), (4096, 3));
        assert_eq!(
            (c.peer_handshake_timeout, c.peer_frame_timeout),
            (Duration::from_millis(500), Duration::from_secs(2))
        );
        assert!(Cli::try_parse_from(["ticketing-server", "--max-waiters", "-1"]).is_err());
        assert!(Cli::try_parse_from(["ticketing-server", "--client-token", "x"]).is_err());
    }

    #[test]
    fn tick_ms_from_flag_and_file_and_its_range() {
        assert_eq!(Config::resolve(cli(&[])).unwrap().limits.tick_ms, 500);
        assert_eq!(Config::resolve(cli(&["--tick-ms", "120"])).unwrap().limits.tick_ms, 120);
        let p = tmp("tick.toml", "tick-ms = 250\n");
        assert_eq!(Config::resolve(cli(&["--config", p.to_str().unwrap()])).unwrap().limits.tick_ms, 250);
        for bad in ["0", "9", "60001"] {
            assert!(
                matches!(
                    Config::resolve(cli(&["--tick-ms", bad])),
                    Err(ConfigError::Invalid { setting: "--tick-ms", .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn start_grace_from_flag_and_file_and_its_range() {
        assert_eq!(Config::resolve(cli(&[])).unwrap().limits.start_grace, Duration::ZERO);
        let c = Config::resolve(cli(&["--start-grace", "2.5"])).unwrap();
        assert_eq!(c.limits.start_grace, Duration::from_millis(2_500));
        assert_eq!(
            Config::resolve(cli(&["--start-grace", "250"])).unwrap().limits.start_grace,
            Duration::from_secs(250)
        );
        let p = tmp("grace.toml", "start_grace = 30\n");
        let c = Config::resolve(cli(&["--config", p.to_str().unwrap()])).unwrap();
        assert_eq!(c.limits.start_grace, Duration::from_secs(30));
        for bad in ["-1", "250.5", "NaN", "inf"] {
            match Config::resolve(cli(&[&format!("--start-grace={bad}")])) {
                Err(e @ ConfigError::Invalid { setting: "--start-grace", .. }) => {
                    assert!(e.to_string().contains("0-250"), "{e}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
