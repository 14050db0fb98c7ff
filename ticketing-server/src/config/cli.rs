//! The settings of `ticketing-server`, defined once: flag, environment variable and config-file key.

use super::{invalid, read, ConfigError};
use clap::{ArgAction, Parser};
use serde::{Deserialize, Deserializer, Serialize};
use std::path::PathBuf;

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
    /// With --bootstrap: build the new domain from this backup (`ticketing snapshot save`): its holders and
    /// tokens, new tokens above its high-water, grants held back for its longest lease unless --start-grace
    /// says otherwise (docs/operating.md, "Backup and disaster recovery").
    #[arg(long, env = "TICKETING_RESTORE", value_name = "FILE")]
    pub restore: Option<PathBuf>,
    /// Durable mode: keep identity, Raft vote, log and snapshots (or the standalone journal) in DIR, fsynced (docs/deployment.md, "Durability").
    #[arg(long, env = "TICKETING_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// File with the accepted client tokens, one per line (also env TICKETING_CLIENT_TOKENS, comma separated).
    #[arg(long, env = "TICKETING_CLIENT_TOKENS_FILE", value_name = "FILE")]
    pub client_tokens_file: Option<PathBuf>,
    /// Principals (config file only, `[[principal]]` tables): who may use
    /// which key prefixes (docs/security.md, "Several teams: principals").
    #[arg(skip)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub principal: Vec<crate::principal::PrincipalSpec>,
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
    /// File with the admin tokens, one per line (rotation: any is accepted): every admin path but /healthz
    /// and /readyz then needs `Authorization: Bearer <token>`.
    #[arg(long, env = "TICKETING_ADMIN_TOKEN_FILE", value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// PEM certificate chain: TLS on the admin port (with --admin-tls-key).
    #[arg(long, env = "TICKETING_ADMIN_TLS_CERT", value_name = "FILE")]
    pub admin_tls_cert: Option<PathBuf>,
    /// PEM private key for --admin-tls-cert.
    #[arg(long, env = "TICKETING_ADMIN_TLS_KEY", value_name = "FILE")]
    pub admin_tls_key: Option<PathBuf>,
    /// Admin connections at once (8 or more; a quarter of them from one address, more are closed at once;
    /// an eighth of them from one address and half in all before their request head, the oldest pushed out).
    #[arg(long, env = "TICKETING_ADMIN_MAX_CONNECTIONS", value_name = "N")]
    pub admin_max_connections: Option<usize>,
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
    /// Answer bytes all clients together may leave unread; over it, the connections holding more than 64 KiB
    /// unread are closed.
    #[arg(long, env = "TICKETING_MAX_TOTAL_WRITE_BUFFER_BYTES", value_name = "BYTES")]
    pub max_total_write_buffer_bytes: Option<usize>,
    /// Connections on the peer port (handshaking included); over it → `E overloaded`, close.
    #[arg(long, env = "TICKETING_MAX_PEER_CONNECTIONS", value_name = "N")]
    pub max_peer_connections: Option<usize>,
    /// Unauthenticated client connections at once (keep it below --max-connections): over it, the oldest is closed.
    #[arg(long, env = "TICKETING_MAX_PREAUTH_CONNECTIONS", value_name = "N")]
    pub max_preauth_connections: Option<usize>,
    /// Unauthenticated client connections from one address at once: over it, that address's oldest is closed.
    #[arg(long, env = "TICKETING_MAX_PREAUTH_PER_ADDRESS", value_name = "N")]
    pub max_preauth_per_address: Option<usize>,
    /// Unauthenticated peer-port connections at once (keep it below --max-peer-connections): over it, the oldest is closed.
    #[arg(long, env = "TICKETING_MAX_PEER_PREAUTH_CONNECTIONS", value_name = "N")]
    pub max_peer_preauth_connections: Option<usize>,
    /// Unauthenticated peer-port connections from one address at once: over it, that address's oldest is closed.
    #[arg(long, env = "TICKETING_MAX_PEER_PREAUTH_PER_ADDRESS", value_name = "N")]
    pub max_peer_preauth_per_address: Option<usize>,
    /// The largest snapshot this node accepts from a leader, in bytes; a chunk beyond it is refused.
    #[arg(long, env = "TICKETING_MAX_SNAPSHOT_BYTES", value_name = "BYTES")]
    pub max_snapshot_bytes: Option<u64>,
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
    /// Threads that run the server's tasks (1-1024) [default: the cores available to the process].
    #[arg(long, env = "TICKETING_WORKER_THREADS", value_name = "N")]
    pub worker_threads: Option<usize>,
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
