//! The console at `/ui/` (docs/operating.md, "Console"): read-only pages
//! embedded in the binary (nothing is fetched at run time, no CDN), their
//! JSON feeds, and the security headers every `/ui` answer carries.
//!
//! - `/ui/` cluster, `/ui/locks` and `/ui/locks/<key>` locks, `/ui/rates` rates;
//! - `/ui/static/<file>`: the CSS and JS (no inline script: the CSP forbids it);
//! - `/ui/api/series`: the last minutes of 1 s samples (see `series`);
//! - `/ui/api/contended?n=N`: the keys with the most waiters (on the serving leader).
//!
//! The pages read `/status` and `/locks/<key>` as they are.

use super::{series::Series, AdminState};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Serialize;
use std::sync::Arc;

/// The Content-Security-Policy of every `/ui` answer: only this origin, no
/// inline script or style, no framing, no plugins.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// One embedded file.
pub struct Asset {
    /// Its path under `/ui/static/`.
    pub name: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $ct:literal) => {
        Asset { name: $name, content_type: $ct, body: include_bytes!(concat!("../../ui/", $name)) }
    };
}

/// The pages, by the name under `ticketing-server/ui/`.
pub const PAGES: &[Asset] = &[
    asset!("cluster.html", "text/html; charset=utf-8"),
    asset!("locks.html", "text/html; charset=utf-8"),
    asset!("rates.html", "text/html; charset=utf-8"),
];

/// Everything served under `/ui/static/`.
pub const STATIC: &[Asset] = &[
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("common.js", "text/javascript; charset=utf-8"),
    asset!("cluster.js", "text/javascript; charset=utf-8"),
    asset!("locks.js", "text/javascript; charset=utf-8"),
    asset!("rates.js", "text/javascript; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
];

fn page(name: &str) -> Response {
    match PAGES.iter().find(|a| a.name == name) {
        Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response(),
        None => not_found(),
    }
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "not found\n").into_response()
}

/// The routes of the console, with their headers.
pub fn routes() -> Router<AdminState> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(|| async { page("cluster.html") }))
        .route("/ui/*path", get(dispatch))
        .layer(axum::middleware::map_response(headers))
}

/// Every path under `/ui/` but the JSON feeds, resolved here (one place, so
/// an unknown path is a plain 404 with the same headers).
async fn dispatch(
    State(s): State<AdminState>,
    Extension(series): Extension<Arc<Series>>,
    Path(path): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    match path.as_str() {
        "locks" | "locks/" => page("locks.html"),
        p if p.starts_with("locks/") => page("locks.html"),
        "rates" => page("rates.html"),
        "api/series" => Json(series.snapshot()).into_response(),
        "api/contended" => contended(&s, query_param(q.as_deref(), "n")).await,
        p if p.starts_with("api/locks/") => lock(&s, &p["api/locks/".len()..]).await,
        p => match p.strip_prefix("static/").and_then(|f| STATIC.iter().find(|a| a.name == f)) {
            Some(a) => ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response(),
            None => not_found(),
        },
    }
}

async fn headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// The value of `name` in a query string (`a=1&n=5`), if present (no
/// percent-decoding: the console's parameters are numbers).
fn query_param<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Most keys `/ui/api/contended` lists.
pub const MAX_CONTENDED: usize = 100;

#[derive(Serialize)]
struct ContendedKey {
    key: String,
    waiters: usize,
}

#[derive(Serialize)]
struct ContendedBody {
    keys: Vec<ContendedKey>,
}

async fn contended(s: &AdminState, n: Option<&str>) -> Response {
    let n = match n.map(str::parse::<usize>) {
        None => 10,
        Some(Ok(n)) if n <= MAX_CONTENDED => n,
        Some(_) => {
            let msg = format!("n must be a whole number from 0 to {MAX_CONTENDED}");
            return super::error(StatusCode::BAD_REQUEST, msg);
        }
    };
    if let Some(r) = from_leader(s, &format!("/ui/api/contended?n={n}")).await {
        return r;
    }
    match s.manager.contended(n).await {
        Ok(top) => Json(ContendedBody {
            keys: top.into_iter().map(|(k, waiters)| ContendedKey { key: k.as_str().to_owned(), waiters }).collect(),
        })
        .into_response(),
        Err(e) => super::error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// `/ui/api/locks/<key>`: `/locks/<key>` of the serving leader, read through
/// this node when it is a follower, so the locks page works on every node.
async fn lock(s: &AdminState, key: &str) -> Response {
    if let Err(e) = ticketing_proto::Key::new(key.to_owned()) {
        return super::error(StatusCode::BAD_REQUEST, e.to_string());
    }
    if let Some(r) = from_leader(s, &format!("/locks/{}", encode_path(key))).await {
        return r;
    }
    super::lock(State(s.clone()), Path(key.to_owned())).await
}

/// `None` when this node serves (answer locally). Otherwise the leader's
/// answer to `path` on its admin port, marked with `X-Ticketing-Leader-Admin`,
/// or, without a reachable leader (or with admin TLS), `503 not the leader`.
async fn from_leader(s: &AdminState, path: &str) -> Option<Response> {
    let not_serving = super::not_serving(s)?;
    if s.tls.is_on() {
        // This read is plain HTTP: with admin TLS the token would cross the
        // network in clear. The page links to the leader's console instead.
        return Some(not_serving);
    }
    let Some(addr) = super::other_leader_admin(s) else { return Some(not_serving) };
    // Read with this node's own admin token (the caller passed this node's
    // check; the nodes of a cluster share their admin tokens).
    let bearer = s.tokens.get().first().map(|t| String::from_utf8_lossy(t.expose()).into_owned());
    match get_json(&addr, path, bearer.as_deref()).await {
        Ok((StatusCode::UNAUTHORIZED, _)) => Some(super::error(
            StatusCode::BAD_GATEWAY,
            format!(
                "the leader's admin port {addr} refused this node's admin token: give every node the same admin tokens"
            ),
        )),
        Ok((status, body)) => {
            let mut r = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            if let Ok(v) = HeaderValue::from_str(&addr) {
                r.headers_mut().insert(LEADER_ADMIN, v);
            }
            Some(r)
        }
        Err(e) => {
            tracing::debug!(leader_admin = %addr, error = %e, "console: the leader's admin port did not answer");
            Some(not_serving)
        }
    }
}

/// The header naming the leader's admin address an answer was read from.
pub const LEADER_ADMIN: &str = "x-ticketing-leader-admin";

/// How long a read from the leader's admin port may take.
const LEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// The largest body read from the leader (a key with every waiter fits).
const LEADER_READ_LIMIT: usize = 4 << 20;

/// One HTTP/1.1 GET of `path` on `addr` (hyper's client), bounded in time and size.
async fn get_json(addr: &str, path: &str, bearer: Option<&str>) -> Result<(StatusCode, axum::body::Bytes), String> {
    use http_body_util::{BodyExt, Empty, Limited};
    let run = async {
        let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        let conn = tokio::spawn(conn);
        let mut req =
            axum::http::Request::get(path).header(header::HOST, addr).header(header::ACCEPT, "application/json");
        if let Some(token) = bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let req = req.body(Empty::<axum::body::Bytes>::new()).map_err(|e| e.to_string())?;
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), LEADER_READ_LIMIT).collect().await.map_err(|e| e.to_string())?;
        conn.abort();
        Ok((status, body.to_bytes()))
    };
    tokio::time::timeout(LEADER_READ_TIMEOUT, run).await.map_err(|_| "timed out".to_owned())?
}

/// Percent-encodes a key for a URL path: every byte but unreserved ones and `/`.
fn encode_path(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_and_path_encoding() {
        assert_eq!(query_param(Some("a=1&n=5"), "n"), Some("5"));
        assert_eq!(query_param(Some("nn=5"), "n"), None);
        assert_eq!(query_param(None, "n"), None);
        assert_eq!(encode_path("orders/42-a_b.c~"), "orders/42-a_b.c~");
        assert_eq!(encode_path("a?b#c%d&e+f"), "a%3Fb%23c%25d%26e%2Bf");
    }
}
