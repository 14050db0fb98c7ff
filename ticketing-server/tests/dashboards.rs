//! The Grafana dashboard (deploy/grafana/ticketing.json) and the Prometheus
//! alert rules (deploy/prometheus/alerts.yml) name only metrics a real
//! cluster node exports on /metrics, and the metrics they lean on carry
//! real values (docs/operating.md, "Prometheus" and "Grafana").

mod cluster_common;
use cluster_common::*;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Every `ticketing_…` identifier in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let b = text.as_bytes();
    let mut i = 0;
    while let Some(pos) = text[i..].find("ticketing_") {
        let start = i + pos;
        let before_ok = start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        let mut end = start;
        while end < b.len() && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_') {
            end += 1;
        }
        if before_ok {
            out.insert(text[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// The sample names of an OpenMetrics text (`name{labels} value` or `name value`).
fn exported(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

fn repo_file(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn dashboard_and_alert_rules_name_only_exported_metrics() {
    let dashboard: serde_json::Value = serde_json::from_str(&repo_file("deploy/grafana/ticketing.json")).unwrap();
    // Every query of the dashboard: the panels' targets and the templating queries.
    let mut queries = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            queries.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["query"]["query"].as_str() {
            queries.push(q.to_owned());
        }
    }
    assert!(queries.len() >= 20, "{} queries", queries.len());
    for q in &queries {
        assert!(!metric_names(q).is_empty(), "a dashboard query names no Ticketing metric: {q}");
    }
    let in_dashboard = metric_names(&queries.join("\n"));
    let alerts = repo_file("deploy/prometheus/alerts.yml");
    let in_alerts = metric_names(&alerts);
    assert!(in_alerts.len() >= 8, "{in_alerts:?}");

    let mut c = Cluster::new("dashboards", 3);
    c.start_all();
    let leader = c.wait_serving(Duration::from_secs(20)).expect("a serving leader");
    // One grant, so the commit histogram has an observation.
    let a = acquire_once(c.nodes[leader].client, "dash", "owner-1", 0, 5);
    assert!(granted_token(&a).is_some(), "{a}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = http_get(c.nodes[leader].admin, "/metrics").expect("/metrics");
        if value(&text, "ticketing_raft_commit_seconds_count").is_some_and(|n| n >= 1.0) {
            break text;
        }
        assert!(Instant::now() < deadline, "no Raft commit observed:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let names = exported(&text);
    for (what, used) in [("deploy/grafana/ticketing.json", &in_dashboard), ("deploy/prometheus/alerts.yml", &in_alerts)]
    {
        let missing: Vec<_> = used.difference(&names).collect();
        assert!(missing.is_empty(), "{what} names metrics /metrics does not export: {missing:?}");
    }
    // What the alerts compare against is really set.
    assert_eq!(value(&text, "ticketing_raft_is_leader"), Some(1.0));
    assert_eq!(value(&text, "ticketing_serving"), Some(1.0));
    assert!(value(&text, "ticketing_raft_election_timeout_seconds").is_some_and(|s| s > 0.0), "{text}");
    assert!(value(&text, "ticketing_max_waiters").is_some_and(|n| n > 0.0), "{text}");
    let age = value(&text, "ticketing_raft_quorum_ack_age_seconds").expect("quorum ack age");
    assert!(age < value(&text, "ticketing_raft_election_timeout_seconds").unwrap(), "a serving leader's ack age {age}");
}
