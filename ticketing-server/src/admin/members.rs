//! The membership API (docs/operating.md, "Growing and shrinking a
//! cluster"): `GET /cluster` lists the members, `POST /cluster/add`
//! (`{"peers": [A, B]}`) grows the voters 3 → 5, `POST /cluster/remove`
//! (`{"nodes": [N, M]}`, NodeIds or peer addresses) shrinks them 5 → 3.
//! `GET /snapshot` is a backup of the leader's lock state. Only the serving
//! leader changes the membership or takes a backup; a follower answers
//! `503` with the leader's admin address, like `/locks/<key>`.

use super::{error, not_serving, AdminState};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use std::time::Duration;

/// How long the HTTP answer waits for a change; a change that takes longer
/// goes on (`202`) and `GET /cluster` shows when it is done. Below the
/// admin port's lifetime of a connection.
const ANSWER_WITHIN: Duration = Duration::from_secs(45);

/// The routes (behind the admin token).
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/cluster", get(list))
        .route("/cluster/add", post(add))
        .route("/cluster/remove", post(remove))
        .route("/snapshot", get(snapshot))
}

/// `GET /snapshot`: a backup of the leader's applied lock state
/// (docs/operating.md, "Backup and disaster recovery"); a follower answers
/// `503` with the leader's admin address.
async fn snapshot(State(s): State<AdminState>) -> Response {
    let Some(c) = s.cluster.clone() else {
        return error(
            StatusCode::NOT_FOUND,
            "a standalone server has no cluster snapshot: copy its stopped data dir".into(),
        );
    };
    if let Some(r) = not_serving(&s) {
        return r;
    }
    match c.backup().await {
        Some(file) => (
            [
                (axum::http::header::CONTENT_TYPE, "application/octet-stream"),
                (axum::http::header::CONTENT_DISPOSITION, "attachment; filename=\"ticketing.backup\""),
            ],
            file,
        )
            .into_response(),
        None => error(StatusCode::SERVICE_UNAVAILABLE, "not in a domain".into()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddBody {
    peers: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RemoveBody {
    nodes: Vec<String>,
}

/// The members as this node sees them (any node answers).
async fn list(State(s): State<AdminState>) -> Response {
    match &s.cluster {
        Some(c) => Json(c.status().await).into_response(),
        None => error(StatusCode::NOT_FOUND, "a standalone server has no cluster membership".into()),
    }
}

async fn add(
    State(s): State<AdminState>,
    body: Result<Json<AddBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let peers = match body {
        Ok(Json(b)) => b.peers,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("expected {{\"peers\": [A, B]}}: {e}")),
    };
    change(s, move |c| async move { c.grow(&peers).await }).await
}

async fn remove(
    State(s): State<AdminState>,
    body: Result<Json<RemoveBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let nodes = match body {
        Ok(Json(b)) => b.nodes,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("expected {{\"nodes\": [N, M]}}: {e}")),
    };
    change(s, move |c| async move { c.shrink(&nodes).await }).await
}

/// Runs a change on its own task (it finishes even when the HTTP
/// connection goes away); answers the new membership (`200`), the refusal
/// (`409`), `503` on a follower, or `202` when it takes longer than
/// [`ANSWER_WITHIN`].
async fn change<F, Fut>(s: AdminState, run: F) -> Response
where
    F: FnOnce(std::sync::Arc<crate::cluster::ClusterReplicator>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let Some(c) = s.cluster.clone() else {
        return error(StatusCode::NOT_FOUND, "a standalone server has no cluster membership".into());
    };
    if let Some(r) = not_serving(&s) {
        return r;
    }
    let task = tokio::spawn(run(c.clone()));
    match tokio::time::timeout(ANSWER_WITHIN, task).await {
        Ok(Ok(Ok(()))) => Json(c.status().await).into_response(),
        Ok(Ok(Err(why))) if why == crate::cluster::membership::NOT_LEADER => {
            not_serving(&s).unwrap_or_else(|| error(StatusCode::SERVICE_UNAVAILABLE, why))
        }
        Ok(Ok(Err(why))) => error(StatusCode::CONFLICT, why),
        Ok(Err(_)) => error(StatusCode::INTERNAL_SERVER_ERROR, "the membership change failed".into()),
        Err(_) => error(
            StatusCode::ACCEPTED,
            format!("the change is still running after {}s: see GET /cluster", ANSWER_WITHIN.as_secs()),
        ),
    }
}
