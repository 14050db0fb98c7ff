//! The admin HTTP app served on a loopback socket: the console's embedded
//! assets (every file a page references is served, with its content type and
//! the security headers), its JSON feeds, and unknown paths.

use super::*;
use crate::config::Limits;
use crate::manager::{self, ConnId, Delivery, ManagerRequest};
use crate::replication::Standalone;
use std::collections::HashMap;
use std::time::Duration;
use ticketing_proto::{Addr, RequestId};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One raw HTTP/1.1 GET (bounded by a timeout: a hang fails the test).
async fn get(port: u16, path: &str) -> Answer {
    let run = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        out
    };
    let out = tokio::time::timeout(Duration::from_secs(10), run).await.expect("GET timed out");
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").expect("no end of headers");
    let head = String::from_utf8(out[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect::<HashMap<_, _>>();
    let mut body = out[split + 4..].to_vec();
    if headers.get("transfer-encoding").is_some_and(|v| v == "chunked") {
        body = dechunk(&body);
    }
    Answer { status, headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let nl = b.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&b[..nl]).unwrap().trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[nl + 2..nl + 2 + n]);
        b = &b[nl + 4 + n..];
    }
}

/// A standalone manager and the admin app on a free loopback port.
async fn start() -> (u16, ManagerHandle) {
    let addr = Addr::new("127.0.0.1:1").unwrap();
    let replicator: Arc<dyn Replicator> = Arc::new(Standalone::new(addr.clone()));
    let manager = manager::spawn(replicator.clone(), Limits::default(), Arc::default(), addr);
    let state =
        AdminState { manager: manager.clone(), replicator, cluster: None, tokens: Arc::default(), tls: Arc::default() };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(serve(listener, state, crate::admin::AdminLimits::default()));
    (port, manager)
}

fn assert_console_headers(a: &Answer, what: &str) {
    assert_eq!(a.header("content-security-policy"), ui::CSP, "{what}");
    assert_eq!(a.header("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(a.header("x-frame-options"), "DENY", "{what}");
}

/// The `/ui/static/...` paths an HTML page names in `src="…"` or `href="…"`.
fn referenced(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["src=\"", "href=\""] {
        for part in html.split(attr).skip(1) {
            let url = &part[..part.find('"').unwrap()];
            if url.starts_with("/ui/static/") {
                out.push(url.to_owned());
            }
        }
    }
    out
}

fn content_type_for(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, e)| e) {
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("html") => "text/html; charset=utf-8",
        other => panic!("no content type for {other:?}"),
    }
}

#[tokio::test]
async fn every_page_and_every_file_it_references_is_served_with_its_type_and_headers() {
    let (port, _m) = start().await;
    let mut seen = std::collections::HashSet::new();
    for (path, page) in [
        ("/ui/", "cluster.html"),
        ("/ui/locks", "locks.html"),
        ("/ui/locks/orders/42", "locks.html"),
        ("/ui/rates", "rates.html"),
    ] {
        let a = get(port, path).await;
        assert_eq!(a.status, 200, "{path}");
        assert_eq!(a.header("content-type"), "text/html; charset=utf-8", "{path}");
        assert_console_headers(&a, path);
        let want = ui::PAGES.iter().find(|p| p.name == page).unwrap();
        assert_eq!(a.body, want.body, "{path}");
        let html = a.text();
        // The CSP forbids inline script and style: none may be written.
        assert!(!html.contains("<script>") && !html.contains(" style=") && !html.contains(" onclick="), "{path}");
        let refs = referenced(&html);
        assert!(
            refs.iter().any(|r| r.ends_with(".js")) && refs.iter().any(|r| r.ends_with(".css")),
            "{path}: {refs:?}"
        );
        for r in refs {
            let asset = get(port, &r).await;
            assert_eq!(asset.status, 200, "{r} (from {path})");
            assert_eq!(asset.header("content-type"), content_type_for(&r), "{r}");
            assert_console_headers(&asset, &r);
            let file =
                std::fs::read(format!("{}/ui/{}", env!("CARGO_MANIFEST_DIR"), &r["/ui/static/".len()..])).unwrap();
            assert_eq!(asset.body, file, "{r} is not the file on disk");
            seen.insert(r);
        }
    }
    // Every embedded file is used by some page, and every file of ui/ is embedded.
    for a in ui::STATIC {
        assert!(seen.contains(&format!("/ui/static/{}", a.name)), "{} is embedded but no page uses it", a.name);
        assert_eq!(a.content_type, content_type_for(a.name));
    }
    for entry in std::fs::read_dir(format!("{}/ui", env!("CARGO_MANIFEST_DIR"))).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let embedded = ui::STATIC.iter().chain(ui::PAGES).any(|a| a.name == name);
        assert!(embedded, "ui/{name} is not embedded");
    }
}

#[tokio::test]
async fn unknown_paths_are_404_with_the_same_headers_and_ui_redirects() {
    let (port, _m) = start().await;
    for path in ["/ui/nope", "/ui/static/nope.js", "/ui/static/../Cargo.toml", "/ui/static/", "/ui/api/nope", "/uix"] {
        let a = get(port, path).await;
        assert_eq!(a.status, 404, "{path}");
        if path.starts_with("/ui/") {
            assert_console_headers(&a, path);
        }
    }
    let a = get(port, "/ui").await;
    assert_eq!((a.status, a.header("location")), (308, "/ui/"));
}

#[tokio::test]
async fn the_feeds_the_pages_read_answer_json() {
    let (port, _m) = start().await;
    // What the scripts fetch: /status, /ui/api/locks/<key>, /ui/api/series, /ui/api/contended.
    let js: String = ui::STATIC.iter().map(|a| String::from_utf8_lossy(a.body).into_owned()).collect();
    for path in ["'/status'", "'/ui/api/locks/'", "'/ui/api/series'", "'/ui/api/contended?n=10'"] {
        assert!(js.contains(path), "no script fetches {path}");
    }
    for path in ["/status", "/locks/a", "/ui/api/locks/a/b", "/ui/api/series", "/ui/api/contended?n=10"] {
        let a = get(port, path).await;
        assert_eq!(a.status, 200, "{path}: {}", a.text());
        assert!(a.header("content-type").starts_with("application/json"), "{path}");
        serde_json::from_slice::<serde_json::Value>(&a.body).unwrap();
    }
    let s: serde_json::Value = serde_json::from_slice(&get(port, "/ui/api/series").await.body).unwrap();
    assert_eq!((s["interval_ms"].as_u64(), s["capacity"].as_u64()), (Some(1000), Some(series::CAPACITY as u64)));
    let a = get(port, "/ui/api/locks/a%20b").await;
    assert_eq!(a.status, 400, "{}", a.text());
    for bad in ["n=abc", "n=-1", "n=101"] {
        let a = get(port, &format!("/ui/api/contended?{bad}")).await;
        assert_eq!(a.status, 400, "{bad}");
        assert!(a.text().contains("whole number"), "{bad}: {}", a.text());
    }
}

#[tokio::test]
async fn contended_lists_the_keys_with_the_most_waiters() {
    let (port, m) = start().await;
    let (tx, mut rx) = mpsc::channel(64);
    m.send(ManagerRequest::Register { conn: ConnId(1), tx, client: "127.0.0.1:5".into() }).await.unwrap();
    let mut id = 0;
    let mut acquire = |key: &str, owner: &str| {
        id += 1;
        let request = crate::leader::Request::Acquire {
            id: RequestId(id),
            key: Key::new(key.to_owned()).unwrap(),
            kind: crate::locks::GrantKind::Exclusive,
            owner: ticketing_proto::Owner::new(owner.to_owned()).unwrap(),
            wait: 30,
            lease: 30,
            read_at: std::time::Instant::now(),
            principal: None,
        };
        ManagerRequest::Request { conn: ConnId(1), request }
    };
    for (key, owner) in [("a", "h1"), ("b", "h2"), ("a", "w1"), ("a", "w2"), ("b", "w3")] {
        m.send(acquire(key, owner)).await.unwrap();
    }
    // The two holders are granted; the waiters stay queued.
    for _ in 0..2 {
        let d = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
        assert!(matches!(d, Delivery::Reply { frame: ticketing_proto::ServerFrame::Granted { .. }, .. }), "{d:?}");
    }
    let want = serde_json::json!({"keys": [{"key": "a", "waiters": 2}, {"key": "b", "waiters": 1}]});
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let a = get(port, "/ui/api/contended?n=5").await;
        let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        if body == want {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "contended: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let one: serde_json::Value = serde_json::from_slice(&get(port, "/ui/api/contended?n=1").await.body).unwrap();
    assert_eq!(one, serde_json::json!({"keys": [{"key": "a", "waiters": 2}]}));
    // The connection leaves: its waiters leave the ranking.
    m.send(ManagerRequest::Disconnected { conn: ConnId(1) }).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let body: serde_json::Value = serde_json::from_slice(&get(port, "/ui/api/contended").await.body).unwrap();
        if body == serde_json::json!({"keys": []}) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "contended after leaving: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `/readyz`'s rule: a serving node is ready, a follower only while it hears
/// a leader, anything else says why not.
#[test]
fn readiness_says_what_a_node_does_or_why_it_is_not_ready() {
    let follower = |hears_leader| Some(ClusterReadiness { is_leader: false, hears_leader });
    assert!(readiness(true, true, None, None).is_ok());
    assert!(readiness(true, true, None, follower(false)).is_ok());
    assert_eq!(readiness(false, true, None, None), Err("not ready: not serving".into()));
    let ok = readiness(false, true, Some("10.0.0.1:5225"), follower(true)).unwrap();
    assert!(ok.contains("follower") && ok.contains("10.0.0.1:5225"), "{ok}");
    assert!(readiness(false, true, Some("10.0.0.1:5225"), follower(false)).unwrap_err().contains("no word"));
    assert!(readiness(false, true, None, follower(true)).unwrap_err().contains("no serving leader"));
    assert!(readiness(false, false, None, follower(true)).unwrap_err().contains("fencing domain"));
    let leader = Some(ClusterReadiness { is_leader: true, hears_leader: false });
    assert!(readiness(false, true, None, leader).unwrap_err().contains("live quorum"));
}
