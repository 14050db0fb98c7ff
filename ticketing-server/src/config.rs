//! Configuration (SPEC §9, §10): every flag, its `TICKETING_<FLAG>`
//! environment variable and its key in the `--config` TOML file.
//!
//! Precedence: flag > environment > config file > default. Clap resolves
//! flag and environment (every field is an `Option` without a clap
//! default); [`Config::resolve`] then fills what is still missing from the
//! TOML file and finally from the defaults. Tokens never go on the command
//! line: client tokens come from `--client-tokens-file` and/or
//! `TICKETING_CLIENT_TOKENS`, the peer token from `--peer-token-file` or
//! `TICKETING_PEER_TOKEN`.

use clap::{ArgAction, Parser};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use ticketing_proto::Addr;

/// Default client address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:5225";

/// A configuration error. The binary prints it and exits with code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Command line of `ticketing-server`. Every flag also reads `TICKETING_<FLAG>`.
#[derive(Debug, Default, Parser)]
#[command(name = "ticketing-server", version, about = "Ticketing: a distributed FIFO lock service with fencing tokens")]
pub struct Cli {
    /// TOML file with any of the settings below (keys = flag names, `_` or `-`).
    #[arg(long, env = "TICKETING_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Client address to listen on [default: 127.0.0.1:5225].
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
    pub peers: Option<Vec<String>>,
    /// Create a new fencing domain (first start of a new cluster only).
    #[arg(long, env = "TICKETING_BOOTSTRAP", action = ArgAction::SetTrue)]
    pub bootstrap: bool,
    /// File with the accepted client tokens, one per line (also env TICKETING_CLIENT_TOKENS, comma separated).
    #[arg(long, env = "TICKETING_CLIENT_TOKENS_FILE", value_name = "FILE")]
    pub client_tokens_file: Option<PathBuf>,
    /// File with the peer token (or env TICKETING_PEER_TOKEN).
    #[arg(long, env = "TICKETING_PEER_TOKEN_FILE", value_name = "FILE")]
    pub peer_token_file: Option<PathBuf>,
    /// PEM certificate chain: TLS on the client port (with --tls-key).
    #[arg(long, env = "TICKETING_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, env = "TICKETING_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// CA file: TLS between peers.
    #[arg(long, env = "TICKETING_PEER_TLS_CA", value_name = "FILE")]
    pub peer_tls_ca: Option<PathBuf>,
    /// Admin HTTP address (/metrics, /healthz, /status, /locks/<key>).
    #[arg(long, env = "TICKETING_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<String>,
    /// Waiters per key [default: 1024]; over it → `B`.
    #[arg(long, env = "TICKETING_MAX_WAITERS_PER_KEY", value_name = "N")]
    pub max_waiters_per_key: Option<usize>,
    /// Waiters per server [default: 100000]; over it → `B`.
    #[arg(long, env = "TICKETING_MAX_WAITERS", value_name = "N")]
    pub max_waiters: Option<usize>,
    /// Held keys per server [default: 1000000]; over it → `B`.
    #[arg(long, env = "TICKETING_MAX_HELD_KEYS", value_name = "N")]
    pub max_held_keys: Option<usize>,
    /// In-flight requests per connection [default: 1024]; over it → `E too_many_pending`.
    #[arg(long, env = "TICKETING_MAX_PENDING_PER_CONN", value_name = "N")]
    pub max_pending_per_conn: Option<usize>,
    /// Client connections [default: 10000]; over it → `E overloaded`.
    #[arg(long, env = "TICKETING_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds (fractions allowed) to complete AUTH [default: 5].
    #[arg(long, env = "TICKETING_HANDSHAKE_TIMEOUT", value_name = "SECONDS")]
    pub handshake_timeout: Option<f64>,
    /// Raft heartbeat interval, ms [default: 50].
    #[arg(long, env = "TICKETING_HEARTBEAT_MS", value_name = "MS")]
    pub heartbeat_ms: Option<u64>,
    /// Raft election timeout lower bound, ms [default: 1160].
    #[arg(long, env = "TICKETING_ELECTION_TIMEOUT_MIN_MS", value_name = "MS")]
    pub election_timeout_min_ms: Option<u64>,
    /// Raft election timeout upper bound, ms [default: 1200].
    #[arg(long, env = "TICKETING_ELECTION_TIMEOUT_MAX_MS", value_name = "MS")]
    pub election_timeout_max_ms: Option<u64>,
}

/// `peers` in the TOML file: a list or one comma-separated string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum PeerList {
    List(Vec<String>),
    Text(String),
}

/// The TOML file: the same keys as the flags (normalized to `_`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    advertise: Option<String>,
    peer_listen: Option<String>,
    peers: Option<PeerList>,
    bootstrap: Option<bool>,
    client_tokens_file: Option<PathBuf>,
    peer_token_file: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    peer_tls_ca: Option<PathBuf>,
    admin_listen: Option<String>,
    max_waiters_per_key: Option<usize>,
    max_waiters: Option<usize>,
    max_held_keys: Option<usize>,
    max_pending_per_conn: Option<usize>,
    max_connections: Option<usize>,
    handshake_timeout: Option<f64>,
    heartbeat_ms: Option<u64>,
    election_timeout_min_ms: Option<u64>,
    election_timeout_max_ms: Option<u64>,
}

impl FileConfig {
    fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("cannot read config file {}: {e}", path.display())))?;
        let table: toml::Table =
            text.parse().map_err(|e| err(format!("config file {} is not valid TOML: {e}", path.display())))?;
        let mut normalized = toml::Table::new();
        for (k, v) in table {
            let key = k.replace('-', "_");
            if normalized.insert(key.clone(), v).is_some() {
                return Err(err(format!("config file {}: key {key:?} given twice", path.display())));
            }
        }
        toml::Value::Table(normalized).try_into().map_err(|e| err(format!("config file {}: {e}", path.display())))
    }
}

/// Limits of SPEC §10.
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
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_waiters_per_key: 1024,
            max_waiters: 100_000,
            max_held_keys: 1_000_000,
            max_pending_per_conn: 1024,
            max_connections: 10_000,
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
    /// Accepted client tokens (empty = auth off).
    pub client_tokens: Vec<Vec<u8>>,
    /// The `--client-tokens-file` the tokens were read from, if any.
    pub client_tokens_file: Option<PathBuf>,
    /// The peer token (cluster mode).
    pub peer_token: Option<Vec<u8>>,
    /// TLS certificate chain for the client port.
    pub tls_cert: Option<PathBuf>,
    /// TLS private key for the client port.
    pub tls_key: Option<PathBuf>,
    /// CA for TLS between peers.
    pub peer_tls_ca: Option<PathBuf>,
    /// Admin HTTP address.
    pub admin_listen: Option<String>,
    /// Limits of SPEC §10.
    pub limits: Limits,
    /// Time to complete the handshake.
    pub handshake_timeout: Duration,
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
            client_tokens: Vec::new(),
            client_tokens_file: None,
            peer_token: None,
            tls_cert: None,
            tls_key: None,
            peer_tls_ca: None,
            admin_listen: None,
            limits: Limits::default(),
            handshake_timeout: Duration::from_secs(5),
            heartbeat_ms: 50,
            election_timeout_min_ms: 1160,
            election_timeout_max_ms: 1200,
        }
    }
}

/// Reads a token file: one token per line, surrounding whitespace trimmed, blank lines skipped.
fn read_token_lines(path: &Path) -> Result<Vec<Vec<u8>>, ConfigError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| err(format!("cannot read token file {}: {e}", path.display())))?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(|l| l.as_bytes().to_vec()).collect())
}

fn env_var(name: &str) -> Result<Option<String>, ConfigError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(err(format!("{name} is not valid UTF-8"))),
    }
}

impl Config {
    /// Parses the process's arguments and environment, reads the config
    /// file and token files, validates. `--help`/`--version` and clap's
    /// usage errors exit the process (usage errors with code 2).
    pub fn load() -> Result<Config, ConfigError> {
        Config::resolve(Cli::parse())
    }

    /// Completes `cli` (flags and environment) with the config file and
    /// defaults, reads the token files and validates everything.
    pub fn resolve(cli: Cli) -> Result<Config, ConfigError> {
        let file = match &cli.config {
            Some(path) => FileConfig::load(path)?,
            None => FileConfig::default(),
        };
        let d = Config::default();
        let dl = Limits::default();

        let listen = cli.listen.or(file.listen).unwrap_or(d.listen);
        let advertise = match cli.advertise.or(file.advertise) {
            Some(a) => Some(Addr::new(a.clone()).map_err(|_| {
                err(format!("--advertise {a:?}: must be host:port, 1-255 visible ASCII bytes without spaces"))
            })?),
            None => None,
        };
        let peers: Vec<String> = match cli.peers {
            Some(list) => list,
            None => match file.peers {
                Some(PeerList::List(list)) => list,
                Some(PeerList::Text(text)) => text.split(',').map(str::to_owned).collect(),
                None => Vec::new(),
            },
        };
        let peers: Vec<String> = peers.iter().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty()).collect();
        if !matches!(peers.len(), 0 | 3 | 5) {
            return Err(err(format!(
                "--peers must list all members of the cluster, self included: exactly 3 or 5 addresses \
                 (or none for standalone mode), got {}",
                peers.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for p in &peers {
            if !seen.insert(p) {
                return Err(err(format!("--peers lists {p:?} twice")));
            }
        }
        let bootstrap = cli.bootstrap || file.bootstrap.unwrap_or(false);
        if bootstrap && peers.is_empty() {
            return Err(err("--bootstrap needs --peers (cluster mode)"));
        }

        let mut client_tokens = Vec::new();
        let client_tokens_file = cli.client_tokens_file.or(file.client_tokens_file);
        if let Some(path) = &client_tokens_file {
            client_tokens.extend(read_token_lines(path)?);
        }
        if let Some(inline) = env_var("TICKETING_CLIENT_TOKENS")? {
            client_tokens
                .extend(inline.split(',').map(str::trim).filter(|t| !t.is_empty()).map(|t| t.as_bytes().to_vec()));
        }
        let mut unique = std::collections::HashSet::new();
        client_tokens.retain(|t| unique.insert(t.clone()));

        let peer_token = match cli.peer_token_file.or(file.peer_token_file) {
            Some(path) => {
                let lines = read_token_lines(&path)?;
                match lines.as_slice() {
                    [one] => Some(one.clone()),
                    _ => {
                        return Err(err(format!(
                            "peer token file {} must hold exactly one non-empty line",
                            path.display()
                        )))
                    }
                }
            }
            None => env_var("TICKETING_PEER_TOKEN")?.map(|t| t.trim().as_bytes().to_vec()).filter(|t| !t.is_empty()),
        };

        let tls_cert = cli.tls_cert.or(file.tls_cert);
        let tls_key = cli.tls_key.or(file.tls_key);
        if tls_cert.is_some() != tls_key.is_some() {
            return Err(err("--tls-cert and --tls-key must be given together"));
        }

        let limits = Limits {
            max_waiters_per_key: cli.max_waiters_per_key.or(file.max_waiters_per_key).unwrap_or(dl.max_waiters_per_key),
            max_waiters: cli.max_waiters.or(file.max_waiters).unwrap_or(dl.max_waiters),
            max_held_keys: cli.max_held_keys.or(file.max_held_keys).unwrap_or(dl.max_held_keys),
            max_pending_per_conn: cli
                .max_pending_per_conn
                .or(file.max_pending_per_conn)
                .unwrap_or(dl.max_pending_per_conn),
            max_connections: cli.max_connections.or(file.max_connections).unwrap_or(dl.max_connections),
        };

        const MAX_LIMIT: usize = 1 << 30;
        for (name, value) in [
            ("--max-waiters-per-key", limits.max_waiters_per_key),
            ("--max-waiters", limits.max_waiters),
            ("--max-held-keys", limits.max_held_keys),
            ("--max-pending-per-conn", limits.max_pending_per_conn),
            ("--max-connections", limits.max_connections),
        ] {
            if value > MAX_LIMIT {
                return Err(err(format!("{name} must be at most {MAX_LIMIT}, got {value}")));
            }
        }

        let hs = cli.handshake_timeout.or(file.handshake_timeout).unwrap_or(5.0);
        if !hs.is_finite() || hs <= 0.0 || hs > 3600.0 {
            return Err(err(format!("--handshake-timeout must be a number of seconds in (0, 3600], got {hs}")));
        }
        let handshake_timeout = Duration::from_secs_f64(hs);

        let heartbeat_ms = cli.heartbeat_ms.or(file.heartbeat_ms).unwrap_or(d.heartbeat_ms);
        let election_timeout_min_ms =
            cli.election_timeout_min_ms.or(file.election_timeout_min_ms).unwrap_or(d.election_timeout_min_ms);
        let election_timeout_max_ms =
            cli.election_timeout_max_ms.or(file.election_timeout_max_ms).unwrap_or(d.election_timeout_max_ms);
        if heartbeat_ms == 0 {
            return Err(err("--heartbeat-ms must be at least 1"));
        }
        if election_timeout_min_ms <= heartbeat_ms || election_timeout_max_ms <= election_timeout_min_ms {
            return Err(err(format!(
                "timing must satisfy heartbeat-ms < election-timeout-min-ms < election-timeout-max-ms, \
                 got {heartbeat_ms} / {election_timeout_min_ms} / {election_timeout_max_ms}"
            )));
        }

        Ok(Config {
            listen,
            advertise,
            peer_listen: cli.peer_listen.or(file.peer_listen),
            peers,
            bootstrap,
            client_tokens,
            client_tokens_file,
            peer_token,
            tls_cert,
            tls_key,
            peer_tls_ca: cli.peer_tls_ca.or(file.peer_tls_ca),
            admin_listen: cli.admin_listen.or(file.admin_listen),
            limits,
            handshake_timeout,
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
            let r = Config::resolve(cli(&["--peers", list]));
            assert_eq!(r.is_ok(), ok, "{list}");
        }
        assert!(Config::resolve(cli(&["--peers", "a:1,b:1,c:1,d:1,e:1"])).is_ok());
        assert!(Config::resolve(cli(&["--peers", "a:1,b:1,c:1,d:1,e:1,f:1"])).is_err());
        assert!(Config::resolve(cli(&["--peers", "a:1,a:1,c:1"])).is_err());
    }

    #[test]
    fn file_keys_with_dashes_or_underscores_and_flag_wins() {
        let p = tmp(
            "c.toml",
            "max-waiters-per-key = 7\nmax_waiters = 9\nhandshake-timeout = 0.25\nlisten = \"127.0.0.1:1\"\n\
             peers = \"a:1,b:1,c:1\"\n",
        );
        let c = Config::resolve(cli(&["--config", p.to_str().unwrap(), "--max-waiters", "3"])).unwrap();
        assert_eq!(c.limits.max_waiters_per_key, 7);
        assert_eq!(c.limits.max_waiters, 3);
        assert_eq!(c.handshake_timeout, Duration::from_millis(250));
        assert_eq!(c.listen, "127.0.0.1:1");
        assert_eq!(c.peers.len(), 3);
        let bad = tmp("bad.toml", "no_such_key = 1\n");
        let e = Config::resolve(cli(&["--config", bad.to_str().unwrap()])).unwrap_err();
        assert!(e.0.contains("no_such_key"), "{e}");
    }

    #[test]
    fn token_file_lines() {
        let p = tmp("tokens", "  one \n\n two\n");
        let c = Config::resolve(cli(&["--client-tokens-file", p.to_str().unwrap()])).unwrap();
        assert_eq!(c.client_tokens, vec![b"one".to_vec(), b"two".to_vec()]);
        assert!(Config::resolve(cli(&["--client-tokens-file", "/nonexistent/tokens"])).is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Config::resolve(cli(&["--handshake-timeout", "0"])).is_err());
        assert!(Config::resolve(cli(&["--handshake-timeout", "NaN"])).is_err());
        assert!(Config::resolve(cli(&["--tls-cert", "x"])).is_err());
        assert!(Config::resolve(cli(&["--advertise", "a b"])).is_err());
        assert!(Config::resolve(cli(&["--election-timeout-min-ms", "2000"])).is_err());
        assert!(Config::resolve(cli(&["--max-connections", "18446744073709551615"])).is_err());
        assert!(Config::resolve(cli(&["--max-pending-per-conn", "0"])).is_ok());
        assert!(Cli::try_parse_from(["ticketing-server", "--max-waiters", "-1"]).is_err());
        assert!(Cli::try_parse_from(["ticketing-server", "--client-token", "x"]).is_err());
    }
}
