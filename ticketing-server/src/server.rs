//! Wiring: picks the replicator (standalone or cluster), starts the lock
//! manager and the accept loop, and runs the graceful shutdown (docs/deployment.md, "Shutdown"):
//! stop accepting, let in-flight proposals finish, send `E shutting_down` to
//! every connection, wait (bounded) for the connections to close.

use crate::cluster::{self, ClusterError};
use crate::config::Config;
use crate::conn::ConnContext;
use crate::durable::standalone::DurableStandalone;
use crate::durable::DataDir;
use crate::leader::WallClock;
use crate::listener::Listener;
use crate::manager::{self, ManagerHandle};
use crate::metrics::{gauge_value, Metrics};
use crate::net::{Accept, Net};
use crate::reload::Material;
use crate::replication::{Replicator, Standalone};
use anyhow::{anyhow, Context, Result};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use ticketing_proto::Addr;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, Semaphore};
use tracing::{info, warn};

/// How long shutdown waits for in-flight proposals.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for connections to close after `E shutting_down`.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long shutdown waits for Raft to stop.
const RAFT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(2);

/// The client address announced in `M`/`L`: `--advertise`, else the bound
/// listen address (so `--listen 127.0.0.1:0` announces the real port).
pub fn advertise_addr(config: &Config, listener: &impl Accept) -> Result<Addr> {
    if let Some(a) = &config.advertise {
        return Ok(a.clone());
    }
    let local = listener.local_addr().context("reading the bound address")?;
    Addr::new(local.to_string()).map_err(|e| anyhow!("bound address {local} is not a valid addr: {e}"))
}

/// The start-up warning for a client port that listens beyond loopback
/// with client authentication off (docs/security.md, "Hardening checklist").
/// The warning for an admin port beyond loopback without an admin token.
fn admin_open_warning(bound: std::net::SocketAddr, tokens: &[ticketing_proto::auth::Secret]) -> Option<String> {
    (tokens.is_empty() && !bound.ip().is_loopback()).then(|| {
        format!(
            "the admin port {bound} listens beyond loopback with NO admin token: anyone who reaches it reads key \
             names, holders' tokens, client addresses and the topology; set --admin-token-file \
             (docs/security.md, \"The admin port\")"
        )
    })
}

fn open_port_warning(bound: std::net::SocketAddr, client_tokens: &[ticketing_proto::auth::Secret]) -> Option<String> {
    (client_tokens.is_empty() && !bound.ip().is_loopback()).then(|| {
        format!(
            "the client port {bound} listens beyond loopback with client authentication OFF: anyone who reaches it \
             can take, hold and release locks; set --client-tokens-file (or TICKETING_CLIENT_TOKENS), or listen on \
             loopback"
        )
    })
}

/// THE ONE SEAM for cluster mode: builds the openraft-backed [`Replicator`]
/// (peer port, Raft, bootstrap or join) announcing `advertise` to clients,
/// with the peer tokens and peer TLS of `material`. `metrics`: where the
/// peer port counts what its limits refuse.
pub async fn cluster_replicator(
    config: &Config,
    advertise: &Addr,
    material: &Material,
    metrics: &Metrics,
    data: Option<Arc<DataDir>>,
    net: Option<Arc<dyn Net>>,
) -> Result<cluster::Started, ClusterError> {
    let mut cc = cluster::ClusterConfig::from_config(config, advertise.clone(), material);
    if let Some(net) = net {
        cc.net = net;
    }
    cc.limits.metrics = metrics.limits.clone();
    if let Some(raft) = &metrics.raft {
        cc.commit_seconds = Some(raft.commit.clone());
        cc.hurried_campaigns = raft.hurried_campaigns.clone();
        raft.election_timeout.set(config.election_timeout_max_ms as f64 / 1000.0);
    }
    cc.data = data;
    cluster::start(cc).await
}

/// Runs the server on `listener` until `shutdown` completes, then shuts
/// down gracefully (Raft included). Standalone without `--peers`, cluster
/// mode otherwise. A refused `--bootstrap` shuts down the same way and is
/// returned as the error. The one entry point; [`Builder`] adds the options
/// (reload on a signal, a replicator built by a test).
pub async fn run(config: Config, listener: impl Accept, shutdown: impl Future) -> Result<()> {
    Builder::new(config).run(listener, shutdown).await
}

/// A server with options, run by [`Builder::run`].
pub struct Builder {
    config: Config,
    reload: Option<tokio::signal::unix::Signal>,
    data: Option<Arc<DataDir>>,
    parts: Option<Parts>,
    net: Option<Arc<dyn Net>>,
    wall: Option<WallClock>,
}

/// What a simulation replaces: the peer network and the wall clock.
struct Seams {
    net: Option<Arc<dyn Net>>,
    wall: WallClock,
}

/// A replicator and manager built by the caller.
struct Parts {
    advertise: Addr,
    replicator: Arc<dyn Replicator>,
    manager: ManagerHandle,
}

impl Builder {
    /// A server for `config` (what [`run`] runs).
    pub fn new(config: Config) -> Builder {
        Builder { config, reload: None, data: None, parts: None, net: None, wall: None }
    }

    /// Every value `reload` yields re-reads the tokens and certificates
    /// ([`Material::reload`]; the binary feeds it SIGHUP).
    pub fn reload(mut self, reload: tokio::signal::unix::Signal) -> Builder {
        self.reload = Some(reload);
        self
    }

    /// `--data-dir` already opened ([`crate::durable::open_for`]): the binary
    /// opens it before it binds, so a refused DIR never prints the ready
    /// line. Without it, [`Builder::run`] opens the config's DIR itself.
    pub fn data(mut self, data: Option<Arc<DataDir>>) -> Builder {
        self.data = data;
        self
    }

    /// Serves clients with a replicator and manager built by the caller
    /// (tests of the leadership seam), announcing `advertise`: no cluster,
    /// no admin HTTP, no reload.
    pub fn replicator(mut self, advertise: Addr, replicator: Arc<dyn Replicator>, manager: ManagerHandle) -> Builder {
        self.parts = Some(Parts { advertise, replicator, manager });
        self
    }

    /// The network the peer port binds on and the peer links dial (default
    /// TCP; a simulated one in a simulation). The client port is the
    /// listener given to [`Builder::run`].
    pub fn net(mut self, net: Arc<dyn Net>) -> Builder {
        self.net = Some(net);
        self
    }

    /// The wall clock new tokens start from (default the system's; a
    /// simulated one in a simulation).
    pub fn wall_clock(mut self, wall: WallClock) -> Builder {
        self.wall = Some(wall);
        self
    }

    /// Runs until `shutdown` completes (see [`run`]).
    pub async fn run(self, listener: impl Accept, shutdown: impl Future) -> Result<()> {
        let Builder { config, reload, data, parts, net, wall } = self;
        let material = Arc::new(Material::load(&config)?);
        match parts {
            Some(Parts { advertise, replicator, manager }) => {
                serve_clients(&config, listener, advertise, replicator, manager, &material, shutdown).await?;
                Ok(())
            }
            None => {
                let data = match data {
                    Some(d) => Some(d),
                    None => crate::durable::open_for(&config)?,
                };
                let seams = Seams { net, wall: wall.unwrap_or_else(crate::leader::system_wall) };
                run_node(config, data, listener, shutdown, reload, material, seams).await
            }
        }
    }
}

/// The whole node: replicator (standalone or cluster), manager, admin HTTP,
/// reload, the client port, and Raft's shutdown at the end. `data`: the
/// opened `--data-dir` (durable mode), `None` in memory mode.
async fn run_node(
    config: Config,
    data: Option<Arc<DataDir>>,
    listener: impl Accept,
    shutdown: impl Future,
    reload: Option<tokio::signal::unix::Signal>,
    material: Arc<Material>,
    seams: Seams,
) -> Result<()> {
    let Seams { net, wall } = seams;
    let advertise = advertise_addr(&config, &listener)?;
    let metrics = Arc::new(Metrics::new(!config.is_standalone()));
    metrics.max_waiters.set(gauge_value(config.limits.max_waiters));
    let (replicator, cluster, failed): (Arc<dyn Replicator>, _, _) = if config.is_standalone() {
        let replicator: Arc<dyn Replicator> = match data {
            Some(dir) => Arc::new(DurableStandalone::open(advertise.clone(), dir)?),
            None => Arc::new(Standalone::new(advertise.clone())),
        };
        (replicator, None, None)
    } else {
        let started = cluster_replicator(&config, &advertise, &material, &metrics, data, net).await?;
        (started.replicator.clone(), Some(started.replicator), Some(started.failed))
    };
    // Stops on the signal, or with the error of a refused bootstrap.
    let stop = async move {
        let failed = async {
            match failed {
                Some(rx) => match rx.await {
                    Ok(e) => e,
                    // The node can no longer fail this way.
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown => None,
            e = failed => Some(e),
        }
    };
    let manager =
        manager::spawn_with_wall(replicator.clone(), config.limits.clone(), metrics.clone(), advertise.clone(), wall);
    if let Some(addr) = &config.admin_listen {
        let admin = TcpListener::bind(addr).await.with_context(|| format!("cannot bind --admin-listen {addr}"))?;
        let state = crate::admin::AdminState {
            manager: manager.clone(),
            replicator: replicator.clone(),
            cluster: cluster.clone(),
            tokens: material.admin_tokens.clone(),
            tls: material.admin_tls.clone(),
        };
        let limits = crate::admin::AdminLimits {
            max_connections: config.admin_max_connections,
            tls: material.admin_tls.clone(),
        };
        if let Some(w) = admin_open_warning(admin.local_addr()?, &config.admin_tokens) {
            warn!("{w}");
        }
        tokio::spawn(async move {
            if let Err(e) = crate::admin::serve(admin, state, limits).await {
                warn!(error = %e, "admin HTTP stopped");
            }
        });
    }
    if let Some(mut signal) = reload {
        let (material, config, metrics) = (material.clone(), config.clone(), metrics.clone());
        tokio::spawn(async move {
            while signal.recv().await.is_some() {
                info!("SIGHUP: reloading tokens and certificates");
                let problems = material.reload(&config);
                metrics.count_reload(problems.is_empty());
            }
        });
    }
    let served = serve_clients(&config, listener, advertise, replicator, manager, &material, stop).await;
    if let Some(c) = &cluster {
        if tokio::time::timeout(RAFT_SHUTDOWN_TIMEOUT, c.shutdown()).await.is_err() {
            warn!("Raft did not stop in time");
        }
    }
    match served? {
        Some(failure) => Err(failure.into()),
        None => Ok(()),
    }
}

/// The client port with the tokens and TLS of `material` (replaced on
/// reload) until `shutdown` completes, then the graceful shutdown; returns
/// what `shutdown` completed with.
async fn serve_clients<F: Future>(
    config: &Config,
    listener: impl Accept,
    advertise: Addr,
    replicator: Arc<dyn Replicator>,
    manager: ManagerHandle,
    material: &Material,
    shutdown: F,
) -> Result<F::Output> {
    let tls = material.client_tls.clone();
    let ctx = Arc::new(ConnContext {
        manager: manager.clone(),
        leadership: replicator.leadership(),
        client_tokens: material.client_tokens.clone(),
        advertise: advertise.clone(),
        max_pending: config.limits.max_pending_per_conn,
        max_write_buffer: config.limits.max_write_buffer_bytes,
        write_buffers: crate::conn::WriteBuffers::new(config.limits.max_total_write_buffer_bytes),
    });
    let (notify_shutdown, _) = broadcast::channel(1);
    let (shutdown_complete_tx, mut shutdown_complete_rx) = mpsc::channel::<()>(1);
    let listener = Listener {
        listener,
        limit: Arc::new(Semaphore::new(config.limits.max_connections)),
        tls,
        notify_shutdown,
        shutdown_complete: shutdown_complete_tx,
        ctx,
        handshake_timeout: config.handshake_timeout,
        preauth: crate::preauth::PreAuth::new(
            config.limits.max_preauth_connections,
            config.limits.max_preauth_per_address,
        ),
    };
    if let Ok(bound) = listener.listener.local_addr() {
        // Memory mode with no grace beyond loopback: a restart is a new domain
        // that forgets its holders (docs/deployment.md, "Start grace").
        let warnings = [config.restart_hazard_warning(bound), open_port_warning(bound, config.principals.tokens())];
        for warning in warnings.into_iter().flatten() {
            warn!("{warning}");
        }
    }
    info!(
        advertise = %advertise,
        mode = if config.is_standalone() { "standalone" } else { "cluster" },
        tls = listener.tls.is_on(),
        client_certificates = config.tls_client_ca.is_some(),
        auth = !config.principals.auth_off(),
        "serving clients"
    );

    let stopped = tokio::select! {
        never = listener.run() => match never {},
        out = shutdown => out,
    };
    info!("shutting down");

    // 1. Stop accepting.
    let Listener { listener: socket, notify_shutdown, shutdown_complete, .. } = listener;
    drop(socket);
    // 2. Let in-flight proposals finish so their answers can still go out.
    if tokio::time::timeout(DRAIN_TIMEOUT, manager.drain()).await.is_err() {
        warn!("in-flight proposals did not finish in time");
    }
    // 3. `E shutting_down` to every connection (closing the broadcast wakes them all).
    drop(notify_shutdown);
    drop(shutdown_complete);
    // 4. Wait for the connections to close.
    if tokio::time::timeout(CLOSE_TIMEOUT, shutdown_complete_rx.recv()).await.is_err() {
        warn!("some connections did not close in time");
    }
    info!("stopped");
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use super::open_port_warning;
    use ticketing_proto::auth::Secret;

    #[test]
    fn an_open_client_port_without_auth_is_warned_about() {
        let token = [Secret::from("t")];
        for (addr, auth, warned) in [
            ("127.0.0.1:5225", false, false),
            ("[::1]:5225", false, false),
            ("0.0.0.0:5225", false, true),
            ("[::]:5225", false, true),
            ("10.0.0.1:5225", false, true),
            ("0.0.0.0:5225", true, false),
        ] {
            let tokens: &[Secret] = if auth { &token } else { &[] };
            let w = open_port_warning(addr.parse().unwrap(), tokens);
            assert_eq!(w.is_some(), warned, "{addr} auth={auth}: {w:?}");
            if let Some(w) = w {
                assert!(w.contains("--client-tokens-file") && w.contains(addr), "{w}");
            }
        }
    }
}
