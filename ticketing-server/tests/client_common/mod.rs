//! Shared helpers of the end-to-end tests of the real Rust client against a
//! standalone server process (`client_*.rs`). Every wait is bounded.
#![allow(dead_code)]

use crate::cluster_common::{self, ms, secs, within};
use std::time::{Duration, Instant};
use ticketing_client::{Ticket, TicketBroker};

/// A broker for `addr` that has a ready connection.
pub async fn ready_broker(addr: &str) -> TicketBroker {
    let b = within(secs(10), "connect", TicketBroker::connect(addr)).await.expect("connect");
    assert!(within(secs(10), "wait_ready", b.wait_ready(secs(5))).await, "broker not ready");
    b
}

/// Acquires and expects a ticket.
pub async fn grab(b: &TicketBroker, key: &str, wait: u64, lease: u64) -> Ticket {
    let r = within(secs(wait + 10), "acquire", b.acquire(key, secs(wait), secs(lease), Duration::ZERO)).await;
    match r {
        Ok(Some(t)) => t,
        other => panic!("acquire {key}: expected a ticket, got {other:?}"),
    }
}

/// Waiters queued on `key` according to the admin endpoint.
pub fn waiters(admin: u16, key: &str) -> Option<u64> {
    let body = cluster_common::http_get(admin, &format!("/locks/{key}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["waiters"].as_array().map(|w| w.len() as u64)
}

/// Polls the admin endpoint until `key` has `n` waiters (bounded).
pub async fn wait_waiters(admin: u16, key: &str, n: u64) {
    let end = Instant::now() + secs(10);
    loop {
        let a = admin;
        let k = key.to_owned();
        let got = tokio::task::spawn_blocking(move || waiters(a, &k)).await.unwrap();
        if got == Some(n) {
            return;
        }
        assert!(Instant::now() < end, "key {key}: {got:?} waiters, expected {n}");
        tokio::time::sleep(ms(20)).await;
    }
}

pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

/// A gauge from the admin `/metrics` text.
pub fn gauge(admin: u16, name: &str) -> Option<i64> {
    ticketing_testkit::metric(admin, name).map(|v| v as i64)
}

/// Polls a gauge until it equals `want` (bounded); false on timeout.
pub async fn gauge_becomes(admin: u16, name: &'static str, want: i64, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    loop {
        if tokio::task::spawn_blocking(move || gauge(admin, name)).await.unwrap() == Some(want) {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(ms(50)).await;
    }
}
