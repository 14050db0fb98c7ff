//! Secrets and certificates that can change without a restart
//! (docs/security.md, "Rotation"): the client tokens, the peer tokens, the
//! client port's TLS and the peer port's TLS. Each is held as the current
//! value behind a lock; a new connection or handshake takes the current one,
//! an established connection keeps what it started with.
//!
//! On SIGHUP, [`Material::reload`] re-reads every file of the configuration.
//! Each piece is replaced only if its files read and parse; a broken file
//! keeps the old piece and is logged (`reload failed`), and the metric
//! `ticketing_reloads_total{result="ok"|"failed"}` counts the outcome.

use crate::config::{self, Config, ConfigError};
use crate::principal::{self, Principals};
use crate::tls::{self, PeerTls};
use rustls::ServerConfig;
use std::sync::{Arc, RwLock};
use ticketing_proto::auth::Secret;
use tokio_rustls::TlsAcceptor;
use tracing::{error, info};

/// A value replaced as a whole: readers take the current `Arc`.
#[derive(Debug, Default)]
pub struct Current<T>(RwLock<Arc<T>>);

impl<T> Current<T> {
    /// Holds `value`.
    pub fn new(value: T) -> Current<T> {
        Current(RwLock::new(Arc::new(value)))
    }

    /// The current value.
    pub fn get(&self) -> Arc<T> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the value (readers that hold the old one keep it).
    pub fn set(&self, value: T) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(value);
    }
}

/// The client port's TLS (`None`: plain TCP).
#[derive(Debug, Default)]
pub struct ClientTls(Current<Option<Arc<ServerConfig>>>);

impl ClientTls {
    /// Plain TCP, or TLS with `config`.
    pub fn new(config: Option<Arc<ServerConfig>>) -> ClientTls {
        ClientTls(Current::new(config))
    }

    /// An acceptor with the current certificate, or `None` for plain TCP.
    pub fn acceptor(&self) -> Option<TlsAcceptor> {
        self.0.get().as_ref().as_ref().map(|c| TlsAcceptor::from(c.clone()))
    }

    /// Whether TLS is on.
    pub fn is_on(&self) -> bool {
        self.0.get().is_some()
    }
}

/// Peer tokens: the first one is used when dialing, any of them is accepted
/// (docs/security.md, "Rotating the peer token").
pub type PeerTokens = Current<Vec<Secret>>;

/// Everything [`Material::reload`] replaces.
#[derive(Debug, Default)]
pub struct Material {
    /// The principals and their tokens (no token = auth off).
    pub client_tokens: Arc<Current<Principals>>,
    /// The client port's TLS.
    pub client_tls: Arc<ClientTls>,
    /// Peer tokens (empty = the empty token).
    pub peer_tokens: Arc<PeerTokens>,
    /// The peer port's mutual TLS (`None`: plain TCP).
    pub peer_tls: Arc<Current<Option<PeerTls>>>,
    /// Admin tokens (empty = the admin port asks for none).
    pub admin_tokens: Arc<Current<Vec<Secret>>>,
    /// The admin port's TLS (`None`: plain HTTP).
    pub admin_tls: Arc<ClientTls>,
}

/// The client port's TLS as configured (`None` without `--tls-cert`).
fn client_tls(config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => tls::client_port(cert, key, config.tls_client_ca.as_deref()).map(Some),
        _ => Ok(None),
    }
}

/// The admin port's TLS as configured (`None` without `--admin-tls-cert`).
fn admin_tls(config: &Config) -> Result<Option<Arc<ServerConfig>>, String> {
    match (&config.admin_tls_cert, &config.admin_tls_key) {
        (Some(cert), Some(key)) => tls::client_port(cert, key, None).map(Some),
        _ => Ok(None),
    }
}

/// The peer port's TLS as configured (`None` without `--peer-tls-cert`).
fn peer_tls(config: &Config) -> Result<Option<PeerTls>, String> {
    match (&config.peer_tls_cert, &config.peer_tls_key, &config.peer_tls_ca) {
        (Some(cert), Some(key), Some(ca)) => PeerTls::load(cert, key, ca).map(Some),
        _ => Ok(None),
    }
}

impl Material {
    /// The material of a validated configuration (tokens were read by
    /// `Config::resolve`; certificates are read here). A bad certificate or
    /// key is a configuration error (exit 2).
    pub fn load(config: &Config) -> Result<Material, ConfigError> {
        let client_tls =
            client_tls(config).map_err(|problem| ConfigError::Invalid { setting: "--tls-cert", problem })?;
        let peer_tls =
            peer_tls(config).map_err(|problem| ConfigError::Invalid { setting: "--peer-tls-cert", problem })?;
        let admin_tls =
            admin_tls(config).map_err(|problem| ConfigError::Invalid { setting: "--admin-tls-cert", problem })?;
        Ok(Material {
            client_tokens: Arc::new(Current::new(config.principals.clone())),
            client_tls: Arc::new(ClientTls::new(client_tls)),
            peer_tokens: Arc::new(Current::new(config.peer_tokens.clone())),
            peer_tls: Arc::new(Current::new(peer_tls)),
            admin_tokens: Arc::new(Current::new(config.admin_tokens.clone())),
            admin_tls: Arc::new(ClientTls::new(admin_tls)),
        })
    }

    /// Re-reads every file of `config` (SIGHUP). Each piece that reads and
    /// parses replaces the current one; a piece that does not keeps the old
    /// one. Returns the problems (empty = everything reloaded). Logs one line
    /// per outcome; never logs a token.
    pub fn reload(&self, config: &Config) -> Vec<String> {
        let mut problems = Vec::new();
        if config.client_tokens_file.is_some() || config.config_file.is_some() {
            match principal::reread(config, &self.client_tokens.get()) {
                Ok(principals) => self.client_tokens.set(principals),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if config.peer_token_file.is_some() {
            match config::peer_tokens(config.peer_token_file.as_deref()) {
                Ok(tokens) => self.peer_tokens.set(tokens),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if config.admin_token_file.is_some() {
            match config::admin_tokens(config.admin_token_file.as_deref()) {
                Ok(tokens) => self.admin_tokens.set(tokens),
                Err(e) => problems.push(e.to_string()),
            }
        }
        if config.tls_cert.is_some() {
            match client_tls(config) {
                Ok(t) => self.client_tls.0.set(t),
                Err(e) => problems.push(e),
            }
        }
        if config.admin_tls_cert.is_some() {
            match admin_tls(config) {
                Ok(t) => self.admin_tls.0.set(t),
                Err(e) => problems.push(e),
            }
        }
        if config.peer_tls_cert.is_some() {
            match peer_tls(config) {
                Ok(t) => self.peer_tls.set(t),
                Err(e) => problems.push(e),
            }
        }
        if problems.is_empty() {
            info!("reload ok: tokens and certificates re-read");
        } else {
            for p in &problems {
                error!(problem = %p, "reload failed: keeping the previous material for this part");
            }
        }
        problems
    }
}
