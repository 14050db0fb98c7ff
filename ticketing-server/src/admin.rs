//! Admin HTTP (`--admin-listen`, docs/deployment.md "Admin HTTP"):
//! `/healthz` and `/readyz` (docs/deployment.md, "Health"), `/status` (JSON), `/metrics` (OpenMetrics text of the one
//! registry in `metrics`), `/locks/<key>` (JSON, on the serving
//! leader), and the console under `/ui/` (`ui`, docs/operating.md
//! "Console"), which reads the same endpoints plus its own rates (`series`).
//! Works in standalone and cluster mode. Bodies are serde structs; each
//! endpoint reads only what it shows.

pub mod accept;
pub mod members;
pub mod series;
pub mod ui;

pub use accept::{AdminLimits, CONNECTION_TIMEOUT, HEADER_TIMEOUT};

use crate::cluster::{ClusterReplicator, ClusterStatus};
use crate::manager::{LockInfo, ManagerHandle};
use crate::metrics::gauge_value;
use crate::replication::{AppliedSummary, Replicator};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Serialize;
use series::Series;
use std::sync::Arc;
use ticketing_proto::Key;
use tokio::net::TcpListener;

/// What the admin endpoints read.
#[derive(Clone)]
pub struct AdminState {
    /// The lock manager (metrics, `/locks/<key>`).
    pub manager: ManagerHandle,
    /// The replicator (leadership, applied state).
    pub replicator: Arc<dyn Replicator>,
    /// The cluster replicator in cluster mode.
    pub cluster: Option<Arc<ClusterReplicator>>,
    /// Admin tokens; empty = no token asked (replaced on SIGHUP).
    pub tokens: Arc<crate::reload::Current<Vec<ticketing_proto::auth::Secret>>>,
    /// The admin port's TLS: when on, a follower's console never reads the
    /// leader through itself (that read is plain HTTP: its token would
    /// cross the network in clear); the page links to the leader instead.
    pub tls: Arc<crate::reload::ClientTls>,
}

/// Serves the admin endpoints on `listener` until the task is dropped
/// (the console's sampler stops with it), within `limits` (`accept`:
/// connection slots, the unauthenticated budget, TLS, timeouts).
pub async fn serve(listener: TcpListener, state: AdminState, limits: AdminLimits) -> std::io::Result<()> {
    let series = Arc::new(Series::default());
    let _sampler = AbortOnDrop(tokio::spawn(sample(state.clone(), series.clone())));
    let counters = state.manager.metrics().limits.clone();
    let app = app(state, series);
    match accept::accept_loop(listener, app, limits, counters).await {}
}

/// Every admin route (tests serve it without a socket).
pub fn app(state: AdminState, series: Arc<Series>) -> Router {
    let guarded = Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/locks/*key", get(lock))
        .merge(ui::routes())
        .merge(members::routes())
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), bearer));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .layer(Extension(series))
        .with_state(state)
}

/// The console's pages and static files hold no data (they are built into
/// the binary): they load without the token, and their scripts send it with
/// every read of `/status` and `/ui/api/…`.
fn is_console_asset(path: &str) -> bool {
    path == "/ui" || (path.starts_with("/ui/") && !path.starts_with("/ui/api/"))
}

/// With admin tokens, every path but `/healthz` and `/readyz` needs
/// `Authorization: Bearer <token>` (docs/security.md, "The admin port"):
/// any current token, compared in constant time; else `401`.
async fn bearer(
    State(s): State<AdminState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let tokens = s.tokens.get();
    if tokens.is_empty() || is_console_asset(request.uri().path()) {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| ticketing_proto::auth::Secret::from(t.trim()));
    match given {
        // `Secret`'s `==` compares in constant time.
        Some(t) if tokens.contains(&t) => next.run(request).await,
        _ => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"ticketing-admin\"")],
            "unauthorized: this admin port needs Authorization: Bearer <admin token>\n",
        )
            .into_response(),
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Records one scrape of the registry every [`series::INTERVAL`].
async fn sample(state: AdminState, series: Arc<Series>) {
    let mut every = tokio::time::interval(series::INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        refresh_gauges(&state).await;
        if let Ok(text) = state.manager.metrics().encode() {
            series.record(std::time::Instant::now(), series::parse(&text));
        }
    }
}

/// Sets the leadership and Raft gauges, read only when encoding.
async fn refresh_gauges(s: &AdminState) {
    let m = s.manager.metrics();
    m.serving.set(i64::from(s.replicator.leadership().borrow().serving));
    m.ready.set(i64::from(ready_now(s).await.is_ok()));
    if let (Some(c), Some(raft)) = (&s.cluster, &m.raft) {
        let cs = c.status().await;
        raft.term.set(gauge_value(cs.term));
        raft.commit_index.set(gauge_value(cs.commit_index.unwrap_or(0)));
        raft.applied_index.set(gauge_value(cs.applied_index.unwrap_or(0)));
        raft.is_leader.set(i64::from(cs.role == "leader"));
        raft.voters.set(gauge_value(cs.members.iter().filter(|m| m.voter).count()));
        raft.quorum_ack_age.set(cs.millis_since_quorum_ack.map_or(0.0, |ms| ms as f64 / 1000.0));
    }
}

/// How long `/healthz` waits for the lock manager's loop to answer.
const LIVENESS_LIMIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Liveness: the lock manager's loop answers a request within
/// [`LIVENESS_LIMIT`] (a node whose Raft or disk failed has already exited).
async fn healthz(State(s): State<AdminState>) -> Response {
    match tokio::time::timeout(LIVENESS_LIMIT, s.manager.contended(0)).await {
        Ok(Ok(_)) => (StatusCode::OK, "ok\n").into_response(),
        Ok(Err(e)) => (StatusCode::SERVICE_UNAVAILABLE, format!("not live: {e}\n")).into_response(),
        Err(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "not live: the lock manager did not answer within 2 s\n").into_response()
        }
    }
}

/// Readiness (docs/deployment.md, "Health"): `Ok` with what this node does,
/// or `Err` with why it is not ready.
pub fn readiness(
    serving: bool,
    active: bool,
    leader: Option<&str>,
    cluster: Option<ClusterReadiness>,
) -> Result<String, String> {
    if serving {
        return Ok("ready: serving clients".into());
    }
    let Some(c) = cluster else {
        return Err("not ready: not serving".into());
    };
    if !active {
        return Err("not ready: not a member of a fencing domain yet (waiting to be joined or bootstrapped)".into());
    }
    if c.is_leader {
        return Err("not ready: the Raft leader without a live quorum, or not caught up with its term yet".into());
    }
    match leader {
        Some(l) if c.hears_leader => Ok(format!("ready: follower of the serving leader {l}")),
        Some(l) => Err(format!("not ready: no word from the leader {l} within the election timeout")),
        None => Err("not ready: no serving leader known".into()),
    }
}

/// What readiness needs to know of a cluster node.
#[derive(Debug, Clone, Copy)]
pub struct ClusterReadiness {
    /// Raft says this node is the leader.
    pub is_leader: bool,
    /// A leader sent entries or a heartbeat within the election timeout.
    pub hears_leader: bool,
}

async fn ready_now(s: &AdminState) -> Result<String, String> {
    let (serving, active, leader) = {
        let l = s.replicator.leadership();
        let l = l.borrow();
        (l.serving, l.active, l.leader.as_ref().map(|a| a.as_str().to_owned()))
    };
    let cluster = s.cluster.as_ref().map(|c| ClusterReadiness {
        is_leader: c.raft().metrics().borrow().state == openraft::ServerState::Leader,
        hears_leader: c.hears_leader(),
    });
    readiness(serving, active, leader.as_deref(), cluster)
}

async fn readyz(State(s): State<AdminState>) -> Response {
    let ready = ready_now(&s).await;
    s.manager.metrics().ready.set(i64::from(ready.is_ok()));
    match ready {
        Ok(why) => (StatusCode::OK, why + "\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why + "\n").into_response(),
    }
}

/// What `/status` says about this node's role.
#[derive(Serialize)]
#[serde(untagged)]
enum NodeView {
    Standalone { role: &'static str, serving: bool, leader: Option<String> },
    Cluster(ClusterStatus),
}

/// The body of `/status`.
#[derive(Serialize)]
struct StatusBody {
    mode: &'static str,
    #[serde(flatten)]
    node: NodeView,
    active: bool,
    #[serde(flatten)]
    applied: AppliedSummary,
}

async fn status(State(s): State<AdminState>) -> Response {
    let (serving, active, leader) = {
        let l = s.replicator.leadership();
        let l = l.borrow();
        (l.serving, l.active, l.leader.as_ref().map(|a| a.as_str().to_owned()))
    };
    let (mode, node) = match &s.cluster {
        Some(c) => ("cluster", NodeView::Cluster(c.status().await)),
        None => ("standalone", NodeView::Standalone { role: "leader", serving, leader }),
    };
    Json(StatusBody { mode, node, active, applied: s.replicator.applied_summary() }).into_response()
}

async fn metrics(State(s): State<AdminState>) -> Response {
    refresh_gauges(&s).await;
    match s.manager.metrics().encode() {
        Ok(out) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out)
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

/// An error body.
#[derive(Serialize)]
struct ErrorBody {
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    leader: Option<Option<String>>,
    /// On a follower: the leader's admin HTTP address, when it knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    leader_admin: Option<Option<String>>,
}

/// The body of `/locks/<key>`.
#[derive(Serialize)]
struct LockBody {
    key: String,
    #[serde(flatten)]
    info: LockInfo,
}

/// An error answer without a leader hint.
fn error(status: StatusCode, error: String) -> Response {
    (status, Json(ErrorBody { error, leader: None, leader_admin: None })).into_response()
}

/// The admin address of the leader when this node does not serve and knows
/// another node leads (never this node's own).
fn other_leader_admin(s: &AdminState) -> Option<String> {
    let known = {
        let l = s.replicator.leadership();
        let l = l.borrow();
        !l.serving && l.leader.is_some()
    };
    known.then(|| s.cluster.as_ref().and_then(|c| c.leader_admin())).flatten()
}

/// `503 not the leader` (with the leader's client and admin addresses when
/// known) unless this node serves: what only the leader can answer.
fn not_serving(s: &AdminState) -> Option<Response> {
    let (serving, leader) = {
        let l = s.replicator.leadership();
        let l = l.borrow();
        (l.serving, l.leader.as_ref().map(|a| a.as_str().to_owned()))
    };
    if serving {
        return None;
    }
    let leader_admin = s.cluster.as_ref().map(|c| c.leader_admin()).filter(|_| leader.is_some());
    let body =
        ErrorBody { error: "not the leader".into(), leader: Some(leader), leader_admin: Some(leader_admin.flatten()) };
    Some((StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response())
}

async fn lock(State(s): State<AdminState>, Path(key): Path<String>) -> Response {
    let k = match Key::new(key.clone()) {
        Ok(k) => k,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.to_string()),
    };
    if let Some(r) = not_serving(&s) {
        return r;
    }
    match s.manager.lock_info(k).await {
        Ok(info) => Json(LockBody { key, info }).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[cfg(test)]
mod tests;
