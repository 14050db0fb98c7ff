//! Admin HTTP (`--admin-listen`, docs/deployment.md "Admin HTTP"):
//! `/healthz`, `/status` (JSON), `/metrics` (OpenMetrics text of the one
//! registry in `manager::metrics`), `/locks/<key>` (JSON, on the serving
//! leader). Works in standalone and cluster mode. Bodies are serde structs;
//! each endpoint reads only what it shows.

use crate::cluster::{ClusterReplicator, ClusterStatus};
use crate::manager::metrics::gauge_value;
use crate::manager::{LockInfo, ManagerHandle};
use crate::replication::{AppliedSummary, Replicator};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
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
}

/// Serves the admin endpoints on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, state: AdminState) -> std::io::Result<()> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/locks/*key", get(lock))
        .with_state(state);
    axum::serve(listener, app).await
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
    let m = s.manager.metrics();
    m.serving.set(i64::from(s.replicator.leadership().borrow().serving));
    if let (Some(c), Some(raft)) = (&s.cluster, &m.raft) {
        let cs = c.status().await;
        raft.term.set(gauge_value(cs.term));
        raft.commit_index.set(gauge_value(cs.commit_index.unwrap_or(0)));
        raft.applied_index.set(gauge_value(cs.applied_index.unwrap_or(0)));
        raft.is_leader.set(i64::from(cs.role == "leader"));
        raft.voters.set(gauge_value(cs.members.iter().filter(|m| m.voter).count()));
    }
    match m.encode() {
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

async fn lock(State(s): State<AdminState>, Path(key): Path<String>) -> Response {
    let k = match Key::new(key.clone()) {
        Ok(k) => k,
        Err(e) => {
            let body = ErrorBody { error: e.to_string(), leader: None, leader_admin: None };
            return (StatusCode::BAD_REQUEST, Json(body)).into_response();
        }
    };
    let (serving, leader) = {
        let l = s.replicator.leadership();
        let l = l.borrow();
        (l.serving, l.leader.as_ref().map(|a| a.as_str().to_owned()))
    };
    if !serving {
        let leader_admin = s.cluster.as_ref().map(|c| c.leader_admin()).filter(|_| leader.is_some());
        let body = ErrorBody {
            error: "not the leader".into(),
            leader: Some(leader),
            leader_admin: Some(leader_admin.flatten()),
        };
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    match s.manager.lock_info(k).await {
        Ok(info) => Json(LockBody { key, info }).into_response(),
        Err(e) => {
            let body = ErrorBody { error: e.to_string(), leader: None, leader_admin: None };
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}
