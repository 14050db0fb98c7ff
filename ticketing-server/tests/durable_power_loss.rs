//! Power loss (docs/deployment.md, "Durability"): every data dir on a
//! faultfs mount (ticketing-testkit/faultfs), which loses every write not
//! fsynced when told, keeps a torn prefix of the last one, or leaves it
//! zero-filled. Writers keep acquiring while the processes are killed and
//! their disks lose power: a durable standalone server, a whole durable
//! 3-node cluster, and its leader alone (while the followers run on). After
//! each restart every answered grant is still held with its token, and new
//! tokens are above every earlier one. The mounts' fsyncs are slowed down
//! (a slow disk), so the processes die with writes not yet fsynced: the
//! leader's own entries among them, which its followers already hold.

mod cluster_common;
use cluster_common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use ticketing_testkit::faultfs::FaultFs;

type Granted = Arc<Mutex<Vec<(String, String, u64)>>>;

/// Writers acquiring fresh keys on `port` (each on its own connection,
/// several requests in flight together), recording every answered grant.
struct Writers {
    granted: Granted,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(port: u16, tag: &str, n: usize) -> Writers {
        let granted: Granted = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|w| {
                let (granted, stop, tag) = (granted.clone(), stop.clone(), tag.to_owned());
                std::thread::spawn(move || {
                    let Ok(mut conn) = hello(port) else { return };
                    let owner = format!("{tag}-w{w}");
                    for i in 0..100_000u64 {
                        if stop.load(Ordering::Acquire) {
                            return;
                        }
                        let key = format!("{tag}-w{w}-{i}");
                        if conn.send(&format!("A {i} {key} {owner} 0 120")).is_err() {
                            return;
                        }
                        match conn.answer(secs(5)) {
                            Ok(line) => match granted_token(&line) {
                                Some(t) => granted.lock().unwrap().push((key, owner.clone(), t)),
                                None => return,
                            },
                            Err(_) => return,
                        }
                    }
                })
            })
            .collect();
        Writers { granted, stop, threads }
    }

    /// Waits (bounded) until `n` grants were answered.
    fn wait_for(&self, n: usize) {
        let end = Instant::now() + secs(30);
        while self.granted.lock().unwrap().len() < n {
            assert!(Instant::now() < end, "only {} grants answered", self.granted.lock().unwrap().len());
            std::thread::sleep(ms(10));
        }
    }

    /// Stops the writers (their server is gone) and returns what was answered.
    fn finish(self) -> Vec<(String, String, u64)> {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            let _ = t.join();
        }
        Arc::try_unwrap(self.granted).unwrap().into_inner().unwrap()
    }
}

fn mount(name: &str) -> FaultFs {
    FaultFs::mount(name).unwrap_or_else(|e| panic!("{e}"))
}

/// One of the three power cuts, now, while the server runs: every unsynced
/// write lost, or its tail torn, or zero-filled. Returns faultfs's answer
/// and the bytes it lost. The caller kills the server, then thaws the disk.
fn lose_power(fs: &FaultFs, how: usize) -> (String, u64) {
    let answer = fs.crash(["", "torn", "zero"][how % 3]).unwrap_or_else(|e| panic!("faultfs: {e}"));
    let lost = answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("lost_bytes="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("faultfs answered {answer}"));
    (answer, lost)
}

/// Each fsync of the mounts takes this much longer (a slow disk).
const SLOW_FSYNC_MS: u64 = 25;

/// Every answered grant is held by its owner with its token.
fn assert_held(port: u16, granted: &[(String, String, u64)], round: &str) {
    for (key, owner, token) in granted {
        let q = query_once(port, key, owner);
        assert!(q.starts_with(&format!("H 1 {key} {owner} {token} ")), "{round}: answered grant {key} lost: {q}");
    }
}

fn new_token_above(port: u16, granted: &[(String, String, u64)], round: &str) {
    let answer = acquire_once(port, &format!("{round}-after"), "o", 0, 5);
    let t = granted_token(&answer).unwrap_or_else(|| panic!("{round}: {answer}"));
    assert!(granted.iter().all(|g| g.2 < t), "{round}: a new token {t} not above every earlier one");
}

const WRITERS: usize = 4;

#[test]
fn a_durable_standalone_server_keeps_every_answer_across_power_losses() {
    let fs = mount("standalone");
    let mut c = Cluster::new("power-standalone", 1);
    c.nodes[0].standalone = true;
    c.nodes[0].args = vec!["--data-dir".into(), fs.path().join("d").display().to_string()];
    fs.delay_fsync(SLOW_FSYNC_MS).unwrap();
    let mut all = Vec::new();
    let mut lost = 0;
    for round in 0..3 {
        c.start(0, false);
        c.wait_serving(secs(20)).unwrap_or_else(|| panic!("round {round}: {}", c.log(0)));
        let port = c.nodes[0].client;
        assert_held(port, &all, &format!("round {round}"));
        let w = Writers::start(port, &format!("s{round}"), WRITERS);
        w.wait_for(40);
        let (what, bytes) = lose_power(&fs, round);
        c.kill(0);
        fs.thaw().unwrap();
        lost += bytes;
        all.extend(w.finish());
        eprintln!("round {round}: {} answered grants so far; faultfs: {what}", all.len());
    }
    assert!(lost > 0, "no power loss found an unsynced write: the test did not reach the window it is for");
    c.start(0, false);
    c.wait_serving(secs(20)).unwrap_or_else(|| panic!("{}", c.log(0)));
    assert_held(c.nodes[0].client, &all, "last");
    new_token_above(c.nodes[0].client, &all, "last");
}

#[test]
fn a_durable_cluster_keeps_every_answer_when_its_leader_or_every_node_loses_power() {
    let name = "power-cluster";
    let mounts: Vec<FaultFs> = (0..3).map(|i| mount(&format!("power-cluster-{i}"))).collect();
    let (mut c, mut leader) = durable_cluster(name, 3, |i| mounts[i].path().join("d"));
    for fs in &mounts {
        fs.delay_fsync(SLOW_FSYNC_MS).unwrap();
    }
    let mut all = Vec::new();
    let mut lost = 0;
    for round in 0..4 {
        let tag = format!("c{round}");
        let w = Writers::start(c.nodes[leader].client, &tag, WRITERS);
        w.wait_for(30);
        if round % 2 == 0 {
            // power-loss-leader: the followers run on and elect.
            let (what, bytes) = lose_power(&mounts[leader], round / 2);
            c.kill(leader);
            mounts[leader].thaw().unwrap();
            lost += bytes;
            all.extend(w.finish());
            eprintln!("round {round}: the leader lost power; faultfs: {what}");
            let next = c.wait_serving(secs(30)).unwrap_or_else(|| panic!("round {round}: no new leader"));
            assert_held(c.nodes[next].client, &all, &tag);
            c.start(leader, false);
            leader = next;
        } else {
            // power-loss-all: every node at once.
            let what: Vec<String> = (0..3)
                .map(|i| {
                    let (what, bytes) = lose_power(&mounts[i], round + i);
                    lost += bytes;
                    what
                })
                .collect();
            for (i, fs) in mounts.iter().enumerate() {
                c.kill(i);
                fs.thaw().unwrap();
            }
            all.extend(w.finish());
            eprintln!("round {round}: every node lost power; faultfs: {what:?}");
            for i in 0..3 {
                c.start(i, false);
            }
            leader = c.wait_serving(secs(30)).unwrap_or_else(|| panic!("round {round}: no leader after restart"));
        }
        assert_held(c.nodes[leader].client, &all, &tag);
        for i in 0..3 {
            assert!(c.wait_voter(i, secs(30)), "round {round}: node {i} a voter again: {}", c.log(i));
        }
    }
    new_token_above(c.nodes[leader].client, &all, "last");
    eprintln!("{} answered grants checked after 4 power losses ({lost} unsynced bytes lost)", all.len());
    assert!(lost > 0, "no power loss found an unsynced write: the test did not reach the window it is for");
}
