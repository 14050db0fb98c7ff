//! `/healthz` and `/readyz` (docs/deployment.md, "Health"): a standalone
//! server is live and ready; in a 3-node cluster every node is ready once a
//! leader serves, a node left alone without a majority stops being ready
//! (and says why) while it stays live, and `ticketing_ready` follows.

mod cluster_common;
use cluster_common::*;
use std::time::Instant;
use ticketing_testkit::http_get_any;

/// `GET path` on an admin port: (status code, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_any(port, path)
}

/// Waits until `GET /readyz` on `port` answers `code`; the body.
fn wait_ready(port: u16, code: u16, limit: std::time::Duration) -> Option<String> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if let Some((c, body)) = get(port, "/readyz") {
            if c == code {
                return Some(body);
            }
        }
        std::thread::sleep(ms(50));
    }
    None
}

#[test]
fn a_node_is_ready_while_it_serves_or_hears_a_leader_and_live_throughout() {
    let mut c = Cluster::new("health", 3);
    c.start_all();
    let leader = c.wait_serving(secs(30)).expect("a leader");
    for i in 0..3 {
        let body = wait_ready(c.nodes[i].admin, 200, secs(10)).unwrap_or_else(|| panic!("node {i} ready"));
        let what = if i == leader { "serving clients" } else { "follower of the serving leader" };
        assert!(body.contains(what), "node {i}: {body}");
        assert_eq!(get(c.nodes[i].admin, "/healthz"), Some((200, "ok\n".into())));
    }
    let metrics = http_get(c.nodes[leader].admin, "/metrics").unwrap();
    assert!(metrics.contains("\nticketing_ready 1\n"), "{metrics}");
    assert!(metrics.contains("\nticketing_start_time_seconds "), "{metrics}");

    // Two of three gone: the survivor can neither serve nor hear a leader.
    let survivor = (leader + 1) % 3;
    for i in 0..3 {
        if i != survivor {
            c.kill(i);
        }
    }
    let body = wait_ready(c.nodes[survivor].admin, 503, secs(15)).expect("the survivor stops being ready");
    assert!(body.starts_with("not ready: "), "{body}");
    assert_eq!(get(c.nodes[survivor].admin, "/healthz"), Some((200, "ok\n".into())), "still live");
    let metrics = http_get(c.nodes[survivor].admin, "/metrics").unwrap();
    assert!(metrics.contains("\nticketing_ready 0\n"), "{metrics}");
}

#[test]
fn a_node_outside_any_domain_is_live_and_not_ready() {
    let mut c = Cluster::new("health-alone", 3);
    c.start(0, false);
    let body = wait_ready(c.nodes[0].admin, 503, secs(15)).expect("not ready");
    assert!(body.contains("fencing domain"), "{body}");
    assert_eq!(get(c.nodes[0].admin, "/healthz"), Some((200, "ok\n".into())));
}
