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
//!
//! This module holds the error, the resolved [`Config`] and its [`Limits`]
//! with their defaults; `cli` defines the settings, `resolve` completes and
//! validates them, `tokens` reads the token files and variables.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use ticketing_proto::auth::Secret;
use ticketing_proto::limits::{HANDSHAKE_TIMEOUT, MAX_PENDING_PER_CONN};
use ticketing_proto::Addr;

mod cli;
mod resolve;
#[cfg(test)]
mod tests;
mod tokens;

pub use cli::Cli;
pub use resolve::PEER_AUTH_MISSING;
pub use tokens::{admin_tokens, client_tokens, peer_tokens};

/// Default client address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5225";

/// What a memory-mode node with no start grace risks after a restart, and
/// both fixes (docs/deployment.md, "Start grace"): the end of
/// [`Config::restart_hazard_warning`].
pub const RESTART_HAZARD: &str = "forgets its holders and may grant a key whose holder is still inside its lease; \
     set --data-dir DIR (durable) or --start-grace to your longest lease";

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

pub(crate) fn invalid(setting: &'static str, problem: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { setting, problem: problem.into() }
}

pub(crate) fn read(what: &'static str, path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError::Read { what, path: path.to_owned(), kind: e.kind() })
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
    /// Answer bytes waiting for all clients together; over it → the
    /// connections holding more than 64 KiB unread are closed.
    pub max_total_write_buffer_bytes: usize,
    /// Peer-port connections; over it → `E overloaded`, closed.
    pub max_peer_connections: usize,
    /// Unauthenticated client connections at once (docs/security.md,
    /// "Unauthenticated connections"); a newer one evicts the oldest.
    pub max_preauth_connections: usize,
    /// Unauthenticated client connections from one address at once.
    pub max_preauth_per_address: usize,
    /// Unauthenticated peer-port connections at once.
    pub max_peer_preauth_connections: usize,
    /// Unauthenticated peer-port connections from one address at once.
    pub max_peer_preauth_per_address: usize,
    /// The largest snapshot this node receives from a leader (bytes); a
    /// chunk that would take it beyond is refused.
    pub max_snapshot_bytes: u64,
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
            max_total_write_buffer_bytes: 256 * 1024 * 1024,
            max_peer_connections: 64,
            max_preauth_connections: 1024,
            max_preauth_per_address: 256,
            max_peer_preauth_connections: 32,
            max_peer_preauth_per_address: 16,
            // A full server (1 000 000 held keys of up to 250 bytes, with
            // owners and leases) snapshots to about 0.4 GB.
            max_snapshot_bytes: 1 << 30,
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
    /// `--restore`: the backup the new domain starts from (checked at start).
    pub restore: Option<Arc<Restore>>,
    /// Durable mode's directory (docs/deployment.md, "Durability"); `None` = memory mode.
    pub data_dir: Option<PathBuf>,
    /// Accepted client tokens (empty = auth off).
    pub client_tokens: Vec<Secret>,
    /// The `--client-tokens-file` the tokens were read from, if any.
    pub client_tokens_file: Option<PathBuf>,
    /// Every principal: `default` (the client tokens, every key) and the
    /// config file's `[[principal]]` tables; no token at all = auth off.
    pub principals: crate::principal::Principals,
    /// The `--config` file, if any (re-read on SIGHUP for its principals).
    pub config_file: Option<PathBuf>,
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
    /// Admin tokens (empty = the admin port asks for none).
    pub admin_tokens: Vec<Secret>,
    /// The `--admin-token-file` they were read from, if any.
    pub admin_token_file: Option<PathBuf>,
    /// TLS certificate chain for the admin port.
    pub admin_tls_cert: Option<PathBuf>,
    /// TLS private key for the admin port.
    pub admin_tls_key: Option<PathBuf>,
    /// Admin connections at once.
    pub admin_max_connections: usize,
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
    /// The runtime's worker threads (docs/configuration.md, "Threads");
    /// `None` = one per core available to the process.
    pub worker_threads: Option<usize>,
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
            restore: None,
            data_dir: None,
            client_tokens: Vec::new(),
            client_tokens_file: None,
            principals: crate::principal::Principals::default(),
            config_file: None,
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
            admin_tokens: Vec::new(),
            admin_token_file: None,
            admin_tls_cert: None,
            admin_tls_key: None,
            admin_max_connections: 64,
            limits: Limits::default(),
            handshake_timeout: HANDSHAKE_TIMEOUT,
            peer_handshake_timeout: HANDSHAKE_TIMEOUT,
            peer_frame_timeout: Duration::from_secs(30),
            heartbeat_ms: 50,
            election_timeout_min_ms: 1160,
            election_timeout_max_ms: 1200,
            worker_threads: None,
        }
    }
}

impl Config {
    /// The warning logged at every start of a node in memory mode (no
    /// `--data-dir`) with no start grace that can be reached beyond loopback:
    /// its client port `bound` is not a loopback address or, in a cluster, a
    /// peer address is not one (the cluster spans machines). Such a node
    /// grants at once after a restart (standalone: any; cluster: of every
    /// node) keys whose holders may still be inside their leases. `None` on
    /// loopback (development), with a grace, and in durable mode.
    pub fn restart_hazard_warning(&self, bound: std::net::SocketAddr) -> Option<String> {
        let reachable = !bound.ip().to_canonical().is_loopback() || self.peers.iter().any(|p| !is_loopback_addr(p));
        let warned = self.data_dir.is_none() && self.limits.start_grace.is_zero() && reachable;
        warned.then(|| {
            let after = if self.is_standalone() {
                "after a crash and a restart this server"
            } else {
                "after a restart of every node this cluster"
            };
            format!("memory mode (no --data-dir) listening on {bound} with --start-grace 0: {after} {RESTART_HAZARD}")
        })
    }
}

/// Whether `host:port` names a loopback address: 127.0.0.0/8, `::1` (also
/// IPv4-mapped) or `localhost`. Any other host name is not loopback.
fn is_loopback_addr(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// A backup to restore (`--restore`): its header and lock-state snapshot,
/// checked (docs/operating.md, "Backup and disaster recovery").
#[derive(Debug)]
pub struct Restore {
    /// The file.
    pub path: PathBuf,
    /// What the backup says about itself.
    pub header: crate::backup::Header,
    /// The snapshot.
    pub data: Vec<u8>,
}
