//! Disk faults are fail-stop (docs/deployment.md, "Disk faults"): each data
//! dir on a faultfs mount (ticketing-testkit/faultfs), which makes a write or
//! an fsync fail with the errno it is told. The node whose disk fails logs
//! one line naming the file, answers nothing for the failed record and exits
//! 74; a cluster goes on with the others; the node restarted on its DIR
//! recovers, and no answered grant is lost.

mod cluster_common;
use cluster_common::*;
use std::process::ExitStatus;
use std::time::{Duration, Instant};
use ticketing_testkit::faultfs::FaultFs;

fn mount(name: &str) -> FaultFs {
    FaultFs::mount(name).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits (bounded) for node `i` to exit; its status.
fn wait_exit(c: &mut Cluster, i: usize, limit: Duration) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = c.try_exit(i) {
            c.nodes[i].child = None;
            return status;
        }
        assert!(Instant::now() < end, "node {i} did not exit within {limit:?}: {}", c.log(i));
        std::thread::sleep(ms(20));
    }
}

/// Node `i` exited 74 after one fail-stop line naming a file under `fs`.
fn assert_fail_stop(c: &mut Cluster, i: usize, fs: &FaultFs) {
    let status = wait_exit(c, i, secs(20));
    assert_eq!(status.code(), Some(74), "node {i}: {status:?}: {}", c.log(i));
    let log = c.log(i);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("writing the data dir failed")).collect();
    assert_eq!(lines.len(), 1, "one fail-stop line: {log}");
    assert!(lines[0].contains(&fs.path().display().to_string()), "the line names the file: {}", lines[0]);
}

/// `Q` of every (key, owner, token) on `port` answers `H` with that token.
fn assert_held(port: u16, held: &[(String, String, u64)]) {
    for (key, owner, token) in held {
        let q = query_once(port, key, owner);
        assert!(q.starts_with(&format!("H 1 {key} {owner} {token} ")), "{key} lost: {q}");
    }
}

fn grant(port: u16, key: &str, owner: &str) -> (String, String, u64) {
    let answer = acquire_once(port, key, owner, 0, 120);
    let token = granted_token(&answer).unwrap_or_else(|| panic!("{key}: {answer}"));
    (key.to_owned(), owner.to_owned(), token)
}

#[test]
fn a_standalone_server_stops_on_a_failed_fsync_or_write_and_recovers() {
    for (op, errno) in [("fsync", "EIO"), ("write", "ENOSPC")] {
        let fs = mount(&format!("standalone-{op}"));
        let mut c = Cluster::new(&format!("disk-standalone-{op}"), 1);
        c.nodes[0].standalone = true;
        c.nodes[0].args = vec!["--data-dir".into(), fs.path().join("d").display().to_string()];
        c.start(0, false);
        c.wait_serving(secs(20)).expect("serving");
        let port = c.nodes[0].client;
        let held: Vec<_> = (0..5).map(|i| grant(port, &format!("k{i}"), "o")).collect();

        fs.fail(op, errno).unwrap();
        let doomed = acquire_once(port, "doomed", "o", 0, 120);
        assert!(granted_token(&doomed).is_none(), "{op} {errno}: a failed record was answered: {doomed}");
        assert_fail_stop(&mut c, 0, &fs);

        fs.fail_off().unwrap();
        fs.power_loss().unwrap();
        c.start(0, false);
        c.wait_serving(secs(20)).unwrap_or_else(|| panic!("restarted after {op} {errno}: {}", c.log(0)));
        assert_held(port, &held);
        assert_eq!(query_once(port, "doomed", "o"), "N 1 doomed", "the failed record never reached the disk");
        let (_, _, t) = grant(port, "after", "o");
        assert!(held.iter().all(|h| h.2 < t), "tokens keep increasing");
    }
}

#[test]
fn a_cluster_goes_on_when_the_leaders_then_a_followers_disk_fails() {
    let name = "disk-cluster";
    let mounts: Vec<FaultFs> = (0..3).map(|i| mount(&format!("cluster-{i}"))).collect();
    let (mut c, leader) = durable_cluster(name, 3, |i| mounts[i].path().join("d"));
    let mut held: Vec<_> = (0..3).map(|i| grant(c.nodes[leader].client, &format!("k{i}"), "o")).collect();

    // The leader's fsync fails: it stops; the other two elect and serve.
    mounts[leader].fail("fsync", "EIO").unwrap();
    let doomed = acquire_once(c.nodes[leader].client, "doomed", "o", 0, 120);
    assert!(granted_token(&doomed).is_none(), "answered a grant whose fsync failed: {doomed}");
    assert_fail_stop(&mut c, leader, &mounts[leader]);
    let next = c.wait_serving(secs(30)).expect("a new leader");
    assert_held(c.nodes[next].client, &held);
    held.push(grant(c.nodes[next].client, "k3", "o"));

    // Restarted on its DIR after a power loss, it rejoins as itself.
    mounts[leader].fail_off().unwrap();
    mounts[leader].power_loss().unwrap();
    c.start(leader, false);
    assert!(c.wait_voter(leader, secs(30)), "the old leader rejoins: {}", c.log(leader));

    // A follower's write fails on the next append: it stops, the leader and
    // the other node are still a majority.
    let follower = (0..3).find(|&i| i != next && i != leader).expect("a follower");
    mounts[follower].fail("write", "EIO").unwrap();
    held.push(grant(c.nodes[next].client, "k4", "o"));
    assert_fail_stop(&mut c, follower, &mounts[follower]);
    held.push(grant(c.nodes[next].client, "k5", "o"));

    mounts[follower].fail_off().unwrap();
    mounts[follower].power_loss().unwrap();
    c.start(follower, false);
    assert!(c.wait_voter(follower, secs(30)), "the follower rejoins: {}", c.log(follower));
    let now = c.wait_serving(secs(30)).expect("a leader");
    assert_held(c.nodes[now].client, &held);
    let (_, _, t) = grant(c.nodes[now].client, "after", "o");
    assert!(held.iter().all(|h| h.2 < t), "tokens keep increasing");
}
