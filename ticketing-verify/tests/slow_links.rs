//! Regression test of a server availability bug found by the `slow-links`
//! fault (docs/verification.md, "Findings"; fixed in
//! `ticketing-server/src/cluster/late.rs`, docs/cluster-protocol.md "Slow
//! peer links").
//!
//! With the default `--heartbeat-ms 50`, a steady 40 ms delay each way on
//! every peer link (80 ms round trip, far below the 1.2 s election timeout)
//! stopped every grant for as long as it lasted: openraft 0.9 wraps each
//! AppendEntries in a timeout of `heartbeat_interval`, so every replication
//! RPC timed out, nothing committed, and the quorum-ack gate took the leader
//! out of service — while the followers, which did receive the heartbeats,
//! never elected another one. A cluster whose peers answer within a fraction
//! of the election timeout must keep granting. `REPRO_DELAY_MS=N` sets the
//! one-way delay (150, a 300 ms round trip, passes too).
//!
//! Runs against the server of the test's own profile (`target/debug` or
//! `target/release`), or `$TICKETING_SERVER_BIN`.

use std::path::PathBuf;
use std::time::Duration;

use ticketing_client::TicketBroker;
use ticketing_verify::cluster::Cluster;
use ticketing_verify::proxy::Rule;

fn server_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TICKETING_SERVER_BIN") {
        return p.into();
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or(root.join("target"));
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    target.join(profile).join("ticketing-server")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_keeps_granting_over_an_80ms_round_trip() {
    let bin = server_bin();
    assert!(bin.is_file(), "build the server first (cargo build -p ticketing-server): {}", bin.display());
    let dir = std::env::temp_dir().join(format!("tv-repro-slow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = Cluster::new(3, &bin, &dir, 1).await.unwrap();
    for i in (0..3).rev() {
        c.start(i, i == 0).unwrap();
    }
    assert!(c.wait_leader(Duration::from_secs(40)).await.is_some(), "no leader (logs in {})", dir.display());
    let broker = TicketBroker::builder(c.client_addrs().iter().map(String::as_str)).connect().await.unwrap();
    assert!(broker.wait_ready(Duration::from_secs(10)).await);
    let t = broker.acquire("k", Duration::from_secs(5), Duration::from_secs(2), Duration::ZERO).await;
    assert!(matches!(t, Ok(Some(_))), "no grant before the delay: {t:?}");
    drop(t);

    let d: u64 = std::env::var("REPRO_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    c.net.set_all(Rule::Delay { min_ms: d, max_ms: d });
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut grants = 0;
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        match broker.acquire("k", Duration::from_secs(5), Duration::from_secs(2), Duration::ZERO).await {
            Ok(Some(t)) => {
                grants += 1;
                let _ = t.release().await;
            }
            other => outcomes.push(format!("{other:?}")),
        }
    }
    let serving = c.serving_leaders().await;
    broker.close().await;
    c.kill_all();
    assert!(
        grants > 0,
        "no grant in 4 acquires (5 s wait each) over a {} ms peer round trip; outcomes {outcomes:?}; \
         serving leaders {serving:?}; logs in {}",
        2 * d,
        dir.display()
    );
}
