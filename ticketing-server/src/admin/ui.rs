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
    if let Some(r) = super::not_serving(s) {
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
