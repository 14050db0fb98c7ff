//! End to end: the real Rust client (`ticketing-client`) against a real
//! 3-node cluster (separate processes on loopback). Every wait is bounded.

mod cluster_common;

use cluster_common::{ms, secs, within, Cluster};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use ticketing_client::{Error, TicketBroker};

/// Starts a 3-node cluster and waits until it has one leader and three voters.
async fn formed(name: &str) -> (Cluster, usize) {
    tokio::task::spawn_blocking({
        let name = name.to_owned();
        move || {
            let mut c = Cluster::new(&name, 3);
            c.start_all();
            let leader = c.wait_leader(secs(20)).expect("a leader");
            for i in 0..3 {
                assert!(c.wait_voter(i, secs(10)), "node {i} is not a voter");
            }
            (c, leader)
        }
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn broker_built_before_the_cluster_exists_gets_ready_by_itself() {
    let mut c = Cluster::new("client-early", 3);
    let addrs: Vec<String> = (0..3).map(|i| c.nodes[i].client_addr()).collect();
    // Nothing listens yet: connection refused, then `E not_active` while the
    // domain forms; the broker keeps trying on its own.
    let b = TicketBroker::builder(addrs).build().unwrap();
    let r = within(secs(10), "acquire with no server", b.acquire("early", secs(1), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
    let c = tokio::task::spawn_blocking(move || {
        c.start_all();
        c
    })
    .await
    .unwrap();
    let start = Instant::now();
    assert!(within(secs(30), "wait_ready", b.wait_ready(secs(25))).await, "never ready");
    println!("ready {:?} after the nodes were started", start.elapsed());
    let t = match within(secs(10), "acquire", b.acquire("early", secs(2), secs(5), Duration::ZERO)).await {
        Ok(Some(t)) => t,
        r => panic!("{r:?}"),
    };
    assert_eq!(t.release().await, Ok(true));
    b.close().await;
    drop(c);
}

#[tokio::test]
async fn broker_with_all_addresses_goes_through_the_leader() {
    let (c, leader) = formed("client-route").await;
    let leader_addr = c.nodes[leader].client_addr();
    // Followers first in the list: routing must still pick the leader.
    let mut addrs: Vec<String> = (0..3).filter(|&i| i != leader).map(|i| c.nodes[i].client_addr()).collect();
    addrs.push(leader_addr.clone());
    let b = TicketBroker::builder(addrs.clone()).build().unwrap();
    assert!(within(secs(15), "wait_ready", b.wait_ready(secs(10))).await, "not ready");
    let st = within(secs(5), "status", b.status()).await.unwrap();
    assert_eq!(st.leader.as_deref(), Some(leader_addr.as_str()), "{st:?}");

    let mut last = 0;
    for i in 0..20 {
        let key = format!("route{}", i % 3);
        let t = match within(secs(10), "acquire", b.acquire(&key, secs(2), secs(5), Duration::ZERO)).await {
            Ok(Some(t)) => t,
            r => panic!("cycle {i}: {r:?}"),
        };
        assert!(t.token() > last, "token {} after {last}", t.token());
        last = t.token();
        assert_eq!(within(secs(7), "release", t.release()).await, Ok(true), "cycle {i}");
    }

    // A broker that only knows followers never sends them a request: it
    // stays unready and an acquire is Unavailable (nothing sent).
    let f: Vec<String> = (0..3).filter(|&i| i != leader).map(|i| c.nodes[i].client_addr()).collect();
    let fb = TicketBroker::builder(f).build().unwrap();
    assert!(!within(secs(5), "wait_ready followers", fb.wait_ready(secs(2))).await);
    let r = within(secs(8), "acquire via followers", fb.acquire("route0", secs(1), secs(5), Duration::ZERO)).await;
    assert_eq!(r.map(|t| t.is_some()), Err(Error::Unavailable));
    fb.close().await;
    b.close().await;
    drop(c);
}

/// One grant as seen by a worker.
#[derive(Debug, Clone, Copy)]
struct Seen {
    started: Instant,
    granted: Instant,
    token: u64,
}

/// Workers looping acquire → short critical section → release on a few
/// keys, checking mutual exclusion (a flag per key) and per-key token order.
struct Workload {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    outcomes: Arc<Mutex<BTreeMap<String, u64>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Workload {
    fn start(b: &TicketBroker, prefix: &str, keys: usize, workers: usize) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Arc<Vec<AtomicBool>> = Arc::new((0..keys).map(|_| AtomicBool::new(false)).collect());
        let last: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let outcomes: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let mut tasks = Vec::new();
        for w in 0..workers {
            let (b, stop, busy, last, seen, outcomes) =
                (b.clone(), stop.clone(), busy.clone(), last.clone(), seen.clone(), outcomes.clone());
            let prefix = prefix.to_owned();
            tasks.push(tokio::spawn(async move {
                let mut n = 0usize;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let k = (w + n) % keys;
                    let key = format!("{prefix}{k}");
                    let started = Instant::now();
                    let r = b.acquire(&key, secs(3), secs(3), Duration::ZERO).await;
                    let what = match r {
                        Ok(Some(t)) => {
                            let granted = Instant::now();
                            assert!(!busy[k].swap(true, Ordering::SeqCst), "{key} granted to two holders at once");
                            let prev = last[k].swap(t.token(), Ordering::SeqCst);
                            assert!(t.token() > prev, "{key}: token {} after {prev}", t.token());
                            seen.lock().unwrap().push(Seen { started, granted, token: t.token() });
                            // The critical section (not a synchronisation): a second holder would be seen.
                            tokio::time::sleep(ms(5)).await;
                            assert!(!t.is_expired(), "critical section outlived the ticket");
                            busy[k].store(false, Ordering::SeqCst);
                            let rel = Instant::now();
                            match t.release().await {
                                Ok(true) => "ticket, released",
                                Ok(false) => {
                                    eprintln!(
                                        "{key}: release of token {} -> false; granted {:?} ago, release took {:?}",
                                        t.token(),
                                        granted.elapsed(),
                                        rel.elapsed()
                                    );
                                    "ticket, release false"
                                }
                                Err(Error::ReleaseUnconfirmed) => "ticket, release unconfirmed",
                                Err(e) => panic!("release: {e:?}"),
                            }
                        }
                        Ok(None) => "none",
                        Err(e @ (Error::Indeterminate | Error::Unavailable)) => {
                            tokio::time::sleep(ms(20)).await;
                            e.code()
                        }
                        Err(e) => panic!("acquire: unexpected {e:?}"),
                    };
                    *outcomes.lock().unwrap().entry(what.to_owned()).or_default() += 1;
                }
            }));
        }
        Workload { stop, seen, outcomes, tasks }
    }

    /// Waits (bounded) for a grant of an acquire started at or after `since`; when it was granted.
    async fn first_grant_since(&self, since: Instant, limit: Duration) -> Instant {
        let end = Instant::now() + limit;
        loop {
            let first = self.seen.lock().unwrap().iter().filter(|s| s.started >= since).map(|s| s.granted).min();
            if let Some(at) = first {
                return at;
            }
            assert!(Instant::now() < end, "no successful acquire within {limit:?}");
            tokio::time::sleep(ms(20)).await;
        }
    }

    /// Waits (bounded) until `n` acquires started at or after `since` were granted.
    async fn grants_since(&self, since: Instant, n: usize, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let got = self.seen.lock().unwrap().iter().filter(|s| s.started >= since).count();
            if got >= n {
                return;
            }
            assert!(Instant::now() < end, "{got} of {n} acquires granted within {limit:?}");
            tokio::time::sleep(ms(20)).await;
        }
    }

    /// Stops the workers (bounded) and returns every grant seen.
    async fn finish(self) -> Vec<Seen> {
        self.stop.store(true, Ordering::SeqCst);
        within(secs(20), "workers", async {
            for t in self.tasks {
                t.await.unwrap();
            }
        })
        .await;
        println!("outcomes: {:?}", self.outcomes.lock().unwrap());
        let seen = self.seen.lock().unwrap().clone();
        seen
    }
}

/// Tokens of acquires started after `after` are all above those granted before `before`.
fn tokens_continue(seen: &[Seen], before: Instant, after: Instant) {
    let pre: Vec<&Seen> = seen.iter().filter(|s| s.granted < before).collect();
    let post: Vec<&Seen> = seen.iter().filter(|s| s.started >= after).collect();
    assert!(!pre.is_empty(), "no grants before");
    assert!(post.len() >= 2, "only {} grants after", post.len());
    let max_pre = pre.iter().map(|s| s.token).max().unwrap();
    let min_post = post.iter().map(|s| s.token).min().unwrap();
    assert!(min_post > max_pre, "token {min_post} after the failover is not above {max_pre} from before");
}

/// `kill -9` of node `i` (blocking part off the runtime); when it is gone.
async fn kill(c: Cluster, i: usize) -> (Cluster, Instant) {
    tokio::task::spawn_blocking(move || {
        let mut c = c;
        c.kill(i);
        (c, Instant::now())
    })
    .await
    .unwrap()
}

fn signal(c: &Cluster, i: usize, sig: &str) {
    let pid = c.nodes[i].child.as_ref().expect("running").id();
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test]
async fn leader_kill_during_a_workload() {
    let (c, leader) = formed("client-kill").await;
    let addrs: Vec<String> = (0..3).map(|i| c.nodes[i].client_addr()).collect();
    let b = TicketBroker::builder(addrs).build().unwrap();
    assert!(within(secs(15), "wait_ready", b.wait_ready(secs(10))).await);
    let began = Instant::now();
    let work = Workload::start(&b, "kill", 2, 4);
    // The workload is granting before the kill.
    work.grants_since(began, 4, secs(20)).await;
    let before_kill = Instant::now();
    let (c, kill_done) = kill(c, leader).await;
    let first = work.first_grant_since(kill_done, secs(20)).await;
    println!("kill -9 of the leader -> first successful acquire after {:.3} s", (first - kill_done).as_secs_f64());
    // Keep the workload running a little on the new leader.
    work.grants_since(kill_done, 4, secs(20)).await;

    // Round 2: the killed node comes back (new NodeId, joins as a voter);
    // then the current leader is killed too. The broker reconnects to the
    // restarted node by itself and follows the leadership again.
    let (c, leader2) = tokio::task::spawn_blocking(move || {
        let mut c = c;
        c.start(leader, false);
        assert!(c.wait_voter(leader, secs(20)), "restarted node rejoins");
        let l = c.wait_leader(secs(10)).expect("a leader");
        (c, l)
    })
    .await
    .unwrap();
    assert_ne!(leader2, leader);
    let before_kill2 = Instant::now();
    let (c, kill2_done) = kill(c, leader2).await;
    let first = work.first_grant_since(kill2_done, secs(20)).await;
    println!("second kill -9 -> first successful acquire after {:.3} s", (first - kill2_done).as_secs_f64());
    work.grants_since(kill2_done, 4, secs(20)).await;
    let seen = work.finish().await;
    tokens_continue(&seen, before_kill, kill_done);
    tokens_continue(&seen, before_kill2, kill2_done);
    b.close().await;
    drop(c);
}

#[tokio::test]
async fn a_ticket_is_released_across_a_failover() {
    let (c, leader) = formed("client-release").await;
    let addrs: Vec<String> = (0..3).map(|i| c.nodes[i].client_addr()).collect();
    let b = TicketBroker::builder(addrs.clone()).build().unwrap();
    let other = TicketBroker::builder(addrs).build().unwrap();
    assert!(within(secs(15), "wait_ready", b.wait_ready(secs(10))).await);
    assert!(within(secs(15), "wait_ready", other.wait_ready(secs(10))).await);
    let t = match within(secs(10), "acquire", b.acquire("moved", Duration::ZERO, secs(20), Duration::ZERO)).await {
        Ok(Some(t)) => t,
        r => panic!("{r:?}"),
    };
    let short = match within(secs(10), "acquire", b.acquire("restarted", Duration::ZERO, secs(3), Duration::ZERO)).await
    {
        Ok(Some(t)) => t,
        r => panic!("{r:?}"),
    };
    let short_granted = Instant::now();
    let (c, killed) = kill(c, leader).await;
    // The lane retries within 5 s of the call; a new leader is there in ~2.5 s.
    let r = within(secs(10), "release across the failover", t.release()).await;
    println!("release across the failover: {r:?} after {:?}", killed.elapsed());
    assert_eq!(r, Ok(true));
    // Released (not waiting for the new leader's fresh 20 s lease).
    let r = within(secs(10), "acquire", other.acquire("moved", secs(2), secs(5), Duration::ZERO)).await;
    match r {
        Ok(Some(t2)) => {
            assert!(t2.token() > t.token());
            assert_eq!(t2.release().await, Ok(true));
        }
        r => panic!("key of a released ticket: {r:?}"),
    }
    // Domain time (docs/protocol.md, "Domain time"): the new leader keeps the
    // 3 s lease until `granted_dt + 3000` in domain time, never restarting it
    // at full length; its `/locks` view shows that end.
    let short_token = short.token();
    let (c, lock) = tokio::task::spawn_blocking(move || {
        let serving = c.wait_serving(secs(20)).expect("a serving leader after the failover");
        let end = Instant::now() + secs(10);
        loop {
            let body = cluster_common::http_get(c.nodes[serving].admin, "/locks/restarted");
            if let Some(v) = body.and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok()) {
                if v["holder"].is_object() {
                    break (c, v);
                }
            }
            assert!(Instant::now() < end, "no /locks/restarted view with its holder on the new leader");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap();
    let holder = &lock["holder"];
    assert_eq!(holder["token"].as_u64(), Some(short_token), "{lock}");
    let granted_dt = holder["granted_dt"].as_u64().expect("granted_dt");
    let now_dt = lock["domain_time_ms"].as_u64().expect("domain_time_ms");
    let remaining = holder["remaining_ms"].as_u64().expect("remaining_ms");
    assert!(now_dt >= granted_dt, "{lock}");
    let lease_end = now_dt + remaining;
    assert!(
        lease_end.abs_diff(granted_dt + 3000) <= 50,
        "the lease ends at domain time {lease_end}, not granted_dt + 3000 = {}: {lock}",
        granted_dt + 3000
    );
    // That end is never earlier than the original one (the new leader's
    // domain time starts at the largest applied dt): 3.6 s after the grant,
    // past the client's conservative deadline, the lock is still held.
    tokio::time::sleep_until((short_granted + ms(3600)).into()).await;
    assert!(short.is_expired());
    let r = within(secs(10), "release after the original lease end", short.release()).await;
    assert_eq!(r, Ok(true), "the new leader ended the lease before granted_dt + 3 s in domain time");
    b.close().await;
    other.close().await;
    drop(c);
}

#[tokio::test]
async fn frozen_leader_during_a_workload() {
    // SIGSTOP of the leader: its sockets stay open but nothing answers. The
    // followers elect a new leader; the client's keepalive ends the frozen
    // sessions; after SIGCONT the old leader must not hand out anything.
    let (c, leader) = formed("client-frozen").await;
    let addrs: Vec<String> = (0..3).map(|i| c.nodes[i].client_addr()).collect();
    let b = TicketBroker::builder(addrs).build().unwrap();
    assert!(within(secs(15), "wait_ready", b.wait_ready(secs(10))).await);
    let began = Instant::now();
    let work = Workload::start(&b, "frozen", 2, 4);
    work.grants_since(began, 4, secs(20)).await;
    let before = Instant::now();
    signal(&c, leader, "-STOP");
    let stopped = Instant::now();
    // A fresh acquire (own key) every 100 ms: how soon does a NEW request reach the new leader?
    let probes: Vec<_> = (0..60)
        .map(|i| {
            let b = b.clone();
            tokio::spawn(async move {
                tokio::time::sleep(ms(100 * i)).await;
                let t0 = Instant::now();
                let r = b.acquire(&format!("probe{i}"), secs(1), secs(3), Duration::ZERO).await;
                match r {
                    Ok(Some(t)) => {
                        let _ = t.release().await;
                        Some(t0)
                    }
                    _ => None,
                }
            })
        })
        .collect();
    let first = work.first_grant_since(stopped, secs(25)).await;
    println!("SIGSTOP of the leader -> first successful acquire after {:.3} s", (first - stopped).as_secs_f64());
    let mut ok = Vec::new();
    for p in probes {
        if let Some(t0) = within(secs(25), "probe", p).await.unwrap() {
            ok.push(t0);
        }
    }
    let probe = ok.into_iter().min().expect("some probe acquired");
    println!("SIGSTOP of the leader -> first probe acquire started {:.3} s after", (probe - stopped).as_secs_f64());
    signal(&c, leader, "-CONT");
    let resumed = Instant::now();
    // Grants go on after the old leader is back (and it hands out nothing: the workers check).
    work.grants_since(resumed, 2, secs(20)).await;
    let seen = work.finish().await;
    tokens_continue(&seen, before, stopped);
    let after_resume = seen.iter().filter(|s| s.started >= resumed).count();
    assert!(after_resume >= 2, "only {after_resume} grants after the old leader came back");
    b.close().await;
    drop(c);
}

#[tokio::test]
async fn leader_sigterm_during_a_workload() {
    // A graceful stop of the leader: it answers what it can, sends
    // `E shutting_down`, exits 0; the broker moves to the new leader.
    let (mut c, leader) = formed("client-term").await;
    let addrs: Vec<String> = (0..3).map(|i| c.nodes[i].client_addr()).collect();
    let b = TicketBroker::builder(addrs).build().unwrap();
    assert!(within(secs(15), "wait_ready", b.wait_ready(secs(10))).await);
    let began = Instant::now();
    let work = Workload::start(&b, "term", 2, 4);
    work.grants_since(began, 4, secs(20)).await;
    let before = Instant::now();
    signal(&c, leader, "-TERM");
    let termed = Instant::now();
    let first = work.first_grant_since(termed, secs(25)).await;
    println!("SIGTERM of the leader -> first successful acquire after {:.3} s", (first - termed).as_secs_f64());
    work.grants_since(termed, 4, secs(20)).await;
    let seen = work.finish().await;
    tokens_continue(&seen, before, termed);
    let end = Instant::now() + secs(15);
    let status = loop {
        if let Some(s) = c.try_exit(leader) {
            break s;
        }
        assert!(Instant::now() < end, "the leader did not exit after SIGTERM");
        tokio::time::sleep(ms(50)).await;
    };
    assert!(status.success(), "exit {status:?}");
    b.close().await;
    drop(c);
}
