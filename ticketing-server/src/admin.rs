//! Admin HTTP (SPEC §9 `--admin-listen`): `/healthz`, `/status` (JSON),
//! `/metrics` (Prometheus text, `prometheus-client`), `/locks/<key>` (JSON,
//! on the serving leader). Works in standalone and cluster mode.

use crate::cluster::ClusterReplicator;
use crate::manager::ManagerHandle;
use crate::replication::Replicator;
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
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

async fn status(State(s): State<AdminState>) -> Response {
    let leadership = s.replicator.leadership().borrow().clone();
    let (held, last_token) = {
        let st = s.replicator.applied();
        (st.held_count(), st.last_token())
    };
    let body = match &s.cluster {
        Some(c) => {
            let cs = c.status().await;
            let mut v = serde_json::to_value(&cs).unwrap_or_else(|_| json!({}));
            if let Some(o) = v.as_object_mut() {
                o.insert("mode".into(), json!("cluster"));
                o.insert("active".into(), json!(leadership.active));
                o.insert("held_keys".into(), json!(held));
                o.insert("last_token".into(), json!(last_token));
            }
            v
        }
        None => json!({
            "mode": "standalone",
            "role": "leader",
            "serving": leadership.serving,
            "active": leadership.active,
            "leader": leadership.leader.map(|a| a.as_str().to_owned()),
            "held_keys": held,
            "last_token": last_token,
        }),
    };
    Json(body).into_response()
}

fn counter(reg: &mut Registry, name: &str, help: &str, v: &AtomicU64) {
    let c = Counter::<u64>::default();
    c.inc_by(v.load(Ordering::Relaxed));
    reg.register(name, help, c);
}

fn gauge(reg: &mut Registry, name: &str, help: &str, v: i64) {
    let g = Gauge::<i64>::default();
    g.set(v);
    reg.register(name, help, g);
}

async fn metrics(State(s): State<AdminState>) -> Response {
    let m = s.manager.metrics().clone();
    let mut reg = Registry::with_prefix("ticketing");
    counter(&mut reg, "grants", "Grants committed (direct and hand-over)", &m.grants);
    let releases = Family::<Vec<(String, String)>, Counter<u64>>::default();
    releases
        .get_or_create(&vec![("result".into(), "released".into())])
        .inc_by(m.releases_released.load(Ordering::Relaxed));
    releases
        .get_or_create(&vec![("result".into(), "not_holder".into())])
        .inc_by(m.releases_not_holder.load(Ordering::Relaxed));
    reg.register("releases", "Releases by result", releases);
    counter(&mut reg, "expiries", "Leases that ended", &m.expiries);
    counter(&mut reg, "timeouts", "Acquires answered T", &m.timeouts);
    counter(&mut reg, "busy", "Acquires answered B", &m.busy);
    counter(&mut reg, "proposal_errors", "Proposals that failed", &m.proposal_errors);
    counter(&mut reg, "grant_wait_ms_sum", "Sum of waited_ms over all grants (acquire to grant)", &m.grant_wait_ms_sum);
    gauge(&mut reg, "waiters", "Waiters queued", m.waiters.load(Ordering::Relaxed) as i64);
    gauge(&mut reg, "held_keys", "Keys held", m.held_keys.load(Ordering::Relaxed) as i64);
    gauge(&mut reg, "connections", "Client connections", m.connections.load(Ordering::Relaxed) as i64);
    let leadership = s.replicator.leadership().borrow().clone();
    gauge(&mut reg, "serving", "1 if this node serves clients", i64::from(leadership.serving));
    if let Some(c) = &s.cluster {
        let cs = c.status().await;
        gauge(&mut reg, "raft_term", "Current Raft term", cs.term as i64);
        gauge(&mut reg, "raft_commit_index", "Committed log index", cs.commit_index.unwrap_or(0) as i64);
        gauge(&mut reg, "raft_applied_index", "Applied log index", cs.applied_index.unwrap_or(0) as i64);
        gauge(&mut reg, "raft_is_leader", "1 if this node is the Raft leader", i64::from(cs.role == "leader"));
        gauge(
            &mut reg,
            "raft_voters",
            "Voters in the membership",
            cs.members.iter().filter(|m| m.voter).count() as i64,
        );
    }
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response();
    }
    // The acquire-to-grant histogram, from the manager's bucket counts
    // (prometheus-client's Histogram cannot be loaded from counts).
    let histogram = grant_wait_histogram(&m);
    match out.strip_suffix("# EOF\n") {
        Some(head) => out = format!("{head}{histogram}# EOF\n"),
        None => out.push_str(&histogram),
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], out).into_response()
}

/// OpenMetrics text of `ticketing_grant_wait_seconds` (acquire to grant).
fn grant_wait_histogram(m: &crate::manager::Metrics) -> String {
    use crate::manager::GRANT_WAIT_BUCKETS_MS;
    let mut out = String::from(
        "# HELP ticketing_grant_wait_seconds Time from reading an acquire to committing its grant.\n\
         # TYPE ticketing_grant_wait_seconds histogram\n",
    );
    let mut cumulative = 0u64;
    for (i, c) in m.grant_wait_ms_buckets.iter().enumerate() {
        cumulative += c.load(Ordering::Relaxed);
        let le = match GRANT_WAIT_BUCKETS_MS.get(i) {
            Some(ms) => format!("{}", *ms as f64 / 1000.0),
            None => "+Inf".to_owned(),
        };
        out.push_str(&format!("ticketing_grant_wait_seconds_bucket{{le=\"{le}\"}} {cumulative}\n"));
    }
    let sum = m.grant_wait_ms_sum.load(Ordering::Relaxed) as f64 / 1000.0;
    out.push_str(&format!("ticketing_grant_wait_seconds_sum {sum}\nticketing_grant_wait_seconds_count {cumulative}\n"));
    out
}

async fn lock(State(s): State<AdminState>, Path(key): Path<String>) -> Response {
    let Ok(k) = Key::new(key.clone()) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "key must be 1-250 bytes in 0x21-0x7E"})))
            .into_response();
    };
    let leadership = s.replicator.leadership().borrow().clone();
    if !leadership.serving {
        let body = json!({"error": "not the leader", "leader": leadership.leader.map(|a| a.as_str().to_owned())});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    match s.manager.lock_info(k).await {
        Ok(info) => Json(json!({
            "key": key,
            "holder": info.holder.map(|h| json!({
                "owner": h.owner.as_str(),
                "token": h.token.get(),
                "remaining_ms": h.remaining_ms,
            })),
            "waiters": info.waiters,
        }))
        .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": e.to_string()}))).into_response(),
    }
}
